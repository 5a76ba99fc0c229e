//! CPU kernels, one file per op family, behind one dispatch point.
//!
//! Every thread runs every node and takes its share of rows ([`Ctx::rows`]);
//! threads meet at a barrier between nodes. Kernels read sources and write the
//! destination through [`TView`]s resolved once per graph. Sources may alias
//! the destination for in-place ops: kernels load a source row before
//! storing the destination row (rows are loaded into per-thread scratch).

mod attn;
mod copy;
mod elementwise;
mod matmul;
mod matmul_float;
mod matmul_packed;
mod norm;
mod reduce;
mod rope;
mod rows;
mod softmax;

use super::pool::WorkerCtx;
use super::view::TView;
use crate::ops::Op;
use crate::tensor::{Tensor, MAX_SRC};

/// One node ready to run: its op and resolved memory.
pub(crate) struct NodePlan {
    pub op: Op,
    pub dst: TView,
    pub src: [Option<TView>; MAX_SRC],
}

impl NodePlan {
    /// Source `i` (present by construction for required sources: infer checked it).
    pub fn src(&self, i: usize) -> &TView {
        self.src[i]
            .as_ref()
            .expect("required source validated by infer")
    }
}

/// Work memory a node needs: shared by all threads, and per thread.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct WorkSize {
    pub shared: usize,
    pub per_thread: usize,
}

impl WorkSize {
    /// Total bytes for `nth` threads (64-byte aligned parts).
    pub fn total(&self, nth: usize) -> usize {
        // Saturating: a received graph may ask for absurd sizes, which the
        // backend then refuses instead of overflowing.
        let up = |x: usize| x.saturating_add(63) & !63;
        up(self.shared).saturating_add(up(self.per_thread).saturating_mul(nth))
    }
}

/// What a kernel gets besides its node: the thread context and work memory.
pub(crate) struct Ctx<'a> {
    pub w: &'a WorkerCtx<'a>,
    pub wdata: *mut u8,
    pub work: WorkSize,
    /// The instruction-set level of the kernels that dispatch on it (matmul).
    pub isa: crate::isa::Isa,
    /// Whether this thread's scratch has been handed out for the current node.
    pub scratch_taken: std::cell::Cell<bool>,
}

impl<'a> Ctx<'a> {
    /// The context of one thread for one node.
    pub fn new(
        w: &'a WorkerCtx<'a>,
        wdata: *mut u8,
        work: WorkSize,
        isa: crate::isa::Isa,
    ) -> Ctx<'a> {
        Ctx {
            w,
            wdata,
            work,
            isa,
            scratch_taken: std::cell::Cell::new(false),
        }
    }

    /// This thread's rows of `n`.
    pub fn rows(&self, n: usize) -> std::ops::Range<usize> {
        self.w.split(n)
    }

    /// Pointer to the shared part of the work memory (written by all threads
    /// in disjoint parts, read after a barrier).
    pub fn shared_ptr(&self) -> *mut u8 {
        self.wdata
    }

    /// This thread's scratch memory as `len` f32 values (len*4 <= per_thread
    /// bytes). Handed out once per node, so two slices can never alias: a
    /// second call is an internal error.
    #[allow(clippy::mut_from_ref)]
    pub fn scratch_f32(&self, len: usize) -> &'a mut [f32] {
        assert!(
            !self.scratch_taken.replace(true),
            "scratch taken twice for one node"
        );
        let per = crate::backend::align_up(self.work.per_thread, 64);
        assert!(
            len * 4 <= per,
            "scratch of {len} f32 exceeds the planned {per} bytes"
        );
        let off = crate::backend::align_up(self.work.shared, 64) + per * self.w.ith;
        // SAFETY: each thread gets the disjoint range [off, off+per) of the work
        // buffer (sized by WorkSize::total), 64-byte aligned, alive for the compute
        // ('a); the flag above makes this the only slice of that range for this node.
        unsafe { std::slice::from_raw_parts_mut(self.wdata.add(off).cast::<f32>(), len) }
    }
}

/// Why the CPU cannot run `t` because of a source stored in a packed layout
/// (see [`crate::quant::packed`]): only MUL_MAT and GET_ROWS read whole
/// packed weights, as their source 0; no op reads part of one.
pub(crate) fn packed_source_refusal(t: &Tensor) -> Option<String> {
    use crate::backend::TensorLayout;
    for (i, s) in t.src_slots().iter().enumerate() {
        let Some(s) = s else { continue };
        let Some(buf) = s.buffer() else { continue };
        let why = match buf.tensor_layout(s) {
            TensorLayout::Plain => continue,
            TensorLayout::Packed if i == 0 && matches!(t.op(), Op::MulMat | Op::GetRows) => {
                continue
            }
            TensorLayout::Packed => {
                "a packed weight; only MUL_MAT and GET_ROWS read those \
                                     (as source 0)"
            }
            TensorLayout::PackedPart => "a view of part of a packed weight, which no kernel reads",
        };
        return Some(format!(
            "op {} (tensor '{}') reads source {i} '{}' in buffer '{}': {why}",
            t.op().name(),
            t.name(),
            s.name(),
            buf.name()
        ));
    }
    None
}

/// True when the CPU backend has a kernel for `t`'s op with its types.
pub(crate) fn supports(t: &Tensor) -> bool {
    match t.op() {
        Op::None | Op::View { .. } | Op::Reshape | Op::Permute { .. } | Op::Transpose => true,
        _ if packed_source_refusal(t).is_some() => false,
        op if elementwise::handles(op) => elementwise::supports(t),
        op if reduce::handles(op) => reduce::supports(t),
        op if norm::handles(op) => norm::supports(t),
        op if softmax::handles(op) => softmax::supports(t),
        op if rope::handles(op) => rope::supports(t),
        Op::MulMat => matmul::supports(t),
        op if rows::handles(op) => rows::supports(t),
        op if copy::handles(op) => copy::supports(t),
        Op::FlashAttnExt { .. } => attn::supports(t),
        _ => false,
    }
}

/// Work memory for `node` with `nth` threads.
pub(crate) fn work_size(node: &NodePlan, nth: usize) -> WorkSize {
    let _ = nth;
    match &node.op {
        op if elementwise::handles(op) => elementwise::work_size(node),
        op if reduce::handles(op) => reduce::work_size(node),
        op if norm::handles(op) => norm::work_size(node),
        op if softmax::handles(op) => softmax::work_size(node),
        op if rope::handles(op) => rope::work_size(node),
        Op::MulMat => matmul::work_size(node),
        op if rows::handles(op) => rows::work_size(node),
        op if copy::handles(op) => copy::work_size(node),
        Op::FlashAttnExt { .. } => attn::work_size(node),
        _ => WorkSize::default(),
    }
}

/// Runs this thread's share of `node`.
pub(crate) fn forward(node: &NodePlan, ctx: &Ctx<'_>) {
    match &node.op {
        Op::None | Op::View { .. } | Op::Reshape | Op::Permute { .. } | Op::Transpose => {}
        op if elementwise::handles(op) => elementwise::forward(node, ctx),
        op if reduce::handles(op) => reduce::forward(node, ctx),
        op if norm::handles(op) => norm::forward(node, ctx),
        op if softmax::handles(op) => softmax::forward(node, ctx),
        op if rope::handles(op) => rope::forward(node, ctx),
        Op::MulMat => matmul::forward(node, ctx),
        op if rows::handles(op) => rows::forward(node, ctx),
        op if copy::handles(op) => copy::forward(node, ctx),
        Op::FlashAttnExt { .. } => attn::forward(node, ctx),
        op => unreachable!("no CPU kernel for {} (supports_op said yes)", op.name()),
    }
}

/// Checks data-dependent preconditions of `node` before compute (row
/// indices in range); `computed(t)` is true for tensors the graph writes.
pub(crate) fn validate(
    t: &Tensor,
    node: &NodePlan,
    computed: &dyn Fn(&Tensor) -> bool,
) -> crate::Result<()> {
    match &node.op {
        op if rows::handles(op) => rows::validate(t, node, computed),
        _ => Ok(()),
    }
}
