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
    /// A batch of tokens or a sequence operation was refused; the cache is
    /// unchanged.
    #[error("batch: {0}")]
    Batch(#[from] BatchError),
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

/// Why a batch ([`crate::batch::Batch`]) or a sequence operation of the
/// KV cache was refused. Each names the token, sequence or position.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BatchError {
    /// The batch has no tokens.
    #[error("the batch has no tokens; add at least one")]
    Empty,
    /// A token id is not in the vocabulary.
    #[error(
        "token {index} of the batch is id {token}, out of range for a vocabulary of {n_vocab}"
    )]
    TokenOutOfVocab {
        /// Index in the batch.
        index: usize,
        /// The id.
        token: u32,
        /// Vocabulary size.
        n_vocab: usize,
    },
    /// A token belongs to no sequence.
    #[error("token {index} of the batch belongs to no sequence; give it a sequence id")]
    NoSequence {
        /// Index in the batch.
        index: usize,
    },
    /// A sequence id beyond the context's count.
    #[error(
        "sequence {seq} is beyond the {n_seq_max} sequences this context was made for \
         (ids 0..{n_seq_max}); make the context with more sequences (-np)"
    )]
    SeqOutOfRange {
        /// The id.
        seq: u32,
        /// Sequences of the context.
        n_seq_max: usize,
    },
    /// A position outside `0..n_ctx`.
    #[error("sequence {seq}: position {pos} is outside the context's 0..{n_ctx}; use a larger context (-c)")]
    PosOutOfRange {
        /// The sequence.
        seq: u32,
        /// The position.
        pos: i64,
        /// Context size.
        n_ctx: usize,
    },
    /// A sequence's positions do not continue from what its cells hold.
    #[error(
        "sequence {seq}: position {got} given where {expected} comes next (positions of a \
         sequence must continue its cached ones by 1; remove cached positions with seq_rm first)"
    )]
    PosNotConsecutive {
        /// The sequence.
        seq: u32,
        /// The position that would continue it.
        expected: i64,
        /// The position given.
        got: i64,
    },
    /// Fewer free cells than tokens.
    #[error(
        "the batch needs {needed} cells but only {free} of {size} are free; remove finished \
         sequences (seq_rm) or use a larger context (-c)"
    )]
    NoFreeCells {
        /// Cells the batch needs.
        needed: usize,
        /// Free cells.
        free: usize,
        /// All cells.
        size: usize,
    },
    /// A position shift past the i32 range.
    #[error("sequence {seq}: position {pos} shifted by {delta} overflows; shift by less")]
    ShiftOverflow {
        /// The sequence.
        seq: u32,
        /// The position.
        pos: i32,
        /// The shift.
        delta: i32,
    },
    /// More rows of logits than the context reserved.
    #[error(
        "{wanted} rows of logits in one micro-batch, but the context reserves {reserved}; \
         make it with logits_all or more sequences"
    )]
    TooManyOutputs {
        /// Rows wanted.
        wanted: usize,
        /// Rows reserved.
        reserved: usize,
    },
}

/// A [`ModelError::Metadata`]: what is wrong with the value at `key`.
pub(crate) fn meta(key: &str, msg: impl Into<String>) -> ModelError {
    ModelError::Metadata {
        key: key.to_string(),
        msg: msg.into(),
    }
}

/// Result with a [`ModelError`].
pub type Result<T> = std::result::Result<T, ModelError>;
