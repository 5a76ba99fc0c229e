//! Reading device memory back: one persistent staging buffer that each
//! graph's submission copies its OUTPUT tensors into (mapped once the
//! graph is done, so reading them costs no submission or wait of its own),
//! and one for the other reads, in pieces of bounded size. Both grow only
//! when too small.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use strata::{Error, Result};

use crate::context::{lock, GpuContext};
use crate::counters::{Count, Phase};

/// The most a graph's outputs may take in read-back memory; beyond it they
/// are read as other reads are.
const MAX_FUSED: u64 = 64 << 20;
/// The largest piece an ordinary read copies through its staging buffer.
const MAX_PIECE: u64 = 16 << 20;
/// Staging buffers are at least this large.
const MIN_STAGING: u64 = 64 << 10;

/// A range of a tensor buffer a graph copies into read-back memory.
pub(crate) struct Output {
    /// The buffer's base address.
    pub(crate) base: u64,
    pub(crate) buffer: wgpu::Buffer,
    /// Byte range in the buffer (4-byte aligned).
    pub(crate) start: u64,
    pub(crate) len: u64,
}

/// A range the last graph copied: (base, start, len) and where in staging.
struct Copied {
    base: u64,
    start: u64,
    len: u64,
    at: u64,
}

/// Map states: asked, done, failed.
pub(crate) const PENDING: u8 = 0;
pub(crate) const DONE: u8 = 1;
pub(crate) const FAILED: u8 = 2;

/// Asks for `range` of `buf` to be mapped for `mode`; the state the
/// callback sets ([`PENDING`], then [`DONE`] or [`FAILED`]).
pub(crate) fn map_state(
    buf: &wgpu::Buffer,
    mode: wgpu::MapMode,
    range: impl std::ops::RangeBounds<wgpu::BufferAddress>,
) -> Arc<AtomicU8> {
    let state = Arc::new(AtomicU8::new(PENDING));
    let s = state.clone();
    buf.map_async(mode, range, move |r| {
        s.store(if r.is_ok() { DONE } else { FAILED }, Ordering::Release);
    });
    state
}

/// The graphs' read-back memory and what it holds.
#[derive(Default)]
pub(crate) struct Fused {
    staging: Option<wgpu::Buffer>,
    /// The ranges the last graph copied, valid until something else may
    /// change them (a write, a fill, a copy, another graph).
    copied: Vec<Copied>,
    /// The graph's submission (its index and ordinal) and the map's state,
    /// while `staging` is mapped or being mapped.
    map: Option<(wgpu::SubmissionIndex, u64, Arc<AtomicU8>)>,
    /// Where the graph's two timestamps are in staging, until read.
    timestamps: Option<u64>,
}

/// The device's timestamp queries (two per graph: its pass's start and end).
pub(crate) struct Timestamps {
    pub(crate) set: wgpu::QuerySet,
    resolve: wgpu::Buffer,
    /// Nanoseconds per tick.
    period: f64,
}

impl Timestamps {
    /// Timestamp queries on `device` when it has them.
    pub(crate) fn new(ctx_device: &wgpu::Device, queue: &wgpu::Queue) -> Timestamps {
        let set = ctx_device.create_query_set(&wgpu::QuerySetDescriptor {
            label: Some("strata timestamps"),
            ty: wgpu::QueryType::Timestamp,
            count: 2,
        });
        let resolve = ctx_device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("strata timestamps"),
            size: 16,
            usage: wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: false,
        });
        Timestamps {
            set,
            resolve,
            period: queue.get_timestamp_period() as f64,
        }
    }
}

impl GpuContext {
    /// Submits a graph's commands `enc` with, in the same submission, the
    /// copies of `outputs` into read-back memory (and of its timestamps
    /// when `timed`), then asks for that memory to be mapped when the
    /// device is done. Reads of those ranges ([`GpuContext::read_fused`])
    /// then wait for the graph, not for submissions of their own.
    pub(crate) fn submit_graph(
        &self,
        mut enc: wgpu::CommandEncoder,
        outputs: &[Output],
        timed: bool,
    ) -> Result<()> {
        let t = Instant::now();
        let mut f = lock(&self.fused);
        self.release(&mut f);
        let total: u64 = outputs.iter().map(|o| o.len.next_multiple_of(256)).sum();
        let outputs = if total <= MAX_FUSED { outputs } else { &[] };
        let ts = self.timestamps.as_ref().filter(|_| timed);
        let mut used = outputs
            .iter()
            .map(|o| o.len.next_multiple_of(256))
            .sum::<u64>();
        let ts_at = ts.map(|_| {
            let at = used;
            used += 256;
            at
        });
        if used > 0 && f.staging.as_ref().is_none_or(|s| s.size() < used) {
            f.staging = Some(self.new_buffer(&wgpu::BufferDescriptor {
                label: Some("strata outputs"),
                size: used.next_power_of_two().max(MIN_STAGING),
                usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            }));
        }
        let mut copied = Vec::with_capacity(outputs.len());
        if let Some(staging) = f.staging.as_ref().filter(|_| used > 0) {
            let mut at = 0;
            for o in outputs {
                enc.copy_buffer_to_buffer(&o.buffer, o.start, staging, at, o.len);
                copied.push(Copied {
                    base: o.base,
                    start: o.start,
                    len: o.len,
                    at,
                });
                at += o.len.next_multiple_of(256);
            }
            if let (Some(ts), Some(at)) = (ts, ts_at) {
                enc.resolve_query_set(&ts.set, 0..2, &ts.resolve, 0);
                enc.copy_buffer_to_buffer(&ts.resolve, 0, staging, at, 16);
            }
        }
        let cmd = enc.finish();
        self.time(Phase::Record, t.elapsed());
        let (idx, ordinal) = self.submit_raw([cmd]);
        if let Some(staging) = f.staging.as_ref().filter(|_| used > 0) {
            let state = map_state(staging, wgpu::MapMode::Read, 0..used);
            self.count(Count::ReadbackMaps, 1);
            f.map = Some((idx, ordinal, state));
            f.copied = copied;
            f.timestamps = ts_at;
        }
        Ok(())
    }

    /// Unmaps the read-back memory (first reading the timestamps it holds,
    /// if the map is done) and forgets what it held.
    fn release(&self, f: &mut Fused) {
        if let Some((_, _, state)) = f.map.take() {
            let st = state.load(Ordering::Acquire);
            if st == DONE {
                self.read_timestamps(f);
            }
            // mapped, or a map still pending (unmapping cancels it). A map
            // that failed left the buffer in a state this side cannot know
            // (unmapped, or still mapped when the failure was a map asked
            // for while mapped, as tests sharing one device have met):
            // unmapping an unmapped buffer and copying into a mapped one are
            // both validation errors the device would report to whichever
            // graph of any thread looks next, so the buffer is dropped and
            // the next graph makes a new one.
            if st == FAILED {
                f.staging = None;
            } else if let Some(s) = &f.staging {
                s.unmap();
            }
        }
        f.copied.clear();
        f.timestamps = None;
    }

    /// Adds the device time of the mapped graph's pass, once.
    fn read_timestamps(&self, f: &mut Fused) {
        let (Some(at), Some(staging), Some(ts)) =
            (f.timestamps.take(), &f.staging, &self.timestamps)
        else {
            return;
        };
        let Ok(view) = staging.get_mapped_range(at..at + 16) else {
            return;
        };
        let word = |i: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&view[i * 8..i * 8 + 8]);
            u64::from_le_bytes(b)
        };
        let (a, b) = (word(0), word(1));
        if b >= a {
            let ns = (b - a) as f64 * ts.period;
            self.time(Phase::Device, Duration::from_nanos(ns as u64));
            self.count(Count::TimedGraphs, 1);
        }
    }

    /// Forgets the read-back ranges of the buffer at `base` (about to be
    /// written or freed).
    pub(crate) fn forget_reads_of(&self, base: u64) {
        lock(&self.fused).copied.retain(|c| c.base != base);
    }

    /// Forgets every read-back range (device memory may have changed).
    pub(crate) fn forget_reads(&self) {
        lock(&self.fused).copied.clear();
    }

    /// Harvests the last graph's timestamps if its read-back memory is
    /// mapped already (so [`GpuContext::timings`] counts it).
    pub(crate) fn settle_timestamps(&self) {
        let mut f = lock(&self.fused);
        if f.map
            .as_ref()
            .is_some_and(|m| m.2.load(Ordering::Acquire) == DONE)
        {
            self.read_timestamps(&mut f);
        }
    }

    /// Reads `out.len()` bytes at `offset` of the buffer at `base` from the
    /// last graph's read-back memory, waiting for that graph if needed;
    /// `false` when that memory does not hold them.
    pub(crate) fn read_fused(&self, base: u64, offset: u64, out: &mut [u8]) -> Result<bool> {
        let mut f = lock(&self.fused);
        let end = offset + out.len() as u64;
        let Some(c) = f
            .copied
            .iter()
            .find(|c| c.base == base && c.start <= offset && end <= c.start + c.len)
        else {
            return Ok(false);
        };
        let (at, skip) = (c.at, (offset - c.start) as usize);
        let Some((idx, ordinal, state)) = f.map.clone() else {
            return Ok(false);
        };
        if state.load(Ordering::Acquire) == PENDING {
            self.await_map(idx, ordinal, &state)?;
        }
        if state.load(Ordering::Acquire) != DONE {
            // the map failed (or was cancelled): read the ordinary way
            self.release(&mut f);
            return Ok(false);
        }
        let t = Instant::now();
        let Some(staging) = &f.staging else {
            return Ok(false);
        };
        let len = (skip + out.len()).next_multiple_of(4) as u64;
        let view = staging
            .get_mapped_range(at..at + len)
            .map_err(|e| Error::Backend {
                backend: self.name.clone(),
                msg: format!("reading device memory failed: {e}"),
            })?;
        out.copy_from_slice(&view[skip..skip + out.len()]);
        drop(view);
        self.count(Count::FusedReads, 1);
        self.time(Phase::Readback, t.elapsed());
        Ok(true)
    }

    /// Waits for submission `idx` and then for the map whose callback sets
    /// `state`. wgpu runs a map's callback in a poll after the submission
    /// completes; when another thread's poll completed it first (before the
    /// map was asked for, or while it is still running the callbacks), the
    /// submission is done but the state is still pending, so this polls
    /// again until the callback has run.
    fn await_map(&self, idx: wgpu::SubmissionIndex, ordinal: u64, state: &AtomicU8) -> Result<()> {
        self.wait_for(idx, ordinal)?;
        let start = Instant::now();
        while state.load(Ordering::Acquire) == PENDING {
            if start.elapsed() > Duration::from_secs(60) {
                return Err(Error::Backend {
                    backend: self.name.clone(),
                    msg: "reading device memory failed: the staging buffer was not mapped \
                          within 60 s of its copy completing"
                        .into(),
                });
            }
            self.poll(wgpu::PollType::Poll)?;
            std::thread::yield_now();
        }
        Ok(())
    }

    /// Reads `out.len()` bytes of `buf` from `offset` (any alignment) after
    /// all submitted work, through the persistent staging buffer, in pieces
    /// of at most [`MAX_PIECE`] bytes.
    pub(crate) fn read_staged(
        &self,
        buf: &wgpu::Buffer,
        offset: u64,
        out: &mut [u8],
    ) -> Result<()> {
        let mut staging = lock(&self.staging);
        let mut done = 0usize;
        while done < out.len() {
            let t = Instant::now();
            let first = offset + done as u64;
            let start = first & !3;
            let skip = (first - start) as usize;
            let n = (out.len() - done).min(MAX_PIECE as usize - 8);
            let end = (first + n as u64).next_multiple_of(4);
            let size = end - start;
            if staging.as_ref().is_none_or(|s| s.size() < size) {
                *staging = Some(self.new_buffer(&wgpu::BufferDescriptor {
                    label: Some("strata read"),
                    size: size.next_power_of_two().clamp(MIN_STAGING, MAX_PIECE),
                    usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                    mapped_at_creation: false,
                }));
            }
            let Some(s) = staging.as_ref() else {
                break;
            };
            let mut enc = self.device.create_command_encoder(&Default::default());
            enc.copy_buffer_to_buffer(buf, start, s, 0, size);
            // copying out changes no tensor (the submission may also run
            // staged uploads, but a write forgets the read-backs of what it
            // overwrites first, `GpuBuffer::write`): the graphs' read-back stays
            let (idx, ordinal) = self.submit_raw([enc.finish()]);
            let state = map_state(s, wgpu::MapMode::Read, 0..size);
            self.count(Count::ReadbackMaps, 1);
            self.time(Phase::Readback, t.elapsed());
            if let Err(e) = self.await_map(idx, ordinal, &state) {
                if state.load(Ordering::Acquire) == PENDING {
                    // cancel the map, so the next read can map the buffer
                    s.unmap();
                }
                return Err(e);
            }
            let t = Instant::now();
            if state.load(Ordering::Acquire) != DONE {
                // never mapped: nothing to unmap (see `release`)
                return Err(Error::Backend {
                    backend: self.name.clone(),
                    msg: "reading device memory failed: the staging buffer could not be mapped"
                        .into(),
                });
            }
            {
                let view = s.get_mapped_range(0..size).map_err(|e| Error::Backend {
                    backend: self.name.clone(),
                    msg: format!("reading device memory failed: {e}"),
                })?;
                out[done..done + n].copy_from_slice(&view[skip..skip + n]);
            }
            s.unmap();
            done += n;
            self.time(Phase::Readback, t.elapsed());
        }
        Ok(())
    }
}
