//! Element-wise kernels: binary ops with broadcasting, unary functions,
//! scale, clamp and gated linear units.

use super::{Ctx, NodePlan, WorkSize};
use crate::cpu::vector::{self, silu};
use crate::ops::{GluOp, Op, UnaryOp};
use crate::tensor::{DType, Tensor};

pub(super) fn handles(op: &Op) -> bool {
    matches!(
        op,
        Op::Add
            | Op::Sub
            | Op::Mul
            | Op::Div
            | Op::Scale { .. }
            | Op::Sqr
            | Op::Sqrt
            | Op::Log
            | Op::Sin
            | Op::Cos
            | Op::Clamp { .. }
            | Op::Unary(_)
            | Op::Glu { .. }
    )
}

pub(super) fn supports(t: &Tensor) -> bool {
    // Float results from float sources (infer already enforces float types).
    t.dtype().is_float() && t.srcs().all(|s| s.dtype().is_float())
}

pub(super) fn work_size(node: &NodePlan) -> WorkSize {
    let n: usize = node.src.iter().flatten().map(|s| s.ne[0]).sum::<usize>() + node.dst.ne[0];
    WorkSize {
        shared: 0,
        per_thread: n * 4,
    }
}

/// f32 GELU, tanh approximation (as ggml's reference formula).
#[inline]
pub(crate) fn gelu(x: f32) -> f32 {
    const SQRT_2_OVER_PI: f32 = 0.797_884_6;
    0.5 * x * (1.0 + (SQRT_2_OVER_PI * x * (1.0 + 0.044715 * x * x)).tanh())
}

/// f32 GELU, exact: x · (1 + erf(x / √2)) / 2, as ggml's `GELU_ERF`
/// computes it in f32 (`erff`).
#[inline]
pub(crate) fn gelu_erf(x: f32) -> f32 {
    0.5 * x * (1.0 + libm::erff(x * std::f32::consts::FRAC_1_SQRT_2))
}

#[inline]
pub(crate) fn unary(op: UnaryOp, x: f32) -> f32 {
    match op {
        UnaryOp::Abs => x.abs(),
        UnaryOp::Neg => -x,
        UnaryOp::Tanh => x.tanh(),
        UnaryOp::Relu => x.max(0.0),
        UnaryOp::Sigmoid => 1.0 / (1.0 + (-x).exp()),
        UnaryOp::Gelu => gelu(x),
        UnaryOp::GeluQuick => x / (1.0 + (-1.702 * x).exp()),
        UnaryOp::Silu => silu(x),
        UnaryOp::Exp => x.exp(),
        UnaryOp::GeluErf => gelu_erf(x),
    }
}

fn glu_act(op: GluOp, x: f32) -> f32 {
    match op {
        GluOp::Reglu => x.max(0.0),
        GluOp::Geglu => gelu(x),
        GluOp::Swiglu => silu(x),
        GluOp::GegluErf => gelu_erf(x),
    }
}

/// `a[i] = f(a[i], b[i % b.len()])`, monomorphized per op (a plain loop
/// LLVM vectorizes when the rows have the same length).
#[inline(always)]
fn binary(a: &mut [f32], b: &[f32], f: impl Fn(f32, f32) -> f32) {
    if a.len() == b.len() {
        for (x, &y) in a.iter_mut().zip(b) {
            *x = f(*x, y);
        }
    } else {
        for (i, x) in a.iter_mut().enumerate() {
            *x = f(*x, b[i % b.len()]);
        }
    }
}

/// True when `[p, p + n)` and `[q, q + m)` (bytes) share no byte.
fn disjoint(p: *const u8, n: usize, q: *const u8, m: usize) -> bool {
    let (p, q) = (p as usize, q as usize);
    p + n <= q || q + m <= p
}

/// `d[i] = f(a[i], b[i % nb])` for i < n, through raw rows, element by
/// element in order (so `d == a` or `d == b` computes in place).
///
/// # Safety
/// `a` and `d` cover n f32, `b` covers nb >= 1 f32; `d` is writable, owned
/// by this thread, and equal to or disjoint from each of `a` and `b`.
#[inline(always)]
unsafe fn binary_raw(
    d: *mut f32,
    a: *const f32,
    b: *const f32,
    n: usize,
    nb: usize,
    f: impl Fn(f32, f32) -> f32,
) {
    // SAFETY: the caller's contract; reads of index i happen before the
    // write of index i, and no other index aliases it.
    unsafe {
        if nb == n {
            for i in 0..n {
                d.add(i)
                    .write_unaligned(f(a.add(i).read_unaligned(), b.add(i).read_unaligned()));
            }
        } else {
            for i in 0..n {
                d.add(i)
                    .write_unaligned(f(a.add(i).read_unaligned(), b.add(i % nb).read_unaligned()));
            }
        }
    }
}

/// The binary ops on flat f32 rows (all three tensors F32 with contiguous
/// rows) straight from the sources into `dst`, without the scratch copies,
/// where each `dst` row is either a source's own row (in place) or
/// disjoint from both sources' rows. Returns false, having done nothing,
/// when the layout does not allow it (the caller then runs the general
/// path). Same operations in the same order, so the same bits.
fn binary_direct(node: &NodePlan, ctx: &Ctx<'_>) -> bool {
    let (dst, a, b) = (&node.dst, node.src(0), node.src(1));
    let f32_rows = |t: &crate::cpu::TView| t.dtype == DType::F32 && t.rows_contiguous();
    if !(f32_rows(dst) && f32_rows(a) && f32_rows(b)) || a.ne[0] != dst.ne[0] || b.ne[0] == 0 {
        return false;
    }
    let (n, nb) = (dst.ne[0], b.ne[0]);
    // Every row of this thread's share must qualify before any is written:
    // a partial direct pass would let a later row read a row written here.
    let rows = ctx.rows(dst.nrows());
    let ptrs = |r: usize| {
        let (i1, i2, i3) = dst.row_coords(r);
        (
            dst.row_ptr(i1, i2, i3),
            a.row_ptr(i1, i2, i3),
            b.row_ptr(i1 % b.ne[1], i2 % b.ne[2], i3 % b.ne[3]),
        )
    };
    let ok = rows.clone().all(|r| {
        let (d, pa, pb) = ptrs(r);
        (d == pa || disjoint(d, 4 * n, pa, 4 * n)) && (d == pb || disjoint(d, 4 * n, pb, 4 * nb))
    });
    if !ok {
        return false;
    }
    for r in rows {
        let (d, pa, pb) = ptrs(r);
        let (d, pa, pb) = (
            d.cast::<f32>(),
            pa.cast::<f32>().cast_const(),
            pb.cast::<f32>().cast_const(),
        );
        // SAFETY: the rows are in bounds (row_ptr checked the indices; rows
        // contiguous, n and nb values); dst's row is this thread's and is
        // equal to or disjoint from each source row (checked above).
        unsafe {
            match node.op {
                Op::Add => binary_raw(d, pa, pb, n, nb, |x, y| x + y),
                Op::Sub => binary_raw(d, pa, pb, n, nb, |x, y| x - y),
                Op::Mul => binary_raw(d, pa, pb, n, nb, |x, y| x * y),
                _ => binary_raw(d, pa, pb, n, nb, |x, y| x / y),
            }
        }
    }
    true
}

pub(super) fn forward(node: &NodePlan, ctx: &Ctx<'_>) {
    if matches!(node.op, Op::Add | Op::Sub | Op::Mul | Op::Div) && binary_direct(node, ctx) {
        return;
    }
    let dst = &node.dst;
    let a = node.src(0);
    let n0 = dst.ne[0];
    let scratch = ctx.scratch_f32(work_size(node).per_thread / 4);
    let (row_a, rest) = scratch.split_at_mut(a.ne[0]);
    for r in ctx.rows(dst.nrows()) {
        let (i1, i2, i3) = dst.row_coords(r);
        a.load_row(i1, i2, i3, row_a);
        match &node.op {
            Op::Add | Op::Sub | Op::Mul | Op::Div => {
                let b = node.src(1);
                let (row_b, _) = rest.split_at_mut(b.ne[0]);
                b.load_row(i1 % b.ne[1], i2 % b.ne[2], i3 % b.ne[3], row_b);
                match node.op {
                    Op::Add => binary(row_a, row_b, |x, y| x + y),
                    Op::Sub => binary(row_a, row_b, |x, y| x - y),
                    Op::Mul => binary(row_a, row_b, |x, y| x * y),
                    _ => binary(row_a, row_b, |x, y| x / y),
                }
            }
            Op::Scale { scale, bias } => row_a.iter_mut().for_each(|x| *x = *x * scale + bias),
            Op::Sqr => row_a.iter_mut().for_each(|x| *x *= *x),
            Op::Sqrt => row_a.iter_mut().for_each(|x| *x = x.sqrt()),
            Op::Log => row_a.iter_mut().for_each(|x| *x = x.ln()),
            Op::Sin => row_a.iter_mut().for_each(|x| *x = x.sin()),
            Op::Cos => row_a.iter_mut().for_each(|x| *x = x.cos()),
            Op::Clamp { min, max } => row_a.iter_mut().for_each(|x| *x = x.max(*min).min(*max)),
            // SiLU and SwiGLU in lanes that give libm expf's bits (a
            // vectorized exp within 4 ulp moved the model's perplexity, see
            // PERFORMANCE.md; `cpu::vector::silu_row`).
            Op::Unary(UnaryOp::Silu) => vector::silu_row(ctx.isa, row_a),
            // The same lanes, `f32::exp`'s bits (`unary`'s definition).
            Op::Unary(UnaryOp::Exp) => vector::exp_row(ctx.isa, row_a),
            Op::Unary(u) => row_a.iter_mut().for_each(|x| *x = unary(*u, *x)),
            Op::Glu { op, swapped } => {
                let (gate, up, out): (&[f32], &[f32], &mut [f32]) = match node.src[1].as_ref() {
                    Some(b) => {
                        let (row_b, out) = rest.split_at_mut(b.ne[0]);
                        b.load_row(i1, i2, i3, row_b);
                        (&row_a[..n0], &row_b[..n0], &mut out[..n0])
                    }
                    None => {
                        let (first, second) = row_a.split_at(n0);
                        let out = &mut rest[..n0];
                        if *swapped {
                            (second, first, out)
                        } else {
                            (first, second, out)
                        }
                    }
                };
                if *op == GluOp::Swiglu {
                    vector::swiglu_row(ctx.isa, gate, up, out).expect(vector::SIZED);
                } else {
                    for i in 0..n0 {
                        out[i] = glu_act(*op, gate[i]) * up[i];
                    }
                }
                dst.store_row(i1, i2, i3, out);
                continue;
            }
            op => unreachable!("{} is not element-wise", op.name()),
        }
        dst.store_row(i1, i2, i3, &row_a[..n0]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::{alloc_graph_host, CpuBackend, ThreadPool};
    use crate::ops::{make, make_inplace, transpose};
    use crate::Graph;

    /// Whether `binary_direct` takes the graph's last node at `nth` threads
    /// (every thread must agree), and its output.
    fn direct_taken(out: &Tensor, nth: usize) -> bool {
        let graph = Graph::build(std::slice::from_ref(out));
        let _bufs = alloc_graph_host(&graph).unwrap();
        let (plans, _) = CpuBackend::resolve(&graph).unwrap();
        let node = &plans.last().unwrap().1;
        let work = work_size(node);
        let mut mem = vec![0u64; work.total(nth).div_ceil(8)];
        let addr = mem.as_mut_ptr() as usize;
        let pool = ThreadPool::new(nth);
        let taken = std::sync::atomic::AtomicUsize::new(0);
        assert!(pool.run(&|w| {
            let ctx = Ctx::new(w, addr as *mut u8, work, crate::isa::Isa::Scalar);
            if binary_direct(node, &ctx) {
                taken.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        }));
        let taken = taken.into_inner();
        assert!(
            taken == 0 || taken == nth,
            "{taken} of {nth} threads direct"
        );
        taken == nth
    }

    /// UNARY Exp and Silu through the backend at every level this CPU runs
    /// (a row of 37: whole vectors and a tail) give `f32::exp`'s and
    /// [`silu`]'s bits, on arguments spanning exp's range and its edges.
    #[test]
    fn unary_exp_and_silu_rows_give_the_scalar_bits() {
        use crate::backend::Backend;
        use crate::isa::Isa;
        let xs: Vec<f32> = (0..37 * 3)
            .map(|i| -100.0 + 200.0 * i as f32 / 110.0)
            .chain([0.0, -0.0, 88.72, -87.5, f32::INFINITY, f32::NEG_INFINITY])
            .collect();
        for (op, f) in [
            (UnaryOp::Exp, f32::exp as fn(f32) -> f32),
            (UnaryOp::Silu, silu),
        ] {
            for isa in Isa::ALL.into_iter().filter(|i| i.is_supported()) {
                let a = Tensor::new(DType::F32, &[37, 3]).unwrap();
                let out = crate::ops::unary(&a, op).unwrap();
                let graph = Graph::build(std::slice::from_ref(&out));
                let _bufs = alloc_graph_host(&graph).unwrap();
                for chunk in xs.chunks(37 * 3) {
                    let mut v = chunk.to_vec();
                    v.resize(37 * 3, 1.0);
                    a.write_f32(&v).unwrap();
                    let mut cpu = CpuBackend::new(2);
                    cpu.set_isa(isa).unwrap();
                    cpu.graph_compute(&graph).unwrap();
                    let got = out.to_f32_vec().unwrap();
                    for (x, y) in v.iter().zip(&got) {
                        assert_eq!(f(*x).to_bits(), y.to_bits(), "{op:?}({x:e}) at {isa}");
                    }
                }
            }
        }
    }

    /// The layouts the direct path serves take it (so the bit-for-bit test
    /// in `tests/tensor_backend.rs` exercises it), and the ones it must not
    /// serve decline it before writing anything.
    #[test]
    fn direct_path_is_taken_where_the_layout_allows() {
        let t = |ne: &[usize]| Tensor::new(DType::F32, ne).unwrap();
        for nth in 1..=3 {
            for op in [Op::Add, Op::Sub, Op::Mul, Op::Div] {
                let (a, b, row) = (t(&[37, 5, 3]), t(&[37, 5, 3]), t(&[37, 1, 1]));
                let two = |x: &Tensor, y: &Tensor| vec![Some(x.clone()), Some(y.clone())];
                let out = make(op.clone(), two(&a, &b), None).unwrap();
                assert!(direct_taken(&out, nth), "{} out of place", op.name());
                let inplace = make_inplace(op.clone(), two(&a, &row)).unwrap();
                assert!(direct_taken(&inplace, nth), "{} in place", op.name());
                let same = make_inplace(op.clone(), two(&a, &a)).unwrap();
                assert!(direct_taken(&same, nth), "{} x op x", op.name());
                // A transposed source has no contiguous rows: general path.
                let sq = t(&[6, 6]);
                let tr = transpose(&sq).unwrap();
                let out = make(op.clone(), two(&tr, &t(&[6, 6])), None).unwrap();
                assert!(!direct_taken(&out, nth), "{} transposed", op.name());
                // F16 sources go through the row conversions.
                let h = Tensor::new(DType::F16, &[8, 2]).unwrap();
                let out = make(op.clone(), two(&h, &t(&[8, 2])), None).unwrap();
                assert!(!direct_taken(&out, nth), "{} f16", op.name());
            }
        }
    }
}
