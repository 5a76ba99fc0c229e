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

    /// A graph-building call got shapes it cannot combine (or a layout it
    /// cannot use); `problem` says which, with the shapes and values.
    #[error("{op}: {problem}")]
    Shape {
        /// The op being built.
        op: &'static str,
        /// What is wrong, with the tensors, shapes and values involved.
        problem: ShapeProblem,
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

    /// A caller-supplied argument was invalid (the one-offs that fit no
    /// structured variant).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),

    /// A slice, buffer, list or tensor holds another number of elements,
    /// bytes or entries than the call needs.
    #[error("{what}: got {got}, needs {expected}")]
    Length {
        /// The call and the argument, with the unit counted.
        what: String,
        /// The length the call needs.
        expected: usize,
        /// The length given.
        got: usize,
    },

    /// An index (a row id, a backend, buffer or device number) outside the
    /// range it must lie in.
    #[error("{what}: index {index} is outside 0..{len}; give an index below {len}")]
    IndexOutOfRange {
        /// The call and what the index selects.
        what: String,
        /// The index given (negative ones too).
        index: i64,
        /// How many there are to select from.
        len: usize,
    },

    /// An argument or setting (an environment variable, a command-line flag,
    /// a configuration field, a name or a value) the call does not accept.
    #[error("{arg}: {value} is not accepted; expected {expected}")]
    BadValue {
        /// The argument or setting, with the call it is given to.
        arg: String,
        /// The value given.
        value: String,
        /// What is accepted instead (a noun phrase: "one of ...", "a
        /// multiple of ...").
        expected: String,
    },

    /// No device has the name given.
    #[error("no device named '{name}' (known: {}); give one of those names", known.join(", "))]
    UnknownDevice {
        /// The name given.
        name: String,
        /// The names of the devices there are.
        known: Vec<String>,
    },

    /// A tensor the call cannot use as it is.
    #[error("{op}: tensor '{tensor}' {problem}")]
    BadTensor {
        /// The call.
        op: &'static str,
        /// Name of the tensor.
        tensor: String,
        /// What is wrong with it, and what to do.
        problem: TensorProblem,
    },

    /// A write into a read-only buffer (one that maps a file).
    #[error("{what}: buffer '{buffer}' is read-only (it maps a file); write to a copy in a writable buffer")]
    ReadOnly {
        /// The buffer.
        buffer: String,
        /// The write refused, naming the tensor when there is one.
        what: String,
    },

    /// A ggml op id, or op_params, strata does not implement or accept (in
    /// a graph from an RPC client or a file).
    #[error("ggml op {id}: {msg}")]
    GgmlOp {
        /// The ggml op id.
        id: u32,
        /// What is not supported, naming the op and parameter.
        msg: String,
    },

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

/// What makes a tensor unusable for a call ([`Error::BadTensor`]); its
/// text says what to do instead.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TensorProblem {
    /// The tensor is a view of `base`, which holds its storage.
    #[error("is a view: use its base tensor '{base}' instead")]
    View {
        /// Name of the tensor holding the storage.
        base: String,
    },
    /// The tensor already has a buffer.
    #[error("already has a buffer: give a tensor without one")]
    HasBuffer,
    /// The tensor's elements are not contiguous.
    #[error("is not contiguous: use its base tensor or a contiguous copy")]
    NotContiguous,
    /// The tensor is not in a buffer of `owner` (another device's, or none).
    #[error("is not in a buffer of {owner}: allocate it with {owner}'s buffer type")]
    ForeignBuffer {
        /// The device or buffer the call needs it in.
        owner: String,
    },
}

/// A tensor as a shape error names it: its role in the op, its name, type
/// and shape. Displays as "role 'name' type [ne0, ne1, ne2, ne3]" (the role
/// and the name are left out when empty: a requested shape has no name).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Operand {
    /// What the tensor is to the op ("a", "b", "mask", "ids", ...), or "".
    pub role: &'static str,
    /// The tensor's name, or "" for a shape that is not a tensor yet (a
    /// requested shape, an op's result).
    pub name: String,
    /// Its type.
    pub dtype: DType,
    /// Its shape, ggml order (`ne[0]` is the row length).
    pub ne: [usize; 4],
}

impl Operand {
    /// `t` in the role `role`, boxed as [`ShapeProblem`] holds it.
    pub fn of(role: &'static str, t: &crate::Tensor) -> Box<Operand> {
        Box::new(Operand {
            role,
            name: t.name(),
            dtype: t.dtype(),
            ne: t.ne(),
        })
    }

    /// A shape that is no tensor (yet), `role` naming it, boxed as
    /// [`ShapeProblem`] holds it.
    pub fn shape(role: &'static str, dtype: DType, ne: [usize; 4]) -> Box<Operand> {
        Box::new(Operand {
            role,
            name: String::new(),
            dtype,
            ne,
        })
    }
}

impl std::fmt::Display for Operand {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if !self.role.is_empty() {
            write!(f, "{} ", self.role)?;
        }
        if !self.name.is_empty() {
            write!(f, "'{}' ", self.name)?;
        }
        write!(f, "{} {:?}", self.dtype, self.ne)
    }
}

/// What is wrong with the shapes or layout a graph-building call got
/// ([`Error::Shape`]): the tensors, shapes and values involved, as fields a
/// caller can match. Its text says what is wrong and what to do.
///
/// Tensors are boxed [`Operand`]s, which keeps [`Error`] small; match them
/// by binding and comparing fields (`Mismatch { a, .. } if a.ne == [..]`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ShapeProblem {
    /// Two shapes that must agree do not: equal dims, one broadcast over
    /// (dividing) the other, equal element counts. `rule` says which dims
    /// and how, naming the operands by their roles.
    #[error("{a} and {b}: {rule}")]
    Mismatch {
        /// The rule broken and how to meet it, e.g. "ne0 (K) must match".
        rule: &'static str,
        /// The first shape the rule names.
        a: Box<Operand>,
        /// The second shape the rule names.
        b: Box<Operand>,
    },

    /// A byte copy between two tensors whose type, shape or strides differ.
    #[error(
        "{src} (strides {src_nb:?}) and {dst} (strides {dst_nb:?}) differ in layout: a byte copy \
         needs one type, shape and strides; copy element by element with ops::cpy in a graph"
    )]
    LayoutMismatch {
        /// The tensor copied from.
        src: Box<Operand>,
        /// Its strides in bytes.
        src_nb: [usize; 4],
        /// The tensor copied to.
        dst: Box<Operand>,
        /// Its strides in bytes.
        dst_nb: [usize; 4],
    },

    /// A tensor has more dimensions than the op takes (a dim at or past
    /// `max` is not 1).
    #[error("{tensor} has more than {max} dimensions; reshape it to at most {max}")]
    TooManyDims {
        /// The tensor.
        tensor: Box<Operand>,
        /// How many dimensions the op takes at most.
        max: usize,
    },

    /// A tensor is not contiguous (it is transposed, permuted or a strided
    /// view) where the op needs it contiguous.
    #[error("'{tensor}' is not contiguous; make a contiguous copy first (ops::cont)")]
    NotContiguous {
        /// Name of the tensor.
        tensor: String,
    },

    /// A tensor's rows are not contiguous (its elements are not `nb[0]`
    /// = the element size apart) where the op needs them so.
    #[error(
        "the rows of '{tensor}' are not contiguous (nb0 is not the element size); make a \
         contiguous copy first (ops::cont)"
    )]
    RowsNotContiguous {
        /// Name of the tensor.
        tensor: String,
    },

    /// A block-quantized layout whose `nb[0]` is not the size of one block
    /// (block types keep their rows contiguous).
    #[error(
        "nb0 {nb0} is not {block_bytes}, the bytes of one block: block-quantized rows must stay \
         contiguous"
    )]
    BlockStride {
        /// The `nb[0]` given.
        nb0: usize,
        /// The size of one block of the type, the only `nb[0]` accepted.
        block_bytes: usize,
    },

    /// A source the op needs is missing (`None`, or fewer sources given).
    #[error("source {index} is missing; give the op all its sources")]
    MissingSource {
        /// The index of the missing source.
        index: usize,
    },

    /// A parameter the op needs was not given (the shape of RESHAPE or VIEW,
    /// the k of TOP_K); the op's builder in [`crate::ops`] sets it.
    #[error("needs {param}, which was not given; build the op with its ops:: function")]
    MissingParam {
        /// The parameter.
        param: &'static str,
    },

    /// A value (a dim, k, a dimension count) outside the range the op
    /// accepts.
    #[error("{what} {value} is outside {min}..={max}; give a value in that range")]
    OutOfRange {
        /// The value's meaning, e.g. "dim" or "k".
        what: &'static str,
        /// The value given.
        value: usize,
        /// The smallest value accepted.
        min: usize,
        /// The largest value accepted.
        max: usize,
    },

    /// A value that must be a multiple of another is not (an even row
    /// length, a row length in whole blocks).
    #[error("{what} {value} is not a multiple of {multiple}; give a multiple of {multiple}")]
    NotMultiple {
        /// The value's meaning, e.g. "n_dims".
        what: &'static str,
        /// The value given.
        value: usize,
        /// What it must be a multiple of.
        multiple: usize,
    },

    /// PERMUTE's axes are not a permutation of 0..4.
    #[error("axes {axes:?} are not a permutation of 0..4; give each of 0, 1, 2, 3 once")]
    NotPermutation {
        /// The axes given.
        axes: [usize; 4],
    },

    /// A count that must equal another does not (sinks per head, frequency
    /// factors per rotated pair, strides per dimension).
    #[error("{what}: got {got}, needs {expected}")]
    Count {
        /// What is counted, and what it must equal.
        what: &'static str,
        /// The count the op needs.
        expected: usize,
        /// The count given.
        got: usize,
    },

    /// A shape (with strides, where given) whose element count or byte span
    /// overflows what strata addresses.
    #[error(
        "shape {ne:?}{} is too large: its element count or byte span overflows; use smaller dims",
        strides_text(nb)
    )]
    Overflow {
        /// The shape.
        ne: [usize; 4],
        /// The strides in bytes, where the layout has them.
        nb: Option<[usize; 4]>,
    },

    /// A view that reaches past the end of the tensor holding its storage.
    #[error(
        "view {ne:?} at byte offset {offset} needs {need} bytes of '{base}', which has {size}; \
         give a smaller view or offset"
    )]
    ViewOutOfBounds {
        /// Name of the tensor holding the storage (the base of a view).
        base: String,
        /// The view's shape.
        ne: [usize; 4],
        /// The view's byte offset into `base`.
        offset: usize,
        /// The bytes of `base` the view spans, from its start.
        need: usize,
        /// The bytes `base` has.
        size: usize,
    },

    /// An op built in place (`make_inplace`) that cannot run in place.
    #[error("this op cannot run in place; use its ordinary form")]
    NotInPlace,

    /// A leaf (a tensor no op computes) given as an op to infer.
    #[error("a leaf has no op to infer; give an op that computes a tensor")]
    Leaf,
}

/// " (strides [..])" for `Some`, "" for `None` ([`ShapeProblem::Overflow`]).
fn strides_text(nb: &Option<[usize; 4]>) -> String {
    nb.map(|nb| format!(" (strides {nb:?})"))
        .unwrap_or_default()
}

impl Error {
    /// Shorthand for [`Error::Shape`].
    pub fn shape(op: &'static str, problem: ShapeProblem) -> Error {
        Error::Shape { op, problem }
    }

    /// Shorthand for [`Error::Type`].
    pub fn dtype(op: &'static str, dtype: DType, msg: impl Into<String>) -> Error {
        Error::Type {
            op,
            dtype,
            msg: msg.into(),
        }
    }

    /// Shorthand for [`Error::IndexOutOfRange`] with an unsigned index
    /// (saturated at `i64::MAX`).
    pub fn index(what: impl Into<String>, index: usize, len: usize) -> Error {
        Error::IndexOutOfRange {
            what: what.into(),
            index: i64::try_from(index).unwrap_or(i64::MAX),
            len,
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

#[cfg(test)]
mod tests {
    use super::*;

    /// `Result<T>` stays cheap to return: clippy's `result_large_err` bound
    /// (128 bytes), which the boxed operands of [`ShapeProblem`] keep.
    #[test]
    fn error_stays_small() {
        assert!(
            std::mem::size_of::<Error>() <= 128,
            "{}",
            std::mem::size_of::<Error>()
        );
    }

    /// The structured variants' text names what was wrong and what to give.
    #[test]
    fn structured_errors_read_as_sentences() {
        let e = Error::Length {
            what: "f16_to_f32_row: 16-bit row bytes (two per f32)".into(),
            expected: 6,
            got: 4,
        };
        assert_eq!(
            e.to_string(),
            "f16_to_f32_row: 16-bit row bytes (two per f32): got 4, needs 6"
        );
        let e = Error::index("set_tensor_backend: backend for tensor 'x'", 3, 2);
        assert!(matches!(
            e,
            Error::IndexOutOfRange {
                index: 3,
                len: 2,
                ..
            }
        ));
        assert_eq!(
            e.to_string(),
            "set_tensor_backend: backend for tensor 'x': index 3 is outside 0..2; give an index \
             below 2"
        );
        let e = Error::index("huge", usize::MAX, 1);
        assert!(matches!(
            e,
            Error::IndexOutOfRange {
                index: i64::MAX,
                ..
            }
        ));
        let e = Error::BadValue {
            arg: "--max-graph-nodes".into(),
            value: "0".into(),
            expected: "at least 1".into(),
        };
        assert_eq!(
            e.to_string(),
            "--max-graph-nodes: 0 is not accepted; expected at least 1"
        );
        let e = Error::GgmlOp {
            id: 95,
            msg: "op not supported by strata".into(),
        }
        .context("node 'out'");
        assert_eq!(
            e.to_string(),
            "node 'out': ggml op 95: op not supported by strata"
        );
        assert!(matches!(e.root(), Error::GgmlOp { id: 95, .. }));
    }
}
