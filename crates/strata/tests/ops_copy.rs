//! DUP / CONT / CPY / REPEAT / CONCAT on the CPU: any layout to any layout,
//! type conversions and quantization, checked exactly against values read
//! back through an independent path (`Tensor::to_f32_vec` walks the strides).

mod common;

use common::{cpu_round_trip, round_trip, run, tensor, Rng};
use proptest::prelude::*;
use strata::{cpu, ops, DType, Graph, Tensor};

const FLOATS: [DType; 3] = [DType::F32, DType::F16, DType::BF16];
const BLOCKS: [DType; 5] = [
    DType::Q4_0,
    DType::Q4_1,
    DType::Q5_0,
    DType::Q5_1,
    DType::Q8_0,
];

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// Builds the graph of `outputs`, lets `init` write the inputs, computes.
fn exec(outputs: &[Tensor], init: impl FnOnce(), nth: usize) {
    let g = Graph::build(outputs);
    let _bufs = cpu::alloc_graph_host(&g).unwrap();
    init();
    cpu::compute(&g, nth).unwrap();
}

#[test]
fn cpy_between_float_types_permuted_source_reshaped_destination() {
    let mut rng = Rng::new(3);
    for st in FLOATS {
        for dt in FLOATS {
            let base = tensor("src", st, &[5, 3, 4, 2]);
            let src = ops::permute(&base, [2, 0, 3, 1]).unwrap(); // [3, 2, 5, 4]
            let dst = tensor("dst", dt, &[6, 20]);
            let out = ops::cpy(&src, &dst).unwrap();
            let v = rng.vec(120, -4.0, 4.0);
            let got = run(&[out], &[(&base, &v)], 2).remove(0);
            // Elements move in logical order, converted once to dt.
            let want = round_trip(dt, &src.to_f32_vec().unwrap());
            assert_eq!(bits(&got), bits(&want), "{st} -> {dt}");
        }
    }
}

#[test]
fn cpy_into_strided_destination_leaves_the_rest_untouched() {
    let mut rng = Rng::new(4);
    for (st, dt) in [
        (DType::F32, DType::F16),
        (DType::F16, DType::F32),
        (DType::BF16, DType::BF16),
    ] {
        let src_base = tensor("src", st, &[12, 10]);
        let src = ops::transpose(&src_base).unwrap(); // [10, 12]
        let dst_base = tensor("dst", dt, &[13, 12]);
        let ts = dt.type_size();
        let dst = ops::view_2d(&dst_base, 10, 12, 13 * ts, ts).unwrap();
        let out = ops::cpy(&src, &dst).unwrap();
        let sv = rng.vec(120, -2.0, 2.0);
        let init = rng.vec(156, 10.0, 11.0);
        run(&[out.clone()], &[(&src_base, &sv), (&dst_base, &init)], 3);
        assert_eq!(
            bits(&out.to_f32_vec().unwrap()),
            bits(&round_trip(dt, &src.to_f32_vec().unwrap())),
            "{st} -> {dt}"
        );
        let all = dst_base.to_f32_vec().unwrap();
        let init = round_trip(dt, &init);
        for r in 0..12 {
            for c in [0, 11, 12] {
                assert_eq!(
                    all[r * 13 + c].to_bits(),
                    init[r * 13 + c].to_bits(),
                    "untouched ({c}, {r})"
                );
            }
        }
    }
}

#[test]
fn cpy_quantizes_rows_of_every_block_type() {
    let mut rng = Rng::new(5);
    for st in FLOATS {
        for qt in BLOCKS {
            let base = tensor("src", st, &[3, 64, 2]);
            let src = ops::permute(&base, [1, 0, 2, 3]).unwrap(); // [64, 3, 2]
                                                                  // Destination rows contiguous but strided: every other row of a bigger tensor.
            let dst_base = tensor("dst", qt, &[64, 12]);
            let rs = qt.row_size(64);
            let dst = ops::view_2d(&dst_base, 64, 6, 2 * rs, rs).unwrap();
            let out = ops::cpy(&src, &dst).unwrap();
            let v = rng.vec(384, -3.0, 3.0);
            let init = rng.vec(64 * 12, -1.0, 1.0);
            run(&[out.clone()], &[(&base, &v), (&dst_base, &init)], 2);
            let want = cpu_round_trip(qt, &src.to_f32_vec().unwrap());
            assert_eq!(
                bits(&out.to_f32_vec().unwrap()),
                bits(&want),
                "{st} -> {qt}"
            );
            // Rows between the written ones keep their old blocks.
            let all = dst_base.to_f32_vec().unwrap();
            let old = round_trip(qt, &init);
            for r in (0..12).step_by(2) {
                assert_eq!(
                    bits(&all[r * 64..(r + 1) * 64]),
                    bits(&old[r * 64..(r + 1) * 64])
                );
            }
        }
    }
}

#[test]
fn same_block_type_copy_is_a_byte_copy_and_cont_keeps_blocks() {
    let mut rng = Rng::new(6);
    for qt in BLOCKS {
        let a = tensor("a", qt, &[64, 4]);
        let b = tensor("b", qt, &[128, 2]);
        let out = ops::cpy(&a, &b).unwrap();
        run(&[out], &[(&a, &rng.vec(256, -1.0, 1.0))], 2);
        assert_eq!(a.read_bytes().unwrap(), b.read_bytes().unwrap(), "{qt}");

        // CONT of a permuted block tensor (rows stay whole): same values.
        let base = tensor("q", qt, &[32, 3, 4]);
        let p = ops::permute(&base, [0, 2, 1, 3]).unwrap();
        let c = ops::cont(&p).unwrap();
        let got = run(&[c.clone()], &[(&base, &rng.vec(384, -1.0, 1.0))], 3).remove(0);
        assert!(c.is_contiguous());
        assert_eq!(bits(&got), bits(&p.to_f32_vec().unwrap()), "cont {qt}");
    }
}

#[test]
fn integer_copies_are_exact() {
    let base = tensor("i", DType::I32, &[4, 3, 5]);
    let p = ops::permute(&base, [2, 1, 0, 3]).unwrap(); // [5, 3, 4]
    let dst = tensor("d", DType::I32, &[12, 5]);
    let out = ops::cpy(&p, &dst).unwrap();
    let dup = ops::dup(&p).unwrap();
    let vals: Vec<i32> = (0..60).map(|i| 0x7fff_0000 - i * 0x0101_0101).collect();
    exec(
        &[out.clone(), dup.clone()],
        || base.write_i32(&vals).unwrap(),
        2,
    );
    // Logical order of p: i0 (=base dim 2) fastest.
    let mut want = Vec::new();
    for i2 in 0..4 {
        for i1 in 0..3 {
            for i0 in 0..5 {
                want.push(vals[i0 * 12 + i1 * 4 + i2]);
            }
        }
    }
    assert_eq!(out.to_i32_vec().unwrap(), want);
    assert_eq!(dup.to_i32_vec().unwrap(), want);
}

#[test]
fn dup_and_cont_of_float_views() {
    let mut rng = Rng::new(7);
    for t in FLOATS {
        let base = tensor("x", t, &[7, 5, 3]);
        let tr = ops::transpose(&base).unwrap();
        let v = ops::view_3d(
            &base,
            [4, 5, 2],
            7 * t.type_size(),
            35 * t.type_size(),
            2 * t.type_size(),
        )
        .unwrap();
        let c1 = ops::cont(&tr).unwrap();
        let c2 = ops::dup(&v).unwrap();
        let got = run(&[c1, c2], &[(&base, &rng.vec(105, -1.0, 1.0))], 2);
        assert_eq!(bits(&got[0]), bits(&tr.to_f32_vec().unwrap()), "cont {t}");
        assert_eq!(bits(&got[1]), bits(&v.to_f32_vec().unwrap()), "dup {t}");
    }
}

#[test]
fn repeat_tiles_any_source() {
    let mut rng = Rng::new(8);
    for t in [DType::F32, DType::F16, DType::I32] {
        let base = tensor("a", t, &[2, 3, 1, 2]);
        let a = ops::transpose(&base).unwrap(); // [3, 2, 1, 2]
                                                // Only the shape tensor's shape matters, not its type.
        let shape = tensor("shape", DType::I8, &[6, 4, 3, 2]);
        let r = ops::repeat(&a, &shape).unwrap();
        let v: Vec<f32> = (0..12).map(|_| rng.below(1000) as f32 - 500.0).collect();
        let got = run(&[r], &[(&base, &v)], 3).remove(0);
        let av = a.to_f32_vec().unwrap();
        let mut want = Vec::new();
        for i3 in 0..2 {
            for i2 in 0..3 {
                for i1 in 0..4 {
                    for i0 in 0..6 {
                        // a.ne2 == 1: every i2 reads plane 0.
                        let _ = i2;
                        want.push(av[((i3 % 2) * 2 + i1 % 2) * 3 + i0 % 3]);
                    }
                }
            }
        }
        assert_eq!(bits(&got), bits(&want), "{t}");
    }
}

#[test]
fn concat_along_every_dim() {
    let mut rng = Rng::new(9);
    for t in [DType::F32, DType::F16, DType::I32] {
        for dim in 0..4 {
            let mut na = [3, 2, 2, 2];
            let mut nb = na;
            na[dim] = 2;
            nb[dim] = 3;
            let a = tensor("a", t, &na);
            // b is a permuted view of a contiguous tensor with dims 0 and 1 swapped.
            let b_base = tensor("b", t, &[nb[1], nb[0], nb[2], nb[3]]);
            let b = ops::transpose(&b_base).unwrap();
            let c = ops::concat(&a, &b, dim).unwrap();
            let va: Vec<f32> = (0..na.iter().product())
                .map(|_| rng.below(100) as f32)
                .collect();
            let vb: Vec<f32> = (0..nb.iter().product())
                .map(|_| rng.below(100) as f32 + 100.0)
                .collect();
            let got = run(&[c.clone()], &[(&a, &va), (&b_base, &vb)], 2).remove(0);
            let (av, bv) = (a.to_f32_vec().unwrap(), b.to_f32_vec().unwrap());
            let nc = c.ne();
            let mut want = Vec::new();
            for i3 in 0..nc[3] {
                for i2 in 0..nc[2] {
                    for i1 in 0..nc[1] {
                        for i0 in 0..nc[0] {
                            let mut i = [i0, i1, i2, i3];
                            let (src, ne) = if i[dim] < na[dim] {
                                (&av, na)
                            } else {
                                i[dim] -= na[dim];
                                (&bv, nb)
                            };
                            want.push(src[((i[3] * ne[2] + i[2]) * ne[1] + i[1]) * ne[0] + i[0]]);
                        }
                    }
                }
            }
            assert_eq!(bits(&got), bits(&want), "{t} dim {dim}");
        }
    }
}

#[test]
fn identical_bits_for_one_two_three_threads() {
    let mut rng = Rng::new(10);
    let v = rng.vec(32 * 7 * 3, -2.0, 2.0);
    let mut results = Vec::new();
    for nth in 1..=3 {
        let base = tensor("src", DType::F16, &[7, 32, 3]);
        let src = ops::permute(&base, [1, 0, 2, 3]).unwrap();
        let q = tensor("q", DType::Q4_0, &[32, 21]);
        let f = tensor("f", DType::F32, &[21, 32]);
        let o1 = ops::cpy(&src, &q).unwrap();
        let o2 = ops::cpy(&src, &f).unwrap();
        let got = run(&[o1, o2], &[(&base, &v)], nth);
        results.push((bits(&got[0]), bits(&got[1])));
    }
    assert_eq!(results[0], results[1]);
    assert_eq!(results[0], results[2]);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]
    #[test]
    fn random_layouts_and_types(
        ne in proptest::array::uniform4(1usize..5),
        perm in Just([0usize, 1, 2, 3]).prop_shuffle(),
        si in 0usize..3,
        di in 0usize..4,
        split in 1usize..5,
        nth in 1usize..4,
        seed in 0u64..1000,
    ) {
        let st = FLOATS[si];
        let n: usize = ne.iter().product();
        let base = tensor("src", st, &ne);
        let mut axes = [0; 4];
        for (i, &p) in perm.iter().enumerate() {
            axes[i] = p;
        }
        let src = ops::permute(&base, axes).unwrap();
        // Destination: Q8_0 rows when asked and 32 divides n, else a float of another shape.
        let (dt, dims) = if di == 3 && n.is_multiple_of(32) {
            (DType::Q8_0, vec![32, n.div_ceil(32)])
        } else if n.is_multiple_of(split) {
            (FLOATS[di % 3], vec![n / split, split])
        } else {
            (FLOATS[di % 3], vec![n])
        };
        let dst = tensor("dst", dt, &dims);
        let out = ops::cpy(&src, &dst).unwrap();
        let mut rng = Rng::new(seed);
        let got = run(&[out], &[(&base, &rng.vec(n, -5.0, 5.0))], nth).remove(0);
        let want = round_trip(dt, &src.to_f32_vec().unwrap());
        prop_assert_eq!(bits(&got), bits(&want));
    }
}
