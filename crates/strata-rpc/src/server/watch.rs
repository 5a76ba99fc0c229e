//! Watching a client while its graph computes: a computation whose client
//! went away is aborted (through the backend's abort callback) instead of
//! running to its end for nobody.
//!
//! The protocol lets a client queue its next request behind GRAPH_COMPUTE
//! (strata's client sends DEVICE_COUNT to wait for the result), so a peek
//! would see those bytes and never the end of stream behind them. The probe
//! therefore reads ahead, without blocking and at most [`AHEAD_MAX`] bytes,
//! keeping what it read for the session's next reads ([`Prefixed`]).

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Most bytes read ahead while a graph computes; past that the client is
/// clearly alive (it is sending), and the probe stops reading.
pub(crate) const AHEAD_MAX: usize = 64 << 10;

/// How often the socket is looked at during a computation.
const PROBE_EVERY: Duration = Duration::from_millis(10);

/// Bytes read ahead of the session, shared by the probe and the reader.
pub(crate) type ReadAhead = Arc<Mutex<Vec<u8>>>;

/// Tells whether the client of a connection is gone.
pub(crate) struct Probe {
    stream: TcpStream,
    ahead: ReadAhead,
    last: Mutex<Instant>,
    gone: AtomicBool,
}

impl Probe {
    pub(crate) fn new(stream: TcpStream) -> Probe {
        Probe {
            stream,
            ahead: ReadAhead::default(),
            last: Mutex::new(Instant::now()),
            gone: AtomicBool::new(false),
        }
    }

    /// The bytes this probe reads ahead.
    pub(crate) fn ahead(&self) -> ReadAhead {
        self.ahead.clone()
    }

    /// True once the client has closed the connection (or it failed);
    /// looks at the socket at most every [`PROBE_EVERY`].
    pub(crate) fn client_gone(&self) -> bool {
        if self.gone.load(Ordering::Relaxed) {
            return true;
        }
        {
            let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
            if last.elapsed() < PROBE_EVERY {
                return false;
            }
            *last = Instant::now();
        }
        let mut ahead = self.ahead.lock().unwrap_or_else(|e| e.into_inner());
        if ahead.len() >= AHEAD_MAX {
            return false;
        }
        let mut buf = [0u8; 4096];
        let room = (AHEAD_MAX - ahead.len()).min(buf.len());
        // O_NONBLOCK is shared with the session's handle of the socket; the
        // session is waiting for this computation, not reading, and the flag
        // is cleared again before it can.
        if self.stream.set_nonblocking(true).is_err() {
            return false;
        }
        let r = (&self.stream).read(&mut buf[..room]);
        let restored = self.stream.set_nonblocking(false).is_ok();
        let gone = match r {
            Ok(0) => true,
            Ok(n) => {
                ahead.extend_from_slice(&buf[..n]);
                false
            }
            Err(e) => !matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted),
        };
        if gone || !restored {
            self.gone.store(true, Ordering::Relaxed);
        }
        gone || !restored
    }
}

/// A stream whose reads first return the bytes a [`Probe`] read ahead.
pub(crate) struct Prefixed<'a, S> {
    pub ahead: Option<ReadAhead>,
    pub inner: &'a mut S,
}

impl<S: Read> Read for Prefixed<'_, S> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if let Some(a) = &self.ahead {
            let mut a = a.lock().unwrap_or_else(|e| e.into_inner());
            if !a.is_empty() {
                let n = a.len().min(buf.len());
                buf[..n].copy_from_slice(&a[..n]);
                a.drain(..n);
                return Ok(n);
            }
        }
        self.inner.read(buf)
    }
}

impl<S: Write> Write for Prefixed<'_, S> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.inner.write(buf)
    }
    fn write_all(&mut self, buf: &[u8]) -> std::io::Result<()> {
        self.inner.write_all(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}
