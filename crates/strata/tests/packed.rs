//! The packed weight layout (`strata::quant::packed`), its kernels and the
//! `CPU_PACKED` buffer type.
//!
//! * Layout: `unpack(pack(x)) == x` and `pack(unpack(y)) == y` for arbitrary
//!   bytes (NaN / inf f16 scales included), `unpack_row` equals the row.
//! * MUL_MAT with a packed weight at every level this CPU runs, against the
//!   unpacked scalar reference (`vec_dot_fn_for(Scalar, ..)` on activations
//!   quantized by the scalar quantizer) within the bound `quant::simd`
//!   documents, `(nb + 8) · 2u · Σ_b (|d_w d_a| Σ|q_w q_a| + |m_w s_a|)` per
//!   output; bit-exact on integer data (unit scales, where every sum is an
//!   exactly representable integer); bit-identical across 1, 2 and 3
//!   threads and whatever columns share a tile (every tile width 1 ..= 8:
//!   on aarch64 with `i8mm`, the `smmla` tiles against the one-column
//!   `sdot` tile); bit-identical to the
//!   unpacked path at levels without packed kernels (they unpack and reuse
//!   it). The K-quants (Q2_K .. Q6_K, IQ4_XS) give the scalar reference's bits on
//!   every level (their kernels add the reference's f32 terms in its order).
//! * The buffer: writes / reads (whole and partial), fill, clear, copies,
//!   GET_ROWS, and refusal of every other consumer with a typed error.

mod common;

use common::qblock::{self, block_magnitude, unit_scales, QUANT as TYPES, U};
use common::Rng;
use proptest::prelude::*;
use strata::backend::{alloc_tensors, tensor_copy, Backend, TensorLayout};
use strata::cpu::{alloc_graph_host, cpu_buffer_type, packed_buffer_type, CpuBackend};
use strata::isa::Isa;
use strata::quant::packed::{self, ROWS};
use strata::quant::simd;
use strata::quant::{self, QK};
use strata::{ops, DType, Error, Graph, Tensor};

/// The 32-wide packable types: the legacy ones and IQ4_NL.
const W32: [DType; 6] = [
    TYPES[0],
    TYPES[1],
    TYPES[2],
    TYPES[3],
    TYPES[4],
    DType::IQ4_NL,
];

/// The packable K-quants (256-element super-blocks, Q8_K activations).
const KQ: [DType; 6] = packed::K_TYPES;

/// Every packable type: the 32-wide ones and the K-quants.
const ALL: [DType; 12] = [
    W32[0], W32[1], W32[2], W32[3], W32[4], W32[5], KQ[0], KQ[1], KQ[2], KQ[3], KQ[4], KQ[5],
];

/// `k` rounded up to a whole number of `t`'s blocks (256 for the K-quants).
fn k_for(t: DType, k: usize) -> usize {
    k.next_multiple_of(t.block_size())
}

fn levels() -> Vec<Isa> {
    Isa::ALL.into_iter().filter(|i| i.is_supported()).collect()
}

fn random_bytes(rng: &mut Rng, n: usize) -> Vec<u8> {
    (0..n).map(|_| rng.next_u64() as u8).collect()
}

/// Random weights of `t`: quantized from uniform data, then (when
/// `scramble`) every quant byte replaced by random bits.
fn weights(rng: &mut Rng, t: DType, k: usize, rows: usize, scramble: bool) -> Vec<u8> {
    let rs = t.row_size(k);
    let mut out = vec![0u8; rs * rows];
    let q = simd::quantize_row_fn_for(Isa::Scalar, t).unwrap();
    for row in out.chunks_exact_mut(rs) {
        q(&rng.vec(k, -1.5, 1.0), row);
        if scramble && t.block_size() == QK {
            qblock::scramble(t, row, rng);
        } else if scramble {
            // K-quants: random scales and quants, the f16 header kept.
            let body = match t {
                DType::Q6_K => 0..208,
                DType::Q2_K => 0..80,
                DType::Q3_K => 0..108,
                _ => 4..t.type_size(),
            };
            for b in row.chunks_exact_mut(t.type_size()) {
                for q in &mut b[body.clone()] {
                    *q = rng.next_u64() as u8;
                }
            }
        }
    }
    out
}

// ---------------------------------------------------------------- layout

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn pack_unpack_round_trip_any_bytes(
        ti in 0usize..ALL.len(),
        groups in 1usize..4,
        ki in 0usize..5,
        planes in 1usize..3,
        seed in any::<u64>(),
    ) {
        let t = ALL[ti];
        let k = k_for(t, [32, 64, 96, 576, 1536][ki]);
        let ne = [k, groups * ROWS, planes, 1];
        let n = t.row_size(k) * ne[1] * planes;
        let mut rng = Rng::new(seed);
        let mut x = random_bytes(&mut rng, n);
        // Some NaN / inf / subnormal scale patterns.
        for (i, b) in x.chunks_exact_mut(t.type_size()).enumerate() {
            let pat: u16 = [0x7e01, 0xfc00, 0x0001, 0x7c00][i % 4];
            if i % 3 == 0 {
                b[..2].copy_from_slice(&pat.to_le_bytes());
            }
        }
        let mut p = vec![0u8; n];
        packed::pack(t, ne, &x, &mut p).unwrap();
        let mut back = vec![0u8; n];
        packed::unpack(t, ne, &p, &mut back).unwrap();
        prop_assert_eq!(&back, &x);
        // pack is a bijection: packing the unpacked bytes of any buffer restores it.
        let y = random_bytes(&mut rng, n);
        packed::unpack(t, ne, &y, &mut back).unwrap();
        packed::pack(t, ne, &back, &mut p).unwrap();
        prop_assert_eq!(&p, &y);
        // unpack_row of every row of the packed x is that row.
        packed::pack(t, ne, &x, &mut p).unwrap();
        let rs = t.row_size(k);
        let mut row = vec![0u8; rs];
        for r in 0..ne[1] * planes {
            packed::unpack_row(t, ne, &p, r, &mut row).unwrap();
            prop_assert_eq!(&row[..], &x[r * rs..(r + 1) * rs], "row {}", r);
        }
    }
}

#[test]
fn layout_rejects_ineligible_shapes_and_sizes() {
    let t = DType::Q4_0;
    let mut d = vec![0u8; t.row_size(32) * 8];
    assert!(!packed::eligible(t, [32, 8, 1, 1]));
    assert!(!packed::eligible(DType::F16, [32, 16, 1, 1]));
    assert!(!packed::eligible(DType::Q8_1, [32, 16, 1, 1]));
    assert!(packed::eligible(t, [32, 16, 1, 1]));
    // K-quants: whole 256-element super-blocks only.
    assert!(!packed::eligible(DType::Q4_K, [128, 16, 1, 1]));
    assert!(packed::eligible(DType::Q4_K, [256, 16, 1, 1]));
    assert!(packed::eligible(DType::Q6_K, [512, 32, 2, 1]));
    assert!(!packed::eligible(DType::Q6_K, [512, 8, 1, 1]));
    assert!(packed::eligible(DType::Q5_K, [256, 16, 1, 1]));
    assert!(!packed::eligible(DType::Q5_K, [256, 24, 1, 1]));
    assert!(packed::eligible(DType::Q3_K, [256, 16, 1, 1]));
    assert!(!packed::eligible(DType::IQ4_XS, [32, 16, 1, 1]));
    assert!(packed::eligible(DType::Q2_K, [256, 16, 1, 1]));
    let e = packed::pack(t, [32, 8, 1, 1], &d.clone(), &mut d).unwrap_err();
    assert!(
        matches!(&e, Error::BadValue { arg, value, .. }
            if arg == "pack: tensor" && value == "q4_0 [32, 8, 1, 1]"),
        "{e}"
    );
    let e = packed::pack(t, [32, 16, 1, 1], &d.clone(), &mut d).unwrap_err();
    assert!(
        matches!(&e, Error::Length { what, expected: 288, got: 144 }
            if what.starts_with("pack: input bytes")),
        "{e}"
    );
    assert!(e.to_string().contains("bytes"), "{e}");
    let big = vec![0u8; 2 * d.len()];
    let e = packed::unpack(t, [32, 16, 1, 1], &big, &mut d).unwrap_err();
    assert!(
        matches!(&e, Error::Length { what, expected: 288, got: 144 }
            if what.starts_with("unpack: output bytes")),
        "{e}"
    );
    let mut row = vec![0u8; t.row_size(32)];
    let e = packed::unpack_row(t, [32, 16, 1, 1], &big, 16, &mut row).unwrap_err();
    assert!(
        matches!(
            &e,
            Error::IndexOutOfRange {
                index: 16,
                len: 16,
                ..
            }
        ),
        "{e}"
    );
    let e = packed::unpack_row(t, [32, 16, 1, 1], &big, 3, &mut big[..4].to_vec()).unwrap_err();
    assert!(
        matches!(
            &e,
            Error::Length {
                expected: 18,
                got: 4,
                ..
            }
        ),
        "{e}"
    );
    packed::unpack_row(t, [32, 16, 1, 1], &big, 15, &mut row).unwrap();
}

// ---------------------------------------------------------------- kernels

/// A packed weight tensor `[k, m, a2, a3]` holding the ggml bytes `w`.
fn packed_weight(t: DType, ne: [usize; 4], w: &[u8]) -> (Tensor, strata::backend::MultiBuffer) {
    let a = Tensor::new(t, &ne).unwrap().with_name("w");
    let bufs = alloc_tensors(std::slice::from_ref(&a), &packed_buffer_type()).unwrap();
    assert_eq!(bufs[0].tensor_layout(&a), TensorLayout::Packed);
    a.write_bytes(0, w).unwrap();
    (a, bufs)
}

struct MatCase {
    t: DType,
    k: usize,
    m: usize,
    n: usize,
    a23: [usize; 2],
    b23: [usize; 2],
    transposed: bool,
}

impl MatCase {
    /// `w` [k, m] of type `t` times `b` [k, n], neither broadcast nor
    /// transposed.
    fn plain(t: DType, k: usize, m: usize, n: usize) -> MatCase {
        MatCase {
            t,
            k,
            m,
            n,
            a23: [1, 1],
            b23: [1, 1],
            transposed: false,
        }
    }
}

/// Runs `mul_mat(w, b)` with `w` packed (and, when `plain`, unpacked) at
/// level `isa` with `nth` threads; `bv` are b's values in logical order.
fn run_mul_mat(c: &MatCase, w: &[u8], bv: &[f32], isa: Isa, nth: usize, plain: bool) -> Vec<f32> {
    let ne = [c.k, c.m, c.a23[0], c.a23[1]];
    let (a, _abufs) = if plain {
        let a = Tensor::new(c.t, &ne).unwrap().with_name("w");
        let bufs = alloc_tensors(std::slice::from_ref(&a), &cpu_buffer_type()).unwrap();
        a.write_bytes(0, w).unwrap();
        (a, bufs)
    } else {
        packed_weight(c.t, ne, w)
    };
    let [b2, b3] = c.b23;
    let (base, b) = if c.transposed {
        let base = Tensor::new(DType::F32, &[c.n, c.k, b2, b3]).unwrap();
        (base.clone(), ops::transpose(&base).unwrap())
    } else {
        let base = Tensor::new(DType::F32, &[c.k, c.n, b2, b3]).unwrap();
        (base.clone(), base)
    };
    let out = ops::mul_mat(&a, &b).unwrap();
    let g = Graph::build(std::slice::from_ref(&out));
    let _bufs = alloc_graph_host(&g).unwrap();
    // base holds b in memory order: transposed bases store [n, k] rows.
    let mut mem = vec![0f32; bv.len()];
    for p in 0..b2 * b3 {
        for j in 0..c.n {
            for x in 0..c.k {
                let v = bv[(p * c.n + j) * c.k + x];
                if c.transposed {
                    mem[(p * c.k + x) * c.n + j] = v;
                } else {
                    mem[(p * c.n + j) * c.k + x] = v;
                }
            }
        }
    }
    base.write_f32(&mem).unwrap();
    // Stale outputs (a reused buffer) must not leak into the result: every
    // kernel writes each output, none adds to what was there.
    out.write_f32(&vec![f32::NAN; out.nelements()]).unwrap();
    let mut cpu = CpuBackend::new(nth);
    cpu.set_isa(isa).unwrap();
    cpu.graph_compute(&g).unwrap();
    out.to_f32_vec().unwrap()
}

/// Scalar reference per output, and the bound per output (0 for the
/// K-quants, whose kernels give the reference's bits).
fn reference(c: &MatCase, w: &[u8], bv: &[f32]) -> (Vec<f32>, Vec<f64>) {
    let yt = quant::vec_dot_type(c.t);
    let rs = c.t.row_size(c.k);
    let dot = simd::vec_dot_fn_for(Isa::Scalar, c.t).unwrap();
    let q = simd::quantize_row_fn_for(Isa::Scalar, yt).unwrap();
    let [b2, b3] = c.b23;
    let (r2, r3) = (b2 / c.a23[0], b3 / c.a23[1]);
    let nb = c.k / QK;
    let mut got = Vec::new();
    let mut bound = Vec::new();
    let mut y = vec![0u8; yt.row_size(c.k)];
    for i3 in 0..b3 {
        for i2 in 0..b2 {
            for j in 0..c.n {
                let col = &bv[((i3 * b2 + i2) * c.n + j) * c.k..][..c.k];
                q(col, &mut y);
                for r in 0..c.m {
                    let row = ((i3 / r3 * c.a23[0] + i2 / r2) * c.m + r) * rs;
                    let x = &w[row..row + rs];
                    got.push(dot(c.k, x, &y));
                    bound.push(if c.t.block_size() == QK {
                        (nb as f64 + 8.0) * 2.0 * U * block_magnitude(c.t, x, &y)
                    } else {
                        0.0
                    });
                }
            }
        }
    }
    (got, bound)
}

fn cases() -> Vec<MatCase> {
    let ns = [1usize, 2, 3, 4, 5, 7, 8, 9, 16, 33, 512];
    let ms = [16usize, 32, 48, 192];
    let ks = [32usize, 64, 576, 1536];
    let mut out = Vec::new();
    for (i, &n) in ns.iter().enumerate() {
        let (mut m, mut k) = (ms[i % 4], ks[(i + i / 4) % 4]);
        if n == 512 {
            (m, k) = (48, 64);
        }
        if n >= 16 && k == 1536 {
            k = 576;
        }
        out.push((m, k, n));
    }
    // Every m with every k at n = 1 and n = 9.
    for &m in &ms {
        for &k in &ks {
            out.push((m, k, 1));
            out.push((m, k, 9));
        }
    }
    // Broadcasting over dims 2 and 3, non-contiguous activations.
    let broadcast = [
        (32, 64, 5, [2, 1], [4, 3], true),
        (16, 96, 11, [1, 3], [2, 3], false),
    ];
    let mut cases = Vec::new();
    for t in W32 {
        let plain = out
            .iter()
            .enumerate()
            .map(|(i, &(m, k, n))| (m, k, n, [1, 1], [1, 1], i % 3 == 1));
        for (m, k, n, a23, b23, transposed) in plain.chain(broadcast) {
            cases.push(MatCase {
                t,
                k,
                m,
                n,
                a23,
                b23,
                transposed,
            });
        }
    }
    cases
}

#[test]
fn packed_mul_mat_matches_scalar_reference_on_every_level() {
    let mut rng = Rng::new(5);
    for (ci, c) in cases().iter().enumerate() {
        let rows = c.m * c.a23[0] * c.a23[1];
        let w = weights(&mut rng, c.t, c.k, rows, ci % 2 == 1);
        let cols = c.n * c.b23[0] * c.b23[1];
        let bv = rng.vec(c.k * cols, -2.0, 1.5);
        let (want, bound) = reference(c, &w, &bv);
        for isa in levels() {
            let got = run_mul_mat(c, &w, &bv, isa, 2, false);
            assert_eq!(got.len(), want.len());
            for (i, ((&g, &r), &b)) in got.iter().zip(&want).zip(&bound).enumerate() {
                let err = (f64::from(g) - f64::from(r)).abs();
                assert!(
                    err <= b,
                    "{isa} {} k={} m={} n={} a23={:?} b23={:?}: output {i}: {g:e} vs {r:e} \
                     (|err| {err:e} > {b:e})",
                    c.t,
                    c.k,
                    c.m,
                    c.n,
                    c.a23,
                    c.b23
                );
            }
            if !packed::has_kernels(isa, c.t) {
                let plain = run_mul_mat(c, &w, &bv, isa, 2, true);
                assert_eq!(
                    bits(&got),
                    bits(&plain),
                    "{isa} {}: fallback = unpacked path",
                    c.t
                );
            }
        }
    }
}

/// The K-quants at every level: the scalar reference's bits (tile kernels
/// at AVX2 and above and at NEON with `dotprod`, the unpacking fallback
/// elsewhere), over tile widths 1..=8 and
/// wider, transposed and broadcast activations, scrambled scales.
#[test]
fn packed_k_mul_mat_is_the_scalar_reference_on_every_level() {
    let mut rng = Rng::new(6);
    let shapes = [
        (16, 256, 1),
        (32, 768, 2),
        (48, 1536, 3),
        (16, 512, 4),
        (32, 256, 5),
        (48, 1024, 6),
        (16, 768, 7),
        (32, 512, 8),
        (16, 256, 9),
        (48, 256, 33),
        (32, 512, 100),
    ];
    for t in KQ {
        let mut cases: Vec<MatCase> = shapes
            .iter()
            .enumerate()
            .map(|(i, &(m, k, n))| MatCase {
                t,
                k,
                m,
                n,
                a23: [1, 1],
                b23: [1, 1],
                transposed: i % 3 == 1,
            })
            .collect();
        cases.push(MatCase {
            t,
            k: 256,
            m: 32,
            n: 5,
            a23: [2, 1],
            b23: [4, 3],
            transposed: true,
        });
        for (ci, c) in cases.iter().enumerate() {
            let rows = c.m * c.a23[0] * c.a23[1];
            let w = weights(&mut rng, t, c.k, rows, ci % 2 == 0);
            let bv = rng.vec(c.k * c.n * c.b23[0] * c.b23[1], -2.0, 1.5);
            let (want, _) = reference(c, &w, &bv);
            for isa in levels() {
                let got = run_mul_mat(c, &w, &bv, isa, 2, false);
                assert_eq!(
                    bits(&got),
                    bits(&want),
                    "{isa} {t} m={} k={} n={}",
                    c.m,
                    c.k,
                    c.n
                );
            }
        }
    }
}

/// The K-quants' i16 bounds: every quant at its maximum (Q2_K 3, Q3_K 7
/// before its offset, Q4_K 15, Q5_K 31, Q6_K 63, IQ4_XS the table's -127)
/// against activations that all quantize to ±127 (a constant column), so the i16 partial sums reach their documented
/// bounds; a kernel that sums more products in i16 than its bound allows
/// wraps and misses the reference's bits.
#[test]
fn packed_k_extreme_quants_stay_exact() {
    let mut rng = Rng::new(31);
    for t in KQ {
        let (m, k) = (16, 512);
        let mut w = weights(&mut rng, t, k, m, true);
        // The quant bytes and the byte that gives their largest magnitude
        // (IQ4_XS: index 0, the table's -127; Q3_K: the high bits set and
        // the low ones 3, the unsigned 7 its kernel multiplies).
        let (quants, fill) = match t {
            DType::Q6_K => (0..192, 0xff),
            DType::Q5_K => (16..176, 0xff),
            DType::Q2_K => (16..80, 0xff),
            DType::Q3_K => (0..96, 0xff),
            DType::IQ4_XS => (8..136, 0x00),
            _ => (16..144, 0xff),
        };
        for b in w.chunks_exact_mut(t.type_size()) {
            b[quants.clone()].fill(fill);
        }
        // Every tile width 1..=8, a wider n, and the AMX level's steps of
        // 16 columns (with a rest).
        for n in [1, 2, 3, 4, 5, 6, 7, 8, 11, 16, 35] {
            let c = MatCase::plain(t, k, m, n);
            let bv: Vec<f32> = (0..k * n).map(|i| [1.0, -0.5][i / k % 2]).collect();
            let (want, _) = reference(&c, &w, &bv);
            for isa in levels() {
                let got = run_mul_mat(&c, &w, &bv, isa, 2, false);
                assert_eq!(bits(&got), bits(&want), "{isa} {t} n={n}");
            }
        }
    }
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// Unit scales, scrambled quants, integer activations whose blocks all
/// quantize with scale 1 (max |x| = 127): every block sum and every partial
/// sum is an exact f32 integer, so every level must give the reference bits.
#[test]
fn packed_integer_sums_are_exact_on_every_level() {
    let mut rng = Rng::new(9);
    for t in W32 {
        for &(m, k, n) in &[(16, 32, 1), (32, 576, 3), (48, 1536, 9), (192, 64, 17)] {
            let mut w = weights(&mut rng, t, k, m, true);
            for row in w.chunks_exact_mut(t.row_size(k)) {
                unit_scales(t, row);
            }
            let mut bv: Vec<f32> = (0..k * n)
                .map(|_| (rng.next_u64() % 17) as f32 - 8.0)
                .collect();
            for blk in bv.chunks_exact_mut(QK) {
                blk[(rng.next_u64() % 32) as usize] = if rng.next_u64().is_multiple_of(2) {
                    127.0
                } else {
                    -127.0
                };
            }
            let c = MatCase::plain(t, k, m, n);
            let (want, _) = reference(&c, &w, &bv);
            for v in &want {
                assert_eq!(*v, v.round(), "{t}: integer reference");
            }
            for isa in levels() {
                let got = run_mul_mat(&c, &w, &bv, isa, 2, false);
                assert_eq!(bits(&got), bits(&want), "{isa} {t} m={m} k={k} n={n}");
            }
        }
    }
}

#[test]
fn packed_results_do_not_depend_on_threads_or_tile_width() {
    let mut rng = Rng::new(13);
    for t in ALL {
        for &(m, k, n) in &[(48, 576, 1), (32, 64, 13), (192, 576, 40), (16, 1536, 9)] {
            let k = k_for(t, k);
            let w = weights(&mut rng, t, k, m, false);
            let bv = rng.vec(k * n, -1.0, 1.0);
            let c = MatCase::plain(t, k, m, n);
            for isa in levels() {
                let one = run_mul_mat(&c, &w, &bv, isa, 1, false);
                for nth in [2, 3] {
                    let got = run_mul_mat(&c, &w, &bv, isa, nth, false);
                    assert_eq!(bits(&got), bits(&one), "{isa} {t} n={n} nth={nth}");
                }
                // Each column alone (the one-column kernel) gives the same bits.
                for j in [0, n / 2, n - 1] {
                    let single = MatCase { n: 1, ..c };
                    let got = run_mul_mat(&single, &w, &bv[j * k..(j + 1) * k], isa, 1, false);
                    assert_eq!(
                        bits(&got),
                        bits(&one[j * m..(j + 1) * m]),
                        "{isa} {t} col {j}"
                    );
                }
            }
        }
    }
}

/// Every tile width 1 ..= 8 (and 8 + an odd rest) of the 32-wide types,
/// column by column, gives the bits of that column alone (the one-column
/// tile): on aarch64 with `i8mm` the tiles of two or more columns are the
/// `smmla` kernel (odd widths end with one `sdot` column) and the
/// one-column tile the `sdot` kernel, so this compares them bit for bit;
/// scrambled quants reach every 4/5-bit value and Q8_0's ±128 extremes.
#[test]
fn packed_every_tile_width_matches_single_columns() {
    let mut rng = Rng::new(43);
    for t in W32 {
        for (i, &k) in [32usize, 64, 160, 576].iter().enumerate() {
            let m = 16 * (1 + i % 2);
            let w = weights(&mut rng, t, k, m, i % 2 == 0);
            let cols: Vec<Vec<f32>> = (0..13)
                .map(|j| match j {
                    3 => vec![0.0; k],
                    6 => rng.vec(k, -6e4, 6e4),
                    _ => rng.vec(k, -2.0, 1.5),
                })
                .collect();
            let single = MatCase::plain(t, k, m, 1);
            for isa in levels() {
                let alone: Vec<f32> = cols
                    .iter()
                    .flat_map(|c| run_mul_mat(&single, &w, c, isa, 1, false))
                    .collect();
                for n in (2..=9).chain([13]) {
                    let c = MatCase { n, ..single };
                    let got = run_mul_mat(&c, &w, &cols[..n].concat(), isa, 1, false);
                    let want = &alone[..n * m];
                    assert_eq!(bits(&got), bits(want), "{isa} {t} k={k} m={m} n={n}");
                }
            }
        }
    }
}

/// Many columns of the 32-wide types (the AVX2 many-column kernels of
/// Q5_0, Q5_1 and IQ4_NL: segments of 8 blocks with a rest, steps of 64
/// columns with a rest of 16, plus the tiles' rest) give, column by
/// column, the bits of that column alone, at every level.
#[test]
fn packed_many_columns_match_single_columns() {
    let mut rng = Rng::new(47);
    for t in W32 {
        for (k, n) in [(288usize, 16usize), (576, 83)] {
            let m = 16;
            let w = weights(&mut rng, t, k, m, true);
            let bv = rng.vec(k * n, -2.0, 1.5);
            let single = MatCase::plain(t, k, m, 1);
            for isa in levels() {
                let got = run_mul_mat(&MatCase { n, ..single }, &w, &bv, isa, 2, false);
                for j in 0..n {
                    let alone = run_mul_mat(&single, &w, &bv[j * k..(j + 1) * k], isa, 1, false);
                    assert_eq!(
                        bits(&got[j * m..(j + 1) * m]),
                        bits(&alone),
                        "{isa} {t} k={k} n={n} column {j}"
                    );
                }
            }
        }
    }
}

// ---------------------------------------------------------------- buffer

#[test]
fn buffer_round_trips_whole_and_partial_writes() {
    let mut rng = Rng::new(21);
    for t in ALL {
        let ne = [k_for(t, 96), 48, 1, 1];
        let (a, bufs) = packed_weight(t, ne, &vec![0u8; t.row_size(ne[0]) * 48]);
        // A plain neighbour in the same buffer.
        let n = a.nbytes();
        let mut shadow = random_bytes(&mut rng, n);
        a.write_bytes(0, &shadow).unwrap();
        assert_eq!(a.read_bytes().unwrap(), shadow, "{t}: whole write");
        // The memory really is packed.
        let ptr = bufs[0].host_ptr().unwrap().as_ptr();
        assert!(bufs[0].size() >= n, "{t}: the buffer holds the tensor");
        // SAFETY: `a` is the only tensor of `bufs[0]` (offset 0), a host buffer
        // of at least `n` bytes (asserted above) that lives until the end of
        // this test; nothing writes to it while the slice is copied.
        let raw = unsafe { std::slice::from_raw_parts(ptr, n).to_vec() };
        let mut want = vec![0u8; n];
        packed::pack(t, ne, &shadow, &mut want).unwrap();
        assert_eq!(raw, want, "{t}: stored packed");
        for _ in 0..40 {
            let off = (rng.next_u64() as usize) % n;
            let len = 1 + (rng.next_u64() as usize) % (n - off).min(700);
            let data = random_bytes(&mut rng, len);
            a.write_bytes(off, &data).unwrap();
            shadow[off..off + len].copy_from_slice(&data);
            let mut part = vec![0u8; len];
            strata::backend::tensor_get(&a, off, &mut part).unwrap();
            assert_eq!(part, shadow[off..off + len], "{t}: partial read");
        }
        assert_eq!(a.read_bytes().unwrap(), shadow, "{t}: after partial writes");
        strata::backend::tensor_memset(&a, 5, 300, 0xa5).unwrap();
        shadow[5..305].fill(0xa5);
        assert_eq!(a.read_bytes().unwrap(), shadow, "{t}: memset");
        bufs[0].clear(0x81).unwrap();
        assert!(
            a.read_bytes().unwrap().iter().all(|&b| b == 0x81),
            "{t}: clear"
        );
        // Copies in and out go through ggml's layout.
        let plain = Tensor::new(t, &ne).unwrap();
        let _pb = alloc_tensors(std::slice::from_ref(&plain), &cpu_buffer_type()).unwrap();
        plain.write_bytes(0, &shadow).unwrap();
        tensor_copy(&plain, &a).unwrap();
        assert_eq!(a.read_bytes().unwrap(), shadow, "{t}: copy in");
        let other = Tensor::new(t, &ne).unwrap();
        let _ob = alloc_tensors(std::slice::from_ref(&other), &cpu_buffer_type()).unwrap();
        tensor_copy(&a, &other).unwrap();
        assert_eq!(other.read_bytes().unwrap(), shadow, "{t}: copy out");
        assert!(
            bits(&a.to_f32_vec().unwrap()) == bits(&plain.to_f32_vec().unwrap()),
            "{t}: to_f32_vec"
        );
    }
}

#[test]
fn buffer_keeps_ineligible_tensors_plain() {
    let f = Tensor::new(DType::F32, &[32, 16]).unwrap();
    let q = Tensor::new(DType::Q4_0, &[32, 8]).unwrap();
    let p = Tensor::new(DType::Q4_0, &[32, 16]).unwrap();
    let bufs = alloc_tensors(&[f.clone(), q.clone(), p.clone()], &packed_buffer_type()).unwrap();
    assert_eq!(bufs.len(), 1);
    assert_eq!(bufs[0].name(), "CPU_PACKED");
    assert_eq!(bufs[0].tensor_layout(&f), TensorLayout::Plain);
    assert_eq!(bufs[0].tensor_layout(&q), TensorLayout::Plain);
    assert_eq!(bufs[0].tensor_layout(&p), TensorLayout::Packed);
    let rows = ops::view_2d(&p, 32, 8, p.nb()[1], 0).unwrap();
    assert_eq!(bufs[0].tensor_layout(&rows), TensorLayout::PackedPart);
    let whole = ops::view_2d(&p, 32, 16, p.nb()[1], 0).unwrap();
    assert_eq!(bufs[0].tensor_layout(&whole), TensorLayout::Packed);
}

#[test]
fn get_rows_from_packed_equals_plain() {
    let mut rng = Rng::new(3);
    for t in ALL {
        let (k, v) = (k_for(t, 64), 48);
        let w = weights(&mut rng, t, k, v, true);
        let ids: Vec<i32> = vec![0, 47, 16, 15, 31, 3, 3];
        let run = |plain: bool| -> Vec<f32> {
            let (a, _bufs) = if plain {
                let a = Tensor::new(t, &[k, v]).unwrap();
                let b = alloc_tensors(std::slice::from_ref(&a), &cpu_buffer_type()).unwrap();
                a.write_bytes(0, &w).unwrap();
                (a, b)
            } else {
                packed_weight(t, [k, v, 1, 1], &w)
            };
            let idx = Tensor::new(DType::I32, &[ids.len()]).unwrap();
            let out = ops::get_rows(&a, &idx).unwrap();
            let g = Graph::build(std::slice::from_ref(&out));
            let _b = alloc_graph_host(&g).unwrap();
            idx.write_i32(&ids).unwrap();
            strata::cpu::compute(&g, 2).unwrap();
            out.to_f32_vec().unwrap()
        };
        assert_eq!(bits(&run(false)), bits(&run(true)), "{t}");
    }
}

#[test]
fn other_consumers_of_packed_weights_are_refused() {
    let (a, _bufs) = packed_weight(DType::Q8_0, [64, 32, 1, 1], &vec![0u8; 34 * 2 * 32]);
    let dev = strata::cpu::cpu_device();
    let expect_refused = |out: &Tensor, what: &str| {
        assert!(!dev.supports_op(out), "{what}: supports_op");
        let g = Graph::build(std::slice::from_ref(out));
        let _b = alloc_graph_host(&g).unwrap();
        let e = CpuBackend::new(1).graph_compute(&g).unwrap_err();
        assert!(matches!(e, Error::Unsupported { .. }), "{what}: {e}");
        assert!(e.to_string().contains("packed"), "{what}: {e}");
    };
    // An op that reads a packed weight but is not MUL_MAT / GET_ROWS (it
    // would copy the packed bytes as if they were ggml's): supported on a
    // plain weight, refused on a packed one.
    let plain = Tensor::new(DType::Q8_0, &[64, 32]).unwrap();
    let _pb = alloc_tensors(std::slice::from_ref(&plain), &cpu_buffer_type()).unwrap();
    assert!(dev.supports_op(&ops::dup(&plain).unwrap()));
    expect_refused(&ops::dup(&a).unwrap(), "dup");
    // MUL_MAT of a view of part of the weight.
    let part = ops::view_2d(&a, 64, 16, a.nb()[1], 0).unwrap();
    let b = Tensor::new(DType::F32, &[64, 2]).unwrap();
    expect_refused(&ops::mul_mat(&part, &b).unwrap(), "partial view");
    // The whole weight is fine.
    let ok = ops::mul_mat(&a, &b).unwrap();
    assert!(dev.supports_op(&ok));
}
