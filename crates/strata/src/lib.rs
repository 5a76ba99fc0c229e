//! strata: ggml's execution runtime rebuilt in Rust.
//!
//! Tensors and compute graphs, a backend interface (buffer types, buffers,
//! backends, devices, events, registry), the graph memory planner
//! ([`alloc`]) and a multi-threaded CPU backend.
//! See the crate's ARCHITECTURE.md for the layer map.
#![warn(missing_docs)]

pub mod alloc;
pub mod backend;
pub mod blas;
pub mod conformance;
pub mod cpu;
pub mod error;
pub mod gguf;
pub mod graph;
pub mod isa;
pub mod ops;
pub mod quant;
mod registry;
pub mod sched;
pub mod tensor;
#[cfg(feature = "testkit")]
pub mod testkit;

pub use error::{Error, Result, ResultExt};
pub use graph::Graph;
pub use tensor::{DType, Flags, Tensor, TensorId};
