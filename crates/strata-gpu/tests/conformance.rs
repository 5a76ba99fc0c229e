//! The op conformance suite on the first GPU (on CI: Mesa's software Vulkan
//! device), each case against the CPU: every case of the CPU suite must run
//! on the GPU and pass (issue #14's bar). The one exception: discrete GPUs
//! leave CPY into Q4_K/Q5_K to the CPU (see `ops/rows.rs`). Skips with the
//! reason when there is no adapter, and fails then under
//! `STRATA_REQUIRE_GPU=1`.

use strata::conformance::{cases, run_suite, Outcome};

mod support;

#[test]
fn every_case_of_the_cpu_suite_passes_on_the_gpu() {
    let Some(dev) = support::gpu() else { return };
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
