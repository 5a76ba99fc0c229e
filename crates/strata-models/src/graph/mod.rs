//! Compute graphs of model architectures: one decoder graph
//! ([`decoder::build`]) for the dense families (llama, qwen2, qwen3, gemma2,
//! gemma3), made of
//! the shared blocks in `blocks` (norm, attention, FFN).

mod blocks;
pub mod decoder;

pub use decoder::{build, Attention, BatchGraph, BatchShape};
