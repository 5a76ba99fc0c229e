//! [`TensorId`]: the process-unique identity of a tensor, and the macro that
//! declares such id newtypes (also the scheduler's `BackendId`).

/// Declares a `Copy + Hash + Ord` newtype over an integer, displayed as that
/// integer, with an accessor returning it.
macro_rules! id_newtype {
    (
        $(#[$meta:meta])*
        $vis:vis struct $name:ident($inner_vis:vis $t:ty);
        $(#[$get_meta:meta])*
        fn $get:ident;
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        $vis struct $name($inner_vis $t);

        impl $name {
            $(#[$get_meta])*
            pub fn $get(self) -> $t {
                self.0
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                std::fmt::Display::fmt(&self.0, f)
            }
        }
    };
}
pub(crate) use id_newtype;

id_newtype! {
    /// A tensor's process-unique id ([`Tensor::id`](super::Tensor::id)):
    /// stable for the tensor's life, the key of every per-tensor map (graph
    /// index, scheduler assignments, planner lifetimes). Views and copies
    /// have their own.
    pub struct TensorId(pub(crate) u64);
    /// The raw number (what unnamed tensors show in their name, and what the
    /// RPC client sends as the wire id).
    fn get;
}

impl From<TensorId> for u64 {
    fn from(id: TensorId) -> u64 {
        id.0
    }
}

#[cfg(test)]
mod tests {
    use crate::{DType, Tensor};

    #[test]
    fn ids_are_unique_and_display_as_their_number() {
        let a = Tensor::new(DType::F32, &[1]).unwrap();
        let b = Tensor::new(DType::F32, &[1]).unwrap();
        assert_ne!(a.id(), b.id());
        assert_eq!(a.id(), a.clone().id());
        assert_eq!(a.id().to_string(), a.id().get().to_string());
        assert_eq!(u64::from(a.id()), a.id().get());
    }
}
