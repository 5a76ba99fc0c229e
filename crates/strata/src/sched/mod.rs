//! The scheduler (ggml's `ggml_backend_sched`): runs one graph across several
//! backends. It assigns every node to a [`BackendId`] (ggml's five passes,
//! each decision with its [`Cause`]), cuts the graph into [`Split`]s, copies split
//! inputs between backends, allocates through the memory planner and runs
//! the splits.
//!
//! Unlike ggml, the caller's graph is never rewritten: the assignment is a
//! value ([`Assignment`], from [`Scheduler::assign`]) computed from the graph, and the per-backend graphs read
//! copied inputs through [`Graph`] source substitutions.
//!
//! ```
//! use strata::backend::Backend;
//! use strata::cpu::CpuBackend;
//! use strata::sched::{SchedConfig, Scheduler};
//! use strata::{ops, DType, Graph, Tensor};
//!
//! let a = Tensor::new(DType::F32, &[4]).unwrap().with_name("a");
//! a.set_input();
//! let b = ops::sqr(&a).unwrap().with_name("b");
//! b.set_output();
//! let g = Graph::build(&[b.clone()]);
//! let backends: Vec<Box<dyn Backend>> = vec![Box::new(CpuBackend::new(2))];
//! let mut sched = Scheduler::new(backends, None, SchedConfig::default()).unwrap();
//! sched.alloc_graph(&g).unwrap();
//! a.write_f32(&[1.0, 2.0, 3.0, 4.0]).unwrap();
//! sched.compute(&g).unwrap();
//! assert_eq!(b.to_f32_vec().unwrap(), vec![1.0, 4.0, 9.0, 16.0]);
//! assert_eq!(sched.n_splits(), 1);
//! ```

mod assign;
// The seeds' experiment for the tests and the `sched_priority` examples,
// not part of the API.
#[doc(hidden)]
pub mod experiment;
mod policy;
mod report;
mod run;

use crate::graph::IdMap;
use std::sync::Arc;

pub use assign::{Assigned, Assignment, BackendId, Cause, Split};
pub use policy::PlacementPolicy;
pub use report::{Report, ReportInput, ReportNode, ReportSplit};

use crate::backend::{Backend, BufferType, DeviceType, Event};
use crate::graph::Graph;
use crate::tensor::{Tensor, TensorId};
use crate::{Error, Result};

/// Scheduler settings. Limits are runtime values (ggml has compile-time
/// constants); exceeding one is an [`Error::Limit`] naming the setting.
#[derive(Clone, Debug)]
pub struct SchedConfig {
    /// Pipeline copies of split inputs (ggml's `parallel` = 4); 1 disables pipelining.
    pub n_copies: usize,
    /// Let higher-priority backends take ops whose weights are on the CPU (`offload_op`).
    pub op_offload: bool,
    /// Maximum number of backends.
    pub max_backends: usize,
    /// Maximum number of splits of one graph.
    pub max_splits: usize,
    /// Maximum number of inputs copied into one split (a new split starts beyond it).
    pub max_split_inputs: usize,
    /// Debug printing: 0 off (the default), 1 splits, 2 splits and nodes.
    /// The library reads no environment; the `strata` CLI sets this from
    /// `STRATA_SCHED_DEBUG` (or its alias `GGML_SCHED_DEBUG`).
    pub debug: u8,
    /// Name rules and offload thresholds.
    pub policy: PlacementPolicy,
}

impl Default for SchedConfig {
    fn default() -> SchedConfig {
        SchedConfig {
            n_copies: 1,
            op_offload: true,
            max_backends: 16,
            max_splits: 4096,
            max_split_inputs: 30,
            debug: 0,
            policy: PlacementPolicy::new(),
        }
    }
}

/// One backend's line of a [`Fit`].
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct FitLine {
    /// Backend name.
    pub backend: String,
    /// Planned compute buffer bytes (shared buffer types report the shared size).
    pub compute_bytes: usize,
    /// Bytes of pre-allocated tensors (weights) the graph reads there.
    pub weight_bytes: usize,
    /// Nodes assigned.
    pub nodes: usize,
}

/// Result of [`Scheduler::fit`].
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Fit {
    /// Per backend, priority order.
    pub backends: Vec<FitLine>,
    /// Splits the graph would have.
    pub n_splits: usize,
}

/// Callback asked for each node: `(tensor, ask)`. With `ask = true` it answers
/// whether the user wants to see the node; with `ask = false` it is called
/// after the node was computed (its data readable) and answers whether to go on.
pub type EvalCallback = Box<dyn FnMut(&Tensor, bool) -> bool + Send>;

/// Runs graphs across backends in priority order (the last one is the CPU fallback).
pub struct Scheduler {
    backends: Vec<Box<dyn Backend>>,
    bufts: Vec<Arc<dyn BufferType>>,
    config: SchedConfig,
    user: IdMap<TensorId, BackendId>,
    events: Vec<Vec<Option<Arc<dyn Event>>>>,
    eval: Option<EvalCallback>,
    run: run::RunState,
}

impl Scheduler {
    /// A scheduler over `backends` (priority order, the CPU last) with
    /// optional buffer types per backend (default: each backend's own).
    pub fn new(
        backends: Vec<Box<dyn Backend>>,
        bufts: Option<Vec<Arc<dyn BufferType>>>,
        config: SchedConfig,
    ) -> Result<Scheduler> {
        if backends.is_empty() {
            return Err(Error::BadValue {
                arg: "Scheduler::new: backends".into(),
                value: "an empty list".into(),
                expected: "at least one backend, the CPU last".into(),
            });
        }
        if backends.len() > config.max_backends {
            return Err(Error::Limit {
                what: "backends",
                value: backends.len(),
                limit: config.max_backends,
                knob: "SchedConfig::max_backends",
            });
        }
        for (arg, value) in [
            ("SchedConfig::n_copies", config.n_copies),
            ("SchedConfig::max_splits", config.max_splits),
            ("SchedConfig::max_split_inputs", config.max_split_inputs),
        ] {
            if value == 0 {
                return Err(Error::BadValue {
                    arg: arg.into(),
                    value: "0".into(),
                    expected: "at least 1".into(),
                });
            }
        }
        config.policy.check(backends.len())?;
        let last = backends.last().expect("non-empty");
        if last.device().device_type() != DeviceType::Cpu {
            return Err(Error::BadValue {
                arg: "Scheduler::new: last backend".into(),
                value: format!("'{}'", last.name()),
                expected: "the CPU (the fallback)".into(),
            });
        }
        let bufts = match bufts {
            Some(b) if b.len() != backends.len() => {
                return Err(Error::Length {
                    what: "Scheduler::new: buffer types (one per backend)".into(),
                    expected: backends.len(),
                    got: b.len(),
                })
            }
            Some(b) => b,
            None => backends.iter().map(|b| b.default_buffer_type()).collect(),
        };
        for (b, buft) in backends.iter().zip(&bufts) {
            if !b.supports_buft(buft) {
                return Err(Error::Unsupported {
                    backend: b.name(),
                    what: format!("buffer type '{}'", buft.name()),
                });
            }
        }
        let events = backends
            .iter()
            .map(|b| {
                (0..config.n_copies)
                    .map(|_| {
                        if config.n_copies > 1 {
                            b.device().event_new()
                        } else {
                            None
                        }
                    })
                    .collect()
            })
            .collect();
        let run = run::RunState::new(&bufts)?;
        Ok(Scheduler {
            backends,
            bufts,
            config,
            user: IdMap::default(),
            events,
            eval: None,
            run,
        })
    }

    /// The backends, in priority order.
    pub fn backends(&self) -> &[Box<dyn Backend>] {
        &self.backends
    }

    /// The backend called `name`.
    pub fn backend_index(&self, name: &str) -> Option<BackendId> {
        self.backends
            .iter()
            .position(|b| b.name() == name)
            .map(BackendId)
    }

    /// The settings.
    pub fn config(&self) -> &SchedConfig {
        &self.config
    }

    fn env(&self) -> assign::Env<'_> {
        assign::Env {
            own_buffers: self.run.own_buffers(),
            backends: &self.backends,
            bufts: &self.bufts,
            user: &self.user,
            op_offload: self.config.op_offload,
            policy: &self.config.policy,
            max_split_inputs: self.config.max_split_inputs,
            max_splits: self.config.max_splits,
            n_copies: self.config.n_copies,
        }
    }

    /// Assigns every tensor of `graph` to a backend and cuts it into splits,
    /// without allocating or running anything.
    pub fn assign(&self, graph: &Graph) -> Result<Assignment> {
        assign::assign(graph, &self.env())
    }

    /// Dry run: where `graph` would run and how much memory each backend
    /// would need — the compute buffer from the real planner, plus the bytes
    /// of tensors already in that backend's memory (weights) — without
    /// allocating anything.
    pub fn fit(&self, graph: &Graph) -> Result<Fit> {
        let assignment = self.assign(graph)?;
        let compute = self
            .run
            .dry_run(graph, &assignment, &self.backends, self.config.n_copies)?;
        let mut weights = vec![0usize; self.backends.len()];
        let mut seen = crate::graph::IdSet::default();
        let ours = self.run.own_buffers();
        let user_allocated = |t: &Tensor| {
            t.buffer().is_some_and(|b| {
                !ours
                    .iter()
                    .any(|o| std::ptr::addr_eq(Arc::as_ptr(o), Arc::as_ptr(&b)))
            })
        };
        for (t, a) in graph.leafs().iter().zip(&assignment.leafs) {
            let owner = t.storage_owner();
            if user_allocated(owner) && seen.insert(owner.id()) {
                weights[a.backend.index()] += owner.nbytes();
            }
        }
        let backends = self
            .backends
            .iter()
            .enumerate()
            .map(|(i, b)| FitLine {
                backend: b.name(),
                compute_bytes: compute[i],
                weight_bytes: weights[i],
                nodes: assignment
                    .nodes
                    .iter()
                    .filter(|a| a.backend.index() == i)
                    .count(),
            })
            .collect();
        Ok(Fit {
            backends,
            n_splits: assignment.splits.len(),
        })
    }

    /// Forces `tensor` onto backend `backend` (ggml_backend_sched_set_tensor_backend);
    /// kept until [`Scheduler::reset`].
    pub fn set_tensor_backend(&mut self, tensor: &Tensor, backend: BackendId) -> Result<()> {
        if backend.index() >= self.backends.len() {
            return Err(Error::index(
                format!("set_tensor_backend: backend for tensor '{}'", tensor.name()),
                backend.index(),
                self.backends.len(),
            ));
        }
        self.user.insert(tensor.id(), backend);
        self.run.invalidate();
        Ok(())
    }

    /// The backend `tensor` was assigned to by the last assignment (or by the user).
    pub fn tensor_backend(&self, tensor: &Tensor) -> Option<BackendId> {
        self.run
            .assigned(tensor)
            .or_else(|| self.user.get(&tensor.id()).copied())
    }

    /// Plans `graph` (a worst-case graph) and sizes the compute buffers for it.
    pub fn reserve(&mut self, graph: &Graph) -> Result<()> {
        let assignment = self.assign(graph)?;
        self.run
            .install(graph, assignment, &mut self.backends, &self.config, false)
    }

    /// Plans `graph` and places all its tensors (re-planning memory when the
    /// assignment changed or the graph no longer fits). With
    /// [`SchedConfig::n_copies`] > 1 each call takes the next pipeline copy:
    /// split inputs and the graph's INPUT leafs have one place per copy, so
    /// the inputs of this batch can be written while the previous batch
    /// still runs. Running work is waited for only before a re-plan, as
    /// ggml's `ggml_backend_sched_alloc_graph` does.
    pub fn alloc_graph(&mut self, graph: &Graph) -> Result<()> {
        let assignment = self.assign(graph)?;
        // waits for running work only when it must re-plan memory
        self.run
            .install(graph, assignment, &mut self.backends, &self.config, true)?;
        if self.config.debug > 0 {
            eprint!("{}", self.report_for(graph)?.to_text(self.config.debug > 1));
        }
        Ok(())
    }

    /// True when `graph` (this very graph: the same tensors) is planned and
    /// allocated, so its inputs can be written and it can be computed again
    /// without [`Scheduler::alloc_graph`] (llama.cpp's graph reuse).
    pub fn is_allocated_for(&self, graph: &Graph) -> bool {
        self.run.is_allocated_for(graph)
    }

    /// Computes `graph` (allocating it first when needed) and waits for it.
    pub fn compute(&mut self, graph: &Graph) -> Result<()> {
        self.compute_async(graph)?;
        self.synchronize()
    }

    /// Computes `graph` without waiting for the last backend's work.
    pub fn compute_async(&mut self, graph: &Graph) -> Result<()> {
        if !self.run.is_allocated_for(graph) {
            self.alloc_graph(graph)?;
        }
        self.run
            .compute(graph, &mut self.backends, &self.events, self.eval.as_mut())
    }

    /// Waits for every backend.
    pub fn synchronize(&mut self) -> Result<()> {
        run::synchronize_all(&mut self.backends)
    }

    /// Forgets user assignments and the current allocation (ggml_backend_sched_reset).
    pub fn reset(&mut self) {
        self.user.clear();
        self.run.invalidate();
    }

    /// Sets the eval callback (see [`EvalCallback`]).
    pub fn set_eval_callback(&mut self, cb: Option<EvalCallback>) {
        self.eval = cb;
    }

    /// Number of splits of the last planned graph.
    pub fn n_splits(&self) -> usize {
        self.run.assignment().map_or(0, |p| p.splits.len())
    }

    /// The splits of the last planned graph.
    pub fn splits(&self) -> &[Split] {
        self.run.assignment().map_or(&[], |p| &p.splits)
    }

    /// Pipeline copies.
    pub fn n_copies(&self) -> usize {
        self.config.n_copies
    }

    /// Compute-buffer bytes reserved for backend `backend`.
    pub fn buffer_size(&self, backend: BackendId) -> usize {
        self.run.buffer_size(backend.index())
    }

    /// The explain report of the last planned graph.
    pub fn report_for(&self, graph: &Graph) -> Result<Report> {
        let assignment = match self.run.assignment() {
            Some(p) if self.run.is_planned_for(graph) => p.clone(),
            _ => self.assign(graph)?,
        };
        Ok(Report::new(
            graph,
            &assignment,
            &self.backends,
            &self.bufts,
            |b| self.run.buffer_size(b),
        ))
    }
}
