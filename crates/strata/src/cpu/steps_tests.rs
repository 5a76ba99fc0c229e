//! Packed MUL_MATs over one input run as one step (`steps`): with the
//! results of each matmul computed alone, bit for bit, whatever the thread
//! count; and never where moving a node would change what it reads.

use super::{alloc_graph_host, packed_buffer_type, CpuBackend};
use crate::backend::{alloc_tensors, Backend, Buffer};
use crate::conformance::Rng;
use crate::{ops, DType, Graph, Tensor};
use std::sync::Arc;

const K: usize = 256;

/// A packed weight of `rows` rows of K, filled from `seed`.
fn weight(t: DType, rows: usize, seed: u64, keep: &mut Vec<Arc<dyn Buffer>>) -> Tensor {
    let w = Tensor::new(t, &[K, rows]).unwrap();
    keep.extend(alloc_tensors(std::slice::from_ref(&w), &packed_buffer_type()).unwrap());
    w.write_f32(&Rng::new(seed).vec(K * rows, -1.0, 1.0))
        .unwrap();
    w
}

/// Two [`weight`]s of type `t` with `rows` rows (seeds `seed` and
/// `seed + 1`), an F32 activation of `cols` columns (not allocated), and the
/// weights' buffers.
fn two_weights(
    t: DType,
    rows: [usize; 2],
    seed: u64,
    cols: usize,
) -> (Tensor, Tensor, Tensor, Vec<Arc<dyn Buffer>>) {
    let mut keep = Vec::new();
    let w1 = weight(t, rows[0], seed, &mut keep);
    let w2 = weight(t, rows[1], seed + 1, &mut keep);
    let x = Tensor::new(DType::F32, &[K, cols]).unwrap();
    (w1, w2, x, keep)
}

/// `mul_mat(w, x)` alone in a graph of its own on `nth` threads (the
/// reference: a step of one node).
fn alone(w: &Tensor, x: &[f32], cols: usize, nth: usize) -> Vec<f32> {
    let xi = Tensor::new(DType::F32, &[K, cols]).unwrap();
    let y = ops::mul_mat(w, &xi).unwrap();
    let g = Graph::build(std::slice::from_ref(&y));
    let _b = alloc_graph_host(&g).unwrap();
    xi.write_f32(x).unwrap();
    let mut be = CpuBackend::new(nth);
    be.graph_compute(&g).unwrap();
    assert_eq!(be.step_sizes(), vec![1]);
    y.to_f32_vec().unwrap()
}

fn input(cols: usize, seed: u64) -> Vec<f32> {
    Rng::new(seed).vec(K * cols, -2.0, 2.0)
}

#[test]
fn matmuls_over_one_input_run_as_one_step_with_the_same_bits() {
    // Q4_0 and Q4_0 share activations; Q4_K and Q6_K (Q8_K) too, but not
    // IQ4_XS, whose Q8_K columns carry bias terms in place of the bsums
    // (two IQ4_XS weights share theirs); Q4_0 and Q8_0 do not (another
    // offset term), so they stay apart.
    let cases: [(&[DType], &[usize]); 5] = [
        (&[DType::Q4_0, DType::Q4_0, DType::Q4_0], &[3]),
        (&[DType::Q4_K, DType::Q6_K, DType::IQ4_XS], &[2, 1]),
        (&[DType::IQ4_XS, DType::IQ4_XS], &[2]),
        (&[DType::Q4_0, DType::Q8_0], &[1, 1]),
        // Q8_0 and IQ4_NL share activations; on Arm IQ4_NL has no packed
        // kernels where Q8_0 has, so the step runs them one after another.
        (&[DType::Q8_0, DType::IQ4_NL], &[2]),
    ];
    for (types, steps) in cases {
        for cols in [1, 5, 40] {
            for nth in [1, 2, 3] {
                let mut keep = Vec::new();
                let ws: Vec<Tensor> = types
                    .iter()
                    .enumerate()
                    .map(|(i, &t)| weight(t, 32 + 16 * i, 7 + i as u64, &mut keep))
                    .collect();
                let x = Tensor::new(DType::F32, &[K, cols]).unwrap();
                let ys: Vec<Tensor> = ws.iter().map(|w| ops::mul_mat(w, &x).unwrap()).collect();
                let g = Graph::build(&ys);
                keep.extend(alloc_graph_host(&g).unwrap());
                let data = input(cols, 3);
                x.write_f32(&data).unwrap();
                let mut be = CpuBackend::new(nth);
                be.graph_compute(&g).unwrap();
                assert_eq!(be.step_sizes(), steps, "{types:?}");
                for (w, y) in ws.iter().zip(&ys) {
                    let got = y.to_f32_vec().unwrap();
                    let want = alone(w, &data, cols, nth);
                    let same = got
                        .iter()
                        .zip(&want)
                        .all(|(a, b)| a.to_bits() == b.to_bits());
                    assert!(same, "{} with {cols} columns, {nth} threads", w.dtype());
                }
            }
        }
    }
}

/// The graph K = w_k·x, scale(K, s), V = w_v·x (that order) on 2 threads,
/// K kept as an output or not; its step sizes, K, V and the scale's result,
/// each checked against the op alone. Returns whether V's memory overlaps K's.
fn k_scale_v(t: DType, cols: usize, s: f32, keep_k: bool, seed: u64) -> (Vec<usize>, bool) {
    let (wk, wv, x, mut keep) = two_weights(t, [48, 32], seed, cols);
    let k = ops::mul_mat(&wk, &x).unwrap();
    let rk = ops::scale(&k, s).unwrap();
    let v = ops::mul_mat(&wv, &x).unwrap();
    let outs = if keep_k {
        vec![k.clone(), rk.clone(), v.clone()]
    } else {
        vec![rk.clone(), v.clone()]
    };
    let g = Graph::build(&outs);
    keep.extend(alloc_graph_host(&g).unwrap());
    let data = input(cols, seed + 2);
    x.write_f32(&data).unwrap();
    let mut be = CpuBackend::new(2);
    be.graph_compute(&g).unwrap();
    assert_eq!(v.to_f32_vec().unwrap(), alone(&wv, &data, cols, 2));
    let kk = alone(&wk, &data, cols, 2);
    if keep_k {
        assert_eq!(k.to_f32_vec().unwrap(), kk);
    }
    let scaled: Vec<f32> = kk.iter().map(|v| v * s).collect();
    assert_eq!(rk.to_f32_vec().unwrap(), scaled);
    let (sk, sv) = (k.storage().unwrap(), v.storage().unwrap());
    let shared = Arc::ptr_eq(&sk.buffer, &sv.buffer)
        && sk.offset < sv.offset + v.nbytes()
        && sv.offset < sk.offset + k.nbytes();
    (be.step_sizes(), shared)
}

#[test]
fn a_later_matmul_moves_up_past_nodes_it_does_not_touch() {
    // V reads only x and writes memory of its own (every result is an
    // output, so none is reused), so it joins K.
    let (steps, shared) = k_scale_v(DType::Q8_0, 2, 0.5, true, 1);
    assert!(!shared);
    assert_eq!(steps, vec![2, 1], "K and V together, then the scale");
}

#[test]
fn a_matmul_never_moves_past_a_write_to_its_input() {
    // mm1 reads x; CPY then overwrites x with z; mm2 reads the result (a view
    // of x: the same memory, type and shape as mm1's input). Moving mm2 up
    // to mm1 would make it read the old x.
    let (w1, w2, x, mut keep) = two_weights(DType::Q4_0, [32, 32], 4, 3);
    let z = Tensor::new(DType::F32, &[K, 3]).unwrap();
    let y1 = ops::mul_mat(&w1, &x).unwrap();
    let c = ops::cpy(&z, &x).unwrap();
    let y2 = ops::mul_mat(&w2, &c).unwrap();
    let g = Graph::build(&[y1.clone(), y2.clone()]);
    keep.extend(alloc_graph_host(&g).unwrap());
    let (xd, zd) = (input(3, 11), input(3, 12));
    x.write_f32(&xd).unwrap();
    z.write_f32(&zd).unwrap();
    let mut be = CpuBackend::new(2);
    be.graph_compute(&g).unwrap();
    assert_eq!(be.step_sizes(), vec![1, 1, 1]);
    assert_eq!(y1.to_f32_vec().unwrap(), alone(&w1, &xd, 3, 2));
    assert_eq!(y2.to_f32_vec().unwrap(), alone(&w2, &zd, 3, 2));
}

#[test]
fn a_matmul_never_moves_onto_memory_a_passed_node_still_reads() {
    // Only the scale and V kept: the planner may give V the memory of K
    // (dead after the scale). If it does, V must wait for the scale; either
    // way the results are those of each op alone.
    let (steps, shared) = k_scale_v(DType::Q4_1, 4, 3.0, false, 6);
    let want = if shared { vec![1, 1, 1] } else { vec![2, 1] };
    assert_eq!(steps, want);
}

#[test]
fn matmuls_writing_the_same_memory_never_share_a_step() {
    // Plans made by hand: two packed Q4_0 MUL_MATs over one input, their
    // outputs at the same address (then apart). Nothing lies between them,
    // so only the members' own check can keep them apart.
    use super::ops::NodePlan;
    use super::steps::schedule;
    use super::TView;
    let mut mem = vec![0u8; 1 << 16];
    let base = mem.as_mut_ptr();
    let view = |off: usize, t: DType, ne: [usize; 4], packed: bool| {
        let rs = t.row_size(ne[0]);
        let nb = [t.type_size(), rs, rs * ne[1], rs * ne[1] * ne[2]];
        // SAFETY: every view spans at most 16 KiB from offsets below 32 KiB
        // of `mem`, which outlives them; nothing is computed through them.
        let mut v = unsafe { TView::from_raw(base.add(off), t, ne, nb) };
        v.packed = packed;
        v
    };
    let mm = |w_off: usize, out_off: usize| {
        let mut src: [Option<TView>; crate::tensor::MAX_SRC] = Default::default();
        src[0] = Some(view(w_off, DType::Q4_0, [K, 32, 1, 1], true));
        src[1] = Some(view(0, DType::F32, [K, 1, 1, 1], false));
        NodePlan {
            op: crate::ops::Op::MulMat,
            dst: view(out_off, DType::F32, [32, 1, 1, 1], false),
            src,
        }
    };
    let sizes = |plans: Vec<(usize, NodePlan)>| {
        let (_, steps) = schedule(plans);
        steps.iter().map(|s| s.len()).collect::<Vec<_>>()
    };
    assert_eq!(
        sizes(vec![(0, mm(4096, 30000)), (1, mm(16384, 30000))]),
        vec![1, 1]
    );
    assert_eq!(
        sizes(vec![(0, mm(4096, 30000)), (1, mm(16384, 31000))]),
        vec![2]
    );
}

#[test]
fn permuting_in_place_gives_the_order() {
    use super::steps::permute;
    let mut rng = Rng::new(21);
    for n in [0, 1, 2, 5, 17, 64] {
        for _ in 0..20 {
            // A random permutation (Fisher-Yates from the generator's floats).
            let mut order: Vec<usize> = (0..n).collect();
            for i in (1..n).rev() {
                let r = rng.vec(1, 0.0, (i + 1) as f32)[0] as usize;
                order.swap(i, r.min(i));
            }
            let mut v: Vec<usize> = (100..100 + n).collect();
            permute(&mut v, &order);
            let want: Vec<usize> = order.iter().map(|&o| 100 + o).collect();
            assert_eq!(v, want, "{order:?}");
        }
    }
}

#[test]
fn the_profile_counts_every_step_by_kind() {
    let (w1, w2, x, mut keep) = two_weights(DType::Q4_0, [32, 16], 1, 2);
    let y1 = ops::mul_mat(&w1, &x).unwrap();
    let y2 = ops::mul_mat(&w2, &x).unwrap();
    let s = ops::scale(&y1, 2.0).unwrap();
    let g = Graph::build(&[y1, y2, s]);
    keep.extend(alloc_graph_host(&g).unwrap());
    x.write_f32(&input(2, 1)).unwrap();
    let mut be = CpuBackend::new(2);
    be.graph_compute(&g).unwrap();
    assert!(be.profile().is_empty(), "off by default");
    be.set_profiling(true);
    let clock = be.kernel_clock();
    let before = clock.elapsed();
    for _ in 0..3 {
        be.graph_compute(&g).unwrap();
    }
    let p = be.profile();
    let kinds: Vec<(&str, u64)> = p.iter().map(|e| (e.what.as_str(), e.count)).collect();
    assert_eq!(kinds.len(), 2, "{kinds:?}");
    assert!(kinds.contains(&("MUL_MAT q4_0+q4_0", 3)), "{kinds:?}");
    assert!(kinds.contains(&("SCALE f32", 3)), "{kinds:?}");
    let total: std::time::Duration = p.iter().map(|e| e.time).sum();
    assert!(total > std::time::Duration::ZERO);
    assert!(
        total <= clock.elapsed() - before,
        "steps inside the kernel time"
    );
    assert!(p.windows(2).all(|w| w[0].time >= w[1].time), "most first");
    be.set_profiling(true);
    assert!(be.profile().is_empty(), "restarting clears");
    be.set_profiling(false);
    be.graph_compute(&g).unwrap();
    assert!(be.profile().is_empty());
}
