//! The GPU backend: a graph is planned node by node into dispatches once,
//! kept while the same graph (the same tensors in the same memory) comes
//! again, recorded into one compute pass with the copies of its outputs
//! into read-back memory, and submitted once without waiting.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use strata::backend::{Backend, BufferType, Device, Event};
use strata::graph::{Graph, StorageKey};
use strata::{Error, Result, Tensor};

use crate::context::{GpuContext, Output, PARAMS_BYTES, STORAGE_SLOTS};
use crate::counters::{Count, Phase};
use crate::ops;
use crate::GpuDevice;

/// Graphs whose dispatch lists a backend keeps (a decode graph, the
/// prompt's, and with pipeline copies one per copy).
const KEEP_GRAPHS: usize = 8;

/// One dispatch ready to record: everything resolved.
struct Ready {
    pipeline: Arc<wgpu::ComputePipeline>,
    bind_group: wgpu::BindGroup,
    groups: [u32; 3],
    /// The op and shapes it computes, for `STRATA_GPU_PROFILE`'s table
    /// (empty otherwise: a cached list must not keep tensors alive).
    what: String,
}

/// A graph planned into dispatches, replayed while its storage key holds.
struct Planned {
    /// [`Graph::storage_key`] of the graph it was planned from.
    key: Vec<u64>,
    dispatches: Vec<Ready>,
    /// Where its parameter blocks start in the parameter buffer.
    region: u64,
    /// The parameter blocks as written there.
    params: Vec<u8>,
    /// Buffers it binds (it is dropped when one of them is freed).
    bases: Vec<u64>,
    /// OUTPUT nodes, copied into read-back memory by the graph's submission.
    outputs: Vec<Output>,
    /// Nodes of the graph (for messages).
    nodes: usize,
    /// Nodes computed inside another node's dispatch (fused).
    fused: usize,
    /// When it was last computed (a counter; the least recent is dropped).
    used: u64,
}

/// An execution stream on one GPU.
pub struct GpuBackend {
    dev: Arc<GpuDevice>,
    ctx: Arc<GpuContext>,
    /// Every dispatch's parameters, at dynamic offsets (one region per
    /// planned graph).
    params: Option<wgpu::Buffer>,
    /// Bytes of `params` handed out to planned graphs.
    params_used: u64,
    bind_groups: HashMap<[u64; STORAGE_SLOTS], wgpu::BindGroup>,
    planned: Vec<Planned>,
    /// The storage key of the graph computed last (not recomputed while
    /// the next graph has its stamp: a decode token would go through every
    /// node's sources).
    key: StorageKey,
    clock: u64,
    /// The buffer for intermediates between the dispatches of one node (the
    /// integer-dot matmul's quantized activations): base and bytes. One per
    /// backend, grown when a graph needs more; dispatches run in order, so
    /// each node's use of it is over before the next one's starts.
    scratch: Option<(u64, u64)>,
}

impl GpuBackend {
    pub(crate) fn new(dev: Arc<GpuDevice>) -> GpuBackend {
        GpuBackend {
            ctx: dev.ctx.clone(),
            dev,
            params: None,
            params_used: 0,
            bind_groups: HashMap::new(),
            planned: Vec::new(),
            key: StorageKey::default(),
            clock: 0,
            scratch: None,
        }
    }

    /// The opened device.
    pub fn context(&self) -> &Arc<GpuContext> {
        &self.ctx
    }

    fn stride(&self) -> u64 {
        PARAMS_BYTES.next_multiple_of(self.ctx.limits.min_uniform_buffer_offset_alignment as u64)
    }

    /// The base address of the buffer `t` lives in, checked to be this device's.
    fn base_of(&self, t: &Tensor, node: &Tensor) -> Result<u64> {
        let st = t.storage_or_err()?;
        let base = st.buffer.base();
        if self.ctx.buffer(base).is_none() {
            return Err(Error::BadTensor {
                op: node.op().name(),
                tensor: t.name(),
                problem: strata::error::TensorProblem::ForeignBuffer {
                    owner: format!("{} (it is in '{}')", self.ctx.name, st.buffer.name()),
                },
            });
        }
        Ok(base)
    }

    /// The bind group of `key` (source buffers, then the destination's),
    /// from the cache or made now. Sources in another buffer than the
    /// destination are bound read-only.
    fn bind_group(&mut self, key: [u64; STORAGE_SLOTS]) -> Result<wgpu::BindGroup> {
        if let Some(bg) = self.bind_groups.get(&key) {
            self.ctx.count(Count::BindGroupHits, 1);
            return Ok(bg.clone());
        }
        let params = self.params.clone().ok_or_else(|| Error::Backend {
            backend: self.ctx.name.clone(),
            msg: "a bind group asked for before the parameter buffer was made".into(),
        })?;
        let bufs: Vec<wgpu::Buffer> = key
            .iter()
            .map(|b| {
                self.ctx.buffer(*b).ok_or_else(|| Error::Backend {
                    backend: self.ctx.name.clone(),
                    msg: "a buffer was freed while a graph using it was being recorded".into(),
                })
            })
            .collect::<Result<_>>()?;
        let mut entries = vec![wgpu::BindGroupEntry {
            binding: 0,
            resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                buffer: &params,
                offset: 0,
                size: wgpu::BufferSize::new(PARAMS_BYTES),
            }),
        }];
        for (k, b) in bufs.iter().enumerate() {
            entries.push(wgpu::BindGroupEntry {
                binding: k as u32 + 1,
                resource: b.as_entire_binding(),
            });
        }
        self.ctx.count(Count::BindGroupsCreated, 1);
        let bg = self
            .ctx
            .device
            .create_bind_group(&wgpu::BindGroupDescriptor {
                label: None,
                layout: &self.ctx.layout(read_only_mask(&key)).0,
                entries: &entries,
            });
        self.bind_groups.insert(key, bg.clone());
        Ok(bg)
    }

    /// The base of a scratch buffer of at least `bytes` (at most the device's
    /// largest buffer: the planner checks): the current one, or a larger one
    /// made now (the graphs and bind groups that bound the old one are
    /// forgotten).
    fn scratch(&mut self, bytes: u64) -> Result<u64> {
        if let Some((base, size)) = self.scratch {
            if size >= bytes {
                return Ok(base);
            }
            self.release_scratch();
        }
        let max = self.ctx.max_buffer_size() as u64;
        // room to grow (prompts of other lengths) without a buffer each time
        let size = bytes.next_power_of_two().clamp(bytes, max.max(bytes));
        let (base, _) = self.ctx.create_buffer(size as usize, "strata scratch")?;
        self.scratch = Some((base, size));
        Ok(base)
    }

    /// Frees the scratch buffer and forgets what binds it.
    fn release_scratch(&mut self) {
        if let Some((base, _)) = self.scratch.take() {
            self.ctx.release_buffer(base);
            self.bind_groups.retain(|k, _| !k.contains(&base));
            self.planned.retain(|p| !p.bases.contains(&base));
        }
    }

    /// Forgets bind groups and planned graphs that bind buffers freed since
    /// the last call.
    fn forget_dropped(&mut self) {
        let dropped = self.ctx.take_dropped();
        if dropped.is_empty() {
            return;
        }
        self.bind_groups
            .retain(|k, _| !k.iter().any(|b| dropped.contains(b)));
        self.planned
            .retain(|p| !p.bases.iter().any(|b| dropped.contains(b)));
    }

    /// Room for `bytes` of parameter blocks: the region of the planned graph
    /// at `evict` when it is large enough, else fresh room in the parameter
    /// buffer (after forgetting every planned graph, and making a larger
    /// buffer, when it is full).
    fn params_region(&mut self, bytes: u64, evict: Option<usize>) -> Result<u64> {
        if let Some(i) = evict {
            if self.planned[i].params.len() as u64 >= bytes {
                return Ok(self.planned[i].region);
            }
        }
        let cap = self.params.as_ref().map_or(0, |p| p.size());
        if self.params_used + bytes <= cap {
            let at = self.params_used;
            self.params_used += bytes;
            return Ok(at);
        }
        // full: start over (the regions of the graphs kept are reused)
        self.planned.clear();
        self.params_used = 0;
        if bytes > cap / 2 {
            let size = (2 * bytes).next_power_of_two().max(64 * 1024);
            if size > u32::MAX as u64 {
                return Err(Error::OutOfMemory {
                    buffer_type: self.ctx.name.clone(),
                    requested: bytes as usize,
                    msg: "the graph's parameter blocks exceed what dynamic offsets address".into(),
                });
            }
            self.params = Some(self.ctx.new_buffer(&wgpu::BufferDescriptor {
                label: Some("strata params"),
                size,
                usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            }));
            // every bind group names the old parameter buffer
            self.bind_groups.clear();
        }
        self.params_used = bytes;
        Ok(0)
    }

    /// Plans `graph` into dispatches (shaders, parameter blocks, bind
    /// groups, outputs to read back) and keeps the list under the storage
    /// key in `self.key`; returns its index in `self.planned`.
    fn plan(&mut self, graph: &Graph) -> Result<usize> {
        let mut dispatches = Vec::new();
        let nodes = graph.nodes();
        let uses = ops::fuse::use_counts(graph);
        let mut done = vec![false; nodes.len()];
        let mut fused = 0;
        for i in 0..nodes.len() {
            if done[i] {
                continue;
            }
            // a run of nodes one dispatch computes, else the node alone
            let (planned, group) = match ops::fuse::plan(&self.ctx, graph, i, &uses)? {
                Some(f) => (f.dispatches, f.nodes),
                None => match ops::plan(&self.ctx, &nodes[i])? {
                    Some(d) => (d, vec![i]),
                    None => return Err(ops::unsupported(&self.ctx, &nodes[i])),
                },
            };
            // sources the scheduler substituted (its copies of split inputs)
            let mut subs: Vec<(&Tensor, &Tensor)> = Vec::new();
            for &j in &group {
                done[j] = true;
                let node = &nodes[j];
                subs.extend(
                    node.srcs()
                        .map(|s| (s, graph.effective(node, s)))
                        .filter(|(s, e)| !s.ptr_eq(e)),
                );
            }
            fused += group.len() - 1;
            for mut d in planned {
                substitute(&mut d, &subs)?;
                dispatches.push(d);
            }
        }
        let scratch = match dispatches
            .iter()
            .filter_map(|d| d.scratch)
            .map(|s| s.bytes)
            .max()
        {
            Some(bytes) => Some(self.scratch(bytes)?),
            None => None,
        };
        let mut keys = Vec::with_capacity(dispatches.len());
        for d in &dispatches {
            let Some(node) = d.slots[4].as_ref() else {
                return Err(Error::Backend {
                    backend: self.ctx.name.clone(),
                    msg: "a dispatch without a destination tensor".into(),
                });
            };
            let on_scratch = |k: usize| d.scratch.filter(|s| s.slot == k).and(scratch);
            let dst = match on_scratch(4) {
                Some(base) => base,
                None => self.base_of(node, node)?,
            };
            let mut key = [dst; STORAGE_SLOTS];
            for (k, t) in d.slots.iter().enumerate().take(4) {
                if let Some(base) = on_scratch(k) {
                    key[k] = base;
                } else if let Some(t) = t {
                    key[k] = self.base_of(t, node)?;
                }
            }
            keys.push(key);
        }
        let outputs = self.outputs(graph)?;
        // room for the parameters: the least recently used list's when the
        // cache is full
        let evict = (self.planned.len() >= KEEP_GRAPHS).then(|| {
            (0..self.planned.len())
                .min_by_key(|&i| self.planned[i].used)
                .unwrap_or(0)
        });
        let stride = self.stride();
        let bytes_len = stride * dispatches.len() as u64;
        let region = self.params_region(bytes_len, evict)?;
        // the region's old contents, when it is reused (only blocks that
        // changed are written)
        let old = match evict {
            Some(i) if self.planned.get(i).is_some_and(|p| p.region == region) => {
                Some(self.planned.swap_remove(i).params)
            }
            Some(i) if i < self.planned.len() => {
                self.planned.swap_remove(i);
                None
            }
            _ => None,
        };
        let mut bytes = vec![0u8; bytes_len as usize];
        let profiling = profiling();
        let mut ready = Vec::with_capacity(dispatches.len());
        for (i, (d, key)) in dispatches.iter().zip(&keys).enumerate() {
            let at = i * stride as usize;
            for (k, w) in d.params.w.iter().enumerate() {
                bytes[at + 4 * k..at + 4 * k + 4].copy_from_slice(&w.to_le_bytes());
            }
            let pipeline = self.ctx.pipeline(&d.pipeline, read_only_mask(key))?;
            let bind_group = self.bind_group(*key)?;
            let what = match (&d.slots[4], profiling) {
                (Some(node), true) if d.scratch.is_some_and(|s| s.slot == 4) => {
                    format!("{} (its activations to 8 bits)", describe(node))
                }
                (Some(node), true) => describe(node),
                _ => String::new(),
            };
            ready.push(Ready {
                pipeline,
                bind_group,
                groups: d.groups,
                what,
            });
        }
        self.write_params(region, &bytes, old.as_deref())?;
        let mut bases: Vec<u64> = keys.iter().flatten().copied().collect();
        bases.extend(outputs.iter().map(|o| o.base));
        bases.sort_unstable();
        bases.dedup();
        self.ctx.count(Count::GraphsPlanned, 1);
        self.planned.push(Planned {
            key: self.key.of(graph).to_vec(),
            dispatches: ready,
            region,
            params: bytes,
            bases,
            outputs,
            nodes: graph.nodes().len(),
            fused,
            used: 0,
        });
        Ok(self.planned.len() - 1)
    }

    /// Writes parameter blocks `bytes` at `region`: only the blocks that
    /// differ from `old` (what the region held) when it is given.
    fn write_params(&self, region: u64, bytes: &[u8], old: Option<&[u8]>) -> Result<()> {
        let Some(params) = &self.params else {
            return Ok(());
        };
        let stride = self.stride() as usize;
        let Some(old) = old else {
            if !bytes.is_empty() {
                self.ctx.queue.write_buffer(params, region, bytes);
                self.ctx.count(Count::ParamsBytes, bytes.len() as u64);
            }
            return Ok(());
        };
        // runs of changed blocks
        let n = bytes.len() / stride;
        let changed = |i: usize| {
            old.get(i * stride..(i + 1) * stride) != Some(&bytes[i * stride..(i + 1) * stride])
        };
        let mut i = 0;
        while i < n {
            if !changed(i) {
                i += 1;
                continue;
            }
            let start = i;
            while i < n && changed(i) {
                i += 1;
            }
            let run = &bytes[start * stride..i * stride];
            self.ctx
                .queue
                .write_buffer(params, region + (start * stride) as u64, run);
            self.ctx.count(Count::ParamsBytes, run.len() as u64);
        }
        Ok(())
    }

    /// The OUTPUT nodes of `graph` in this device's memory, as 4-byte
    /// aligned ranges of their buffers (what the caller reads next).
    fn outputs(&self, graph: &Graph) -> Result<Vec<Output>> {
        let mut out = Vec::new();
        for node in graph.nodes() {
            if !node.is_output() {
                continue;
            }
            let Some(st) = node.storage() else { continue };
            let base = st.buffer.base();
            let Some(buffer) = self.ctx.buffer(base) else {
                continue;
            };
            let start = st.offset as u64 & !3;
            let end = (st.offset as u64 + node.nbytes() as u64)
                .next_multiple_of(4)
                .min(buffer.size());
            if end > start {
                out.push(Output {
                    base,
                    buffer,
                    start,
                    len: end - start,
                });
            }
        }
        Ok(out)
    }

    /// Runs every dispatch of `p` alone (submit and wait) and prints the
    /// time per op and shape, slowest first (`STRATA_GPU_PROFILE=1`).
    fn profile(&self, p: &Planned) -> Result<()> {
        type Row = (u32, std::time::Duration);
        let stride = self.stride();
        let mut per: HashMap<&str, Row> = HashMap::new();
        for (i, d) in p.dispatches.iter().enumerate() {
            let mut enc = self.ctx.device.create_command_encoder(&Default::default());
            {
                let mut pass = enc.begin_compute_pass(&Default::default());
                pass.set_pipeline(&d.pipeline);
                pass.set_bind_group(0, &d.bind_group, &[(p.region + i as u64 * stride) as u32]);
                let [x, y, z] = d.groups;
                pass.dispatch_workgroups(x, y, z);
            }
            let t = Instant::now();
            self.ctx.submit([enc.finish()]);
            self.ctx.wait()?;
            let e = per.entry(&d.what).or_default();
            e.0 += 1;
            e.1 += t.elapsed();
        }
        let mut rows: Vec<(&str, Row)> = per.into_iter().collect();
        rows.sort_by_key(|r| std::cmp::Reverse(r.1 .1));
        for (what, (n, t)) in rows {
            eprintln!("{t:>12.3?} {n:>5}x {what}");
        }
        Ok(())
    }
}

impl Drop for GpuBackend {
    fn drop(&mut self) {
        self.release_scratch();
    }
}

impl Backend for GpuBackend {
    fn name(&self) -> String {
        self.ctx.name.clone()
    }

    fn device(&self) -> Arc<dyn Device> {
        self.dev.clone()
    }

    fn default_buffer_type(&self) -> Arc<dyn BufferType> {
        self.dev.buft.clone()
    }

    fn synchronize(&mut self) -> Result<()> {
        self.ctx.wait()?;
        self.ctx.take_error(format_args!("a copy"))
    }

    fn cpy_tensor_async(&mut self, src: &Tensor, dst: &Tensor) -> Result<bool> {
        match (src.storage(), dst.storage()) {
            (Some(_), Some(d)) if self.ctx.buffer(d.buffer.base()).is_some() => {
                d.buffer.copy_from(src, dst)
            }
            _ => Ok(false),
        }
    }

    /// Queues `graph` and returns without waiting for it
    /// ([`Backend::synchronize`] waits; reading a tensor waits for what it
    /// reads). A graph of the same tensors in the same memory as one
    /// computed before ([`Graph::storage_key`]) replays that one's dispatch
    /// list: no planning, no new bind group, no parameter written. The
    /// OUTPUT nodes are copied into read-back memory by the same
    /// submission, so reading them afterwards costs no submission of its
    /// own.
    fn graph_compute(&mut self, graph: &Graph) -> Result<()> {
        self.ctx.check_alive()?;
        let t0 = Instant::now();
        self.forget_dropped();
        let key = self.key.of(graph);
        let i = match self.planned.iter().position(|p| p.key == key) {
            Some(i) => {
                self.ctx.count(Count::GraphsReplayed, 1);
                let n = self.planned[i].dispatches.len() as u64;
                self.ctx.count(Count::BindGroupHits, n);
                i
            }
            None => self.plan(graph)?,
        };
        self.clock += 1;
        self.planned[i].used = self.clock;
        let p = &self.planned[i];
        if p.dispatches.is_empty() && p.outputs.is_empty() {
            return Ok(());
        }
        self.ctx.count(Count::Graphs, 1);
        self.ctx.count(Count::Dispatches, p.dispatches.len() as u64);
        self.ctx.count(Count::NodesFused, p.fused as u64);
        let t1 = Instant::now();
        self.ctx.time(Phase::Plan, t1 - t0);
        let stride = self.stride();
        let mut enc = self
            .ctx
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                label: Some("strata graph"),
            });
        let timed = !p.dispatches.is_empty() && self.ctx.timestamps.as_ref().is_some();
        if !p.dispatches.is_empty() {
            let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
                label: Some("strata graph"),
                timestamp_writes: self.ctx.timestamps.as_ref().filter(|_| timed).map(|t| {
                    wgpu::ComputePassTimestampWrites {
                        query_set: &t.set,
                        beginning_of_pass_write_index: Some(0),
                        end_of_pass_write_index: Some(1),
                    }
                }),
            });
            let mut last: Option<&Arc<wgpu::ComputePipeline>> = None;
            for (k, d) in p.dispatches.iter().enumerate() {
                if last.is_none_or(|l| !Arc::ptr_eq(l, &d.pipeline)) {
                    pass.set_pipeline(&d.pipeline);
                    last = Some(&d.pipeline);
                }
                pass.set_bind_group(0, &d.bind_group, &[(p.region + k as u64 * stride) as u32]);
                let [x, y, z] = d.groups;
                pass.dispatch_workgroups(x, y, z);
            }
        }
        self.ctx.time(Phase::Record, t1.elapsed());
        if profiling() {
            self.profile(p)?;
        }
        let t2 = Instant::now();
        self.ctx.submit_graph(enc, &p.outputs, timed)?;
        if profiling() {
            self.ctx.wait()?;
            eprintln!(
                "{}: {} nodes, {} dispatches: recorded in {:?}, ran in {:?}",
                self.ctx.name,
                p.nodes,
                p.dispatches.len(),
                t2 - t0,
                t2.elapsed()
            );
        }
        let (nodes, n) = (p.nodes, p.dispatches.len());
        self.ctx
            .take_error(format_args!("a graph of {nodes} nodes ({n} dispatches)"))
    }

    fn supports_op(&self, op: &Tensor) -> bool {
        ops::supported(&self.ctx, op)
    }

    fn event_record(&mut self, event: &Arc<dyn Event>) -> Result<()> {
        let Some(slot) = self.ctx.event_slot(event.key()) else {
            return Err(Error::Unsupported {
                backend: self.name(),
                what: "an event of another device".into(),
            });
        };
        let idx = self.ctx.submit_keep([]);
        *slot.lock().unwrap_or_else(|p| p.into_inner()) = Some(idx);
        Ok(())
    }
}

/// Bit k set: source slot k is bound read-only (its buffer is not the
/// destination's, which is bound read-write; a buffer may not be both in
/// one dispatch).
pub(crate) fn read_only_mask(key: &[u64; STORAGE_SLOTS]) -> u8 {
    let dst = key[STORAGE_SLOTS - 1];
    (0..STORAGE_SLOTS - 1)
        .filter(|&k| key[k] != dst)
        .fold(0, |m, k| m | 1 << k)
}

/// A node's op, source type and shapes (the profile's rows).
fn describe(node: &Tensor) -> String {
    format!(
        "{} {} {:?} -> {:?}",
        node.op().name(),
        node.src(0).map_or("-".into(), |s| s.dtype().to_string()),
        node.src(0).map_or([0; 4], |s| s.ne()),
        node.ne()
    )
}

/// Whether `STRATA_GPU_PROFILE=1` asks for per-op times (read once: a
/// decode token asks several times).
fn profiling() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("STRATA_GPU_PROFILE").is_ok_and(|v| v == "1"))
}
/// Binds `subs`' replacements (same type and layout, other memory) where a
/// dispatch binds the source they replace, moving the slot's byte offset
/// by the difference of the two tensors' offsets.
fn substitute(d: &mut ops::Dispatch, subs: &[(&Tensor, &Tensor)]) -> Result<()> {
    if subs.is_empty() {
        return Ok(());
    }
    for k in 0..4 {
        let Some(t) = &d.slots[k] else { continue };
        let Some((_, e)) = subs.iter().find(|(s, _)| s.ptr_eq(t)) else {
            continue;
        };
        let from = t.storage_or_err()?.offset as i64;
        let to = e.storage_or_err()?.offset as i64;
        let w = &mut d.params.w[40 + k];
        *w = (*w as i64 + to - from) as u32;
        d.slots[k] = Some((*e).clone());
    }
    Ok(())
}

/// A point in a GPU's queue (a submission index).
pub struct GpuEvent {
    pub(crate) ctx: Arc<GpuContext>,
    pub(crate) index: crate::context::EventSlot,
}

impl Event for GpuEvent {
    fn synchronize(&self) -> Result<()> {
        let idx = self.index.lock().unwrap_or_else(|p| p.into_inner()).clone();
        if let Some(idx) = idx {
            self.ctx.poll(wgpu::PollType::Wait {
                submission_index: Some(idx),
                timeout: None,
            })?;
        }
        self.ctx.check_alive()
    }

    fn key(&self) -> usize {
        Arc::as_ptr(&self.index) as usize
    }
}
