//! SmolLM2-135M-Instruct (Q4_1) against llama.cpp's own outputs (tests/data/manifest.json and
//! `*.last_logits.f32.bin`, made with llama.cpp 0c1e57098 on the CPU, flash attention, f16 KV):
//! token ids, KL(softmax(llama.cpp) ‖ softmax(strata)) of the last prompt position, argmax where
//! llama.cpp's top-2 margin is clear, and the greedy continuation up to the first step whose
//! margin in llama.cpp's run is under 0.5. Also: offloading layers to a second device
//! (`-ngl 10`, `-ngl 31`, the test device FAKE0) gives bit-identical logits (with the CPU's
//! weights mapped as they are: repacked weights use other kernels, whose f32 sums are
//! ordered differently), and repacked weights give the mapped weights' logits within f32
//! reordering.
//!
//! llama.cpp's logits depend on the instruction set it ran with, so the golden logits exist per
//! level and strata at its active level ([`strata::isa::active`], `STRATA_ISA`) is
//! compared with the matching one (see [`golden_dir`]):
//!
//! | strata level | llama.cpp reference | KL bound (flash / soft_max) |
//! |---|---|---|
//! | `vnni`, `avx512` | `tests/data/`: native build on an AVX-512 VNNI Xeon (Cascade Lake) | 1e-2 / 2e-2 |
//! | `avx2` | `tests/data/avx2/`: native build on an AMD EPYC Zen 3 (AVX2, FMA, F16C) | 1e-2 / 2e-2 |
//! | `scalar`, `neon` | the AVX2 one (no llama.cpp build of that level exists) | 1.3e-2 / 2.3e-2 |
//!
//! The bounds of a level without its own reference add llama.cpp's own spread between its
//! AVX2 and AVX-512 builds on these prompts, KL ≤ 3.0e-3 (per prompt: capital 5.5e-4, story
//! 1.3e-3, code 4.2e-4, chat 3.0e-3; `tests/data/avx2/NOTES.md`). The greedy continuation is
//! checked against the AVX-512 run's, only up to its first step with a top-2 margin under 0.5,
//! which no level's rounding can flip.
//!
//! Needs the model (see support::require_model): skipped without it unless STRATA_REQUIRE_MODEL=1.

mod support;

use std::sync::Arc;

use serde_json::Value;
use strata::backend::Backend;
use strata::testkit::TestBackend;
use strata_models::model::Override;
use strata_models::{
    Attention, Context, ContextOptions, LoadOptions, Logits, Model, PlacementSpec,
};
use support::{argmax, ids_of, kl, max_abs_diff, one_seq, prompt_ids};

fn manifest() -> Value {
    serde_json::from_str(include_str!("data/manifest.json")).unwrap()
}

/// The folder of llama.cpp's golden logits for strata's active level, and
/// the KL allowance on top of the matching-level bound (see the module doc).
fn golden_dir() -> (&'static str, f64) {
    use strata::isa::{active, Isa};
    match active() {
        Isa::Amx | Isa::Vnni | Isa::Avx512 => ("tests/data", 0.0),
        Isa::Avx2 | Isa::AvxVnni => ("tests/data/avx2", 0.0),
        // no llama.cpp build of these levels: the nearest reference, plus
        // llama.cpp's own AVX2 / AVX-512 spread on these prompts
        Isa::Scalar | Isa::Neon => ("tests/data/avx2", 3e-3),
    }
}

fn golden_logits(file: &str) -> Vec<f32> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(golden_dir().0)
        .join(file);
    std::fs::read(path)
        .unwrap()
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

fn context(model: &Arc<Model>, attention: Attention, threads: usize) -> Context {
    context_ub(model, attention, threads, 64)
}

/// [`context`] with micro-batches of `n_ubatch` tokens.
fn context_ub(
    model: &Arc<Model>,
    attention: Attention,
    threads: usize,
    n_ubatch: usize,
) -> Context {
    let opts = ContextOptions {
        n_ubatch,
        n_threads: threads,
        ..one_seq(256, 64, attention)
    };
    Context::new(model.clone(), opts).unwrap()
}

/// [`check_prompts`] on the default model; skipped (or a failure, under
/// `STRATA_REQUIRE_MODEL=1`) without it, naming `what`.
fn check_default_model(what: &str, attention: Attention, max_kl: f64) {
    if support::require_model(what).is_none() {
        return;
    }
    check_prompts(&load_default(), attention, max_kl);
}

fn check_prompts(model: &Arc<Model>, attention: Attention, max_kl: f64) {
    let (dir, extra) = golden_dir();
    let max_kl = max_kl + extra;
    println!(
        "strata at {}: llama.cpp reference {dir}, KL bound {max_kl:e}",
        strata::isa::active()
    );
    let m = manifest();
    let mut ctx = context(model, attention, 2);
    for p in m["prompts"].as_array().unwrap() {
        let name = p["name"].as_str().unwrap();
        let ids = prompt_ids(model, p);
        assert_eq!(ids, ids_of(&p["token_ids"]), "{name}: token ids");
        ctx.clear().unwrap();
        let logits = ctx.decode(&ids, Logits::Last).unwrap();
        let file = &p["files"][0];
        let gold = golden_logits(file["file"].as_str().unwrap());
        assert_eq!(logits.len(), gold.len());
        let k = kl(&gold, &logits);
        let max_abs = max_abs_diff(&gold, &logits);
        let steps = p["continuations"]["default"]["steps"].as_array().unwrap();
        let margin0 =
            steps[0]["top5"][0][1].as_f64().unwrap() - steps[0]["top5"][1][1].as_f64().unwrap();
        println!(
            "{name} ({attention:?}): KL {k:.3e}, max |Δlogit| {max_abs:.3}, argmax strata {} llama.cpp {} (margin {margin0:.2})",
            argmax(&logits),
            argmax(&gold)
        );
        assert!(k <= max_kl, "{name}: KL {k:e} > {max_kl:e}");
        if margin0 >= 0.5 {
            assert_eq!(argmax(&logits), argmax(&gold), "{name}: argmax");
        }
        // greedy continuation up to the first unclear step
        let mut next = argmax(&logits);
        let mut matched = 0;
        for (i, s) in steps.iter().enumerate() {
            let margin = s["top5"][0][1].as_f64().unwrap() - s["top5"][1][1].as_f64().unwrap();
            if margin < 0.5 {
                break;
            }
            assert_eq!(
                next,
                s["id"].as_u64().unwrap() as u32,
                "{name}: greedy step {i}"
            );
            matched += 1;
            let l = ctx.decode(&[next], Logits::Last).unwrap();
            next = argmax(&l);
        }
        println!("{name}: greedy continuation identical for {matched} of {} steps (stopped at the first margin < 0.5)", steps.len());
    }
}

/// The model with the CPU's weights repacked (the default).
fn load_default() -> Arc<Model> {
    load_on(PlacementSpec::default(), Vec::new(), false)
}

/// The model with the CPU's weights mapped as they are (no repacking), so
/// every device runs the same kernels.
fn load(placement: PlacementSpec, fake: bool) -> Arc<Model> {
    let mut devices = Vec::new();
    if fake {
        devices.push(TestBackend::device("FAKE0", |_| true, 2).device());
    }
    load_on(placement, devices, true)
}

fn load_on(
    placement: PlacementSpec,
    devices: Vec<Arc<dyn strata::backend::Device>>,
    no_repack: bool,
) -> Arc<Model> {
    let path = support::default_model_path();
    let opts = LoadOptions {
        devices,
        placement,
        no_repack,
    };
    Arc::new(Model::load(&path, &opts, None).unwrap())
}

/// Repacked weights (packed matmul kernels) against mapped weights (the
/// row-by-column kernels), on the same tokens: logits as close as the
/// existing kernels of different instruction-set levels are to each other.
/// Per op the two differ only by f32 reordering, but every matmul
/// re-quantizes its activations to 8 bits, so a last-bit difference now and
/// then moves an activation by one quant step, and that compounds over 30
/// layers. Measured on a 20-token prompt (all positions), KL mean / max and
/// max |Δlogit|: mapped AVX2 vs mapped VNNI 3.4e-3 / 7.1e-3 / 0.85, mapped
/// scalar vs mapped VNNI 5.1e-3 / 1.5e-2 / 1.34, packed vs mapped VNNI
/// 3.5e-3 / 1.9e-2 / 0.87. Asserted per step: KL ≤ 3e-2, max |Δ| ≤ 5% of the
/// largest logit, and the same argmax wherever the mapped run's top-2 margin
/// is ≥ 0.5.
#[test]
fn repacked_weights_match_mapped_weights() {
    if support::require_model("the repacked weights test").is_none() {
        return;
    }
    let packed = load_default();
    let repacked = packed.repacked_bytes();
    println!("repacked {repacked} bytes");
    let isa = strata::isa::active();
    if strata::quant::packed::has_kernels(isa, strata::DType::Q4_1) {
        assert!(
            repacked > 0,
            "{isa} has packed kernels: the Q4_1 weights are repacked"
        );
    }
    let (off, _) = run_steps(&load(PlacementSpec::default(), false));
    // The same tokens for both (the mapped run's greedy choices).
    let next: Vec<u32> = off[..3].iter().map(|l| argmax(l)).collect();
    let on = run_forced(&packed, &next);
    for (step, (a, b)) in on.iter().zip(&off).enumerate() {
        let max_abs = max_abs_diff(a, b);
        let scale = b.iter().fold(0f32, |m, x| m.max(x.abs()));
        let k = kl(b, a);
        println!("step {step}: max |Δlogit| {max_abs:e} (max |logit| {scale}), KL {k:e}");
        let mut sorted = b.clone();
        sorted.sort_by(|x, y| y.total_cmp(x));
        if sorted[0] - sorted[1] >= 0.5 {
            assert_eq!(argmax(a), argmax(b), "step {step}: argmax");
        }
        assert!(max_abs <= 0.05 * scale, "step {step}: max |Δ| {max_abs}");
        assert!(k <= 3e-2, "step {step}: KL {k:e}");
    }
}

/// A strata RPC server on a free loopback port whose CPU keeps received
/// weights in ggml's layout (no repacking): the same kernels as the
/// client's unpacked weights, so results can be compared bit for bit.
fn plain_server(threads: usize) -> (std::net::SocketAddr, strata_rpc::server::ServerHandle) {
    use strata_rpc::server::{CpuBackendFactory, Limits, Server};
    let factory = CpuBackendFactory::new(threads).with_repack(false);
    Server::bind("127.0.0.1:0", Arc::new(factory), Limits::default())
        .unwrap()
        .spawn_background()
        .unwrap()
}

/// `-ngl 10` / `-ngl 31` on a strata RPC server on a loopback port: logits
/// bit-identical to the CPU-only run (the server runs the same CPU kernels,
/// and copies between client and server are byte-exact). A server that
/// repacks the weights it receives (the default) runs the packed kernels,
/// which add in another order (measured KL 3.5e-4 .. 3.5e-3): held to the
/// bar of `repacked_weights_match_mapped_weights` (KL <= 3e-2, the same
/// argmax where the top-2 margin is >= 0.5).
#[test]
fn rpc_offload_gives_identical_logits() {
    if support::require_model("the RPC offload test").is_none() {
        return;
    }
    let (addr, _server) = plain_server(2);
    let provider = strata_rpc::RpcProvider::new();
    let dev: Arc<dyn strata::backend::Device> =
        provider.connect(&addr.to_string()).unwrap().remove(0);
    let (cpu, _) = run_steps(&load(PlacementSpec::default(), false));
    for ngl in [10, 31] {
        let model = load_on(first_layers(ngl), vec![dev.clone()], true);
        assert_split_and_identical(&format!("RPC -ngl {ngl}"), &model, &cpu);
    }
    let (addr, _repacking) = strata_rpc::server::spawn_loopback_cpu(2).unwrap();
    let dev: Arc<dyn strata::backend::Device> =
        provider.connect(&addr.to_string()).unwrap().remove(0);
    let (got, _) = run_steps(&load_on(first_layers(31), vec![dev], false));
    for (step, (a, b)) in cpu.iter().zip(&got).enumerate() {
        let k = kl(a, b);
        let mut top: Vec<f32> = a.clone();
        top.sort_by(|x, y| y.total_cmp(x));
        println!(
            "repacking server, step {step}: KL {k:.3e}, top-2 margin {:.2}",
            top[0] - top[1]
        );
        assert!(k <= 3e-2, "step {step}: KL {k:e}");
        if top[0] - top[1] >= 0.5 {
            assert_eq!(argmax(a), argmax(b), "step {step}: argmax");
        }
    }
}

/// Every layer over two RPC servers (issue #15 item 8): llama.cpp's rule
/// turns pipeline parallelism on (4 copies), the prompt runs as micro-batches
/// of 4 tokens queued without waiting, and the logits are bit-identical to
/// the CPU's with the same micro-batches.
#[test]
fn rpc_pipeline_over_two_servers_gives_identical_logits() {
    if support::require_model("the RPC pipeline test").is_none() {
        return;
    }
    let servers: Vec<_> = (0..2).map(|_| plain_server(1)).collect();
    let provider = strata_rpc::RpcProvider::new();
    let devs: Vec<Arc<dyn strata::backend::Device>> = servers
        .iter()
        .map(|(addr, _)| {
            let d: Arc<dyn strata::backend::Device> =
                provider.connect(&addr.to_string()).unwrap().remove(0);
            d
        })
        .collect();
    let (cpu, _, cpu_copies) = run_steps_ub(&load(PlacementSpec::default(), true), 4);
    assert_eq!(cpu_copies, 1, "no pipeline on the CPU alone");
    let model = load_on(first_layers(31), devs, true);
    let (got, splits, copies) = run_steps_ub(&model, 4);
    println!("two RPC servers: {splits} splits, {copies} copies");
    assert_eq!(copies, strata_models::context::PIPELINE_COPIES);
    assert!(splits >= 3, "CPU, then each server: {splits} splits");
    for (step, (a, b)) in cpu.iter().zip(&got).enumerate() {
        assert!(
            a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits()),
            "step {step}: logits differ"
        );
    }
    // one server with every layer: no pipeline
    let one = load_on(
        first_layers(31),
        vec![provider
            .connect(&servers[0].0.to_string())
            .unwrap()
            .remove(0)],
        true,
    );
    assert_eq!(run_steps_ub(&one, 4).2, 1);
}

/// Offloaded to the first GPU (on CI Mesa's software Vulkan device), all
/// layers (`-ngl 99`) or a CPU/GPU split (`-ngl 10`): llama.cpp's logits
/// within the same KL bound as the CPU (1e-2) and its greedy continuations
/// (issue #14's bars), with the split the placement asks for.
#[test]
fn gpu_offload_meets_the_llama_cpp_bars() {
    if support::require_model("the GPU offload test").is_none() {
        return;
    }
    let Some(gpu) = strata_gpu::device_or_skip().unwrap() else {
        return;
    };
    let dev: Arc<dyn strata::backend::Device> = gpu;
    println!("GPU: {}", dev.description());
    for ngl in [99, 10] {
        let model = load_on(first_layers(ngl), vec![dev.clone()], false);
        let (_, splits) = run_steps(&model);
        println!("-ngl {ngl}: {splits} splits");
        assert!(
            splits >= 2,
            "-ngl {ngl}: the CPU keeps the token embeddings"
        );
        check_prompts(&model, Attention::Flash, 1e-2);
    }
}

/// The last `ngl` of the 31 layers (30 blocks + output) on the other device (`-ngl`).
fn first_layers(ngl: i32) -> PlacementSpec {
    PlacementSpec {
        n_gpu_layers: ngl,
        ..Default::default()
    }
}

/// `model` (`what`) runs split between two devices and its logits are
/// bit-identical to `cpu`'s.
fn assert_split_and_identical(what: &str, model: &Arc<Model>, cpu: &[Vec<f32>]) {
    let (got, splits) = run_steps(model);
    println!("{what}: {splits} splits");
    assert!(splits >= 2, "{what}: expected a split between the devices");
    for (a, b) in cpu.iter().zip(&got) {
        assert!(
            a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits()),
            "{what}: logits differ"
        );
    }
}

#[test]
fn golden_llamacpp_logits_and_greedy_flash_attn() {
    check_default_model(
        "the golden logits test (flash attention)",
        Attention::Flash,
        1e-2,
    );
}

#[test]
fn golden_llamacpp_logits_and_greedy_softmax() {
    // The golden logits come from llama.cpp with flash attention; strata's
    // soft_max path corresponds to llama.cpp's flash-attention-off
    // configuration, which itself lies KL 7e-4 .. 9e-3 from these logits
    // (golden NOTES.md). So this cross-configuration check allows that spread
    // on top of the 1e-2 the matching configuration (the test above) meets.
    check_default_model(
        "the golden logits test (soft_max attention)",
        Attention::SoftMax,
        2e-2,
    );
}

/// Logits of `run_steps`' prompt, then of decoding `next` one token at a time.
fn run_forced(model: &Arc<Model>, next: &[u32]) -> Vec<Vec<f32>> {
    run_decode(model, next.len(), |step, _| next[step]).0
}

/// Logits of a prompt and 3 decode steps.
fn run_steps(model: &Arc<Model>) -> (Vec<Vec<f32>>, usize) {
    run_decode(model, 3, |_, logits| argmax(logits))
}

/// [`run_steps`] in micro-batches of `n_ubatch` tokens; also the context's
/// pipeline copies.
fn run_steps_ub(model: &Arc<Model>, n_ubatch: usize) -> (Vec<Vec<f32>>, usize, usize) {
    let mut ctx = context_ub(model, Attention::Flash, 2, n_ubatch);
    let (out, splits) = decode_steps(&mut ctx, 3, |_, logits| argmax(logits));
    (out, splits, ctx.n_copies())
}

/// Logits of a prompt, then of `steps` decode steps, each of the token
/// `next(step, last logits)`; and the context's split count.
fn run_decode(
    model: &Arc<Model>,
    steps: usize,
    next: impl FnMut(usize, &[f32]) -> u32,
) -> (Vec<Vec<f32>>, usize) {
    let mut ctx = context(model, Attention::Flash, 2);
    decode_steps(&mut ctx, steps, next)
}

/// [`run_decode`] on a given context.
fn decode_steps(
    ctx: &mut Context,
    steps: usize,
    mut next: impl FnMut(usize, &[f32]) -> u32,
) -> (Vec<Vec<f32>>, usize) {
    let model = ctx.model().clone();
    let ids = model
        .tokenizer
        .encode(
            "Once upon a time, in a small village, there lived",
            true,
            true,
        )
        .unwrap();
    let mut out = vec![ctx.decode(&ids, Logits::Last).unwrap()];
    for step in 0..steps {
        let t = next(step, out.last().unwrap());
        out.push(ctx.decode(&[t], Logits::Last).unwrap());
    }
    (out, ctx.n_splits())
}

#[test]
fn offloaded_layers_give_identical_logits() {
    if support::require_model("the -ngl offload test").is_none() {
        return;
    }
    let (cpu, cpu_splits) = run_steps(&load(PlacementSpec::default(), false));
    assert_eq!(cpu_splits, 1);
    // llama.cpp counts 30 blocks + the output layer: -ngl 10 offloads the
    // output and blocks 21-29, -ngl 31 everything but the embedding; both
    // give llama.cpp's 2 splits (CPU part, device part)
    for ngl in [10, 31] {
        let model = load(first_layers(ngl), true);
        let on_fake: Vec<usize> = (0..30)
            .filter(|&il| model.layer_map.layers[il] == 0)
            .collect();
        let first = 31 - ngl as usize;
        assert_eq!(on_fake, (first..30).collect::<Vec<_>>(), "-ngl {ngl}");
        assert_eq!(
            model.layer_map.output, 0,
            "-ngl {ngl}: the output layer is offloaded"
        );
        let (_, splits) = run_steps(&model);
        assert_eq!(splits, 2, "-ngl {ngl}: llama.cpp's split count");
        assert_split_and_identical(&format!("-ngl {ngl}"), &model, &cpu);
    }
    // -ot: pin every FFN matrix of the offloaded layers back on the CPU
    let model = load(
        PlacementSpec {
            n_gpu_layers: 31,
            overrides: vec![Override::parse(r"ffn_(up|gate|down)=CPU").unwrap()],
            ..Default::default()
        },
        true,
    );
    let st = model.layers[29].ffn_up.storage().unwrap();
    assert!(st.buffer.buffer_type().is_host());
    assert!(!model.layers[29]
        .wq
        .storage()
        .unwrap()
        .buffer
        .buffer_type()
        .is_host());
    let (ot, _) = run_steps(&model);
    for (a, b) in cpu.iter().zip(&ot) {
        assert!(
            a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits()),
            "-ot: logits differ"
        );
    }
}
