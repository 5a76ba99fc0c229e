//! Helpers for strata-rpc's integration tests: servers on ephemeral
//! loopback ports, a raw protocol client, deterministic data.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use strata::backend::{Backend, Device};
use strata::cpu::{cpu_device, CpuBackend};
use strata::Graph;
use strata_rpc::client::RpcDevice;
use strata_rpc::proto::{
    GraphMsg, Request, RpcTensor, SetTensorHeader, CONN_CAPS_SIZE, FLAG_COMPUTE,
};
use strata_rpc::server::{BackendFactory, CpuBackendFactory, Limits, Server, ServerHandle};
use strata_rpc::{ClientOptions, RpcProvider};

/// A CPU server with `threads` threads on an ephemeral loopback port.
pub fn cpu_server(threads: usize, limits: Limits) -> (SocketAddr, ServerHandle) {
    server_with(Arc::new(CpuBackendFactory::new(threads)), limits)
}

/// A server for `factory` on an ephemeral loopback port.
pub fn server_with(factory: Arc<dyn BackendFactory>, limits: Limits) -> (SocketAddr, ServerHandle) {
    Server::bind("127.0.0.1:0", factory, limits)
        .unwrap()
        .spawn_background()
        .unwrap()
}

/// What a [`HookedCpuFactory`] backend runs before each graph.
pub type Hook = Arc<dyn Fn() + Send + Sync>;

/// Serves one CPU device whose backends (1 thread each) call `before` ahead
/// of every graph: a slow remote device, or one gated by the test.
pub struct HookedCpuFactory {
    /// The backends' name.
    pub name: &'static str,
    /// Runs before each graph computation.
    pub before: Hook,
}

struct HookedCpu {
    inner: CpuBackend,
    name: &'static str,
    before: Hook,
}

impl Backend for HookedCpu {
    fn name(&self) -> String {
        self.name.into()
    }
    fn device(&self) -> Arc<dyn Device> {
        cpu_device()
    }
    fn graph_compute(&mut self, graph: &Graph) -> strata::Result<()> {
        (self.before)();
        self.inner.graph_compute(graph)
    }
}

impl BackendFactory for HookedCpuFactory {
    fn device_count(&self) -> usize {
        1
    }
    fn device(&self, _: usize) -> Arc<dyn Device> {
        cpu_device()
    }
    fn backend(&self, _: usize) -> strata::Result<Box<dyn Backend>> {
        Ok(Box::new(HookedCpu {
            inner: CpuBackend::new(1),
            name: self.name,
            before: self.before.clone(),
        }))
    }
}

/// The first device of the server at `addr`, through a fresh provider.
pub fn device(addr: SocketAddr) -> (Arc<RpcProvider>, Arc<RpcDevice>) {
    device_opts(addr, ClientOptions::default())
}

/// Like [`device`] with client options.
pub fn device_opts(addr: SocketAddr, opts: ClientOptions) -> (Arc<RpcProvider>, Arc<RpcDevice>) {
    let p = Arc::new(RpcProvider::with_options(opts));
    let d = p.connect(&addr.to_string()).unwrap().remove(0);
    (p, d)
}

/// The deterministic generator of the conformance suite.
#[allow(unused_imports)]
pub use strata::conformance::Rng;

/// A raw protocol connection, for crafting messages no real client sends.
pub struct Raw {
    pub s: TcpStream,
}

impl Raw {
    /// Connects and completes HELLO.
    pub fn connect(addr: SocketAddr) -> Raw {
        let mut r = Raw::connect_no_hello(addr);
        let resp = r
            .call(
                &Request::Hello {
                    caps: [0; CONN_CAPS_SIZE],
                },
                28,
            )
            .unwrap();
        assert_eq!(&resp[..4], &[7, 0, 0, 0]);
        r
    }

    pub fn connect_no_hello(addr: SocketAddr) -> Raw {
        let s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        Raw { s }
    }

    pub fn send_bytes(&mut self, b: &[u8]) -> std::io::Result<()> {
        self.s.write_all(b)
    }

    pub fn send(&mut self, req: &Request<'_>) -> std::io::Result<()> {
        self.s.write_all(&req.encode())
    }

    /// Sends and reads a response of `len` payload bytes.
    pub fn call(&mut self, req: &Request<'_>, len: usize) -> std::io::Result<Vec<u8>> {
        self.send(req)?;
        self.read_response(len)
    }

    pub fn read_response(&mut self, len: usize) -> std::io::Result<Vec<u8>> {
        let mut h = [0u8; 8];
        self.s.read_exact(&mut h)?;
        assert_eq!(u64::from_le_bytes(h), len as u64, "response size");
        let mut v = vec![0u8; len];
        self.s.read_exact(&mut v)?;
        Ok(v)
    }

    /// Allocates a buffer: (handle, base).
    pub fn alloc(&mut self, size: u64) -> (u64, u64) {
        let r = self
            .call(&Request::AllocBuffer { device: 0, size }, 16)
            .unwrap();
        let h = u64::from_le_bytes(r[..8].try_into().unwrap());
        assert_ne!(h, 0, "allocation failed");
        let b = self
            .call(&Request::BufferGetBase { remote_ptr: h }, 8)
            .unwrap();
        (h, u64::from_le_bytes(b.try_into().unwrap()))
    }

    /// True when the server has closed the connection (reads EOF/reset
    /// within the timeout, after pushing a probe).
    /// Whether the server closes this connection unprompted: a read, waiting
    /// at most `wait`, ends (EOF) or fails.
    pub fn closed_within(&mut self, wait: Duration) -> bool {
        self.s.set_read_timeout(Some(wait)).unwrap();
        let mut b = [0u8; 1];
        matches!(self.s.read(&mut b), Ok(0) | Err(_))
    }

    pub fn is_closed(&mut self) -> bool {
        // A probe with a response: a live server answers, a closed one does not.
        let _ = self.s.write_all(&Request::DeviceCount.encode());
        let mut h = [0u8; 8];
        match self.s.read(&mut h) {
            Ok(0) | Err(_) => true,
            Ok(_) => false,
        }
    }
}

/// An f32 tensor record in buffer `handle` at `data` with `ne`.
pub fn f32_rec(id: u64, handle: u64, data: u64, ne: [u32; 4]) -> RpcTensor {
    RpcTensor {
        id,
        dtype: 0,
        buffer: handle,
        ne,
        nb: [4, 4 * ne[0], 4 * ne[0] * ne[1], 4 * ne[0] * ne[1] * ne[2]],
        data,
        ..RpcTensor::default()
    }
}

/// A graph of `n` MUL_MAT nodes (f32 k x k by k x k), all writing the same
/// result: a computation of `n` products, in a buffer of 12 k^2 bytes.
pub fn matmul_graph(h: u64, base: u64, k: u32, n: u64) -> GraphMsg {
    let kk = (k * k) as u64;
    let mut g = GraphMsg {
        device: 0,
        nodes: Vec::new(),
        tensors: vec![
            f32_rec(1, h, base, [k, k, 1, 1]),
            f32_rec(2, h, base + 4 * kk, [k, k, 1, 1]),
        ],
    };
    for i in 0..n {
        let mut t = f32_rec(3 + i, h, base + 8 * kk, [k, k, 1, 1]);
        t.op = strata::ops::Op::MulMat.ggml_id();
        t.flags = FLAG_COMPUTE;
        t.src[0] = 1;
        t.src[1] = 2;
        g.nodes.push(3 + i);
        g.tensors.push(t);
    }
    g
}

/// Keeps `Device` in scope for trait methods in tests.
pub fn name_of(d: &dyn Device) -> String {
    d.name()
}

/// A SET_TENSOR request.
pub fn set(t: RpcTensor, offset: u64, data: &[u8]) -> Request<'_> {
    Request::SetTensor {
        header: SetTensorHeader {
            tensor: t,
            cache_flag: 0,
            offset,
        },
        data,
    }
}

/// A graph: leaves a, b (4 floats each) and c = a + b, all in buffer `h`.
pub fn add_graph(h: u64, base: u64) -> GraphMsg {
    let a = f32_rec(10, h, base, [4, 1, 1, 1]);
    let b = f32_rec(20, h, base + 16, [4, 1, 1, 1]);
    let mut c = f32_rec(30, h, base + 32, [4, 1, 1, 1]);
    c.op = 2;
    c.flags = FLAG_COMPUTE;
    c.src[0] = 10;
    c.src[1] = 20;
    GraphMsg {
        device: 0,
        nodes: vec![30],
        tensors: vec![a, b, c],
    }
}
