//! The CPU backend: host buffers, a persistent thread pool and kernels.
//!
//! ```
//! use strata::backend::{alloc_tensors, Backend};
//! use strata::cpu::{cpu_buffer_type, CpuBackend};
//! use strata::{ops, DType, Graph, Tensor};
//!
//! let a = Tensor::new(DType::F32, &[3]).unwrap();
//! let b = Tensor::new(DType::F32, &[3]).unwrap();
//! let c = ops::add(&a, &b).unwrap();
//! let graph = Graph::build(&[c.clone()]);
//! let all: Vec<Tensor> = graph.leafs().iter().chain(graph.nodes()).cloned().collect();
//! let _buffers = alloc_tensors(&all, &cpu_buffer_type()).unwrap();
//! a.write_f32(&[1.0, 2.0, 3.0]).unwrap();
//! b.write_f32(&[10.0, 20.0, 30.0]).unwrap();
//! let mut cpu = CpuBackend::new(2);
//! cpu.graph_compute(&graph).unwrap();
//! assert_eq!(c.to_f32_vec().unwrap(), vec![11.0, 22.0, 33.0]);
//! ```

mod buffer;
mod device;
pub(crate) mod ops;
mod packed_buffer;
mod plan;
#[cfg(test)]
mod plan_cache_tests;
mod pool;
mod steps;
#[cfg(test)]
mod steps_tests;
// Public for the kernel tests and the `swiglu_cycles` probe, not part of
// the API: the CPU backend's element-wise kernels call it.
#[doc(hidden)]
pub mod vector;
mod view;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub use buffer::{cpu_buffer_type, HostBuffer, HostBufferType, HOST_ALIGNMENT, LAZY_COMMIT_MIN};
pub use device::{cpu_device, cpu_model, default_threads, CpuDevice, CpuProvider};
pub use packed_buffer::{packed_buffer_type, PackedBuffer, PackedBufferType};
use plan::{step_label, PlanCache, Profile};
pub use plan::{KernelClock, ProfileEntry};
pub use pool::{
    available_cores, default_poll, set_default_poll, Poll, PoolConfig, ThreadPool, WorkerCtx,
    MAX_THREADS,
};
pub use view::TView;

use crate::backend::{Backend, Device, GraphPlan};
use crate::graph::{Graph, StorageKey};
use crate::isa::cache::{self, CacheSizes};
use crate::isa::{self, Isa};
use crate::tensor::MAX_SRC;
use crate::{Error, Result};
use ops::{Ctx, NodePlan, WorkSize};

pub use crate::backend::AbortCallback;

/// The CPU backend: computes graphs on a persistent thread pool.
pub struct CpuBackend {
    pool: ThreadPool,
    work: Vec<u64>,
    abort: Option<AbortCallback>,
    /// Largest work buffer a graph may need (`None`: what the allocator gives).
    max_work: Option<usize>,
    isa: Isa,
    clock: KernelClock,
    /// The last graph's resolved plans, reused while the same tensors are
    /// computed and no tensor storage has moved (llama.cpp-style reuse of a
    /// decode graph costs no re-resolution).
    cache: Option<PlanCache>,
    /// Scratch for the key of the graph being computed (no allocation per compute).
    key: StorageKey,
    /// How many times a graph's plans were resolved (cache misses).
    plan_resolutions: u64,
    /// Time per kind of step, when profiling ([`CpuBackend::set_profiling`]).
    profile: Option<Profile>,
    /// Print the profile to stderr when dropped (`STRATA_PROFILE` set).
    print_profile: bool,
    /// Batch-invariant attention ([`CpuBackend::set_batch_invariant`]).
    batch_invariant: bool,
    /// The cache sizes the matmuls block for ([`CpuBackend::set_cache_sizes`]).
    caches: CacheSizes,
}

impl CpuBackend {
    /// A CPU backend configured by an init string's parameters (`CPU:PARAMS`,
    /// see [`crate::backend::Registry::backend_from_spec`]): `threads=N`,
    /// `isa=LEVEL` (scalar, avx2, avxvnni, avx512, vnni, amx, neon) and
    /// `poll=0..100` ([`Poll`]), comma-separated, e.g. `threads=2,isa=avx2`;
    /// empty gives [`CpuBackend::new`] with the default thread count.
    pub fn from_params(params: &str) -> Result<CpuBackend> {
        let mut be = CpuBackend::new(default_threads());
        for kv in params.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let bad = |why: &str| Error::BadValue {
                arg: "CPU init parameter".into(),
                value: format!("'{kv}'"),
                expected: format!("threads=N, isa=LEVEL or poll=0..100 ({why})"),
            };
            match kv.split_once('=') {
                Some(("threads", n)) => {
                    let n: usize = n.trim().parse().map_err(|_| bad("not a count"))?;
                    if n == 0 || n > MAX_THREADS {
                        return Err(bad(&format!("give 1 to {MAX_THREADS} threads")));
                    }
                    be.set_n_threads(n);
                }
                Some(("isa", level)) => {
                    let isa: Isa = level.parse().map_err(|_| bad("unknown level"))?;
                    be.set_isa(isa)?;
                }
                Some(("poll", level)) => {
                    let poll: Poll = level.parse().map_err(|_| bad("a level from 0 to 100"))?;
                    be.set_poll(poll);
                }
                _ => return Err(bad("unknown parameter")),
            }
        }
        Ok(be)
    }

    /// A CPU backend computing for `n_threads` threads (1 to
    /// [`MAX_THREADS`], clamped), at the [`default_poll`] level. It runs
    /// them on at most [`available_cores`] OS threads: past that, the work
    /// is still divided into `n_threads` shares, which the threads take in
    /// turn, so results are those of `n_threads` threads (only split-KV
    /// attention's depend on the count) and the speed that of the cores
    /// (threads beyond the cores would only wait for each other at every
    /// op). [`CpuBackend::set_pool_threads`] chooses another number.
    pub fn new(n_threads: usize) -> CpuBackend {
        CpuBackend {
            pool: ThreadPool::with_config(PoolConfig::on_available_cores(n_threads)),
            work: Vec::new(),
            abort: None,
            max_work: None,
            isa: isa::active(),
            clock: KernelClock::default(),
            cache: None,
            key: StorageKey::default(),
            plan_resolutions: 0,
            profile: None,
            print_profile: false,
            batch_invariant: false,
            caches: cache::detected(),
        }
        .with_env_profiling()
    }

    /// `STRATA_PROFILE` set: profile, and print the table when dropped.
    fn with_env_profiling(mut self) -> CpuBackend {
        if std::env::var_os("STRATA_PROFILE").is_some_and(|v| !v.is_empty() && v != "0") {
            self.set_profiling(true);
            self.print_profile = true;
        }
        self
    }

    /// Starts (clearing what was gathered) or stops timing every step by
    /// kind ([`CpuBackend::profile`]). Also on when `STRATA_PROFILE` is set
    /// in the environment, which prints the table to stderr when the backend
    /// is dropped (e.g. at the end of `strata bench`).
    pub fn set_profiling(&mut self, on: bool) {
        self.profile = on.then(Profile::default);
    }

    /// Time per kind of step since profiling started, most first: where a
    /// graph's time goes, op by op (ggml's `GGML_PERF` in spirit).
    pub fn profile(&self) -> Vec<ProfileEntry> {
        let Some(p) = &self.profile else {
            return Vec::new();
        };
        let mut v: Vec<ProfileEntry> = p
            .entries
            .iter()
            .map(|(what, &(ns, count))| ProfileEntry {
                what: what.clone(),
                time: Duration::from_nanos(ns),
                count,
            })
            .collect();
        v.sort_by(|a, b| b.time.cmp(&a.time).then_with(|| a.what.cmp(&b.what)));
        v
    }

    /// A handle to this backend's accumulated kernel time (see [`KernelClock`]).
    pub fn kernel_clock(&self) -> KernelClock {
        self.clock.clone()
    }

    /// The instruction-set level of the SIMD kernels (matmul's dot products
    /// and activation quantization); [`isa::active`] unless changed.
    pub fn isa(&self) -> Isa {
        self.isa
    }

    /// With `on`, FLASH_ATTN_EXT computes every query row by the two-pass
    /// algorithm (the row's unmasked keys in cell order: their scores and
    /// maximum, then the weights and the f32 sums in key order), for every
    /// batch shape: a row's result then depends only on its own query and
    /// the keys it sees, not on the other rows of the batch, the cells'
    /// offsets, the number of cells attended to or the thread count. Off
    /// (the default), the path follows the shapes as ggml's does: the
    /// tiled path for 64 rows or more, split-KV for one row over 512 keys
    /// or more, whose bits depend on the batch (see `cpu::ops::attn`).
    pub fn set_batch_invariant(&mut self, on: bool) {
        self.batch_invariant = on;
    }

    /// Whether attention is batch-invariant ([`CpuBackend::set_batch_invariant`]).
    pub fn batch_invariant(&self) -> bool {
        self.batch_invariant
    }

    /// Blocks the matmuls (the float GEMM's column passes, the packed
    /// quantized matmul's column blocks) for caches of these sizes instead
    /// of the host's ([`cache::detected`], `STRATA_CACHE` included). The
    /// blocking only groups work ([`cache::Blocking`]): results are
    /// bit-identical for any sizes.
    pub fn set_cache_sizes(&mut self, caches: CacheSizes) {
        self.caches = caches;
    }

    /// The cache sizes the matmuls block for ([`CpuBackend::set_cache_sizes`]).
    pub fn cache_sizes(&self) -> CacheSizes {
        self.caches
    }

    /// Runs the SIMD kernels at level `isa` (e.g. [`Isa::Scalar`] to compare
    /// with the reference in one process).
    ///
    /// Errors: [`Error::BadValue`] if this CPU cannot run `isa`
    /// (see [`isa::detected`]); the level is left unchanged.
    pub fn set_isa(&mut self, isa: Isa) -> Result<()> {
        if !isa.is_supported() {
            return Err(Error::BadValue {
                arg: "CpuBackend::set_isa: instruction-set level".into(),
                value: isa.name().into(),
                expected: format!("a level this CPU supports, up to {}", isa::detected()),
            });
        }
        self.isa = isa;
        Ok(())
    }

    /// Number of threads the results are computed for (`-t`; see
    /// [`CpuBackend::new`]).
    pub fn n_threads(&self) -> usize {
        self.pool.shares()
    }

    /// Number of OS threads in the pool (the caller's included): at most
    /// [`CpuBackend::n_threads`]. A graph may run on fewer of them (see
    /// [`CpuBackend::set_adaptive`]).
    pub fn pool_threads(&self) -> usize {
        self.pool.n_threads()
    }

    /// Changes the number of threads as [`CpuBackend::new`] takes it
    /// (restarts the pool, of at most [`available_cores`] OS threads).
    pub fn set_n_threads(&mut self, n_threads: usize) {
        let n = n_threads.clamp(1, MAX_THREADS);
        let threads = n.min(available_cores());
        let c = self.pool.config();
        if (n, threads) != (c.shares, c.threads) {
            self.pool = ThreadPool::with_config(PoolConfig {
                threads,
                shares: n,
                ..c
            });
        }
    }

    /// Runs the [`CpuBackend::n_threads`] shares on a pool of `threads` OS
    /// threads (clamped to 1..=n_threads; restarts the pool), e.g. more than
    /// the available cores to measure oversubscription. Results do not change.
    pub fn set_pool_threads(&mut self, threads: usize) {
        let c = self.pool.config();
        let threads = threads.clamp(1, c.shares);
        if threads != c.threads {
            self.pool = ThreadPool::with_config(PoolConfig { threads, ..c });
        }
    }

    /// Whether a graph may run on fewer of the pool's threads while that is
    /// faster (on by default; restarts the pool when it changes): when
    /// another process keeps descheduling the pool's threads, so that they
    /// keep waiting for each other at every op (see [`PoolConfig::adaptive`]).
    /// Results do not change.
    pub fn set_adaptive(&mut self, on: bool) {
        let c = self.pool.config();
        if on != c.adaptive {
            self.pool = ThreadPool::with_config(PoolConfig { adaptive: on, ..c });
        }
    }

    /// How long the threads spin before they sleep when they wait.
    pub fn poll(&self) -> Poll {
        self.pool.poll()
    }

    /// Changes how long the threads spin before they sleep when they wait
    /// (llama.cpp's `--poll`; [`default_poll`] unless changed).
    pub fn set_poll(&mut self, poll: Poll) {
        self.pool.set_poll(poll);
    }

    /// Sets (or clears) the abort callback, asked after every node.
    pub fn set_abort_callback(&mut self, cb: Option<AbortCallback>) {
        self.abort = cb;
    }

    /// Bounds the work memory a graph may need (conversions of matmul
    /// operands, per-thread scratch); a graph needing more is refused with
    /// [`Error::OutOfMemory`]. `None` (the default): only the allocator's limit.
    pub fn set_work_limit(&mut self, bytes: Option<usize>) {
        self.max_work = bytes;
    }

    /// How many computes had to resolve their graph's memory afresh (the
    /// plan cache missed: another graph, or its storage moved).
    #[cfg(test)]
    pub(crate) fn plan_resolutions(&self) -> u64 {
        self.plan_resolutions
    }

    /// The sizes of the last planned graph's steps, in order (1: a node
    /// alone; more: matmuls sharing their input).
    #[cfg(test)]
    pub(crate) fn step_sizes(&self) -> Vec<usize> {
        self.cache
            .as_ref()
            .map(|c| c.steps.iter().map(|s| s.len()).collect())
            .unwrap_or_default()
    }

    /// Bytes of work memory the last graph needed.
    pub fn work_size(&self) -> usize {
        self.work.len() * 8
    }

    /// The plans of `graph`: the cached ones when the graph reads and writes
    /// the same tensors as last time and no storage has moved, else resolved
    /// afresh. Data-dependent checks (row indices) run every time.
    fn plan(&mut self, graph: &Graph) -> Result<&PlanCache> {
        let key = self.key.of(graph);
        // Work memory is sized per share: split-KV attention keeps one
        // partial per share (`WorkerCtx::shares`).
        let nth = self.pool.shares();
        let hit = self
            .cache
            .as_ref()
            .is_some_and(|c| c.nth == nth && c.key == key);
        if !hit {
            let key = key.to_vec();
            self.cache = None;
            self.plan_resolutions += 1;
            self.cache = Some(PlanCache::new(graph, key, nth)?);
        }
        let c = self.cache.as_ref().expect("filled above");
        c.validate(graph)?;
        Ok(c)
    }

    /// Runs resolved plans (sized for `cache.nth` threads when that is the
    /// pool's count, re-sized otherwise).
    fn run(&mut self, cache: &PlanCache) -> Result<()> {
        let nth = self.pool.shares();
        let resized: Vec<WorkSize>;
        let works = if cache.nth == nth {
            &cache.works
        } else {
            resized = steps::works(&cache.plans, &cache.steps, nth);
            &resized
        };
        let plans = &cache.plans;
        let need = works.iter().map(|w| w.total(nth)).max().unwrap_or(0);
        if self.work.len() * 8 < need {
            let oom = |msg: String| Error::OutOfMemory {
                buffer_type: "CPU work buffer".into(),
                requested: need,
                msg,
            };
            if let Some(max) = self.max_work.filter(|&m| need > m) {
                return Err(oom(format!(
                    "the graph needs {need} bytes of work memory, above this backend's limit of {max}"
                )));
            }
            self.work = zeroed_words(need.div_ceil(8))
                .ok_or_else(|| oom("the allocator refused it".into()))?;
        }
        let wdata = self.work.as_mut_ptr().cast::<u8>();
        let wdata_addr = wdata as usize;
        let aborted = AtomicBool::new(false);
        let abort = self.abort.as_ref();
        let isa = self.isa;
        let invariant = self.batch_invariant;
        let blocking = cache::Blocking::for_caches(self.caches);
        let t0 = Instant::now();
        let times: Vec<AtomicU64> = if self.profile.is_some() {
            cache.steps.iter().map(|_| AtomicU64::new(0)).collect()
        } else {
            Vec::new()
        };
        let job = |w: &WorkerCtx<'_>| {
            let mut last = Instant::now();
            for (si, step) in cache.steps.iter().enumerate() {
                let mut ctx = Ctx::new(w, wdata_addr as *mut u8, works[step.start], isa);
                ctx.batch_invariant = invariant;
                ctx.blocking = blocking;
                let members = &plans[step.clone()];
                if let [(_, plan)] = members {
                    ops::forward(plan, &ctx);
                } else {
                    let mut refs = [&members[0].1; steps::MAX_STEP];
                    for (r, (_, p)) in refs.iter_mut().zip(members) {
                        *r = p;
                    }
                    ops::forward_matmuls(&refs[..members.len()], &ctx);
                }
                if w.ith == 0 {
                    if let Some(cb) = abort {
                        if cb() {
                            aborted.store(true, Ordering::Release);
                        }
                    }
                }
                w.barrier();
                if w.ith == 0 {
                    if let Some(t) = times.get(si) {
                        let now = Instant::now();
                        let ns = u64::try_from((now - last).as_nanos()).unwrap_or(u64::MAX);
                        t.store(ns, Ordering::Relaxed);
                        last = now;
                    }
                }
                if aborted.load(Ordering::Acquire) {
                    break;
                }
            }
        };
        let ok = if cache.light {
            self.pool.run_alone(&job)
        } else {
            self.pool.run(&job)
        };
        self.clock.add(t0.elapsed());
        if let Some(p) = &mut self.profile {
            for (step, t) in cache.steps.iter().zip(&times) {
                let e = p
                    .entries
                    .entry(step_label(&plans[step.clone()]))
                    .or_default();
                e.0 = e.0.saturating_add(t.load(Ordering::Relaxed));
                e.1 += 1;
            }
        }
        if !ok {
            return Err(Error::Backend {
                backend: "CPU".into(),
                msg: "a kernel panicked (internal error)".into(),
            });
        }
        if aborted.load(Ordering::Acquire) {
            return Err(Error::Aborted);
        }
        Ok(())
    }

    /// Resolves every non-view node of `graph` to host memory.
    #[allow(clippy::type_complexity)]
    fn resolve(graph: &Graph) -> Result<(Vec<(usize, NodePlan)>, crate::graph::IdSet<u64>)> {
        let mut plans = Vec::with_capacity(graph.nodes().len());
        // Memory the graph writes (data-dependent checks skip it: not computed yet).
        let written: crate::graph::IdSet<u64> = graph
            .nodes()
            .iter()
            .filter(|t| !t.op().is_view_op())
            .map(|t| t.storage_owner().id().get())
            .collect();
        for (ni, t) in graph.nodes().iter().enumerate() {
            if t.op().is_view_op() {
                continue;
            }
            if let Some(why) = ops::packed_source_refusal(t) {
                return Err(Error::Unsupported {
                    backend: "CPU".into(),
                    what: why,
                });
            }
            if !ops::supports(t) {
                return Err(Error::Unsupported {
                    backend: "CPU".into(),
                    what: format!(
                        "op {} on {} (tensor '{}')",
                        t.op().name(),
                        t.dtype(),
                        t.name()
                    ),
                });
            }
            let dst = TView::resolve(t, "CPU", true)?;
            let mut src: [Option<TView>; MAX_SRC] = Default::default();
            for (i, slot) in src.iter_mut().enumerate().take(t.src_slots().len()) {
                if let Some(s) = graph.src(t, i) {
                    *slot = Some(TView::resolve(s, "CPU", false)?);
                }
            }
            let plan = NodePlan {
                op: t.op().clone(),
                dst,
                src,
            };
            plans.push((ni, plan));
        }
        Ok((plans, written))
    }
}

/// `n` zeroed words, or `None` when the allocator refuses: like
/// `vec![0u64; n]` (calloc: large buffers are committed as they are used)
/// without aborting the process on failure.
fn zeroed_words(n: usize) -> Option<Vec<u64>> {
    if n == 0 {
        return Some(Vec::new());
    }
    let layout = std::alloc::Layout::array::<u64>(n).ok()?;
    // SAFETY: the layout has a non-zero size.
    let p = unsafe { std::alloc::alloc_zeroed(layout) }.cast::<u64>();
    if p.is_null() {
        return None;
    }
    // SAFETY: `p` comes from the global allocator with the layout of `n`
    // u64s (so capacity `n` matches it), and all `n` are initialized (zeroed).
    Some(unsafe { Vec::from_raw_parts(p, n, n) })
}

impl Drop for CpuBackend {
    fn drop(&mut self) {
        if !self.print_profile {
            return;
        }
        let entries = self.profile();
        let total: Duration = entries.iter().map(|e| e.time).sum();
        if entries.is_empty() || total.is_zero() {
            return;
        }
        eprintln!(
            "CPU profile (STRATA_PROFILE): {:.3} ms in steps",
            total.as_secs_f64() * 1e3
        );
        for e in &entries {
            eprintln!(
                "{:>10.3} ms {:>5.1} % {:>8} x  {}",
                e.time.as_secs_f64() * 1e3,
                100.0 * e.time.as_secs_f64() / total.as_secs_f64(),
                e.count,
                e.what
            );
        }
    }
}

impl Backend for CpuBackend {
    fn name(&self) -> String {
        "CPU".into()
    }
    fn set_abort_callback(&mut self, cb: Option<AbortCallback>) -> bool {
        CpuBackend::set_abort_callback(self, cb);
        true
    }
    fn set_work_limit(&mut self, bytes: Option<usize>) -> bool {
        CpuBackend::set_work_limit(self, bytes);
        true
    }
    fn device(&self) -> Arc<dyn Device> {
        cpu_device()
    }
    fn graph_compute(&mut self, graph: &Graph) -> Result<()> {
        self.plan(graph)?;
        let cache = self.cache.take().expect("planned above");
        let r = self.run(&cache);
        self.cache = Some(cache);
        r
    }
    /// Resolves every node once: computing the plan skips the cache lookup
    /// and resolution [`Backend::graph_compute`] does.
    fn graph_plan_create(&mut self, graph: &Graph) -> Result<GraphPlan> {
        let mut key = Vec::new();
        graph.storage_key(&mut key);
        let cache = PlanCache::new(graph, key, self.pool.shares())?;
        Ok(GraphPlan::new(
            graph.clone(),
            self.name(),
            Some(Box::new(cache)),
        ))
    }
    /// Refuses, typed, a plan whose tensors were placed elsewhere (or
    /// changed) since it was made: create it again.
    fn graph_plan_compute(&mut self, plan: &GraphPlan) -> Result<()> {
        plan.check_backend(&self.name())?;
        let Some(cache) = plan.state::<PlanCache>() else {
            return self.graph_compute(plan.graph());
        };
        if self.key.of(plan.graph()) != cache.key {
            return Err(Error::InvalidArgument(
                "CPU graph plan is stale: a tensor of its graph was placed elsewhere since the \
                 plan was made; create the plan again (graph_plan_create)"
                    .into(),
            ));
        }
        cache.validate(plan.graph())?;
        self.run(cache)
    }
}

/// Allocates every unallocated tensor of `graph` in fresh CPU buffers and
/// computes it with `n_threads` threads: the shortest way to run a graph.
/// Returns the buffers (keep them alive while reading results).
///
/// ```
/// use strata::{cpu, ops, DType, Graph, Tensor};
/// let a = Tensor::new(DType::F32, &[2]).unwrap();
/// let b = ops::scale(&a, 3.0).unwrap();
/// let g = Graph::build(&[b.clone()]);
/// let _bufs = cpu::alloc_graph_host(&g).unwrap();
/// a.write_f32(&[1.0, -2.0]).unwrap();
/// cpu::compute(&g, 2).unwrap();
/// assert_eq!(b.to_f32_vec().unwrap(), vec![3.0, -6.0]);
/// ```
pub fn alloc_graph_host(graph: &Graph) -> Result<Vec<Arc<dyn crate::backend::Buffer>>> {
    // Sources outside the graph (graph views) are the caller's business.
    crate::backend::alloc_graph(graph, &cpu_buffer_type()).map(Vec::from)
}

/// Computes `graph` on a new CPU backend with `n_threads` threads.
pub fn compute(graph: &Graph, n_threads: usize) -> Result<()> {
    CpuBackend::new(n_threads).graph_compute(graph)
}
