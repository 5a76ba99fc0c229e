//! `strata bench`: llama-bench-style prompt-processing (pp) and token
//! generation (tg) speed, mean ± stddev over repetitions.

use std::time::{Duration, Instant};

use strata_models::{Context, Logits};

use crate::common::{CliResult, ModelArgs};

/// Arguments of `strata bench`.
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Prompt lengths to test (comma-separated; 0 skips).
    #[arg(
        short = 'p',
        long = "n-prompt",
        value_delimiter = ',',
        default_value = "512"
    )]
    pub n_prompt: Vec<usize>,
    /// Generation lengths to test (comma-separated; 0 skips).
    #[arg(
        short = 'n',
        long = "n-gen",
        value_delimiter = ',',
        default_value = "128"
    )]
    pub n_gen: Vec<usize>,
    /// Repetitions.
    #[arg(short = 'r', long, default_value_t = 5)]
    pub reps: usize,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Mean and sample standard deviation.
pub fn mean_std(v: &[f64]) -> (f64, f64) {
    let n = v.len() as f64;
    let mean = v.iter().sum::<f64>() / n;
    let var = if v.len() > 1 {
        v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0)
    } else {
        0.0
    };
    (mean, var.sqrt())
}

/// Runs `strata bench`.
pub fn run(a: Args) -> CliResult {
    if a.reps == 0 {
        return Err("-r must be at least 1".into());
    }
    let model = a.model.load()?;
    let n_vocab = model.hparams.n_vocab as u32;
    // checked (and warned about) by load()
    let threads: Vec<usize> = a
        .model
        .threads
        .iter()
        .map(|&n| n.clamp(1, strata::cpu::MAX_THREADS))
        .collect();
    let max_tokens = a
        .n_prompt
        .iter()
        .chain(&a.n_gen)
        .copied()
        .max()
        .unwrap_or(0);
    let mut results = Vec::new();
    // the GPUs the model runs on: their counters say where the host time went
    let names = model.devices.names();
    let gpus: Vec<_> = strata_gpu::devices()
        .iter()
        .filter(|d| names.contains(&d.context().name().to_string()))
        .cloned()
        .collect();
    let file_mib = std::fs::metadata(a.model.model_path()?)
        .map(|m| m.len() as f64 / 1048576.0)
        .unwrap_or(0.0);
    for &t in &threads {
        let mut opts = a.model.context_options(false);
        opts.n_threads = t;
        opts.n_ctx = opts.n_ctx.max(max_tokens);
        let mut ctx =
            Context::with_sched_config(model.clone(), opts, crate::settings::sched_config())?;
        let tests: Vec<(String, usize, bool)> = a
            .n_prompt
            .iter()
            .filter(|&&p| p > 0)
            .map(|&p| (format!("pp{p}"), p, true))
            .chain(
                a.n_gen
                    .iter()
                    .filter(|&&n| n > 0)
                    .map(|&n| (format!("tg{n}"), n, false)),
            )
            .collect();
        for (name, n, is_pp) in tests {
            let tokens: Vec<u32> = (0..n as u32).map(|i| (i * 7919 + 13) % n_vocab).collect();
            // the logits' memory is kept from token to token, as a decode
            // loop keeps it (llama-bench reads none)
            let mut logits = Vec::new();
            let mut run_once = |ctx: &mut Context| -> Result<f64, Box<dyn std::error::Error>> {
                ctx.clear()?;
                let t0 = Instant::now();
                if is_pp {
                    ctx.decode_into(&tokens, Logits::Last, &mut logits)?;
                } else {
                    for &tok in &tokens {
                        ctx.decode_into(&[tok], Logits::Last, &mut logits)?;
                    }
                }
                Ok(n as f64 / t0.elapsed().as_secs_f64())
            };
            run_once(&mut ctx)?; // warm-up
            ctx.reset_timings();
            let gpu0 = GpuSnapshot::take(&gpus);
            let mut tps = Vec::with_capacity(a.reps);
            for _ in 0..a.reps {
                tps.push(run_once(&mut ctx)?);
            }
            let tm = ctx.timings();
            let wall: f64 = tps.iter().map(|r| n as f64 / r).sum();
            let gpu = GpuSnapshot::take(&gpus).since(&gpu0, wall, tm.tokens);
            let (mean, sd) = mean_std(&tps);
            let host_us = tm.outside_kernels_per_token().as_secs_f64() * 1e6;
            let per_tok = |d: std::time::Duration| d.as_secs_f64() * 1e6 / tm.tokens.max(1) as f64;
            let phases = serde_json::json!({
                "build": per_tok(tm.build), "schedule": per_tok(tm.schedule),
                "inputs": per_tok(tm.inputs),
                "compute_outside_kernels": per_tok(tm.compute.saturating_sub(tm.kernels)),
                "kernels": per_tok(tm.kernels), "outputs": per_tok(tm.outputs),
            });
            results.push((t, name, mean, sd, tps, ctx.n_splits(), host_us, phases, gpu));
        }
    }
    let backend = model.devices.names().join("+");
    if a.json {
        let v: Vec<serde_json::Value> = results
            .iter()
            .map(|(t, name, mean, sd, tps, splits, host_us, phases, gpu)| {
                let mut v = serde_json::json!({
                    "model": model.hparams.arch, "size_mib": file_mib, "backend": backend,
                    "threads": t, "test": name, "avg_ts": mean, "stddev_ts": sd, "samples_ts": tps,
                    "n_batch": a.model.batch_size, "flash_attn": !a.model.no_flash_attn, "n_splits": splits,
                    "outside_kernels_us_per_token": host_us, "us_per_token": phases,
                });
                if let Some(g) = gpu {
                    v["gpu"] = g.json();
                }
                v
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        println!("| model | size | backend | threads | test | t/s | outside kernels µs/token |");
        println!("| --- | ---: | --- | ---: | ---: | ---: | ---: |");
        for (t, name, mean, sd, _, _, host_us, _, _) in &results {
            println!(
                "| {} {}L | {file_mib:.2} MiB | {backend} | {t} | {name} | {mean:.2} ± {sd:.2} | {host_us:.0} |",
                model.hparams.arch, model.hparams.n_layer
            );
        }
        if results.iter().any(|r| r.8.is_some()) {
            println!();
            println!("{GPU_HEADER}");
            println!("{GPU_RULE}");
            for (t, name, .., gpu) in &results {
                if let Some(g) = gpu {
                    println!("| {t} | {name} | {} |", g.row());
                }
            }
        }
    }
    Ok(0)
}

/// The GPU table's header: host time per token (everything but waiting for
/// the device), the GPU backend's share of it by phase, the device's time
/// from timestamp queries ("n/a" without them), and wgpu calls per token.
const GPU_HEADER: &str = "| threads | test | host µs/token | plan | record | submit + wait | read-back | \
                          device µs/token | submits | waits | maps | new buffers | new bind groups |";
const GPU_RULE: &str =
    "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |";

/// The GPUs' counters and timings at one moment.
struct GpuSnapshot(Vec<(strata_gpu::GpuCounters, strata_gpu::GpuTimings)>);

impl GpuSnapshot {
    fn take(gpus: &[std::sync::Arc<strata_gpu::GpuDevice>]) -> GpuSnapshot {
        GpuSnapshot(
            gpus.iter()
                .map(|g| (g.context().counters(), g.context().timings()))
                .collect(),
        )
    }

    /// What the GPUs did since `before`, per token of `tokens` computed in
    /// `wall` seconds; `None` without GPUs.
    fn since(self, before: &GpuSnapshot, wall: f64, tokens: usize) -> Option<GpuPerToken> {
        if self.0.is_empty() || tokens == 0 {
            return None;
        }
        let mut c = strata_gpu::GpuCounters::default();
        let mut tm = strata_gpu::GpuTimings::default();
        let mut device = Some(Duration::ZERO);
        for ((c1, t1), (c0, t0)) in self.0.iter().zip(&before.0) {
            let (dc, dt) = (*c1 - *c0, *t1 - *t0);
            c.submits += dc.submits;
            c.waits += dc.waits;
            c.readback_maps += dc.readback_maps;
            c.buffers_created += dc.buffers_created;
            c.bind_groups_created += dc.bind_groups_created;
            tm.plan += dt.plan;
            tm.record += dt.record;
            tm.submit += dt.submit;
            tm.wait += dt.wait;
            tm.readback += dt.readback;
            // device time per graph, scaled to every graph when the
            // device timed only some (a graph nobody waited for)
            device = match (device, dt.device) {
                (Some(d), Some(x)) if dt.timed_graphs > 0 => {
                    Some(d + x.mul_f64(dt.graphs as f64 / dt.timed_graphs as f64))
                }
                _ => None,
            };
        }
        let n = tokens as f64;
        let us = |d: Duration| d.as_secs_f64() * 1e6 / n;
        Some(GpuPerToken {
            host: (wall - tm.wait.as_secs_f64()).max(0.0) * 1e6 / n,
            plan: us(tm.plan),
            record: us(tm.record),
            submit: us(tm.submit),
            wait: us(tm.wait),
            readback: us(tm.readback),
            device: device.map(us),
            submits: c.submits as f64 / n,
            waits: c.waits as f64 / n,
            maps: c.readback_maps as f64 / n,
            buffers: c.buffers_created as f64 / n,
            bind_groups: c.bind_groups_created as f64 / n,
        })
    }
}

/// Per token: host time outside waiting for the device (µs), the GPU
/// backend's phases (µs), the device's time (µs) and wgpu calls.
struct GpuPerToken {
    host: f64,
    plan: f64,
    record: f64,
    submit: f64,
    wait: f64,
    readback: f64,
    device: Option<f64>,
    submits: f64,
    waits: f64,
    maps: f64,
    buffers: f64,
    bind_groups: f64,
}

impl GpuPerToken {
    fn row(&self) -> String {
        let device = self.device.map_or("n/a".into(), |d| format!("{d:.0}"));
        format!(
            "{:.0} | {:.0} | {:.0} | {:.0} + {:.0} | {:.0} | {device} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2}",
            self.host,
            self.plan,
            self.record,
            self.submit,
            self.wait,
            self.readback,
            self.submits,
            self.waits,
            self.maps,
            self.buffers,
            self.bind_groups
        )
    }

    fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "host_us_per_token": self.host, "plan_us": self.plan, "record_us": self.record,
            "submit_us": self.submit, "wait_us": self.wait, "readback_us": self.readback,
            "device_us": self.device, "submits_per_token": self.submits,
            "waits_per_token": self.waits, "maps_per_token": self.maps,
            "buffers_per_token": self.buffers, "bind_groups_per_token": self.bind_groups,
        })
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn mean_and_sample_stddev() {
        let (m, s) = super::mean_std(&[2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]);
        assert_eq!(m, 5.0);
        assert!((s - (32.0f64 / 7.0).sqrt()).abs() < 1e-12);
        assert_eq!(super::mean_std(&[3.0]), (3.0, 0.0));
    }
}
