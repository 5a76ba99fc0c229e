//! One client connection: its buffers, backends and cached graphs, and the
//! command loop. Every request is decoded and validated before anything is
//! touched; a bad one ends the connection with a logged reason.

use std::collections::HashMap;
use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use strata::backend::{tensor_get, tensor_set, Backend};
use strata::{Graph, Tensor};

use super::graph::rebuild;
use super::validate::{placed_range, RemoteBuf};
use super::watch::{Prefixed, Probe};
use super::{BackendFactory, Inflight, Limits, ServerStats, State, GRAPH_COST};
use crate::proto::{
    decode_request, parse_request_header, Command, GraphView, Request, REQUEST_HEADER_SIZE,
    SET_TENSOR_FIXED,
};

/// How a connection ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionEnd {
    /// The client closed the connection between messages.
    Closed,
    /// The server refused a message (the reason is also logged).
    Refused(String),
    /// Reading or writing the stream failed.
    Io(String),
    /// The server closed it for a limit: a cap on connections, or a client
    /// idle or stalled past its deadline.
    Dropped(String),
}

/// A failed read or write: a timeout means the client stalled.
fn io_end(e: std::io::Error) -> SessionEnd {
    match e.kind() {
        ErrorKind::WouldBlock | ErrorKind::TimedOut => {
            SessionEnd::Dropped("the client stalled past the I/O timeout".into())
        }
        _ => SessionEnd::Io(e.to_string()),
    }
}

/// Bytes moved per step when streaming tensor data (each connection keeps
/// a scratch buffer of this size).
const CHUNK: usize = 1 << 20;

/// Slowest average rate a client may send a graph at (on top of one
/// `io_timeout`): a trickle cannot hold message memory for long.
const MIN_RATE: u64 = 1 << 20;

/// What a handled request answers.
pub(super) enum Reply {
    /// No response at all.
    Nothing,
    /// A response payload.
    Bytes(Vec<u8>),
    /// `size` bytes of a tensor from `offset`, streamed.
    Read(Tensor, usize, usize),
}

/// Reads the counters of a server or standalone session state.
#[derive(Clone)]
pub struct StatsHandle(Arc<State>);

impl StatsHandle {
    /// Current counters.
    pub fn get(&self) -> ServerStats {
        self.0.stats()
    }
}

/// The state of one client connection. Dropping it frees every buffer the
/// client allocated.
pub struct Session {
    pub(super) state: Arc<State>,
    pub(super) buffers: HashMap<u64, RemoteBuf>,
    pub(super) backends: Vec<Option<Box<dyn Backend>>>,
    /// Per device: the last graph, for GRAPH_RECOMPUTE, with the message
    /// memory it holds.
    pub(super) graphs: Vec<Option<(Graph, Inflight)>>,
    /// Per device: the buffers' layout changes when it last computed
    /// (`layout::changes`); a different count re-places a recomputed graph.
    pub(super) layout_seen: Vec<u64>,
    pub(super) greeted: bool,
    pub(super) peer: String,
    scratch: Vec<u8>,
    /// The server's id of this connection and a handle on its socket
    /// (deadlines, admission); `None` for in-memory sessions.
    link: Option<(usize, TcpStream)>,
    /// Watches the client during computations; with the bytes it read ahead.
    pub(super) probe: Option<Arc<Probe>>,
    /// How the connection ends after an aborted computation.
    pub(super) aborted: Option<SessionEnd>,
    started: Instant,
}

impl Session {
    pub(crate) fn new(state: Arc<State>, peer: String) -> Session {
        let n = state.factory.device_count();
        state.active.fetch_add(1, Ordering::SeqCst);
        Session {
            state,
            buffers: HashMap::new(),
            backends: (0..n).map(|_| None).collect(),
            graphs: (0..n).map(|_| None).collect(),
            layout_seen: vec![0; n],
            greeted: false,
            peer,
            scratch: Vec::new(),
            link: None,
            probe: None,
            aborted: None,
            started: Instant::now(),
        }
    }

    /// Ties the session to connection `id` of its server, whose socket
    /// `stream` is: deadlines apply to reads, and HELLO must pass admission.
    pub(crate) fn attach(&mut self, id: usize, stream: TcpStream) {
        if let Ok(watch) = stream.try_clone() {
            self.probe = Some(Arc::new(Probe::new(watch)));
        }
        self.link = Some((id, stream));
    }

    /// How long the next message may take to start: the rest of the
    /// handshake deadline, or the idle deadline (`None`: no limit).
    fn idle_limit(&self) -> Option<Duration> {
        let l = &self.state.limits;
        if !self.greeted {
            // The server's reaper severs the connection at the deadline; the
            // read timeout is the backstop.
            Some(
                (l.handshake_timeout + Duration::from_secs(1))
                    .saturating_sub(self.started.elapsed()),
            )
        } else if self.buffers.is_empty() {
            Some(l.idle_timeout)
        } else {
            l.idle_timeout_loaded
        }
    }

    /// Sets the socket's read timeout before waiting for a message.
    fn await_message(&self) -> Result<(), SessionEnd> {
        if let Some((_, s)) = &self.link {
            let wait = self.idle_limit().map(|d| d.max(Duration::from_millis(1)));
            s.set_read_timeout(wait).map_err(io_end)?;
        }
        Ok(())
    }

    /// Sets the socket's read timeout once a message has started.
    fn in_message(&self) -> Result<(), SessionEnd> {
        if let Some((_, s)) = &self.link {
            s.set_read_timeout(Some(self.state.limits.io_timeout))
                .map_err(io_end)?;
        }
        Ok(())
    }

    /// The end for a failed wait for the next message.
    fn idle_end(&self, e: std::io::Error) -> SessionEnd {
        match e.kind() {
            ErrorKind::WouldBlock | ErrorKind::TimedOut => SessionEnd::Dropped(if self.greeted {
                format!(
                    "no message for {:?} (idle deadline)",
                    self.idle_limit().unwrap_or_default()
                )
            } else {
                format!(
                    "no HELLO within {:?} (handshake deadline)",
                    self.state.limits.handshake_timeout
                )
            }),
            _ => SessionEnd::Io(e.to_string()),
        }
    }

    /// A session not attached to a listening server: for serving a stream
    /// held in memory (tests, fuzzing).
    pub fn standalone(factory: Arc<dyn BackendFactory>, limits: Limits) -> Session {
        Session::new(Arc::new(State::new(factory, limits)), "in-memory".into())
    }

    /// Counters of the server (or standalone state) this session belongs to.
    pub fn stats(&self) -> ServerStats {
        self.state.stats()
    }

    /// A handle reading the same counters, usable after the session is dropped.
    pub fn stats_handle(&self) -> StatsHandle {
        StatsHandle(self.state.clone())
    }

    /// Serves requests from `stream` until the client closes it, a message is
    /// refused, or I/O fails. Never panics on any input.
    pub fn serve<S: Read + Write>(&mut self, stream: &mut S) -> SessionEnd {
        let mut stream = Prefixed {
            ahead: self.probe.as_ref().map(|p| p.ahead()),
            inner: stream,
        };
        let end = self.serve_inner(&mut stream);
        match &end {
            SessionEnd::Refused(r) => {
                self.state.refused.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(peer = %self.peer, "closing connection: {r}");
            }
            SessionEnd::Io(e) => tracing::info!(peer = %self.peer, "connection lost: {e}"),
            SessionEnd::Dropped(why) => {
                self.state.dropped.fetch_add(1, Ordering::Relaxed);
                tracing::info!(peer = %self.peer, "closing connection: {why}");
            }
            SessionEnd::Closed => tracing::debug!(peer = %self.peer, "client closed connection"),
        }
        end
    }

    fn serve_inner<S: Read + Write>(&mut self, stream: &mut S) -> SessionEnd {
        loop {
            let mut head = [0u8; REQUEST_HEADER_SIZE];
            if let Err(e) = self.await_message() {
                return e;
            }
            match read_exact_or_eof(stream, &mut head[..1]) {
                Ok(false) => return SessionEnd::Closed,
                Ok(true) => {}
                Err(e) => return self.idle_end(e),
            }
            if let Err(e) = self.in_message() {
                return e;
            }
            if let (false, Some((id, _))) = (self.greeted, &self.link) {
                self.state.spoke(*id);
            }
            let Some(cmd) = Command::from_u8(head[0]) else {
                return SessionEnd::Refused(format!("unknown command {}", head[0]));
            };
            if !self.greeted && cmd != Command::Hello {
                return SessionEnd::Refused(format!("expected HELLO first, got {cmd}"));
            }
            if self.greeted && cmd == Command::Hello {
                return SessionEnd::Refused("HELLO after the handshake".into());
            }
            if let Err(e) = stream.read_exact(&mut head[1..]) {
                return io_end(e);
            }
            let (_, size) = parse_request_header(&head);
            let limits = &self.state.limits;
            let set_max = limits.max_buffer.saturating_add(SET_TENSOR_FIXED as u64);
            match cmd.request_size() {
                Some(n) if size != n as u64 => {
                    return SessionEnd::Refused(format!(
                        "{cmd}: size {size}, expected {n} (client speaks another protocol version?)"
                    ))
                }
                None if cmd == Command::SetTensor && size > set_max => {
                    return SessionEnd::Refused(format!(
                        "{cmd}: message of {size} bytes exceeds the largest buffer ({} bytes)",
                        limits.max_buffer
                    ))
                }
                None if cmd == Command::GraphCompute && size > limits.max_message => {
                    return SessionEnd::Refused(format!(
                        "{cmd}: message of {size} bytes exceeds the limit of {} bytes \
                         (derived from the memory budget)",
                        limits.max_message
                    ))
                }
                _ => {}
            }
            if cmd == Command::SetTensor && size >= SET_TENSOR_FIXED as u64 {
                if let Err(e) = self.stream_set_tensor(stream, size) {
                    return e;
                }
                continue;
            }
            if cmd == Command::GraphCompute {
                if let Err(e) = self.graph_compute(stream, size) {
                    return self.aborted.take().unwrap_or(e);
                }
                continue;
            }
            // Fixed-size requests (at most a few KiB) and a too-short SET_TENSOR.
            let mut payload = Vec::new();
            if payload.try_reserve_exact(size as usize).is_err() {
                return SessionEnd::Refused(format!("{cmd}: cannot reserve {size} bytes"));
            }
            match stream.take(size).read_to_end(&mut payload) {
                Ok(n) if n as u64 == size => {}
                Ok(n) => {
                    return SessionEnd::Io(format!(
                        "{cmd}: stream ended after {n} of {size} payload bytes"
                    ))
                }
                Err(e) => return io_end(e),
            }
            let req = match decode_request(cmd as u8, &payload) {
                Ok(r) => r,
                Err(e) => return SessionEnd::Refused(e.to_string()),
            };
            if let (Command::Hello, Some((id, _))) = (cmd, &self.link) {
                // Caps apply from here: a pending connection costs nothing.
                if let Err(why) = self.state.establish(*id) {
                    return SessionEnd::Dropped(why);
                }
            }
            let reply = match self.handle(req) {
                Ok(r) => r,
                Err(e) => {
                    return self
                        .aborted
                        .take()
                        .unwrap_or_else(|| SessionEnd::Refused(format!("{cmd}: {e}")))
                }
            };
            if let Err(e) = self.respond(stream, reply) {
                return e;
            }
        }
    }

    /// Writes a response; tensor reads are streamed in chunks.
    fn respond<S: Write>(&mut self, stream: &mut S, reply: Reply) -> Result<(), SessionEnd> {
        let io = io_end;
        match reply {
            Reply::Nothing => Ok(()),
            Reply::Bytes(body) => {
                self.scratch.clear();
                self.scratch
                    .extend_from_slice(&(body.len() as u64).to_le_bytes());
                self.scratch.extend_from_slice(&body);
                stream.write_all(&self.scratch).map_err(io)?;
                stream.flush().map_err(io)
            }
            Reply::Read(t, offset, size) if size <= CHUNK => {
                // One write for header and data: one segment for small reads.
                self.scratch.resize(8 + size, 0);
                self.scratch[..8].copy_from_slice(&(size as u64).to_le_bytes());
                tensor_get(&t, offset, &mut self.scratch[8..])
                    .map_err(|e| SessionEnd::Refused(format!("GET_TENSOR: {e}")))?;
                stream.write_all(&self.scratch).map_err(io)?;
                stream.flush().map_err(io)
            }
            Reply::Read(t, offset, size) => {
                stream.write_all(&(size as u64).to_le_bytes()).map_err(io)?;
                let mut done = 0;
                while done < size {
                    let n = (size - done).min(CHUNK);
                    self.scratch.resize(n, 0);
                    tensor_get(&t, offset + done, &mut self.scratch[..n])
                        .map_err(|e| SessionEnd::Refused(format!("GET_TENSOR: {e}")))?;
                    stream.write_all(&self.scratch[..n]).map_err(io)?;
                    done += n;
                }
                stream.flush().map_err(io)
            }
        }
    }

    /// SET_TENSOR: validates the fixed part before reading the data, then
    /// streams the data into the tensor in chunks (or, for an upload the
    /// client wants cached, reads it whole to hash and store it).
    fn stream_set_tensor<S: Read>(&mut self, stream: &mut S, size: u64) -> Result<(), SessionEnd> {
        let refuse = |m: String| SessionEnd::Refused(format!("SET_TENSOR: {m}"));
        let mut fixed = [0u8; SET_TENSOR_FIXED];
        stream.read_exact(&mut fixed).map_err(io_end)?;
        let Ok(Request::SetTensor { header, .. }) =
            decode_request(Command::SetTensor as u8, &fixed)
        else {
            return Err(refuse("undecodable header".into()));
        };
        let len = size - SET_TENSOR_FIXED as u64;
        let t = placed_range(&self.buffers, &header.tensor, header.offset, len)
            .map_err(|r| refuse(r.to_string()))?;
        let (offset, len) = (header.offset as usize, len as usize);
        // Caching needs the whole upload in memory: only when message memory
        // has room now; otherwise the upload is streamed, not cached.
        let held = (header.cache_flag != 0 && self.state.cache_enabled())
            .then(|| self.state.acquire(len as u64, Duration::ZERO))
            .flatten();
        if let Some(_held) = held {
            // len fits the tensor, hence a buffer that exists: reserving it is bounded.
            let mut data = Vec::new();
            data.try_reserve_exact(len)
                .map_err(|_| refuse(format!("cannot reserve {len} bytes")))?;
            data.resize(len, 0);
            stream.read_exact(&mut data).map_err(io_end)?;
            self.state.cache_store(&data);
            return tensor_set(&t, offset, &data).map_err(|e| refuse(e.to_string()));
        }
        let mut done = 0;
        while done < len {
            let n = (len - done).min(CHUNK);
            self.scratch.resize(n, 0);
            stream.read_exact(&mut self.scratch[..n]).map_err(io_end)?;
            tensor_set(&t, offset + done, &self.scratch[..n]).map_err(|e| refuse(e.to_string()))?;
            done += n;
        }
        Ok(())
    }

    /// GRAPH_COMPUTE of `size` payload bytes: reserves the message memory
    /// it costs (waiting for room up to the I/O timeout), reads it within a
    /// deadline, rebuilds it from the payload in place and computes it.
    fn graph_compute<S: Read>(&mut self, stream: &mut S, size: u64) -> Result<(), SessionEnd> {
        let refuse = |m: String| SessionEnd::Refused(format!("GRAPH_COMPUTE: {m}"));
        if size < 12 {
            return Err(refuse(format!(
                "payload has {size} bytes, at least 12 needed"
            )));
        }
        let mut dev = [0u8; 4];
        stream.read_exact(&mut dev).map_err(io_end)?;
        let d = self
            .device(u32::from_le_bytes(dev))
            .map_err(|r| refuse(r.to_string()))?;
        // The device's last graph is replaced: its memory is free for this one.
        self.graphs[d] = None;
        let limits = &self.state.limits;
        let cost = size.saturating_mul(GRAPH_COST);
        // What this connection holds itself is not freed by waiting.
        let own: u64 = self.graphs.iter().flatten().map(|(_, h)| h.bytes).sum();
        let wait = if own.saturating_add(cost) > limits.max_inflight {
            Duration::ZERO
        } else {
            limits.io_timeout
        };
        let Some(held) = self.state.acquire(cost, wait) else {
            return Err(SessionEnd::Dropped(format!(
                "GRAPH_COMPUTE: no room for {cost} bytes of message memory within {:?} \
                 (max_inflight {} bytes, shared by all clients)",
                limits.io_timeout, limits.max_inflight
            )));
        };
        let deadline = Instant::now() + limits.io_timeout + Duration::from_secs(size / MIN_RATE);
        let mut payload = Vec::new();
        payload
            .try_reserve_exact(size as usize)
            .map_err(|_| refuse(format!("cannot reserve {size} bytes")))?;
        payload.extend_from_slice(&dev);
        let mut chunk = [0u8; 64 << 10];
        while (payload.len() as u64) < size {
            if Instant::now() > deadline {
                return Err(SessionEnd::Dropped(format!(
                    "GRAPH_COMPUTE: {} of {size} bytes after the deadline (slower than {} KiB/s)",
                    payload.len(),
                    MIN_RATE >> 10
                )));
            }
            let want = ((size - payload.len() as u64) as usize).min(chunk.len());
            match stream.read(&mut chunk[..want]) {
                Ok(0) => {
                    return Err(SessionEnd::Io(format!(
                        "GRAPH_COMPUTE: stream ended after {} of {size} payload bytes",
                        payload.len()
                    )))
                }
                Ok(n) => payload.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(io_end(e)),
            }
        }
        let view = GraphView::parse(&payload).map_err(|e| SessionEnd::Refused(e.to_string()))?;
        let graph = rebuild(&view, &self.buffers, limits).map_err(|r| refuse(r.to_string()))?;
        drop(payload);
        self.compute(d, &graph).map_err(|r| refuse(r.to_string()))?;
        self.graphs[d] = Some((graph, held));
        Ok(())
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.graphs.clear();
        for (_, b) in self.buffers.drain() {
            self.state.release(b.size);
        }
        self.state.active.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Reads exactly `buf.len()` bytes; `Ok(false)` on a clean end of stream before the first byte.
fn read_exact_or_eof<R: Read>(r: &mut R, buf: &mut [u8]) -> std::io::Result<bool> {
    let mut got = 0;
    while got < buf.len() {
        match r.read(&mut buf[got..]) {
            Ok(0) if got == 0 => return Ok(false),
            Ok(0) => return Err(ErrorKind::UnexpectedEof.into()),
            Ok(n) => got += n,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}
