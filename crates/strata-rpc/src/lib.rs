//! strata-rpc: devices whose memory and compute live in another process or
//! machine, speaking ggml's RPC wire protocol 7.0.0.
//!
//! Three parts, kept apart:
//! - [`proto`]: message types and their byte encodings (no I/O);
//! - [`server`]: serves a local strata backend to RPC clients, validating
//!   every message before acting on it;
//! - [`client`]: strata's buffer type, buffer, backend, device and device
//!   provider for remote devices named `RPC[host:port]`.
#![warn(missing_docs)]

pub mod client;
pub mod proto;
pub mod server;

pub use client::{ClientOptions, RpcProvider};
pub use server::{Limits, Server, ServerHandle};
