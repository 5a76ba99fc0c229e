//! The op conformance suite on the first GPU (on CI: Mesa's software Vulkan
//! device), each case against the CPU: every case of the CPU suite must run
//! on the GPU and pass (issue #14's bar). The one exception: discrete GPUs
//! leave CPY into Q4_K/Q5_K to the CPU (see `ops/rows.rs`). Skips with the
//! reason when there is no adapter, and fails then under
//! `STRATA_REQUIRE_GPU=1`.

use strata::backend::Device;

mod support;

#[test]
fn every_case_of_the_cpu_suite_passes_on_the_gpu() {
    if let Some(dev) = support::gpu() {
        let path = if dev.context().has_subgroups() {
            "matvec: subgroup"
        } else {
            "matvec: workgroup memory"
        };
        assert!(dev.description().contains(path), "{}", dev.description());
        support::conformance(&dev);
    }
}

/// The same with the adapter's optional paths off (`subgroups`, `f16`):
/// the kernels an adapter without them gets (the shared-memory
/// matrix-vector reduction among them) pass every case too.
#[test]
fn every_case_passes_without_subgroups_or_f16() {
    for dev in support::gpu_and_fallback().iter().skip(1) {
        let ctx = dev.context();
        assert!(
            !ctx.has_subgroups() && !ctx.has_f16(),
            "the paths were not turned off"
        );
        assert!(
            dev.description().contains("matvec: workgroup memory"),
            "{}",
            dev.description()
        );
        support::conformance(dev);
    }
}
