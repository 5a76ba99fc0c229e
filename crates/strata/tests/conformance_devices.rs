//! The conformance suite on strata's other in-process devices: the BLAS
//! backend (its matrix products), the CPU with every tensor in `CPU_PACKED`
//! memory (eligible weights repacked), and the test kit's simulated devices.
//! The remote device (RPC on loopback) is stamped in strata-rpc's tests.

use strata::blas::BlasBackend;
use strata::conformance::UnderTest;
use strata::cpu::packed_buffer_type;
use strata::testkit::TestBackend;

// min_batch 1: every matrix product of the suite goes through sgemm.
strata::conformance_suite!(
    blas,
    || Ok(UnderTest::new(BlasBackend::new(1))),
    ops = ["MUL_MAT"]
);

strata::conformance_suite!(cpu_packed, || {
    let cpu = TestBackend::host("CPU", |_| true, 2).with_buffer_type(packed_buffer_type());
    Ok(UnderTest::new(cpu))
});

// memory the CPU backend cannot address, like a GPU's
strata::conformance_suite!(test_device, || Ok(UnderTest::new(TestBackend::device(
    "FAKE0",
    |_| true,
    2
))));

/// The ops of [`test_host_some_ops`].
const SOME_OPS: [&str; 4] = ["ADD", "MUL_MAT", "SOFT_MAX", "ROPE"];

strata::conformance_suite!(
    test_host_some_ops,
    || Ok(UnderTest::new(TestBackend::host(
        "CPU",
        |t| SOME_OPS.contains(&t.op().name()),
        2
    ))),
    ops = SOME_OPS
);
