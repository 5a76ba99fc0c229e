//! The order the CPU backend runs a graph's nodes in, and which of them run
//! together as one step.
//!
//! Every node is one step (its threads meet at a barrier after it), except
//! packed MUL_MATs over the same activations: a decode layer's K, V and Q
//! projections (in graph order K, RoPE K, the K cache write, V, the V cache
//! write, Q) and its FFN gate and up. Those are moved up next to the first of
//! them and computed as one step ([`ops::forward_matmuls`]): the activations
//! are prepared once and the weights' units shared out together, which
//! saves two preparations and four barriers per layer for Q/K/V and one
//! preparation and two barriers for gate/up (ggml runs each as its own node).
//!
//! A node is moved up past the nodes between only when that cannot change
//! what anything computes: the memory it writes (its destination, as the
//! memory planner placed it) overlaps nothing that the nodes it passes or
//! the step's earlier members read or write, and none of those writes
//! memory it reads. The comparison is of the resolved address ranges
//! ([`TView::span`]), so a planner that reuses one tensor's memory for
//! another is respected.

use super::ops::{self, NodePlan};
use super::TView;
use crate::ops::Op;
use std::ops::Range;

/// Most nodes one step holds (what one call of the packed matmul takes).
pub(super) const MAX_STEP: usize = ops::MAX_MATMULS_PER_STEP;

/// How far past a step's first node its members are looked for (nodes of
/// the plan; a decode layer has about 20).
const LOOK_AHEAD: usize = 24;

/// Whether `p` is a packed MUL_MAT (a weight in a `CPU_PACKED` buffer), the
/// one kind of node that shares a step.
fn joinable(p: &NodePlan) -> bool {
    matches!(p.op, Op::MulMat) && p.src[0].is_some_and(|a| a.packed) && p.src[1].is_some()
}

/// Whether packed MUL_MAT `q` may share a step with `p`: the same
/// activation view, the same row length, weights whose activations are
/// prepared alike.
fn shares_activations(p: &NodePlan, q: &NodePlan) -> bool {
    let (a, b) = (p.src(0), p.src(1));
    let (c, d) = (q.src(0), q.src(1));
    b.same_view(d) && a.ne[0] == c.ne[0] && ops::matmul_activations_alike(a.dtype, c.dtype)
}

fn overlaps(x: &Range<usize>, y: &Range<usize>) -> bool {
    x.start < y.end && y.start < x.end && !x.is_empty() && !y.is_empty()
}

/// The ranges a node reads (its sources) and writes (its destination).
fn reads(p: &NodePlan) -> impl Iterator<Item = Range<usize>> + '_ {
    p.src.iter().flatten().map(TView::span)
}

/// Whether `q` can run before (or with) `p` without changing either's result.
fn independent(p: &NodePlan, q: &NodePlan) -> bool {
    let (pw, qw) = (p.dst.span(), q.dst.span());
    !overlaps(&pw, &qw)
        && !reads(p).any(|r| overlaps(&r, &qw))
        && !reads(q).any(|r| overlaps(&r, &pw))
}

/// Reorders `plans` (in graph order) into execution order and cuts it into
/// steps: ranges of the reordered plans that run as one.
pub(super) fn schedule(
    plans: Vec<(usize, NodePlan)>,
) -> (Vec<(usize, NodePlan)>, Vec<Range<usize>>) {
    let n = plans.len();
    let mut taken = vec![false; n];
    let mut order: Vec<usize> = Vec::with_capacity(n);
    let mut steps = Vec::with_capacity(n);
    for i in 0..n {
        if taken[i] {
            continue;
        }
        taken[i] = true;
        let start = order.len();
        order.push(i);
        if joinable(&plans[i].1) {
            // Nodes passed over so far (not moved), then candidates.
            let mut passed: Vec<usize> = Vec::new();
            for j in i + 1..n.min(i + LOOK_AHEAD) {
                if taken[j] {
                    continue;
                }
                let q = &plans[j].1;
                let fits = order.len() - start < MAX_STEP
                    && joinable(q)
                    && shares_activations(&plans[i].1, q)
                    && order[start..].iter().all(|&m| independent(&plans[m].1, q))
                    && passed.iter().all(|&b| independent(&plans[b].1, q));
                if fits {
                    taken[j] = true;
                    order.push(j);
                } else {
                    passed.push(j);
                }
            }
        }
        steps.push(start..order.len());
    }
    let mut plans = plans;
    permute(&mut plans, &order);
    (plans, steps)
}

/// Puts `v` in the order `order` (`v[k]` becomes the old `v[order[k]]`) in
/// place: a received graph's plans are not copied (the RPC server bounds
/// the memory a graph message may cost). Each position follows the moves
/// of the elements before it; the orders made here move a node at most
/// [`LOOK_AHEAD`] places, so the chains are short.
pub(super) fn permute<T>(v: &mut [T], order: &[usize]) {
    debug_assert_eq!(v.len(), order.len());
    for i in 0..order.len() {
        let mut j = order[i];
        while j < i {
            j = order[j];
        }
        v.swap(i, j);
    }
}

/// The work memory of each plan, the members of a step all given the
/// largest of their sizes (they share one work layout).
pub(super) fn works(
    plans: &[(usize, NodePlan)],
    steps: &[Range<usize>],
    nth: usize,
) -> Vec<ops::WorkSize> {
    let mut works: Vec<ops::WorkSize> = plans.iter().map(|(_, p)| ops::work_size(p, nth)).collect();
    for s in steps.iter().filter(|s| s.len() > 1) {
        let merged = works[s.clone()]
            .iter()
            .fold(ops::WorkSize::default(), |m, w| ops::WorkSize {
                shared: m.shared.max(w.shared),
                per_thread: m.per_thread.max(w.per_thread),
            });
        works[s.clone()].fill(merged);
    }
    works
}
