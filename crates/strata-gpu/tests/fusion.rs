//! Fusion (issue #45): runs of nodes the backend computes in one dispatch
//! when the node between them is used once and is not an OUTPUT, and not
//! otherwise; the results are the CPU's either way. Counted through
//! `GpuContext::counters` (`dispatches`, `nodes_fused`). The conformance
//! suite's fused cases (`RMS_NORM+MUL`, ...) check the values of each
//! fusion; this checks when it happens. Skips without a GPU.

use std::sync::Mutex;

use strata::backend::{alloc_graph, Backend};
use strata::conformance::{nmse, Rng};
use strata::cpu::CpuBackend;
use strata::ops::{RopeMode, RopeParams};
use strata::{ops, DType, Flags, Graph, Tensor};

mod support;

/// Computes `out` (its inputs filled with `inputs`' values) on `backend`;
/// returns its values.
fn compute(backend: &mut dyn Backend, inputs: &[(Tensor, Vec<f32>)], out: &Tensor) -> Vec<f32> {
    let g = Graph::build(std::slice::from_ref(out));
    let _bufs = alloc_graph(&g, &backend.default_buffer_type()).unwrap();
    for (t, v) in inputs {
        if t.dtype() == DType::I32 {
            t.write_i32(&v.iter().map(|&x| x as i32).collect::<Vec<_>>())
                .unwrap();
        } else {
            t.write_f32(v).unwrap();
        }
    }
    backend.graph_compute(&g).unwrap();
    backend.synchronize().unwrap();
    out.to_f32_vec().unwrap()
}

/// Builds a graph twice (fresh tensors for each backend), computes it on
/// the GPU and the CPU and returns the GPU's (dispatches, nodes fused).
fn run(build: impl Fn() -> (Vec<(Tensor, Vec<f32>)>, Tensor)) -> Option<(u64, u64)> {
    // the counters are the device's: one test at a time counts
    static ONE: Mutex<()> = Mutex::new(());
    let _one = ONE.lock().unwrap_or_else(|p| p.into_inner());
    let dev = support::gpu()?;
    let mut gpu = dev.backend();
    let (ins, out) = build();
    let before = dev.context().counters();
    let got = compute(&mut gpu, &ins, &out);
    let spent = dev.context().counters() - before;
    let (ins, out) = build();
    let want = compute(&mut CpuBackend::new(1), &ins, &out);
    let e = nmse(&got, &want);
    assert!(e < 1e-6, "nmse {e}");
    Some((spent.dispatches, spent.nodes_fused))
}

/// [`run`]: on a GPU, asserts its (dispatches, nodes fused) are `want`.
fn assert_counts(want: (u64, u64), build: impl Fn() -> (Vec<(Tensor, Vec<f32>)>, Tensor)) {
    if let Some(r) = run(build) {
        assert_eq!(r, want);
    }
}

fn values(n: usize, seed: u64) -> Vec<f32> {
    Rng::new(seed).vec(n, -1.0, 1.0)
}

fn input(dims: &[usize], seed: u64) -> (Tensor, Vec<f32>) {
    let t = Tensor::new(DType::F32, dims).unwrap();
    let n = t.nelements();
    (t, values(n, seed))
}

/// A graph builder for [`run`]: RMS_NORM of x `[64, 3]`, then `then(norm,
/// w)` with the weight w `[64]` makes the output.
fn norm_graph(
    then: impl Fn(Tensor, &Tensor) -> Tensor,
) -> impl Fn() -> (Vec<(Tensor, Vec<f32>)>, Tensor) {
    move || {
        let (x, w) = (input(&[64, 3], 1), input(&[64], 2));
        let n = ops::rms_norm(&x.0, 1e-5).unwrap();
        let out = then(n, &w.0);
        (vec![x, w], out)
    }
}

#[test]
fn rms_norm_then_mul_is_one_dispatch() {
    assert_counts((1, 1), norm_graph(|n, w| ops::mul(&n, w).unwrap()));
}

#[test]
fn a_norm_used_again_is_not_fused() {
    assert_counts(
        (3, 0),
        norm_graph(|n, w| ops::add(&ops::mul(&n, w).unwrap(), &n).unwrap()),
    );
}

#[test]
fn an_output_norm_is_not_fused() {
    assert_counts(
        (2, 0),
        norm_graph(|n, w| {
            n.set_flags(Flags(n.flags().0 | Flags::OUTPUT.0));
            ops::mul(&n, w).unwrap()
        }),
    );
}

/// ADD+RMS_NORM+MUL: the residual add joins the norm and its weight, and
/// the sum is still stored (the final ADD reads it).
#[test]
fn the_residual_add_joins_the_norm_and_its_weight() {
    assert_counts((2, 2), || {
        let (a, b, w) = (input(&[300, 2], 1), input(&[300, 2], 2), input(&[300], 3));
        let sum = ops::add(&a.0, &b.0).unwrap();
        let normed = ops::mul(&ops::rms_norm(&sum, 1e-6).unwrap(), &w.0).unwrap();
        let out = ops::add(&normed, &sum).unwrap();
        (vec![a, b, w], out)
    });
}

#[test]
fn a_bias_add_joins_the_matrix_vector_product() {
    assert_counts((1, 1), || {
        let (a, b, bias) = (input(&[64, 16], 1), input(&[64, 2], 2), input(&[16], 3));
        let out = ops::add(&ops::mul_mat(&a.0, &b.0).unwrap(), &bias.0).unwrap();
        (vec![a, b, bias], out)
    });
    // the product used again: two dispatches (and the third op)
    assert_counts((3, 0), || {
        let (a, b, bias) = (input(&[64, 16], 1), input(&[64, 2], 2), input(&[16], 3));
        let p = ops::mul_mat(&a.0, &b.0).unwrap();
        let out = ops::mul(&ops::add(&p, &bias.0).unwrap(), &p).unwrap();
        (vec![a, b, bias], out)
    });
}

/// SwiGLU of the gate and up products of x `[64, 2]` (weights `[64, 40]`);
/// `reuse`: the up product is read again (added to the result).
fn gate_up(reuse: bool) -> (Vec<(Tensor, Vec<f32>)>, Tensor) {
    let (wg, wu, x) = (input(&[64, 40], 1), input(&[64, 40], 2), input(&[64, 2], 3));
    let up = ops::mul_mat(&wu.0, &x.0).unwrap();
    let gate = ops::mul_mat(&wg.0, &x.0).unwrap();
    let mut out = ops::swiglu_split(&gate, &up).unwrap();
    if reuse {
        out = ops::add(&out, &up).unwrap();
    }
    (vec![wg, wu, x], out)
}

/// Attention of the Q, K and V products of x `[64, 1]` (64 × 128, 64 ×
/// 64, 64 × 64 weights: two query heads, one KV head, one cell).
fn qkv() -> (Vec<(Tensor, Vec<f32>)>, Tensor) {
    let x = input(&[64, 1], 1);
    let (wq, wk, wv) = (
        input(&[64, 128], 2),
        input(&[64, 64], 3),
        input(&[64, 64], 4),
    );
    let q = ops::mul_mat(&wq.0, &x.0).unwrap();
    let k = ops::mul_mat(&wk.0, &x.0).unwrap();
    let v = ops::mul_mat(&wv.0, &x.0).unwrap();
    let q = ops::permute(&ops::reshape(&q, &[64, 2, 1]).unwrap(), [0, 2, 1, 3]).unwrap();
    let k = ops::reshape(&k, &[64, 1, 1]).unwrap();
    let v = ops::reshape(&v, &[64, 1, 1]).unwrap();
    let out = ops::flash_attn_ext(&q, &k, &v, None, 0.125, 0.0, 0.0).unwrap();
    (vec![x, wq, wk, wv], out)
}

#[test]
fn products_of_one_activation_share_a_dispatch_where_subgroups_are() {
    let Some(dev) = support::gpu() else { return };
    if dev.context().has_subgroups() {
        // gate and up in one dispatch, the GLU in another
        assert_counts((2, 1), || gate_up(false));
        assert_counts((3, 1), || gate_up(true));
        // Q, K and V in one, the attention in another
        assert_counts((2, 2), qkv);
    } else {
        assert_counts((3, 0), || gate_up(false));
        assert_counts((4, 0), qkv);
    }
}

/// ROPE of K `[64, 2, 3]` reshaped into rows of a `[128, 8]` cache;
/// `reuse`: the rotated K is read again (added to itself after the write).
fn rope_into_cache(reuse: bool) -> (Vec<(Tensor, Vec<f32>)>, Tensor) {
    let x = input(&[64, 2, 3], 1);
    let pos = Tensor::new(DType::I32, &[3]).unwrap();
    let cache = Tensor::new(DType::F16, &[128, 8]).unwrap();
    let ids = Tensor::new(DType::I32, &[3]).unwrap();
    let r = ops::rope(&x.0, &pos, RopeParams::new(64, RopeMode::Neox, 10000.0)).unwrap();
    let rows = ops::reshape(&r, &[128, 3]).unwrap();
    let mut out = ops::set_rows(&cache, &rows, &ids).unwrap();
    let ids2 = Tensor::new(DType::I32, &[3]).unwrap();
    if reuse {
        // twice the rotated K into three other cells
        let twice = ops::reshape(&ops::add(&r, &r).unwrap(), &[128, 3]).unwrap();
        out = ops::set_rows(&out, &twice, &ids2).unwrap();
    }
    let mut inputs = vec![
        x,
        (pos, vec![7.0, 8.0, 9.0]),
        (cache, values(128 * 8, 4)),
        (ids, vec![5.0, 0.0, 2.0]),
    ];
    if reuse {
        inputs.push((ids2, vec![1.0, 3.0, 4.0]));
    }
    (inputs, out)
}

#[test]
fn rope_writes_the_cache_rows_itself() {
    assert_counts((1, 1), || rope_into_cache(false));
}

#[test]
fn a_rotated_k_used_again_is_not_fused() {
    if let Some((_, fused)) = run(|| rope_into_cache(true)) {
        assert_eq!(fused, 0);
    }
}

/// SwiGLU of g and u `[256, 2]` into the down product (weights `[256,
/// 16]`) and the residual r `[16, 2]` added; `reuse`: the GLU is read
/// again (by a second product, added on).
fn glu_down(reuse: bool) -> (Vec<(Tensor, Vec<f32>)>, Tensor) {
    let (g, u) = (input(&[256, 2], 1), input(&[256, 2], 2));
    let (w, r) = (input(&[256, 16], 3), input(&[16, 2], 4));
    let glu = ops::swiglu_split(&g.0, &u.0).unwrap();
    let mut out = ops::add(&ops::mul_mat(&w.0, &glu).unwrap(), &r.0).unwrap();
    if reuse {
        out = ops::add(&out, &ops::mul_mat(&w.0, &glu).unwrap()).unwrap();
    }
    (vec![g, u, w, r], out)
}

#[test]
fn the_glu_and_the_residual_join_the_down_product() {
    assert_counts((1, 2), || glu_down(false));
}

#[test]
fn a_glu_used_again_is_not_fused_into_a_product() {
    // the GLU, the first product with its ADD, the second, the last ADD
    assert_counts((4, 1), || glu_down(true));
}

#[test]
fn a_feed_forward_block_is_two_dispatches_where_subgroups_are() {
    let Some(dev) = support::gpu() else { return };
    let ffn = || {
        let (wg, wu, wd) = (
            input(&[64, 96], 1),
            input(&[64, 96], 2),
            input(&[96, 64], 3),
        );
        let x = input(&[64, 1], 4);
        let gate = ops::mul_mat(&wg.0, &x.0).unwrap();
        let up = ops::mul_mat(&wu.0, &x.0).unwrap();
        let glu = ops::swiglu_split(&gate, &up).unwrap();
        let out = ops::add(&ops::mul_mat(&wd.0, &glu).unwrap(), &x.0).unwrap();
        (vec![wg, wu, wd, x], out)
    };
    if dev.context().has_subgroups() {
        // gate and up in one dispatch; the GLU, down and the residual in another
        assert_counts((2, 3), ffn);
    } else {
        assert_counts((3, 2), ffn);
    }
}

/// ROPE of K `[64, 2, 3]` into a `[128, 8]` cache and V rows `[96, 3]`
/// into a `[96, 8]` one, both caches the output; `same_ids`: the V write
/// takes the K write's ids (else its own, the same values).
fn kv_writes(same_ids: bool) -> (Vec<(Tensor, Vec<f32>)>, Tensor) {
    let (x, vr) = (input(&[64, 2, 3], 1), input(&[96, 3], 2));
    let pos = Tensor::new(DType::I32, &[3]).unwrap();
    let k_cache = Tensor::new(DType::F16, &[128, 8]).unwrap();
    let v_cache = Tensor::new(DType::F16, &[96, 8]).unwrap();
    let ids = Tensor::new(DType::I32, &[3]).unwrap();
    let v_ids = Tensor::new(DType::I32, &[3]).unwrap();
    let r = ops::rope(&x.0, &pos, RopeParams::new(64, RopeMode::Neox, 10000.0)).unwrap();
    let rows = ops::reshape(&r, &[128, 3]).unwrap();
    let k_all = ops::set_rows(&k_cache, &rows, &ids).unwrap();
    let v_all = ops::set_rows(&v_cache, &vr.0, if same_ids { &ids } else { &v_ids }).unwrap();
    let flat = |t: &Tensor| ops::reshape(t, &[t.nelements()]).unwrap();
    let out = ops::concat(&flat(&k_all), &flat(&v_all), 0).unwrap();
    let mut inputs = vec![
        x,
        vr,
        (pos, vec![7.0, 8.0, 9.0]),
        (k_cache, values(128 * 8, 4)),
        (v_cache, values(96 * 8, 5)),
        (ids, vec![5.0, 0.0, 2.0]),
    ];
    if !same_ids {
        inputs.push((v_ids, vec![5.0, 0.0, 2.0]));
    }
    (inputs, out)
}

#[test]
fn the_v_cache_write_joins_the_k_cache_write() {
    // K and V written by one dispatch, the concatenation by another
    assert_counts((2, 2), || kv_writes(true));
    // other ids: the V write alone
    assert_counts((3, 1), || kv_writes(false));
}
