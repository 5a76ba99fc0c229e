//! The conformance suite on the CPU backend itself (2 threads against the
//! 1-thread reference): every case must pass, and the suite must cover every op.

use std::collections::BTreeSet;

use strata::conformance::{cases, nmse, run_case, Outcome};
use strata::cpu::CpuBackend;

#[test]
fn every_case_passes_on_the_cpu() {
    let mut cpu = CpuBackend::new(2);
    let mut ops = BTreeSet::new();
    for case in cases() {
        let r = run_case(&case, &mut cpu, 1).unwrap();
        assert!(matches!(r, Outcome::Pass { .. }), "{}: {r:?}", case.name);
        ops.insert(case.name.split('(').next().unwrap().to_string());
    }
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
