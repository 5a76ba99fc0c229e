//! `strata`: the command-line tool.
#![warn(missing_docs)]

mod batched_bench;
mod bench;
mod chat;
mod common;
mod compare;
mod devices;
mod eval;
mod explain;
mod fetch;
mod inspect;
mod log;
mod perplexity;
mod quantize;
mod rpc_server;
mod run;
mod serve;
mod settings;
mod test_ops;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

/// The version and the commit the binary was built from (`build.rs`;
/// "unknown" outside a git checkout).
const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("STRATA_COMMIT"),
    ")"
);

#[derive(Parser)]
#[command(
    name = "strata",
    version = VERSION,
    about = "ggml's execution runtime, rebuilt in Rust"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Generate text from a prompt (default model: SmolLM2-135M-Instruct, fetched if absent).
    Run(run::Args),
    /// Chat interactively using the model's chat template.
    Chat(chat::Args),
    /// Measure prompt processing and generation speed (llama-bench style).
    Bench(bench::Args),
    /// Measure many sequences decoded together (llama-batched-bench's table).
    BatchedBench(batched_bench::Args),
    /// Perplexity of a text file (llama-perplexity's chunking).
    Perplexity(perplexity::Args),
    /// Write the raw logits of a prompt to a file.
    Eval(eval::Args),
    /// Print a GGUF file's metadata and tensors.
    Inspect(inspect::Args),
    /// Quantize a GGUF model to a llama.cpp file type (llama-quantize's mixtures).
    Quantize(quantize::Args),
    /// Rewrite a KL-divergence base file (llama-perplexity's or strata's) as a compact top-k file.
    KldConvert(perplexity::ConvertArgs),
    /// KL-divergence statistics between two saved base files (no model run).
    KldCompare(perplexity::CompareArgs),
    /// List the devices (type, memory; the CPU's model and instruction-set level).
    Devices(devices::Args),
    /// Run the op conformance suite on a device against the local CPU.
    TestOps(test_ops::Args),
    /// Run a model's graph on a device and on the CPU node by node; name the first node that differs.
    Compare(compare::Args),
    /// Show how the scheduler places a graph (an example, or a model's with -m).
    Explain(explain::Args),
    /// Serve this machine's CPU to RPC clients (ggml RPC protocol 7.0.0).
    RpcServer(rpc_server::Args),
    /// Serve a model over HTTP: OpenAI's and Ollama's APIs with continuous batching.
    Serve(serve::Args),
}

/// Restores the default SIGPIPE action, as command-line tools have it: Rust
/// ignores the signal, so `strata inspect M | head` made `println!` panic on
/// the closed pipe; now the process ends quietly like `cat` does.
fn default_sigpipe() {
    #[cfg(unix)]
    // SAFETY: called first in main, before any thread exists; `signal` with
    // SIG_DFL installs no handler code.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

/// What `strata --version` prints after the name: the version, the commit
/// and the instruction-set level the CPU kernels run at on this machine
/// (and the detected one when `STRATA_ISA` lowers it).
fn version_line() -> String {
    use strata::isa::{active, detected};
    let (active, detected) = (active(), detected());
    let detected = if active == detected {
        String::new()
    } else {
        format!(", detected {detected}")
    };
    format!(
        "{} (commit {}, ISA level {active}{detected})",
        env!("CARGO_PKG_VERSION"),
        env!("STRATA_COMMIT")
    )
}

/// Parses the command line. The ISA level is read only when the version is
/// asked for: detection logs through the subscriber `log::init` installs
/// later, and runs once per process.
fn parse_cli(args: Vec<String>) -> Cli {
    let mut cmd = Cli::command();
    if args.iter().skip(1).any(|a| a == "-V" || a == "--version") {
        let line: &'static str = Box::leak(version_line().into_boxed_str());
        cmd = cmd.version(line).long_version(line);
    }
    let matches = cmd.get_matches_from(args);
    Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit())
}

fn main() {
    default_sigpipe();
    let cli = parse_cli(common::normalize_args(std::env::args()));
    log::init();
    let result = match cli.command {
        Command::Run(a) => run::run(a),
        Command::Chat(a) => chat::run(a),
        Command::Bench(a) => bench::run(a),
        Command::BatchedBench(a) => batched_bench::run(a),
        Command::Perplexity(a) => perplexity::run(a),
        Command::Eval(a) => eval::run(a),
        Command::KldConvert(a) => perplexity::convert(a),
        Command::Devices(a) => devices::run(a),
        Command::KldCompare(a) => perplexity::compare_files(a),
        Command::Inspect(a) => inspect::run(a).map_err(Into::into),
        Command::Quantize(a) => quantize::run(a).map_err(Into::into),
        Command::TestOps(a) => test_ops::run(a).map_err(Into::into),
        Command::Explain(a) => explain::run(a),
        Command::Compare(a) => compare::run(a),
        Command::RpcServer(a) => rpc_server::run(a).map(|()| 0).map_err(Into::into),
        Command::Serve(a) => serve::run(a),
    };
    match result {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    }
}
