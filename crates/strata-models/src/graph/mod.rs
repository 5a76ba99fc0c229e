//! Compute graphs of model architectures.

pub mod llama;

pub use llama::{build, Attention, BatchGraph, BatchShape};
