//! Remote devices and their backends (graph serialization and compute).

use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use strata::backend::{
    checked_range, same_buffer_type, tensor_get, tensor_set, Backend, BufferType, Device,
    DeviceMemory, DeviceType, Event,
};
use strata::error::TensorProblem;
use strata::{Error, Graph, Result, Tensor};

use super::buffer::RpcBufferType;
use super::conn::{Conn, LastGraph};
use super::record::record;
use crate::proto::{decode_pair, Command, GraphMsg, Request, RpcTensor, SetTensorHeader};

/// One device of a remote server.
pub struct RpcDevice {
    pub(crate) conn: Arc<Conn>,
    pub(crate) index: u32,
    pub(crate) name: String,
    pub(crate) buft: Arc<RpcBufferType>,
}

impl std::fmt::Debug for RpcDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RpcDevice({}, index {})", self.name, self.index)
    }
}

impl RpcDevice {
    /// The device's index on its server.
    pub fn index(&self) -> u32 {
        self.index
    }

    /// A backend on this device, with its RPC-specific counters.
    pub fn rpc_backend(&self) -> RpcBackend {
        RpcBackend {
            conn: self.conn.clone(),
            device: Arc::new(RpcDevice {
                conn: self.conn.clone(),
                index: self.index,
                name: self.name.clone(),
                buft: self.buft.clone(),
            }),
            graphs_sent: 0,
            graphs_recomputed: 0,
            graphs_rerun_by_key: 0,
            pending: false,
            key: Vec::new(),
            held: None,
        }
    }
}

/// An RPC event: the server handles one connection's requests in order, so
/// "everything recorded before is done" is one round trip on the connection.
struct RpcEvent {
    conn: Arc<Conn>,
}

/// True when both events wait on the same connection (compared by the
/// connection's address, the only state an RPC event has).
fn same_event_conn(a: &Arc<dyn Event>, b: &Arc<dyn Event>) -> bool {
    a.key() == b.key()
}

impl Event for RpcEvent {
    fn synchronize(&self) -> Result<()> {
        self.conn.call(&Request::DeviceCount, None).map(|_| ())
    }
    fn key(&self) -> usize {
        Arc::as_ptr(&self.conn) as *const () as usize
    }
}

impl Device for RpcDevice {
    fn name(&self) -> String {
        self.name.clone()
    }
    fn description(&self) -> String {
        format!(
            "device {} of the RPC server at {}",
            self.index, self.conn.endpoint
        )
    }
    fn memory(&self) -> Result<DeviceMemory> {
        let r = self
            .conn
            .call(&Request::GetDeviceMemory { device: self.index }, None)?;
        let (free, total) = decode_pair(Command::GetDeviceMemory, &r).map_err(Error::from)?;
        Ok(DeviceMemory {
            free: usize::try_from(free).unwrap_or(usize::MAX),
            total: usize::try_from(total).unwrap_or(usize::MAX),
        })
    }
    fn device_type(&self) -> DeviceType {
        DeviceType::Gpu
    }
    fn init_backend(&self) -> Result<Box<dyn Backend>> {
        Ok(Box::new(self.rpc_backend()))
    }
    fn default_buffer_type(&self) -> Arc<dyn BufferType> {
        self.buft.clone()
    }
    /// Like ggml's client: the server decides (a graph it cannot run ends
    /// the connection with an error).
    fn supports_op(&self, _op: &Tensor) -> bool {
        true
    }
    fn supports_buft(&self, buft: &Arc<dyn BufferType>) -> bool {
        let mine: Arc<dyn BufferType> = self.buft.clone();
        same_buffer_type(&mine, buft)
    }
    fn event_new(&self) -> Option<Arc<dyn Event>> {
        Some(Arc::new(RpcEvent {
            conn: self.conn.clone(),
        }))
    }
}

/// An execution stream on a remote device.
pub struct RpcBackend {
    conn: Arc<Conn>,
    device: Arc<RpcDevice>,
    graphs_sent: usize,
    graphs_recomputed: usize,
    graphs_rerun_by_key: usize,
    /// A graph was sent and its completion not yet confirmed.
    pending: bool,
    /// Scratch for [`Graph::storage_key`].
    key: Vec<u64>,
    /// The storage key and send number of the graph this backend last had
    /// the device run: while both still hold, the device runs it again
    /// without the graph being serialized.
    held: Option<(Vec<u64>, u64)>,
}

impl RpcBackend {
    /// Graphs sent in full (GRAPH_COMPUTE).
    pub fn graphs_sent(&self) -> usize {
        self.graphs_sent
    }
    /// Graphs re-run by reference (GRAPH_RECOMPUTE).
    pub fn graphs_recomputed(&self) -> usize {
        self.graphs_recomputed
    }
    /// Of [`Self::graphs_recomputed`], those re-run without being
    /// serialized (the graph's storage key matched the held graph's).
    pub fn graphs_rerun_by_key(&self) -> usize {
        self.graphs_rerun_by_key
    }

    /// The record of `tensor` when `len` bytes from `offset` (checked
    /// against the tensor and its buffer) are a non-empty range in this
    /// server's memory; `None` sends the access through the tensor's own
    /// buffer (another server's or the host's, or nothing to move).
    fn on_this_server(
        &self,
        tensor: &Tensor,
        offset: usize,
        len: usize,
    ) -> Result<Option<RpcTensor>> {
        checked_range(tensor, offset, len)?;
        let rec = record(&self.conn, tensor, false, None)?;
        Ok((rec.buffer != 0 && len > 0).then_some(rec))
    }

    /// The GRAPH_COMPUTE message for `graph`: every node, and every tensor
    /// reachable from them through sources and view bases.
    pub fn serialize(&self, graph: &Graph) -> Result<GraphMsg> {
        let mut msg = GraphMsg {
            device: self.device.index,
            nodes: Vec::with_capacity(graph.nodes().len()),
            tensors: Vec::new(),
        };
        let nodes: HashSet<strata::TensorId> = graph.nodes().iter().map(|t| t.id()).collect();
        let mut seen = HashSet::new();
        let mut stack: Vec<Tensor> = Vec::new();
        for n in graph.nodes() {
            let rec = record(&self.conn, n, true, Some(graph))?;
            if rec.buffer == 0 && !n.is_view() {
                return Err(Error::BadTensor {
                    op: "RPC graph_compute",
                    tensor: n.name(),
                    problem: TensorProblem::ForeignBuffer {
                        owner: self.device.name.clone(),
                    },
                });
            }
            msg.nodes.push(n.id().get());
            stack.push(n.clone());
            while let Some(t) = stack.pop() {
                if !seen.insert(t.id()) {
                    continue;
                }
                let is_node = nodes.contains(&t.id());
                let mut rec = record(&self.conn, &t, is_node, Some(graph))?;
                if !is_node {
                    // computed before (an earlier split) or a leaf: its bytes
                    // are all the server reads, and its sources may live on
                    // other backends, so they are not sent
                    rec.src = Default::default();
                }
                if rec.buffer == 0 {
                    return Err(Error::BadTensor {
                        op: "RPC graph_compute",
                        tensor: t.name(),
                        problem: TensorProblem::ForeignBuffer {
                            owner: self.device.name.clone(),
                        },
                    });
                }
                msg.tensors.push(rec);
                if is_node {
                    stack.extend(graph.srcs(&t).cloned());
                }
                if let Some(v) = t.view_of() {
                    stack.push(v.src.clone());
                }
            }
        }
        Ok(msg)
    }
}

impl Backend for RpcBackend {
    fn name(&self) -> String {
        self.device.name.clone()
    }
    fn device(&self) -> Arc<dyn Device> {
        self.device.clone()
    }
    /// Sends the graph (or, when it is byte-identical to the last one sent
    /// to this device and no buffer was freed since, GRAPH_RECOMPUTE) and
    /// returns at once, like ggml's asynchronous backends: the server runs it
    /// while the caller goes on. [`Backend::synchronize`] waits for it, and is
    /// where a refused graph or a lost server surfaces, typed. Reads of the
    /// results are ordered after the compute by the connection.
    fn graph_compute(&mut self, graph: &Graph) -> Result<()> {
        let epoch = self.conn.free_epoch.load(Ordering::SeqCst);
        let device = self.device.index;
        if self.conn.opts.recompute {
            // The same graph over the same memory as the one the device holds
            // from this backend: its message would be byte-identical.
            graph.storage_key(&mut self.key);
            let held = self.held.as_ref().is_some_and(|(key, seq)| {
                *key == self.key
                    && self
                        .conn
                        .last_graph
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .get(&device)
                        .is_some_and(|l| l.seq == *seq && l.epoch == epoch)
            });
            if held {
                self.conn.call(&Request::GraphRecompute { device }, None)?;
                self.graphs_recomputed += 1;
                self.graphs_rerun_by_key += 1;
                self.pending = true;
                return Ok(());
            }
        }
        let msg = self.serialize(graph)?;
        let mut bytes = Vec::with_capacity(msg.encoded_len());
        msg.encode_into(&mut bytes);
        let same = if self.conn.opts.recompute {
            let last = self
                .conn
                .last_graph
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            last.get(&device)
                .filter(|l| l.epoch == epoch && l.bytes == bytes)
                .map(|l| l.seq)
        } else {
            None
        };
        let seq = match same {
            Some(seq) => {
                self.conn.call(&Request::GraphRecompute { device }, None)?;
                self.graphs_recomputed += 1;
                seq
            }
            None => {
                self.conn.call(&Request::GraphCompute(msg), None)?;
                self.graphs_sent += 1;
                let seq = self.conn.graph_seq.fetch_add(1, Ordering::SeqCst);
                self.conn
                    .last_graph
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(device, LastGraph { epoch, bytes, seq });
                seq
            }
        };
        if self.conn.opts.recompute {
            self.held = Some((std::mem::take(&mut self.key), seq));
        }
        self.pending = true;
        Ok(())
    }

    /// GRAPH_COMPUTE has no response: a cheap request with one tells when
    /// the server is done, or that it refused the graph.
    fn synchronize(&mut self) -> Result<()> {
        if !std::mem::take(&mut self.pending) {
            return Ok(());
        }
        let device = self.device.index;
        self.conn
            .call(&Request::DeviceCount, None)
            .map(|_| ())
            .inspect_err(|_| {
                self.conn
                    .last_graph
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(&device);
            })
    }

    /// Requests on one connection run in order: nothing to mark.
    fn event_record(&mut self, _event: &Arc<dyn Event>) -> Result<()> {
        Ok(())
    }

    /// Work queued on this connection already runs after everything before
    /// it; only events of other connections need a wait.
    fn event_wait(&mut self, event: &Arc<dyn Event>) -> Result<()> {
        let mine = self
            .device
            .event_new()
            .is_some_and(|m| same_event_conn(&m, event));
        if mine {
            Ok(())
        } else {
            event.synchronize()
        }
    }

    fn copies_are_ordered(&self) -> bool {
        true
    }

    /// SET_TENSOR has no response: the write is queued on the connection
    /// behind the graphs sent before and this returns at once (no hash
    /// lookup: asynchronous writes are a graph's data, not weights).
    /// Tensors outside this server's memory are written through their own
    /// buffer.
    fn set_tensor_async(&mut self, tensor: &Tensor, offset: usize, data: &[u8]) -> Result<()> {
        let Some(rec) = self.on_this_server(tensor, offset, data.len())? else {
            return tensor_set(tensor, offset, data);
        };
        let header = SetTensorHeader {
            tensor: rec,
            cache_flag: 0,
            offset: offset as u64,
        };
        self.conn
            .call(&Request::SetTensor { header, data }, None)
            .map(|_| ())
    }

    /// GET_TENSOR answers after everything queued before it on the
    /// connection: the read sees the graphs sent before, without a separate
    /// synchronize. Tensors outside this server's memory are read through
    /// their own buffer.
    fn get_tensor_async(&mut self, tensor: &Tensor, offset: usize, out: &mut [u8]) -> Result<()> {
        let Some(rec) = self.on_this_server(tensor, offset, out.len())? else {
            return tensor_get(tensor, offset, out);
        };
        let req = Request::GetTensor {
            tensor: rec,
            offset: offset as u64,
            size: out.len() as u64,
        };
        self.conn.call_into(&req, out).map(|_| ())
    }
}
