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
        let (re, dev) = spec
            .rsplit_once('=')
            .ok_or_else(|| ModelError::OverrideSyntax { spec: spec.into() })?;
        let pattern = Regex::new(re).map_err(|e| ModelError::OverrideRegex {
            regex: re.into(),
            msg: e.to_string(),
        })?;
        if dev.is_empty() {
            return Err(ModelError::OverrideNoDevice { spec: spec.into() });
        }
        Ok(Override {
            pattern,
            device: dev.to_string(),
        })
    }
}

/// llama.cpp's pattern of the expert tensors (`LLM_FFN_EXPS_REGEX`), which
/// `--cpu-moe` and `--n-cpu-moe` keep on the CPU.
pub const EXPS_PATTERN: &str = r"\.ffn_(up|down|gate|gate_up)_(ch|)exps";

/// The most blocks `--n-cpu-moe` names (llama.cpp's `LLAMA_MAX_LAYERS`: no
/// model it loads has more), so a huge N costs no more than this.
pub const MAX_CPU_MOE_LAYERS: usize = 512;

impl Override {
    /// `--cpu-moe`: every expert tensor on the CPU (llama.cpp's
    /// `llm_ffn_exps_cpu_override`).
    pub fn cpu_moe() -> Result<Override> {
        Override::parse(&format!("{EXPS_PATTERN}=CPU"))
    }

    /// `--n-cpu-moe N`: the expert tensors of blocks `0..N` on the CPU, one
    /// rule per block as llama.cpp adds them (`blk\.I` + the expert
    /// pattern); N beyond `MAX_CPU_MOE_LAYERS` (512) counts as that many.
    pub fn n_cpu_moe(n: usize) -> Result<Vec<Override>> {
        (0..n.min(MAX_CPU_MOE_LAYERS))
            .map(|i| Override::parse(&format!(r"blk\.{i}{EXPS_PATTERN}=CPU")))
            .collect()
    }
}

/// How layers are spread over several devices (`-sm`, llama.cpp's split mode).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SplitMode {
    /// Every offloaded layer on one device, `main_device` (`-sm none`).
    None,
    /// Consecutive layers per device, in proportion to `tensor_split` or to
    /// each device's free memory (`-sm layer`, the default).
    #[default]
    Layer,
}

/// Placement policy of a model's weights.
///
/// `n_gpu_layers` counts as llama.cpp counts: the model's `n_layer` blocks
/// plus the output layer make `n_layer + 1` layers; `-ngl N` offloads the
/// last `N` of them, so `-ngl 1` moves the output layer alone and `-ngl
/// n_layer + 1` (or any negative value, llama.cpp's "all") moves every
/// block and the output. The token embedding stays on the CPU. Without a
/// device, `-ngl` has nothing to offload to and every layer stays on the
/// CPU (as llama.cpp does; the CLI warns).
#[derive(Clone, Debug, Default)]
pub struct PlacementSpec {
    /// Layers put on the devices (`-ngl`), counted from the output layer;
    /// negative: all.
    pub n_gpu_layers: i32,
    /// Share of the offloaded layers per device (`-ts 3,1`), in device
    /// order; empty or all zero: in proportion to each device's free memory.
    pub tensor_split: Vec<f32>,
    /// How layers spread over several devices (`-sm`).
    pub split_mode: SplitMode,
    /// The device every offloaded layer goes to with [`SplitMode::None`]
    /// (`-mg`, an index into the devices given).
    pub main_device: usize,
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
                return Err(ModelError::DeviceTwice { name: d.name() });
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
            .ok_or_else(|| ModelError::DeviceNotInUse {
                name: name.into(),
                devices: self.names(),
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
    /// Tensors are placed by `-ot` rules besides the layers.
    pub tensor_overrides: bool,
}

impl LayerMap {
    /// llama.cpp's rule for pipeline parallelism: the layers span several
    /// devices, every block and the output are off the CPU (`-ngl` above
    /// the block count), and no `-ot` rule moves tensors back and forth.
    /// The devices must also have events (checked where the backends are).
    pub fn pipelines(&self, cpu: usize) -> bool {
        let mut used: Vec<usize> = self.layers.clone();
        used.push(self.output);
        let all_off = used.iter().all(|&d| d != cpu);
        used.sort_unstable();
        used.dedup();
        all_off && used.len() > 1 && !self.tensor_overrides
    }
}

impl PlacementSpec {
    /// Assigns layers to devices (llama.cpp's rule: the last `-ngl` of the
    /// `n_layer + 1` layers, split over the devices by `-ts` or free memory).
    pub fn layer_map(&self, n_layer: usize, devices: &Devices) -> Result<LayerMap> {
        let cpu = devices.cpu();
        let n_dev = cpu; // the CPU is last: every index below it is a device
        let all = n_layer + 1;
        let wanted = usize::try_from(self.n_gpu_layers).map_or(all, |n| n.min(all));
        let n_off = if n_dev == 0 { 0 } else { wanted };
        let start = all - n_off;
        let bounds = self.split_bounds(devices)?;
        let place = |il: usize| -> usize {
            if il < start {
                return cpu;
            }
            let frac = (il - start) as f32 / n_off as f32;
            // the first device whose cumulative share passes this layer
            bounds.iter().position(|&b| frac < b).unwrap_or(n_dev - 1)
        };
        Ok(LayerMap {
            layers: (0..n_layer).map(place).collect(),
            output: place(n_layer),
            input: cpu,
            tensor_overrides: !self.overrides.is_empty(),
        })
    }

    /// Cumulative, normalized share of each device (llama.cpp's split points).
    fn split_bounds(&self, devices: &Devices) -> Result<Vec<f32>> {
        let n_dev = devices.cpu();
        if n_dev == 0 {
            return Ok(Vec::new());
        }
        if self.split_mode == SplitMode::None {
            if self.main_device >= n_dev {
                return Err(ModelError::MainDeviceOutOfRange {
                    main_device: self.main_device,
                    devices: devices.names()[..n_dev].to_vec(),
                });
            }
            return Ok((0..n_dev)
                .map(|i| if i >= self.main_device { 1.0 } else { 0.0 })
                .collect());
        }
        if self.tensor_split.len() > n_dev {
            return Err(ModelError::TooManySplitShares {
                shares: self.tensor_split.len(),
                devices: devices.names()[..n_dev].to_vec(),
            });
        }
        if let Some(bad) = self
            .tensor_split
            .iter()
            .find(|x| !x.is_finite() || **x < 0.0)
        {
            return Err(ModelError::BadSplitShare { share: *bad });
        }
        let mut shares: Vec<f64> = (0..n_dev)
            .map(|i| f64::from(self.tensor_split.get(i).copied().unwrap_or(0.0)))
            .collect();
        if shares.iter().all(|&x| x == 0.0) {
            shares = devices.list()[..n_dev]
                .iter()
                .map(|d| match d.memory() {
                    Ok(m) if m.free > 0 || m.total > 0 => m.free as f64,
                    // a device with nothing to report: count the host's memory
                    _ => devices.list()[n_dev]
                        .memory()
                        .map_or(1.0, |m| m.free.max(1) as f64),
                })
                .collect();
            if shares.iter().all(|&x| x == 0.0) {
                shares = vec![1.0; n_dev];
            }
        }
        let sum: f64 = shares.iter().sum();
        let mut acc = 0.0;
        Ok(shares
            .iter()
            .map(|x| {
                acc += x;
                (acc / sum) as f32
            })
            .collect())
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

#[cfg(test)]
mod tests {
    use super::*;
    use strata::backend::Backend;
    use strata::testkit::TestBackend;

    fn devices(n: usize) -> Devices {
        Devices::new(
            (0..n)
                .map(|i| TestBackend::device(&format!("FAKE{i}"), |_| true, 1).device())
                .collect(),
        )
        .unwrap()
    }

    fn map(spec: &PlacementSpec, n_layer: usize, n_dev: usize) -> (Vec<usize>, usize) {
        let m = spec.layer_map(n_layer, &devices(n_dev)).unwrap();
        (m.layers, m.output)
    }

    fn ngl(n: i32) -> PlacementSpec {
        PlacementSpec {
            n_gpu_layers: n,
            ..Default::default()
        }
    }

    #[test]
    fn ngl_counts_the_output_layer_as_llama_cpp_does() {
        // 30 blocks + output, -ngl 10: blocks 21..29 and the output (llama.cpp)
        let (layers, out) = map(&ngl(10), 30, 1);
        let on_dev: Vec<usize> = (0..30).filter(|&i| layers[i] == 0).collect();
        assert_eq!((on_dev, out), ((21..30).collect::<Vec<_>>(), 0));
        assert_eq!(map(&ngl(1), 4, 1), (vec![1; 4], 0));
        assert_eq!(map(&ngl(0), 4, 1), (vec![1; 4], 1));
        for all in [5, 6, 999, -1, -7] {
            assert_eq!(map(&ngl(all), 4, 1), (vec![0; 4], 0), "-ngl {all}");
        }
        // no device: nothing to offload to
        assert_eq!(map(&ngl(99), 4, 0), (vec![0; 4], 0));
    }

    #[test]
    fn tensor_split_and_split_modes_spread_layers() {
        let ts = |v: &[f32]| PlacementSpec {
            n_gpu_layers: -1,
            tensor_split: v.to_vec(),
            ..Default::default()
        };
        // 7 blocks + output over 3:1 -> 6 layers on FAKE0, 2 on FAKE1
        assert_eq!(map(&ts(&[3.0, 1.0]), 7, 2), (vec![0, 0, 0, 0, 0, 0, 1], 1));
        assert_eq!(map(&ts(&[0.0, 1.0]), 3, 2), (vec![1, 1, 1], 1));
        // one share given for two devices: the second gets none
        assert_eq!(map(&ts(&[1.0]), 3, 2), (vec![0, 0, 0], 0));
        let none = |mg| PlacementSpec {
            n_gpu_layers: -1,
            split_mode: SplitMode::None,
            main_device: mg,
            ..Default::default()
        };
        assert_eq!(map(&none(1), 3, 2), (vec![1, 1, 1], 1));
        assert_eq!(map(&none(0), 3, 2), (vec![0, 0, 0], 0));
        for bad in [none(2), ts(&[1.0, 1.0, 1.0]), ts(&[-1.0]), ts(&[f32::NAN])] {
            let e = bad.layer_map(3, &devices(2)).unwrap_err().to_string();
            assert!(e.contains("-mg") || e.contains("-ts"), "{e}");
        }
    }
}
