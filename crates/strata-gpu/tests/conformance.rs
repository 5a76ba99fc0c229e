//! The op conformance suite on the first GPU (on CI: Mesa's software Vulkan
//! device), each case against the CPU: every case of the CPU suite must run
//! on the GPU and pass (issue #14's bar). Skips with the reason when there is
//! no adapter, and fails then under `STRATA_REQUIRE_GPU=1`.

use strata::conformance::{check_device, DeviceCheck, UnderTest};

mod support;

#[test]
fn every_case_of_the_cpu_suite_passes_on_the_gpu() {
    let Some(dev) = support::gpu() else { return };
    let r = check_device(|| Ok(UnderTest::new(dev.backend())), None);
    match r {
        DeviceCheck::Passed(s) => {
            println!("{s}");
            assert_eq!(s.unsupported, 0);
            assert_eq!(s.passed, strata::conformance::cases().len());
        }
        other => panic!("{other:?}"),
    }
}
