//! [`TensorId`]: the process-unique identity of a tensor.

use std::fmt;

/// A tensor's process-unique id ([`Tensor::id`](super::Tensor::id)): stable
/// for the tensor's life, the key of every per-tensor map (graph index,
/// scheduler assignments, planner lifetimes). Views and copies have their own.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TensorId(pub(crate) u64);

impl TensorId {
    /// The raw number (what unnamed tensors show in their name, and what the
    /// RPC client sends as the wire id).
    pub fn get(self) -> u64 {
        self.0
    }
}

impl fmt::Display for TensorId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl From<TensorId> for u64 {
    fn from(id: TensorId) -> u64 {
        id.0
    }
}
