//! strata: ggml's execution runtime rebuilt in Rust.
#![warn(missing_docs)]

pub mod error;
pub mod gguf;
pub mod tensor;

pub use error::{Error, Result};
pub use tensor::DType;
