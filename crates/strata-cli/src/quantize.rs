//! `strata quantize IN.gguf OUT.gguf TYPE`: llama-quantize's job (the
//! mixture rules and the writing are in `strata_models::quantize`).

use std::collections::BTreeMap;
use std::path::PathBuf;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use strata_models::quantize::{self, FileType, QuantizeOptions};

/// Arguments of `strata quantize`.
#[derive(clap::Args)]
pub struct Args {
    /// The GGUF model to read.
    pub input: PathBuf,
    /// The GGUF file to write (written under a temporary name, renamed when complete).
    pub output: PathBuf,
    /// The file type: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K_S, Q3_K_M, Q3_K_L, Q4_K_S,
    /// Q4_K_M, Q5_K_S, Q5_K_M, Q6_K, IQ4_NL, IQ4_XS, F16, BF16 (also Q3_K / Q4_K / Q5_K for
    /// the _M mixes, or llama.cpp's numeric id).
    #[arg(value_name = "TYPE")]
    pub file_type: String,
    /// Allow requantizing tensors that are already quantized (they are dequantized to f32
    /// first; quality suffers compared to quantizing from 16 or 32 bits).
    #[arg(long)]
    pub allow_requantize: bool,
    /// No mixture: every quantized tensor gets the file type's default type.
    #[arg(long)]
    pub pure: bool,
    /// The type of output.weight (and of a tied token_embd.weight), e.g. q8_0.
    #[arg(long, value_name = "TYPE")]
    pub output_tensor_type: Option<String>,
    /// The type of token_embd.weight, e.g. q8_0.
    #[arg(long, value_name = "TYPE")]
    pub token_embedding_type: Option<String>,
    /// Threads converting rows.
    #[arg(short = 't', long, default_value_t = strata::cpu::default_threads())]
    pub threads: usize,
    /// Print one line per tensor.
    #[arg(short = 'v', long)]
    pub verbose: bool,
}

fn mib(bytes: usize) -> f64 {
    bytes as f64 / (1u64 << 20) as f64
}

/// Quantizes; exit code 0.
pub fn run(a: Args) -> Result<i32, quantize::QuantizeError> {
    let mut opts = QuantizeOptions::new(FileType::parse(&a.file_type)?);
    opts.allow_requantize = a.allow_requantize;
    opts.pure = a.pure;
    opts.threads = a.threads.max(1);
    if let Some(t) = &a.output_tensor_type {
        opts.output_tensor_type = Some(quantize::parse_tensor_type("--output-tensor-type", t)?);
    }
    if let Some(t) = &a.token_embedding_type {
        opts.token_embedding_type = Some(quantize::parse_tensor_type("--token-embedding-type", t)?);
    }
    eprintln!(
        "strata quantize: {} -> {} as {} ({}), {} threads",
        a.input.display(),
        a.output.display(),
        opts.file_type,
        opts.file_type.description(),
        opts.threads
    );
    let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
    bar.set_style(
        ProgressStyle::with_template("{bar:40} {bytes}/{total_bytes} {msg} ({eta})")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let t0 = std::time::Instant::now();
    let verbose = a.verbose;
    let mut progress = |p: &quantize::Progress| {
        bar.set_length(p.bytes_total as u64);
        bar.set_position(p.bytes_done as u64);
        bar.set_message(format!("{}/{} {}", p.index + 1, p.count, p.tensor.name));
        if p.tensor_done && verbose {
            let t = p.tensor;
            let what = if t.from == t.to {
                format!("{} (kept)", t.to)
            } else {
                format!("{} -> {}", t.from, t.to)
            };
            let fallback = t
                .fallback_from
                .map(|f| format!(", falls back from {f} (row of {})", t.ncols()))
                .unwrap_or_default();
            bar.println(format!(
                "[{:4}/{:4}] {:<36} {:?} {what}{fallback}, {:.3} -> {:.3} MiB",
                p.index + 1,
                p.count,
                t.name,
                t.dims,
                mib(t.bytes_in),
                mib(t.bytes_out)
            ));
        }
    };
    let result = quantize::quantize_file(&a.input, &a.output, &opts, &mut progress);
    bar.finish_and_clear();
    let plan = result?;
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for t in &plan.tensors {
        *counts.entry(t.to.name()).or_default() += 1;
    }
    let counts: Vec<String> = counts.iter().map(|(t, n)| format!("{n} {t}")).collect();
    let n_elements: usize = plan
        .tensors
        .iter()
        .map(|t| t.dims.iter().product::<usize>())
        .sum();
    let bpw = |b: usize| b as f64 * 8.0 / n_elements.max(1) as f64;
    println!(
        "wrote {} in {:.2} s: {} tensors ({}), {:.2} MiB ({:.2} BPW) -> {:.2} MiB ({:.2} BPW)",
        a.output.display(),
        t0.elapsed().as_secs_f64(),
        plan.tensors.len(),
        counts.join(", "),
        mib(plan.bytes_in()),
        bpw(plan.bytes_in()),
        mib(plan.bytes_out()),
        bpw(plan.bytes_out()),
    );
    let n_fallback = plan.n_fallback();
    if n_fallback > 0 {
        println!(
            "{n_fallback} of {} tensors needed the fallback type: their rows do not divide into \
             the blocks of the type the mixture picked (see -v)",
            plan.tensors.len()
        );
    }
    Ok(0)
}
