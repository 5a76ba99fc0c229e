//! strata's GPU backend, on wgpu: one code base for Vulkan, Metal and DX12
//! devices, compute shaders in WGSL.
//!
//! Every adapter wgpu finds (the GL backend aside) is a device named `GPU0`,
//! `GPU1`, … in wgpu's order; [`GpuProvider`] puts them in a
//! [`strata::backend::Registry`]. A device's memory is a buffer type whose
//! `is_host` is false, with alignment and max size from the adapter's limits;
//! tensor reads and writes go through the queue. A graph is planned into
//! dispatches once and replayed while the same tensors in the same memory
//! come again (a decode token), recorded as one compute pass with the copies
//! of its OUTPUT tensors into read-back memory, and submitted once without
//! waiting; reading those outputs then waits for that submission alone.
//! [`GpuContext::counters`] counts the wgpu calls made and
//! [`GpuContext::timings`] says where the host time went. MUL_MAT over a
//! prompt runs on the kernels [`GpuContext::matmul_paths`] names
//! ([`MatmulPaths`]: integer dot products over 8-bit activations for the
//! common quantized types, f16 or f32 workgroup tiles), chosen from what
//! the adapter offers; so does MUL_MAT_ID where its experts get several
//! columns each (mixture-of-experts prompts). Every op of strata's
//! conformance suite runs here; a model's layers go to a GPU through
//! `strata-models`' placement (`-ngl`), and what a device cannot run stays
//! on the CPU.
//!
//! # A graph on the first GPU
//!
//! Without a GPU (or a software Vulkan device such as Mesa's llvmpipe) the
//! list is empty and the example does nothing.
//!
//! ```
//! use std::sync::Arc;
//! use strata::backend::{alloc_graph, Backend, Device, Registry};
//! use strata::{ops, DType, Graph, Tensor};
//!
//! let mut reg = Registry::with_defaults();
//! reg.register(Arc::new(strata_gpu::GpuProvider));
//! for d in reg.devices() {
//!     println!("{}: {}", d.name(), d.description());
//! }
//! if let Some(gpu) = strata_gpu::devices().first() {
//!     let x = Tensor::new(DType::F32, &[4])?;
//!     let y = ops::sqr(&x)?;
//!     let g = Graph::build(&[y.clone()]);
//!     let _buffers = alloc_graph(&g, &gpu.default_buffer_type())?; // device memory
//!     x.write_f32(&[1.0, 2.0, 3.0, 4.0])?;
//!     gpu.backend().graph_compute(&g)?;
//!     assert_eq!(y.to_f32_vec()?, [1.0, 4.0, 9.0, 16.0]);
//! }
//! # Ok::<(), strata::Error>(())
//! ```
//!
//! # Stability
//!
//! strata-gpu is at 0.x, as strata is: a new 0.x minor version may change
//! any API.
#![warn(missing_docs)]

mod backend;
mod buffer;
mod context;
mod counters;
mod matmul_paths;
mod ops;
mod readback;
mod upload;

use std::sync::{Arc, Mutex, OnceLock};

use strata::backend::{
    same_buffer_type, Backend, BufferType, Device, DeviceMemory, DeviceProvider, DeviceType, Event,
};
use strata::{Result, Tensor};

pub use backend::{GpuBackend, GpuEvent};
pub use buffer::{GpuBuffer, GpuBufferType};
pub use context::GpuContext;
pub use counters::{GpuCounters, GpuTimings};
pub use matmul_paths::MatmulPaths;
/// The kind of adapter (`GpuContext::adapter_info().device_type`).
pub use wgpu::DeviceType as AdapterType;

/// wgpu's adapters (the GL backend aside), in its order.
fn adapters() -> &'static [wgpu::Adapter] {
    static ADAPTERS: OnceLock<Vec<wgpu::Adapter>> = OnceLock::new();
    ADAPTERS.get_or_init(|| {
        let backends = wgpu::Backends::VULKAN | wgpu::Backends::METAL | wgpu::Backends::DX12;
        let instance = wgpu::Instance::new(wgpu::InstanceDescriptor {
            backends,
            ..wgpu::InstanceDescriptor::new_without_display_handle()
        });
        pollster::block_on(instance.enumerate_adapters(backends))
    })
}

/// The GPU devices of this process, opened on first use (wgpu's adapters in
/// its order; an adapter that cannot be opened is left out with a warning).
pub fn devices() -> &'static [Arc<GpuDevice>] {
    static DEVICES: OnceLock<Vec<Arc<GpuDevice>>> = OnceLock::new();
    DEVICES.get_or_init(|| {
        let mut out = Vec::new();
        for a in adapters() {
            let name = format!("GPU{}", out.len());
            let disable = std::env::var("STRATA_GPU_DISABLE").ok();
            match GpuContext::open(name, a, context::disabled_features(disable.as_deref())) {
                Ok(ctx) => out.push(GpuDevice::new(Arc::new(ctx))),
                Err(e) => tracing::warn!("{e}"),
            }
        }
        out
    })
}

/// Opens the adapter of device `name` (`GPU0`, …) once more, as a device of
/// its own: its own queue, buffers and pipelines, sharing nothing with the
/// process-wide one (to isolate work that may break its device).
pub fn open_private(name: &str) -> Result<Arc<GpuDevice>> {
    let disable = std::env::var("STRATA_GPU_DISABLE").ok();
    open_private_with(name, disable.as_deref().unwrap_or(""))
}

/// [`open_private`] with the optional paths named in `disable` turned off
/// (the syntax of `STRATA_GPU_DISABLE`: a comma-separated list of `f16`,
/// `subgroups`, `timestamps`), whatever the environment says: for tests and
/// benchmarks of the fallbacks.
#[doc(hidden)]
pub fn open_private_with(name: &str, disable: &str) -> Result<Arc<GpuDevice>> {
    let known = || devices().iter().map(|d| d.ctx.name.clone()).collect();
    let i = devices()
        .iter()
        .position(|d| d.ctx.name == name)
        .ok_or_else(|| strata::Error::UnknownDevice {
            name: name.into(),
            known: known(),
        })?;
    // `devices` skips adapters that fail to open: find this one by its info
    let info = &devices()[i].ctx.info;
    let a = adapters()
        .iter()
        .find(|a| &a.get_info() == info)
        .ok_or_else(|| strata::Error::UnknownDevice {
            name: name.into(),
            known: known(),
        })?;
    Ok(GpuDevice::new(Arc::new(GpuContext::open(
        name.into(),
        a,
        context::disabled_features(Some(disable)),
    )?)))
}

/// The first GPU, or why there is none.
pub fn first_device() -> std::result::Result<Arc<GpuDevice>, String> {
    devices().first().cloned().ok_or_else(|| {
        "no GPU adapter: wgpu found no Vulkan, Metal or DX12 device (on Linux without a GPU, \
         install Mesa's software driver: apt-get install mesa-vulkan-drivers)"
            .to_string()
    })
}

/// The first GPU for a test or an example that can do without one (a test
/// helper, hidden from the documentation):
/// `Ok(None)` (after printing why on stderr) when there is none, but an error
/// when the environment says a GPU must be there (`STRATA_REQUIRE_GPU=1`,
/// which CI sets so that a broken driver cannot skip the GPU tests).
#[doc(hidden)]
pub fn device_or_skip() -> std::result::Result<Option<Arc<GpuDevice>>, String> {
    match first_device() {
        Ok(d) => Ok(Some(d)),
        Err(why) if std::env::var("STRATA_REQUIRE_GPU").is_ok_and(|v| v == "1") => {
            Err(format!("STRATA_REQUIRE_GPU=1 but {why}"))
        }
        Err(why) => {
            eprintln!("skipped: {why}");
            Ok(None)
        }
    }
}

/// The family of GPU devices for a [`strata::backend::Registry`].
pub struct GpuProvider;

impl DeviceProvider for GpuProvider {
    fn name(&self) -> String {
        "GPU".into()
    }

    fn devices(&self) -> Vec<Arc<dyn Device>> {
        devices()
            .iter()
            .map(|d| d.clone() as Arc<dyn Device>)
            .collect()
    }
}

/// One GPU.
pub struct GpuDevice {
    pub(crate) ctx: Arc<GpuContext>,
    pub(crate) buft: Arc<GpuBufferType>,
    this: std::sync::Weak<GpuDevice>,
}

impl GpuDevice {
    fn new(ctx: Arc<GpuContext>) -> Arc<GpuDevice> {
        Arc::new_cyclic(|this| GpuDevice {
            buft: Arc::new(GpuBufferType { ctx: ctx.clone() }),
            ctx,
            this: this.clone(),
        })
    }

    /// The opened device.
    pub fn context(&self) -> &Arc<GpuContext> {
        &self.ctx
    }

    /// Destroys the device, as a driver reset or a removed card would: its
    /// buffers' contents are gone and every later use is a typed error
    /// saying the device was lost.
    pub fn destroy(&self) {
        self.ctx.device.destroy();
        self.ctx.mark_lost();
    }

    /// A backend on this device.
    pub fn backend(&self) -> GpuBackend {
        GpuBackend::new(self.this.upgrade().expect("a device outlives its calls"))
    }
}

impl Device for GpuDevice {
    fn name(&self) -> String {
        self.ctx.name.clone()
    }

    fn description(&self) -> String {
        let i = &self.ctx.info;
        let driver = if i.driver_info.is_empty() {
            i.driver.clone()
        } else {
            format!("{} {}", i.driver, i.driver_info)
        };
        format!(
            "{} ({:?}, {:?}, driver {driver}{}{}; {})",
            i.name,
            i.backend,
            i.device_type,
            if self.ctx.has_f16() { ", f16" } else { "" },
            if self.ctx.has_subgroups() {
                ", subgroups"
            } else {
                ""
            },
            self.ctx.kernel_paths().join(", ")
        )
    }

    fn memory(&self) -> Result<DeviceMemory> {
        // the device-local heap where Vulkan reports it, else the largest
        // buffer the adapter allows; free is what strata has not taken of it
        let total = self
            .ctx
            .heap
            .unwrap_or(self.ctx.limits.max_buffer_size)
            .min(usize::MAX as u64) as usize;
        Ok(DeviceMemory {
            total,
            free: total.saturating_sub(self.ctx.allocated()),
        })
    }

    fn device_type(&self) -> DeviceType {
        match self.ctx.info.device_type {
            wgpu::DeviceType::IntegratedGpu => DeviceType::IGpu,
            _ => DeviceType::Gpu,
        }
    }

    fn init_backend(&self) -> Result<Box<dyn Backend>> {
        self.ctx.check_alive()?;
        Ok(Box::new(self.backend()))
    }

    fn default_buffer_type(&self) -> Arc<dyn BufferType> {
        self.buft.clone()
    }

    fn supports_op(&self, op: &Tensor) -> bool {
        ops::supported(&self.ctx, op)
    }

    fn supports_buft(&self, buft: &Arc<dyn BufferType>) -> bool {
        let own: Arc<dyn BufferType> = self.buft.clone();
        same_buffer_type(&own, buft)
    }

    fn offload_op(&self, op: &Tensor) -> bool {
        // as ggml's GPU backends: batches of 32 or more are worth moving host
        // weights for
        let batch = match op.op() {
            strata::ops::Op::GetRows => return false,
            strata::ops::Op::MulMatId => op.ne()[2],
            _ => op.ne()[1],
        };
        batch >= 32
    }

    fn event_new(&self) -> Option<Arc<dyn Event>> {
        let index = Arc::new(Mutex::new(None));
        self.ctx.register_event(&index);
        Some(Arc::new(GpuEvent {
            ctx: self.ctx.clone(),
            index,
        }))
    }
}
