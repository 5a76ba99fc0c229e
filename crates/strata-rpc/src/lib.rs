//! strata-rpc: devices whose memory and compute live in another process or
//! machine, speaking ggml's RPC wire protocol 7.0.0: strata's client drives
//! ggml's `ggml-rpc-server`, and llama.cpp drives strata's server.
//!
//! Three parts, kept apart:
//! - [`proto`]: message types and their byte encodings (no I/O);
//! - [`server`]: serves a local strata backend to RPC clients, validating
//!   every message before acting on it;
//! - [`client`]: strata's buffer type, buffer, backend, device and device
//!   provider for remote devices named `RPC[host:port]`.
//!
//! The protocol has no authentication: serve on loopback, or on networks
//! you trust.
//!
//! # A graph on a remote device
//!
//! A CPU server on a free loopback port, and a graph computed through it:
//!
//! ```
//! use std::sync::Arc;
//! use strata::backend::{alloc_graph, Registry};
//! use strata::{ops, DType, Graph, Tensor};
//!
//! let (addr, _server) = strata_rpc::server::spawn_loopback_cpu(1)?; // stops when dropped
//! let mut reg = Registry::with_defaults();
//! reg.register(Arc::new(strata_rpc::RpcProvider::new()));
//! let remote = reg.device(&format!("RPC[{addr}]"))?;
//!
//! let x = Tensor::new(DType::F32, &[4])?;
//! let y = ops::sqr(&x)?;
//! let g = Graph::build(&[y.clone()]);
//! let _buffers = alloc_graph(&g, &remote.default_buffer_type())?; // the server's memory
//! x.write_f32(&[1.0, 2.0, 3.0, 4.0])?;
//! remote.init_backend()?.graph_compute(&g)?;
//! assert_eq!(y.to_f32_vec()?, [1.0, 4.0, 9.0, 16.0]);
//! # Ok::<(), strata::Error>(())
//! ```
//!
//! # Stability
//!
//! strata-rpc is at 0.x, as strata is: a new 0.x minor version may change
//! any API. The wire format is ggml's and changes only with its version.
#![warn(missing_docs)]

pub mod client;
pub mod proto;
pub mod server;

pub use client::{ClientOptions, RpcProvider};
pub use server::{Limits, Server, ServerHandle};
