//! What strata-gpu asked of wgpu and where its host time went, per device
//! since it was opened: [`GpuContext::counters`] and
//! [`GpuContext::timings`]. Every count is taken where the wgpu call is
//! made, so a test can assert what a stretch of work cost by subtracting
//! two snapshots.
//!
//! [`GpuContext::counters`]: crate::GpuContext::counters
//! [`GpuContext::timings`]: crate::GpuContext::timings

use std::ops::Sub;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Counts of wgpu calls on one device (totals since it was opened; subtract
/// two snapshots for a stretch of work).
///
/// ```
/// if let Some(gpu) = strata_gpu::devices().first() {
///     let before = gpu.context().counters();
///     // ... decode a token ...
///     let spent = gpu.context().counters() - before;
///     println!("{} submissions, {} waits", spent.submits, spent.waits);
/// }
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GpuCounters {
    /// wgpu buffers created: tensor memory, the parameter buffer, read-back
    /// staging, scratch for overlapping copies, a backend's scratch for
    /// intermediates between the dispatches of one node (not the timestamp
    /// resolve buffer made when the device is opened).
    pub buffers_created: u64,
    /// Bind groups created.
    pub bind_groups_created: u64,
    /// Dispatches recorded with a bind group made earlier (found in the
    /// bind-group cache or kept by a replayed dispatch list).
    pub bind_group_hits: u64,
    /// Compute pipelines compiled.
    pub pipelines_created: u64,
    /// Queue submissions (empty ones for events included).
    pub submits: u64,
    /// Read-backs: staging memory mapped for reading (`map_async`).
    pub readback_maps: u64,
    /// Times the host blocked on the device (`Device::poll` waits); a
    /// synchronize with nothing submitted since the last wait is not one.
    pub waits: u64,
    /// Graphs planned into a new dispatch list.
    pub graphs_planned: u64,
    /// Graphs that replayed the dispatch list of an earlier graph of the
    /// same tensors in the same memory.
    pub graphs_replayed: u64,
    /// Tensor reads served from a graph's own read-back copy (no
    /// submission or wait of their own).
    pub fused_reads: u64,
    /// Bytes of dispatch parameters written to the device.
    pub params_bytes_written: u64,
    /// Compute dispatches recorded (every graph computed, replayed or not).
    pub dispatches: u64,
    /// Graph nodes computed inside another node's dispatch (fused into
    /// it), counted like `dispatches`: every time a graph is recorded.
    pub nodes_fused: u64,
    /// Tensor writes copied through the persistent upload buffer (the next
    /// submission copies them into place; no buffer of their own).
    pub writes_staged: u64,
    /// Tensor writes through `Queue::write_buffer`, which makes a staging
    /// buffer for each (the upload buffer was busy or too small for them).
    pub writes_direct: u64,
}

impl Sub for GpuCounters {
    type Output = GpuCounters;

    /// The calls made between two snapshots (`later - earlier`; a count
    /// that went down, from snapshots given the wrong way round, is 0).
    fn sub(self, e: GpuCounters) -> GpuCounters {
        GpuCounters {
            buffers_created: self.buffers_created.saturating_sub(e.buffers_created),
            bind_groups_created: self
                .bind_groups_created
                .saturating_sub(e.bind_groups_created),
            bind_group_hits: self.bind_group_hits.saturating_sub(e.bind_group_hits),
            pipelines_created: self.pipelines_created.saturating_sub(e.pipelines_created),
            submits: self.submits.saturating_sub(e.submits),
            readback_maps: self.readback_maps.saturating_sub(e.readback_maps),
            waits: self.waits.saturating_sub(e.waits),
            graphs_planned: self.graphs_planned.saturating_sub(e.graphs_planned),
            graphs_replayed: self.graphs_replayed.saturating_sub(e.graphs_replayed),
            fused_reads: self.fused_reads.saturating_sub(e.fused_reads),
            params_bytes_written: self
                .params_bytes_written
                .saturating_sub(e.params_bytes_written),
            dispatches: self.dispatches.saturating_sub(e.dispatches),
            nodes_fused: self.nodes_fused.saturating_sub(e.nodes_fused),
            writes_staged: self.writes_staged.saturating_sub(e.writes_staged),
            writes_direct: self.writes_direct.saturating_sub(e.writes_direct),
        }
    }
}

/// Host time spent in strata-gpu on one device, by phase, and the device
/// time of its graphs where the adapter has timestamp queries (totals since
/// the device was opened; subtract two snapshots for a stretch of work).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GpuTimings {
    /// Graphs computed.
    pub graphs: u64,
    /// Finding a graph's dispatch list, or planning it (shaders, parameter
    /// blocks, bind groups).
    pub plan: Duration,
    /// Recording the command encoder (the compute pass and read-back copies).
    pub record: Duration,
    /// In `Queue::submit` (graphs, copies, fills, events, reads).
    pub submit: Duration,
    /// Blocked waiting for the device.
    pub wait: Duration,
    /// Copying bytes out of mapped read-back memory (and the copies and
    /// maps of reads not served by a graph's own read-back).
    pub readback: Duration,
    /// Graphs whose compute pass the device timed (timestamp queries).
    pub timed_graphs: u64,
    /// The device's time for those graphs' compute passes; `None` where the
    /// adapter has no timestamp queries.
    pub device: Option<Duration>,
}

impl Sub for GpuTimings {
    type Output = GpuTimings;

    /// The time spent between two snapshots (`later - earlier`).
    fn sub(self, e: GpuTimings) -> GpuTimings {
        GpuTimings {
            graphs: self.graphs.saturating_sub(e.graphs),
            plan: self.plan.saturating_sub(e.plan),
            record: self.record.saturating_sub(e.record),
            submit: self.submit.saturating_sub(e.submit),
            wait: self.wait.saturating_sub(e.wait),
            readback: self.readback.saturating_sub(e.readback),
            timed_graphs: self.timed_graphs.saturating_sub(e.timed_graphs),
            device: match (self.device, e.device) {
                (Some(a), Some(b)) => Some(a.saturating_sub(b)),
                (a, _) => a,
            },
        }
    }
}

/// Which count or time an increment goes to.
#[derive(Clone, Copy)]
pub(crate) enum Count {
    BuffersCreated,
    BindGroupsCreated,
    BindGroupHits,
    PipelinesCreated,
    Submits,
    ReadbackMaps,
    Waits,
    GraphsPlanned,
    GraphsReplayed,
    FusedReads,
    ParamsBytes,
    Graphs,
    TimedGraphs,
    Dispatches,
    NodesFused,
    WritesStaged,
    WritesDirect,
}

/// Which phase a duration goes to.
#[derive(Clone, Copy)]
pub(crate) enum Phase {
    Plan,
    Record,
    Submit,
    Wait,
    Readback,
    Device,
}

/// The device's counters (atomics, so shared references count).
#[derive(Default)]
pub(crate) struct Counters {
    counts: [AtomicU64; 17],
    nanos: [AtomicU64; 6],
}

impl Counters {
    /// Adds `n` to `c`.
    pub(crate) fn add(&self, c: Count, n: u64) {
        self.counts[c as usize].fetch_add(n, Ordering::Relaxed);
    }

    /// Adds `d` to phase `p`.
    pub(crate) fn time(&self, p: Phase, d: Duration) {
        self.nanos[p as usize].fetch_add(d.as_nanos() as u64, Ordering::Relaxed);
    }

    fn get(&self, c: Count) -> u64 {
        self.counts[c as usize].load(Ordering::Relaxed)
    }

    fn dur(&self, p: Phase) -> Duration {
        Duration::from_nanos(self.nanos[p as usize].load(Ordering::Relaxed))
    }

    pub(crate) fn counters(&self) -> GpuCounters {
        GpuCounters {
            buffers_created: self.get(Count::BuffersCreated),
            bind_groups_created: self.get(Count::BindGroupsCreated),
            bind_group_hits: self.get(Count::BindGroupHits),
            pipelines_created: self.get(Count::PipelinesCreated),
            submits: self.get(Count::Submits),
            readback_maps: self.get(Count::ReadbackMaps),
            waits: self.get(Count::Waits),
            graphs_planned: self.get(Count::GraphsPlanned),
            graphs_replayed: self.get(Count::GraphsReplayed),
            fused_reads: self.get(Count::FusedReads),
            params_bytes_written: self.get(Count::ParamsBytes),
            dispatches: self.get(Count::Dispatches),
            nodes_fused: self.get(Count::NodesFused),
            writes_staged: self.get(Count::WritesStaged),
            writes_direct: self.get(Count::WritesDirect),
        }
    }

    pub(crate) fn timings(&self, timestamps: bool) -> GpuTimings {
        GpuTimings {
            graphs: self.get(Count::Graphs),
            plan: self.dur(Phase::Plan),
            record: self.dur(Phase::Record),
            submit: self.dur(Phase::Submit),
            wait: self.dur(Phase::Wait),
            readback: self.dur(Phase::Readback),
            timed_graphs: self.get(Count::TimedGraphs),
            device: timestamps.then(|| self.dur(Phase::Device)),
        }
    }
}
