//! CPY / CONT / DUP, SET_ROWS and the reductions, sorts, REPEAT, CONCAT and
//! ADD_ID on the GPU against the CPU backend: non-contiguous sources
//! (permuted and strided views), sizes beyond one workgroup, ties, repeated
//! and broadcast row ids, and random shapes and permutations (proptest).

use proptest::prelude::*;
use strata::backend::{alloc_graph, Backend};
use strata::conformance::{nmse, Rng};
use strata::cpu::CpuBackend;
use strata::ops::{self, SortOrder};
use strata::{DType, Graph, Result, Tensor};

mod support;

/// What an input tensor is filled with.
enum Data {
    F(Vec<f32>),
    I(Vec<i32>),
}

/// A graph to compute: its input leaves with their data, and its output.
struct Case {
    inputs: Vec<(Tensor, Data)>,
    out: Tensor,
}

/// The output of one run: its bytes and its values in logical order.
struct Out {
    bytes: Vec<u8>,
    vals: Vec<f32>,
}

fn compute(backend: &mut dyn Backend, c: Case) -> Result<Option<Out>> {
    if !backend.supports_op(&c.out) {
        return Ok(None);
    }
    let g = Graph::build(&[c.out.clone()]);
    let _bufs = alloc_graph(&g, &backend.default_buffer_type())?;
    for (t, d) in &c.inputs {
        match d {
            Data::F(v) => t.write_f32(v)?,
            Data::I(v) => t.write_i32(v)?,
        }
    }
    backend.graph_compute(&g)?;
    backend.synchronize()?;
    let vals = if c.out.dtype() == DType::I32 {
        c.out.to_i32_vec()?.iter().map(|&v| v as f32).collect()
    } else {
        c.out.to_f32_vec()?
    };
    Ok(Some(Out {
        bytes: c.out.read_bytes()?,
        vals,
    }))
}

/// Runs `build`'s graph on the GPU (which must support it) and on the CPU;
/// `None` when there is no GPU.
fn both(build: impl Fn() -> Result<Case>) -> Option<(Out, Out)> {
    let dev = support::gpu()?;
    let mut gpu = dev.backend();
    let got = compute(&mut gpu, build().unwrap()).unwrap();
    let got = got.expect("the GPU supports this node");
    let want = compute(&mut CpuBackend::new(1), build().unwrap())
        .unwrap()
        .expect("the CPU supports this node");
    Some((got, want))
}

/// Asserts the GPU's output is bit for bit the CPU's.
fn exact(build: impl Fn() -> Result<Case>) {
    if let Some((got, want)) = both(build) {
        assert_eq!(got.vals.len(), want.vals.len());
        let bad = got
            .vals
            .iter()
            .zip(&want.vals)
            .position(|(g, w)| g.to_bits() != w.to_bits());
        assert!(bad.is_none(), "first difference at {bad:?}");
        assert_eq!(got.bytes, want.bytes);
    }
}

/// Asserts the GPU's output is within `bound` (NMSE) of the CPU's.
fn close(bound: f64, build: impl Fn() -> Result<Case>) -> Option<(Out, Out)> {
    let (got, want) = both(build)?;
    let e = nmse(&got.vals, &want.vals);
    assert!(e <= bound, "nmse {e} > {bound}");
    Some((got, want))
}

fn uniform(n: usize, seed: u64) -> Vec<f32> {
    Rng::new(seed).vec(n, -1.0, 1.0)
}

/// Values from a handful of levels (many ties).
fn coarse(n: usize, seed: u64) -> Vec<f32> {
    let mut r = Rng::new(seed);
    (0..n).map(|_| (r.below(9) as f32 - 4.0) * 0.25).collect()
}

fn leaf(dt: DType, ne: &[usize], seed: u64) -> Result<(Tensor, Data)> {
    let t = Tensor::new(dt, ne)?;
    let n = t.nelements();
    Ok((t, Data::F(uniform(n, seed))))
}

const FLOATS: [DType; 3] = [DType::F32, DType::F16, DType::BF16];

#[test]
fn cont_and_cpy_convert_permuted_views_between_float_types() {
    for src_t in FLOATS {
        for dst_t in FLOATS {
            // CONT of a permuted source (same type), CPY into another shape
            exact(|| {
                let (a, da) = leaf(src_t, &[37, 19, 3, 2], 1)?;
                let p = ops::permute(&a, [2, 0, 1, 3])?;
                let b = Tensor::new(dst_t, &[19 * 3, 37, 2])?;
                let out = if src_t == dst_t {
                    ops::cont(&p)?
                } else {
                    ops::cpy(&p, &b)?
                };
                let mut inputs = vec![(a, da)];
                if src_t != dst_t {
                    inputs.push((b, Data::F(vec![0.0; 19 * 3 * 37 * 2])));
                }
                Ok(Case { inputs, out })
            });
        }
    }
}

#[test]
fn cpy_into_a_strided_view_keeps_the_gaps() {
    exact(|| {
        let (a, da) = leaf(DType::F32, &[300, 4], 2)?;
        let (base, db) = leaf(DType::F16, &[310, 9], 3)?;
        // every other row of `base`, 10 elements in
        let v = ops::view_2d(&base, 300, 4, 2 * base.nb()[1], 20)?;
        let out = ops::cpy(&ops::transpose(&ops::transpose(&a)?)?, &v)?;
        Ok(Case {
            inputs: vec![(a, da), (base, db)],
            out,
        })
    });
}

#[test]
fn dup_copies_i32_exactly() {
    exact(|| {
        let a = Tensor::new(DType::I32, &[513, 3])?;
        let vals: Vec<i32> = (0..513 * 3).map(|i| i * 7919 - 300_000).collect();
        Ok(Case {
            out: ops::cont(&ops::transpose(&a)?)?,
            inputs: vec![(a, Data::I(vals))],
        })
    });
}

/// The block-quantized types CPY and SET_ROWS write on the GPU.
const QUANTS: [DType; 9] = [
    DType::Q8_0,
    DType::Q4_0,
    DType::IQ4_NL,
    DType::IQ4_XS,
    DType::Q2_K,
    DType::Q3_K,
    DType::Q4_K,
    DType::Q5_K,
    DType::Q6_K,
];

#[test]
fn cpy_quantizes_like_the_cpu() {
    for dt in QUANTS {
        let r = close(1e-6, || {
            // a transposed source: 256 x 70 (560 blocks of 32, 70 of 256)
            let (a, da) = leaf(DType::F32, &[70, 256], 4)?;
            let b = Tensor::new(dt, &[256, 70])?;
            Ok(Case {
                out: ops::cpy(&ops::transpose(&a)?, &b)?,
                inputs: vec![(a, da)],
            })
        });
        if let Some((got, want)) = r {
            let diff = got
                .bytes
                .iter()
                .zip(&want.bytes)
                .filter(|(g, w)| g != w)
                .count();
            println!("{dt}: {diff} of {} bytes differ", got.bytes.len());
        }
    }
}

#[test]
fn quantized_cpy_refuses_what_it_cannot_write() {
    let Some(dev) = support::gpu() else { return };
    let be = dev.backend();
    let a = Tensor::new(DType::F32, &[256, 4]).unwrap();
    for dt in [DType::Q4_1, DType::Q5_0, DType::Q5_1] {
        let b = Tensor::new(dt, &[256, 4]).unwrap();
        assert!(!be.supports_op(&ops::cpy(&a, &b).unwrap()), "{dt}");
    }
}

#[test]
fn set_rows_writes_an_f16_kv_cache_view() {
    // llama's KV write: rows [n_embd, n_tokens], I64 cell ids, into a view
    // of the cache (its first 250 cells)
    exact(|| {
        let (cache, dc) = leaf(DType::F16, &[128, 300], 5)?;
        let kv = ops::view_2d(&cache, 128, 250, cache.nb()[1], 0)?;
        let (cur, dcur) = leaf(DType::F32, &[128, 7], 6)?;
        let ids = Tensor::new(DType::I64, &[7])?;
        let out = ops::set_rows(&kv, &cur, &ids)?;
        Ok(Case {
            inputs: vec![
                (cache, dc),
                (cur, dcur),
                (ids, Data::I(vec![249, 3, 150, 151, 0, 42, 7])),
            ],
            out,
        })
    });
}

#[test]
fn set_rows_broadcasts_ids_and_keeps_the_last_duplicate() {
    for dt in [DType::F32, DType::BF16] {
        exact(|| {
            let (dst, dd) = leaf(dt, &[300, 10, 4], 7)?;
            let (rows, dr) = leaf(DType::F32, &[300, 5, 4], 8)?;
            let ids = Tensor::new(DType::I32, &[5, 2])?;
            let out = ops::set_rows(&dst, &rows, &ids)?;
            Ok(Case {
                inputs: vec![
                    (dst, dd),
                    (rows, dr),
                    (ids, Data::I(vec![1, 9, 1, 4, 1, 0, 0, 2, 3, 5])),
                ],
                out,
            })
        });
    }
}

#[test]
fn set_rows_quantizes_rows() {
    for dt in QUANTS {
        close(1e-6, || {
            let (dst, dd) = leaf(dt, &[512, 12], 9)?;
            let (rows, dr) = leaf(DType::F32, &[512, 4], 10)?;
            let ids = Tensor::new(DType::I32, &[4])?;
            let out = ops::set_rows(&dst, &rows, &ids)?;
            Ok(Case {
                inputs: vec![(dst, dd), (rows, dr), (ids, Data::I(vec![11, 2, 5, 2]))],
                out,
            })
        });
    }
}

#[test]
fn sums_and_means_of_strided_rows() {
    type F = fn(&Tensor) -> Result<Tensor>;
    let fs: [F; 3] = [ops::sum, ops::sum_rows, ops::mean];
    for f in fs {
        for dt in [DType::F32, DType::F16] {
            close(1e-10, || {
                let (a, da) = leaf(dt, &[7, 700, 3], 11)?;
                Ok(Case {
                    out: f(&ops::transpose(&a)?)?,
                    inputs: vec![(a, da)],
                })
            });
        }
    }
}

#[test]
fn argmax_takes_the_first_maximum() {
    exact(|| {
        let a = Tensor::new(DType::F32, &[1000, 6])?;
        Ok(Case {
            out: ops::argmax(&a)?,
            inputs: vec![(a, Data::F(coarse(6000, 12)))],
        })
    });
}

#[test]
fn argsort_and_top_k_are_stable_on_ties() {
    for order in [SortOrder::Asc, SortOrder::Desc] {
        exact(|| {
            let a = Tensor::new(DType::F32, &[6, 1000])?;
            Ok(Case {
                out: ops::argsort(&ops::transpose(&a)?, order)?,
                inputs: vec![(a, Data::F(coarse(6000, 13)))],
            })
        });
    }
    exact(|| {
        let a = Tensor::new(DType::F16, &[700, 3, 2])?;
        Ok(Case {
            out: ops::top_k(&a, 5)?,
            inputs: vec![(a, Data::F(coarse(4200, 14)))],
        })
    });
    if let Some(dev) = support::gpu() {
        let a = Tensor::new(DType::F32, &[1025, 2]).unwrap();
        let s = ops::argsort(&a, SortOrder::Asc).unwrap();
        assert!(
            !dev.backend().supports_op(&s),
            "rows over 1024 go to the CPU"
        );
    }
}

#[test]
fn repeat_and_concat_move_raw_elements() {
    exact(|| {
        let (a, da) = leaf(DType::F16, &[3, 5, 1, 2], 15)?;
        let b = Tensor::new(DType::F32, &[9, 10, 4, 2])?;
        Ok(Case {
            out: ops::repeat(&a, &b)?,
            inputs: vec![(a, da)],
        })
    });
    for dim in 0..4 {
        exact(|| {
            let mut ne = [6, 5, 4, 3];
            let (a, da) = leaf(DType::F32, &[5, 6, 4, 3], 16)?;
            ne[dim] = 2;
            let (b, db) = leaf(DType::F32, &ne, 17)?;
            let out = ops::concat(&ops::transpose(&a)?, &b, dim)?;
            Ok(Case {
                inputs: vec![(a, da), (b, db)],
                out,
            })
        });
    }
    exact(|| {
        let a = Tensor::new(DType::I32, &[300, 2])?;
        let b = Tensor::new(DType::I32, &[300, 3])?;
        Ok(Case {
            out: ops::concat(&a, &b, 1)?,
            inputs: vec![
                (a, Data::I((0..600).collect())),
                (b, Data::I((0..900).map(|i| -i).collect())),
            ],
        })
    });
}

#[test]
fn add_id_adds_the_selected_bias_rows() {
    exact(|| {
        let (a, da) = leaf(DType::F32, &[300, 2, 5], 18)?;
        let (b, db) = leaf(DType::F32, &[300, 4], 19)?;
        let ids = Tensor::new(DType::I32, &[2, 5])?;
        Ok(Case {
            out: ops::add_id(&a, &b, &ids)?,
            inputs: vec![
                (a, da),
                (b, db),
                (ids, Data::I(vec![0, 3, 1, 1, 2, 0, 3, 3, 2, 1])),
            ],
        })
    });
}

/// A permutation of the four axes from `k` (0..24).
fn axes(mut k: usize) -> [usize; 4] {
    let mut left = vec![0, 1, 2, 3];
    let mut out = [0; 4];
    for (i, o) in out.iter_mut().enumerate() {
        *o = left.remove(k % (4 - i));
        k /= 4 - i;
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]
    #[test]
    fn cpy_matches_the_cpu_over_random_shapes(
        ne in prop::array::uniform4(1usize..12),
        perm in 0usize..24,
        src in 0usize..3,
        dst in 0usize..3,
        split in 1usize..4,
    ) {
        let n: usize = ne.iter().product();
        exact(|| {
            let (a, da) = leaf(FLOATS[src], &ne, 20)?;
            let p = ops::permute(&a, axes(perm))?;
            // the destination: the same count in another shape
            let d0 = if n.is_multiple_of(split) { n / split } else { n };
            let b = Tensor::new(FLOATS[dst], &[d0, n / d0])?;
            Ok(Case {
                out: ops::cpy(&p, &b)?,
                inputs: vec![(a, da), (b, Data::F(vec![0.0; n]))],
            })
        });
    }
}
