//! Tokenizers (llama.cpp-compatible) and, later, model definitions for strata.
#![warn(missing_docs)]

pub mod tokenizer;

pub use tokenizer::{Tokenizer, TokenizerError, TokenizerParts};
