//! `strata`: the command-line tool.
#![warn(missing_docs)]

mod explain;
mod inspect;
mod log;
mod rpc_server;
mod test_ops;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "strata",
    version,
    about = "ggml's execution runtime, rebuilt in Rust"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print a GGUF file's metadata and tensors.
    Inspect(inspect::Args),
    /// Run the op conformance suite on a device against the local CPU.
    TestOps(test_ops::Args),
    /// Show how the scheduler places an example graph (text, JSON or DOT).
    Explain(explain::Args),
    /// Serve this machine's CPU to RPC clients (ggml RPC protocol 7.0.0).
    RpcServer(rpc_server::Args),
}

fn main() {
    let cli = Cli::parse();
    log::init();
    let result = match cli.command {
        Command::Inspect(a) => inspect::run(a),
        Command::TestOps(a) => test_ops::run(a),
        Command::Explain(a) => explain::run(a),
        Command::RpcServer(a) => rpc_server::run(a).map(|()| 0),
    };
    match result {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    }
}
