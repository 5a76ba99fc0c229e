//! Errors of model loading, graph building, sampling and chat templates.

use crate::tokenizer::TokenizerError;

/// What went wrong while loading or running a model.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// An error of the core runtime (GGUF parsing, tensors, backends, scheduler).
    #[error(transparent)]
    Strata(#[from] strata::Error),
    /// The tokenizer could not be built or used.
    #[error("tokenizer: {0}")]
    Tokenizer(#[from] TokenizerError),
    /// A metadata key is missing or has an unusable value.
    #[error("model metadata '{key}': {msg}")]
    Metadata {
        /// The GGUF key.
        key: String,
        /// What is wrong with it.
        msg: String,
    },
    /// A tensor the architecture needs is missing or has the wrong shape.
    #[error("model tensor '{name}': {msg}")]
    Tensor {
        /// The tensor name.
        name: String,
        /// What is wrong with it.
        msg: String,
    },
    /// A user option is invalid (placement, sampling, context size...).
    #[error("{0}")]
    Invalid(String),
    /// The chat template failed to parse or render (or ran past its limits).
    #[error("{name}: {msg}")]
    Template {
        /// Which template (e.g. the GGUF key it came from).
        name: String,
        /// What went wrong.
        msg: String,
    },
    /// A KL-divergence base file (`--kl-divergence-base`) could not be read
    /// or written, or does not match the model.
    #[error("KL-divergence base file {path}: {msg}")]
    LogitsFile {
        /// The file.
        path: String,
        /// What is wrong with it, and what to do.
        msg: String,
    },
}

/// Result with a [`ModelError`].
pub type Result<T> = std::result::Result<T, ModelError>;
