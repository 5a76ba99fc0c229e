//! The op conformance suite (ggml's `test-backend-ops`): every op with random
//! inputs, computed on a backend under test and on the local CPU, compared
//! with a normalized mean squared error bound (TOP_K, whose order ggml
//! leaves open, as sets of indices: [`top_k_error`]). `strata test-ops
//! --device X` runs it against any device, remote ones included.
//!
//! ```
//! use strata::conformance::{cases, run_case, Outcome};
//! use strata::cpu::CpuBackend;
//! let mut dut = CpuBackend::new(2);
//! let case = cases().into_iter().find(|c| c.name.starts_with("ADD")).unwrap();
//! let r = run_case(&case, &mut dut, 7).unwrap();
//! assert!(matches!(r, Outcome::Pass { .. }));
//! ```
//!
//! In `cargo test`, [`conformance_suite!`](crate::conformance_suite) stamps
//! one test per device that runs the whole suite and checks its counts
//! against the CPU suite's ([`check_device`]).

mod fused;
mod moe;

use std::any::Any;
use std::fmt;

use crate::backend::{alloc_graph, Backend};
use crate::cpu::CpuBackend;
use crate::graph::Graph;
use crate::isa::Isa;
use crate::ops::{self, GluOp, RopeMode, RopeParams, SortOrder, UnaryOp};
use crate::tensor::{DType, Tensor};
use crate::Result;

/// Deterministic generator for test data (xorshift64*).
pub struct Rng(u64);

impl Rng {
    /// A generator from a seed.
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    /// Next raw value.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// Uniform in `[lo, hi)`.
    pub fn uniform(&mut self, lo: f32, hi: f32) -> f32 {
        lo + (hi - lo) * ((self.next_u64() >> 40) as f32 / (1u64 << 24) as f32)
    }
    /// Uniform in `0..n` (`n` > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }
    /// `n` random bytes.
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next_u64() as u8).collect()
    }
    /// `n` values uniform in `[lo, hi)`.
    pub fn vec(&mut self, n: usize, lo: f32, hi: f32) -> Vec<f32> {
        (0..n).map(|_| self.uniform(lo, hi)).collect()
    }
}

/// How inputs of a case are filled.
#[derive(Clone, Copy, Debug)]
pub enum Fill {
    /// Uniform floats in a range.
    Uniform(f32, f32),
    /// Integers in `0..n` (indices).
    Index(usize),
    /// Distinct integers in `0..n`, one per element (SET_ROWS destinations).
    Permutation(usize),
    /// A causal mask: 0 where `i0 <= i1 + offset`, -inf elsewhere.
    Causal(usize),
}

/// A case's graph: inputs with how to fill them, and the output.
pub type CaseGraph = (Vec<(Tensor, Fill)>, Tensor);

/// Builds a case's graph from fresh tensors.
pub type BuildFn = Box<dyn Fn() -> Result<CaseGraph> + Send + Sync>;

/// One op test: builds its graph from fresh tensors each time it runs.
pub struct OpCase {
    /// ggml-style name with the parameters, e.g. `MUL_MAT(a=q4_0,m=16,n=3,k=64)`.
    pub name: String,
    /// Builds (inputs with their fill, output).
    pub build: BuildFn,
    /// NMSE bound.
    pub max_nmse: f64,
}

impl OpCase {
    /// The op's name: the case name up to its parameters (`MUL_MAT`).
    pub fn op_name(&self) -> &str {
        self.name.split('(').next().unwrap_or(&self.name)
    }
}

/// Result of one case on one backend.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// Within the bound.
    Pass {
        /// The error measured.
        nmse: f64,
    },
    /// Outside the bound, or a NaN where the CPU has none.
    Fail {
        /// The error measured.
        nmse: f64,
    },
    /// The backend does not support the op.
    Unsupported,
}

fn t(dt: DType, dims: &[usize]) -> Result<Tensor> {
    Tensor::new(dt, dims)
}

fn case(
    name: impl Into<String>,
    max_nmse: f64,
    build: impl Fn() -> Result<CaseGraph> + Send + Sync + 'static,
) -> OpCase {
    OpCase {
        name: name.into(),
        build: Box::new(build),
        max_nmse,
    }
}

const U: Fill = Fill::Uniform(-1.0, 1.0);

/// The float weight types of MUL_MAT.
pub const FLOAT_WEIGHTS: [DType; 3] = [DType::F32, DType::F16, DType::BF16];

/// ggml's "legacy" block quants (blocks of 32) that weights come in.
pub const LEGACY_QUANTS: [DType; 5] = [
    DType::Q4_0,
    DType::Q4_1,
    DType::Q5_0,
    DType::Q5_1,
    DType::Q8_0,
];

/// The K-quants and the IQ4 types (IQ4_NL has blocks of 32, the others
/// super-blocks of 256), with Q8_K partners (IQ4_NL: Q8_0).
pub const K_AND_IQ4_QUANTS: [DType; 7] = [
    DType::Q2_K,
    DType::Q3_K,
    DType::Q4_K,
    DType::Q5_K,
    DType::Q6_K,
    DType::IQ4_NL,
    DType::IQ4_XS,
];

/// Every block-quantized weight type: [`LEGACY_QUANTS`], then [`K_AND_IQ4_QUANTS`].
pub const QUANT_WEIGHTS: [DType; 12] = concat(LEGACY_QUANTS, K_AND_IQ4_QUANTS);

/// Every weight type of MUL_MAT: [`FLOAT_WEIGHTS`], then [`QUANT_WEIGHTS`].
pub const WEIGHT_TYPES: [DType; 15] = concat(FLOAT_WEIGHTS, QUANT_WEIGHTS);

/// `a` followed by `b` (`C` = `A + B`, checked at compile time).
const fn concat<const A: usize, const B: usize, const C: usize>(
    a: [DType; A],
    b: [DType; B],
) -> [DType; C] {
    assert!(A + B == C);
    let mut out = [DType::F32; C];
    let mut i = 0;
    while i < C {
        out[i] = if i < A { a[i] } else { b[i - A] };
        i += 1;
    }
    out
}

/// The suite: every op strata implements, with the types it supports.
pub fn cases() -> Vec<OpCase> {
    let mut v = Vec::new();
    type Bin = fn(&Tensor, &Tensor) -> Result<Tensor>;
    let bins: [(&str, Bin); 4] = [
        ("ADD", ops::add),
        ("SUB", ops::sub),
        ("MUL", ops::mul),
        ("DIV", ops::div),
    ];
    for (name, f) in bins {
        for dt in [DType::F32, DType::F16] {
            v.push(case(
                format!("{name}(type={dt},ne=[10,5,4,3],bcast=[1,5,1,3])"),
                1e-6,
                move || {
                    let a = t(dt, &[10, 5, 4, 3])?;
                    let b = t(dt, &[10, 1, 4, 1])?;
                    let fill_b = if name == "DIV" {
                        Fill::Uniform(0.5, 2.0)
                    } else {
                        U
                    };
                    Ok((vec![(a.clone(), U), (b.clone(), fill_b)], f(&a, &b)?))
                },
            ));
        }
    }
    for u in UnaryOp::ALL {
        v.push(case(format!("UNARY({u:?},type=f32)"), 1e-6, move || {
            let a = t(DType::F32, &[17, 3, 2])?;
            Ok((
                vec![(a.clone(), Fill::Uniform(-3.0, 3.0))],
                ops::unary(&a, u)?,
            ))
        }));
    }
    type Un = fn(&Tensor) -> Result<Tensor>;
    let uns: [(&str, Un, Fill); 10] = [
        ("SQR", ops::sqr, U),
        ("SQRT", ops::sqrt, Fill::Uniform(0.1, 4.0)),
        ("LOG", ops::log, Fill::Uniform(0.1, 4.0)),
        ("SIN", ops::sin, U),
        ("COS", ops::cos, U),
        ("SUM", ops::sum, U),
        ("SUM_ROWS", ops::sum_rows, U),
        ("MEAN", ops::mean, U),
        ("ARGMAX", ops::argmax, U),
        ("CONT", |a| ops::cont(&ops::transpose(a)?), U),
    ];
    for (name, f, fill) in uns {
        v.push(case(
            format!("{name}(type=f32,ne=[33,7])"),
            1e-6,
            move || {
                let a = t(DType::F32, &[33, 7])?;
                Ok((vec![(a.clone(), fill)], f(&a)?))
            },
        ));
    }
    v.push(case("SCALE(s=0.3,b=1.5)", 1e-6, || {
        let a = t(DType::F32, &[20, 3])?;
        Ok((vec![(a.clone(), U)], ops::scale_bias(&a, 0.3, 1.5)?))
    }));
    v.push(case("CLAMP(min=-0.5,max=0.5)", 1e-6, || {
        let a = t(DType::F32, &[20, 3])?;
        Ok((vec![(a.clone(), U)], ops::clamp(&a, -0.5, 0.5)?))
    }));
    v.push(case("ARGSORT(order=desc)", 0.0, || {
        let a = t(DType::F32, &[16, 5])?;
        Ok((vec![(a.clone(), U)], ops::argsort(&a, SortOrder::Desc)?))
    }));
    v.push(case("REPEAT(ne=[4,3]->[8,6,2])", 1e-6, || {
        let a = t(DType::F32, &[4, 3])?;
        let b = t(DType::F32, &[8, 6, 2])?;
        Ok((vec![(a.clone(), U), (b.clone(), U)], ops::repeat(&a, &b)?))
    }));
    for dim in 0..3 {
        v.push(case(format!("CONCAT(dim={dim})"), 1e-6, move || {
            let a = t(DType::F32, &[5, 4, 3])?;
            let mut nb = [5, 4, 3];
            nb[dim] = 2;
            let b = t(DType::F32, &nb)?;
            Ok((
                vec![(a.clone(), U), (b.clone(), U)],
                ops::concat(&a, &b, dim)?,
            ))
        }));
    }
    for g in GluOp::ALL {
        v.push(case(format!("GLU({g:?},split)"), 1e-6, move || {
            let a = t(DType::F32, &[24, 3])?;
            let b = t(DType::F32, &[24, 3])?;
            Ok((
                vec![(a.clone(), U), (b.clone(), U)],
                ops::glu_split(&a, &b, g)?,
            ))
        }));
        v.push(case(format!("GLU({g:?},fused,swapped)"), 1e-6, move || {
            let a = t(DType::F32, &[48, 3])?;
            Ok((vec![(a.clone(), U)], ops::glu(&a, g, true)?))
        }));
    }
    v.push(case("NORM(eps=1e-5)", 1e-6, || {
        let a = t(DType::F32, &[64, 5])?;
        Ok((vec![(a.clone(), U)], ops::norm(&a, 1e-5)?))
    }));
    v.push(case("RMS_NORM(eps=1e-5)", 1e-6, || {
        let a = t(DType::F32, &[64, 5, 2])?;
        Ok((vec![(a.clone(), U)], ops::rms_norm(&a, 1e-5)?))
    }));
    for a_t in WEIGHT_TYPES {
        // K in whole blocks: super-blocks of 256 for the K-quants and IQ4_XS.
        let shapes = if a_t.block_size() == 256 {
            [(16, 1, 256), (7, 9, 512), (33, 5, 768)]
        } else {
            [(16, 1, 64), (7, 9, 96), (33, 5, 256)]
        };
        for (m, n, k) in shapes {
            let tol = if a_t.is_quantized() { 1e-4 } else { 1e-5 };
            v.push(case(
                format!("MUL_MAT(type_a={a_t},m={m},n={n},k={k})"),
                tol,
                move || {
                    let a = t(a_t, &[k, m, 2])?;
                    let b = t(DType::F32, &[k, n, 4])?;
                    Ok((vec![(a.clone(), U), (b.clone(), U)], ops::mul_mat(&a, &b)?))
                },
            ));
        }
    }
    moe::moe_cases(&mut v);
    fused::fused_cases(&mut v);
    let tables = [DType::F32, DType::F16, DType::Q4_1, DType::Q8_0];
    for a_t in tables.into_iter().chain(K_AND_IQ4_QUANTS) {
        v.push(case(format!("GET_ROWS(type={a_t})"), 1e-6, move || {
            let a = t(a_t, &[a_t.block_size().max(64), 10, 2])?;
            let i = t(DType::I32, &[4, 2])?;
            Ok((
                vec![(a.clone(), U), (i.clone(), Fill::Index(10))],
                ops::get_rows(&a, &i)?,
            ))
        }));
    }
    for d_t in [DType::F32, DType::F16] {
        v.push(case(format!("SET_ROWS(type={d_t})"), 1e-6, move || {
            let dst = t(d_t, &[32, 8])?;
            let rows = t(DType::F32, &[32, 3])?;
            let idx = t(DType::I32, &[3])?;
            Ok((
                vec![
                    (dst.clone(), U),
                    (rows.clone(), U),
                    (idx.clone(), Fill::Permutation(8)),
                ],
                ops::set_rows(&dst, &rows, &idx)?,
            ))
        }));
    }
    let dsts = [DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0];
    for d_t in dsts.into_iter().chain(K_AND_IQ4_QUANTS) {
        v.push(case(format!("CPY(f32->{d_t})"), 1e-4, move || {
            let ne0 = d_t.block_size().max(64);
            let a = t(DType::F32, &[ne0, 3])?;
            let b = t(d_t, &[ne0, 3])?;
            Ok((vec![(a.clone(), U), (b.clone(), U)], ops::cpy(&a, &b)?))
        }));
    }
    v.push(case("DIAG_MASK_INF(n_past=2)", 1e-6, || {
        let a = t(DType::F32, &[8, 6, 2])?;
        Ok((vec![(a.clone(), U)], ops::diag_mask_inf(&a, 2)?))
    }));
    for (mask_t, bias) in [
        (None, 0.0),
        (Some(DType::F32), 0.0),
        (Some(DType::F16), 8.0),
    ] {
        v.push(case(
            format!("SOFT_MAX(mask={mask_t:?},max_bias={bias})"),
            1e-6,
            move || {
                let a = t(DType::F32, &[12, 5, 4])?;
                let mut ins = vec![(a.clone(), Fill::Uniform(-4.0, 4.0))];
                let m = match mask_t {
                    Some(mt) => {
                        let m = t(mt, &[12, 5])?;
                        ins.push((m.clone(), Fill::Causal(7)));
                        Some(m)
                    }
                    None => None,
                };
                Ok((ins, ops::soft_max_ext(&a, m.as_ref(), 0.7, bias)?))
            },
        ));
    }
    for mode in [RopeMode::Normal, RopeMode::Neox] {
        for yarn in [false, true] {
            v.push(case(
                format!("ROPE(mode={mode:?},yarn={yarn})"),
                1e-6,
                move || {
                    let a = t(DType::F32, &[64, 3, 5])?;
                    let p = t(DType::I32, &[5])?;
                    let mut rp = RopeParams::new(64, mode, 10000.0);
                    if yarn {
                        rp.freq_scale = 0.25;
                        rp.ext_factor = 1.0;
                        rp.n_ctx_orig = 4096;
                    }
                    Ok((
                        vec![(a.clone(), U), (p.clone(), Fill::Index(100))],
                        ops::rope(&a, &p, rp)?,
                    ))
                },
            ));
        }
    }
    for kv_t in [DType::F32, DType::F16] {
        v.push(case(
            format!("FLASH_ATTN_EXT(kv={kv_t},gqa=3,mask,softcap)"),
            1e-5,
            move || {
                let q = t(DType::F32, &[64, 4, 6])?;
                let k = t(kv_t, &[64, 10, 2])?;
                let vv = t(kv_t, &[64, 10, 2])?;
                let m = t(DType::F16, &[10, 4])?;
                let out = ops::flash_attn_ext(&q, &k, &vv, Some(&m), 0.125, 0.0, 30.0)?;
                Ok((vec![(q, U), (k, U), (vv, U), (m, Fill::Causal(6))], out))
            },
        ));
    }
    v
}

fn fill_values(t: &Tensor, fill: Fill, rng: &mut Rng) -> Vec<f32> {
    let n = t.nelements();
    match fill {
        Fill::Uniform(lo, hi) => (0..n).map(|_| rng.uniform(lo, hi)).collect(),
        Fill::Index(m) => (0..n).map(|_| rng.below(m) as f32).collect(),
        Fill::Permutation(m) => {
            let m = m.max(1);
            let mut all: Vec<usize> = (0..m).collect();
            for i in (1..m).rev() {
                all.swap(i, (rng.next_u64() % (i as u64 + 1)) as usize);
            }
            (0..n).map(|i| all[i % m] as f32).collect()
        }
        Fill::Causal(off) => {
            let ne0 = t.ne()[0];
            (0..n)
                .map(|i| {
                    if i % ne0 <= (i / ne0) % t.ne()[1] + off {
                        0.0
                    } else {
                        f32::NEG_INFINITY
                    }
                })
                .collect()
        }
    }
}

/// What one backend computed for a case.
struct Computed {
    /// Every output value (as f32).
    out: Vec<f32>,
    /// For a TOP_K output: the rows it ranked.
    ranked: Option<Ranked>,
}

/// The source of a TOP_K: its values, row by row, and the k it picks.
struct Ranked {
    src: Vec<f32>,
    row_len: usize,
    k: usize,
}

/// Builds the case, allocates it for `backend`, fills inputs from `seed`,
/// computes, and returns every output value (and a TOP_K's source).
fn compute_on(case: &OpCase, backend: &mut dyn Backend, seed: u64) -> Result<Option<Computed>> {
    let (inputs, out) = (case.build)()?;
    let g = Graph::build(&[out.clone()]);
    // the whole graph runs on `backend`: every node of it must be supported
    // (MUL_MAT_ID's ids may come from an ARGSORT the backend lacks)
    if !g.nodes().iter().all(|n| backend.supports_op(n)) {
        return Ok(None);
    }
    let _bufs = alloc_graph(&g, &backend.default_buffer_type())?;
    let mut rng = Rng::new(seed);
    for (t, fill) in &inputs {
        let vals = fill_values(t, *fill, &mut rng);
        if t.dtype() == DType::I32 {
            t.write_i32(&vals.iter().map(|&x| x as i32).collect::<Vec<_>>())?;
        } else {
            t.write_f32(&vals)?;
        }
    }
    backend.graph_compute(&g)?;
    backend.synchronize()?;
    let ranked = match (out.op(), out.src(0)) {
        (ops::Op::TopK, Some(src)) => Some(Ranked {
            src: src.to_f32_vec()?,
            row_len: src.ne()[0],
            k: out.ne()[0],
        }),
        _ => None,
    };
    Ok(Some(Computed {
        out: out.to_f32_vec()?,
        ranked,
    }))
}

/// Normalized mean squared error between two outputs; infinities that agree count as equal.
pub fn nmse(got: &[f32], want: &[f32]) -> f64 {
    let (mut err, mut norm) = (0.0f64, 0.0f64);
    for (&g, &w) in got.iter().zip(want) {
        if g == w {
            norm += if w.is_finite() {
                (w as f64) * (w as f64)
            } else {
                0.0
            };
            continue;
        }
        let d = g as f64 - w as f64;
        err += d * d;
        norm += (w as f64) * (w as f64);
    }
    if got.len() != want.len() {
        return f64::INFINITY;
    }
    if norm == 0.0 {
        err
    } else {
        err / norm
    }
}

/// TOP_K's error as ggml defines the op (the set of the `k` largest of each
/// row, in no promised order; test-backend-ops compares it so): the
/// fraction of rows where `got` is not a right answer, 0 when every row is.
/// A row of `got` is right when it holds `k` distinct integer indices into
/// its row of `src` (rows of `row_len` values) and either names the same
/// set of indices as `want`'s row, or, where values tie, indices whose
/// values in `src` are the same multiset as those `want`'s indices point at.
/// Lengths that disagree give infinity.
///
/// ```
/// use strata::conformance::top_k_error;
/// let src = [0.1, 0.9, 0.5, 0.9];
/// assert_eq!(top_k_error(&[3.0, 1.0], &[1.0, 3.0], &src, 4, 2), 0.0); // reordered
/// assert_eq!(top_k_error(&[1.0, 2.0], &[1.0, 3.0], &src, 4, 2), 1.0); // 0.5 is not a top value
/// ```
pub fn top_k_error(got: &[f32], want: &[f32], src: &[f32], row_len: usize, k: usize) -> f64 {
    if got.len() != want.len() || k == 0 || row_len == 0 {
        return if got.len() == want.len() && got.is_empty() {
            0.0
        } else {
            f64::INFINITY
        };
    }
    let rows = src.len() / row_len;
    if got.len() != rows * k || src.len() != rows * row_len {
        return f64::INFINITY;
    }
    let bad = (0..rows)
        .filter(|&r| {
            let row = &src[r * row_len..(r + 1) * row_len];
            let span = r * k..(r + 1) * k;
            !top_k_row_ok(&got[span.clone()], &want[span], row)
        })
        .count();
    bad as f64 / rows as f64
}

/// Whether one row of TOP_K indices `got` is as right as `want`'s (see
/// [`top_k_error`]).
fn top_k_row_ok(got: &[f32], want: &[f32], row: &[f32]) -> bool {
    // sorted distinct indices into `row`, or None
    let indices = |v: &[f32]| -> Option<Vec<usize>> {
        let mut ix = Vec::with_capacity(v.len());
        for &x in v {
            if !(x >= 0.0 && x.fract() == 0.0 && (x as usize) < row.len()) {
                return None;
            }
            ix.push(x as usize);
        }
        ix.sort_unstable();
        ix.windows(2).all(|w| w[0] != w[1]).then_some(ix)
    };
    let (Some(g), Some(w)) = (indices(got), indices(want)) else {
        return false;
    };
    if g == w {
        return true;
    }
    let values = |ix: &[usize]| {
        let mut v: Vec<f32> = ix.iter().map(|&i| row[i]).collect();
        v.sort_unstable_by(f32::total_cmp);
        v
    };
    values(&g)
        .iter()
        .zip(&values(&w))
        .all(|(a, b)| a == b || (a.is_nan() && b.is_nan()))
}

/// Runs one case on `backend` and on a local CPU backend with the same data.
/// Outputs are compared by [`nmse`], a TOP_K's by [`top_k_error`] (its
/// order is unspecified).
pub fn run_case(case: &OpCase, backend: &mut dyn Backend, seed: u64) -> Result<Outcome> {
    let Some(got) = compute_on(case, backend, seed)? else {
        return Ok(Outcome::Unsupported);
    };
    let mut cpu = CpuBackend::new(1);
    let want = compute_on(case, &mut cpu, seed)?.ok_or_else(|| crate::Error::Unsupported {
        backend: "CPU".into(),
        what: format!("conformance case {}", case.name),
    })?;
    let e = match &want.ranked {
        Some(r) => top_k_error(&got.out, &want.out, &r.src, r.row_len, r.k),
        None => nmse(&got.out, &want.out),
    };
    let nan = got
        .out
        .iter()
        .zip(&want.out)
        .any(|(g, w)| g.is_nan() && !w.is_nan());
    Ok(if e <= case.max_nmse && !nan {
        Outcome::Pass { nmse: e }
    } else {
        Outcome::Fail { nmse: e }
    })
}

/// Counts of one run of the suite.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    /// Cases within their bound.
    pub passed: usize,
    /// Cases outside their bound, or that returned an error.
    pub failed: usize,
    /// Cases the backend does not support.
    pub unsupported: usize,
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} passed, {} failed ({} not supported)",
            self.passed, self.failed, self.unsupported
        )
    }
}

/// Runs every case whose name contains `filter` (every case for `None`) on
/// `backend` with inputs from `seed`; `report` sees each case's result as it
/// comes. An error in a case counts as a failure and the run goes on.
pub fn run_suite(
    backend: &mut dyn Backend,
    filter: Option<&str>,
    seed: u64,
    mut report: impl FnMut(&OpCase, &Result<Outcome>),
) -> Summary {
    let mut s = Summary::default();
    for case in cases() {
        if filter.is_some_and(|f| !case.name.contains(f)) {
            continue;
        }
        let r = run_case(&case, backend, seed);
        match r {
            Ok(Outcome::Pass { .. }) => s.passed += 1,
            Ok(Outcome::Unsupported) => s.unsupported += 1,
            Ok(Outcome::Fail { .. }) | Err(_) => s.failed += 1,
        }
        report(&case, &r);
    }
    s
}

/// A backend under test, and whatever must outlive it (the server a remote
/// backend talks to, say). The backend is dropped first.
pub struct UnderTest {
    backend: Box<dyn Backend>,
    _keep: Box<dyn Any>,
}

impl UnderTest {
    /// A backend to test.
    pub fn new(backend: impl Backend + 'static) -> UnderTest {
        UnderTest::boxed(Box::new(backend))
    }

    /// A boxed backend to test (as [`crate::backend::Device::init_backend`] returns).
    pub fn boxed(backend: Box<dyn Backend>) -> UnderTest {
        UnderTest {
            backend,
            _keep: Box::new(()),
        }
    }

    /// Keeps `guard` alive until the backend has been dropped.
    pub fn keeping(self, guard: impl Any) -> UnderTest {
        UnderTest {
            backend: self.backend,
            _keep: Box::new(guard),
        }
    }

    /// The backend.
    pub fn backend(&mut self) -> &mut dyn Backend {
        self.backend.as_mut()
    }
}

/// What [`check_device`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeviceCheck {
    /// Every case the device supports passed, and it supports exactly the
    /// cases of the ops it should.
    Passed(Summary),
    /// The device cannot be made here (why: e.g. the CPU lacks an
    /// instruction-set level).
    Unavailable(String),
    /// A case failed, or the device ran a different set of cases than
    /// expected (the summary and the cases concerned).
    Failed(String),
}

/// The seed [`check_device`] fills inputs from.
pub const DEVICE_CHECK_SEED: u64 = 1;

/// Runs the whole suite on the device `make` returns (an error: the device
/// is [`DeviceCheck::Unavailable`]). With `ops`, the device must pass exactly
/// the cases of those ops ([`OpCase::op_name`]; a case of several ops joined
/// by `+` when it has all of them) and report the others as unsupported;
/// without, every case of the CPU suite. At least one case
/// must run.
pub fn check_device(make: impl FnOnce() -> Result<UnderTest>, ops: Option<&[&str]>) -> DeviceCheck {
    let mut dut = match make() {
        Ok(d) => d,
        Err(e) => return DeviceCheck::Unavailable(e.to_string()),
    };
    // a case of several ops (`MUL_MAT+ADD`, a run a backend may fuse) is
    // wanted when every one of its ops is
    let wanted = |c: &OpCase| ops.is_none_or(|o| c.op_name().split('+').all(|p| o.contains(&p)));
    let mut wrong = Vec::new();
    let summary = run_suite(dut.backend(), None, DEVICE_CHECK_SEED, |case, r| {
        let ok = match r {
            Ok(Outcome::Pass { .. }) => wanted(case),
            Ok(Outcome::Unsupported) => !wanted(case),
            _ => false,
        };
        if !ok {
            let expected = if wanted(case) {
                "a pass"
            } else {
                "unsupported"
            };
            wrong.push(format!("{}: {r:?}, expected {expected}", case.name));
        }
    });
    let all = cases();
    let expected = all.iter().filter(|c| wanted(c)).count();
    if wrong.is_empty() && summary.passed == expected && summary.passed > 0 {
        DeviceCheck::Passed(summary)
    } else {
        DeviceCheck::Failed(format!(
            "{summary}; expected {expected} passed, 0 failed ({} not supported) of the \
             CPU suite's {}:\n  {}",
            all.len() - expected,
            all.len(),
            wrong.join("\n  ")
        ))
    }
}

/// Whether a `cargo test` run must run the CPU at `isa`: always for
/// [`Isa::Scalar`], otherwise when the comma-separated environment
/// variable `STRATA_REQUIRE_ISA` names it (set it on machines known to
/// have the level, so that a detection bug cannot skip its kernels).
pub fn isa_required(isa: Isa) -> bool {
    isa == Isa::Scalar
        || std::env::var("STRATA_REQUIRE_ISA").is_ok_and(|v| {
            v.split(',')
                .any(|n| n.trim().eq_ignore_ascii_case(isa.name()))
        })
}

/// Stamps a test module `$name` that runs the conformance suite on one
/// device ([`check_device`]) and prints its summary, `N passed, 0 failed`.
///
/// - `$make`: `impl FnOnce() -> strata::Result<UnderTest>`; an error means
///   the device cannot be made here: the test prints why and passes, unless
///   `required` (default `true`) holds.
/// - `ops = [..]`: the ops the device runs (default: every op of the suite).
///
/// The module sees its parent's names (`use super::*`).
///
/// ```
/// use strata::conformance::UnderTest;
/// use strata::cpu::CpuBackend;
///
/// strata::conformance_suite!(cpu_two_threads, || Ok(UnderTest::new(CpuBackend::new(2))));
/// strata::conformance_suite!(
///     cpu_adds,
///     || Ok(UnderTest::new(CpuBackend::new(1))),
///     ops = ["ADD"],
///     required = false
/// );
/// # fn main() {}
/// ```
#[macro_export]
macro_rules! conformance_suite {
    ($name:ident, $make:expr $(, ops = $ops:expr)? $(, required = $req:expr)? $(,)?) => {
        mod $name {
            #[allow(unused_imports)]
            use super::*;

            #[test]
            fn conformance() {
                let device = stringify!($name);
                let ops: ::std::option::Option<&[&str]> = None;
                $(
                    let list = $ops;
                    let ops: ::std::option::Option<&[&str]> = Some(&list[..]);
                )?
                match $crate::conformance::check_device($make, ops) {
                    $crate::conformance::DeviceCheck::Passed(s) => println!("{device}: {s}"),
                    $crate::conformance::DeviceCheck::Unavailable(why) => {
                        let required: bool = true $(&& $req)?;
                        assert!(!required, "{device}: required, but cannot run here: {why}");
                        println!("{device}: not run: {why}");
                    }
                    $crate::conformance::DeviceCheck::Failed(what) => panic!("{device}: {what}"),
                }
            }
        }
    };
}
