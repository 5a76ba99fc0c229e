//! `strata bench`: llama-bench-style prompt-processing (pp) and token
//! generation (tg) speed, mean ± stddev over repetitions.

use std::time::Instant;

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
            let run_once = |ctx: &mut Context| -> Result<f64, Box<dyn std::error::Error>> {
                ctx.clear()?;
                let t0 = Instant::now();
                if is_pp {
                    ctx.decode(&tokens, Logits::Last)?;
                } else {
                    for &tok in &tokens {
                        ctx.decode(&[tok], Logits::Last)?;
                    }
                }
                Ok(n as f64 / t0.elapsed().as_secs_f64())
            };
            run_once(&mut ctx)?; // warm-up
            ctx.reset_timings();
            let mut tps = Vec::with_capacity(a.reps);
            for _ in 0..a.reps {
                tps.push(run_once(&mut ctx)?);
            }
            let (mean, sd) = mean_std(&tps);
            let tm = ctx.timings();
            let host_us = tm.outside_kernels_per_token().as_secs_f64() * 1e6;
            let per_tok = |d: std::time::Duration| d.as_secs_f64() * 1e6 / tm.tokens.max(1) as f64;
            let phases = serde_json::json!({
                "build": per_tok(tm.build), "schedule": per_tok(tm.schedule),
                "inputs": per_tok(tm.inputs),
                "compute_outside_kernels": per_tok(tm.compute.saturating_sub(tm.kernels)),
                "kernels": per_tok(tm.kernels), "outputs": per_tok(tm.outputs),
            });
            results.push((t, name, mean, sd, tps, ctx.n_splits(), host_us, phases));
        }
    }
    let backend = model.devices.names().join("+");
    if a.json {
        let v: Vec<serde_json::Value> = results
            .iter()
            .map(|(t, name, mean, sd, tps, splits, host_us, phases)| {
                serde_json::json!({
                    "model": model.hparams.arch, "size_mib": file_mib, "backend": backend,
                    "threads": t, "test": name, "avg_ts": mean, "stddev_ts": sd, "samples_ts": tps,
                    "n_batch": a.model.batch_size, "flash_attn": !a.model.no_flash_attn, "n_splits": splits,
                    "outside_kernels_us_per_token": host_us, "us_per_token": phases,
                })
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        println!("| model | size | backend | threads | test | t/s | outside kernels µs/token |");
        println!("| --- | ---: | --- | ---: | ---: | ---: | ---: |");
        for (t, name, mean, sd, _, _, host_us, _) in &results {
            println!(
                "| {} {}L | {file_mib:.2} MiB | {backend} | {t} | {name} | {mean:.2} ± {sd:.2} | {host_us:.0} |",
                model.hparams.arch, model.hparams.n_layer
            );
        }
    }
    Ok(0)
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
