//! Compute graphs of model architectures: one decoder graph
//! ([`decoder::build`]) for every family (llama, qwen2, qwen3, qwen3moe,
//! gemma2, gemma3, phi3), made of the shared blocks in `blocks` (norm,
//! attention, FFN, MoE FFN).

mod blocks;
pub mod decoder;

pub use decoder::{build, Attention, BatchGraph, BatchShape};
