//! Model-level pieces for strata: llama.cpp-compatible tokenizers, GGUF model
//! loading with device placement, the llama-family graph, a KV cache, a
//! context that runs graphs through the scheduler, sampling, chat templates,
//! a generation session and model quantization (llama-quantize's job).
#![warn(missing_docs)]

pub mod chat;
pub mod context;
pub mod error;
pub mod gguf;
pub mod graph;
pub mod kld;
pub mod kv;
pub mod model;
pub mod quantize;
pub mod sample;
pub mod session;
pub mod tokenizer;

pub use context::{Context, ContextOptions, DecodeTimings, Logits};
pub use error::{ModelError, Result};
pub use graph::Attention;
pub use model::{LoadOptions, Model, PlacementSpec};
pub use tokenizer::{Tokenizer, TokenizerError, TokenizerParts};
