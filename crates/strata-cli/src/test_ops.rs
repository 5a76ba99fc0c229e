//! `strata test-ops --device NAME`: the op conformance suite on one device,
//! each case compared with the local CPU (like ggml's test-backend-ops).

use strata::backend::Registry;
use strata::conformance::{run_suite, Outcome};

/// Arguments of `strata test-ops`.
#[derive(clap::Args)]
pub struct Args {
    /// Device to test, e.g. `CPU`, `GPU0` or `RPC[127.0.0.1:50052]`.
    #[arg(long, default_value = "CPU")]
    pub device: String,
    /// Only cases whose name contains this text (e.g. `MUL_MAT`).
    #[arg(long, short = 'o')]
    pub op: Option<String>,
    /// Seed of the random inputs.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
}

/// The registry the CLI knows: the CPU, the GPUs wgpu finds (`GPU0`, …)
/// and remote devices (`RPC[host:port]`).
pub fn registry() -> Registry {
    let mut reg = Registry::with_defaults();
    reg.register(std::sync::Arc::new(strata_gpu::GpuProvider));
    reg.register(std::sync::Arc::new(strata_rpc::RpcProvider::new()));
    reg
}

/// Runs the suite; exit code 1 when a case failed.
pub fn run(a: Args) -> strata::Result<i32> {
    let reg = registry();
    let mut backend = reg.backend(&a.device)?;
    println!(
        "Testing device {} ({})",
        a.device,
        backend.device().description()
    );
    let summary = run_suite(
        backend.as_mut(),
        a.op.as_deref(),
        a.seed,
        |case, r| match r {
            Ok(Outcome::Pass { nmse }) => println!("  {}: OK (nmse {nmse:.2e})", case.name),
            Ok(Outcome::Fail { nmse }) => println!(
                "  {}: FAIL (nmse {nmse:.2e} > {:.0e})",
                case.name, case.max_nmse
            ),
            Ok(Outcome::Unsupported) => println!("  {}: not supported", case.name),
            Err(e) => println!("  {}: FAIL ({e})", case.name),
        },
    );
    println!("{summary}");
    Ok(if summary.failed == 0 { 0 } else { 1 })
}
