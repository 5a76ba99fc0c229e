//! The GPU the tests run on, or a printed reason to skip.

use std::sync::Arc;

use strata_gpu::GpuDevice;

/// The first GPU; `None` (after printing why) when there is none, a failure
/// under `STRATA_REQUIRE_GPU=1`.
pub fn gpu() -> Option<Arc<GpuDevice>> {
    strata_gpu::device_or_skip().unwrap()
}
