//! The strata command-line tool.
#![warn(missing_docs)]

mod log;
mod rpc_server;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// strata: ggml's execution runtime in Rust.
#[derive(Parser)]
#[command(name = "strata", version, about)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Serve this machine's CPU to RPC clients (ggml RPC protocol 7.0.0).
    RpcServer(rpc_server::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    log::init();
    let res = match cli.cmd {
        Cmd::RpcServer(args) => rpc_server::run(args),
    };
    match res {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
