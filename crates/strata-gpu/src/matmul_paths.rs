//! Which kernels MUL_MAT runs prompts (more than four columns) on, and
//! MUL_MAT_ID prompts (more than four columns per expert, eight on a CPU
//! device), chosen per device when it is opened from what the adapter
//! offers:
//!
//! * **int-dot**: weights Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K and Q6_K. A first
//!   dispatch quantizes the activations once into 8-bit blocks of 32 as the
//!   CPU's Q8_0 / Q8_1 are (same rounding), a second multiplies them with the
//!   unpacked weight blocks by WGSL's `dot4I8Packed`, sums each block exactly
//!   in i32 and scales in f32. WGSL's `packed_4x8_integer_dot_product` needs
//!   no wgpu feature: naga translates `dot4I8Packed` for every backend, on
//!   Vulkan to `OpSDot` where wgpu enabled the device's integer dot product
//!   (`shaderIntegerDotProduct`, core in 1.3), else to shifts and multiplies.
//!   So it runs on any adapter, and is chosen where it is fast: a Vulkan GPU
//!   that reports the packed signed 8-bit dot product accelerated
//!   (`integerDotProduct4x8BitPackedSignedAccelerated`, as ggml's Vulkan
//!   backend asks), or a Vulkan CPU device with `shaderIntegerDotProduct`
//!   (llvmpipe, which reports it unaccelerated: there the kernel still runs
//!   a 512-column Q4_0 product 2.5× faster than f32 tiles, measured).
//! * **f16 tiles**: weights F16 and BF16, the 64 × 64 tiled kernel with its
//!   tiles in f16 workgroup memory (half the bytes; products and sums f32).
//!   On where the adapter has `SHADER_F16`, unless it is a CPU device
//!   (llvmpipe: no faster there, measured). F16 weights go into f16 exactly
//!   and the CPU rounds their activations to f16 too; BF16 weights within
//!   f16's normal range (6.1e-5 to 65504 in magnitude) go in exactly
//!   (smaller ones lose under 3e-8), and their activations, which the CPU
//!   rounds to bf16, round to f16: finer, but past 65504 infinite.
//! * **f32 tiles**: everything else (F32 weights, whose values and precision
//!   an f16 tile would not keep, and the other quantized types): the tiled
//!   kernel with weights dequantized into f32 workgroup memory. Always there.
//!
//! The environment variable `STRATA_GPU_MATMUL` (read when a device is
//! opened) overrides the choice: `auto`, or a comma-separated list of the
//! paths to use besides f32 tiles (`int-dot`, `f16-tiles`; `f32-tiles` alone
//! turns both off). [`GpuContext::set_matmul_paths`] changes it for one
//! device.

use std::fmt;
use std::sync::atomic::{AtomicU8, Ordering};

use strata::{Error, Result};

use crate::context::GpuContext;

/// The kernels MUL_MAT runs prompts on (f32 tiles, for what the others do
/// not take, always).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct MatmulPaths {
    /// Quantized weights of the legacy types, Q4_K and Q6_K through 8-bit
    /// activations and integer dot products.
    pub int_dot: bool,
    /// F16 and BF16 weights through f16 workgroup tiles (needs `SHADER_F16`).
    pub f16_tiles: bool,
}

impl MatmulPaths {
    /// int-dot (and f32 tiles for the rest).
    pub const INT_DOT: MatmulPaths = MatmulPaths {
        int_dot: true,
        f16_tiles: false,
    };
    /// f16 tiles (and f32 tiles for the rest).
    pub const F16_TILES: MatmulPaths = MatmulPaths {
        int_dot: false,
        f16_tiles: true,
    };
    /// f32 tiles only.
    pub const F32_TILES: MatmulPaths = MatmulPaths {
        int_dot: false,
        f16_tiles: false,
    };
    /// Each path on its own, as tests run every one.
    pub const EACH: [MatmulPaths; 3] = [
        MatmulPaths::INT_DOT,
        MatmulPaths::F16_TILES,
        MatmulPaths::F32_TILES,
    ];

    /// The paths' short names, in the order MUL_MAT tries them (the last,
    /// `"f32 tiles"`, always there).
    pub fn names(&self) -> Vec<&'static str> {
        let mut v = Vec::new();
        if self.int_dot {
            v.push("int-dot");
        }
        if self.f16_tiles {
            v.push("f16 tiles");
        }
        v.push("f32 tiles");
        v
    }

    fn bits(self) -> u8 {
        u8::from(self.int_dot) | u8::from(self.f16_tiles) << 1
    }

    fn from_bits(b: u8) -> MatmulPaths {
        MatmulPaths {
            int_dot: b & 1 != 0,
            f16_tiles: b & 2 != 0,
        }
    }
}

impl fmt::Display for MatmulPaths {
    /// The names joined by commas: `int-dot, f16 tiles, f32 tiles`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.names().join(", "))
    }
}

impl std::str::FromStr for MatmulPaths {
    type Err = Error;

    /// Parses a comma-separated list of `int-dot`, `f16-tiles` (or `f16
    /// tiles`) and `f32-tiles` (case-insensitive; f32 tiles are always
    /// used). `auto` is not a set of paths: see [`GpuContext::matmul_paths`].
    fn from_str(s: &str) -> Result<MatmulPaths> {
        let mut p = MatmulPaths::default();
        for item in s.split(',') {
            match item.trim().to_ascii_lowercase().replace(' ', "-").as_str() {
                "int-dot" => p.int_dot = true,
                "f16-tiles" => p.f16_tiles = true,
                "f32-tiles" => {}
                _ => {
                    return Err(Error::BadValue {
                        arg: "STRATA_GPU_MATMUL".into(),
                        value: format!("{s:?}"),
                        expected: "auto, or a comma-separated list of int-dot, f16-tiles, \
                                   f32-tiles"
                            .into(),
                    })
                }
            }
        }
        Ok(p)
    }
}

/// A device's current paths (set once when opened, changed by
/// [`GpuContext::set_matmul_paths`]).
#[derive(Debug)]
pub(crate) struct PathCell(AtomicU8);

impl PathCell {
    /// The paths for `adapter` opened with `features`: `STRATA_GPU_MATMUL`'s
    /// where it is set and valid (less f16 tiles without `SHADER_F16`), else
    /// what the adapter offers.
    pub(crate) fn choose(adapter: &wgpu::Adapter, features: wgpu::Features) -> PathCell {
        let f16 = features.contains(wgpu::Features::SHADER_F16);
        let cpu = adapter.get_info().device_type == wgpu::DeviceType::Cpu;
        let auto = || {
            let (enabled, accelerated) = integer_dot(adapter);
            MatmulPaths {
                int_dot: accelerated || (cpu && enabled),
                f16_tiles: f16 && !cpu,
            }
        };
        let p = match std::env::var("STRATA_GPU_MATMUL") {
            Ok(v) if !v.trim().eq_ignore_ascii_case("auto") => match v.parse::<MatmulPaths>() {
                Ok(p) => MatmulPaths {
                    f16_tiles: p.f16_tiles && f16,
                    ..p
                },
                Err(e) => {
                    tracing::warn!("{e}; using the adapter's choice");
                    auto()
                }
            },
            _ => auto(),
        };
        PathCell(AtomicU8::new(p.bits()))
    }
}

impl GpuContext {
    /// The kernels MUL_MAT runs prompts on, on this device (`Display`:
    /// `"int-dot, f16 tiles, f32 tiles"`; [`MatmulPaths::names`]).
    pub fn matmul_paths(&self) -> MatmulPaths {
        MatmulPaths::from_bits(self.matmul.0.load(Ordering::Relaxed))
    }

    /// Chooses the kernels MUL_MAT runs prompts on, for graphs planned from
    /// now on (a backend replays graphs it planned before as they were).
    /// int-dot runs on every adapter (where it is not accelerated, slowly).
    ///
    /// Errors: [`Error::Unsupported`] for f16 tiles on a device without
    /// `SHADER_F16`.
    pub fn set_matmul_paths(&self, paths: MatmulPaths) -> Result<()> {
        if paths.f16_tiles && !self.has_f16() {
            return Err(Error::Unsupported {
                backend: self.name.clone(),
                what: "f16 tiles on an adapter without SHADER_F16".into(),
            });
        }
        self.matmul.0.store(paths.bits(), Ordering::Relaxed);
        Ok(())
    }
}

/// Whether `adapter` is a Vulkan device with integer dot product enabled
/// (so naga emits `OpSDot`), and whether it reports the packed signed 8-bit
/// one accelerated.
fn integer_dot(adapter: &wgpu::Adapter) -> (bool, bool) {
    use ash::vk;
    // SAFETY: as in `context::vulkan_heap`: the hal adapter's instance and
    // physical device (valid while `adapter` lives) are only queried, and
    // the `*2` queries only where the instance is Vulkan 1.1 or later.
    unsafe {
        let Some(hal) = adapter.as_hal::<wgpu::hal::api::Vulkan>() else {
            return (false, false);
        };
        let shared = hal.shared_instance();
        let caps = hal.physical_device_capabilities();
        let core = caps.properties().api_version >= vk::API_VERSION_1_3;
        let ext = caps.supports_extension(ash::khr::shader_integer_dot_product::NAME);
        if shared.instance_api_version() < vk::API_VERSION_1_1 || !(core || ext) {
            return (false, false);
        }
        let instance = shared.raw_instance();
        let pd = hal.raw_physical_device();
        let mut feat = vk::PhysicalDeviceShaderIntegerDotProductFeatures::default();
        let mut f2 = vk::PhysicalDeviceFeatures2::default().push_next(&mut feat);
        instance.get_physical_device_features2(pd, &mut f2);
        let enabled = feat.shader_integer_dot_product != 0;
        let mut props = vk::PhysicalDeviceShaderIntegerDotProductProperties::default();
        let mut p2 = vk::PhysicalDeviceProperties2::default().push_next(&mut props);
        instance.get_physical_device_properties2(pd, &mut p2);
        let accelerated = props.integer_dot_product4x8_bit_packed_signed_accelerated != 0;
        (enabled, enabled && accelerated)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_and_print() {
        let p: MatmulPaths = "int-dot, F16 tiles".parse().unwrap();
        assert_eq!(
            p,
            MatmulPaths {
                int_dot: true,
                f16_tiles: true
            }
        );
        assert_eq!(p.to_string(), "int-dot, f16 tiles, f32 tiles");
        assert_eq!(
            "f32-tiles".parse::<MatmulPaths>().unwrap(),
            MatmulPaths::default()
        );
        assert!("int8".parse::<MatmulPaths>().is_err());
        for b in 0..4 {
            assert_eq!(MatmulPaths::from_bits(b).bits(), b);
        }
    }
}
