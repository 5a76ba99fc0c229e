//! The connections of a server: admission against the caps, the handshake
//! deadline and eviction of connections that never finish the handshake.
//!
//! A connection is *pending* from accept until its HELLO, then
//! *established*. Caps apply to established connections (in all and per
//! client address); pending ones are cheap to drop: each has
//! [`Limits::handshake_timeout`] to say HELLO, and when
//! [`Limits::max_pending`] are waiting, a new connection evicts the oldest.
//! So sockets that never send a byte cannot lock other clients out.

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

    /// Severs the oldest pending connection; true when there was one.
    pub fn evict_oldest_pending(&mut self) -> bool {
        let oldest = self
            .map
            .iter()
            .filter(|(_, e)| !e.established)
            .min_by_key(|(_, e)| e.since)
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
    /// Marks connection `id` established after its HELLO, or says why it
    /// may not be (a cap reached meanwhile).
    pub(crate) fn establish(&self, id: usize) -> Result<(), String> {
        let mut conns = self.conns.lock().unwrap_or_else(|e| e.into_inner());
        let ip = match conns.map.get(&id) {
            Some(e) => e.ip,
            // Evicted or severed meanwhile: the socket is already shut.
            None => return Err("connection was closed by the server".into()),
        };
        if let Some(why) = conns.over_cap(&self.limits, ip) {
            return Err(why);
        }
        if let Some(e) = conns.map.get_mut(&id) {
            e.established = true;
        }
        Ok(())
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
