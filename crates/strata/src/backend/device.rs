//! Backends, devices, events and the registry (ggml's `ggml_backend`,
//! `ggml_backend_dev`, `ggml_backend_event`, `ggml_backend_reg`).

use std::sync::Arc;

use super::BufferType;
use crate::graph::Graph;
use crate::tensor::Tensor;
use crate::{Error, Result};

/// A synchronization point recorded on one backend and waited on by others.
pub trait Event: Send + Sync {
    /// Blocks until the work recorded before the event is done.
    fn synchronize(&self) -> Result<()>;
    /// What the event waits on (a stream or connection), so a backend can
    /// tell its own events from others'; 0 when it has no such identity.
    fn key(&self) -> usize {
        0
    }
}

/// Callback asked between the nodes of a computation; returning `true`
/// stops it ([`crate::Error::Aborted`]).
pub type AbortCallback = Box<dyn Fn() -> bool + Send + Sync>;

/// A graph prepared once for one backend and computed many times (ggml's
/// `ggml_backend_graph_plan_t`): made by [`Backend::graph_plan_create`], run
/// by [`Backend::graph_plan_compute`], freed by dropping it. It keeps the
/// graph (and so the memory of its tensors) alive; what a backend resolved
/// ahead (the CPU: every node's kernel and addresses) is checked against the
/// graph at each compute, so a plan whose tensors were placed elsewhere since
/// is refused, typed, instead of reading stale memory.
pub struct GraphPlan {
    graph: Graph,
    backend: String,
    state: Option<Box<dyn std::any::Any + Send>>,
}

impl GraphPlan {
    /// A plan of `graph` for the backend named `backend`, with what that
    /// backend resolved ahead (`None`: nothing, the graph is computed as is).
    pub fn new(
        graph: Graph,
        backend: String,
        state: Option<Box<dyn std::any::Any + Send>>,
    ) -> Self {
        GraphPlan {
            graph,
            backend,
            state,
        }
    }
    /// The planned graph.
    pub fn graph(&self) -> &Graph {
        &self.graph
    }
    /// The backend the plan was made for.
    pub fn backend(&self) -> &str {
        &self.backend
    }
    /// What the backend resolved ahead, if it is a `T`.
    pub fn state<T: 'static>(&self) -> Option<&T> {
        self.state.as_ref()?.downcast_ref()
    }
    /// Refuses a plan made for another backend than `backend`.
    pub fn check_backend(&self, backend: &str) -> Result<()> {
        if self.backend == backend {
            return Ok(());
        }
        Err(Error::InvalidArgument(format!(
            "graph plan made for backend '{}' computed on '{backend}': make the plan with \
             the backend that computes it",
            self.backend
        )))
    }
}

impl std::fmt::Debug for GraphPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GraphPlan")
            .field("backend", &self.backend)
            .field("nodes", &self.graph.nodes().len())
            .field("resolved", &self.state.is_some())
            .finish()
    }
}

/// An execution stream on a device (ggml's backend).
///
/// Everything but compute has a default: synchronous copies through the
/// tensor's buffer, no events, no offload preference, no abort.
pub trait Backend: Send {
    /// Name, e.g. `"CPU"`.
    fn name(&self) -> String;
    /// The device this backend runs on.
    fn device(&self) -> Arc<dyn Device>;
    /// The buffer type tensors for this backend are allocated in by default.
    fn default_buffer_type(&self) -> Arc<dyn BufferType> {
        self.device().default_buffer_type()
    }
    /// Writes tensor bytes, possibly asynchronously (call [`Backend::synchronize`]).
    fn set_tensor_async(&mut self, tensor: &Tensor, offset: usize, data: &[u8]) -> Result<()> {
        super::tensor_set(tensor, offset, data)
    }
    /// Reads tensor bytes, possibly asynchronously (call [`Backend::synchronize`]).
    fn get_tensor_async(&mut self, tensor: &Tensor, offset: usize, out: &mut [u8]) -> Result<()> {
        super::tensor_get(tensor, offset, out)
    }
    /// Copies `src` into `dst` asynchronously when this backend can; `Ok(false)` otherwise.
    fn cpy_tensor_async(&mut self, _src: &Tensor, _dst: &Tensor) -> Result<bool> {
        Ok(false)
    }
    /// Waits for all queued work.
    fn synchronize(&mut self) -> Result<()> {
        Ok(())
    }
    /// Computes every node of `graph` (all tensors must be allocated in memory
    /// this backend can use).
    fn graph_compute(&mut self, graph: &Graph) -> Result<()>;
    /// Prepares `graph` for repeated computes ([`GraphPlan`]). By default
    /// nothing is resolved ahead and the plan computes the graph as
    /// [`Backend::graph_compute`] does; the CPU resolves every node once.
    fn graph_plan_create(&mut self, graph: &Graph) -> Result<GraphPlan> {
        Ok(GraphPlan::new(graph.clone(), self.name(), None))
    }
    /// Computes a plan made by this backend's [`Backend::graph_plan_create`].
    fn graph_plan_compute(&mut self, plan: &GraphPlan) -> Result<()> {
        plan.check_backend(&self.name())?;
        self.graph_compute(plan.graph())
    }
    /// True when this backend can compute `op` (the tensor it produces).
    fn supports_op(&self, op: &Tensor) -> bool {
        self.device().supports_op(op)
    }
    /// True when this backend can use tensors in `buft` memory.
    fn supports_buft(&self, buft: &Arc<dyn BufferType>) -> bool {
        self.device().supports_buft(buft)
    }
    /// True when this backend wants to run `op` even though its weights live elsewhere.
    fn offload_op(&self, op: &Tensor) -> bool {
        self.device().offload_op(op)
    }
    /// Records `event` after the work queued so far.
    fn event_record(&mut self, _event: &Arc<dyn Event>) -> Result<()> {
        Err(Error::Unsupported {
            backend: self.name(),
            what: "events".into(),
        })
    }
    /// Makes later work on this backend wait for `event`.
    fn event_wait(&mut self, event: &Arc<dyn Event>) -> Result<()> {
        event.synchronize()
    }
    /// True when writes into this backend's memory are queued behind the work
    /// already submitted to it (a remote device whose commands run in order),
    /// so the scheduler need not wait before copying a split input into it.
    fn copies_are_ordered(&self) -> bool {
        false
    }
    /// Sets (or clears) the callback asked between nodes of later
    /// computations (ggml's `set_abort_callback`). Returns false when this
    /// backend cannot stop a computation midway; the callback is then dropped.
    fn set_abort_callback(&mut self, _cb: Option<AbortCallback>) -> bool {
        false
    }
    /// Bounds the scratch memory a computation may take beyond its tensors
    /// (`None`: no bound); a graph needing more is refused with
    /// [`crate::Error::OutOfMemory`]. Returns false when this backend has no
    /// such scratch or cannot bound it.
    fn set_work_limit(&mut self, _bytes: Option<usize>) -> bool {
        false
    }
}

/// Kind of device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceType {
    /// The host CPU.
    Cpu,
    /// A discrete GPU (remote devices report themselves as this, as ggml does).
    Gpu,
    /// An integrated GPU.
    IGpu,
    /// An accelerator used alongside the CPU (BLAS, AMX).
    Accel,
}

/// Free and total memory of a device, in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceMemory {
    /// Bytes free.
    pub free: usize,
    /// Bytes in all.
    pub total: usize,
}

/// A device: where memory is and what can run there (ggml's `ggml_backend_dev`).
pub trait Device: Send + Sync {
    /// Name, e.g. `"CPU"`.
    fn name(&self) -> String;
    /// Human-readable description.
    fn description(&self) -> String;
    /// Memory free / total.
    fn memory(&self) -> Result<DeviceMemory>;
    /// Kind of device.
    fn device_type(&self) -> DeviceType;
    /// Creates a backend (execution stream) on this device.
    fn init_backend(&self) -> Result<Box<dyn Backend>>;
    /// Creates a backend configured by `params` (the part after `:` of an
    /// init string such as `CPU:threads=4`, ggml's `ggml_backend_dev_init`
    /// params). The default takes no parameters: an empty string is
    /// [`Device::init_backend`], anything else an error naming the device.
    fn init_backend_with(&self, params: &str) -> Result<Box<dyn Backend>> {
        if params.trim().is_empty() {
            return self.init_backend();
        }
        Err(Error::BadValue {
            arg: format!("init parameters of device '{}'", self.name()),
            value: format!("'{params}'"),
            expected: format!("none: this device takes none, use '{}' alone", self.name()),
        })
    }
    /// The device's own memory.
    fn default_buffer_type(&self) -> Arc<dyn BufferType>;
    /// Host memory this device copies from fast (pinned memory), if any.
    fn host_buffer_type(&self) -> Option<Arc<dyn BufferType>> {
        None
    }
    /// True when a backend of this device can compute `op`.
    fn supports_op(&self, op: &Tensor) -> bool;
    /// True when this device can use tensors in `buft` memory.
    fn supports_buft(&self, buft: &Arc<dyn BufferType>) -> bool;
    /// True when the device wants ops whose weights are in host memory.
    fn offload_op(&self, _op: &Tensor) -> bool {
        false
    }
    /// A new event, when the device has them.
    fn event_new(&self) -> Option<Arc<dyn Event>> {
        None
    }
}

/// A family of devices (ggml's `ggml_backend_reg`): CPU, RPC, ...
pub trait DeviceProvider: Send + Sync {
    /// Name of the family, e.g. `"CPU"` or `"RPC"`.
    fn name(&self) -> String;
    /// The devices known now.
    fn devices(&self) -> Vec<Arc<dyn Device>>;
    /// A device by name, possibly created on demand (`"RPC[host:port]"`).
    fn device(&self, name: &str) -> Result<Option<Arc<dyn Device>>> {
        Ok(self.devices().into_iter().find(|d| d.name() == name))
    }
}

/// The set of device providers: find devices and create backends by name.
///
/// ```
/// use strata::backend::Registry;
/// let reg = Registry::with_defaults();
/// let dev = reg.device("CPU").unwrap();
/// assert_eq!(dev.name(), "CPU");
/// let mut backend = reg.backend("CPU").unwrap();
/// assert_eq!(backend.name(), "CPU");
/// assert!(reg.device("NPU7").is_err());
/// ```
#[derive(Default, Clone)]
pub struct Registry {
    providers: Vec<Arc<dyn DeviceProvider>>,
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Registry {
        Registry::default()
    }

    /// Adds a provider.
    pub fn register(&mut self, provider: Arc<dyn DeviceProvider>) {
        self.providers.push(provider);
    }

    /// The providers.
    pub fn providers(&self) -> &[Arc<dyn DeviceProvider>] {
        &self.providers
    }

    /// Every device of every provider.
    pub fn devices(&self) -> Vec<Arc<dyn Device>> {
        self.providers.iter().flat_map(|p| p.devices()).collect()
    }

    /// The device called `name`, or an error listing the known ones.
    pub fn device(&self, name: &str) -> Result<Arc<dyn Device>> {
        for p in &self.providers {
            if let Some(d) = p.device(name)? {
                return Ok(d);
            }
        }
        Err(Error::UnknownDevice {
            name: name.into(),
            known: self.devices().iter().map(|d| d.name()).collect(),
        })
    }

    /// A new backend on the device called `name`.
    pub fn backend(&self, name: &str) -> Result<Box<dyn Backend>> {
        self.device(name)?.init_backend()
    }

    /// The first device of type `ty` (ggml_backend_dev_by_type), or an error
    /// listing the devices there are.
    pub fn device_by_type(&self, ty: DeviceType) -> Result<Arc<dyn Device>> {
        let all = self.devices();
        all.iter()
            .find(|d| d.device_type() == ty)
            .cloned()
            .ok_or_else(|| {
                let known: Vec<String> = all
                    .iter()
                    .map(|d| format!("{} ({:?})", d.name(), d.device_type()))
                    .collect();
                Error::BadValue {
                    arg: "device type".into(),
                    value: format!("{ty:?}"),
                    expected: format!("the type of a device there is: {}", known.join(", ")),
                }
            })
    }

    /// A new backend on the first device of type `ty`, configured by
    /// `params` (ggml_backend_init_by_type).
    pub fn backend_by_type(&self, ty: DeviceType, params: &str) -> Result<Box<dyn Backend>> {
        self.device_by_type(ty)?.init_backend_with(params)
    }

    /// A new backend from an init string `NAME` or `NAME:PARAMS`
    /// (ggml_backend_init_by_name with its params), e.g. `CPU:threads=2` or
    /// `RPC[127.0.0.1:50052]` (a `:` inside the brackets belongs to the
    /// name).
    pub fn backend_from_spec(&self, spec: &str) -> Result<Box<dyn Backend>> {
        let (name, params) = split_spec(spec);
        self.device(name)?.init_backend_with(params)
    }
}

/// Splits an init string at the first `:` after the name's closing bracket
/// (`RPC[h:p]:x` → `RPC[h:p]`, `x`), or at its first `:` when it has none.
pub fn split_spec(spec: &str) -> (&str, &str) {
    let from = spec.rfind(']').map_or(0, |i| i + 1);
    match spec[from..].find(':') {
        Some(i) => (&spec[..from + i], &spec[from + i + 1..]),
        None => (spec, ""),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_device_lists_the_known_ones() {
        let mut reg = Registry::new();
        reg.register(Arc::new(crate::cpu::CpuProvider));
        assert_eq!(reg.device("CPU").unwrap().name(), "CPU");
        let e = reg.device("NPU9").err().unwrap();
        assert!(
            matches!(&e, Error::UnknownDevice { name, known } if name == "NPU9" && *known == ["CPU"]),
            "{e}"
        );
        assert_eq!(
            e.to_string(),
            "no device named 'NPU9' (known: CPU); give one of those names"
        );
    }
}
