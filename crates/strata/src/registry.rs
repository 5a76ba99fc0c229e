//! The default device registry. It names the built-in providers (the CPU),
//! so it lives above both `backend` (which defines [`Registry`] and knows no
//! backend) and `cpu` (which implements a provider): `backend` depends on
//! no backend.

use std::sync::Arc;

use crate::backend::Registry;

impl Registry {
    /// A registry with the built-in providers: the CPU.
    pub fn with_defaults() -> Registry {
        let mut r = Registry::new();
        r.register(Arc::new(crate::cpu::CpuProvider));
        r
    }
}
