//! TOP_K in the conformance suite is checked as ggml defines it: the set of
//! the k largest of each row, in no promised order (ggml-rpc-server's CPU
//! lists them in another order than strata's). A device that reorders the
//! indices, or picks other indices of tied values, passes; one that picks a
//! wrong index fails.

use std::sync::Arc;

use strata::backend::{Backend, BufferType, Device};
use strata::conformance::{cases, nmse, run_case, top_k_error, OpCase, Outcome};
use strata::cpu::CpuBackend;
use strata::ops::Op;
use strata::{Graph, Result, Tensor};

#[test]
fn a_permutation_of_the_indices_passes() {
    let src = [0.3, -0.2, 0.9, 0.1, 0.5, 0.7];
    let want = [2.0, 5.0, 4.0];
    for got in [[2.0, 5.0, 4.0], [4.0, 2.0, 5.0], [5.0, 4.0, 2.0]] {
        assert_eq!(top_k_error(&got, &want, &src, 6, 3), 0.0, "{got:?}");
    }
    // what the old comparison did: one order only
    assert!(nmse(&[5.0, 4.0, 2.0], &want) > 0.0);
}

#[test]
fn a_wrong_index_fails() {
    // two rows of 4; k = 2
    let src = [0.3, -0.2, 0.9, 0.1, 1.0, 2.0, 3.0, 4.0];
    let want = [2.0, 0.0, 3.0, 2.0];
    assert_eq!(top_k_error(&[0.0, 2.0, 2.0, 3.0], &want, &src, 4, 2), 0.0);
    // row 0 names index 3 (0.1) instead of 0 (0.3)
    assert_eq!(top_k_error(&[2.0, 3.0, 2.0, 3.0], &want, &src, 4, 2), 0.5);
    // both rows wrong
    assert_eq!(top_k_error(&[2.0, 1.0, 1.0, 3.0], &want, &src, 4, 2), 1.0);
}

#[test]
fn tied_values_may_be_named_by_other_indices() {
    // the 2nd largest, 0.5, is at 1, 3 and 4
    let src = [0.1, 0.5, 0.9, 0.5, 0.5, -1.0];
    let want = [2.0, 1.0];
    for got in [[2.0, 3.0], [4.0, 2.0], [1.0, 2.0]] {
        assert_eq!(top_k_error(&got, &want, &src, 6, 2), 0.0, "{got:?}");
    }
    // a value that is not among the largest is still wrong
    assert_eq!(top_k_error(&[2.0, 0.0], &want, &src, 6, 2), 1.0);
    // and a tie cannot stand in for the maximum
    assert_eq!(top_k_error(&[1.0, 3.0], &want, &src, 6, 2), 1.0);
}

#[test]
fn malformed_indices_fail() {
    let src = [0.1, 0.5, 0.5, 0.2];
    let want = [1.0, 2.0];
    // the same index twice (its value would match the multiset)
    assert_eq!(top_k_error(&[1.0, 1.0], &want, &src, 4, 2), 1.0);
    // not an integer, out of the row, negative, NaN
    for bad in [1.5, 4.0, -1.0, f32::NAN] {
        assert_eq!(top_k_error(&[1.0, bad], &want, &src, 4, 2), 1.0, "{bad}");
    }
    // lengths that disagree
    assert_eq!(top_k_error(&[1.0], &want, &src, 4, 2), f64::INFINITY);
    assert_eq!(
        top_k_error(&[1.0, 2.0], &want, &src[..3], 4, 2),
        f64::INFINITY
    );
}

/// What [`Tamper`] does to each row of a TOP_K's result.
#[derive(Clone, Copy, Debug)]
enum How {
    /// Reverses the row (a different order of the same set).
    Reverse,
    /// Names another index holding the same value as the row's last one,
    /// where there is one (a different index of a tied value).
    SwapTie,
    /// Replaces the row's last index with one not picked whose value is
    /// different from every picked one.
    Wrong,
}

/// The CPU backend, with each TOP_K result rewritten after compute.
struct Tamper {
    cpu: CpuBackend,
    how: How,
    /// Rows rewritten so far.
    changed: usize,
}

impl Tamper {
    fn new(how: How) -> Tamper {
        Tamper {
            cpu: CpuBackend::new(2),
            how,
            changed: 0,
        }
    }

    fn rewrite(&mut self, node: &Tensor) -> Result<()> {
        let src = node.src(0).expect("TOP_K has a source").to_f32_vec()?;
        let k = node.ne()[0];
        let row_len = src.len() / node.nrows();
        let mut idx: Vec<i32> = node.to_f32_vec()?.iter().map(|&x| x as i32).collect();
        for (r, ix) in idx.chunks_mut(k).enumerate() {
            let row = &src[r * row_len..(r + 1) * row_len];
            let picked = |ix: &[i32], j: usize| ix.contains(&(j as i32));
            match self.how {
                How::Reverse => {
                    ix.reverse();
                    self.changed += 1;
                }
                How::SwapTie => {
                    let last = ix[k - 1] as usize;
                    let other = (0..row_len).find(|&j| !picked(ix, j) && row[j] == row[last]);
                    if let Some(j) = other {
                        ix[k - 1] = j as i32;
                        self.changed += 1;
                    }
                }
                How::Wrong => {
                    let other = (0..row_len)
                        .find(|&j| !picked(ix, j) && ix.iter().all(|&i| row[i as usize] != row[j]));
                    if let Some(j) = other {
                        ix[k - 1] = j as i32;
                        self.changed += 1;
                    }
                }
            }
        }
        node.write_i32(&idx)
    }
}

impl Backend for Tamper {
    fn name(&self) -> String {
        "TAMPER".into()
    }
    fn device(&self) -> Arc<dyn Device> {
        self.cpu.device()
    }
    fn default_buffer_type(&self) -> Arc<dyn BufferType> {
        self.cpu.default_buffer_type()
    }
    fn supports_op(&self, op: &Tensor) -> bool {
        self.cpu.supports_op(op)
    }
    fn graph_compute(&mut self, graph: &Graph) -> Result<()> {
        self.cpu.graph_compute(graph)?;
        for node in graph.nodes() {
            if matches!(node.op(), Op::TopK) {
                self.rewrite(node)?;
            }
        }
        Ok(())
    }
}

fn top_k_cases() -> Vec<OpCase> {
    let v: Vec<OpCase> = cases()
        .into_iter()
        .filter(|c| c.op_name() == "TOP_K")
        .collect();
    assert_eq!(
        v.len(),
        2,
        "the suite has a TOP_K case with and without ties"
    );
    v
}

/// The suite's outcome for `case` on a device that tampers `how`, which
/// must have changed something.
fn run_tampered(case: &OpCase, how: How) -> Outcome {
    let mut dut = Tamper::new(how);
    let r = run_case(case, &mut dut, 1).unwrap();
    assert!(dut.changed > 0, "{}: {how:?} changed nothing", case.name);
    r
}

#[test]
fn the_suite_passes_a_device_that_orders_top_k_otherwise() {
    for case in top_k_cases() {
        let r = run_tampered(&case, How::Reverse);
        assert_eq!(r, Outcome::Pass { nmse: 0.0 }, "{}", case.name);
    }
}

#[test]
fn the_suite_passes_a_device_that_breaks_ties_otherwise() {
    let case = top_k_cases()
        .into_iter()
        .find(|c| c.name.contains("ties"))
        .unwrap();
    // (SwapTie changes nothing when the ties case has no tie at the k-th value)
    let r = run_tampered(&case, How::SwapTie);
    assert_eq!(r, Outcome::Pass { nmse: 0.0 });
}

#[test]
fn the_suite_fails_a_device_that_picks_a_wrong_index() {
    for case in top_k_cases() {
        let r = run_tampered(&case, How::Wrong);
        assert!(matches!(r, Outcome::Fail { .. }), "{}: {r:?}", case.name);
    }
}
