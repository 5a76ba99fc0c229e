//! A mixture-of-experts prompt on the first GPU (on CI Mesa's software
//! Vulkan device): the tiny qwen3moe model (8 experts, 2 used) with every
//! layer on the GPU decodes a 40-token prompt in one batch, so each expert
//! gets some 10 of the 80 (slot, token) columns and strata-gpu runs the
//! expert matmuls on its tiled MUL_MAT_ID (issue #45; checked by the
//! kernels planned). The logits must be the CPU's within the GPU's rounding
//! (for quantized experts, but for the few positions where that rounding
//! flips the router's choice). Skips without a GPU (fails under
//! `STRATA_REQUIRE_GPU=1`).

mod support;
#[path = "support/tiny_models.rs"]
mod tiny_models;

use std::sync::Arc;

use strata_models::{Attention, Context, ContextOptions, Logits};
use support::one_seq;
use tiny_models::{configs, load, offload, write, Fam, WType, N_VOCAB};

#[test]
fn a_moe_prompt_on_the_gpu_matches_the_cpu() {
    let Some(gpu) = strata_gpu::device_or_skip().unwrap() else {
        return;
    };
    let base = configs()
        .into_iter()
        .find(|c| c.fam == Fam::Qwen3Moe)
        .expect("a qwen3moe config");
    // F32 experts on the f32 tiles, Q8_0 ones on the adapter's path for it
    // (int-dot where it is on)
    for (wtype, name) in [(WType::F32, "f32"), (WType::Q8_0, "q8_0")] {
        let mut cfg = base.clone();
        cfg.wtype = wtype;
        let (bytes, _) = write(&cfg);
        let context = |devices| {
            let model = load(&bytes, &offload(devices, 99, Vec::new())).unwrap();
            let opts = ContextOptions {
                logits_all: true,
                ..one_seq(64, 64, Attention::Flash)
            };
            Context::new(model, opts).unwrap()
        };
        let dev: Arc<dyn strata::backend::Device> = gpu.clone();
        let prompt: Vec<u32> = (0..40).map(|i| ((i * 7 + 3) % N_VOCAB) as u32).collect();
        let got = context(vec![dev]).decode(&prompt, Logits::All).unwrap();
        let want = context(Vec::new()).decode(&prompt, Logits::All).unwrap();
        assert_eq!(got.len(), prompt.len() * N_VOCAB);
        // each position's largest difference, relative to its largest logit
        let rel: Vec<f32> = got
            .chunks(N_VOCAB)
            .zip(want.chunks(N_VOCAB))
            .map(|(g, w)| {
                let scale = w.iter().fold(0f32, |m, x| m.max(x.abs()));
                let diff = g.iter().zip(w).fold(0f32, |m, (a, b)| m.max((a - b).abs()));
                diff / scale
            })
            .collect();
        println!("{name}: {rel:.4?}");
        if wtype == WType::F32 {
            // the same f32 products (the GPU's attention rounds through f16
            // where the CPU's does too): measured 1e-3 at most
            assert!(rel.iter().all(|&r| r <= 5e-3), "{name}: {rel:?}");
        } else {
            // the GPU's rounding upstream (measured about 1.5% of the
            // largest logit) can flip the router's choice between two
            // near-tied experts, which moves that position's logits by up
            // to a third (2 of the 40 positions on llvmpipe, with the
            // matrix-vector MUL_MAT_ID as with the tiles): most positions
            // must be within the rounding, the others within that
            let close = rel.iter().filter(|&&r| r <= 0.03).count();
            assert!(close * 10 >= rel.len() * 8, "{name}: {rel:?}");
            assert!(rel.iter().all(|&r| r <= 0.5), "{name}: {rel:?}");
        }
        let planned = gpu.context().shaders_planned();
        let tiled = |k: &String| {
            ["mul_mat_id_tiled", "mul_mat_id_int"]
                .iter()
                .any(|kernel| k.starts_with(&format!("{kernel}/{name}/")))
        };
        assert!(planned.iter().any(tiled), "{name}: {planned:?}");
    }
}
