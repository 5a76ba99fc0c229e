//! CPU kernels, one file per op family, behind one dispatch point.
//!
//! Every thread runs every node and takes its share of rows ([`Ctx::rows`]);
//! threads meet at a barrier between nodes. Kernels read sources and write the
//! destination through [`TView`]s resolved once per graph. Sources may alias
//! the destination for in-place ops: kernels load a source row before
//! storing the destination row (rows are loaded into per-thread scratch).

pub(crate) mod attn;
mod claim;
mod copy;
mod elementwise;
mod matmul;
pub(crate) mod matmul_float;
mod matmul_packed;
mod moe;
mod moe_packed;
mod norm;
mod reduce;
mod rope;
mod rows;
mod softmax;

#[cfg(feature = "testkit")]
pub(crate) use softmax::alibi_slope;

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
    /// Attention takes the two-pass path for every shape
    /// (`CpuBackend::set_batch_invariant`).
    pub batch_invariant: bool,
    /// The matmuls' blocking, from the backend's cache sizes
    /// (`CpuBackend::set_cache_sizes`; the host's by default).
    pub blocking: crate::isa::cache::Blocking,
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
            batch_invariant: false,
            blocking: crate::isa::cache::Blocking::detected(),
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

    /// The row-wise ops' loop: each of this thread's rows of `node.src(0)`
    /// (`ne[0]` values) is loaded into scratch, rewritten in place by `f`
    /// (given its `(i1, i2, i3)`), and stored to the same row of `node.dst`.
    pub fn map_rows(&self, node: &NodePlan, mut f: impl FnMut((usize, usize, usize), &mut [f32])) {
        let (a, dst) = (node.src(0), &node.dst);
        let row = self.scratch_f32(a.ne[0]);
        for r in self.rows(a.nrows()) {
            let (i1, i2, i3) = a.row_coords(r);
            a.load_row(i1, i2, i3, row);
            f((i1, i2, i3), row);
            dst.store_row(i1, i2, i3, row);
        }
    }
}

/// Why the CPU cannot run `t` because of a source stored in a packed layout
/// (see [`crate::quant::packed`]): only MUL_MAT, MUL_MAT_ID and GET_ROWS read whole
/// packed weights, as their source 0; no op reads part of one.
pub(crate) fn packed_source_refusal(t: &Tensor) -> Option<String> {
    use crate::backend::TensorLayout;
    for (i, s) in t.src_slots().iter().enumerate() {
        let Some(s) = s else { continue };
        let Some(buf) = s.buffer() else { continue };
        let why = match buf.tensor_layout(s) {
            TensorLayout::Plain => continue,
            TensorLayout::Packed
                if i == 0 && matches!(t.op(), Op::MulMat | Op::MulMatId | Op::GetRows) =>
            {
                continue
            }
            TensorLayout::Packed => {
                "a packed weight; only MUL_MAT, MUL_MAT_ID and GET_ROWS read \
                 those (as source 0)"
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

/// A family's data-dependent check (see [`validate`]).
type ValidateFn = fn(&Tensor, &NodePlan, &dyn Fn(&Tensor) -> bool) -> crate::Result<()>;

/// One op family's kernels: the table [`kernel`] looks ops up in, so that
/// adding a family is one entry instead of one arm in every dispatcher.
struct OpKernel {
    /// Which ops the family computes.
    handles: fn(&Op) -> bool,
    /// Whether it has a kernel for this tensor's types and shapes.
    supports: fn(&Tensor) -> bool,
    /// Work memory a node needs.
    work_size: fn(&NodePlan) -> WorkSize,
    /// Runs this thread's share of a node.
    forward: fn(&NodePlan, &Ctx<'_>),
    /// Data-dependent checks before compute (see [`validate`]).
    validate: ValidateFn,
}

fn no_checks(_: &Tensor, _: &NodePlan, _: &dyn Fn(&Tensor) -> bool) -> crate::Result<()> {
    Ok(())
}

fn is_mul_mat(op: &Op) -> bool {
    matches!(op, Op::MulMat)
}

fn is_flash_attn(op: &Op) -> bool {
    matches!(op, Op::FlashAttnExt { .. })
}

/// A family without data-dependent checks.
macro_rules! family {
    ($handles:expr, $m:ident) => {
        OpKernel {
            handles: $handles,
            supports: $m::supports,
            work_size: $m::work_size,
            forward: $m::forward,
            validate: no_checks,
        }
    };
}

/// Every family, in lookup order (the first that handles an op runs it).
static KERNELS: [OpKernel; 10] = [
    family!(elementwise::handles, elementwise),
    family!(reduce::handles, reduce),
    family!(norm::handles, norm),
    family!(softmax::handles, softmax),
    family!(rope::handles, rope),
    family!(is_mul_mat, matmul),
    OpKernel {
        validate: rows::validate,
        ..family!(rows::handles, rows)
    },
    family!(copy::handles, copy),
    family!(is_flash_attn, attn),
    OpKernel {
        validate: rows::validate,
        ..family!(moe::handles, moe)
    },
];

/// The kernels of `op`'s family; `None` for ops with nothing to compute
/// (views, leaves) and ops the CPU has no kernel for.
fn kernel(op: &Op) -> Option<&'static OpKernel> {
    if op.is_view_op() {
        return None;
    }
    KERNELS.iter().find(|k| (k.handles)(op))
}

/// True when the CPU backend has a kernel for `t`'s op with its types.
pub(crate) fn supports(t: &Tensor) -> bool {
    if t.op().is_view_op() {
        return true;
    }
    if packed_source_refusal(t).is_some() {
        return false;
    }
    kernel(t.op()).is_some_and(|k| (k.supports)(t))
}

/// Work memory for `node` with `nth` threads.
pub(crate) fn work_size(node: &NodePlan, nth: usize) -> WorkSize {
    let _ = nth;
    kernel(&node.op).map_or_else(WorkSize::default, |k| (k.work_size)(node))
}

/// Runs this thread's share of `node`.
pub(crate) use matmul_packed::MAX_NODES as MAX_MATMULS_PER_STEP;

/// Packed MUL_MATs over the same activations as one step (the CPU
/// backend's `steps`; at most [`MAX_MATMULS_PER_STEP`]).
pub(crate) fn forward_matmuls(nodes: &[&NodePlan], ctx: &Ctx<'_>) {
    matmul_packed::forward_many(nodes, ctx)
}

/// Whether packed weights of types `a` and `b` prepare identical activation
/// columns (so their MUL_MATs over one `src1` can share one step).
pub(crate) fn matmul_activations_alike(a: crate::tensor::DType, b: crate::tensor::DType) -> bool {
    matmul_packed::same_activations(a, b)
}

pub(crate) fn forward(node: &NodePlan, ctx: &Ctx<'_>) {
    if node.op.is_view_op() {
        return;
    }
    match kernel(&node.op) {
        Some(k) => (k.forward)(node, ctx),
        None => unreachable!(
            "no CPU kernel for {} (supports_op said yes)",
            node.op.name()
        ),
    }
}

/// Checks data-dependent preconditions of `node` before compute (row
/// indices in range); `computed(t)` is true for tensors the graph writes.
pub(crate) fn validate(
    t: &Tensor,
    node: &NodePlan,
    computed: &dyn Fn(&Tensor) -> bool,
) -> crate::Result<()> {
    kernel(&node.op).map_or(Ok(()), |k| (k.validate)(t, node, computed))
}
