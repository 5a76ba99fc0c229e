//! The GPU backend: a graph is planned node by node into dispatches,
//! recorded into one compute pass and submitted once.

use std::collections::HashMap;
use std::sync::Arc;

use strata::backend::{Backend, BufferType, Device, Event};
use strata::graph::Graph;
use strata::{Error, Result, Tensor};

use crate::context::{GpuContext, PARAMS_BYTES, STORAGE_SLOTS};
use crate::ops;
use crate::GpuDevice;

/// An execution stream on one GPU.
pub struct GpuBackend {
    dev: Arc<GpuDevice>,
    ctx: Arc<GpuContext>,
    params: Option<wgpu::Buffer>,
    bind_groups: HashMap<[u64; STORAGE_SLOTS], wgpu::BindGroup>,
}

impl GpuBackend {
    pub(crate) fn new(dev: Arc<GpuDevice>) -> GpuBackend {
        GpuBackend {
            ctx: dev.ctx.clone(),
            dev,
            params: None,
            bind_groups: HashMap::new(),
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

    fn bind_group(&mut self, key: [u64; STORAGE_SLOTS], params: &wgpu::Buffer) -> Result<()> {
        if self.bind_groups.contains_key(&key) {
            return Ok(());
        }
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
                buffer: params,
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
        let bg = self
            .ctx
            .device
            .create_bind_group(&wgpu::BindGroupDescriptor {
                label: None,
                layout: &self.ctx.layout,
                entries: &entries,
            });
        self.bind_groups.insert(key, bg);
        Ok(())
    }

    /// Records `d` into `pass`, its parameters at byte `params_at`.
    fn record(
        &self,
        pass: &mut wgpu::ComputePass<'_>,
        d: &ops::Dispatch,
        key: &[u64; STORAGE_SLOTS],
        params_at: u64,
    ) {
        pass.set_pipeline(&d.pipeline);
        pass.set_bind_group(0, &self.bind_groups[key], &[params_at as u32]);
        let [x, y, z] = d.groups;
        pass.dispatch_workgroups(x, y, z);
    }

    /// Runs every dispatch alone (submit and wait) and prints the time per
    /// op and shape, slowest first (`STRATA_GPU_PROFILE=1`).
    fn profile(
        &self,
        dispatches: &[ops::Dispatch],
        keys: &[[u64; STORAGE_SLOTS]],
        stride: u64,
    ) -> Result<()> {
        type Row = (u32, std::time::Duration);
        let mut per: HashMap<String, Row> = HashMap::new();
        for (i, (d, key)) in dispatches.iter().zip(keys).enumerate() {
            let mut enc = self.ctx.device.create_command_encoder(&Default::default());
            self.record(
                &mut enc.begin_compute_pass(&Default::default()),
                d,
                key,
                i as u64 * stride,
            );
            let t = std::time::Instant::now();
            self.ctx.queue.submit([enc.finish()]);
            self.ctx.wait()?;
            let Some(node) = d.slots[4].as_ref() else {
                continue;
            };
            let what = format!(
                "{} {} {:?} -> {:?}",
                node.op().name(),
                node.src(0).map_or("-".into(), |s| s.dtype().to_string()),
                node.src(0).map_or([0; 4], |s| s.ne()),
                node.ne()
            );
            let e = per.entry(what).or_default();
            e.0 += 1;
            e.1 += t.elapsed();
        }
        let mut rows: Vec<(String, Row)> = per.into_iter().collect();
        rows.sort_by_key(|r| std::cmp::Reverse(r.1 .1));
        for (what, (n, t)) in rows {
            eprintln!("{t:>12.3?} {n:>5}x {what}");
        }
        Ok(())
    }

    /// The parameter buffer, grown to at least `bytes`.
    fn ensure_params(&mut self, bytes: u64) -> wgpu::Buffer {
        if let Some(p) = self.params.as_ref().filter(|p| p.size() >= bytes) {
            return p.clone();
        }
        let size = bytes.next_power_of_two().max(64 * 1024);
        let p = self.ctx.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("strata params"),
            size,
            usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        // every bind group names the old parameter buffer
        self.bind_groups.clear();
        self.params = Some(p.clone());
        p
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
        self.ctx.take_error("a copy")
    }

    fn cpy_tensor_async(&mut self, src: &Tensor, dst: &Tensor) -> Result<bool> {
        match (src.storage(), dst.storage()) {
            (Some(_), Some(d)) if self.ctx.buffer(d.buffer.base()).is_some() => {
                d.buffer.copy_from(src, dst)
            }
            _ => Ok(false),
        }
    }

    fn graph_compute(&mut self, graph: &Graph) -> Result<()> {
        self.ctx.check_alive()?;
        for b in self.ctx.take_dropped() {
            self.bind_groups.retain(|k, _| !k.contains(&b));
        }
        let t0 = std::time::Instant::now();
        let mut dispatches = Vec::new();
        for node in graph.nodes() {
            let Some(planned) = ops::plan(&self.ctx, node)? else {
                return Err(ops::unsupported(&self.ctx, node));
            };
            // sources the scheduler substituted (its copies of split inputs)
            let subs: Vec<(&Tensor, &Tensor)> = node
                .srcs()
                .map(|s| (s, graph.effective(node, s)))
                .filter(|(s, e)| !s.ptr_eq(e))
                .collect();
            for mut d in planned {
                substitute(&mut d, &subs)?;
                dispatches.push(d);
            }
        }
        if dispatches.is_empty() {
            return Ok(());
        }
        let stride = self.stride();
        let params = self.ensure_params(stride * dispatches.len() as u64);
        let mut bytes = vec![0u8; (stride as usize) * dispatches.len()];
        let mut keys = Vec::with_capacity(dispatches.len());
        for (i, d) in dispatches.iter().enumerate() {
            let at = i * stride as usize;
            for (k, w) in d.params.w.iter().enumerate() {
                bytes[at + 4 * k..at + 4 * k + 4].copy_from_slice(&w.to_le_bytes());
            }
            let Some(node) = d.slots[4].as_ref() else {
                return Err(Error::Backend {
                    backend: self.ctx.name.clone(),
                    msg: "a dispatch without a destination tensor".into(),
                });
            };
            let dst = self.base_of(node, node)?;
            let mut key = [dst; STORAGE_SLOTS];
            for (k, t) in d.slots.iter().enumerate() {
                if let Some(t) = t {
                    key[k] = self.base_of(t, node)?;
                }
            }
            keys.push(key);
        }
        for key in &keys {
            self.bind_group(*key, &params)?;
        }
        self.ctx.queue.write_buffer(&params, 0, &bytes);
        let mut enc = self
            .ctx
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                label: Some("strata graph"),
            });
        {
            let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
                label: Some("strata graph"),
                timestamp_writes: None,
            });
            for (i, (d, key)) in dispatches.iter().zip(&keys).enumerate() {
                self.record(&mut pass, d, key, i as u64 * stride);
            }
        }
        if profiling() {
            self.profile(&dispatches, &keys, stride)?;
        }
        let t1 = std::time::Instant::now();
        self.ctx.queue.submit([enc.finish()]);
        self.ctx.wait()?;
        if profiling() {
            eprintln!(
                "{}: {} nodes, {} dispatches: recorded in {:?}, ran in {:?}",
                self.ctx.name,
                graph.nodes().len(),
                dispatches.len(),
                t1 - t0,
                t1.elapsed()
            );
        }
        self.ctx.take_error(&format!(
            "a graph of {} nodes ({} dispatches)",
            graph.nodes().len(),
            dispatches.len()
        ))
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
        let idx = self.ctx.queue.submit([]);
        *slot.lock().unwrap_or_else(|p| p.into_inner()) = Some(idx);
        Ok(())
    }
}

/// Whether `STRATA_GPU_PROFILE=1` asks for per-op times.
fn profiling() -> bool {
    std::env::var("STRATA_GPU_PROFILE").is_ok_and(|v| v == "1")
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
            self.ctx
                .device
                .poll(wgpu::PollType::Wait {
                    submission_index: Some(idx),
                    timeout: None,
                })
                .map_err(|e| Error::Backend {
                    backend: self.ctx.name.clone(),
                    msg: format!("waiting for an event failed: {e}"),
                })?;
        }
        self.ctx.check_alive()
    }

    fn key(&self) -> usize {
        Arc::as_ptr(&self.index) as usize
    }
}
