//! The CPU as a device: its provider, name, memory and backends.

use std::sync::Arc;

use super::{available_cores, cpu_buffer_type, ops, CpuBackend};
use crate::backend::{Backend, BufferType, Device, DeviceMemory, DeviceProvider, DeviceType};
use crate::tensor::Tensor;
use crate::Result;

/// The CPU device provider (registry entry "CPU").
pub struct CpuProvider;

impl DeviceProvider for CpuProvider {
    fn name(&self) -> String {
        "CPU".into()
    }
    fn devices(&self) -> Vec<Arc<dyn Device>> {
        vec![cpu_device()]
    }
}

/// The host CPU as a device.
pub struct CpuDevice;

/// The CPU device.
pub fn cpu_device() -> Arc<dyn Device> {
    static DEV: std::sync::OnceLock<Arc<CpuDevice>> = std::sync::OnceLock::new();
    DEV.get_or_init(|| Arc::new(CpuDevice)).clone()
}

/// Total and available memory from /proc/meminfo (0 when unknown).
fn host_memory() -> DeviceMemory {
    let text = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let field = |name: &str| -> usize {
        text.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<usize>().ok())
            .map_or(0, |kb| kb * 1024)
    };
    DeviceMemory {
        free: field("MemAvailable:"),
        total: field("MemTotal:"),
    }
}

/// The processor's model name (`model name` of /proc/cpuinfo on Linux,
/// the architecture where it cannot be read).
pub fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name") || l.starts_with("Model\t"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .filter(|m| !m.is_empty())
        .unwrap_or_else(|| std::env::consts::ARCH.to_string())
}

/// Number of threads used when none is given: the cores available to this
/// process ([`available_cores`]: its affinity mask and cgroup quota).
pub fn default_threads() -> usize {
    available_cores()
}

impl Device for CpuDevice {
    fn name(&self) -> String {
        "CPU".into()
    }
    fn description(&self) -> String {
        use crate::isa::{active, detected};
        format!(
            "{}, {}, ISA level {} (detected {}), {} threads",
            cpu_model(),
            std::env::consts::ARCH,
            active(),
            detected(),
            default_threads()
        )
    }
    fn memory(&self) -> Result<DeviceMemory> {
        Ok(host_memory())
    }
    fn device_type(&self) -> DeviceType {
        DeviceType::Cpu
    }
    fn init_backend(&self) -> Result<Box<dyn Backend>> {
        Ok(Box::new(CpuBackend::new(default_threads())))
    }
    /// See [`CpuBackend::from_params`].
    fn init_backend_with(&self, params: &str) -> Result<Box<dyn Backend>> {
        Ok(Box::new(CpuBackend::from_params(params)?))
    }
    fn default_buffer_type(&self) -> Arc<dyn BufferType> {
        cpu_buffer_type()
    }
    fn supports_op(&self, op: &Tensor) -> bool {
        ops::supports(op)
    }
    fn supports_buft(&self, buft: &Arc<dyn BufferType>) -> bool {
        buft.is_host()
    }
}
