//! The CPU's instruction-set levels: one type ([`Isa`]) for every kernel
//! family, detected once per process, and one kernel table per level.
//!
//! [`detected`] is the highest level this CPU runs; [`active`] is that level
//! or a lower one forced with the environment variable `STRATA_ISA`
//! (`scalar`, `avx2`, `avxvnni`, `avx512`, `vnni`, `amx`, `neon`), read once per
//! process.
//!
//! **Dispatch.** Every kernel is picked one way: from its level's `Table`,
//! which holds each family's entries at that level (the quantized dot
//! products and quantizers of [`crate::quant::simd`], the packed matmul
//! tiles, the f32 row kernels of [`crate::cpu::vector`], the float GEMM,
//! attention), function pointers built once per level on first use
//! (`table(isa)`; `None` for a level this CPU cannot run). Each level's
//! module declares its own entries in one place: a `table!` list in
//! `quant/simd/`, a `*_table` function per level in `quant/packed/`, and
//! for the f32 families the consts `AVX2` and `AVX512` beside their
//! `per_level!` instances (`cpu/vector/x86.rs`, `cpu/ops/matmul_float/x86.rs`,
//! `cpu/ops/attn/x86.rs`). A family's `own(isa)` names a level's entries,
//! and wherever a level has none, its table takes [`Isa::lower`]'s: the
//! AVX-VNNI level runs AVX2's f32 kernels, VNNI and AMX the AVX-512
//! level's. Callers look the table up once per op or row and call through
//! the pointers; a generic kernel is one entry per instantiation.
//!
//! The f32 kernels (vector math, float GEMM, attention) are written once
//! over the lane abstraction of `x86` (x86-64 only) and instantiated per
//! lanes level by its `per_level!`.

use crate::{Error, Result};
use std::sync::OnceLock;

#[cfg(target_arch = "aarch64")]
pub(crate) mod aarch64;
pub mod cache;
#[cfg(target_arch = "x86_64")]
pub(crate) mod x86;

/// An instruction-set level with its own kernels, ordered from lowest to
/// highest within an architecture.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Isa {
    /// The portable scalar reference.
    Scalar,
    /// x86-64 AVX2 + FMA + F16C.
    Avx2,
    /// x86-64 AVX2 level plus AVX-VNNI (the 256-bit, VEX-encoded
    /// `vpdpbusd`: Intel client cores since Alder Lake, Sapphire Rapids and
    /// later Xeons, AMD Zen 5). Not implied by the AVX-512 levels (Zen 4
    /// and Ice Lake have AVX-512 VNNI but not AVX-VNNI): a CPU runs it only
    /// when it has the feature ([`Isa::is_supported`]).
    AvxVnni,
    /// x86-64 AVX2 level plus AVX-512 F, BW and VL.
    Avx512,
    /// x86-64 AVX-512 level plus AVX-512 VNNI (`vpdpbusd`).
    Vnni,
    /// x86-64 VNNI level plus AMX-TILE and AMX-INT8 (Sapphire Rapids and
    /// later Xeons), on Linux once the kernel has granted this process the
    /// tile data state (`arch_prctl(ARCH_REQ_XCOMP_PERM)`, requested at
    /// detection). Everything but the packed K-quant matmuls of 16 or more
    /// columns runs the VNNI level's kernels.
    Amx,
    /// aarch64 Advanced SIMD.
    Neon,
}

impl Isa {
    /// Every level, lowest first.
    pub const ALL: [Isa; 7] = [
        Isa::Scalar,
        Isa::Avx2,
        Isa::AvxVnni,
        Isa::Avx512,
        Isa::Vnni,
        Isa::Amx,
        Isa::Neon,
    ];

    /// The name `STRATA_ISA` accepts for this level.
    pub const fn name(self) -> &'static str {
        match self {
            Isa::Scalar => "scalar",
            Isa::Avx2 => "avx2",
            Isa::AvxVnni => "avxvnni",
            Isa::Avx512 => "avx512",
            Isa::Vnni => "vnni",
            Isa::Amx => "amx",
            Isa::Neon => "neon",
        }
    }

    /// True if this CPU can run this level's kernels.
    pub fn is_supported(self) -> bool {
        runs(self, detected())
    }

    /// The next lower level on the same architecture (scalar for the lowest).
    pub const fn lower(self) -> Isa {
        match self {
            Isa::Amx => Isa::Vnni,
            Isa::Vnni => Isa::Avx512,
            Isa::Avx512 | Isa::AvxVnni => Isa::Avx2,
            Isa::Avx2 | Isa::Neon | Isa::Scalar => Isa::Scalar,
        }
    }

    /// True if both levels belong to the same architecture (scalar to all).
    fn same_arch(self, other: Isa) -> bool {
        let neon = |i: Isa| i == Isa::Neon;
        self == Isa::Scalar || other == Isa::Scalar || neon(self) == neon(other)
    }
}

impl std::fmt::Display for Isa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Isa {
    type Err = Error;

    /// Parses a level name (case-insensitive, surrounding spaces ignored).
    fn from_str(s: &str) -> Result<Isa> {
        let t = s.trim();
        Isa::ALL
            .into_iter()
            .find(|i| i.name().eq_ignore_ascii_case(t))
            .ok_or_else(|| Error::BadValue {
                arg: "STRATA_ISA".into(),
                value: format!("{s:?}"),
                expected: "an instruction-set level: one of scalar, avx2, avxvnni, avx512, \
                               vnni, amx, neon"
                    .into(),
            })
    }
}

/// The highest level this CPU supports (detected once, then cached).
pub fn detected() -> Isa {
    static DETECTED: OnceLock<Isa> = OnceLock::new();
    *DETECTED.get_or_init(detect)
}

#[cfg(target_arch = "x86_64")]
fn detect() -> Isa {
    use std::arch::is_x86_feature_detected as has;
    let avx2 = has!("avx2") && has!("fma") && has!("f16c");
    let avx512 = avx2 && has!("avx512f") && has!("avx512bw") && has!("avx512vl");
    if avx512 && has!("avx512vnni") && x86::amx::usable() {
        Isa::Amx
    } else if avx512 && has!("avx512vnni") {
        Isa::Vnni
    } else if avx512 {
        Isa::Avx512
    } else if avx2 && has!("avxvnni") {
        Isa::AvxVnni
    } else if avx2 {
        Isa::Avx2
    } else {
        Isa::Scalar
    }
}

#[cfg(target_arch = "aarch64")]
fn detect() -> Isa {
    if std::arch::is_aarch64_feature_detected!("neon") {
        Isa::Neon
    } else {
        Isa::Scalar
    }
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
fn detect() -> Isa {
    Isa::Scalar
}

/// True if a CPU whose highest level is `detected` runs `want`: the levels
/// below it on its architecture, except that AVX-VNNI, which the AVX-512
/// levels do not imply, also needs this CPU's `avxvnni` feature when it is
/// not the detected level itself.
fn runs(want: Isa, detected: Isa) -> bool {
    let below = want <= detected && want.same_arch(detected);
    match want {
        Isa::AvxVnni => below && (detected == Isa::AvxVnni || has_avx_vnni()),
        _ => below,
    }
}

/// True if this CPU has AVX-VNNI (always false off x86-64).
fn has_avx_vnni() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avxvnni")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// The level to use given the detected level and an optional `STRATA_ISA`
/// value: the requested level if the CPU supports it, else the detected one.
///
/// Errors: [`Error::BadValue`] for an unknown name, or for a level this CPU
/// cannot run (naming both).
pub fn resolve(requested: Option<&str>, detected: Isa) -> Result<Isa> {
    let Some(s) = requested else {
        return Ok(detected);
    };
    let want: Isa = s.parse()?;
    if runs(want, detected) {
        Ok(want)
    } else {
        Err(Error::BadValue {
            arg: "STRATA_ISA".into(),
            value: format!("{s:?}"),
            expected: format!("a level this CPU supports, up to {detected}"),
        })
    }
}

/// The level the dispatched kernels use: [`detected`], or the lower level
/// `STRATA_ISA` names. Read once per process; an invalid value is logged
/// (with [`tracing`]) and ignored.
pub fn active() -> Isa {
    static ACTIVE: OnceLock<Isa> = OnceLock::new();
    *ACTIVE.get_or_init(|| {
        let var = std::env::var("STRATA_ISA").ok();
        resolve(var.as_deref(), detected()).unwrap_or_else(|e| {
            tracing::warn!("{e}; using {}", detected());
            detected()
        })
    })
}

/// Every kernel family's entries at one level, with the fallback to the
/// lower levels resolved (module docs). Built only for a level this CPU
/// runs, so any entry may assume its level's CPU features.
pub(crate) struct Table {
    /// The quantized dot products and row quantizers, per type.
    pub(crate) quant: crate::quant::simd::Kernels,
    /// The packed-weight tile kernels, per type.
    pub(crate) packed: crate::quant::packed::Table,
    /// The f32 row kernels (conversions, exponentials, activations).
    pub(crate) vector: crate::cpu::vector::Kernels,
    /// The float GEMM and GEMV (all or none).
    pub(crate) gemm: Option<crate::cpu::ops::matmul_float::Kernels>,
    /// FLASH_ATTN_EXT's lane kernels (all or none).
    #[cfg(target_arch = "x86_64")]
    pub(crate) attn: Option<crate::cpu::ops::attn::x86::SimdKernels>,
}

impl Table {
    /// Level `isa`'s own entries, without the fallback.
    fn own(isa: Isa) -> Table {
        Table {
            quant: crate::quant::simd::own(isa),
            packed: crate::quant::packed::own(isa),
            vector: crate::cpu::vector::own(isa),
            gemm: crate::cpu::ops::matmul_float::own(isa),
            #[cfg(target_arch = "x86_64")]
            attn: crate::cpu::ops::attn::x86::own(isa),
        }
    }

    /// These entries, with `lower`'s in the places these have none.
    fn over(self, lower: &Table) -> Table {
        Table {
            quant: self.quant.over(&lower.quant),
            packed: self.packed.over(&lower.packed),
            vector: self.vector.over(&lower.vector),
            gemm: self.gemm.or(lower.gemm),
            #[cfg(target_arch = "x86_64")]
            attn: self.attn.or(lower.attn),
        }
    }
}

/// The kernel table of level `isa`, built on first use; `None` if this
/// CPU cannot run `isa`.
#[inline]
pub(crate) fn table(isa: Isa) -> Option<&'static Table> {
    static LEVELS: [OnceLock<Table>; Isa::ALL.len()] = [const { OnceLock::new() }; Isa::ALL.len()];
    let cell = &LEVELS[isa as usize];
    // A table is only ever built for a level this CPU runs.
    if let Some(t) = cell.get() {
        return Some(t);
    }
    if !isa.is_supported() {
        return None;
    }
    Some(cell.get_or_init(|| {
        let own = Table::own(isa);
        // (Scalar is its own lower level: no fallback, and no reentry.)
        match isa {
            Isa::Scalar => own,
            _ => match table(isa.lower()) {
                Some(lower) => own.over(lower),
                None => own,
            },
        }
    }))
}
