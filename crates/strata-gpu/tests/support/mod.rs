//! The GPU the tests run on, or a printed reason to skip.

use std::sync::Arc;

use strata_gpu::GpuDevice;

/// The first GPU; `None` (after printing why) when there is none, unless
/// `STRATA_REQUIRE_GPU=1`, which turns that into a failure.
pub fn gpu() -> Option<Arc<GpuDevice>> {
    match strata_gpu::first_device() {
        Ok(d) => Some(d),
        Err(why) if std::env::var("STRATA_REQUIRE_GPU").is_ok_and(|v| v == "1") => {
            panic!("STRATA_REQUIRE_GPU=1 but {why}")
        }
        Err(why) => {
            eprintln!("skipped: {why}");
            None
        }
    }
}
