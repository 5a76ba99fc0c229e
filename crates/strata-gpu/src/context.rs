//! One opened wgpu device: its queue, limits, pipelines and the registry of
//! its buffers (a tensor's buffer is found by its base address).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use strata::{Error, Result};

use crate::counters::{Count, Counters, GpuCounters, GpuTimings, Phase};
pub(crate) use crate::readback::Output;
use crate::readback::{Fused, Timestamps};
use crate::upload::Uploads;

/// Bytes of one dispatch's parameter block (see `ops::Params`).
pub(crate) const PARAMS_BYTES: u64 = 256;

/// Storage bindings every pipeline has: four sources and the destination.
pub(crate) const STORAGE_SLOTS: usize = 5;

/// Where an event keeps the submission it was recorded after.
pub(crate) type EventSlot = Arc<Mutex<Option<wgpu::SubmissionIndex>>>;

/// An opened adapter: the wgpu device and queue and what strata keeps about it.
pub struct GpuContext {
    pub(crate) name: String,
    /// Bytes of the largest device-local memory heap, where the API says.
    pub(crate) heap: Option<u64>,
    pub(crate) info: wgpu::AdapterInfo,
    pub(crate) limits: wgpu::Limits,
    pub(crate) features: wgpu::Features,
    pub(crate) device: wgpu::Device,
    pub(crate) queue: wgpu::Queue,
    /// The bind-group and pipeline layouts by read-only mask (bit k: source
    /// slot k bound read-only), made on first use.
    layouts: [OnceLock<(wgpu::BindGroupLayout, wgpu::PipelineLayout)>; 16],
    /// Compiled shaders by key.
    shaders: Mutex<HashMap<String, Arc<Shader>>>,
    /// Submissions made (the ordinal of the last one).
    submitted: AtomicU64,
    /// Submissions known to have run (by ordinal).
    completed: AtomicU64,
    /// The graphs' read-back memory.
    pub(crate) fused: Mutex<Fused>,
    /// The staging buffer of the other reads.
    pub(crate) staging: Mutex<Option<wgpu::Buffer>>,
    /// Writes waiting in the upload buffer for the next submission
    /// (`upload.rs`); locked across every submission.
    pub(crate) uploads: Mutex<Uploads>,
    /// Timestamp queries, where the adapter has them.
    pub(crate) timestamps: Option<Timestamps>,
    /// Buffers by base address.
    buffers: Mutex<HashMap<u64, wgpu::Buffer>>,
    /// Bases of buffers dropped since a backend last looked (its bind-group
    /// cache must forget them).
    dropped: Mutex<Vec<u64>>,
    next_base: AtomicU64,
    allocated: AtomicUsize,
    lost: Arc<AtomicBool>,
    /// Errors no scope caught (recorded instead of wgpu's default panic).
    uncaptured: Arc<Mutex<Vec<String>>>,
    /// This device's events by key (the address of their slot).
    events: Mutex<HashMap<usize, std::sync::Weak<Mutex<Option<wgpu::SubmissionIndex>>>>>,
    /// What was asked of wgpu and where the host time went.
    pub(crate) counters: Counters,
    /// The kernels MUL_MAT runs prompts on (`matmul_paths.rs`).
    pub(crate) matmul: crate::matmul_paths::PathCell,
}

/// The optional features `STRATA_GPU_DISABLE` turns off: a comma-separated
/// list of `f16`, `subgroups` and `timestamps` (as ggml-vulkan's
/// `GGML_VK_DISABLE_*`), for a driver whose path misbehaves and for testing
/// the fallbacks. An unknown name is logged and ignored.
pub(crate) fn disabled_features(list: Option<&str>) -> wgpu::Features {
    let mut off = wgpu::Features::empty();
    for name in list.unwrap_or("").split(',').map(str::trim) {
        match name {
            "" => {}
            "f16" => off |= wgpu::Features::SHADER_F16,
            "subgroups" => off |= wgpu::Features::SUBGROUP,
            "timestamps" => off |= wgpu::Features::TIMESTAMP_QUERY,
            other => tracing::warn!(
                "STRATA_GPU_DISABLE: unknown path {other:?} (known: f16, subgroups, timestamps)"
            ),
        }
    }
    off
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl GpuContext {
    /// Opens `adapter` with its own limits and the optional features it has,
    /// less those in `off`.
    pub(crate) fn open(
        name: String,
        adapter: &wgpu::Adapter,
        off: wgpu::Features,
    ) -> Result<GpuContext> {
        let info = adapter.get_info();
        let limits = adapter.limits();
        let features = adapter.features()
            & (wgpu::Features::SHADER_F16
                | wgpu::Features::SUBGROUP
                | wgpu::Features::TIMESTAMP_QUERY)
            & !off;
        let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
            label: Some("strata"),
            required_features: features,
            required_limits: limits.clone(),
            ..Default::default()
        }))
        .map_err(|e| Error::Backend {
            backend: name.clone(),
            msg: format!("cannot open adapter '{}': {e}", info.name),
        })?;
        let lost = Arc::new(AtomicBool::new(false));
        let flag = lost.clone();
        device.set_device_lost_callback(move |_reason, _msg| flag.store(true, Ordering::SeqCst));
        let uncaptured = Arc::new(Mutex::new(Vec::new()));
        let sink = uncaptured.clone();
        device.on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
            tracing::error!("GPU error: {e}");
            lock(&sink).push(e.to_string());
        }));
        let timestamps = features
            .contains(wgpu::Features::TIMESTAMP_QUERY)
            .then(|| Timestamps::new(&device, &queue));
        Ok(GpuContext {
            heap: vulkan_heap(adapter),
            name,
            info,
            limits,
            features,
            device,
            queue,
            layouts: Default::default(),
            shaders: Mutex::new(HashMap::new()),
            submitted: AtomicU64::new(0),
            completed: AtomicU64::new(0),
            fused: Mutex::new(Fused::default()),
            staging: Mutex::new(None),
            uploads: Mutex::default(),
            timestamps,
            buffers: Mutex::new(HashMap::new()),
            dropped: Mutex::new(Vec::new()),
            next_base: AtomicU64::new(0x1000),
            allocated: AtomicUsize::new(0),
            lost,
            uncaptured,
            events: Mutex::new(HashMap::new()),
            counters: Counters::default(),
            matmul: crate::matmul_paths::PathCell::choose(adapter, features),
        })
    }

    /// The device's name (`GPU0`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The adapter's own description.
    pub fn adapter_info(&self) -> &wgpu::AdapterInfo {
        &self.info
    }

    /// The limits the device was opened with (the adapter's).
    pub fn limits(&self) -> &wgpu::Limits {
        &self.limits
    }

    /// Whether the device has 16-bit float arithmetic in shaders.
    pub fn has_f16(&self) -> bool {
        self.features.contains(wgpu::Features::SHADER_F16)
    }

    /// The kernel paths this device's ops take where adapters differ, for
    /// `strata devices` (e.g. `matvec: subgroup`, `matmul: int-dot, f32
    /// tiles`).
    pub fn kernel_paths(&self) -> Vec<String> {
        let matvec = if self.has_subgroups() {
            "subgroup"
        } else {
            "workgroup memory"
        };
        vec![
            format!("matvec: {matvec}"),
            format!("matmul: {}", self.matmul_paths()),
        ]
    }

    /// The keys of the shaders planned on this device so far, sorted (a
    /// kernel's name, then its types and substitutions: `mul_mat_id_tiled/…`):
    /// for tests and benchmarks that check which kernel ran.
    #[doc(hidden)]
    pub fn shaders_planned(&self) -> Vec<String> {
        let mut v: Vec<String> = lock(&self.shaders).keys().cloned().collect();
        v.sort();
        v
    }

    /// Whether the device has subgroup operations.
    pub fn has_subgroups(&self) -> bool {
        self.features.contains(wgpu::Features::SUBGROUP)
    }

    /// The largest buffer one tensor set may live in: a buffer is bound
    /// whole, so it may not exceed the largest storage binding.
    pub fn max_buffer_size(&self) -> usize {
        let m = self
            .limits
            .max_buffer_size
            .min(self.limits.max_storage_buffer_binding_size);
        // a whole binding is addressed in bytes by u32 arithmetic in the shaders
        m.min(u32::MAX as u64 & !255) as usize
    }

    /// Bytes held by buffers now.
    pub fn allocated(&self) -> usize {
        self.allocated.load(Ordering::Relaxed)
    }

    /// The wgpu calls made on this device since it was opened
    /// ([`GpuCounters`]; subtract two snapshots for a stretch of work).
    pub fn counters(&self) -> GpuCounters {
        self.counters.counters()
    }

    /// Where strata-gpu's host time on this device went since it was
    /// opened, and the device's own time where it has timestamp queries
    /// ([`GpuTimings`]).
    pub fn timings(&self) -> GpuTimings {
        self.settle_timestamps();
        self.counters.timings(self.timestamps.is_some())
    }

    /// Whether the device times its graphs (timestamp queries).
    pub fn has_timestamps(&self) -> bool {
        self.timestamps.is_some()
    }

    /// The bind-group and pipeline layouts for read-only mask `mask`: the
    /// parameter block, then source slots 0..3 (read-only where `mask` has
    /// their bit) and the destination (read-write).
    pub(crate) fn layout(&self, mask: u8) -> &(wgpu::BindGroupLayout, wgpu::PipelineLayout) {
        self.layouts[(mask & 15) as usize].get_or_init(|| {
            let storage = |binding: u32| wgpu::BindGroupLayoutEntry {
                binding,
                visibility: wgpu::ShaderStages::COMPUTE,
                ty: wgpu::BindingType::Buffer {
                    ty: wgpu::BufferBindingType::Storage {
                        read_only: binding <= 4 && mask & (1 << (binding - 1)) != 0,
                    },
                    has_dynamic_offset: false,
                    min_binding_size: None,
                },
                count: None,
            };
            let mut entries = vec![wgpu::BindGroupLayoutEntry {
                binding: 0,
                visibility: wgpu::ShaderStages::COMPUTE,
                ty: wgpu::BindingType::Buffer {
                    ty: wgpu::BufferBindingType::Uniform,
                    has_dynamic_offset: true,
                    min_binding_size: wgpu::BufferSize::new(PARAMS_BYTES),
                },
                count: None,
            }];
            entries.extend((1..=STORAGE_SLOTS as u32).map(storage));
            let layout = self
                .device
                .create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
                    label: Some("strata op"),
                    entries: &entries,
                });
            let pipeline_layout =
                self.device
                    .create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
                        label: Some("strata op"),
                        bind_group_layouts: &[Some(&layout)],
                        immediate_size: 0,
                    });
            (layout, pipeline_layout)
        })
    }

    /// Counts `n` more of `c`.
    pub(crate) fn count(&self, c: Count, n: u64) {
        self.counters.add(c, n);
    }

    /// Adds `d` to phase `p`'s time.
    pub(crate) fn time(&self, p: Phase, d: std::time::Duration) {
        self.counters.time(p, d);
    }

    /// Creates a wgpu buffer (counted).
    pub(crate) fn new_buffer(&self, desc: &wgpu::BufferDescriptor<'_>) -> wgpu::Buffer {
        self.count(Count::BuffersCreated, 1);
        self.device.create_buffer(desc)
    }

    /// Submits `cmds`, which may change device memory: the graphs'
    /// read-back copies are forgotten.
    pub(crate) fn submit(
        &self,
        cmds: impl IntoIterator<Item = wgpu::CommandBuffer>,
    ) -> wgpu::SubmissionIndex {
        self.forget_reads();
        self.submit_raw(cmds).0
    }

    /// Submits `cmds`, which change no tensor memory (events).
    pub(crate) fn submit_keep(
        &self,
        cmds: impl IntoIterator<Item = wgpu::CommandBuffer>,
    ) -> wgpu::SubmissionIndex {
        self.submit_raw(cmds).0
    }

    /// Submits `cmds` to the queue (counted and timed); returns the
    /// submission's index and ordinal.
    pub(crate) fn submit_raw(
        &self,
        cmds: impl IntoIterator<Item = wgpu::CommandBuffer>,
    ) -> (wgpu::SubmissionIndex, u64) {
        // the writes waiting in the upload buffer go first
        let mut u = lock(&self.uploads);
        self.submit_locked(&mut u, cmds)
    }

    /// Counts a submission begun at `t` and returns its ordinal.
    pub(crate) fn note_submit(&self, t: std::time::Instant) -> u64 {
        let ordinal = self.submitted.fetch_add(1, Ordering::AcqRel) + 1;
        self.count(Count::Submits, 1);
        self.time(Phase::Submit, t.elapsed());
        ordinal
    }

    /// Blocks until submission `idx` (ordinal `ordinal`) has run, unless a
    /// wait already saw it done.
    pub(crate) fn wait_for(&self, idx: wgpu::SubmissionIndex, ordinal: u64) -> Result<()> {
        if self.completed.load(Ordering::Acquire) < ordinal {
            self.poll(wgpu::PollType::Wait {
                submission_index: Some(idx),
                timeout: None,
            })?;
            self.completed.fetch_max(ordinal, Ordering::AcqRel);
        }
        self.check_alive()
    }

    /// Blocks until `poll` is satisfied (counted and timed).
    pub(crate) fn poll(&self, poll: wgpu::PollType) -> Result<()> {
        let t = std::time::Instant::now();
        let r = self.device.poll(poll);
        self.count(Count::Waits, 1);
        self.time(Phase::Wait, t.elapsed());
        r.map(|_| ()).map_err(|e| Error::Backend {
            backend: self.name.clone(),
            msg: format!("waiting for the device failed: {e}"),
        })
    }

    /// Records that the device is gone (the lost callback may come later).
    pub(crate) fn mark_lost(&self) {
        self.lost.store(true, Ordering::SeqCst);
    }

    /// An error when the device was lost (driver reset, removal).
    pub(crate) fn check_alive(&self) -> Result<()> {
        if self.lost.load(Ordering::SeqCst) {
            return Err(Error::Backend {
                backend: self.name.clone(),
                msg: format!(
                    "the device '{}' was lost (driver reset or removal); its buffers are gone: \
                     reload the model",
                    self.info.name
                ),
            });
        }
        Ok(())
    }

    /// An error for the first uncaptured device error since the last call.
    pub(crate) fn take_error(&self, during: std::fmt::Arguments<'_>) -> Result<()> {
        let errs = std::mem::take(&mut *lock(&self.uncaptured));
        match errs.first() {
            None => Ok(()),
            Some(e) => Err(Error::Backend {
                backend: self.name.clone(),
                msg: format!("{during} failed on the device: {e}"),
            }),
        }
    }

    /// Remembers a new event's slot, so backends can find it by key.
    pub(crate) fn register_event(&self, slot: &EventSlot) {
        let mut ev = lock(&self.events);
        ev.retain(|_, w| w.strong_count() > 0);
        ev.insert(Arc::as_ptr(slot) as usize, Arc::downgrade(slot));
    }

    /// The slot of this device's live event with `key`.
    pub(crate) fn event_slot(&self, key: usize) -> Option<EventSlot> {
        lock(&self.events).get(&key).and_then(|w| w.upgrade())
    }

    /// Creates a storage buffer of `size` bytes (rounded up to 4), registers
    /// it and returns its base address; allocation failures are typed.
    pub(crate) fn create_buffer(&self, size: usize, label: &str) -> Result<(u64, wgpu::Buffer)> {
        self.check_alive()?;
        let max = self.max_buffer_size();
        let oom = |msg: String| Error::OutOfMemory {
            buffer_type: self.name.clone(),
            requested: size,
            msg,
        };
        if size > max {
            return Err(oom(format!(
                "larger than the device's largest buffer ({max} bytes, the adapter's storage \
                 binding limit): allocate in smaller buffers (alloc_tensors splits by max_size)"
            )));
        }
        let padded = size.max(4).next_multiple_of(4) as u64;
        let scope = self.device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        let vscope = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let buf = self.new_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            size: padded,
            usage: wgpu::BufferUsages::STORAGE
                | wgpu::BufferUsages::COPY_SRC
                | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let verr = pollster::block_on(vscope.pop());
        let err = pollster::block_on(scope.pop());
        if let Some(e) = err.or(verr) {
            return Err(oom(format!("the device refused it: {e}")));
        }
        let base = self
            .next_base
            .fetch_add(padded.next_multiple_of(4096) + 4096, Ordering::Relaxed);
        lock(&self.buffers).insert(base, buf.clone());
        self.allocated.fetch_add(padded as usize, Ordering::Relaxed);
        Ok((base, buf))
    }

    /// Forgets the buffer at `base` (its last handle is being dropped).
    pub(crate) fn release_buffer(&self, base: u64) {
        self.forget_reads_of(base);
        if let Some(b) = lock(&self.buffers).remove(&base) {
            self.allocated
                .fetch_sub(b.size() as usize, Ordering::Relaxed);
            // dropping the last handle frees the memory once the work that
            // uses it has run (wgpu keeps it alive until then)
            drop(b);
        }
        lock(&self.dropped).push(base);
    }

    /// The wgpu buffer at `base`, if it is this device's.
    pub(crate) fn buffer(&self, base: u64) -> Option<wgpu::Buffer> {
        lock(&self.buffers).get(&base).cloned()
    }

    /// The bases dropped since the last call.
    pub(crate) fn take_dropped(&self) -> Vec<u64> {
        std::mem::take(&mut *lock(&self.dropped))
    }

    /// The shader `key` (its WGSL text from `source()` the first time;
    /// compiled per read-only mask by [`GpuContext::pipeline`]).
    pub(crate) fn shader(&self, key: &str, source: impl FnOnce() -> String) -> Arc<Shader> {
        let mut shaders = lock(&self.shaders);
        if let Some(p) = shaders.get(key) {
            return p.clone();
        }
        let shader = Arc::new(Shader {
            key: key.to_string(),
            source: source(),
            pipelines: Mutex::new(Default::default()),
        });
        shaders.insert(key.to_string(), shader.clone());
        shader
    }

    /// `shader`'s pipeline for read-only mask `mask` (bit k: source slot k
    /// declared and bound read-only), compiled the first time.
    pub(crate) fn pipeline(&self, shader: &Shader, mask: u8) -> Result<Arc<wgpu::ComputePipeline>> {
        let mask = mask & 15;
        if let Some(p) = &lock(&shader.pipelines)[mask as usize] {
            return Ok(p.clone());
        }
        let mut src = shader.source.clone();
        for k in 0..4 {
            let access = if mask & (1 << k) != 0 {
                "read"
            } else {
                "read_write"
            };
            src = src.replace(&format!("ACCESS_S{k}"), access);
        }
        self.count(Count::PipelinesCreated, 1);
        let scope = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let module = self
            .device
            .create_shader_module(wgpu::ShaderModuleDescriptor {
                label: Some(&shader.key),
                source: wgpu::ShaderSource::Wgsl(src.into()),
            });
        let p = self
            .device
            .create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                label: Some(&shader.key),
                layout: Some(&self.layout(mask).1),
                module: &module,
                entry_point: Some("main"),
                compilation_options: Default::default(),
                cache: None,
            });
        if let Some(e) = pollster::block_on(scope.pop()) {
            return Err(Error::Backend {
                backend: self.name.clone(),
                msg: format!("shader '{}' did not compile: {e}", shader.key),
            });
        }
        let p = Arc::new(p);
        lock(&shader.pipelines)[mask as usize] = Some(p.clone());
        Ok(p)
    }

    /// Blocks until everything submitted so far has run; returns at once
    /// when a wait already saw the last submission done.
    pub(crate) fn wait(&self) -> Result<()> {
        let last = self.submitted.load(Ordering::Acquire);
        if self.completed.load(Ordering::Acquire) < last {
            self.poll(wgpu::PollType::wait_indefinitely())?;
            self.completed.fetch_max(last, Ordering::AcqRel);
        }
        self.check_alive()
    }

    /// Reads `out.len()` bytes of `buf` (the buffer at `base`) from
    /// `offset` into `out` (any alignment), after all submitted work: from
    /// the last graph's read-back copy when it holds them, else through the
    /// staging buffer.
    pub(crate) fn read(
        &self,
        base: u64,
        buf: &wgpu::Buffer,
        offset: u64,
        out: &mut [u8],
    ) -> Result<()> {
        self.check_alive()?;
        if out.is_empty() || self.read_fused(base, offset, out)? {
            return Ok(());
        }
        self.read_staged(buf, offset, out)
    }

    /// Writes `data` into `buf` at `offset` (any alignment: unaligned edges
    /// are read back and merged). Queued before the next submission.
    pub(crate) fn write(&self, buf: &wgpu::Buffer, offset: u64, data: &[u8]) -> Result<()> {
        self.check_alive()?;
        if data.is_empty() {
            return Ok(());
        }
        let end = offset + data.len() as u64;
        if offset.is_multiple_of(4) && end.is_multiple_of(4) {
            return self.write_aligned(buf, offset, data);
        }
        let start = offset & !3;
        let aend = end.next_multiple_of(4);
        let mut merged = vec![0u8; (aend - start) as usize];
        // the first and last words hold bytes outside `data`: keep them
        self.read_staged(buf, start, &mut merged[..4])?;
        let n = merged.len();
        if n > 4 {
            let mut last = [0u8; 4];
            self.read_staged(buf, aend - 4, &mut last)?;
            merged[n - 4..].copy_from_slice(&last);
        }
        let skip = (offset - start) as usize;
        merged[skip..skip + data.len()].copy_from_slice(data);
        self.write_aligned(buf, start, &merged)
    }
}

/// The size of the largest device-local heap of a Vulkan adapter.
fn vulkan_heap(adapter: &wgpu::Adapter) -> Option<u64> {
    use ash::vk;
    // SAFETY: the hal adapter is only read (its instance and physical-device
    // handles, valid while `adapter` lives) by a query without side effects.
    unsafe {
        let hal = adapter.as_hal::<wgpu::hal::api::Vulkan>()?;
        let instance = hal.shared_instance().raw_instance();
        let props = instance.get_physical_device_memory_properties(hal.raw_physical_device());
        props
            .memory_heaps_as_slice()
            .iter()
            .filter(|h| h.flags.contains(vk::MemoryHeapFlags::DEVICE_LOCAL))
            .map(|h| h.size)
            .max()
    }
}

impl std::fmt::Debug for GpuContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuContext")
            .field("name", &self.name)
            .field("adapter", &self.info.name)
            .finish()
    }
}

/// A shader's WGSL text and its pipelines, one per read-only mask.
pub(crate) struct Shader {
    key: String,
    /// The text, `ACCESS_S0..3` left to fill per mask.
    source: String,
    pipelines: Mutex<[Option<Arc<wgpu::ComputePipeline>>; 16]>,
}

#[cfg(test)]
mod tests {
    use super::disabled_features;

    #[test]
    fn strata_gpu_disable_names_the_features_it_turns_off() {
        assert_eq!(disabled_features(None), wgpu::Features::empty());
        assert_eq!(
            disabled_features(Some("subgroups")),
            wgpu::Features::SUBGROUP
        );
        assert_eq!(
            disabled_features(Some(" f16 , timestamps,,bogus")),
            wgpu::Features::SHADER_F16 | wgpu::Features::TIMESTAMP_QUERY
        );
    }
}
