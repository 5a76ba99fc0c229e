//! The GPU the tests run on, or a printed reason to skip.

use std::sync::Arc;

use strata_gpu::GpuDevice;

/// The first GPU; `None` (after printing why) when there is none, a failure
/// under `STRATA_REQUIRE_GPU=1`.
pub fn gpu() -> Option<Arc<GpuDevice>> {
    strata_gpu::device_or_skip().unwrap()
}

/// The first GPU as [`gpu`] gives it, then opened once more with its
/// optional paths off (`subgroups`, `f16`): kernels that have a fallback
/// are tested on both.
#[allow(dead_code)]
pub fn gpu_and_fallback() -> Vec<Arc<GpuDevice>> {
    use std::sync::OnceLock;
    static FALLBACK: OnceLock<Arc<GpuDevice>> = OnceLock::new();
    let Some(dev) = gpu() else { return Vec::new() };
    let name = dev.context().name().to_string();
    let fallback = FALLBACK.get_or_init(|| {
        strata_gpu::open_private_with(&name, "subgroups,f16").expect("the adapter opens again")
    });
    vec![dev, fallback.clone()]
}

/// Runs the CPU's conformance suite on the first GPU, each case against the
/// CPU: every case must pass, except that discrete GPUs leave CPY into
/// Q4_K/Q5_K to the CPU (see `ops/rows.rs`).
#[allow(dead_code)]
pub fn conformance(dev: &Arc<GpuDevice>) {
    use strata::conformance::{cases, run_suite, Outcome};
    let cpu_device = dev.context().adapter_info().device_type == strata_gpu::AdapterType::Cpu;
    let mut wrong = Vec::new();
    let summary = run_suite(&mut dev.backend(), None, 7, |case, r| {
        let left_to_cpu =
            !cpu_device && (case.name == "CPY(f32->q4_K)" || case.name == "CPY(f32->q5_K)");
        match r {
            Ok(Outcome::Pass { .. }) if !left_to_cpu => {}
            Ok(Outcome::Unsupported) if left_to_cpu => {}
            other => wrong.push(format!("{}: {other:?}", case.name)),
        }
    });
    println!("{summary}");
    assert!(wrong.is_empty(), "{summary}:\n  {}", wrong.join("\n  "));
    assert_eq!(summary.passed + summary.unsupported, cases().len());
}

/// A device of its own on the first GPU's adapter running the prompt
/// matmul `paths`; `None` (printing why) without a GPU or, for f16 tiles,
/// without `SHADER_F16`.
#[allow(dead_code)]
pub fn device_with_paths(paths: strata_gpu::MatmulPaths) -> Option<Arc<GpuDevice>> {
    let gpu = gpu()?;
    if paths.f16_tiles && !gpu.context().has_f16() {
        eprintln!("skipped: {} has no SHADER_F16", gpu.context().name());
        return None;
    }
    let dev = strata_gpu::open_private(gpu.context().name()).unwrap();
    dev.context().set_matmul_paths(paths).unwrap();
    assert_eq!(dev.context().matmul_paths(), paths);
    Some(dev)
}
