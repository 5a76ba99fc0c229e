//! strata: ggml's execution runtime rebuilt in Rust.
//!
//! Tensors and compute graphs, a backend interface (buffer types, buffers,
//! backends, devices, events, a [`backend::Registry`]), the graph memory
//! planner ([`alloc`]), the scheduler that runs one graph over several
//! backends ([`sched`]) and a multi-threaded CPU backend ([`cpu`]) whose
//! kernels dispatch on the CPU's instruction-set level ([`isa`]); GGUF files
//! ([`gguf`]) and the op suite every device is checked with
//! ([`conformance`]). Language models are in the `strata-models` crate, the
//! GPU and remote (ggml RPC) devices in `strata-gpu` and `strata-rpc`. The
//! repository's ARCHITECTURE.md maps the code.
//!
//! # A graph on the CPU
//!
//! A [`Tensor`] is a handle. Building an op ([`ops`]) checks shapes and
//! types and returns a new tensor without computing anything; a [`Graph`]
//! orders the nodes; an allocator gives every tensor memory; a backend
//! computes.
//!
//! ```
//! use strata::{cpu, ops, DType, Graph, Tensor};
//!
//! // ggml's mul_mat: a is [k, m], b is [k, n], the result [m, n] = a·bᵀ.
//! let a = Tensor::new(DType::F32, &[2, 2])?.with_name("a");
//! let b = Tensor::new(DType::F32, &[2, 2])?.with_name("b");
//! let c = ops::mul_mat(&a, &b)?;
//! let g = Graph::build(&[c.clone()]);
//! let _buffers = cpu::alloc_graph_host(&g)?; // the memory lives as long as these
//! a.write_f32(&[1.0, 2.0, 3.0, 4.0])?;
//! b.write_f32(&[1.0, 0.0, 0.0, 1.0])?;
//! cpu::compute(&g, 2)?;
//! assert_eq!(c.to_f32_vec()?, [1.0, 3.0, 2.0, 4.0]);
//! # Ok::<(), strata::Error>(())
//! ```
//!
//! # Errors, not aborts
//!
//! Where ggml asserts, strata returns an [`Error`] naming what is wrong.
//!
//! ```
//! use strata::error::ShapeProblem;
//! use strata::{ops, DType, Error, Tensor};
//!
//! let a = Tensor::new(DType::F32, &[3, 2])?;
//! let b = Tensor::new(DType::F32, &[4, 2])?;
//! // The rows of a and b differ in length: a typed error with the shapes.
//! let e = ops::mul_mat(&a, &b).unwrap_err();
//! assert!(matches!(
//!     &e,
//!     Error::Shape { op: "MUL_MAT", problem: ShapeProblem::Mismatch { a, b, .. } }
//!         if a.ne == [3, 2, 1, 1] && b.ne == [4, 2, 1, 1]
//! ));
//! // No buffer holds `a` yet.
//! assert!(matches!(a.write_f32(&[0.0; 6]), Err(Error::Unallocated { .. })));
//! # Ok::<(), strata::Error>(())
//! ```
//!
//! # Devices
//!
//! Devices are found by name in a [`backend::Registry`] (`CPU` here;
//! `GPU0` and `RPC[host:port]` once their crates' providers are
//! registered). [`sched::Scheduler`] runs a graph over several of them and
//! copies what each needs; its documentation has an example.
//!
//! ```
//! use strata::backend::{Registry, DeviceType};
//! use strata::{ops, DType, Graph, Tensor};
//!
//! let reg = Registry::with_defaults();
//! let cpu = reg.device("CPU")?;
//! assert_eq!(cpu.device_type(), DeviceType::Cpu);
//! println!("{}", cpu.description()); // the CPU's model and ISA level
//! let mut backend = cpu.init_backend_with("threads=2")?;
//!
//! let x = Tensor::new(DType::F32, &[4])?;
//! let y = ops::sqr(&x)?;
//! let g = Graph::build(&[y.clone()]);
//! let _buffers = strata::backend::alloc_graph(&g, &cpu.default_buffer_type())?;
//! x.write_f32(&[1.0, 2.0, 3.0, 4.0])?;
//! backend.graph_compute(&g)?;
//! assert_eq!(y.to_f32_vec()?, [1.0, 4.0, 9.0, 16.0]);
//! # Ok::<(), strata::Error>(())
//! ```
//!
//! # Stability
//!
//! strata is at 0.x: a new 0.x minor version may change any API (Cargo's
//! rule for 0.x versions), and will say so in its notes. What these pages
//! document is the API. A few modules are public only for the crates' own
//! tests, benchmarks and examples and are hidden from these pages
//! (`quant::simd`, `cpu::vector`, `sched::experiment`); the `testkit`
//! feature holds test doubles, not runtime code.
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
