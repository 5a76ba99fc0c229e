//! GET_ROWS and SET_ROWS on the CPU: every source / destination type,
//! ggml's broadcasting of indices, duplicate indices, and bad indices
//! rejected with a typed error before anything is written.
//!
//! Results are compared exactly: gathered rows against the source as stored
//! (dequantized by the same row function), scattered rows against the row
//! quantized on its own.

mod common;

use common::{round_trip, tensor, Rng};
use proptest::prelude::*;
use strata::conformance::WEIGHT_TYPES;
use strata::{cpu, ops, DType, Error, Graph, Tensor};

/// Every type GET_ROWS reads: the weight types and I32.
fn all_sources() -> Vec<DType> {
    WEIGHT_TYPES.into_iter().chain([DType::I32]).collect()
}

/// A row length of at least 64 in whole blocks of `t` (256 for the
/// K-quants and IQ4_XS).
fn row_len(t: DType) -> usize {
    t.block_size().max(64)
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// Builds and allocates the graph of `outputs`, lets `init` write inputs,
/// computes with `nth` threads.
fn exec(outputs: &[Tensor], init: impl FnOnce(), nth: usize) -> strata::Result<()> {
    let g = Graph::build(outputs);
    let _bufs = cpu::alloc_graph_host(&g).unwrap();
    init();
    cpu::compute(&g, nth)
}

/// Writes f32 values (as small integers for I32 tensors).
fn fill(t: &Tensor, v: &[f32]) {
    if t.dtype() == DType::I32 {
        t.write_i32(&v.iter().map(|&x| x as i32).collect::<Vec<_>>())
            .unwrap();
    } else {
        t.write_f32(v).unwrap();
    }
}

#[test]
fn get_rows_every_type_with_batched_indices() {
    let mut rng = Rng::new(1);
    let (n_src, ne2, ne3, n_idx) = (7, 3, 2, 5);
    for t in all_sources() {
        let ne0 = row_len(t);
        for nth in [1, 3] {
            let a = tensor("a", t, &[ne0, n_src, ne2, ne3]);
            let b = tensor("idx", DType::I32, &[n_idx, ne2, ne3]);
            let out = ops::get_rows(&a, &b).unwrap();
            assert_eq!(out.ne(), [ne0, n_idx, ne2, ne3]);
            let av: Vec<f32> = (0..ne0 * n_src * ne2 * ne3)
                .map(|_| (rng.uniform(-100.0, 100.0)).round())
                .collect();
            let idx: Vec<i32> = (0..n_idx * ne2 * ne3)
                .map(|_| rng.below(n_src) as i32)
                .collect();
            exec(
                &[out.clone()],
                || {
                    fill(&a, &av);
                    b.write_i32(&idx).unwrap();
                },
                nth,
            )
            .unwrap();
            let stored = a.to_f32_vec().unwrap();
            let got = out.to_f32_vec().unwrap();
            assert_eq!(
                out.dtype(),
                if t == DType::I32 {
                    DType::I32
                } else {
                    DType::F32
                }
            );
            for i3 in 0..ne3 {
                for i2 in 0..ne2 {
                    for i in 0..n_idx {
                        let r = idx[(i3 * ne2 + i2) * n_idx + i] as usize;
                        let o = ((i3 * ne2 + i2) * n_idx + i) * ne0;
                        let s = ((i3 * ne2 + i2) * n_src + r) * ne0;
                        assert_eq!(bits(&got[o..o + ne0]), bits(&stored[s..s + ne0]), "{t}");
                    }
                }
            }
        }
    }
}

#[test]
fn get_rows_from_a_strided_source_keeps_i32_exact() {
    // Large integers do not survive an f32 round trip: I32 rows must be copied.
    let a_base = tensor("a", DType::I32, &[5, 8]);
    let a = ops::view_2d(&a_base, 3, 4, 2 * 5 * 4, 4).unwrap(); // rows 0, 2, 4, 6 from col 1
    let b = tensor("idx", DType::I32, &[3]);
    let out = ops::get_rows(&a, &b).unwrap();
    let av: Vec<i32> = (0..40).map(|i| 0x7654_3210 + i * 1_000_003).collect();
    exec(
        &[out.clone()],
        || {
            a_base.write_i32(&av).unwrap();
            b.write_i32(&[3, 0, 3]).unwrap();
        },
        2,
    )
    .unwrap();
    let row = |r: usize| (1..4).map(|c| av[2 * r * 5 + c]).collect::<Vec<_>>();
    let want: Vec<i32> = [row(3), row(0), row(3)].concat();
    assert_eq!(out.to_i32_vec().unwrap(), want);
}

#[test]
fn get_rows_rejects_bad_indices_with_a_named_error() {
    for bad in [7, -1, i32::MAX] {
        let a = tensor("weights", DType::Q8_0, &[32, 7]);
        let b = tensor("token_ids", DType::I32, &[4]);
        let out = ops::get_rows(&a, &b).unwrap();
        let err = exec(
            &[out],
            || {
                a.write_f32(&[0.5; 224]).unwrap();
                b.write_i32(&[0, 6, bad, 1]).unwrap();
            },
            2,
        )
        .unwrap_err();
        let msg = err.to_string();
        let Error::IndexOutOfRange { what, index, len } = &err else {
            panic!("{msg}");
        };
        assert_eq!((*index, *len), (i64::from(bad), 7), "{msg}");
        assert!(
            what.starts_with("GET_ROWS: index tensor 'token_ids' at [2, 0, 0]"),
            "{msg}"
        );
        assert!(
            msg.contains("token_ids") && msg.contains(&bad.to_string()),
            "{msg}"
        );
    }
}

/// Runs SET_ROWS of `rows` [ne0, n, ne2, ne3] into `dst_t` [ne0, n_dst, ne2, ne3]
/// with `idx` [n, i2, i3] (broadcast over rows' dims 2, 3); returns the result
/// and the expected destination.
/// Types and shapes of a SET_ROWS case.
#[derive(Clone, Copy)]
struct SetCase {
    dst_t: DType,
    row_t: DType,
    idx_t: DType,
    /// Shape of the rows tensor.
    shape: [usize; 4],
    /// Rows of the destination.
    n_dst: usize,
    /// Shape of the index tensor.
    idx_ne: [usize; 3],
}

fn set_rows_case(
    c: &SetCase,
    idx: &[i64],
    nth: usize,
    seed: u64,
) -> Result<(Vec<f32>, Vec<f32>), (Error, bool)> {
    let mut rng = Rng::new(seed);
    let SetCase {
        dst_t,
        row_t,
        idx_t,
        shape,
        n_dst,
        idx_ne,
    } = *c;
    let [ne0, n, ne2, ne3] = shape;
    let dst = tensor("kv_cache", dst_t, &[ne0, n_dst, ne2, ne3]);
    let rows = tensor("new_rows", row_t, &shape);
    let ids = tensor("slots", idx_t, &idx_ne);
    let out = ops::set_rows(&dst, &rows, &ids).unwrap();
    let dv = rng.vec(ne0 * n_dst * ne2 * ne3, -1.0, 1.0);
    let rv = rng.vec(ne0 * n * ne2 * ne3, -3.0, 3.0);
    let mut before = Vec::new();
    let res = exec(
        &[out],
        || {
            dst.write_f32(&dv).unwrap();
            rows.write_f32(&rv).unwrap();
            let ints: Vec<i32> = idx.iter().map(|&v| v as i32).collect();
            match idx_t {
                DType::I64 => {
                    let bytes: Vec<u8> = idx.iter().flat_map(|v| v.to_le_bytes()).collect();
                    ids.write_bytes(0, &bytes).unwrap()
                }
                _ => ids.write_i32(&ints).unwrap(),
            }
            before = dst.read_bytes().unwrap();
        },
        nth,
    );
    if let Err(e) = res {
        // The error comes with whether the destination's bytes are unchanged.
        return Err((e, dst.read_bytes().unwrap() == before));
    }
    // Expected: start from the stored destination, apply writes in order.
    let rows_stored = rows.to_f32_vec().unwrap();
    let mut want = round_trip(dst_t, &dv);
    for i3 in 0..ne3 {
        for i2 in 0..ne2 {
            for i in 0..n {
                let (j2, j3) = (i2 % idx_ne[1], i3 % idx_ne[2]);
                let r = idx[(j3 * idx_ne[1] + j2) * idx_ne[0] + i] as usize;
                let s = ((i3 * ne2 + i2) * n + i) * ne0;
                let d = ((i3 * ne2 + i2) * n_dst + r) * ne0;
                let row = round_trip(dst_t, &rows_stored[s..s + ne0]);
                want[d..d + ne0].copy_from_slice(&row);
            }
        }
    }
    Ok((dst.to_f32_vec().unwrap(), want))
}

#[test]
fn set_rows_every_destination_type_with_broadcast_indices() {
    let mut seed = 0;
    for dt in WEIGHT_TYPES {
        for (rt, it) in [(DType::F32, DType::I64), (DType::F16, DType::I32)] {
            seed += 1;
            // rows [64 (256), 3, 4, 2], indices [3, 2, 1]: dims 2, 3 broadcast.
            let idx = [5, 0, 2, 1, 5, 3];
            let (got, want) = set_rows_case(
                &SetCase {
                    dst_t: dt,
                    row_t: rt,
                    idx_t: it,
                    shape: [row_len(dt), 3, 4, 2],
                    n_dst: 6,
                    idx_ne: [3, 2, 1],
                },
                &idx,
                2,
                seed,
            )
            .unwrap();
            assert_eq!(bits(&got), bits(&want), "{rt} rows into {dt} by {it}");
        }
    }
}

#[test]
fn set_rows_duplicates_take_the_last_write_on_any_thread_count() {
    let idx = [2, 2, 0, 2, 1, 0, 2];
    let mut first = None;
    for nth in 1..=3 {
        let (got, want) = set_rows_case(
            &SetCase {
                dst_t: DType::F16,
                row_t: DType::F32,
                idx_t: DType::I32,
                shape: [8, 7, 1, 1],
                n_dst: 3,
                idx_ne: [7, 1, 1],
            },
            &idx,
            nth,
            42,
        )
        .unwrap();
        assert_eq!(bits(&got), bits(&want), "{nth} threads");
        let b = bits(&got);
        assert_eq!(first.get_or_insert_with(|| b.clone()), &b);
    }
}

#[test]
fn set_rows_bad_index_is_an_error_and_writes_nothing() {
    for (it, bad) in [(DType::I32, 4i64), (DType::I64, -2), (DType::I64, 1 << 40)] {
        let (err, untouched) = set_rows_case(
            &SetCase {
                dst_t: DType::Q8_0,
                row_t: DType::F32,
                idx_t: it,
                shape: [32, 3, 2, 1],
                n_dst: 4,
                idx_ne: [3, 1, 1],
            },
            &[0, bad, 1],
            2,
            9,
        )
        .unwrap_err();
        let msg = err.to_string();
        assert!(untouched, "destination written despite the error: {msg}");
        let Error::IndexOutOfRange { what, index, len } = &err else {
            panic!("{msg}");
        };
        assert_eq!((*index, *len), (bad, 4), "{msg}");
        assert!(what.contains("index tensor 'slots' at [1, 0, 0]"), "{msg}");
        assert!(
            msg.contains("slots") && msg.contains(&bad.to_string()),
            "{msg}"
        );
    }
    // And values read back are the initial ones.
    let mut rng = Rng::new(3);
    let dst = tensor("kv", DType::F32, &[4, 3]);
    let rows = tensor("rows", DType::F32, &[4, 2]);
    let ids = tensor("ids", DType::I32, &[2]);
    let out = ops::set_rows(&dst, &rows, &ids).unwrap();
    let init = rng.vec(12, -1.0, 1.0);
    let r = exec(
        &[out],
        || {
            dst.write_f32(&init).unwrap();
            rows.write_f32(&[9.0; 8]).unwrap();
            ids.write_i32(&[1, 3]).unwrap();
        },
        2,
    );
    assert!(r.is_err());
    assert_eq!(bits(&dst.to_f32_vec().unwrap()), bits(&init));
}

/// GET_ROWS of `a` (4 x 3, F32, values 0 .. 11 in `av`) by indices the
/// graph computes: `copied`, a CPY of `src_idx` into `idx`. Returns
/// `(a, av, src_idx, idx, copied, get_rows)`.
fn computed_indices() -> (Tensor, Vec<f32>, Tensor, Tensor, Tensor, Tensor) {
    let a = tensor("a", DType::F32, &[4, 3]);
    let src_idx = tensor("src_idx", DType::I32, &[2]);
    let idx = tensor("idx", DType::I32, &[2]);
    let copied = ops::cpy(&src_idx, &idx).unwrap();
    let got = ops::get_rows(&a, &copied).unwrap();
    let av = (0..12).map(|i| i as f32).collect();
    (a, av, src_idx, idx, copied, got)
}

#[test]
fn indices_computed_in_the_graph_are_checked_by_the_kernel_not_the_plan() {
    // The index tensor is produced by a CPY in the same graph: at plan time
    // its memory still holds the old (out-of-range) values, which must not
    // cause a spurious error; the fresh values are used.
    let (a, av, src_idx, idx, _, out) = computed_indices();
    exec(
        &[out.clone()],
        || {
            a.write_f32(&av).unwrap();
            src_idx.write_i32(&[2, 0]).unwrap();
            idx.write_i32(&[100, -5]).unwrap();
        },
        2,
    )
    .unwrap();
    assert_eq!(
        out.to_f32_vec().unwrap(),
        vec![8.0, 9.0, 10.0, 11.0, 0.0, 1.0, 2.0, 3.0]
    );
}

#[test]
fn out_of_range_indices_computed_in_the_graph_never_touch_memory_out_of_range() {
    // Validation cannot see indices the graph computes; the kernels must then
    // neither read nor write outside the tensors: GET_ROWS yields a zero row,
    // SET_ROWS skips the row.
    let (a, av, src_idx, idx, copied, got) = computed_indices();
    let dst = tensor("dst", DType::F32, &[4, 3]);
    let rows = tensor("rows", DType::F32, &[4, 2]);
    let set = ops::set_rows(&dst, &rows, &copied).unwrap();
    exec(
        &[got.clone(), set],
        || {
            a.write_f32(&av).unwrap();
            dst.write_f32(&[-1.0; 12]).unwrap();
            rows.write_f32(&[7.0, 7.0, 7.0, 7.0, 8.0, 8.0, 8.0, 8.0])
                .unwrap();
            src_idx.write_i32(&[1, 1 << 30]).unwrap();
            idx.write_i32(&[0, 0]).unwrap();
        },
        2,
    )
    .unwrap();
    assert_eq!(
        got.to_f32_vec().unwrap(),
        vec![4.0, 5.0, 6.0, 7.0, 0.0, 0.0, 0.0, 0.0]
    );
    let mut want = vec![-1.0; 12];
    want[4..8].copy_from_slice(&[7.0; 4]);
    assert_eq!(dst.to_f32_vec().unwrap(), want);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]
    /// GET_ROWS of random shapes (rows of one to three blocks) from every
    /// source type, on one to three threads: each gathered row is the stored
    /// source row (for block types: that row dequantized) bit for bit.
    #[test]
    fn get_rows_random_shapes(
        ti in 0usize..all_sources().len(),
        blocks in 1usize..4,
        n_src in 1usize..9,
        ne2 in 1usize..3,
        n_idx in 1usize..6,
        nth in 1usize..4,
        seed in 0u64..1000,
    ) {
        let t = all_sources()[ti];
        let ne0 = t.block_size() * blocks;
        let mut rng = Rng::new(seed);
        let a = tensor("a", t, &[ne0, n_src, ne2]);
        let b = tensor("idx", DType::I32, &[n_idx, ne2]);
        let out = ops::get_rows(&a, &b).unwrap();
        let av: Vec<f32> = (0..ne0 * n_src * ne2).map(|_| rng.uniform(-8.0, 8.0).round()).collect();
        let idx: Vec<i32> = (0..n_idx * ne2).map(|_| rng.below(n_src) as i32).collect();
        exec(&[out.clone()], || { fill(&a, &av); b.write_i32(&idx).unwrap(); }, nth).unwrap();
        let stored = a.to_f32_vec().unwrap();
        let got = out.to_f32_vec().unwrap();
        for i2 in 0..ne2 {
            for i in 0..n_idx {
                let r = idx[i2 * n_idx + i] as usize;
                let o = (i2 * n_idx + i) * ne0;
                let s = (i2 * n_src + r) * ne0;
                prop_assert_eq!(bits(&got[o..o + ne0]), bits(&stored[s..s + ne0]), "{}", t);
            }
        }
    }
}
