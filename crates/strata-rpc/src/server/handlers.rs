//! The request handlers of a [`Session`]: devices and their backends,
//! graph computation (with its abort watch), and every command that acts on
//! buffers and tensors. Each runs on an already decoded, validated request.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Instant;

use strata::backend::{tensor_copy, tensor_memset, tensor_set, Backend};
use strata::Graph;

use super::session::{Reply, Session, SessionEnd};
use super::validate::{lookup, placed, placed_range, tensor_of, Refusal, RemoteBuf};
use crate::proto::{hello_response, pair_payload, Request};

impl Session {
    pub(super) fn device(&self, device: u32) -> Result<usize, Refusal> {
        let n = self.state.factory.device_count();
        if (device as usize) < n {
            Ok(device as usize)
        } else {
            Err(Refusal::NoDevice { device, n })
        }
    }

    pub(super) fn backend(&mut self, device: usize) -> Result<&mut Box<dyn Backend>, Refusal> {
        if self.backends[device].is_none() {
            let mut b = self
                .state
                .factory
                .backend(device)
                .map_err(|e| Refusal::BackendStart {
                    device,
                    why: e.to_string(),
                })?;
            // A received graph can ask for scratch far beyond its tensors
            // (a matmul operand with stride-0 dimensions): bounded like
            // message memory.
            let max = usize::try_from(self.state.limits.max_inflight).unwrap_or(usize::MAX);
            b.set_work_limit(Some(max));
            self.backends[device] = Some(b);
        }
        Ok(self.backends[device].as_mut().expect("set above"))
    }

    /// Computes `graph` on `device`, aborting it midway when the client
    /// goes away, the time limit passes or the server shuts down (the reason
    /// is kept in `self.aborted` for the connection's end).
    pub(super) fn compute(&mut self, device: usize, graph: &Graph) -> Result<(), Refusal> {
        const GONE: u8 = 1;
        const LATE: u8 = 2;
        const STOP: u8 = 3;
        let why = Arc::new(AtomicU8::new(0));
        let cb: strata::backend::AbortCallback = {
            let why = why.clone();
            let state = self.state.clone();
            let probe = self.probe.clone();
            let deadline = state.limits.max_compute.map(|d| Instant::now() + d);
            Box::new(move || {
                let r = if state.shutdown.load(Ordering::Relaxed) {
                    STOP
                } else if deadline.is_some_and(|d| Instant::now() > d) {
                    LATE
                } else if probe.as_ref().is_some_and(|p| p.client_gone()) {
                    GONE
                } else {
                    return false;
                };
                why.store(r, Ordering::Relaxed);
                true
            })
        };
        let fail = |e: strata::Error| Refusal::ComputeFailed {
            device,
            why: e.to_string(),
        };
        let packed = super::layout::prepare(graph, &self.buffers).map_err(fail)?;
        if packed > 0 {
            self.state.repacked.fetch_add(packed, Ordering::Relaxed);
            tracing::debug!(peer = %self.peer, "repacked {packed} weights for the packed kernels");
        }
        let now = super::layout::changes(&self.buffers);
        if now != self.layout_seen[device] {
            // Plans the backend kept for this graph may predate the change.
            super::layout::replace_storage(graph).map_err(fail)?;
            self.layout_seen[device] = now;
        }
        let backend = self.backend(device)?;
        let armed = backend.set_abort_callback(Some(cb));
        let res = backend.graph_compute(graph);
        if armed {
            backend.set_abort_callback(None);
        }
        let Err(e) = res else {
            return Ok(());
        };
        let reason = why.load(Ordering::Relaxed);
        if reason != 0 {
            self.state.aborted.fetch_add(1, Ordering::Relaxed);
            self.aborted = Some(match reason {
                GONE => SessionEnd::Io(
                    "the client closed the connection during a computation: aborted it".into(),
                ),
                LATE => SessionEnd::Dropped(format!(
                    "a graph computed longer than the limit of {:?}: aborted it",
                    self.state.limits.max_compute.unwrap_or_default()
                )),
                _ => SessionEnd::Io("server shutting down: computation aborted".into()),
            });
        }
        Err(Refusal::ComputeFailed {
            device,
            why: e.to_string(),
        })
    }

    /// Handles one decoded request.
    pub(super) fn handle(&mut self, req: Request<'_>) -> Result<Reply, Refusal> {
        let state = self.state.clone();
        let limits = &state.limits;
        Ok(match req {
            Request::Hello { .. } => {
                self.greeted = true;
                Reply::Bytes(hello_response().to_vec())
            }
            Request::DeviceCount => {
                Reply::Bytes((state.factory.device_count() as u32).to_le_bytes().to_vec())
            }
            Request::AllocBuffer { device, size } => {
                let d = self.device(device)?;
                let (handle, size) = self.alloc(d, size);
                Reply::Bytes(pair_payload(handle, size).to_vec())
            }
            Request::GetAlignment { device } => {
                let d = self.device(device)?;
                let a = state.factory.device(d).default_buffer_type().alignment();
                Reply::Bytes((a as u64).to_le_bytes().to_vec())
            }
            Request::GetMaxSize { device } => {
                let d = self.device(device)?;
                let m = state.factory.device(d).default_buffer_type().max_size() as u64;
                Reply::Bytes(m.min(limits.max_buffer).to_le_bytes().to_vec())
            }
            Request::BufferGetBase { remote_ptr } => {
                let b = lookup(&self.buffers, remote_ptr, "BUFFER_GET_BASE")?;
                Reply::Bytes(b.base.to_le_bytes().to_vec())
            }
            Request::FreeBuffer { remote_ptr } => {
                lookup(&self.buffers, remote_ptr, "FREE_BUFFER")?;
                // Cached graphs may reference the buffer: drop them all.
                self.graphs.iter_mut().for_each(|g| *g = None);
                let b = self.buffers.remove(&remote_ptr).expect("looked up");
                state.release(b.size);
                Reply::Nothing
            }
            Request::BufferClear { remote_ptr, value } => {
                let b = lookup(&self.buffers, remote_ptr, "BUFFER_CLEAR")?;
                b.buffer.clear(value)?;
                Reply::Nothing
            }
            Request::SetTensor { header, data } => {
                let t = placed_range(
                    &self.buffers,
                    &header.tensor,
                    header.offset,
                    data.len() as u64,
                )?;
                if header.cache_flag != 0 {
                    state.cache_store(data);
                }
                tensor_set(&t, header.offset as usize, data)?;
                Reply::Nothing
            }
            Request::SetTensorHash {
                tensor,
                offset,
                hash,
            } => {
                if let Some(p) = state.preloaded() {
                    if let Some(bytes) = p.get(hash) {
                        let t = placed_range(&self.buffers, &tensor, offset, bytes.len() as u64)?;
                        tensor_set(&t, offset as usize, bytes)?;
                        state.preload_hits.fetch_add(1, Ordering::Relaxed);
                        tracing::info!(
                            peer = %self.peer,
                            "preload: hit {hash:016x}: {} bytes into '{}'",
                            bytes.len(),
                            t.name()
                        );
                        return Ok(Reply::Bytes(vec![1]));
                    }
                }
                let Some((bytes, _held)) = state.cache_load(hash) else {
                    return Ok(Reply::Bytes(vec![0]));
                };
                let t = placed_range(&self.buffers, &tensor, offset, bytes.len() as u64)?;
                tensor_set(&t, offset as usize, &bytes)?;
                Reply::Bytes(vec![1])
            }
            Request::GetTensor {
                tensor,
                offset,
                size,
            } => {
                let t = placed_range(&self.buffers, &tensor, offset, size)?;
                Reply::Read(t, offset as usize, size as usize)
            }
            Request::CopyTensor { src, dst } => {
                let s = placed(&self.buffers, &src)?;
                let d = placed(&self.buffers, &dst)?;
                let same = s.dtype() == d.dtype() && s.ne() == d.ne() && s.nb() == d.nb();
                if same && s.nbytes() == d.nbytes() {
                    tensor_copy(&s, &d)?;
                    Reply::Bytes(vec![1])
                } else {
                    Reply::Bytes(vec![0])
                }
            }
            // Read in place by graph_compute, never decoded whole.
            Request::GraphCompute(_) => {
                return Err(Refusal::Protocol("GRAPH_COMPUTE out of its reader"))
            }
            Request::GraphRecompute { device } => {
                let d = self.device(device)?;
                let (graph, held) = self.graphs[d]
                    .take()
                    .ok_or(Refusal::NoGraph { device: d })?;
                self.compute(d, &graph)?;
                self.graphs[d] = Some((graph, held));
                Reply::Nothing
            }
            Request::GetDeviceMemory { device } => {
                self.device(device)?;
                // The budget, not the machine's free memory: what clients
                // may still allocate here.
                let total = limits.mem;
                let free = total.saturating_sub(state.used.load(Ordering::SeqCst));
                Reply::Bytes(pair_payload(free, total).to_vec())
            }
            Request::InitTensor { tensor } => {
                if tensor.buffer == 0 {
                    tensor_of(&tensor)?;
                } else {
                    let t = placed(&self.buffers, &tensor)?;
                    let b = t.buffer().expect("placed");
                    if let Err(e) = b.init_tensor(&t) {
                        tracing::debug!(peer = %self.peer, "init_tensor: {e}");
                    }
                }
                Reply::Nothing
            }
            Request::GetAllocSize { device, tensor, .. } => {
                let d = self.device(device)?;
                let t = tensor_of(&tensor)?;
                let buft = match self.buffers.get(&tensor.buffer) {
                    Some(b) if tensor.buffer != 0 => b.buffer.buffer_type(),
                    _ => state.factory.device(d).default_buffer_type(),
                };
                Reply::Bytes((buft.alloc_size(&t) as u64).to_le_bytes().to_vec())
            }
            Request::MemsetTensor {
                tensor,
                offset,
                size,
                value,
            } => {
                let t = placed_range(&self.buffers, &tensor, offset, size)?;
                tensor_memset(&t, offset as usize, size as usize, value)?;
                Reply::Nothing
            }
        })
    }

    /// Allocates a buffer: (handle, size), or (0, 0) when it cannot.
    pub(super) fn alloc(&mut self, device: usize, size: u64) -> (u64, u64) {
        let state = &self.state;
        if size > state.limits.max_buffer || !state.reserve(size) {
            tracing::info!(peer = %self.peer, "refusing a buffer of {size} bytes (limit)");
            return (0, 0);
        }
        let buft = state.factory.device(device).default_buffer_type();
        let base = if size == 0 {
            Some(0)
        } else {
            state.next_base(size, buft.alignment() as u64)
        };
        let lazy = state.factory.repacks(device);
        let mut packer = None;
        let buffer = match (base, usize::try_from(size)) {
            (Some(_), Ok(sz)) if lazy => strata::cpu::PackedBuffer::lazy(sz).map(|p| {
                packer = Some(p.clone());
                p as Arc<dyn strata::backend::Buffer>
            }),
            (Some(_), Ok(sz)) => buft.alloc_buffer(sz),
            _ => Err(strata::Error::OutOfMemory {
                buffer_type: buft.name(),
                requested: usize::try_from(size).unwrap_or(usize::MAX),
                msg: "the server's address space for buffers is exhausted".into(),
            }),
        };
        match (buffer, base) {
            (Ok(buffer), Some(base)) => {
                let handle = state.next_handle.fetch_add(1, Ordering::Relaxed);
                state.live_buffers.fetch_add(1, Ordering::SeqCst);
                self.buffers.insert(
                    handle,
                    RemoteBuf {
                        buffer,
                        packer,
                        base,
                        size,
                    },
                );
                (handle, size)
            }
            (res, _) => {
                state.used.fetch_sub(size, Ordering::SeqCst);
                if let Err(e) = res {
                    tracing::info!(peer = %self.peer, "buffer of {size} bytes not allocated: {e}");
                }
                (0, 0)
            }
        }
    }
}
