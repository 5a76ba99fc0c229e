//! Faults: a server that dies, drops the connection, stalls or speaks
//! another version gives the client a typed error within its timeout —
//! never a hang, never an abort.

mod common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use strata::backend::{alloc_graph, Device};

use strata::{ops, DType, Error, Graph, Tensor};
use strata_rpc::server::Limits;
use strata_rpc::ClientOptions;

/// What the mid-compute fault tests start from: a server whose every graph
/// computation takes 10 s (a CPU backend that sleeps first), its first
/// device through a fresh provider, and [`graph_on`] that device.
struct SlowRun {
    addr: std::net::SocketAddr,
    server: strata_rpc::ServerHandle,
    provider: Arc<strata_rpc::RpcProvider>,
    dev: Arc<dyn Device>,
    graph: Graph,
    out: Tensor,
    bufs: Vec<Arc<dyn strata::backend::Buffer>>,
}

/// A [`SlowRun`] whose client uses `opts`.
fn slow_run(opts: ClientOptions) -> SlowRun {
    let factory = HookedCpuFactory {
        name: "SLOW",
        before: Arc::new(|| std::thread::sleep(Duration::from_secs(10))),
    };
    let (addr, server) = server_with(Arc::new(factory), Limits::default());
    let (provider, dev) = device_opts(addr, opts);
    let dev: Arc<dyn Device> = dev;
    let (graph, out, bufs) = graph_on(&dev);
    SlowRun {
        addr,
        server,
        provider,
        dev,
        graph,
        out,
        bufs,
    }
}

/// A graph c = a + b allocated on `dev` with inputs written.
fn graph_on(dev: &Arc<dyn Device>) -> (Graph, Tensor, Vec<Arc<dyn strata::backend::Buffer>>) {
    let a = Tensor::new(DType::F32, &[64]).unwrap();
    let b = Tensor::new(DType::F32, &[64]).unwrap();
    let c = ops::add(&a, &b).unwrap();
    let g = Graph::build(std::slice::from_ref(&c));
    let bufs = alloc_graph(&g, &dev.default_buffer_type()).unwrap();
    a.write_f32(&[1.0; 64]).unwrap();
    b.write_f32(&[2.0; 64]).unwrap();
    (g, c, bufs.into())
}

fn is_backend_error(e: &Error) -> bool {
    matches!(e, Error::Backend { backend, .. } if backend.starts_with("RPC["))
}

#[test]
fn server_dropping_connections_mid_compute() {
    let SlowRun {
        addr,
        server,
        provider: p,
        dev,
        graph: g,
        out: c,
        bufs: _bufs,
    } = slow_run(ClientOptions::default());
    let start = Instant::now();
    let worker = std::thread::spawn(move || {
        let mut backend = dev.init_backend().unwrap();
        // graph_compute returns once the graph is sent; synchronize waits
        let r = backend
            .graph_compute(&g)
            .and_then(|()| backend.synchronize());
        (r, c.read_bytes())
    });
    std::thread::sleep(Duration::from_millis(300));
    server.drop_connections();
    let (r, read) = worker.join().expect("client thread must not panic");
    let e = r.unwrap_err();
    assert!(is_backend_error(&e), "{e}");
    assert!(e.to_string().contains("closed the connection"), "{e}");
    // did not wait for the 10 s computation
    assert!(
        start.elapsed() < Duration::from_secs(8),
        "{:?}",
        start.elapsed()
    );
    // later calls fail fast, typed
    let e = read.unwrap_err();
    assert!(
        is_backend_error(&e) && e.to_string().contains("lost earlier"),
        "{e}"
    );
    // looking the server up again reconnects
    let again = p.connect(&addr.to_string()).unwrap();
    assert!(again[0].memory().is_ok());
}

#[test]
fn server_shut_down_mid_compute() {
    let SlowRun {
        addr,
        server,
        provider: _p,
        dev,
        graph: g,
        out: _c,
        bufs: _bufs,
    } = slow_run(ClientOptions::default());
    let worker = std::thread::spawn(move || {
        let mut b = dev.init_backend().unwrap();
        b.graph_compute(&g).and_then(|()| b.synchronize())
    });
    std::thread::sleep(Duration::from_millis(300));
    server.shutdown();
    let e = worker.join().unwrap().unwrap_err();
    assert!(is_backend_error(&e), "{e}");
    // nothing listens any more: connecting is a typed error too
    let p = strata_rpc::RpcProvider::new();
    let e = p.connect(&addr.to_string()).unwrap_err();
    assert!(
        is_backend_error(&e) && e.to_string().contains("cannot connect"),
        "{e}"
    );
}

#[test]
fn stalled_server_times_out() {
    let SlowRun {
        server: _server,
        provider: _p,
        dev,
        graph: g,
        out: _c,
        bufs: _bufs,
        ..
    } = slow_run(ClientOptions {
        timeout: Duration::from_secs(1),
        ..ClientOptions::default()
    });
    let start = Instant::now();
    let mut b = dev.init_backend().unwrap();
    let e = b
        .graph_compute(&g)
        .and_then(|()| b.synchronize())
        .unwrap_err();
    assert!(
        is_backend_error(&e) && e.to_string().contains("no answer within"),
        "{e}"
    );
    // gave up after the timeout, long before the 10 s computation ended
    assert!(
        start.elapsed() < Duration::from_secs(8),
        "{:?}",
        start.elapsed()
    );
}

#[test]
fn connection_dropped_before_compute() {
    let (addr, server) = cpu_server(1, Limits::default());
    let (_p, dev) = device(addr);
    let dev: Arc<dyn Device> = dev;
    let (g, _c, bufs) = graph_on(&dev);
    server.drop_connections();
    let mut b = dev.init_backend().unwrap();
    let e = b
        .graph_compute(&g)
        .and_then(|()| b.synchronize())
        .unwrap_err();
    assert!(is_backend_error(&e), "{e}");
    assert!(dev.memory().is_err());
    drop(bufs); // freeing on a dead connection is silent
    server
        .wait_for(Duration::from_secs(5), |s| s.live_buffers == 0)
        .unwrap();
}

/// A fake server on a loopback port: accepts one client, reads its HELLO
/// (33 bytes) and hands both to `serve`.
fn fake_server(
    serve: impl FnOnce(TcpStream, [u8; 33]) + Send + 'static,
) -> (std::net::SocketAddr, std::thread::JoinHandle<()>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let t = std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut hello = [0u8; 33];
        s.read_exact(&mut hello).unwrap();
        serve(s, hello);
    });
    (addr, t)
}

/// The answer to HELLO of a server speaking protocol `major`.0.0.
fn hello_answer(major: u8) -> Vec<u8> {
    let mut resp = vec![28, 0, 0, 0, 0, 0, 0, 0, major, 0, 0, 0];
    resp.extend([0u8; 24]);
    resp
}

/// Connecting to the fake server at `addr` is a backend error saying `want`.
fn assert_connect_fails(addr: std::net::SocketAddr, fake: std::thread::JoinHandle<()>, want: &str) {
    let e = strata_rpc::RpcProvider::new()
        .connect(&addr.to_string())
        .unwrap_err();
    assert!(is_backend_error(&e) && e.to_string().contains(want), "{e}");
    fake.join().unwrap();
}

#[test]
fn incompatible_server_version_is_refused() {
    let (addr, fake) = fake_server(|mut s, hello| {
        assert_eq!(&hello[..9], &[14, 24, 0, 0, 0, 0, 0, 0, 0]);
        s.write_all(&hello_answer(8)).unwrap();
    });
    assert_connect_fails(addr, fake, "not compatible");
}

#[test]
fn malformed_response_is_an_error() {
    // A "server" that answers HELLO correctly, then announces a wrong length.
    let (addr, fake) = fake_server(|mut s, _| {
        s.write_all(&hello_answer(7)).unwrap();
        let mut dc = [0u8; 9];
        s.read_exact(&mut dc).unwrap();
        s.write_all(&[5, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0])
            .unwrap();
    });
    assert_connect_fails(addr, fake, "malformed response");
}

#[test]
fn unreachable_endpoint_is_a_typed_error() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    drop(l);
    let mut reg = strata::backend::Registry::new();
    reg.register(Arc::new(strata_rpc::RpcProvider::new()));
    let e = reg.device(&format!("RPC[{addr}]")).err().unwrap();
    assert!(is_backend_error(&e), "{e}");
    let e = reg.device("RPC[no-such-host.invalid:1]").err().unwrap();
    assert!(is_backend_error(&e), "{e}");
}

/// A fake server that completes HELLO, then answers every request with
/// `answer(command, payload)` (no bytes for commands without a response),
/// until the client hangs up.
fn scripted_server(
    answer: impl Fn(u8, &[u8]) -> Option<Vec<u8>> + Send + 'static,
) -> (std::net::SocketAddr, std::thread::JoinHandle<()>) {
    fake_server(move |mut s, _| {
        s.write_all(&hello_answer(7)).unwrap();
        for _ in 0..64 {
            let mut h = [0u8; 9];
            if s.read_exact(&mut h).is_err() {
                return;
            }
            let n = u64::from_le_bytes(h[1..].try_into().unwrap()) as usize;
            let mut p = vec![0u8; n.min(1 << 20)];
            if s.read_exact(&mut p).is_err() {
                return;
            }
            if let Some(body) = answer(h[0], &p) {
                let mut r = (body.len() as u64).to_le_bytes().to_vec();
                r.extend(body);
                if s.write_all(&r).is_err() {
                    return;
                }
            }
        }
    })
}

/// Issue 16 item 6: answers a hostile server gives at connect or allocation
/// time are typed errors naming what is wrong, never an abort (DEVICE_COUNT
/// 2^32-1 made the client reserve 34 GB) or a later misleading message.
#[test]
fn hostile_server_answers_are_typed_errors() {
    const DEVICE_COUNT: u8 = 15;
    const GET_ALIGNMENT: u8 = 1;
    const GET_MAX_SIZE: u8 = 2;
    const ALLOC_BUFFER: u8 = 0;
    const BUFFER_GET_BASE: u8 = 3;
    let normal = |cmd: u8, count: u32, align: u64, rsize: Option<u64>, base: u64| match cmd {
        DEVICE_COUNT => Some(count.to_le_bytes().to_vec()),
        GET_ALIGNMENT => Some(align.to_le_bytes().to_vec()),
        GET_MAX_SIZE => Some((1u64 << 30).to_le_bytes().to_vec()),
        ALLOC_BUFFER => rsize.map(|n| [7u64.to_le_bytes(), n.to_le_bytes()].concat()),
        BUFFER_GET_BASE => Some(base.to_le_bytes().to_vec()),
        _ => None,
    };
    let connect = |addr: std::net::SocketAddr| {
        let p = strata_rpc::RpcProvider::with_options(ClientOptions {
            timeout: Duration::from_secs(10),
            ..ClientOptions::default()
        });
        p.connect(&addr.to_string())
    };

    let t0 = Instant::now();
    let (addr, fake) = scripted_server(move |c, _| normal(c, u32::MAX, 64, None, 0));
    let e = connect(addr).unwrap_err();
    assert!(
        is_backend_error(&e) && e.to_string().contains("4294967295 devices"),
        "{e}"
    );
    fake.join().unwrap();
    assert!(t0.elapsed() < Duration::from_secs(5));

    for align in [1u64 << 63, 3, 0] {
        let (addr, fake) = scripted_server(move |c, _| normal(c, 1, align, None, 0));
        let e = connect(addr).unwrap_err();
        assert!(
            is_backend_error(&e) && e.to_string().contains(&format!("alignment {align}")),
            "{e}"
        );
        fake.join().unwrap();
    }

    // base + size past 2^64, and a buffer smaller than asked for
    for (rsize, base, want) in [
        (4096, u64::MAX - 100, "overflows"),
        (16, 0x1000, "only 16 bytes"),
    ] {
        let (addr, fake) = scripted_server(move |c, _| normal(c, 1, 64, Some(rsize), base));
        let dev = connect(addr).unwrap().remove(0);
        let e = dev.default_buffer_type().alloc_buffer(4096).err().unwrap();
        assert!(is_backend_error(&e) && e.to_string().contains(want), "{e}");
        drop(dev);
        fake.join().unwrap();
    }
}
