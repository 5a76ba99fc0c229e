//! FLASH_ATTN_EXT with batch-invariant attention
//! (`CpuBackend::set_batch_invariant`, the two-pass path): against a naive
//! f64 softmax(q·kᵀ)·v at every instruction-set level this CPU runs, and
//! bit for bit against itself with the same query row computed in other
//! batches: alone, beside decode tokens of other sequences, inside a
//! prompt chunk whose rows are grouped across tokens, with its keys at other
//! cell offsets among masked cells of other sequences, and at other thread
//! counts.
//!
//! Tolerance against the f64 reference (NMSE): the scores of f16 keys use
//! q rounded to f16 (ggml's conversion to K's type, 2⁻¹² relative per
//! element), everything else is f32 with the vectorized exp: 5e-8 for f16
//! keys (seen: ≤ 4.3e-9 at every level), 1e-11 for f32 (seen: ≤ 8.5e-14),
//! some 300 times tighter than the one-chunk path's bound with its f16
//! accumulator (`ops_attn.rs`).

mod common;

use common::attn::{compute, inputs_where, levels, reference, Case, Inputs, MaskKind};
use common::{assert_close, round_trip, Rng};
use strata::isa::Isa;
use strata::DType;

/// Runs the case with `nth` threads at `isa`, batch-invariant, its mask
/// one row per query ([n_kv, n_q]).
fn run(c: &Case, x: &Inputs, nth: usize, isa: Isa) -> Vec<f32> {
    compute(&sized(c), x, nth, isa)
}

/// The case with its mask shaped [n_kv, n_q] and batch-invariant attention.
fn sized(c: &Case) -> Case {
    Case {
        mask: c.mask.map(|(t, _)| (t, [c.n_kv, c.n_q, 1, 1])),
        invariant: true,
        ..c.clone()
    }
}

fn base() -> Case {
    Case {
        d: 64,
        dv: 64,
        n_q: 16,
        n_kv: 300,
        h: 9,
        h_kv: 3,
        ne3: 1,
        kv_t: DType::F16,
        v_t: None,
        mask: Some((DType::F16, [0; 4])),
        mask_kind: MaskKind::Causal,
        scale: 0.125,
        max_bias: 0.0,
        softcap: 0.0,
        sinks: false,
        invariant: true,
    }
}

/// `a` with f32 K, V and mask.
fn f32s(a: Case) -> Case {
    Case {
        kv_t: DType::F32,
        v_t: None,
        mask: Some((DType::F32, [0; 4])),
        ..a
    }
}

/// One kv head per query head, a head size with leftover elements, dv ≠ d.
fn mha() -> Case {
    Case {
        d: 40,
        dv: 72,
        h: 4,
        h_kv: 4,
        ..base()
    }
}

#[test]
fn two_pass_matches_the_f64_reference_at_every_level() {
    let cases = [
        base(),
        f32s(base()),
        // one decode row; a prompt chunk of 70 rows; no mask
        Case { n_q: 1, ..base() },
        Case {
            n_q: 70,
            n_kv: 90,
            ..base()
        },
        Case {
            mask: None,
            n_kv: 77,
            ..base()
        },
        // head sizes with leftover elements, dv ≠ d, MHA and one kv head
        mha(),
        Case {
            d: 80,
            dv: 24,
            h: 8,
            h_kv: 1,
            ..base()
        },
        f32s(Case {
            d: 96,
            dv: 128,
            h: 6,
            h_kv: 2,
            ..base()
        }),
        // d = 4 lanes' vectors at the 8-lane levels, as d = 64 is at the
        // 16-lane ones: the score loop keeps the queries in registers
        Case {
            d: 32,
            dv: 32,
            ..base()
        },
        // f16 K with f32 V and the reverse (portable kernels)
        Case {
            v_t: Some(DType::F32),
            ..base()
        },
        Case {
            kv_t: DType::F32,
            v_t: Some(DType::F16),
            ..base()
        },
        // soft-capping, ALiBi, sinks
        Case {
            softcap: 20.0,
            ..base()
        },
        Case {
            max_bias: 8.0,
            h: 8,
            h_kv: 2,
            ..base()
        },
        Case {
            sinks: true,
            ..base()
        },
        f32s(Case {
            sinks: true,
            softcap: 10.0,
            ..base()
        }),
    ];
    for (ci, a) in cases.iter().enumerate() {
        // each query sees a different run of keys, some none at all
        let x = inputs_where(a, 7 + ci as u64, false, |i, j| {
            i % 5 != 4 && (j + i) % 3 != 0 && j <= a.n_kv / 2 + 7 * i
        });
        let want = reference(&sized(a), &x);
        let tol = if a.kv_t == DType::F16 { 5e-8 } else { 1e-11 };
        for isa in levels() {
            for nth in [1, 2] {
                let got = run(a, &x, nth, isa);
                assert_close(&format!("case {ci} {a:?} {isa:?} t{nth}"), &got, &want, tol);
            }
        }
    }
}

#[test]
fn rows_that_see_no_key_give_zeros_or_the_sink_alone() {
    for sinks in [false, true] {
        let a = Case { sinks, ..base() };
        let x = inputs_where(&a, 3, false, |i, j| i % 2 == 0 && j < 100);
        for isa in levels() {
            let got = run(&a, &x, 2, isa);
            for iq in (1..a.n_q).step_by(2) {
                let row = &got[iq * a.h * a.dv..(iq + 1) * a.h * a.dv];
                assert!(
                    row.iter().all(|&v| v == 0.0),
                    "{isa:?} sinks {sinks} row {iq}"
                );
            }
            assert!(got.iter().all(|v| v.is_finite()));
        }
    }
}

/// One sequence of a batch: its keys (K and V rows per kv head, in
/// position order), its query tokens and which of its keys each sees.
struct Seq {
    /// Per key: d values per kv head, then dv values per kv head.
    keys: Vec<(Vec<f32>, Vec<f32>)>,
    /// Per query: q (d per head), and the number of its keys it sees
    /// (a prefix), with a bias per key.
    queries: Vec<(Vec<f32>, usize)>,
    bias: Vec<f32>,
}

/// Lays the sequences listed in `batch` out in a cache of `n_kv` cells,
/// sequence `s`'s key `i` at cell `cell(s, i)`, other cells random and
/// masked, and builds the node with their queries (in that order).
fn lay_out(
    a: &Case,
    seqs: &[Seq],
    batch: &[usize],
    n_kv: usize,
    cell: impl Fn(usize, usize) -> usize,
    seed: u64,
) -> (Case, Inputs) {
    let n_q = batch.iter().map(|&s| seqs[s].queries.len()).sum();
    let at = Case {
        n_q,
        n_kv,
        ..a.clone()
    };
    let mut rng = Rng::new(seed);
    let mut k = round_trip(a.kv_t, &rng.vec(a.d * n_kv * a.h_kv, -1.0, 1.0));
    let mut v = round_trip(a.vt(), &rng.vec(a.dv * n_kv * a.h_kv, -2.0, 2.0));
    let (mut q, mut mask) = (
        vec![0f32; a.d * n_q * a.h],
        vec![f32::NEG_INFINITY; n_q * n_kv],
    );
    for &s in batch {
        for (i, (kr, vr)) in seqs[s].keys.iter().enumerate() {
            let c = cell(s, i);
            for hk in 0..a.h_kv {
                let ko = (hk * n_kv + c) * a.d;
                k[ko..ko + a.d].copy_from_slice(&kr[hk * a.d..(hk + 1) * a.d]);
                let vo = (hk * n_kv + c) * a.dv;
                v[vo..vo + a.dv].copy_from_slice(&vr[hk * a.dv..(hk + 1) * a.dv]);
            }
        }
    }
    let mut iq = 0;
    for &s in batch {
        for (qr, seen) in &seqs[s].queries {
            for h in 0..a.h {
                let o = (h * n_q + iq) * a.d;
                q[o..o + a.d].copy_from_slice(&qr[h * a.d..(h + 1) * a.d]);
            }
            for i in 0..*seen {
                mask[iq * n_kv + cell(s, i)] = seqs[s].bias[i];
            }
            iq += 1;
        }
    }
    let mask = round_trip(a.mask.map_or(DType::F32, |m| m.0), &mask);
    let sinks = Rng::new(99).vec(a.h, -1.0, 2.0);
    (
        at,
        Inputs {
            q,
            k,
            v,
            mask,
            sinks,
        },
    )
}

/// Sequences with `lens[s]` keys each; sequence 0's queries are a prompt
/// chunk of `prompt` tokens (token t sees keys ..= lens[0] - prompt + t),
/// the others one decode token seeing all its keys.
fn sequences(a: &Case, lens: &[usize], prompt: usize, seed: u64) -> Vec<Seq> {
    let mut rng = Rng::new(seed);
    lens.iter()
        .enumerate()
        .map(|(s, &n)| {
            let keys = (0..n)
                .map(|_| {
                    let kr = round_trip(a.kv_t, &rng.vec(a.d * a.h_kv, -1.0, 1.0));
                    let vr = round_trip(a.vt(), &rng.vec(a.dv * a.h_kv, -2.0, 2.0));
                    (kr, vr)
                })
                .collect();
            let seen: Vec<usize> = if s == 0 {
                (0..prompt).map(|t| n - prompt + t + 1).collect()
            } else {
                vec![n]
            };
            let queries = seen
                .into_iter()
                .map(|c| (rng.vec(a.d * a.h, -1.0, 1.0), c))
                .collect();
            let bias = rng.vec(n, -1.0, 0.0);
            Seq {
                keys,
                queries,
                bias,
            }
        })
        .collect()
}

/// The output rows (all heads) of query `iq` of a result [dv, h, n_q].
fn row(a: &Case, out: &[f32], iq: usize) -> Vec<u32> {
    out[iq * a.h * a.dv..(iq + 1) * a.h * a.dv]
        .iter()
        .map(|x| x.to_bits())
        .collect()
}

#[test]
fn a_row_has_the_same_bits_in_any_batch_at_any_offset() {
    for a in [
        base(),
        f32s(base()),
        mha(),
        Case {
            sinks: true,
            softcap: 15.0,
            ..base()
        },
    ] {
        // sequence 0 a prompt chunk of 70 tokens (for MHA, groups across tokens),
        // the others decoding; one sequence with a single key
        let lens = [150, 37, 64, 1, 120, 200];
        let seqs = sequences(&a, &lens, 70, 5);
        let all: Vec<usize> = (0..lens.len()).collect();
        // interleaved cells, as a unified cache fills while decoding
        let total: usize = lens.iter().sum();
        let mut cells = vec![vec![0; 0]; lens.len()];
        let mut c = 0;
        let mut i = 0;
        while c < total {
            for (s, cs) in cells.iter_mut().enumerate() {
                if i < lens[s] {
                    cs.push(c);
                    c += 1;
                }
            }
            i += 1;
        }
        let mixed = lay_out(&a, &seqs, &all, total + 5, |s, i| cells[s][i], 1);
        for isa in levels() {
            let batch = run(&mixed.0, &mixed.1, 2, isa);
            let mut iq = 0;
            for (s, sq) in seqs.iter().enumerate() {
                // the sequence alone, its keys in one run at another offset
                let alone = lay_out(&a, &seqs, &[s], lens[s] + 40, |_, i| i + 17, 2);
                for nth in [1, 3] {
                    let got = run(&alone.0, &alone.1, nth, isa);
                    for t in 0..sq.queries.len() {
                        let what = format!("{a:?} {isa:?} seq {s} query {t} t{nth}");
                        assert_eq!(row(&a, &batch, iq + t), row(&a, &got, t), "{what}");
                    }
                }
                // each prompt token alone in its own batch of one
                if sq.queries.len() > 1 {
                    for t in [0, 33, 69] {
                        let one = Seq {
                            keys: sq.keys.clone(),
                            queries: vec![sq.queries[t].clone()],
                            bias: sq.bias.clone(),
                        };
                        let single = lay_out(&a, &[one], &[0], lens[s], |_, i| i, 3);
                        let got = run(&single.0, &single.1, 2, isa);
                        let what = format!("{a:?} {isa:?} prompt token {t} alone");
                        assert_eq!(row(&a, &batch, iq + t), row(&a, &got, 0), "{what}");
                    }
                }
                iq += sq.queries.len();
            }
        }
    }
}
