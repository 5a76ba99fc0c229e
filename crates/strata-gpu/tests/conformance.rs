//! The op conformance suite on the first GPU (on CI: Mesa's software Vulkan
//! device), each case against the CPU. Skips with the reason when there is
//! no adapter, and fails then under `STRATA_REQUIRE_GPU=1`.

use strata::conformance::{run_suite, Outcome};

mod support;

#[test]
fn every_supported_case_matches_the_cpu() {
    let Some(dev) = support::gpu() else { return };
    let mut backend = dev.backend();
    let mut failed = Vec::new();
    let mut unsupported = Vec::new();
    let summary = run_suite(&mut backend, None, 7, |case, r| match r {
        Ok(Outcome::Pass { .. }) => {}
        Ok(Outcome::Unsupported) => unsupported.push(case.name.clone()),
        other => failed.push(format!("{}: {other:?}", case.name)),
    });
    println!("{summary}\nnot supported:\n  {}", unsupported.join("\n  "));
    assert!(failed.is_empty(), "{summary}:\n  {}", failed.join("\n  "));
    assert!(summary.passed > 0);
}
