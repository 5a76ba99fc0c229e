//! One TCP connection to an RPC server, shared by all its devices: framed
//! request/response calls under a lock, socket timeouts, and a dead state
//! after any failure (the protocol cannot resynchronize).

use std::collections::HashMap;
use std::io::{ErrorKind, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use strata::{Error, Result};

use super::ClientOptions;
use crate::proto::{check_hello_response, decode_u32, Command, Request, CONN_CAPS_SIZE};

/// The graph a device of the server holds (the last one sent to it).
pub(crate) struct LastGraph {
    /// [`Conn::free_epoch`] when it was sent (a free makes the server drop it).
    pub epoch: u64,
    /// Its GRAPH_COMPUTE payload.
    pub bytes: Vec<u8>,
    /// Its number in [`Conn::graph_seq`].
    pub seq: u64,
}

pub(crate) struct Conn {
    pub endpoint: String,
    pub opts: ClientOptions,
    stream: Mutex<Option<TcpStream>>,
    /// Live buffers of this connection: buffer object address → handle.
    buffers: Mutex<HashMap<usize, u64>>,
    /// Bumped by every FREE_BUFFER (the server then forgets cached graphs).
    pub free_epoch: AtomicU64,
    /// Per device: the last graph sent.
    pub last_graph: Mutex<HashMap<u32, LastGraph>>,
    /// Numbers the graphs sent in full, so a backend can tell whether the
    /// device's last graph is still the one it sent.
    pub graph_seq: AtomicU64,
    pub device_count: u32,
}

fn describe(e: &std::io::Error, opts: &ClientOptions) -> String {
    match e.kind() {
        ErrorKind::WouldBlock | ErrorKind::TimedOut => format!(
            "no answer within {:?} (server stalled or unreachable); raise ClientOptions::timeout for long computations",
            opts.timeout
        ),
        ErrorKind::UnexpectedEof | ErrorKind::ConnectionReset | ErrorKind::BrokenPipe => {
            format!("the server closed the connection ({e}); it refused a request or stopped")
        }
        _ => e.to_string(),
    }
}

impl Conn {
    /// Connects, shakes hands and asks the device count.
    pub fn connect(endpoint: &str, opts: ClientOptions) -> Result<Conn> {
        let name = format!("RPC[{endpoint}]");
        let fail = |msg: String| Error::Backend {
            backend: name.clone(),
            msg,
        };
        let addrs: Vec<_> = endpoint
            .to_socket_addrs()
            .map_err(|e| {
                fail(format!(
                    "cannot resolve '{endpoint}' (expected host:port): {e}"
                ))
            })?
            .collect();
        let mut last = None;
        let mut stream = None;
        for a in addrs {
            match TcpStream::connect_timeout(&a, opts.connect_timeout) {
                Ok(s) => {
                    stream = Some(s);
                    break;
                }
                Err(e) => last = Some(e),
            }
        }
        let stream = stream.ok_or_else(|| {
            fail(format!(
                "cannot connect: {} (is `strata rpc-server` running there?)",
                last.map_or("no address".into(), |e| e.to_string())
            ))
        })?;
        let setup = stream
            .set_nodelay(true)
            .and_then(|_| stream.set_read_timeout(Some(opts.timeout)))
            .and_then(|_| stream.set_write_timeout(Some(opts.timeout)));
        setup.map_err(|e| fail(format!("socket setup: {e}")))?;
        let mut conn = Conn {
            endpoint: endpoint.to_string(),
            opts,
            stream: Mutex::new(Some(stream)),
            buffers: Mutex::new(HashMap::new()),
            free_epoch: AtomicU64::new(0),
            last_graph: Mutex::new(HashMap::new()),
            graph_seq: AtomicU64::new(0),
            device_count: 0,
        };
        let hello = conn.call(
            &Request::Hello {
                caps: [0; CONN_CAPS_SIZE],
            },
            None,
        )?;
        check_hello_response(&hello).map_err(|e| fail(e.to_string()))?;
        let n = conn.call(&Request::DeviceCount, None)?;
        let n = decode_u32(Command::DeviceCount, &n).map_err(|e| fail(e.to_string()))?;
        if n > super::MAX_DEVICES {
            return Err(fail(format!(
                "DEVICE_COUNT: the server announces {n} devices, more than the {} a client accepts \
                 (a broken or hostile server)",
                super::MAX_DEVICES
            )));
        }
        conn.device_count = n;
        Ok(conn)
    }

    /// The registry name of the server, `RPC[host:port]`.
    pub fn name(&self) -> String {
        format!("RPC[{}]", self.endpoint)
    }

    pub fn error(&self, msg: impl Into<String>) -> Error {
        Error::Backend {
            backend: self.name(),
            msg: msg.into(),
        }
    }

    /// True while the connection is usable.
    pub fn is_alive(&self) -> bool {
        self.stream
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some()
    }

    /// Sends `req` and, for commands with a response, reads it. `expect` is
    /// the response size for variable responses (GET_TENSOR).
    pub fn call(&self, req: &Request<'_>, expect: Option<usize>) -> Result<Vec<u8>> {
        let mut out = vec![0u8; expect.unwrap_or(0)];
        let fixed = self.call_into(req, &mut out)?;
        Ok(if req.command().response_size() == Some(None) {
            out
        } else {
            fixed
        })
    }

    /// Like [`Conn::call`] for a variable-size response read straight into
    /// `out` (GET_TENSOR), without an intermediate copy.
    pub fn call_into(&self, req: &Request<'_>, out: &mut [u8]) -> Result<Vec<u8>> {
        let cmd = req.command();
        let mut guard = self.stream.lock().unwrap_or_else(|e| e.into_inner());
        let Some(stream) = guard.as_mut() else {
            return Err(self.error(format!(
                "{cmd}: the connection was lost earlier; reconnect (look the device up again)"
            )));
        };
        let res = exchange(stream, req, out);
        match res {
            Ok(v) => Ok(v),
            Err(msg) => {
                // Out of sync or gone: never use this stream again.
                if let Some(s) = guard.take() {
                    let _ = s.shutdown(std::net::Shutdown::Both);
                }
                let msg = match msg {
                    ExchangeError::Io(e) => describe(&e, &self.opts),
                    ExchangeError::Protocol(m) => m,
                };
                Err(self.error(format!("{cmd}: {msg}")))
            }
        }
    }

    pub fn register_buffer(&self, addr: usize, handle: u64) {
        self.buffers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(addr, handle);
    }

    pub fn unregister_buffer(&self, addr: usize) {
        self.buffers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&addr);
        self.free_epoch.fetch_add(1, Ordering::SeqCst);
    }

    /// The handle of the buffer object at `addr`, when it is one of this connection's.
    pub fn handle_of(&self, addr: usize) -> Option<u64> {
        self.buffers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&addr)
            .copied()
    }
}

enum ExchangeError {
    Io(std::io::Error),
    Protocol(String),
}

impl From<std::io::Error> for ExchangeError {
    fn from(e: std::io::Error) -> ExchangeError {
        ExchangeError::Io(e)
    }
}

fn exchange(
    stream: &mut TcpStream,
    req: &Request<'_>,
    into: &mut [u8],
) -> std::result::Result<Vec<u8>, ExchangeError> {
    let (mut head, tail) = req.encode_parts();
    if tail.len() <= 64 << 10 {
        // Small payloads go out in one write (one segment with TCP_NODELAY).
        head.extend_from_slice(tail);
        stream.write_all(&head)?;
    } else {
        stream.write_all(&head)?;
        stream.write_all(tail)?;
    }
    let want = match req.command().response_size() {
        None => return Ok(Vec::new()),
        Some(Some(n)) => n,
        Some(None) => into.len(),
    };
    let mut len = [0u8; 8];
    stream.read_exact(&mut len)?;
    let len = u64::from_le_bytes(len);
    if len != want as u64 {
        return Err(ExchangeError::Protocol(format!(
            "malformed response: {len} bytes announced, {want} expected"
        )));
    }
    if req.command().response_size() == Some(None) {
        stream.read_exact(into)?;
        return Ok(Vec::new());
    }
    let mut out = vec![0u8; want];
    stream.read_exact(&mut out)?;
    Ok(out)
}
