//! The data cache sizes one core sees (L1d, L2, L3), detected once per
//! process, and the matmul blocking derived from them ([`Blocking`]), so
//! that the kernels block for the host's caches and not for one vendor's
//! (Zen 3's 512 KiB L2 against a Xeon's 2 MiB).
//!
//! Detection ([`detected`]) takes each size from the first source that
//! has it:
//!
//! 1. the environment variable `STRATA_CACHE`, comma-separated
//!    `key=size` pairs with keys `l1d` (or `l1`), `l2`, `l3` and sizes in
//!    bytes with an optional `K` / `M` / `G` suffix (`KiB` etc. also read;
//!    binary units), e.g. `STRATA_CACHE=l1d=32K,l2=512K,l3=32M` to run as on
//!    AMD Zen 3; keys left out are detected;
//! 2. Linux's `/sys/devices/system/cpu/cpu0/cache/index*/{level,type,size}`
//!    (data and unified caches);
//! 3. on x86-64, CPUID leaf 4 (Intel) or 0x8000001D (AMD);
//! 4. [`CacheSizes::DEFAULT`] (sizes whose blocking is the one tuned on a
//!    Xeon with 2 MiB of L2).
//!
//! A malformed value (in the variable or in sysfs) is never fatal: it is
//! logged (with [`tracing`]) as a [`CacheError`] and the next source is
//! used. Sizes are of the cache instance core 0 uses: L3 is usually shared
//! by several cores; L2 may be shared by a core's SMT threads.
//!
//! ```
//! use strata::isa::cache::{parse_override, Blocking, CacheSizes};
//! let zen3 = parse_override("l1d=32K,l2=512K,l3=32M")?.over(CacheSizes::DEFAULT);
//! assert_eq!(zen3.l2, 512 << 10);
//! let b = Blocking::for_caches(zen3);
//! assert!(b.packed_act_bytes < Blocking::for_caches(CacheSizes::DEFAULT).packed_act_bytes);
//! # Ok::<(), strata::isa::cache::CacheError>(())
//! ```

use std::fmt;
use std::path::Path;
use std::sync::OnceLock;

/// The environment variable that overrides detected cache sizes.
pub const ENV: &str = "STRATA_CACHE";

/// Data cache sizes in bytes (each at least 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CacheSizes {
    /// Level-1 data cache.
    pub l1d: usize,
    /// Level-2 cache (unified).
    pub l2: usize,
    /// Last-level (level-3) cache.
    pub l3: usize,
}

impl CacheSizes {
    /// What a size that no source gives is taken to be: 32 KiB L1d, 2 MiB
    /// L2, 32 MiB L3. With this L2 the blocking is the one the kernels were
    /// tuned with (a Xeon with 2 MiB of L2 per core).
    pub const DEFAULT: CacheSizes = CacheSizes {
        l1d: 32 << 10,
        l2: 2 << 20,
        l3: 32 << 20,
    };
}

impl fmt::Display for CacheSizes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "L1d {}, L2 {}, L3 {}",
            Size(self.l1d),
            Size(self.l2),
            Size(self.l3)
        )
    }
}

/// A byte count printed in KiB, MiB or GiB where it is a whole number of them.
struct Size(usize);

impl fmt::Display for Size {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.0;
        for (shift, unit) in [(30, "GiB"), (20, "MiB"), (10, "KiB")] {
            if n >= 1 << shift && n.is_multiple_of(1 << shift) {
                return write!(f, "{} {unit}", n >> shift);
            }
        }
        write!(f, "{n} B")
    }
}

/// Some of the three sizes (what one source gives).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PartialSizes {
    /// Level-1 data cache, if given.
    pub l1d: Option<usize>,
    /// Level-2 cache, if given.
    pub l2: Option<usize>,
    /// Level-3 cache, if given.
    pub l3: Option<usize>,
}

impl PartialSizes {
    /// These sizes, the others from `rest`.
    pub fn over(self, rest: CacheSizes) -> CacheSizes {
        CacheSizes {
            l1d: self.l1d.unwrap_or(rest.l1d),
            l2: self.l2.unwrap_or(rest.l2),
            l3: self.l3.unwrap_or(rest.l3),
        }
    }

    /// These sizes, the others from `rest`'s.
    fn or(self, rest: PartialSizes) -> PartialSizes {
        PartialSizes {
            l1d: self.l1d.or(rest.l1d),
            l2: self.l2.or(rest.l2),
            l3: self.l3.or(rest.l3),
        }
    }

    /// True when no size is given.
    pub fn is_empty(&self) -> bool {
        *self == PartialSizes::default()
    }

    /// Records a data or unified cache of `level` (the first one of a level wins).
    fn record(&mut self, level: u32, bytes: usize) {
        let slot = match level {
            1 => &mut self.l1d,
            2 => &mut self.l2,
            3 => &mut self.l3,
            _ => return,
        };
        slot.get_or_insert(bytes);
    }
}

/// Why a cache size could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CacheError {
    /// A size that is not a positive number of bytes with an optional
    /// `K` / `M` / `G` suffix (or overflows).
    #[error("{what}: {value:?} is not a cache size (bytes, optionally with K, M or G)")]
    BadSize {
        /// Where the value came from.
        what: String,
        /// The value.
        value: String,
    },
    /// A `STRATA_CACHE` entry that is not `key=size`, or whose key is not
    /// `l1d`, `l1`, `l2` or `l3`.
    #[error("{ENV}: entry {entry:?} is not one of l1d=SIZE, l2=SIZE, l3=SIZE")]
    BadEntry {
        /// The entry.
        entry: String,
    },
    /// A sysfs cache entry whose `level` or `type` cannot be read.
    #[error("{path}: {why}")]
    BadSysfs {
        /// The file.
        path: String,
        /// What is wrong with it.
        why: String,
    },
}

/// Parses a cache size: a positive integer of bytes with an optional
/// binary suffix `K`, `M`, `G` (case-insensitive; `KB` / `KiB` also read),
/// as sysfs (`2048K`) and `STRATA_CACHE` write it. `what` names the source
/// in the error.
pub fn parse_size(what: &str, s: &str) -> Result<usize, CacheError> {
    let bad = || CacheError::BadSize {
        what: what.to_string(),
        value: s.to_string(),
    };
    let t = s.trim();
    let digits = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(digits);
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        _ => return Err(bad()),
    };
    let n: usize = num.parse().map_err(|_| bad())?;
    match n.checked_mul(1 << shift) {
        Some(b) if b > 0 => Ok(b),
        _ => Err(bad()),
    }
}

/// Parses a `STRATA_CACHE` value (`l1d=32K,l2=512K,l3=32M`; any subset, in
/// any order; blank entries skipped; a later entry for a key wins).
pub fn parse_override(s: &str) -> Result<PartialSizes, CacheError> {
    let mut p = PartialSizes::default();
    for entry in s.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let bad = || CacheError::BadEntry {
            entry: entry.to_string(),
        };
        let (key, value) = entry.split_once('=').ok_or_else(bad)?;
        let key = key.trim().to_ascii_lowercase();
        let slot = match key.as_str() {
            "l1d" | "l1" => &mut p.l1d,
            "l2" => &mut p.l2,
            "l3" => &mut p.l3,
            _ => return Err(bad()),
        };
        *slot = Some(parse_size(&format!("{ENV} {key}"), value)?);
    }
    Ok(p)
}

/// Reads the caches listed under `dir` (Linux's
/// `/sys/devices/system/cpu/cpuN/cache`: directories `index*` holding
/// `level`, `type` and `size`): the first data or unified cache of each
/// level 1–3; instruction caches are skipped. A missing directory gives no
/// sizes; an entry that exists but cannot be parsed is an error.
pub fn from_sysfs(dir: &Path) -> Result<PartialSizes, CacheError> {
    let mut p = PartialSizes::default();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(p);
    };
    let mut dirs: Vec<_> = entries
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|d| {
            d.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("index"))
        })
        .collect();
    dirs.sort();
    for d in dirs {
        let read = |name: &str| -> Result<String, CacheError> {
            let path = d.join(name);
            std::fs::read_to_string(&path)
                .map(|s| s.trim().to_string())
                .map_err(|e| CacheError::BadSysfs {
                    path: path.display().to_string(),
                    why: e.to_string(),
                })
        };
        let ty = read("type")?;
        if ty.eq_ignore_ascii_case("instruction") {
            continue;
        }
        if !(ty.eq_ignore_ascii_case("data") || ty.eq_ignore_ascii_case("unified")) {
            return Err(CacheError::BadSysfs {
                path: d.join("type").display().to_string(),
                why: format!("unknown cache type {ty:?}"),
            });
        }
        let level_s = read("level")?;
        let level: u32 = level_s.parse().map_err(|_| CacheError::BadSysfs {
            path: d.join("level").display().to_string(),
            why: format!("{level_s:?} is not a cache level"),
        })?;
        let size = parse_size(&d.join("size").display().to_string(), &read("size")?)?;
        p.record(level, size);
    }
    Ok(p)
}

/// Decodes one CPUID leaf 4 / 0x8000001D sub-leaf (the two share the
/// layout): `Some((level, is_data_or_unified, bytes))`, or `None` past the
/// last cache (type 0).
pub fn decode_cpuid_cache(eax: u32, ebx: u32, ecx: u32) -> Option<(u32, bool, usize)> {
    let ty = eax & 0x1f;
    if ty == 0 {
        return None;
    }
    let level = (eax >> 5) & 7;
    let line = (ebx & 0xfff) as usize + 1;
    let parts = ((ebx >> 12) & 0x3ff) as usize + 1;
    let ways = (ebx >> 22) as usize + 1;
    let sets = ecx as usize + 1;
    Some((level, ty == 1 || ty == 3, ways * parts * line * sets))
}

/// The caches CPUID describes (leaf 4, else AMD's 0x8000001D).
#[cfg(target_arch = "x86_64")]
fn from_cpuid() -> PartialSizes {
    use std::arch::x86_64::{__cpuid, __cpuid_count};
    let walk = |leaf: u32| {
        let mut p = PartialSizes::default();
        for sub in 0..16 {
            let r = __cpuid_count(leaf, sub);
            let Some((level, data, bytes)) = decode_cpuid_cache(r.eax, r.ebx, r.ecx) else {
                break;
            };
            if data {
                p.record(level, bytes);
            }
        }
        p
    };
    let mut p = PartialSizes::default();
    if __cpuid(0).eax >= 4 {
        p = walk(4);
    }
    if p.is_empty() && __cpuid(0x8000_0000).eax >= 0x8000_001d {
        p = walk(0x8000_001d);
    }
    p
}

#[cfg(not(target_arch = "x86_64"))]
fn from_cpuid() -> PartialSizes {
    PartialSizes::default()
}

/// Where the sizes of [`detected`] came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// Linux sysfs.
    Sysfs,
    /// The CPUID instruction.
    Cpuid,
    /// No source: [`CacheSizes::DEFAULT`].
    Default,
}

/// The detected sizes, and how they were found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Detection {
    /// The sizes the kernels block for (the override applied).
    pub sizes: CacheSizes,
    /// The source of the detected sizes (the first that gave any).
    pub source: Source,
    /// The sizes `STRATA_CACHE` set, if it was set (and valid).
    pub overridden: PartialSizes,
}

impl fmt::Display for Detection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let src = match self.source {
            Source::Sysfs => "sysfs",
            Source::Cpuid => "CPUID",
            Source::Default => "defaults",
        };
        write!(f, "{} ({src}", self.sizes)?;
        if !self.overridden.is_empty() {
            write!(f, "; {ENV} set")?;
        }
        write!(f, ")")
    }
}

/// Combines the sources (see the module docs): `env`, the `STRATA_CACHE`
/// value if set; `sysfs` and `cpuid`, the sources' results. Errors are
/// returned beside the result (for the caller to log), never fatal.
pub fn combine(
    env: Option<&str>,
    sysfs: Result<PartialSizes, CacheError>,
    cpuid: impl FnOnce() -> PartialSizes,
) -> (Detection, Vec<CacheError>) {
    let mut errors = Vec::new();
    let overridden = match env.map(parse_override) {
        Some(Ok(p)) => p,
        Some(Err(e)) => {
            errors.push(e);
            PartialSizes::default()
        }
        None => PartialSizes::default(),
    };
    let sysfs = sysfs.unwrap_or_else(|e| {
        errors.push(e);
        PartialSizes::default()
    });
    let (found, source) = if !sysfs.is_empty() {
        // sizes sysfs lacks (an L3 on some VMs) still come from CPUID
        let cpu = cpuid();
        (sysfs.or(cpu), Source::Sysfs)
    } else {
        let cpu = cpuid();
        if cpu.is_empty() {
            (cpu, Source::Default)
        } else {
            (cpu, Source::Cpuid)
        }
    };
    let sizes = overridden.over(found.over(CacheSizes::DEFAULT));
    (
        Detection {
            sizes,
            source,
            overridden,
        },
        errors,
    )
}

/// This host's cache sizes, with `STRATA_CACHE` applied: detected once per
/// process; problems are logged as warnings and the next source used.
pub fn detection() -> &'static Detection {
    static DETECTED: OnceLock<Detection> = OnceLock::new();
    DETECTED.get_or_init(|| {
        let env = std::env::var(ENV).ok();
        let sysfs = from_sysfs(Path::new("/sys/devices/system/cpu/cpu0/cache"));
        let (d, errors) = combine(env.as_deref(), sysfs, from_cpuid);
        for e in errors {
            tracing::warn!("cache sizes: {e}; using the next source");
        }
        d
    })
}

/// This host's cache sizes ([`detection`]'s).
pub fn detected() -> CacheSizes {
    detection().sizes
}

/// The blocking of the CPU matmuls for given cache sizes (a pure function
/// of them, [`Blocking::for_caches`]). Blocking only groups work that is
/// computed the same way in any grouping: every output's arithmetic, and
/// so its bits, does not depend on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Blocking {
    /// Float GEMM: most bytes of packed `b` (activation) panels one pass
    /// over a K block runs against the rows of `a` (the panels stay in L2
    /// while the rows go by).
    pub gemm_b_bytes: usize,
    /// Packed quantized matmul: bytes of prepared activations per column
    /// block (kept in L2 while the 16-row weight groups stream past).
    pub packed_act_bytes: usize,
}

impl Blocking {
    /// Largest [`Blocking::packed_act_bytes`]: the block tuned on a Xeon
    /// with 2 MiB of L2 (an eighth of it).
    pub const PACKED_ACT_MAX: usize = 256 << 10;
    /// Smallest [`Blocking::packed_act_bytes`].
    pub const PACKED_ACT_MIN: usize = 32 << 10;

    /// The blocking for `c`:
    ///
    /// - float GEMM: the `b` panels of one pass fill at most half of L2
    ///   (the other half for the `a` panels, the output and the sibling SMT
    ///   thread's lines). With 2 MiB (1 MiB of panels) a 512-column batch
    ///   is one pass, as the GEMM ran before it blocked by cache size; with
    ///   Zen 3's 512 KiB it is two (K = 576, K blocks of 192) or three
    ///   (K = 1536, blocks of 256) at the AVX2 level.
    /// - packed quantized matmul: an eighth of L2 of activations per column
    ///   block (the ratio of the 256 KiB tuned on a 2 MiB L2), between
    ///   [`Blocking::PACKED_ACT_MIN`] and [`Blocking::PACKED_ACT_MAX`]:
    ///   256 KiB for 2 MiB and more, 64 KiB for Zen 3's 512 KiB.
    pub fn for_caches(c: CacheSizes) -> Blocking {
        Blocking {
            gemm_b_bytes: (c.l2 / 2).max(1),
            packed_act_bytes: (c.l2 / 8).clamp(Self::PACKED_ACT_MIN, Self::PACKED_ACT_MAX),
        }
    }

    /// The blocking for this host ([`detected`]).
    pub fn detected() -> Blocking {
        static B: OnceLock<Blocking> = OnceLock::new();
        *B.get_or_init(|| Blocking::for_caches(detected()))
    }

    /// Float GEMM: how many `nr`-column panels of `b` one pass over a K
    /// block of `kc` takes (at least 1).
    pub fn gemm_pass_panels(&self, kc: usize, nr: usize) -> usize {
        (self.gemm_b_bytes / (kc.max(1) * nr.max(1) * 4)).max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    const ZEN3: CacheSizes = CacheSizes {
        l1d: 32 << 10,
        l2: 512 << 10,
        l3: 32 << 20,
    };

    #[test]
    fn sizes_parse_as_sysfs_and_the_variable_write_them() {
        for (s, want) in [
            ("48K", 48 << 10),
            ("2048K", 2 << 20),
            (" 266240K\n", 266240 << 10),
            ("32M", 32 << 20),
            ("32mib", 32 << 20),
            ("1G", 1 << 30),
            ("65536", 65536),
            ("512 KiB", 512 << 10),
        ] {
            assert_eq!(parse_size("t", s), Ok(want), "{s:?}");
        }
        for s in [
            "",
            "K",
            "0",
            "0K",
            "-1K",
            "1.5M",
            "12Q",
            "abc",
            "99999999999999999999G",
        ] {
            assert!(
                matches!(parse_size("t", s), Err(CacheError::BadSize { .. })),
                "{s:?}"
            );
        }
    }

    #[test]
    fn the_override_sets_the_sizes_it_names() {
        let p = parse_override("l1d=32K,l2=512K,l3=32M").unwrap();
        assert_eq!(p.over(CacheSizes::DEFAULT), ZEN3);
        let p = parse_override(" L2 = 1M ,").unwrap();
        assert_eq!(
            p,
            PartialSizes {
                l2: Some(1 << 20),
                ..Default::default()
            }
        );
        assert_eq!(parse_override("").unwrap(), PartialSizes::default());
        for bad in ["l4=1M", "l2", "l2=", "l2=big", "=1M", "l2=512K;l3=32M"] {
            assert!(parse_override(bad).is_err(), "{bad:?}");
        }
    }

    /// A fake `cache` directory: `(level, type, size)` per `index*`.
    fn fake_sysfs(name: &str, entries: &[(&str, &str, &str)]) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("strata-cache-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        for (i, (level, ty, size)) in entries.iter().enumerate() {
            let d = dir.join(format!("index{i}"));
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join("level"), format!("{level}\n")).unwrap();
            std::fs::write(d.join("type"), format!("{ty}\n")).unwrap();
            std::fs::write(d.join("size"), format!("{size}\n")).unwrap();
        }
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn sysfs_gives_the_data_caches_of_each_level() {
        let dir = fake_sysfs(
            "zen3",
            &[
                ("1", "Data", "32K"),
                ("1", "Instruction", "32K"),
                ("2", "Unified", "512K"),
                ("3", "Unified", "32768K"),
            ],
        );
        let p = from_sysfs(&dir).unwrap();
        assert_eq!(p.over(CacheSizes::DEFAULT), ZEN3);
        // no L3 listed: that one is not given
        let dir = fake_sysfs("no-l3", &[("1", "Data", "48K"), ("2", "Unified", "2048K")]);
        let p = from_sysfs(&dir).unwrap();
        assert_eq!(p.l3, None);
        assert_eq!(p.l2, Some(2 << 20));
        // no directory at all: nothing, not an error
        assert_eq!(
            from_sysfs(Path::new("/nonexistent/strata/cache")),
            Ok(PartialSizes::default())
        );
    }

    #[test]
    fn malformed_sysfs_is_an_error_not_a_panic() {
        for (name, e) in [
            ("bad-size", ("2", "Unified", "lots")),
            ("bad-level", ("two", "Unified", "512K")),
            ("bad-type", ("2", "Sideways", "512K")),
            ("empty-size", ("2", "Unified", "")),
        ] {
            let dir = fake_sysfs(name, &[("1", "Data", "32K"), e]);
            assert!(from_sysfs(&dir).is_err(), "{name}");
        }
        // an entry without its files
        let dir = fake_sysfs("missing", &[]);
        std::fs::create_dir_all(dir.join("index0")).unwrap();
        assert!(matches!(from_sysfs(&dir), Err(CacheError::BadSysfs { .. })));
    }

    #[test]
    fn sources_combine_field_by_field_and_errors_fall_through() {
        let sysfs = PartialSizes {
            l1d: Some(48 << 10),
            l2: Some(2 << 20),
            l3: None,
        };
        let cpuid = || PartialSizes {
            l3: Some(64 << 20),
            ..Default::default()
        };
        let (d, errs) = combine(Some("l2=512K"), Ok(sysfs), cpuid);
        assert!(errs.is_empty());
        assert_eq!(d.source, Source::Sysfs);
        assert_eq!(
            d.sizes,
            CacheSizes {
                l1d: 48 << 10,
                l2: 512 << 10,
                l3: 64 << 20
            }
        );
        // a bad variable and a bad sysfs: both reported, CPUID then defaults
        let bad = Err(CacheError::BadSysfs {
            path: "x".into(),
            why: "y".into(),
        });
        let (d, errs) = combine(Some("l2=huge"), bad.clone(), PartialSizes::default);
        assert_eq!(errs.len(), 2);
        assert_eq!(d.source, Source::Default);
        assert_eq!(d.sizes, CacheSizes::DEFAULT);
        let (d, _) = combine(None, bad, cpuid);
        assert_eq!(d.source, Source::Cpuid);
        assert_eq!(d.sizes.l3, 64 << 20);
        assert!(d.to_string().contains("CPUID"), "{d}");
    }

    #[test]
    fn cpuid_leaves_decode() {
        // Zen 3's L2: 8 ways, 1 partition, 64-byte lines, 1024 sets, level 2 unified
        let (eax, ebx, ecx) = ((2 << 5) | 3, (7 << 22) | 63, 1023);
        assert_eq!(
            decode_cpuid_cache(eax, ebx, ecx),
            Some((2, true, 512 << 10))
        );
        // a 48 KiB L1d: 12 ways, 64 sets
        let (eax, ebx, ecx) = ((1 << 5) | 1, (11 << 22) | 63, 63);
        assert_eq!(decode_cpuid_cache(eax, ebx, ecx), Some((1, true, 48 << 10)));
        // an instruction cache, then the end
        assert_eq!(
            decode_cpuid_cache((1 << 5) | 2, 63, 63),
            Some((1, false, 4096))
        );
        assert_eq!(decode_cpuid_cache(0, 0, 0), None);
    }

    #[test]
    fn cpuid_detection_does_not_panic() {
        let p = from_cpuid();
        if let Some(l2) = p.l2 {
            assert!(l2 >= 64 << 10);
        }
    }

    #[test]
    fn a_2_mib_l2_keeps_the_blocking_tuned_on_it() {
        let intel = CacheSizes {
            l1d: 48 << 10,
            ..CacheSizes::DEFAULT
        };
        for c in [intel, CacheSizes::DEFAULT] {
            let b = Blocking::for_caches(c);
            assert_eq!(b.packed_act_bytes, 256 << 10);
            // a pp512 batch is one pass at either level (AVX2 6 columns a
            // panel, AVX-512 12), for K blocks of up to 256
            for nr in [6, 12] {
                assert!(b.gemm_pass_panels(256, nr) * nr >= 512, "nr {nr}");
            }
        }
        // larger caches: the same (the packed block is capped)
        let big = Blocking::for_caches(CacheSizes {
            l2: 4 << 20,
            ..CacheSizes::DEFAULT
        });
        assert_eq!(big.packed_act_bytes, 256 << 10);
    }

    #[test]
    fn zen3_sizes_choose_smaller_blocks() {
        let b = Blocking::for_caches(ZEN3);
        assert_eq!(b.gemm_b_bytes, 256 << 10);
        assert_eq!(b.packed_act_bytes, 64 << 10);
        // AVX2: panels of 6 columns × 256 k × 4 bytes = 6 KiB: 42 a pass
        assert_eq!(b.gemm_pass_panels(256, 6), 42);
        // K = 576 runs K blocks of 192
        assert_eq!(b.gemm_pass_panels(192, 6), 56);
        // tiny caches still give a panel a pass and the smallest block
        let tiny = Blocking::for_caches(CacheSizes {
            l1d: 1,
            l2: 1,
            l3: 1,
        });
        assert_eq!(tiny.gemm_pass_panels(256, 12), 1);
        assert_eq!(tiny.packed_act_bytes, Blocking::PACKED_ACT_MIN);
    }
}
