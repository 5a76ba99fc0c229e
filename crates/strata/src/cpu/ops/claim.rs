//! How the threads of a node share its units of work (the packed and float
//! MUL_MATs, MUL_MAT_ID): each thread owns a contiguous range of chunks and
//! takes them from its front; a thread whose range is empty takes chunks
//! from the back of the others' ranges (work stealing).
//!
//! A thread slowed by another process on its core thus takes fewer chunks
//! instead of holding the others at the barrier, as with one shared
//! counter (ggml's mul_mat), but in the usual case every thread streams
//! one contiguous stretch of the weights. Taking chunks in turn from one
//! counter left each thread a new stretch every few 16-row groups, whose
//! first lines came cold from DRAM: measured against it (AMD Zen 5, 2
//! threads, SmolLM2 Q4_1 `batched-bench`, `avx2`), decode S_TG is 15 %
//! higher at B = 1 and 4 % at B = 16.
//!
//! Each range is one `AtomicU64` holding its front and back chunk indices
//! (32 bits each), changed only by compare-and-swap, so the owner (at the
//! front) and thieves (at the back) never take the same chunk. A unit's
//! result must not depend on which thread computes it: the callers' kernels
//! compute every output by the same arithmetic whichever thread runs it.

use super::Ctx;
use std::sync::atomic::{AtomicU64, Ordering};

/// Ranges a node's claim state holds; threads beyond this many own none and
/// only steal.
const RANGES: usize = 32;

/// Bytes of a node's shared work memory its claim state takes: one range per
/// 64-byte line, so that owners do not share lines.
pub(crate) const CLAIM_BYTES: usize = 64 * RANGES;

/// Chunks per thread: enough for a slowed thread to hand some on.
const CHUNKS_PER_THREAD: usize = 8;

/// A node's claim state in its shared work memory ([`claim_units`]): range
/// `r` is word `8 r` of `words`.
pub(crate) struct Claims<'a> {
    words: &'a [AtomicU64],
    n_ranges: usize,
    units: usize,
    step: usize,
    ith: usize,
}

fn pack(front: usize, back: usize) -> u64 {
    // Both below 2^32 (`Claims::init` bounds the chunk count).
    ((front as u64) << 32) | back as u64
}

fn unpack(v: u64) -> (usize, usize) {
    ((v >> 32) as usize, (v & 0xffff_ffff) as usize)
}

/// Sets up the claim state at `at` for `units` units: thread 0 writes the
/// ranges, then every thread meets at the barrier that ends the node's
/// previous phase.
///
/// # Safety
/// `at` is [`CLAIM_BYTES`] of the node's shared work memory, 8-aligned,
/// used only as this claim state by this node's threads (the barrier after
/// every node keeps the previous node's claims from reaching it).
pub(crate) unsafe fn claim_units<'a>(at: *mut u8, units: usize, ctx: &Ctx<'_>) -> Claims<'a> {
    // SAFETY: the caller's contract: CLAIM_BYTES, 8-aligned, only accessed
    // through these atomics while the node runs.
    let words =
        unsafe { std::slice::from_raw_parts(at.cast::<AtomicU64>().cast_const(), CLAIM_BYTES / 8) };
    let claims = Claims::new(words, units, ctx.w.nth, ctx.w.ith);
    if ctx.w.ith == 0 {
        claims.init();
    }
    ctx.w.barrier();
    claims
}

impl<'a> Claims<'a> {
    /// The state in `words` (at least [`CLAIM_BYTES`] / 8) of `units` units
    /// for thread `ith` of `nth`: chunks of `step` units, fewer than 2^32
    /// of them, [`CHUNKS_PER_THREAD`] per thread where there are enough.
    fn new(words: &'a [AtomicU64], units: usize, nth: usize, ith: usize) -> Claims<'a> {
        let nth = nth.max(1);
        let step = (units / (CHUNKS_PER_THREAD * nth))
            .max(units.div_ceil(u32::MAX as usize))
            .max(1);
        Claims {
            words,
            n_ranges: nth.min(RANGES).min(words.len() / 8),
            units,
            step,
            ith,
        }
    }

    /// Writes the ranges: range `r` holds chunks `r·n / R .. (r + 1)·n / R`
    /// of the `n` chunks.
    fn init(&self) {
        let n_chunks = self.units.div_ceil(self.step);
        let r_all = self.n_ranges;
        for r in 0..r_all {
            let (f, b) = (r * n_chunks / r_all, (r + 1) * n_chunks / r_all);
            self.range(r).store(pack(f, b), Ordering::Relaxed);
        }
    }

    fn range(&self, r: usize) -> &'a AtomicU64 {
        &self.words[r * 8]
    }

    /// Takes range `r`'s first chunk (`front`) or its last.
    fn take(&self, r: usize, front: bool) -> Option<usize> {
        let range = self.range(r);
        let mut v = range.load(Ordering::Relaxed);
        loop {
            let (f, b) = unpack(v);
            if f >= b {
                return None;
            }
            let (next, chunk) = if front {
                (pack(f + 1, b), f)
            } else {
                (pack(f, b - 1), b - 1)
            };
            match range.compare_exchange_weak(v, next, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return Some(chunk),
                Err(now) => v = now,
            }
        }
    }

    /// This thread's units: its own range's chunks front to back, then the
    /// others' from their backs (the next range first). Over the node's
    /// threads every unit comes once. A range only shrinks, so one found
    /// empty stays empty and one pass over the others suffices.
    pub(crate) fn units(self) -> impl Iterator<Item = usize> + 'a {
        let n = self.n_ranges;
        let owns = self.ith < n;
        let mut visit = 0;
        std::iter::from_fn(move || {
            while visit < n {
                // The own range first (front), then the others (backs).
                let r = (self.ith + visit) % n;
                if let Some(c) = self.take(r, owns && visit == 0) {
                    let start = c * self.step;
                    return Some(start..(start + self.step).min(self.units));
                }
                visit += 1;
            }
            None
        })
        .flatten()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::ops::WorkSize;
    use crate::cpu::pool::ThreadPool;
    use std::sync::Mutex;

    fn words() -> Vec<AtomicU64> {
        (0..CLAIM_BYTES / 8).map(|_| AtomicU64::new(0)).collect()
    }

    /// Threads that run one after another: the first takes its own range
    /// in order, then steals the others' from their backs; the rest find
    /// nothing left. Every unit comes once, for any counts (more threads
    /// than ranges and than units included).
    #[test]
    fn a_lone_thread_takes_its_range_in_order_then_steals() {
        for nth in [1, 2, 3, 5, 33, 40] {
            for units in [0, 1, 2, 7, 16, 37, 100, 1000] {
                for first in [0, nth / 2, nth - 1] {
                    let w = words();
                    Claims::new(&w, units, nth, 0).init();
                    let claims = Claims::new(&w, units, nth, first);
                    let (n, step) = (claims.n_ranges, claims.step);
                    let got: Vec<usize> = claims.units().collect();
                    let mut sorted = got.clone();
                    sorted.sort_unstable();
                    assert_eq!(
                        sorted,
                        (0..units).collect::<Vec<_>>(),
                        "{nth} {units} {first}"
                    );
                    if first < n {
                        // Its own range first, ascending and contiguous.
                        let n_chunks = units.div_ceil(step);
                        let own = (first * n_chunks / n * step).min(units)
                            ..((first + 1) * n_chunks / n * step).min(units);
                        assert_eq!(got[..own.len()], own.collect::<Vec<_>>()[..]);
                    }
                    for other in (0..nth).filter(|&t| t != first) {
                        assert_eq!(Claims::new(&w, units, nth, other).units().count(), 0);
                    }
                }
            }
        }
    }

    /// The units each of `nth` pool threads takes of `units`, thread 0
    /// sleeping `late_ms` first (a descheduled thread).
    fn claimed(pool: &ThreadPool, nth: usize, units: usize, late_ms: u64) -> Vec<Vec<usize>> {
        let mut mem = vec![0u64; CLAIM_BYTES / 8];
        let at = mem.as_mut_ptr() as usize;
        let got = Mutex::new(vec![Vec::new(); nth]);
        pool.run(&|w| {
            let ctx = Ctx::new(
                w,
                at as *mut u8,
                WorkSize::default(),
                crate::isa::Isa::Scalar,
            );
            // SAFETY: CLAIM_BYTES of 8-aligned memory, used only as this
            // claim state during the job.
            let claims = unsafe { claim_units(at as *mut u8, units, &ctx) };
            if w.ith == 0 && late_ms > 0 {
                std::thread::sleep(std::time::Duration::from_millis(late_ms));
            }
            let mine: Vec<usize> = claims.units().collect();
            got.lock().unwrap_or_else(|e| e.into_inner())[w.ith] = mine;
        });
        drop(mem);
        got.into_inner().unwrap_or_else(|e| e.into_inner())
    }

    /// Threads running at once, one of them late (its range stolen): every
    /// unit still comes exactly once.
    #[test]
    fn concurrent_threads_take_every_unit_once() {
        for nth in [2, 3, 40] {
            let pool = ThreadPool::new(nth);
            for units in [1, 16, 37, 1000] {
                for late_ms in [0, 3] {
                    let mut seen = vec![0u32; units];
                    for u in claimed(&pool, nth, units, late_ms).concat() {
                        seen[u] += 1;
                    }
                    let once = seen.iter().all(|&c| c == 1);
                    assert!(once, "{nth} {units} {late_ms}: {seen:?}");
                }
            }
        }
    }

    /// A late thread's range goes to the others: with thread 0 asleep, the
    /// other thread computes every unit.
    #[test]
    fn a_late_threads_range_is_stolen() {
        let units = 64;
        let c = claimed(&ThreadPool::new(2), 2, units, 50);
        assert_eq!(c[0].len() + c[1].len(), units);
        assert!(c[1].len() > units / 2, "the awake thread took only {c:?}");
    }
}
