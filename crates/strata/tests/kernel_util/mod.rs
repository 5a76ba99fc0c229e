//! Helpers for kernel tests: thread-count determinism and in-place runs.
#![allow(dead_code)]

use strata::{cpu, DType, Tensor};

use crate::common;

/// Runs the graph of `outputs` with 1, 2 and 3 threads, asserts the results
/// are bitwise identical, and returns them.
pub fn run_threads(outputs: &[Tensor], inputs: &[(&Tensor, &[f32])]) -> Vec<Vec<f32>> {
    let first = common::run(outputs, inputs, 1);
    for nth in [2, 3] {
        let again = common::run(outputs, inputs, nth);
        for (k, (a, b)) in first.iter().zip(&again).enumerate() {
            assert_eq!(a.len(), b.len());
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                assert!(
                    x.to_bits() == y.to_bits(),
                    "output {k}[{i}]: {x} with 1 thread, {y} with {nth}"
                );
            }
        }
    }
    first
}

/// Builds `build(x)` twice: once with its own memory and once with its
/// storage placed over its source `x` (in place, as the memory planner
/// does), and asserts both give bitwise the same result for 1, 2, 3 threads.
/// Returns the result.
pub fn assert_in_place(
    dtype: DType,
    dims: &[usize],
    x_data: &[f32],
    others: &[(&Tensor, &[f32])],
    build: impl Fn(&Tensor) -> Tensor,
) -> Vec<f32> {
    let x = common::tensor("x", dtype, dims);
    let y = build(&x);
    let mut inputs: Vec<(&Tensor, &[f32])> = vec![(&x, x_data)];
    inputs.extend_from_slice(others);
    let want = common::run(&[y], &inputs, 1).remove(0);
    for nth in 1..=3 {
        let x2 = common::tensor("x_in_place", dtype, dims);
        let y2 = build(&x2);
        assert_eq!(
            y2.nbytes(),
            x2.nbytes(),
            "in-place result must fit its source"
        );
        let buf = cpu::cpu_buffer_type().alloc_buffer(x2.nbytes()).unwrap();
        x2.set_storage(buf.clone(), 0).unwrap();
        y2.set_storage(buf, 0).unwrap();
        let mut inputs: Vec<(&Tensor, &[f32])> = vec![(&x2, x_data)];
        inputs.extend_from_slice(others);
        let got = common::run(&[y2], &inputs, nth).remove(0);
        assert_eq!(got.len(), want.len());
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!(
                g.to_bits() == w.to_bits(),
                "in place with {nth} threads: [{i}] = {g}, out of place {w}"
            );
        }
    }
    want
}
