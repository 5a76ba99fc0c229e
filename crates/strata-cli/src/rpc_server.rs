//! `strata rpc-server`: serves the CPU backend over ggml's RPC protocol.

use std::io::Write;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;

use strata::{Error, Result};
use strata_rpc::server::{BackendFactory, CpuBackendFactory, Limits, Preload, Server};

/// Options of `strata rpc-server`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// IP address to bind. The protocol has no authentication: anyone who
    /// can reach the port can use this machine's memory and CPU.
    #[arg(long, default_value = "127.0.0.1")]
    host: IpAddr,
    /// Port to listen on (0 picks a free one, printed at start).
    #[arg(short, long, default_value_t = strata_rpc::proto::DEFAULT_PORT)]
    port: u16,
    /// Threads per client computation (default: all cores).
    #[arg(short, long)]
    threads: Option<usize>,
    /// How long a CPU thread waiting for the others spins before it
    /// sleeps, 0 to 100 (llama.cpp's --poll): 0 sleeps at once, 50 (the
    /// default) spins about 100 µs, 100 about 200 µs.
    #[arg(long, default_value_t = strata::cpu::Poll::DEFAULT, value_parser = crate::common::parse_poll)]
    poll: strata::cpu::Poll,
    /// Memory clients may allocate in all, in MiB (also the largest buffer;
    /// reported as the device memory). Default: two thirds of physical memory.
    #[arg(long, value_name = "MiB")]
    mem: Option<u64>,
    /// Most nodes in one graph (default: as many as the message limit,
    /// derived from --mem, allows).
    #[arg(long, value_name = "N")]
    max_graph_nodes: Option<usize>,
    /// Longest computation of one graph, in seconds; a longer one is aborted
    /// and its client disconnected (default: no limit). A computation is
    /// always aborted when its client disconnects.
    #[arg(long, value_name = "SECS")]
    compute_timeout: Option<f64>,
    /// Directory caching large weight uploads by hash (SET_TENSOR_HASH).
    #[arg(long, value_name = "DIR")]
    cache: Option<PathBuf>,
    /// GGUF file (or directory of .gguf files) whose large tensors clients
    /// need not upload: their SET_TENSOR_HASH is served from the mapped file
    /// (repeatable).
    #[arg(long, value_name = "PATH")]
    preload: Vec<PathBuf>,
    /// Keep received weights in ggml's layout (no repacking for the packed
    /// kernels); also `STRATA_NO_REPACK=1`.
    #[arg(long)]
    no_repack: bool,
}

const WARNING: &str = "\
!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!
!! WARNING: the RPC server is bound to {HOST}, not a loopback address.
!! The protocol has NO authentication and NO encryption: anyone who can reach
!! this port can allocate memory, read and write it, and run computations.
!! Never expose it to an open network; prefer 127.0.0.1 with an SSH tunnel.
!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!";

/// Runs the server until the process is stopped.
pub fn run(args: Args) -> Result<()> {
    let threads = args.threads.unwrap_or_else(strata::cpu::default_threads);
    let threads =
        crate::common::check_threads(&[threads], "--threads").map_err(Error::InvalidArgument)?[0];
    strata::cpu::set_default_poll(args.poll);
    if !args.host.is_loopback() {
        eprintln!("{}", WARNING.replace("{HOST}", &args.host.to_string()));
    }
    let bad = |arg: &str, value: String, expected: &str| Error::BadValue {
        arg: arg.into(),
        value,
        expected: expected.into(),
    };
    let limits = match args.mem {
        Some(mib) => {
            Limits::with_mem(mib.checked_mul(1 << 20).filter(|&b| b > 0).ok_or_else(|| {
                bad(
                    "--mem",
                    format!("{mib} (MiB)"),
                    "at least 1 and less than 2^44 MiB",
                )
            })?)
        }
        None => Limits::default(),
    };
    let mut limits = limits;
    if let Some(n) = args.max_graph_nodes {
        if n == 0 {
            return Err(bad("--max-graph-nodes", "0".into(), "at least 1"));
        }
        limits.max_graph_nodes = n;
    }
    if let Some(secs) = args.compute_timeout {
        limits.max_compute = Some(
            std::time::Duration::try_from_secs_f64(secs)
                .ok()
                .filter(|d| !d.is_zero())
                .ok_or_else(|| {
                    bad(
                        "--compute-timeout",
                        secs.to_string(),
                        "a positive number of seconds",
                    )
                })?,
        );
    }
    let repack = !(args.no_repack || crate::settings::no_repack_env());
    let factory = Arc::new(CpuBackendFactory::new(threads).with_repack(repack));
    let mut server = Server::bind(
        SocketAddr::new(args.host, args.port),
        factory.clone(),
        limits.clone(),
    )?;
    if let Some(dir) = &args.cache {
        server = server.with_cache_dir(dir)?;
    }
    let mut preloaded = String::from("n/a");
    if !args.preload.is_empty() {
        let t0 = std::time::Instant::now();
        let p = Preload::open(&args.preload, strata_rpc::proto::HASH_THRESHOLD)?;
        preloaded = format!(
            "{} tensors, {} MiB mapped from {} file(s), hashed in {:.2} s",
            p.len(),
            p.bytes() >> 20,
            p.files(),
            t0.elapsed().as_secs_f64()
        );
        server = server.with_preload(p);
    }
    let addr = server.local_addr()?;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "Starting RPC server v7.0.0");
    let _ = writeln!(out, "  endpoint       : {addr}");
    let _ = writeln!(
        out,
        "  local cache    : {}",
        args.cache
            .as_ref()
            .map_or("n/a".into(), |d| d.display().to_string())
    );
    let _ = writeln!(out, "  preload        : {preloaded}");
    let _ = writeln!(
        out,
        "  weights        : {}",
        if repack {
            "repacked for the packed kernels on first use"
        } else {
            "ggml's layout (--no-repack)"
        }
    );
    let _ = writeln!(out, "  threads        : {threads}");
    let _ = writeln!(
        out,
        "  graph limits   : {} nodes, {} MiB messages, {}",
        limits.max_graph_nodes,
        limits.max_message >> 20,
        limits
            .max_compute
            .map_or("no time limit".into(), |d| format!(
                "{:.1} s per graph",
                d.as_secs_f64()
            ))
    );
    let _ = writeln!(out, "Devices:");
    for i in 0..factory.device_count() {
        let d = factory.device(i);
        // ggml's format; the figures are the budget, as GET_DEVICE_MEMORY reports.
        let _ = writeln!(
            out,
            "  {}: {} ({} MiB, {} MiB free)",
            d.name(),
            d.description(),
            limits.mem >> 20,
            limits.mem >> 20
        );
    }
    let _ = writeln!(out, "  transport      : TCP");
    let _ = out.flush();
    drop(out);
    server.serve()
}
