//! strata's error type: one enum, structured variants naming the tensor, op,
//! buffer or backend involved, with a message that says what to do.

use crate::tensor::DType;

/// Result alias used across strata.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Every error a strata public API can return.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A tensor was read, written or computed before any buffer held it
    /// (ggml aborts here with "tensor buffer not set").
    #[error(
        "tensor '{tensor}' has no buffer: allocate it first (strata::backend::alloc_tensors with a \
         buffer type, or let the graph allocator / scheduler allocate the graph)"
    )]
    Unallocated {
        /// Name of the tensor.
        tensor: String,
    },

    /// A graph-building call got shapes it cannot combine.
    #[error("{op}: {msg}")]
    Shape {
        /// The op being built.
        op: &'static str,
        /// What is wrong, with the shapes.
        msg: String,
    },

    /// A graph-building call got a type it does not accept.
    #[error("{op}: type {dtype} not supported: {msg}")]
    Type {
        /// The op being built.
        op: &'static str,
        /// The offending type.
        dtype: DType,
        /// What is expected instead.
        msg: String,
    },

    /// A read / write / copy would cross the end of a tensor or buffer.
    #[error("{what} out of bounds: range {offset}..{end} exceeds size {size}")]
    OutOfBounds {
        /// The tensor or buffer accessed.
        what: String,
        /// Start of the access, in bytes.
        offset: usize,
        /// End of the access, in bytes.
        end: usize,
        /// Size available, in bytes.
        size: usize,
    },

    /// A buffer could not be allocated.
    #[error("buffer type '{buffer_type}': cannot allocate {requested} bytes: {msg}")]
    OutOfMemory {
        /// The buffer type asked.
        buffer_type: String,
        /// Requested size in bytes.
        requested: usize,
        /// Why (limit, allocator failure, ...).
        msg: String,
    },

    /// A backend cannot run an op, or cannot use a buffer.
    #[error("backend '{backend}' does not support {what}")]
    Unsupported {
        /// The backend.
        backend: String,
        /// The op / tensor / buffer it cannot handle.
        what: String,
    },

    /// Computation was stopped by the abort callback.
    #[error("computation aborted by the abort callback")]
    Aborted,

    /// A caller-supplied argument was invalid.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),

    /// A configured runtime limit was exceeded.
    #[error("limit exceeded: {what} ({value} > {limit}); raise it with {knob}")]
    Limit {
        /// The limited quantity.
        what: &'static str,
        /// The value reached.
        value: usize,
        /// The configured limit.
        limit: usize,
        /// The setting to change.
        knob: &'static str,
    },

    /// A backend failed (remote errors, device errors).
    #[error("backend '{backend}': {msg}")]
    Backend {
        /// The backend.
        backend: String,
        /// What happened.
        msg: String,
    },

    /// A malformed file or message.
    #[error("{source_name}: bad {field}: {msg}")]
    Format {
        /// The file or stream.
        source_name: String,
        /// The field that is wrong.
        field: String,
        /// What is wrong.
        msg: String,
    },

    /// An I/O error, with what was being done.
    #[error("{context}: {source}")]
    Io {
        /// What strata was doing.
        context: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },

    /// A graph no longer fits the memory plan of a graph allocator that
    /// cannot re-plan by itself (several buffers).
    #[error("memory plan: tensor '{tensor}' {msg}")]
    PlanMismatch {
        /// The first tensor that does not fit the plan.
        tensor: String,
        /// What changed and what to do.
        msg: String,
    },

    /// A lower error with what strata was doing when it happened (see
    /// [`ResultExt::context`]); [`Error::root`] is the error underneath.
    #[error("{context}: {source}")]
    Context {
        /// What was being done, naming the tensor, split or file.
        context: String,
        /// The error it ran into.
        #[source]
        source: Box<Error>,
    },

    /// A memory plan was replayed on a graph it was not made for.
    #[error(
        "stale memory plan: it was made for graph {planned:016x} but this graph is {found:016x}; \
         call reserve with this graph for a new plan"
    )]
    StalePlan {
        /// Fingerprint the plan was made for.
        planned: u64,
        /// Fingerprint of the graph given.
        found: u64,
    },
}

impl Error {
    /// Shorthand for [`Error::Shape`].
    pub fn shape(op: &'static str, msg: impl Into<String>) -> Error {
        Error::Shape {
            op,
            msg: msg.into(),
        }
    }

    /// Shorthand for [`Error::Type`].
    pub fn dtype(op: &'static str, dtype: DType, msg: impl Into<String>) -> Error {
        Error::Type {
            op,
            dtype,
            msg: msg.into(),
        }
    }

    /// Wraps `self` with what was being done (see [`ResultExt::context`]).
    pub fn context(self, context: impl Into<String>) -> Error {
        Error::Context {
            context: context.into(),
            source: Box::new(self),
        }
    }

    /// The error underneath any [`Error::Context`] layers (`self` when there are none).
    pub fn root(&self) -> &Error {
        let mut e = self;
        while let Error::Context { source, .. } = e {
            e = source;
        }
        e
    }

    /// Shorthand for [`Error::Io`].
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Error {
        Error::Io {
            context: context.into(),
            source,
        }
    }
}

/// Adds what was being done to a failed [`Result`] (as candle's and anyhow's
/// `.context()`): the error becomes [`Error::Context`], whose message reads
/// "context: error".
///
/// ```
/// use strata::error::ResultExt;
/// use strata::Error;
///
/// let r: strata::Result<()> = Err(Error::InvalidArgument("bad".into()));
/// let e = r.context("loading 'blk.0.attn_q.weight'").unwrap_err();
/// assert_eq!(e.to_string(), "loading 'blk.0.attn_q.weight': invalid argument: bad");
/// assert!(matches!(e.root(), Error::InvalidArgument(_)));
/// ```
pub trait ResultExt<T> {
    /// Wraps the error with `context`.
    fn context(self, context: impl Into<String>) -> Result<T>;

    /// Wraps the error with the context `f` builds (only called on error).
    fn with_context<C: Into<String>>(self, f: impl FnOnce() -> C) -> Result<T>;
}

impl<T> ResultExt<T> for Result<T> {
    fn context(self, context: impl Into<String>) -> Result<T> {
        self.map_err(|e| e.context(context))
    }

    fn with_context<C: Into<String>>(self, f: impl FnOnce() -> C) -> Result<T> {
        self.map_err(|e| e.context(f()))
    }
}
