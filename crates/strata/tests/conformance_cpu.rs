//! The conformance suite on the CPU backend itself (2 threads against the
//! 1-thread reference), at every instruction-set level: every case must
//! pass, and the suite must cover every op. A level this CPU cannot run
//! prints why and passes unless required (`conformance::isa_required`).

use std::collections::BTreeSet;

use strata::conformance::{cases, isa_required, nmse, UnderTest};
use strata::cpu::CpuBackend;
use strata::isa::Isa;

/// A 2-thread CPU backend running its kernels at `isa`.
fn cpu_at(isa: Isa) -> strata::Result<UnderTest> {
    let mut cpu = CpuBackend::new(2);
    cpu.set_isa(isa)?;
    Ok(UnderTest::new(cpu))
}

// At the level the kernels dispatch to by default (`STRATA_ISA` included).
strata::conformance_suite!(cpu, || Ok(UnderTest::new(CpuBackend::new(2))));

/// One stamped test per level: `name => Isa variant`.
macro_rules! at_levels {
    ($($name:ident => $isa:ident),* $(,)?) => {
        $(strata::conformance_suite!(
            $name,
            || cpu_at(Isa::$isa),
            required = isa_required(Isa::$isa)
        );)*
    };
}

at_levels!(
    cpu_scalar => Scalar,
    cpu_avx2 => Avx2,
    cpu_avx512 => Avx512,
    cpu_vnni => Vnni,
    cpu_neon => Neon,
);

#[test]
fn the_suite_covers_every_op() {
    let ops: BTreeSet<String> = cases().iter().map(|c| c.op_name().to_string()).collect();
    for op in [
        "ADD",
        "SUB",
        "MUL",
        "DIV",
        "UNARY",
        "SQR",
        "SQRT",
        "LOG",
        "SIN",
        "COS",
        "SUM",
        "SUM_ROWS",
        "MEAN",
        "ARGMAX",
        "CONT",
        "SCALE",
        "CLAMP",
        "ARGSORT",
        "REPEAT",
        "CONCAT",
        "GLU",
        "NORM",
        "RMS_NORM",
        "MUL_MAT",
        "GET_ROWS",
        "SET_ROWS",
        "CPY",
        "DIAG_MASK_INF",
        "SOFT_MAX",
        "ROPE",
        "FLASH_ATTN_EXT",
    ] {
        assert!(ops.contains(op), "no conformance case for {op}");
    }
}

#[test]
fn rng_edge_cases_do_not_panic() {
    let mut r = strata::conformance::Rng::new(0);
    assert_eq!(r.below(0), 0);
    assert_eq!(r.below(1), 0);
    assert!(r.vec(5, -1.0, 1.0).iter().all(|v| (-1.0..1.0).contains(v)));
}

#[test]
fn nmse_flags_differences() {
    assert_eq!(nmse(&[1.0, 2.0], &[1.0, 2.0]), 0.0);
    assert!(nmse(&[1.0, 2.1], &[1.0, 2.0]) > 1e-3);
    assert_eq!(nmse(&[f32::NEG_INFINITY], &[f32::NEG_INFINITY]), 0.0);
    assert!(nmse(&[1.0], &[1.0, 2.0]).is_infinite());
}
