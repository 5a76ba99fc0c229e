//! Where each weight goes: `-ngl N` (the last N layers, and the output layer
//! when N covers every layer, on the first non-CPU device) and `-ot REGEX=DEVICE`
//! overrides by tensor name (llama.cpp's `--override-tensor`; first match wins).

use std::sync::Arc;

use regex::Regex;
use strata::backend::{Device, DeviceType};

use crate::{ModelError, Result};

/// A `-ot REGEX=DEVICE` rule.
#[derive(Clone, Debug)]
pub struct Override {
    /// Tensor-name pattern (searched, not anchored, as llama.cpp does).
    pub pattern: Regex,
    /// Device name (`CPU`, `RPC[host:port]`, ...).
    pub device: String,
}

impl Override {
    /// Parses `REGEX=DEVICE`.
    pub fn parse(spec: &str) -> Result<Override> {
        let (re, dev) = spec.rsplit_once('=').ok_or_else(|| {
            ModelError::Invalid(format!(
                "override '{spec}' must be REGEX=DEVICE, e.g. 'ffn_.*=CPU'"
            ))
        })?;
        let pattern = Regex::new(re)
            .map_err(|e| ModelError::Invalid(format!("override regex '{re}': {e}")))?;
        if dev.is_empty() {
            return Err(ModelError::Invalid(format!(
                "override '{spec}' names no device"
            )));
        }
        Ok(Override {
            pattern,
            device: dev.to_string(),
        })
    }
}

/// Placement policy of a model's weights.
#[derive(Clone, Debug, Default)]
pub struct PlacementSpec {
    /// Layers put on the first non-CPU device (`-ngl`), counted from the last.
    pub n_gpu_layers: usize,
    /// Name overrides, checked in order.
    pub overrides: Vec<Override>,
}

/// The devices of a model in scheduler priority order, the CPU last.
#[derive(Clone)]
pub struct Devices {
    list: Vec<Arc<dyn Device>>,
}

impl std::fmt::Debug for Devices {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.names()).finish()
    }
}

impl Devices {
    /// `accel` (non-CPU devices, priority order) followed by the CPU.
    pub fn new(accel: Vec<Arc<dyn Device>>) -> Result<Devices> {
        let mut list = Vec::with_capacity(accel.len() + 1);
        for d in accel {
            if d.device_type() == DeviceType::Cpu {
                continue; // the CPU is always there, last
            }
            if list.iter().any(|x: &Arc<dyn Device>| x.name() == d.name()) {
                return Err(ModelError::Invalid(format!(
                    "device '{}' given twice",
                    d.name()
                )));
            }
            list.push(d);
        }
        list.push(strata::cpu::cpu_device());
        Ok(Devices { list })
    }

    /// All devices, the CPU last.
    pub fn list(&self) -> &[Arc<dyn Device>] {
        &self.list
    }

    /// Device names.
    pub fn names(&self) -> Vec<String> {
        self.list.iter().map(|d| d.name()).collect()
    }

    /// Index of the CPU.
    pub fn cpu(&self) -> usize {
        self.list.len() - 1
    }

    /// Index of the device called `name`.
    pub fn index_of(&self, name: &str) -> Result<usize> {
        self.list
            .iter()
            .position(|d| d.name() == name)
            .ok_or_else(|| {
                ModelError::Invalid(format!(
                    "device '{name}' is not in use (devices: {}); add it with --device",
                    self.names().join(", ")
                ))
            })
    }
}

/// Resolved placement: the device of each layer and of the output layer.
#[derive(Clone, Debug)]
pub struct LayerMap {
    /// Device index per layer.
    pub layers: Vec<usize>,
    /// Device of the output norm and projection.
    pub output: usize,
    /// Device of the token embedding (always the CPU unless overridden).
    pub input: usize,
}

impl PlacementSpec {
    /// Assigns layers to devices.
    pub fn layer_map(&self, n_layer: usize, devices: &Devices) -> Result<LayerMap> {
        let cpu = devices.cpu();
        let gpu = if devices.list().len() > 1 {
            Some(0)
        } else {
            None
        };
        if self.n_gpu_layers > 0 && gpu.is_none() {
            return Err(ModelError::Invalid(format!(
                "-ngl {} needs a device to offload to (--device NAME)",
                self.n_gpu_layers
            )));
        }
        let n_off = self.n_gpu_layers.min(n_layer);
        let first = n_layer - n_off;
        let layers = (0..n_layer)
            .map(|i| if i >= first { gpu.unwrap_or(cpu) } else { cpu })
            .collect();
        let output = if self.n_gpu_layers >= n_layer {
            gpu.unwrap_or(cpu)
        } else {
            cpu
        };
        Ok(LayerMap {
            layers,
            output,
            input: cpu,
        })
    }

    /// The device of tensor `name`, whose layer placement says `default`.
    pub fn device_for(&self, name: &str, default: usize, devices: &Devices) -> Result<usize> {
        for o in &self.overrides {
            if o.pattern.is_match(name) {
                return devices.index_of(&o.device);
            }
        }
        Ok(default)
    }
}

/// The layer a tensor belongs to (`blk.N.*`), if any.
pub fn layer_of(name: &str) -> Option<usize> {
    name.strip_prefix("blk.")?.split('.').next()?.parse().ok()
}
