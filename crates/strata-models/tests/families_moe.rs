//! The mixture-of-experts families (qwen3moe, Mixtral-style llama) on the
//! tiny generated models: what loads, where `-ot 'exps=CPU'` /
//! `--cpu-moe` / `--n-cpu-moe` put the experts and how the scheduler then
//! splits the graph, that the logits do not change with that placement, and
//! typed errors for broken expert metadata and tensors. (The logits
//! themselves are checked against f64 in `families.rs` and against
//! llama.cpp in `families_llamacpp.rs`.)

mod support;
#[path = "support/tiny_models.rs"]
mod tiny_models;

use std::sync::Arc;

use strata::backend::{Backend, Device};
use strata::gguf::Value;
use strata::testkit::TestBackend;
use strata_models::model::Override;
use strata_models::{Attention, Context, ContextOptions, LoadOptions, Logits, Model, ModelError};
use support::one_seq;
use tiny_models::{configs, load, offload, write, write_with, Config, Fam, N_VOCAB};

/// 13 tokens: two batches of 8.
const LONG: [u32; 13] = [84, 104, 101, 32, 113, 117, 105, 99, 107, 256, 98, 114, 111];

fn qwen3moe() -> Config {
    configs()
        .into_iter()
        .find(|c| c.fam == Fam::Qwen3Moe)
        .expect("a qwen3moe config")
}

fn llama_moe() -> Config {
    configs()
        .into_iter()
        .find(|c| c.fam == Fam::Llama && c.n_expert > 0)
        .expect("a llama MoE config")
}

fn context(model: &Arc<Model>, n_batch: usize) -> Context {
    let opts = ContextOptions {
        logits_all: true,
        ..one_seq(64, n_batch, Attention::Flash)
    };
    Context::new(model.clone(), opts).unwrap()
}

/// Every position's logits of `LONG`, in batches of 8.
fn run(model: &Arc<Model>) -> Vec<f32> {
    let got = context(model, 8).decode(&LONG, Logits::All).unwrap();
    assert_eq!(got.len(), LONG.len() * N_VOCAB);
    got
}

/// The largest KL divergence between the rows of two logit sets.
fn worst_kl(p: &[f32], q: &[f32]) -> f64 {
    let ls = |x: &[f32]| -> Vec<f64> {
        let m = x.iter().fold(f64::NEG_INFINITY, |m, &v| m.max(v as f64));
        let z: f64 = x.iter().map(|&v| (v as f64 - m).exp()).sum();
        x.iter().map(|&v| v as f64 - m - z.ln()).collect()
    };
    p.chunks(N_VOCAB)
        .zip(q.chunks(N_VOCAB))
        .map(|(a, b)| {
            let (la, lb) = (ls(a), ls(b));
            la.iter().zip(&lb).map(|(x, y)| x.exp() * (x - y)).sum()
        })
        .fold(0.0, f64::max)
}

#[test]
fn moe_models_load_their_experts() {
    for cfg in [qwen3moe(), llama_moe()] {
        let (bytes, _) = write(&cfg);
        let m = load(&bytes, &LoadOptions::default()).unwrap();
        let hp = &m.hparams;
        assert_eq!(
            (hp.n_expert, hp.n_expert_used, hp.n_ff_exp),
            (cfg.n_expert, cfg.n_expert_used, cfg.n_ff),
            "{}",
            cfg.name
        );
        for (i, l) in m.layers.iter().enumerate() {
            let router = l.ffn_gate_inp.as_ref().unwrap();
            assert_eq!(router.name(), format!("blk.{i}.ffn_gate_inp.weight"));
            assert_eq!(l.ffn_up.ne(), [cfg.n_embd, cfg.n_ff, cfg.n_expert, 1]);
            assert_eq!(l.ffn_down.ne(), [cfg.n_ff, cfg.n_embd, cfg.n_expert, 1]);
            let gate = l.ffn_gate.as_ref().unwrap();
            assert_eq!(gate.name(), format!("blk.{i}.ffn_gate_exps.weight"));
        }
    }
}

/// Every op whose name starts with `prefix`, with its backend and cause.
fn placed(report: &strata::sched::Report, prefix: &str) -> Vec<(String, String, String)> {
    report
        .nodes
        .iter()
        .filter(|n| n.name.starts_with(prefix))
        .map(|n| (n.name.clone(), n.backend.clone(), n.cause.clone()))
        .collect()
}

/// The qwen3moe model with every layer on a device and its experts on the
/// CPU (`-ngl 99 -ot 'exps=CPU'`, and the same by `--cpu-moe`): the expert
/// tensors stay in CPU memory, everything else is copied to the device;
/// the expert matmuls run on the CPU because their weights are there
/// (cause `1.wgt0`: the device does not offload, as ggml's RPC device
/// does not), the rest on the device; the logits equal CPU-only ones.
///
/// The splits are the ones ggml's scheduler makes on the same placement:
/// llama.cpp b11312 with ggml-rpc-server as the device (`llama-bench -ngl
/// 99 -ot exps=CPU -p 32`, GGML_SCHED_DEBUG=2) reports 6 splits for this
/// model, with the same ops on each side and the same split inputs: per layer, the device runs attention and
/// routing, the CPU the experts' up, gate and down matmuls, and the device
/// again their weighting and sum, so each layer adds two splits, the
/// embedding lookup (CPU) and the head one each.
#[test]
fn experts_on_the_cpu_with_the_rest_on_a_device() {
    let cfg = qwen3moe();
    let (bytes, _) = write(&cfg);
    let cpu = run(&load(&bytes, &LoadOptions::default()).unwrap());
    for overrides in [
        vec![Override::parse("exps=CPU").unwrap()],
        vec![Override::cpu_moe().unwrap()],
    ] {
        let dev: Arc<dyn Device> = TestBackend::device("FAKE0", |_| true, 2).device();
        let opts = offload(vec![dev], 99, overrides);
        let m = load(&bytes, &opts).unwrap();
        for l in &m.layers {
            for t in [&l.ffn_up, l.ffn_gate.as_ref().unwrap(), &l.ffn_down] {
                let buf = t.buffer().unwrap();
                assert!(buf.buffer_type().is_host(), "{} on the CPU", t.name());
            }
            let router = l.ffn_gate_inp.as_ref().unwrap();
            assert!(!router.buffer().unwrap().buffer_type().is_host());
        }
        let got = run(&m);
        let kl = worst_kl(&cpu, &got);
        assert!(kl <= 1e-3, "KL {kl:e}");

        let report = context(&m, 32).report().unwrap();
        for (name, backend, cause) in placed(&report, "ffn_moe_") {
            let on_cpu = ["ffn_moe_up", "ffn_moe_gate-", "ffn_moe_down"]
                .iter()
                .any(|p| name.starts_with(p));
            if on_cpu {
                assert_eq!(
                    (backend.as_str(), cause.as_str()),
                    ("CPU", "1.wgt0"),
                    "{name}"
                );
            }
            if name.starts_with("ffn_moe_logits") {
                assert_eq!(backend, "FAKE0", "{name}: the router is on the device");
            }
        }
        println!("{}", report.to_text(false));
        // the embedding lookup (CPU), then per layer the device and the
        // CPU, then the head (device)
        assert_eq!(report.splits.len(), 2 * cfg.n_layer + 2, "splits");
    }
}

/// The same placement over a strata RPC server on a loopback port (the
/// device's later splits read tensors its earlier splits computed from CPU
/// inputs): the logits match the CPU's.
#[test]
fn experts_on_the_cpu_with_the_rest_over_rpc() {
    let (addr, _server) = strata_rpc::server::spawn_loopback_cpu(2).unwrap();
    let dev: Arc<dyn Device> = strata_rpc::RpcProvider::new()
        .connect(&addr.to_string())
        .unwrap()
        .remove(0);
    let cfg = qwen3moe();
    let (bytes, _) = write(&cfg);
    let cpu = run(&load(&bytes, &LoadOptions::default()).unwrap());
    let opts = offload(vec![dev], 99, vec![Override::parse("exps=CPU").unwrap()]);
    let got = run(&load(&bytes, &opts).unwrap());
    let kl = worst_kl(&cpu, &got);
    assert!(kl <= 1e-3, "KL {kl:e}");
}

/// `--n-cpu-moe 1`: only block 0's experts stay on the CPU.
#[test]
fn n_cpu_moe_keeps_the_first_blocks_experts() {
    let cfg = qwen3moe();
    let (bytes, _) = write(&cfg);
    let dev: Arc<dyn Device> = TestBackend::device("FAKE0", |_| true, 2).device();
    let opts = offload(vec![dev], 99, Override::n_cpu_moe(1).unwrap());
    let m = load(&bytes, &opts).unwrap();
    let on_host = |t: &strata::Tensor| t.buffer().unwrap().buffer_type().is_host();
    assert!(on_host(&m.layers[0].ffn_up) && on_host(&m.layers[0].ffn_down));
    assert!(!on_host(&m.layers[1].ffn_up) && !on_host(m.layers[1].ffn_gate.as_ref().unwrap()));
    assert!(!on_host(&m.layers[0].wq));
    assert_eq!(Override::n_cpu_moe(0).unwrap().len(), 0);
    assert_eq!(Override::n_cpu_moe(usize::MAX).unwrap().len(), 512);
}

// ---------------------------------------------------------------- bad input

/// A change to a tiny model before it is written.
type Edit = dyn FnMut(&mut tiny_models::Parts);

fn load_err(cfg: &Config, edit: &mut dyn FnMut(&mut tiny_models::Parts)) -> ModelError {
    let (bytes, _) = write_with(cfg, edit);
    load(&bytes, &LoadOptions::default()).unwrap_err()
}

fn set_meta(key: String, v: Value) -> impl FnMut(&mut tiny_models::Parts) {
    move |p| {
        p.metadata.retain(|(k, _)| *k != key);
        p.metadata.push((key.clone(), v.clone()));
    }
}

fn drop_meta(key: String) -> impl FnMut(&mut tiny_models::Parts) {
    move |p| p.metadata.retain(|(k, _)| *k != key)
}

/// Inconsistent expert counts are typed errors naming the key.
#[test]
fn bad_expert_metadata_names_the_key() {
    for cfg in [qwen3moe(), llama_moe()] {
        let arch = cfg.fam.arch();
        let k = |s: &str| format!("{arch}.{s}");
        let mut cases: Vec<(String, Box<Edit>)> = vec![
            (
                k("expert_used_count"),
                Box::new(set_meta(k("expert_used_count"), Value::U32(9))),
            ),
            (
                k("expert_used_count"),
                Box::new(set_meta(k("expert_used_count"), Value::U32(0))),
            ),
            (
                k("expert_used_count"),
                Box::new(drop_meta(k("expert_used_count"))),
            ),
            (
                k("expert_count"),
                Box::new(set_meta(k("expert_count"), Value::U32(5000))),
            ),
            (
                k("expert_count"),
                Box::new(set_meta(k("expert_count"), Value::U32(7))),
            ),
            (
                k("expert_group_count"),
                Box::new(set_meta(k("expert_group_count"), Value::U32(2))),
            ),
        ];
        if cfg.fam == Fam::Qwen3Moe {
            cases.push((
                k("expert_count"),
                Box::new(set_meta(k("expert_count"), Value::U32(0))),
            ));
            cases.push((k("expert_count"), Box::new(drop_meta(k("expert_count")))));
        } else {
            // zero experts: a dense llama, which cannot use experts
            cases.push((
                k("expert_used_count"),
                Box::new(set_meta(k("expert_count"), Value::U32(0))),
            ));
        }
        for (want, mut edit) in cases {
            let e = load_err(&cfg, &mut *edit);
            let got = match &e {
                ModelError::Metadata { key, .. } | ModelError::Tensor { name: key, .. } => key,
                _ => panic!("{}: not a metadata or tensor error: {e}", cfg.name),
            };
            assert_eq!(got, &want, "{}: {e}", cfg.name);
        }
    }
    // a dense family with experts
    let qwen3 = configs().into_iter().find(|c| c.fam == Fam::Qwen3).unwrap();
    let e = load_err(
        &qwen3,
        &mut set_meta("qwen3.expert_count".into(), Value::U32(8)),
    );
    assert!(
        matches!(&e, ModelError::Metadata { key, .. } if key == "qwen3.expert_count"),
        "{e}"
    );
}

/// Missing or misshapen expert tensors and routers are typed errors naming
/// the tensor.
#[test]
fn bad_expert_tensors_name_the_tensor() {
    let cfg = qwen3moe();
    let drop = |name: &'static str| {
        move |p: &mut tiny_models::Parts| p.tensors.retain(|(n, _, _)| n != name)
    };
    // one expert fewer in a stack, one router column fewer
    let shrink_last = |name: &'static str| {
        move |p: &mut tiny_models::Parts| {
            for (n, shape, data) in &mut p.tensors {
                if n == name {
                    let last = shape.len() - 1;
                    let per: usize = shape[..last].iter().product();
                    shape[last] -= 1;
                    data.truncate(data.len() - per);
                }
            }
        }
    };
    let cases: Vec<(&str, Box<Edit>)> = vec![
        (
            "blk.1.ffn_down_exps.weight",
            Box::new(drop("blk.1.ffn_down_exps.weight")),
        ),
        (
            "blk.0.ffn_gate_exps.weight",
            Box::new(drop("blk.0.ffn_gate_exps.weight")),
        ),
        (
            "blk.1.ffn_gate_inp.weight",
            Box::new(drop("blk.1.ffn_gate_inp.weight")),
        ),
        (
            "blk.1.ffn_up_exps.weight",
            Box::new(shrink_last("blk.1.ffn_up_exps.weight")),
        ),
        (
            "blk.1.ffn_gate_inp.weight",
            Box::new(shrink_last("blk.1.ffn_gate_inp.weight")),
        ),
    ];
    for (name, mut edit) in cases {
        let e = load_err(&cfg, &mut *edit);
        assert!(
            matches!(&e, ModelError::Tensor { name: n, .. } if n == name),
            "{name}: {e}"
        );
    }
    // block 0's router is checked with the metadata: the key and the tensor
    let e = load_err(&cfg, &mut shrink_last("blk.0.ffn_gate_inp.weight"));
    assert!(
        matches!(&e, ModelError::Metadata { key, .. } if key == "qwen3moe.expert_count"),
        "{e}"
    );
    assert!(e.to_string().contains("blk.0.ffn_gate_inp.weight"), "{e}");
}
