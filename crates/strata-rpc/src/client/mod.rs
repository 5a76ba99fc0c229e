//! The RPC client: remote devices as strata devices.
//!
//! [`RpcProvider`] is a [`DeviceProvider`] resolving names `RPC[host:port]`
//! (the server's first device) and `RPC<n>[host:port]` (device n of a
//! server exposing several). One TCP connection per server is shared by its
//! devices. Every operation has a socket timeout; a server that stops
//! answering or goes away gives [`strata::Error::Backend`], never a hang.

mod buffer;
mod conn;
mod device;
mod record;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use strata::backend::{Device, DeviceProvider};
use strata::{Error, Result};

pub use buffer::{RpcBuffer, RpcBufferType};
pub use device::{RpcBackend, RpcDevice};

use conn::Conn;

/// Most devices a client accepts from one server (DEVICE_COUNT): ggml's
/// servers expose one per `-d` device, so this leaves ample room while a
/// hostile answer cannot make the client allocate per-device state by the
/// billion.
pub const MAX_DEVICES: u32 = 256;

/// Largest buffer alignment a client accepts (GET_ALIGNMENT): real backends
/// ask for 32 bytes to a page; 2^63 would only make every size computation
/// overflow later with a misleading message.
pub const MAX_ALIGNMENT: u64 = 1 << 20;

/// Client settings.
#[derive(Clone, Debug)]
pub struct ClientOptions {
    /// Time allowed to establish the TCP connection.
    pub connect_timeout: Duration,
    /// Longest wait for any single socket read or write, including the wait
    /// for a graph computation to finish.
    pub timeout: Duration,
    /// Uploads to WEIGHTS buffers larger than this try the server's cache
    /// first (SET_TENSOR_HASH).
    pub hash_threshold: usize,
    /// Re-run a graph identical to the last one sent with GRAPH_RECOMPUTE
    /// instead of sending it again.
    pub recompute: bool,
}

impl Default for ClientOptions {
    fn default() -> ClientOptions {
        ClientOptions {
            connect_timeout: Duration::from_secs(5),
            timeout: Duration::from_secs(30),
            hash_threshold: crate::proto::HASH_THRESHOLD,
            recompute: true,
        }
    }
}

struct ServerDevices {
    conn: Arc<Conn>,
    devices: Vec<Arc<RpcDevice>>,
}

/// The "RPC" device provider.
///
/// ```no_run
/// use std::sync::Arc;
/// use strata::backend::Registry;
/// let mut reg = Registry::with_defaults();
/// reg.register(Arc::new(strata_rpc::RpcProvider::new()));
/// let dev = reg.device("RPC[127.0.0.1:50052]").unwrap();
/// println!("{}: {:?}", dev.name(), dev.memory().unwrap());
/// ```
#[derive(Default)]
pub struct RpcProvider {
    opts: ClientOptions,
    servers: Mutex<HashMap<String, Arc<ServerDevices>>>,
}

/// Splits `RPC[host:port]` / `RPC<n>[host:port]` into (device index, endpoint).
pub fn parse_device_name(name: &str) -> Option<(Option<u32>, &str)> {
    let rest = name.strip_prefix("RPC")?;
    let open = rest.find('[')?;
    let inner = rest[open + 1..].strip_suffix(']')?;
    let digits = &rest[..open];
    let index = if digits.is_empty() {
        None
    } else {
        Some(digits.parse().ok()?)
    };
    let (host, port) = inner.rsplit_once(':')?;
    if host.is_empty() || port.parse::<u16>().is_err() {
        return None;
    }
    Some((index, inner))
}

impl RpcProvider {
    /// A provider with default options.
    pub fn new() -> RpcProvider {
        RpcProvider::default()
    }

    /// A provider with `opts`.
    pub fn with_options(opts: ClientOptions) -> RpcProvider {
        RpcProvider {
            opts,
            servers: Mutex::new(HashMap::new()),
        }
    }

    /// Connects to `endpoint` (`host:port`), or reuses a live connection,
    /// and returns the server's devices.
    pub fn connect(&self, endpoint: &str) -> Result<Vec<Arc<RpcDevice>>> {
        let mut servers = self.servers.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(s) = servers.get(endpoint) {
            if s.conn.is_alive() {
                return Ok(s.devices.clone());
            }
        }
        let conn = Arc::new(Conn::connect(endpoint, self.opts.clone())?);
        let n = conn.device_count;
        let mut devices = Vec::with_capacity(n as usize);
        for i in 0..n {
            let name = if n == 1 {
                format!("RPC[{endpoint}]")
            } else {
                format!("RPC{i}[{endpoint}]")
            };
            let buft = Arc::new(RpcBufferType::new(conn.clone(), i, name.clone())?);
            devices.push(Arc::new(RpcDevice {
                conn: conn.clone(),
                index: i,
                name,
                buft,
            }));
        }
        servers.insert(
            endpoint.to_string(),
            Arc::new(ServerDevices {
                conn,
                devices: devices.clone(),
            }),
        );
        Ok(devices)
    }
}

impl DeviceProvider for RpcProvider {
    fn name(&self) -> String {
        "RPC".into()
    }
    fn devices(&self) -> Vec<Arc<dyn Device>> {
        let servers = self.servers.lock().unwrap_or_else(|e| e.into_inner());
        servers
            .values()
            .flat_map(|s| s.devices.iter().map(|d| d.clone() as Arc<dyn Device>))
            .collect()
    }
    fn device(&self, name: &str) -> Result<Option<Arc<dyn Device>>> {
        let Some((index, endpoint)) = parse_device_name(name) else {
            if name.starts_with("RPC") && name.contains('[') {
                return Err(Error::BadValue {
                    arg: "RPC device name".into(),
                    value: format!("'{name}'"),
                    expected: format!(
                        "RPC[host:port] (or RPC<n>[host:port] for device n of the server), \
                         e.g. RPC[127.0.0.1:{}]",
                        crate::proto::DEFAULT_PORT
                    ),
                });
            }
            return Ok(None);
        };
        let devices = self.connect(endpoint)?;
        let i = index.unwrap_or(0) as usize;
        match devices.get(i) {
            Some(d) => Ok(Some(d.clone())),
            None => Err(Error::index(
                format!("{name}: device of the server at {endpoint}"),
                i,
                devices.len(),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::parse_device_name;

    #[test]
    fn device_names() {
        assert_eq!(
            parse_device_name("RPC[127.0.0.1:50052]"),
            Some((None, "127.0.0.1:50052"))
        );
        assert_eq!(
            parse_device_name("RPC3[localhost:1]"),
            Some((Some(3), "localhost:1"))
        );
        for bad in [
            "CPU",
            "RPC",
            "RPC[]",
            "RPC[host]",
            "RPCx[h:1]",
            "RPC[h:99999]",
            "RPC[:1]",
        ] {
            assert_eq!(parse_device_name(bad), None, "{bad}");
        }
    }

    /// Issue 16 item 10: a malformed RPC name is explained, not "no device named".
    #[test]
    fn malformed_rpc_names_are_explained() {
        use strata::backend::DeviceProvider;
        let p = super::RpcProvider::new();
        for bad in ["RPC[localhost]", "RPC[:1]", "RPC[h:99999]", "RPCx[h:1]"] {
            let e = p.device(bad).err().expect(bad).to_string();
            assert!(e.contains(bad) && e.contains("RPC[host:port]"), "{e}");
        }
        assert!(p.device("CPU").unwrap().is_none());
    }
}
