//! AMX (Advanced Matrix Extensions): detection with the operating system's
//! permission, and the few tile instructions the packed K-quant kernels use
//! (`ldtilecfg`, `tileloadd`, `tdpbsud` / `tdpbssd`, `tilestored`,
//! `tilerelease`), as `asm!` blocks: Rust has no stable AMX intrinsics or
//! target features, and the assembler takes the instructions as they are.
//!
//! One configuration serves every use: palette 1, all eight tiles 16 rows
//! of 64 bytes. A kernel loads it on entry ([`Tiles::new`]) and releases
//! the tile state when it returns (the guard's drop), so a thread holds no
//! tile data between kernel calls and context switches stay cheap.

/// True if this CPU has AMX-TILE and AMX-INT8, the OS enables their state
/// in XCR0 and (Linux) grants this process the tile data state. Asked once
/// per process (with the rest of detection); false elsewhere.
pub(crate) fn usable() -> bool {
    #[cfg(target_os = "linux")]
    {
        use std::arch::x86_64::__cpuid_count;
        if !std::arch::is_x86_feature_detected!("xsave") {
            return false;
        }
        let leaf7 = __cpuid_count(7, 0);
        let (tile, int8) = (leaf7.edx >> 24 & 1 == 1, leaf7.edx >> 25 & 1 == 1);
        // OSXSAVE (CPUID.1:ECX bit 27): XGETBV is enabled.
        let osxsave = __cpuid_count(1, 0).ecx >> 27 & 1 == 1;
        if !(tile && int8 && osxsave) {
            return false;
        }
        // SAFETY: the CPU has XSAVE and the OS enabled XGETBV (checked).
        let xcr0 = unsafe { xcr0() };
        // XTILECFG (bit 17) and XTILEDATA (bit 18).
        if xcr0 >> 17 & 3 != 3 {
            return false;
        }
        request_permission()
    }
    #[cfg(not(target_os = "linux"))]
    {
        false
    }
}

/// XCR0, the OS-enabled state components.
///
/// # Safety
/// The CPU has XSAVE and the OS set CR4.OSXSAVE.
#[cfg(target_os = "linux")]
#[target_feature(enable = "xsave")]
unsafe fn xcr0() -> u64 {
    // SAFETY: the caller's contract.
    unsafe { std::arch::x86_64::_xgetbv(0) }
}

/// Asks Linux for the AMX tile data state (`ARCH_REQ_XCOMP_PERM` with
/// `XFEATURE_XTILEDATA`): without it the first tile load faults.
#[cfg(target_os = "linux")]
fn request_permission() -> bool {
    const ARCH_REQ_XCOMP_PERM: libc::c_long = 0x1023;
    const XFEATURE_XTILEDATA: libc::c_long = 18;
    // SAFETY: arch_prctl with these arguments only changes the process's
    // permitted xstate features; it reads and writes no memory of ours.
    let r = unsafe {
        libc::syscall(
            libc::SYS_arch_prctl,
            ARCH_REQ_XCOMP_PERM,
            XFEATURE_XTILEDATA,
        )
    };
    if r != 0 {
        tracing::debug!(
            "AMX present but not granted (arch_prctl: {}); using VNNI",
            std::io::Error::last_os_error()
        );
    }
    r == 0
}

/// The tile configuration: palette 1, tiles 0..8 of 16 rows × 64 bytes.
#[repr(C, align(64))]
struct Config([u8; 64]);

static CONFIG: Config = {
    let mut c = [0u8; 64];
    c[0] = 1;
    let mut t = 0;
    while t < 8 {
        c[16 + 2 * t] = 64;
        c[48 + t] = 16;
        t += 1;
    }
    Config(c)
};

/// The tile state of one kernel call on this thread: configured by
/// [`Tiles::new`], released on drop.
pub(crate) struct Tiles(());

impl Tiles {
    /// Loads the configuration (every tile 16 × 64 bytes, zeroed).
    ///
    /// # Safety
    /// The CPU runs [`crate::isa::Isa::Amx`] (which includes the
    /// permission).
    pub(crate) unsafe fn new() -> Tiles {
        // SAFETY: AMX is usable (contract); CONFIG is 64 readable bytes.
        unsafe {
            std::arch::asm!(
                "ldtilecfg [{0}]",
                in(reg) CONFIG.0.as_ptr(),
                options(nostack, readonly, preserves_flags)
            )
        };
        Tiles(())
    }
}

/// The two tile products of the AMX K kernel, on the tiles ([`Tiles`]) or,
/// in tests on CPUs without AMX, in scalar code ([`Emulated`]).
pub(crate) trait PlaneProducts {
    /// `C_lo = Σ A·B_lo` (`tdpbsud`: signed A, unsigned B) and `C_hi =
    /// Σ A·B_hi` (`tdpbssd`: both signed) over four K steps of 64 bytes,
    /// then both stored. A: 16 rows of 256 bytes, row `m` at `a + m ·
    /// a_stride` (activation column `m`'s quants); B: `planes` holds the
    /// unsigned plane (64 lines of 64 bytes: line `l` has the four
    /// elements `4l .. 4l + 4` of each of the 16 weight rows) and 4096
    /// bytes later the signed one. C (16 × 16 i32, row `m` = column `m`,
    /// lane `n` = weight row `n`) go to `c` and `c + 1024`.
    /// `C[m][n] = Σ_e A[m][e] · B[e][n]` exactly (i32, wrapping).
    ///
    /// # Safety
    /// The reads and writes above are in bounds.
    unsafe fn dot_planes(&mut self, a: *const u8, a_stride: usize, planes: *const u8, c: *mut u8);

    /// [`PlaneProducts::dot_planes`] for 32 columns: rows `m` of the first
    /// A at `a + m · a_stride`, of the second 16 rows later; each plane
    /// tile is loaded once for both. C: `c` (first 16 columns, `lo`),
    /// `c + 1024` (their `hi`), `c + 2048` and `c + 3072` (the next 16).
    ///
    /// # Safety
    /// The reads and writes above are in bounds.
    unsafe fn dot_planes32(&mut self, a: *const u8, a_stride: usize, planes: *const u8, c: *mut u8);
}

impl PlaneProducts for Tiles {
    #[inline]
    unsafe fn dot_planes(&mut self, a: *const u8, a_stride: usize, planes: *const u8, c: *mut u8) {
        // SAFETY: the tiles are configured (self); the caller guarantees
        // the memory.
        unsafe {
            std::arch::asm!(
                "tilezero tmm0",
                "tilezero tmm1",
                "tileloadd tmm2, [{a} + {sa}*1]",
                "tileloadd tmm3, [{p} + {s}*1]",
                "tileloadd tmm4, [{p} + {s}*1 + 4096]",
                "tdpbsud tmm0, tmm2, tmm3",
                "tdpbssd tmm1, tmm2, tmm4",
                "tileloadd tmm5, [{a} + {sa}*1 + 64]",
                "tileloadd tmm6, [{p} + {s}*1 + 1024]",
                "tileloadd tmm7, [{p} + {s}*1 + 5120]",
                "tdpbsud tmm0, tmm5, tmm6",
                "tdpbssd tmm1, tmm5, tmm7",
                "tileloadd tmm2, [{a} + {sa}*1 + 128]",
                "tileloadd tmm3, [{p} + {s}*1 + 2048]",
                "tileloadd tmm4, [{p} + {s}*1 + 6144]",
                "tdpbsud tmm0, tmm2, tmm3",
                "tdpbssd tmm1, tmm2, tmm4",
                "tileloadd tmm5, [{a} + {sa}*1 + 192]",
                "tileloadd tmm6, [{p} + {s}*1 + 3072]",
                "tileloadd tmm7, [{p} + {s}*1 + 7168]",
                "tdpbsud tmm0, tmm5, tmm6",
                "tdpbssd tmm1, tmm5, tmm7",
                "tilestored [{c} + {s}*1], tmm0",
                "tilestored [{c} + {s}*1 + 1024], tmm1",
                a = in(reg) a,
                sa = in(reg) a_stride,
                p = in(reg) planes,
                s = in(reg) 64usize,
                c = in(reg) c,
                options(nostack, preserves_flags)
            )
        };
    }

    #[inline]
    unsafe fn dot_planes32(
        &mut self,
        a: *const u8,
        a_stride: usize,
        planes: *const u8,
        c: *mut u8,
    ) {
        let a1 = a.wrapping_add(16 * a_stride);
        // SAFETY: the tiles are configured (self); the caller guarantees
        // the memory.
        unsafe {
            std::arch::asm!(
                "tilezero tmm0",
                "tilezero tmm1",
                "tilezero tmm2",
                "tilezero tmm3",
                "tileloadd tmm4, [{a} + {sa}*1]",
                "tileloadd tmm6, [{p} + {s}*1]",
                "tileloadd tmm7, [{p} + {s}*1 + 4096]",
                "tileloadd tmm5, [{b} + {sa}*1]",
                "tdpbsud tmm0, tmm4, tmm6",
                "tdpbssd tmm1, tmm4, tmm7",
                "tdpbsud tmm2, tmm5, tmm6",
                "tdpbssd tmm3, tmm5, tmm7",
                "tileloadd tmm4, [{a} + {sa}*1 + 64]",
                "tileloadd tmm6, [{p} + {s}*1 + 1024]",
                "tileloadd tmm7, [{p} + {s}*1 + 5120]",
                "tileloadd tmm5, [{b} + {sa}*1 + 64]",
                "tdpbsud tmm0, tmm4, tmm6",
                "tdpbssd tmm1, tmm4, tmm7",
                "tdpbsud tmm2, tmm5, tmm6",
                "tdpbssd tmm3, tmm5, tmm7",
                "tileloadd tmm4, [{a} + {sa}*1 + 128]",
                "tileloadd tmm6, [{p} + {s}*1 + 2048]",
                "tileloadd tmm7, [{p} + {s}*1 + 6144]",
                "tileloadd tmm5, [{b} + {sa}*1 + 128]",
                "tdpbsud tmm0, tmm4, tmm6",
                "tdpbssd tmm1, tmm4, tmm7",
                "tdpbsud tmm2, tmm5, tmm6",
                "tdpbssd tmm3, tmm5, tmm7",
                "tileloadd tmm4, [{a} + {sa}*1 + 192]",
                "tileloadd tmm6, [{p} + {s}*1 + 3072]",
                "tileloadd tmm7, [{p} + {s}*1 + 7168]",
                "tileloadd tmm5, [{b} + {sa}*1 + 192]",
                "tdpbsud tmm0, tmm4, tmm6",
                "tdpbssd tmm1, tmm4, tmm7",
                "tdpbsud tmm2, tmm5, tmm6",
                "tdpbssd tmm3, tmm5, tmm7",
                "tilestored [{c} + {s}*1], tmm0",
                "tilestored [{c} + {s}*1 + 1024], tmm1",
                "tilestored [{c} + {s}*1 + 2048], tmm2",
                "tilestored [{c} + {s}*1 + 3072], tmm3",
                a = in(reg) a,
                b = in(reg) a1,
                sa = in(reg) a_stride,
                p = in(reg) planes,
                s = in(reg) 64usize,
                c = in(reg) c,
                options(nostack, preserves_flags)
            )
        };
    }
}

impl Drop for Tiles {
    fn drop(&mut self) {
        // SAFETY: the tiles were configured (new), so AMX is usable.
        unsafe { std::arch::asm!("tilerelease", options(nostack, nomem, preserves_flags)) };
    }
}

/// The tile products in scalar code (wrapping i32, as the tiles add): the
/// AMX kernel's algorithm on any CPU with its other features, for tests.
#[cfg(test)]
pub(crate) struct Emulated;

#[cfg(test)]
impl Emulated {
    /// One 16-column product (see [`PlaneProducts::dot_planes`]).
    ///
    /// # Safety
    /// As [`PlaneProducts::dot_planes`].
    unsafe fn product(a: *const u8, a_stride: usize, planes: *const u8, c: *mut u8) {
        for m in 0..16 {
            for n in 0..16 {
                let (mut lo, mut hi) = (0i32, 0i32);
                for e in 0..256 {
                    let at = 64 * (e / 4) + 4 * n + e % 4;
                    // SAFETY: A row m has 256 bytes, each plane 4096
                    // (contract).
                    let (x, l, h) = unsafe {
                        (
                            i32::from(*a.add(m * a_stride + e) as i8),
                            i32::from(*planes.add(at)),
                            i32::from(*planes.add(4096 + at) as i8),
                        )
                    };
                    lo = lo.wrapping_add(x * l);
                    hi = hi.wrapping_add(x * h);
                }
                // SAFETY: C rows m of both products (contract).
                unsafe {
                    c.add(64 * m + 4 * n).cast::<i32>().write_unaligned(lo);
                    c.add(1024 + 64 * m + 4 * n)
                        .cast::<i32>()
                        .write_unaligned(hi);
                }
            }
        }
    }
}

#[cfg(test)]
impl PlaneProducts for Emulated {
    unsafe fn dot_planes(&mut self, a: *const u8, a_stride: usize, planes: *const u8, c: *mut u8) {
        // SAFETY: the contract, forwarded.
        unsafe { Emulated::product(a, a_stride, planes, c) }
    }

    unsafe fn dot_planes32(
        &mut self,
        a: *const u8,
        a_stride: usize,
        planes: *const u8,
        c: *mut u8,
    ) {
        // SAFETY: the contract, forwarded (the second 16 columns' A rows
        // and C tiles follow).
        unsafe {
            Emulated::product(a, a_stride, planes, c);
            Emulated::product(a.add(16 * a_stride), a_stride, planes, c.add(2048));
        }
    }
}
