//! `strata devices`: every device the CLI can use, with its type, memory and
//! description (llama.cpp's `--list-devices`). The CPU's line names the
//! processor and the instruction-set level its kernels run at, and a last
//! line the cache sizes its matmuls block for (detected, or as
//! `STRATA_CACHE` sets them), so a log can be read against the machine it
//! came from.

use crate::common::CliResult;

/// Arguments of `strata devices`.
#[derive(clap::Args)]
pub struct Args {
    /// Also probe these remote devices (e.g. `RPC[127.0.0.1:50052]`); repeatable.
    #[arg(long)]
    pub device: Vec<String>,
}

/// Lists the devices.
pub fn run(a: Args) -> CliResult {
    let reg = crate::test_ops::registry();
    let mut devices = reg.devices();
    for name in &a.device {
        devices.push(reg.device(name)?);
    }
    println!("Available devices:");
    for d in devices {
        let mem = match d.memory() {
            Ok(m) => format!("{} MiB, {} MiB free", m.total >> 20, m.free >> 20),
            Err(e) => format!("memory unknown: {e}"),
        };
        println!(
            "  {}: {:?}, {} ({mem})",
            d.name(),
            d.device_type(),
            d.description()
        );
    }
    println!("CPU caches: {}", strata::isa::cache::detection());
    Ok(0)
}
