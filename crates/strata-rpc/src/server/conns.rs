//! The connections of a server: admission against the caps, the handshake
//! deadline and eviction of connections that never finish the handshake.
//!
//! A connection is *pending* from accept until its HELLO, then
//! *established*. Caps apply to established connections (in all and per
//! client address), checked at HELLO, where a connection over a cap waits
//! for a slot until its handshake deadline. Pending ones are cheap to drop:
//! each has [`Limits::handshake_timeout`] to say HELLO and be admitted, and
//! when [`Limits::max_pending`] are waiting, a new connection evicts the
//! oldest. So sockets that never send a byte cannot lock other clients out.

use std::collections::HashMap;
use std::net::{IpAddr, Shutdown, TcpStream};
use std::sync::atomic::Ordering;
use std::time::Instant;

use super::{Limits, State};

/// One accepted connection.
pub(crate) struct ConnEntry {
    /// A handle on the socket, to sever it from outside its thread.
    pub stream: TcpStream,
    /// The client's address.
    pub ip: Option<IpAddr>,
    /// When it was accepted.
    pub since: Instant,
    /// HELLO received and admitted.
    pub established: bool,
    /// Its session has read bytes from it.
    pub spoke: bool,
}

/// True when bytes wait unread on `s` (a client that has spoken, whose
/// connection thread has not run yet); never blocks.
#[cfg(unix)]
fn bytes_waiting(s: &TcpStream) -> bool {
    use std::os::fd::AsRawFd;
    let mut b = 0u8;
    // SAFETY: recv writes at most 1 byte into `b`, a live local; the
    // descriptor belongs to `s`, open for the call. MSG_PEEK leaves the byte
    // in the socket, MSG_DONTWAIT makes the call return at once.
    let n = unsafe {
        libc::recv(
            s.as_raw_fd(),
            (&mut b as *mut u8).cast(),
            1,
            libc::MSG_PEEK | libc::MSG_DONTWAIT,
        )
    };
    n > 0
}

#[cfg(not(unix))]
fn bytes_waiting(_s: &TcpStream) -> bool {
    false
}

/// The connection table.
#[derive(Default)]
pub(crate) struct Conns {
    pub map: HashMap<usize, ConnEntry>,
}

impl Conns {
    fn established(&self, ip: Option<IpAddr>) -> (usize, usize) {
        let mut all = 0;
        let mut same = 0;
        for e in self.map.values().filter(|e| e.established) {
            all += 1;
            if ip.is_some() && e.ip == ip {
                same += 1;
            }
        }
        (all, same)
    }

    /// Why a connection from `ip` cannot be established now, if it cannot.
    pub fn over_cap(&self, limits: &Limits, ip: Option<IpAddr>) -> Option<String> {
        let (all, same) = self.established(ip);
        if all >= limits.max_connections {
            return Some(format!(
                "the server serves {all} clients, its limit (max_connections)"
            ));
        }
        if same >= limits.max_per_address {
            return Some(format!(
                "{same} connections from this address already, the limit (max_per_address)"
            ));
        }
        None
    }

    /// Severs the oldest pending connection that has not said anything (or,
    /// when all have, the oldest pending one); true when there was one.
    /// Clients that spoke are usually well-behaved ones whose HELLO the
    /// server has not processed yet (a busy machine); new arrivals always
    /// get a slot.
    pub fn evict_oldest_pending(&mut self) -> bool {
        let pending = || self.map.iter().filter(|(_, e)| !e.established);
        let silent = pending()
            .filter(|(_, e)| !e.spoke && !bytes_waiting(&e.stream))
            .min_by_key(|(_, e)| e.since);
        let oldest = silent
            .or_else(|| pending().min_by_key(|(_, e)| e.since))
            .map(|(&id, _)| id);
        match oldest.and_then(|id| self.map.remove(&id)) {
            Some(e) => {
                let _ = e.stream.shutdown(Shutdown::Both);
                true
            }
            None => false,
        }
    }

    pub fn pending(&self) -> usize {
        self.map.values().filter(|e| !e.established).count()
    }
}

impl State {
    /// Notes that connection `id` has sent its first bytes.
    pub(crate) fn spoke(&self, id: usize) {
        let mut conns = self.conns.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(e) = conns.map.get_mut(&id) {
            e.spoke = true;
        }
    }

    /// Marks connection `id` established after its HELLO. At a cap it waits
    /// for a slot (a client reconnecting right after closing may find its
    /// old connection still being torn down) until its handshake deadline,
    /// then says why it may not be established.
    pub(crate) fn establish(&self, id: usize) -> Result<(), String> {
        loop {
            {
                let mut conns = self.conns.lock().unwrap_or_else(|e| e.into_inner());
                let Some(e) = conns.map.get(&id) else {
                    // Evicted or severed meanwhile: the socket is already shut.
                    return Err("connection was closed by the server".into());
                };
                let (ip, since) = (e.ip, e.since);
                match conns.over_cap(&self.limits, ip) {
                    None => {
                        if let Some(e) = conns.map.get_mut(&id) {
                            e.established = true;
                        }
                        return Ok(());
                    }
                    Some(why) if since.elapsed() >= self.limits.handshake_timeout => {
                        return Err(why)
                    }
                    Some(_) => {}
                }
            }
            if self.shutdown.load(Ordering::SeqCst) {
                return Err("server shutting down".into());
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }

    /// Severs pending connections past the handshake deadline; returns how many.
    pub(crate) fn reap_pending(&self) -> usize {
        let mut conns = self.conns.lock().unwrap_or_else(|e| e.into_inner());
        let late: Vec<usize> = conns
            .map
            .iter()
            .filter(|(_, e)| !e.established && e.since.elapsed() > self.limits.handshake_timeout)
            .map(|(&id, _)| id)
            .collect();
        for id in &late {
            if let Some(e) = conns.map.remove(id) {
                tracing::info!(
                    peer = ?e.ip,
                    "no HELLO within {:?}: closing",
                    self.limits.handshake_timeout
                );
                let _ = e.stream.shutdown(Shutdown::Both);
            }
        }
        self.dropped.fetch_add(late.len(), Ordering::Relaxed);
        late.len()
    }
}
