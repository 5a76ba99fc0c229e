//! What the CPU backend keeps about graphs: resolved plans reused across
//! computes, the kernel clock and the per-step profile.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::ops::{self, NodePlan, WorkSize};
use super::{steps, CpuBackend};
use crate::graph::Graph;
use crate::ops::Op;
use crate::tensor::Tensor;
use crate::Result;

/// Time per kind of step: the op and the weight types of its nodes.
#[derive(Default)]
pub(super) struct Profile {
    pub(super) entries: std::collections::HashMap<String, (u64, u64)>,
}

/// One line of [`CpuBackend::profile`]: a kind of step and the time the
/// backend spent on it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProfileEntry {
    /// The op and its first source's type, e.g. `MUL_MAT q4_0`; matmuls
    /// run as one step name every weight, e.g. `MUL_MAT q5_0+q5_0+q8_0`.
    pub what: String,
    /// Wall time from the end of the previous step to the end of this one
    /// on thread 0 (the barrier after it included), summed over computes.
    pub time: Duration,
    /// How many steps of this kind ran.
    pub count: u64,
}

/// What a step is, for the profile.
pub(super) fn step_label(members: &[(usize, NodePlan)]) -> String {
    let (_, first) = &members[0];
    let types: Vec<String> = members
        .iter()
        .map(|(_, p)| p.src[0].map_or_else(|| p.dst.dtype.to_string(), |s| s.dtype.to_string()))
        .collect();
    format!("{} {}", first.op.name(), types.join("+"))
}

/// Resolved plans of one graph and what they were resolved from.
pub(super) struct PlanCache {
    /// Node ids and their effective source ids (0 for an empty slot).
    pub(super) key: Vec<u64>,
    /// (index in the graph's nodes, plan) of every non-view node.
    pub(super) plans: Vec<(usize, NodePlan)>,
    /// Storage owners the graph writes.
    pub(super) written: crate::graph::IdSet<u64>,
    /// Share count (`WorkerCtx::shares`) `works` was sized for.
    pub(super) nth: usize,
    /// Work memory of each plan for `nth` threads (a step's members share
    /// the largest).
    pub(super) works: Vec<WorkSize>,
    /// Ranges of `plans` that run as one step (`steps`): single nodes, and
    /// packed MUL_MATs sharing their activations.
    pub(super) steps: Vec<std::ops::Range<usize>>,
    /// Small enough to run on the calling thread alone ([`PlanCache::is_light`]).
    pub(super) light: bool,
}

/// Most elements a light graph may write ([`PlanCache::is_light`]).
const LIGHT_ELEMENTS: usize = 16 << 10;

impl PlanCache {
    /// Resolves `graph` for `nth` threads.
    pub(super) fn new(graph: &Graph, key: Vec<u64>, nth: usize) -> Result<PlanCache> {
        let (plans, written) = CpuBackend::resolve(graph)?;
        let (plans, steps) = steps::schedule(plans);
        let works = steps::works(&plans, &steps, nth);
        let light = PlanCache::is_light(&plans);
        Ok(PlanCache {
            key,
            plans,
            written,
            nth,
            works,
            steps,
            light,
        })
    }

    /// Whether a graph is only row gathers and copies writing at most
    /// [`LIGHT_ELEMENTS`] elements in all (a decode step's token embedding,
    /// where a GPU holds the layers): waking the pool's workers for it costs
    /// more than the work. Their kernels split rows by thread, so running
    /// them on one thread gives the same bits.
    fn is_light(plans: &[(usize, NodePlan)]) -> bool {
        let mut elements = 0usize;
        plans.iter().all(|(_, p)| {
            elements = elements.saturating_add(p.dst.ne.iter().product());
            matches!(p.op, Op::GetRows | Op::Dup | Op::Cpy | Op::Cont)
        }) && elements <= LIGHT_ELEMENTS
    }

    /// The data-dependent checks (row indices), run before every compute.
    pub(super) fn validate(&self, graph: &Graph) -> Result<()> {
        let computed = |t: &Tensor| self.written.contains(&t.storage_owner().id().get());
        for (i, plan) in &self.plans {
            ops::validate(&graph.nodes()[*i], plan, &computed)?;
        }
        Ok(())
    }
}

/// Total wall time a [`CpuBackend`] has spent running kernels: from the
/// thread pool's start to its end for every `graph_compute` (barriers
/// between nodes included; graph checks and view resolution before it not).
///
/// A cheap shared handle: keep a clone (from [`CpuBackend::kernel_clock`])
/// to read the time after the backend has been moved into a scheduler.
///
/// ```
/// use strata::backend::Backend;
/// use strata::cpu::{self, CpuBackend};
/// use strata::{ops, DType, Graph, Tensor};
///
/// let a = Tensor::new(DType::F32, &[4]).unwrap();
/// let g = Graph::build(&[ops::scale(&a, 2.0).unwrap()]);
/// let _bufs = cpu::alloc_graph_host(&g).unwrap();
/// let mut be = CpuBackend::new(1);
/// let clock = be.kernel_clock();
/// be.graph_compute(&g).unwrap();
/// assert!(clock.elapsed() > std::time::Duration::ZERO);
/// ```
#[derive(Clone, Debug, Default)]
pub struct KernelClock(Arc<AtomicU64>);

impl KernelClock {
    /// Kernel time accumulated so far.
    pub fn elapsed(&self) -> Duration {
        Duration::from_nanos(self.0.load(Ordering::Relaxed))
    }

    pub(super) fn add(&self, d: Duration) {
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        self.0.fetch_add(ns, Ordering::Relaxed);
    }
}
