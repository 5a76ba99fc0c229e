//! The RPC server: serves local strata devices to ggml-protocol clients.
//!
//! Each connection gets its own state (buffers, backends, cached graphs),
//! freed when it ends. Every message is validated before it is acted on:
//! sizes against [`Limits`], buffer handles against the connection's own,
//! every tensor's byte range against its buffer, and every graph node
//! against strata's shape inference. A bad message closes that connection
//! with a logged reason; the server and other clients carry on.
//!
//! ```no_run
//! use std::sync::Arc;
//! use strata_rpc::server::{CpuBackendFactory, Limits, Server};
//! let server = Server::bind("127.0.0.1:0", Arc::new(CpuBackendFactory::new(2)), Limits::default()).unwrap();
//! let (addr, handle) = server.spawn_background().unwrap();
//! println!("serving on {addr}: {:?}", handle.stats());
//! handle.shutdown();
//! ```

mod conns;
mod graph;
mod handlers;
mod layout;
mod preload;
mod refusal;
mod session;
mod validate;
mod watch;

use std::io::Write;
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use strata::backend::{Backend, Device};
use strata::cpu::{cpu_device, CpuBackend};
use strata::{Error, Result};

pub use preload::Preload;
pub use session::{Session, SessionEnd, StatsHandle};

use crate::proto::fnv1a;

/// Memory a received graph costs per payload byte while it is read,
/// rebuilt, computed and kept for GRAPH_RECOMPUTE: the payload (1x), the
/// rebuilt tensors and tables (1.6x) and the CPU backend's per-node plans
/// (3.1x), measured at 5.7x to 6x peak for a graph of nothing but nodes,
/// the costliest shape (tests/exhaustion.rs); 8 leaves a margin.
pub const GRAPH_COST: u64 = 8;

/// Limits a server enforces on every connection.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Largest GRAPH_COMPUTE payload, in bytes (SET_TENSOR data is bounded
    /// by the tensor it writes, hence by `max_buffer`).
    pub max_message: u64,
    /// Memory all connections together may hold for messages: graphs being
    /// received and rebuilt, and kept for GRAPH_RECOMPUTE (each costs
    /// [`GRAPH_COST`] times its payload), cached uploads. A message that does
    /// not fit waits up to `io_timeout` for room, then closes its connection.
    pub max_inflight: u64,
    /// Largest single buffer (also what GET_MAX_SIZE reports), in bytes.
    pub max_buffer: u64,
    /// Memory budget: bytes all clients together may hold in buffers,
    /// reported as each device's memory (GET_DEVICE_MEMORY). Allocations
    /// beyond it get ggml's failure reply (a null handle).
    pub mem: u64,
    /// Most nodes in one graph.
    pub max_graph_nodes: usize,
    /// Most tensor records in one graph.
    pub max_graph_tensors: usize,
    /// Most clients served at once (past their HELLO); further connections
    /// are closed at once.
    pub max_connections: usize,
    /// Most clients served at once from one IP address.
    pub max_per_address: usize,
    /// Most connections waiting for their HELLO; one more evicts the oldest.
    pub max_pending: usize,
    /// Time from accept to a complete HELLO.
    pub handshake_timeout: Duration,
    /// Longest wait for the next message of a client that holds no buffer.
    pub idle_timeout: Duration,
    /// Longest wait for the next message of a client that holds buffers
    /// (`None`: no limit, as a model loaded between prompts stays idle).
    pub idle_timeout_loaded: Option<Duration>,
    /// Longest stall of any read inside a message, and of any write.
    pub io_timeout: Duration,
    /// Longest computation of one graph (`None`: no limit); a longer one is
    /// aborted and its connection closed. A computation is also aborted when
    /// its client closes the connection.
    pub max_compute: Option<Duration>,
}

/// The default memory budget: two thirds of the machine's physical memory
/// (4 GiB where it cannot be read).
pub fn default_mem_budget() -> u64 {
    let total = strata::cpu::cpu_device()
        .memory()
        .map_or(0, |m| m.total as u64);
    if total == 0 {
        4 << 30
    } else {
        total / 3 * 2
    }
}

impl Default for Limits {
    /// Limits for the default memory budget ([`default_mem_budget`]).
    fn default() -> Limits {
        Limits::with_mem(default_mem_budget())
    }
}

impl Limits {
    /// Limits for a memory budget of `bytes` (also the largest buffer).
    /// Message memory is derived from it: an eighth of it (4 MiB to 2 GiB)
    /// in flight, a graph message up to a [`GRAPH_COST`]th of that.
    pub fn with_mem(bytes: u64) -> Limits {
        let max_inflight = (bytes / 8).clamp(4 << 20, 2 << 30);
        let max_message = max_inflight / GRAPH_COST;
        let records = max_message / crate::proto::RPC_TENSOR_SIZE as u64;
        Limits {
            mem: bytes,
            max_buffer: bytes,
            max_message,
            max_inflight,
            max_graph_nodes: records.min(1 << 18) as usize,
            max_graph_tensors: records.min(1 << 20) as usize,
            max_connections: 64,
            max_per_address: 16,
            max_pending: 64,
            handshake_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(120),
            idle_timeout_loaded: None,
            io_timeout: Duration::from_secs(30),
            max_compute: None,
        }
    }
}

/// The devices a server exposes and how to make a backend on each.
pub trait BackendFactory: Send + Sync {
    /// Number of devices (the wire's device indices are `0..count`).
    fn device_count(&self) -> usize;
    /// Device `index` (< count): its buffer type and memory.
    fn device(&self, index: usize) -> Arc<dyn Device>;
    /// A new backend (execution stream) on device `index`, one per connection.
    fn backend(&self, index: usize) -> Result<Box<dyn Backend>>;
    /// True when buffers of device `index` are lazy `CPU_PACKED` buffers
    /// ([`strata::cpu::PackedBuffer::lazy`]): the weights graphs read only
    /// as MUL_MAT weights are repacked in place before they run.
    fn repacks(&self, _index: usize) -> bool {
        false
    }
}

/// Serves the CPU: `devices` copies of the CPU device (normally 1), each
/// connection computing with its own `threads`-thread pool.
#[derive(Clone, Debug)]
pub struct CpuBackendFactory {
    threads: usize,
    devices: usize,
    repack: bool,
}

impl CpuBackendFactory {
    /// One CPU device computing with `threads` threads.
    pub fn new(threads: usize) -> CpuBackendFactory {
        CpuBackendFactory {
            threads: threads.max(1),
            devices: 1,
            repack: true,
        }
    }
    /// Whether received MUL_MAT weights are repacked for the CPU's packed
    /// kernels (default: yes; see [`BackendFactory::repacks`]). Clients read
    /// back the same bytes either way.
    pub fn with_repack(mut self, repack: bool) -> CpuBackendFactory {
        self.repack = repack;
        self
    }
    /// Exposes the CPU as `n` devices (at least 1): for multi-device clients and tests.
    pub fn with_devices(mut self, n: usize) -> CpuBackendFactory {
        self.devices = n.max(1);
        self
    }
}

impl BackendFactory for CpuBackendFactory {
    fn device_count(&self) -> usize {
        self.devices
    }
    fn device(&self, _index: usize) -> Arc<dyn Device> {
        cpu_device()
    }
    fn backend(&self, _index: usize) -> Result<Box<dyn Backend>> {
        Ok(Box::new(CpuBackend::new(self.threads)))
    }
    fn repacks(&self, _index: usize) -> bool {
        self.repack
    }
}

/// Counters describing a server's state (for tests and monitoring).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ServerStats {
    /// Connections being served now.
    pub active_connections: usize,
    /// Connections accepted since start.
    pub total_connections: usize,
    /// Connections closed because a message was refused.
    pub refused_messages: usize,
    /// Connections waiting for their HELLO.
    pub pending_connections: usize,
    /// Connections closed by a limit: a cap, an eviction, a deadline.
    pub dropped_connections: usize,
    /// Buffers currently allocated by all clients.
    pub live_buffers: usize,
    /// Bytes currently allocated by all clients.
    pub allocated_bytes: u64,
    /// Message memory held now (graphs received or kept, cached uploads).
    pub inflight_bytes: u64,
    /// Computations stopped midway: client gone, time limit, shutdown.
    pub aborted_computations: usize,
    /// SET_TENSOR_HASH requests served from preloaded files (`--preload`).
    pub preload_hits: usize,
    /// Weights repacked in place for the CPU's packed kernels.
    pub repacked_tensors: usize,
}

/// State shared by the connections of one server.
pub(crate) struct State {
    factory: Arc<dyn BackendFactory>,
    limits: Limits,
    cache_dir: Mutex<Option<PathBuf>>,
    preload: Mutex<Option<Arc<Preload>>>,
    preload_hits: AtomicUsize,
    repacked: AtomicUsize,
    next_handle: AtomicU64,
    next_addr: AtomicU64,
    used: AtomicU64,
    inflight: Mutex<u64>,
    inflight_freed: Condvar,
    live_buffers: AtomicUsize,
    active: AtomicUsize,
    total: AtomicUsize,
    refused: AtomicUsize,
    dropped: AtomicUsize,
    aborted: AtomicUsize,
    shutdown: AtomicBool,
    conns: Mutex<conns::Conns>,
}

/// Message memory held by a connection; returned when dropped.
pub(crate) struct Inflight {
    state: Arc<State>,
    pub(crate) bytes: u64,
}

impl Drop for Inflight {
    fn drop(&mut self) {
        let mut held = self
            .state
            .inflight
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        *held = held.saturating_sub(self.bytes);
        self.state.inflight_freed.notify_all();
    }
}

/// First synthetic buffer address; addresses stay far below 2^63.
const ADDR_START: u64 = 0x1000_0000_0000;
const ADDR_END: u64 = 1 << 62;

impl State {
    fn new(factory: Arc<dyn BackendFactory>, limits: Limits) -> State {
        State {
            factory,
            limits,
            cache_dir: Mutex::new(None),
            preload: Mutex::new(None),
            preload_hits: AtomicUsize::new(0),
            repacked: AtomicUsize::new(0),
            next_handle: AtomicU64::new(0x5000_0001),
            next_addr: AtomicU64::new(ADDR_START),
            used: AtomicU64::new(0),
            inflight: Mutex::new(0),
            inflight_freed: Condvar::new(),
            live_buffers: AtomicUsize::new(0),
            active: AtomicUsize::new(0),
            total: AtomicUsize::new(0),
            refused: AtomicUsize::new(0),
            dropped: AtomicUsize::new(0),
            aborted: AtomicUsize::new(0),
            shutdown: AtomicBool::new(false),
            conns: Mutex::new(conns::Conns::default()),
        }
    }

    fn stats(&self) -> ServerStats {
        ServerStats {
            active_connections: self.active.load(Ordering::SeqCst),
            total_connections: self.total.load(Ordering::SeqCst),
            refused_messages: self.refused.load(Ordering::SeqCst),
            pending_connections: self
                .conns
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .pending(),
            dropped_connections: self.dropped.load(Ordering::SeqCst),
            live_buffers: self.live_buffers.load(Ordering::SeqCst),
            allocated_bytes: self.used.load(Ordering::SeqCst),
            inflight_bytes: *self.inflight.lock().unwrap_or_else(|e| e.into_inner()),
            aborted_computations: self.aborted.load(Ordering::SeqCst),
            preload_hits: self.preload_hits.load(Ordering::SeqCst),
            repacked_tensors: self.repacked.load(Ordering::SeqCst),
        }
    }

    /// Reserves `bytes` of message memory, waiting up to `wait` for room;
    /// `None` when it does not fit in that time (or ever).
    fn acquire(self: &Arc<State>, bytes: u64, wait: Duration) -> Option<Inflight> {
        if bytes > self.limits.max_inflight {
            return None;
        }
        let end = Instant::now() + wait;
        let mut held = self.inflight.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if *held + bytes <= self.limits.max_inflight {
                *held += bytes;
                return Some(Inflight {
                    state: self.clone(),
                    bytes,
                });
            }
            let now = Instant::now();
            if now >= end || self.shutdown.load(Ordering::SeqCst) {
                return None;
            }
            held = self
                .inflight_freed
                .wait_timeout(held, end - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// Reserves `size` bytes of the memory budget.
    fn reserve(&self, size: u64) -> bool {
        let budget = self.limits.mem;
        self.used
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |u| {
                u.checked_add(size).filter(|&n| n <= budget)
            })
            .is_ok()
    }

    /// Returns a freed buffer's bytes to the budget.
    fn release(&self, size: u64) {
        self.used.fetch_sub(size, Ordering::SeqCst);
        self.live_buffers.fetch_sub(1, Ordering::SeqCst);
    }

    /// A fresh synthetic base address for a buffer of `size` bytes, aligned
    /// to `align` and followed by an unused guard page; `None` when the
    /// address space is exhausted.
    fn next_base(&self, size: u64, align: u64) -> Option<u64> {
        let step = size.checked_add(2 * 4096 + align.max(4096))?;
        let step = step - step % 4096;
        let start = self
            .next_addr
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |a| {
                a.checked_add(step).filter(|&e| e <= ADDR_END)
            })
            .ok()?;
        let a = align.max(1).next_power_of_two().max(4096);
        Some(start.div_ceil(a) * a)
    }

    /// The preloaded files, when the server has any.
    fn preloaded(&self) -> Option<Arc<Preload>> {
        self.preload
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn cache_enabled(&self) -> bool {
        self.cache_dir
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some()
    }

    fn cache_path(&self, hash: u64) -> Option<PathBuf> {
        let dir = self.cache_dir.lock().unwrap_or_else(|e| e.into_inner());
        dir.as_ref().map(|d| d.join(format!("{hash:016x}")))
    }

    /// Stores bytes in the file cache (when one is configured); failures are logged.
    fn cache_store(&self, data: &[u8]) {
        if let Some(path) = self.cache_path(fnv1a(data)) {
            match std::fs::write(&path, data) {
                Ok(()) => tracing::info!("cache: saved {} bytes to {}", data.len(), path.display()),
                Err(e) => tracing::warn!("cache: cannot write {}: {e}", path.display()),
            }
        }
    }

    /// Bytes cached under `hash`, when present, no larger than a buffer may
    /// be, and there is message memory for them now (otherwise the client
    /// uploads them, streamed).
    fn cache_load(self: &Arc<State>, hash: u64) -> Option<(Vec<u8>, Inflight)> {
        let path = self.cache_path(hash)?;
        let len = std::fs::metadata(&path).ok()?.len();
        if len > self.limits.max_buffer {
            return None;
        }
        let held = self.acquire(len, Duration::ZERO)?;
        let bytes = std::fs::read(&path).ok()?;
        (bytes.len() as u64 == len).then_some((bytes, held))
    }
}

/// A bound, not yet serving, RPC server.
pub struct Server {
    listener: TcpListener,
    state: Arc<State>,
}

/// Controls a server running in the background.
pub struct ServerHandle {
    state: Arc<State>,
    addr: SocketAddr,
    thread: Option<JoinHandle<Result<()>>>,
}

impl Server {
    /// Binds `addr` (e.g. `"127.0.0.1:50052"`; port 0 picks a free port).
    pub fn bind(
        addr: impl ToSocketAddrs,
        factory: Arc<dyn BackendFactory>,
        limits: Limits,
    ) -> Result<Server> {
        let listener = TcpListener::bind(addr).map_err(|e| Error::io("RPC server: bind", e))?;
        Ok(Server {
            listener,
            state: Arc::new(State::new(factory, limits)),
        })
    }

    /// Enables the file cache for hashed uploads in `dir` (created if missing).
    pub fn with_cache_dir(self, dir: impl Into<PathBuf>) -> Result<Server> {
        let dir = dir.into();
        std::fs::create_dir_all(&dir)
            .map_err(|e| Error::io(format!("RPC server: cache directory {}", dir.display()), e))?;
        *self
            .state
            .cache_dir
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(dir);
        Ok(self)
    }

    /// Serves SET_TENSOR_HASH from `preload`'s files (see [`Preload`]),
    /// before the file cache.
    pub fn with_preload(self, preload: Preload) -> Server {
        *self.state.preload.lock().unwrap_or_else(|e| e.into_inner()) = Some(Arc::new(preload));
        self
    }

    /// The address the server listens on.
    pub fn local_addr(&self) -> Result<SocketAddr> {
        self.listener
            .local_addr()
            .map_err(|e| Error::io("RPC server: local address", e))
    }

    /// Counters of this server.
    pub fn stats(&self) -> ServerStats {
        self.state.stats()
    }

    /// Accepts clients until shut down, each served on its own thread.
    pub fn serve(self) -> Result<()> {
        let reaper = {
            let state = self.state.clone();
            std::thread::Builder::new()
                .name("rpc-reaper".into())
                .spawn(move || {
                    while !state.shutdown.load(Ordering::SeqCst) {
                        state.reap_pending();
                        std::thread::sleep(Duration::from_millis(50));
                    }
                })
                .map_err(|e| Error::io("RPC server: spawn", e))?
        };
        let mut next_conn = 0usize;
        for stream in self.listener.incoming() {
            if self.state.shutdown.load(Ordering::SeqCst) {
                break;
            }
            let stream = match stream {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!("accept failed: {e}");
                    std::thread::sleep(Duration::from_millis(10));
                    continue;
                }
            };
            let ip = stream.peer_addr().ok().map(|a| a.ip());
            let peer = stream
                .peer_addr()
                .map_or_else(|_| "?".into(), |a| a.to_string());
            next_conn += 1;
            let id = next_conn;
            let Ok(handle) = stream.try_clone() else {
                tracing::warn!(peer, "cannot keep a handle on the connection: closing it");
                continue;
            };
            {
                // Caps are checked at HELLO: a pending connection costs little.
                let mut conns = self.state.conns.lock().unwrap_or_else(|e| e.into_inner());
                if conns.pending() >= self.state.limits.max_pending && conns.evict_oldest_pending()
                {
                    tracing::info!(
                        "{} connections without HELLO: evicted the oldest",
                        conns.pending() + 1
                    );
                    self.state.dropped.fetch_add(1, Ordering::Relaxed);
                }
                conns.map.insert(
                    id,
                    conns::ConnEntry {
                        stream: handle,
                        ip,
                        since: Instant::now(),
                        established: false,
                        spoke: false,
                    },
                );
            }
            let _ = stream.set_nodelay(true);
            self.state.total.fetch_add(1, Ordering::SeqCst);
            let state = self.state.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("rpc-conn-{id}"))
                .spawn(move || serve_connection(state, stream, peer, id));
            if let Err(e) = spawned {
                tracing::warn!("cannot start a connection thread: {e}");
                self.state
                    .conns
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .map
                    .remove(&id);
            }
        }
        let _ = reaper.join();
        Ok(())
    }

    /// Serves on a background thread; returns the address and a handle.
    pub fn spawn_background(self) -> Result<(SocketAddr, ServerHandle)> {
        let addr = self.local_addr()?;
        let state = self.state.clone();
        let thread = std::thread::Builder::new()
            .name("rpc-accept".into())
            .spawn(move || self.serve())
            .map_err(|e| Error::io("RPC server: spawn", e))?;
        Ok((
            addr,
            ServerHandle {
                state,
                addr,
                thread: Some(thread),
            },
        ))
    }
}

/// Serves `threads`-thread CPU devices with default [`Limits`] on a free
/// loopback port (`127.0.0.1:0`) in the background: the setup tests,
/// examples and benchmarks share. Returns the address and the handle (the
/// server stops when the handle drops).
pub fn spawn_loopback_cpu(threads: usize) -> Result<(SocketAddr, ServerHandle)> {
    Server::bind(
        "127.0.0.1:0",
        Arc::new(CpuBackendFactory::new(threads)),
        Limits::default(),
    )?
    .spawn_background()
}

fn serve_connection(state: Arc<State>, mut stream: TcpStream, peer: String, id: usize) {
    tracing::info!(peer, "client connected");
    // Last resort: a bug that panics ends this connection (its buffers are
    // freed while unwinding), never the server.
    let timeouts = stream
        .set_read_timeout(Some(state.limits.io_timeout))
        .and_then(|_| stream.set_write_timeout(Some(state.limits.io_timeout)));
    let link = stream.try_clone();
    let served = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let link = match (timeouts, link) {
            (Ok(()), Ok(l)) => l,
            (Err(e), _) | (_, Err(e)) => {
                tracing::warn!(peer, "cannot set up the connection: {e}");
                return;
            }
        };
        let mut session = Session::new(state.clone(), peer.clone());
        session.attach(id, link);
        session.serve(&mut stream);
    }));
    if served.is_err() {
        state.refused.fetch_add(1, Ordering::Relaxed);
        tracing::error!(
            peer,
            "internal error while serving this client (a bug: please report)"
        );
    }
    let _ = stream.flush();
    let _ = stream.shutdown(std::net::Shutdown::Both);
    state
        .conns
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .map
        .remove(&id);
    tracing::info!(peer, "client connection closed");
}

impl ServerHandle {
    /// The address the server listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Counters of the server.
    pub fn stats(&self) -> ServerStats {
        self.state.stats()
    }

    /// Waits until `pred` holds for the stats or `timeout` passes; returns the last stats.
    pub fn wait_for(
        &self,
        timeout: Duration,
        pred: impl Fn(&ServerStats) -> bool,
    ) -> std::result::Result<ServerStats, ServerStats> {
        let end = Instant::now() + timeout;
        loop {
            let s = self.stats();
            if pred(&s) {
                return Ok(s);
            }
            if Instant::now() > end {
                return Err(s);
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Severs every client connection at once (as if the server died),
    /// leaving the listener up.
    pub fn drop_connections(&self) {
        let conns = self.state.conns.lock().unwrap_or_else(|e| e.into_inner());
        for e in conns.map.values() {
            let _ = e.stream.shutdown(std::net::Shutdown::Both);
        }
    }

    /// Stops accepting, severs every connection and waits for the accept loop.
    pub fn shutdown(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        self.state.shutdown.store(true, Ordering::SeqCst);
        self.drop_connections();
        // Wake the accept loop.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for ServerHandle {
    fn drop(&mut self) {
        if self.thread.is_some() {
            self.stop();
        }
    }
}
