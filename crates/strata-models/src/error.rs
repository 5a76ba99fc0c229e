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
    /// A `-ot` tensor override is not `REGEX=DEVICE`.
    #[error("override '{spec}' must be REGEX=DEVICE, e.g. 'ffn_.*=CPU'")]
    OverrideSyntax {
        /// The override as given.
        spec: String,
    },
    /// A `-ot` tensor override's pattern is not a regular expression.
    #[error("override regex '{regex}': {msg}; fix the pattern (e.g. 'ffn_.*=CPU')")]
    OverrideRegex {
        /// The pattern.
        regex: String,
        /// What the regex parser said.
        msg: String,
    },
    /// A `-ot` tensor override names no device after its `=`.
    #[error("override '{spec}' names no device; give one after '=', e.g. 'ffn_.*=CPU'")]
    OverrideNoDevice {
        /// The override as given.
        spec: String,
    },
    /// A device was given twice.
    #[error("device '{name}' given twice; give each device once")]
    DeviceTwice {
        /// The device's name.
        name: String,
    },
    /// A device named (by a `-ot` override) is not one of the devices in use.
    #[error(
        "device '{name}' is not in use (devices: {}); add it with --device",
        .devices.join(", ")
    )]
    DeviceNotInUse {
        /// The name given.
        name: String,
        /// The devices in use, the CPU last.
        devices: Vec<String>,
    },
    /// `-mg` (the main device, without a layer split) is beyond the devices.
    #[error(
        "-mg {main_device} names no device: {} device(s) given ({}); give an index below {}",
        .devices.len(), .devices.join(", "), .devices.len()
    )]
    MainDeviceOutOfRange {
        /// The index given.
        main_device: usize,
        /// The devices given (the CPU not counted).
        devices: Vec<String>,
    },
    /// `-ts` gives more shares than there are devices.
    #[error(
        "-ts gives {shares} shares for {} device(s) ({}); give one per --device",
        .devices.len(), .devices.join(", ")
    )]
    TooManySplitShares {
        /// How many shares `-ts` gives.
        shares: usize,
        /// The devices given (the CPU not counted).
        devices: Vec<String>,
    },
    /// A `-ts` share is negative or not finite.
    #[error("-ts share {share} must be a finite number >= 0")]
    BadSplitShare {
        /// The share.
        share: f32,
    },
    /// The KV cache of `n_ctx` cells does not fit the address space.
    #[error(
        "a context of {n_ctx} cells needs a KV cache larger than this machine can address; \
         use a smaller -c"
    )]
    KvCacheTooLarge {
        /// The cells asked for.
        n_ctx: usize,
    },
    /// A context was asked for with a batch size or thread count of 0.
    #[error(
        "batch size and thread count must be at least 1 (given {n_batch} and {n_threads}); \
         use -b 1 -t 1 or more"
    )]
    ZeroBatchOrThreads {
        /// The batch size given.
        n_batch: usize,
        /// The thread count given.
        n_threads: usize,
    },
    /// A cache for no sequences, or for more than it can track.
    #[error("{n_seq_max} sequences: a cache holds 1 to {max} (-np)")]
    SeqCount {
        /// The sequences asked for.
        n_seq_max: usize,
        /// The most a cache holds.
        max: usize,
    },
    /// A graph was asked for a batch shape the cache cannot hold (a bug of
    /// the caller, which sizes batches from the cache).
    #[error("bad batch shape {shape:?} for a cache of {n_ctx} cells; split the batch to fit")]
    BatchShape {
        /// The shape asked for.
        shape: crate::graph::BatchShape,
        /// Cells of the cache.
        n_ctx: usize,
    },
    /// A mixture-of-experts layer without its gate experts.
    #[error(
        "layer {layer}: a mixture-of-experts FFN needs ffn_gate_exps \
         (blk.{layer}.ffn_gate_exps.weight); the file is incomplete"
    )]
    MoeWithoutGate {
        /// The layer.
        layer: usize,
    },
    /// `--chat-template` and `--chat-template-file` were both given.
    #[error("--chat-template and --chat-template-file both given: use one")]
    TwoTemplates,
    /// [`crate::Context::truncate`] to more positions than are cached.
    #[error("cannot keep {keep} positions: only {cached} are cached; keep at most {cached}")]
    KeepTooMany {
        /// The positions to keep.
        keep: usize,
        /// The positions cached.
        cached: usize,
    },
    /// A position shift asked of a model whose RoPE scaling does not allow
    /// re-rotating cached keys.
    #[error(
        "shifting positions (seq_add) re-rotates the cached keys, which this model's \
         RoPE scaling (YaRN / LongRoPE magnitudes) does not allow; remove and recompute \
         the tokens instead"
    )]
    ShiftUnsupported,
    /// Nothing to decode.
    #[error(
        "nothing to decode: the prompt has no tokens (an empty prompt, and the model \
         adds no BOS token); give a non-empty prompt"
    )]
    EmptyPrompt,
    /// A token id outside the vocabulary.
    #[error(
        "token id {token} is out of range (vocabulary of {n_vocab}); give ids below {n_vocab}"
    )]
    TokenOutOfVocab {
        /// The id.
        token: u32,
        /// Vocabulary size.
        n_vocab: usize,
    },
    /// More tokens than the context has cells left.
    #[error(
        "context full: {cached} cached + {new} new tokens exceed -c {n_ctx}; use a larger context"
    )]
    ContextFull {
        /// Positions already cached.
        cached: usize,
        /// Tokens given.
        new: usize,
        /// Context size.
        n_ctx: usize,
    },
    /// More rows of logits in one micro-batch than the context keeps.
    #[error(
        "logits of several positions need a context made with logits_all \
         ({wanted} rows wanted in one micro-batch, {reserved} kept)"
    )]
    LogitsNotKept {
        /// Rows wanted in one micro-batch.
        wanted: usize,
        /// Rows the context keeps.
        reserved: usize,
    },
    /// A base row of a KL-divergence file does not fit the model's logits.
    #[error(
        "KL divergence: the base row does not match {n_logits} logits (target {target}); \
         was the base written with another model's vocabulary?"
    )]
    KldBaseRow {
        /// Logits of the model.
        n_logits: usize,
        /// The target token.
        target: usize,
    },
    /// A sampler setting out of its range.
    #[error("sampling: {param} must be {need} (given {value})")]
    SamplingParam {
        /// The setting.
        param: &'static str,
        /// Its value.
        value: f32,
        /// What it must be.
        need: &'static str,
    },
    /// A sampler was given no logits.
    #[error("sampling: no logits (the model produced an empty row); pass one logit per token")]
    NoLogits,
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
