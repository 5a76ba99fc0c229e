//! MUL_MAT test cases shared by `ops_matmul.rs`, `ops_matmul_float.rs` and
//! `ops_moe.rs`: the layouts of the activations, building them, the f64
//! reference, K in whole blocks, and the bound against exact activations.

use super::tensor;
use strata::{ops, DType, Tensor};

/// How the activation tensor `b` is laid out.
#[derive(Clone, Copy, Debug)]
pub enum Layout {
    Contiguous,
    /// `b` is the transpose of a contiguous [N, K, ..] tensor.
    Transposed,
    /// `b` is a [K, ne12, N, ne13] tensor with dims 1 and 2 swapped.
    Permuted,
    /// Every other row of a wider tensor, starting one element in.
    Strided,
}

pub const LAYOUTS: [Layout; 4] = [
    Layout::Contiguous,
    Layout::Transposed,
    Layout::Permuted,
    Layout::Strided,
];

/// Returns (base tensor to fill, its element count, the view used as b).
pub fn make_b(c: &Case) -> (Tensor, usize, Tensor) {
    let (k, n, [e2, e3], bt) = (c.k, c.n, c.b23, c.bt);
    match c.layout {
        Layout::Contiguous => {
            let b = tensor("b", bt, &[k, n, e2, e3]);
            (b.clone(), k * n * e2 * e3, b)
        }
        Layout::Transposed => {
            let base = tensor("b_base", bt, &[n, k, e2, e3]);
            let b = ops::transpose(&base).unwrap();
            (base, k * n * e2 * e3, b)
        }
        Layout::Permuted => {
            let base = tensor("b_base", bt, &[k, e2, n, e3]);
            let b = ops::permute(&base, [0, 2, 1, 3]).unwrap();
            (base, k * n * e2 * e3, b)
        }
        Layout::Strided => {
            let base = tensor("b_base", bt, &[k + 3, 2 * n, e2, e3]);
            let ts = bt.type_size();
            let nb1 = (k + 3) * ts;
            let b = ops::view_4d(
                &base,
                [k, n, e2, e3],
                2 * nb1,
                2 * n * nb1,
                2 * n * e2 * nb1,
                ts,
            )
            .unwrap();
            (base, (k + 3) * 2 * n * e2 * e3, b)
        }
    }
}

/// c[m, n, i2, i3] = Σ_k f(a[k, m, i2 / r2, i3 / r3] · b[k, n, i2, i3]) in f64.
pub fn reference(
    a: &[f32],
    ane: [usize; 4],
    b: &[f32],
    bne: [usize; 4],
    f: fn(f64) -> f64,
) -> Vec<f64> {
    let (k, m, n) = (ane[0], ane[1], bne[1]);
    let (r2, r3) = (bne[2] / ane[2], bne[3] / ane[3]);
    let mut out = Vec::with_capacity(m * n * bne[2] * bne[3]);
    for i3 in 0..bne[3] {
        for i2 in 0..bne[2] {
            for j in 0..n {
                for i in 0..m {
                    let ao = ((i3 / r3 * ane[2] + i2 / r2) * m + i) * k;
                    let bo = ((i3 * bne[2] + i2) * n + j) * k;
                    let s: f64 = (0..k).map(|x| f(a[ao + x] as f64 * b[bo + x] as f64)).sum();
                    out.push(s);
                }
            }
        }
    }
    out
}

/// One MUL_MAT: weights `at` [k, m, a23], activations `bt` [k, n, b23] laid
/// out as `layout`.
#[derive(Clone, Copy, Debug)]
pub struct Case {
    pub at: DType,
    pub bt: DType,
    pub layout: Layout,
    pub k: usize,
    pub m: usize,
    pub n: usize,
    pub a23: [usize; 2],
    pub b23: [usize; 2],
}

impl Case {
    /// `at` weights [k, m] times contiguous F32 activations [k, n], no
    /// broadcasting.
    pub fn plain(at: DType, k: usize, m: usize, n: usize) -> Case {
        Case {
            at,
            bt: DType::F32,
            layout: Layout::Contiguous,
            k,
            m,
            n,
            a23: [1, 1],
            b23: [1, 1],
        }
    }
}

/// Asserts a product of `at` weights matches `emulated`, the reference with
/// activations rounded to the weight's dot type: every output finite, and
/// the squared error over the squared `magnitude` (the reference of
/// |products|) at most 1e-7 for Q8_1 dot types, 1e-12 otherwise.
pub fn assert_emulated(what: &str, at: DType, got: &[f32], emulated: &[f64], magnitude: &[f64]) {
    let bound = if strata::quant::vec_dot_type(at) == DType::Q8_1 {
        1e-7
    } else {
        1e-12
    };
    let (mut err, mut norm) = (0.0, 0.0);
    for ((&g, &w), &m) in got.iter().zip(emulated).zip(magnitude) {
        assert!(g.is_finite(), "{what}: non-finite output {g}");
        err += (g as f64 - w) * (g as f64 - w);
        norm += m * m;
    }
    let e = if norm > 0.0 { err / norm } else { err };
    assert!(
        e <= bound,
        "{what}: error vs dot-type activations {e:e} > {bound:e}"
    );
}

/// NMSE bound of a matrix product against exact (unrounded) activations:
/// only F32 weights leave them unrounded.
pub fn exact_tol(at: DType) -> f64 {
    match at {
        DType::F32 => 1e-10,
        DType::F16 => 1e-5,
        _ => 1e-4,
    }
}

/// A K of `blocks32` blocks of 32 for `at`, rounded up to whole
/// super-blocks of 256 for the K-quants and IQ4_XS.
pub fn k_blocks(at: DType, blocks32: usize) -> usize {
    if at.block_size() == 256 {
        256 * blocks32.div_ceil(8)
    } else {
        32 * blocks32
    }
}
