//! Decoding on the first GPU (on CI Mesa's software Vulkan device) in
//! steady state asks nothing of wgpu but one submission and one read-back
//! per token: no buffer and no bind group is created, the graph's dispatch
//! list is replayed, and the logits come back through the graph's own
//! submission (issue #45), in fewer dispatches than nodes (fusion); the
//! inputs go through the persistent upload buffer.
//! Counted by strata-gpu at its wgpu call sites (`GpuContext::counters`).
//! Skips without a GPU (fails under `STRATA_REQUIRE_GPU=1`).

mod support;
#[path = "support/tiny_models.rs"]
mod tiny_models;

use std::sync::Arc;

use strata_models::{Attention, Context, Logits};
use support::one_seq;
use tiny_models::{configs, load, offload, write, WType, N_VOCAB};

#[test]
fn a_decode_token_costs_one_submission_and_one_read_back() {
    let Some(gpu) = strata_gpu::device_or_skip().unwrap() else {
        return;
    };
    // the first test model (llama), its matrices in Q8_0 as a quantized
    // model's are
    let mut cfg = configs().remove(0);
    cfg.wtype = WType::Q8_0;
    let n_layer = cfg.n_layer as u64;
    let (bytes, _) = write(&cfg);
    let dev: Arc<dyn strata::backend::Device> = gpu.clone();
    let context = |devices| {
        let model = load(&bytes, &offload(devices, 99, Vec::new())).unwrap();
        Context::new(model, one_seq(128, 32, Attention::Flash)).unwrap()
    };
    let mut ctx = context(vec![dev]);
    let mut cpu = context(Vec::new());
    let token = |i: usize| ((i * 7 + 3) % N_VOCAB) as u32;
    let prompt: Vec<u32> = (0..10).map(token).collect();
    let mut logits = ctx.decode(&prompt, Logits::Last).unwrap();
    cpu.decode(&prompt, Logits::Last).unwrap();
    assert!(ctx.n_splits() >= 2, "the CPU keeps the token embeddings");
    let c = gpu.context();
    for i in 10..20 {
        let before = c.counters();
        let next = ctx.decode(&[token(i)], Logits::Last).unwrap();
        let spent = c.counters() - before;
        println!("token {i}: {spent:?}");
        // the first decode token plans its graph; the others replay it
        if i > 10 {
            assert_eq!(spent.buffers_created, 0, "token {i}: {spent:?}");
            assert_eq!(spent.bind_groups_created, 0, "token {i}: {spent:?}");
            assert_eq!(spent.pipelines_created, 0, "token {i}: {spent:?}");
            assert_eq!(spent.graphs_planned, 0, "token {i}: {spent:?}");
            assert_eq!(spent.graphs_replayed, 1, "token {i}: {spent:?}");
            assert_eq!(spent.params_bytes_written, 0, "token {i}: {spent:?}");
            assert_eq!(spent.submits, 1, "token {i}: {spent:?}");
            assert_eq!(spent.readback_maps, 1, "token {i}: {spent:?}");
            assert_eq!(spent.waits, 1, "token {i}: {spent:?}");
            assert_eq!(spent.fused_reads, 1, "token {i}: {spent:?}");
            // the inputs (the CPU's token embedding, positions, mask,
            // cache rows) through the upload buffer: no staging buffer of
            // wgpu's per write
            assert!(spent.writes_staged > 0, "token {i}: {spent:?}");
            assert_eq!(spent.writes_direct, 0, "token {i}: {spent:?}");
            assert!(spent.bind_group_hits > 0, "token {i}: {spent:?}");
            // fused (strata-gpu's ops/fuse.rs): per layer both norms with
            // their MULs, both residual ADDs into the matrix-vector
            // products before them, and K's ROPE into the cache write; the
            // output norm with its MUL; with subgroups also K's and V's
            // products into Q's, and up's into gate's. Per layer at most two
            // more: the V cache write into K's (not here: this model's ROPE
            // has frequency factors) and the GLU into the down product
            // (where the planner did not give the product the gate's bytes)
            let per_layer = if c.has_subgroups() { 8 } else { 5 };
            let base = per_layer * n_layer + 1;
            assert!(
                (base..=base + 2 * n_layer).contains(&spent.nodes_fused),
                "token {i}: {spent:?}"
            );
            // on llvmpipe (subgroups) the planner leaves the gate's bytes
            // apart from the down product in exactly one of this model's
            // layers: one GLU fusion, every token (none would mean the
            // fusion stopped firing)
            if c.has_subgroups() {
                assert_eq!(spent.nodes_fused, base + 1, "token {i}: {spent:?}");
            }
            assert_eq!(
                spent.bind_group_hits, spent.dispatches,
                "token {i}: {spent:?}"
            );
        }
        // this token's logits, not a stale read-back: the CPU's, within
        // the GPU's rounding (it dequantizes where the CPU quantizes the
        // activations)
        let want = cpu.decode(&[token(i)], Logits::Last).unwrap();
        assert_eq!(next.len(), N_VOCAB);
        let scale = want.iter().fold(0f32, |m, x| m.max(x.abs()));
        let diff = next
            .iter()
            .zip(&want)
            .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
        assert!(
            diff <= 0.02 * scale + 1e-3,
            "token {i}: max |Δ| {diff} of {scale}"
        );
        assert_ne!(next, logits, "token {i}: the logits moved on");
        logits = next;
    }
}
