//! Issue 16: resource exhaustion by hostile or broken clients. The memory
//! budget and lazy commit, idle and slow connections, message memory, and
//! computations whose client went away. Loopback only; every wait bounded.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use strata::backend::{alloc_graph, Device};
use strata::{ops, DType, Graph, Tensor};
use strata_rpc::proto::{Command, GraphMsg, Request, FLAG_COMPUTE};
use strata_rpc::server::{default_mem_budget, Limits, GRAPH_COST};

/// Tests that measure this process's RSS run one at a time.
static RSS_LOCK: Mutex<()> = Mutex::new(());

/// Resident set size of this process, in bytes.
fn rss() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

fn pair(b: &[u8]) -> (u64, u64) {
    (
        u64::from_le_bytes(b[..8].try_into().unwrap()),
        u64::from_le_bytes(b[8..].try_into().unwrap()),
    )
}

/// Item 1: buffers are committed as they are written, allocations beyond
/// the budget get ggml's failure reply (the connection lives on), and
/// GET_DEVICE_MEMORY reports the budget.
#[test]
fn buffers_are_lazy_and_bounded_by_the_budget() {
    let _g = RSS_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    const MIB: u64 = 1 << 20;
    let budget = 1024 * MIB;
    let (addr, server) = cpu_server(1, Limits::with_mem(budget));
    let mut raw = Raw::connect(addr);
    let mem = |raw: &mut Raw| {
        pair(
            &raw.call(&Request::GetDeviceMemory { device: 0 }, 16)
                .unwrap(),
        )
    };
    assert_eq!(mem(&mut raw), (budget, budget));

    let before = rss();
    let (h, base) = raw.alloc(768 * MIB);
    let grown = rss().saturating_sub(before);
    assert!(
        grown < 64 * MIB,
        "a 768 MiB buffer grew RSS by {} MiB",
        grown / MIB
    );
    assert_eq!(mem(&mut raw), (256 * MIB, budget));

    // Beyond the budget, and far beyond it: (0, 0), as ggml answers a failed
    // allocation; the connection is still served.
    for size in [300 * MIB, 1 << 40, u64::MAX] {
        let r = raw
            .call(&Request::AllocBuffer { device: 0, size }, 16)
            .unwrap();
        assert_eq!(pair(&r), (0, 0), "{size}");
    }
    assert_eq!(mem(&mut raw), (256 * MIB, budget));
    assert_eq!(server.stats().allocated_bytes, 768 * MIB);

    // Writing 8 MiB commits about that much, and reads back.
    let t = f32_rec(1, h, base, [2 << 20, 1, 1, 1]);
    let data: Vec<u8> = (0..8 * MIB as usize).map(|i| (i % 251) as u8).collect();
    let before = rss();
    raw.send(&set(t, 0, &data)).unwrap();
    let back = raw
        .call(
            &Request::GetTensor {
                tensor: t,
                offset: 0,
                size: data.len() as u64,
            },
            data.len(),
        )
        .unwrap();
    assert!(back == data);
    let grown = rss().saturating_sub(before);
    assert!(
        grown < 96 * MIB,
        "8 MiB written grew RSS by {} MiB",
        grown / MIB
    );

    raw.send(&Request::FreeBuffer { remote_ptr: h }).unwrap();
    assert_eq!(mem(&mut raw), (budget, budget));
}

/// Item 1: without --mem the budget is a share of physical memory, and it is
/// what the server reports.
#[test]
fn default_budget_is_a_share_of_physical_memory() {
    let total = strata::cpu::cpu_device().memory().unwrap().total as u64;
    let b = default_mem_budget();
    assert_eq!(Limits::default().mem, b);
    assert_eq!(Limits::default().max_buffer, b);
    if total > 0 {
        assert!(b < total && b >= total / 2, "{b} of {total}");
    }
    let (addr, _server) = cpu_server(1, Limits::default());
    let mut raw = Raw::connect(addr);
    let r = raw
        .call(&Request::GetDeviceMemory { device: 0 }, 16)
        .unwrap();
    assert_eq!(pair(&r), (b, b));
}

/// A full session through strata's client: allocate, upload, compute a + b,
/// read back.
fn well_behaved_session(addr: std::net::SocketAddr) {
    let (_p, dev) = device(addr);
    let dev: Arc<dyn Device> = dev;
    let a = Tensor::new(DType::F32, &[256]).unwrap();
    let b = Tensor::new(DType::F32, &[256]).unwrap();
    let c = ops::add(&a, &b).unwrap();
    let g = Graph::build(std::slice::from_ref(&c));
    let _bufs = alloc_graph(&g, &dev.default_buffer_type()).unwrap();
    let x: Vec<f32> = (0..256).map(|i| i as f32).collect();
    a.write_f32(&x).unwrap();
    b.write_f32(&x).unwrap();
    let mut be = dev.init_backend().unwrap();
    be.graph_compute(&g).unwrap();
    be.synchronize().unwrap();
    let want: Vec<f32> = x.iter().map(|v| 2.0 * v).collect();
    assert_eq!(c.to_f32_vec().unwrap(), want);
}

/// Item 2: 100 sockets that never send a byte (64 locked every client out
/// before) do not keep a well-behaved client from being served, and are
/// closed at the handshake deadline.
#[test]
fn idle_sockets_do_not_lock_out_a_client() {
    let limits = Limits {
        handshake_timeout: Duration::from_secs(3),
        ..Limits::with_mem(64 << 20)
    };
    let (addr, server) = cpu_server(1, limits);
    let mut idle: Vec<TcpStream> = (0..100)
        .map(|_| TcpStream::connect(addr).unwrap())
        .collect();
    server
        .wait_for(Duration::from_secs(10), |s| s.total_connections >= 100)
        .unwrap();
    let t0 = Instant::now();
    well_behaved_session(addr);
    assert!(
        t0.elapsed() < Duration::from_secs(3),
        "served only after {:?}",
        t0.elapsed()
    );
    // Past the deadline every idle socket has been closed by the server
    // (the oldest were evicted earlier, when 64 were waiting).
    server
        .wait_for(Duration::from_secs(10), |s| {
            s.pending_connections == 0 && s.dropped_connections >= 100 && s.active_connections == 0
        })
        .unwrap();
    for sock in &mut idle {
        sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut b = [0u8; 1];
        assert!(matches!(sock.read(&mut b), Ok(0) | Err(_)));
    }
}

/// Item 2: at most `max_per_address` served clients per address: one more
/// waits at HELLO for a slot (until its handshake deadline), is admitted
/// when one frees, and is closed when none does.
#[test]
fn connections_per_address_are_capped() {
    let limits = Limits {
        max_per_address: 3,
        handshake_timeout: Duration::from_millis(1500),
        ..Limits::with_mem(64 << 20)
    };
    let (addr, server) = cpu_server(1, limits);
    let mut three: Vec<Raw> = (0..3).map(|_| Raw::connect(addr)).collect();
    // a slot frees while the fourth waits: admitted
    let mut fourth = Raw::connect_no_hello(addr);
    fourth.send(&Request::Hello { caps: [0; 24] }).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    drop(three.remove(0));
    assert_eq!(&fourth.read_response(28).unwrap()[..4], &[7, 0, 0, 0]);
    assert!(!fourth.is_closed());
    // none frees for the fifth: closed at the deadline
    let t0 = Instant::now();
    let mut fifth = Raw::connect_no_hello(addr);
    fifth.send(&Request::Hello { caps: [0; 24] }).unwrap();
    let mut h = [0u8; 8];
    assert!(matches!(fifth.s.read(&mut h), Ok(0) | Err(_)), "5th served");
    assert!(t0.elapsed() < Duration::from_secs(5));
    assert!(!three[0].is_closed());
    assert!(server.stats().dropped_connections >= 1);
}

/// Item 2: deadlines between messages (a client holding no buffer) and
/// inside a message (a stalled upload); a client holding buffers may stay
/// idle (a loaded model between prompts).
#[test]
fn idle_and_stalled_clients_are_closed() {
    let limits = Limits {
        idle_timeout: Duration::from_millis(300),
        io_timeout: Duration::from_millis(300),
        ..Limits::with_mem(64 << 20)
    };
    let (addr, server) = cpu_server(1, limits);
    let mut idle = Raw::connect(addr);
    let mut loaded = Raw::connect(addr);
    loaded.alloc(4096);
    let mut stalled = Raw::connect(addr);
    // GRAPH_COMPUTE announcing 1000 bytes, then only 10 of them
    let mut partial = vec![Command::GraphCompute as u8];
    partial.extend(1000u64.to_le_bytes());
    partial.extend([0u8; 10]);
    stalled.send_bytes(&partial).unwrap();
    std::thread::sleep(Duration::from_millis(1200));
    for (name, raw) in [("idle", &mut idle), ("stalled", &mut stalled)] {
        assert!(
            raw.closed_within(Duration::from_secs(5)),
            "{name} still open"
        );
    }
    assert!(!loaded.is_closed(), "a client holding buffers was closed");
    assert!(server.stats().dropped_connections >= 2);
}

/// Peak RSS of this process since the last reset, in bytes.
fn peak_rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// Resets the peak RSS to the current RSS (Linux `clear_refs` 5).
fn reset_peak_rss() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

/// A chain of `n` ADD nodes in buffer `h` at `base`: x_i = x_{i-1} + a, x_0 = a,
/// each 4 floats; `(message, byte offset of the last node)`.
fn add_chain(h: u64, base: u64, n: u64) -> (GraphMsg, u64) {
    let a = f32_rec(1, h, base, [4, 1, 1, 1]);
    let mut g = GraphMsg {
        device: 0,
        nodes: Vec::new(),
        tensors: vec![a],
    };
    for i in 1..=n {
        let mut t = f32_rec(1 + i, h, base + 16 * i, [4, 1, 1, 1]);
        t.op = 2;
        t.flags = FLAG_COMPUTE;
        t.src[0] = i;
        t.src[1] = 1;
        g.nodes.push(1 + i);
        g.tensors.push(t);
    }
    (g, 16 * n)
}

/// Item 3: message limits derive from the budget, and a graph near the
/// limit costs at most GRAPH_COST times its payload at the peak (read in
/// place, not decoded into a second copy).
#[test]
fn graph_memory_is_bounded_by_its_payload() {
    let _g = RSS_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let l = Limits::with_mem(256 << 20);
    assert_eq!(l.max_inflight, 32 << 20);
    assert_eq!(l.max_message, (32 << 20) / GRAPH_COST);
    assert!(l.max_graph_tensors as u64 * 296 <= l.max_message);
    let (addr, server) = cpu_server(1, l.clone());
    let n = 12_000;
    let mut raw = Raw::connect(addr);
    let (h, base) = raw.alloc(16 * (n + 1));
    raw.send(&set(
        f32_rec(1, h, base, [4, 1, 1, 1]),
        0,
        &[0, 0, 128, 63].repeat(4),
    ))
    .unwrap();
    // warm up: the backend's pool and plan for a small graph
    let (small, _) = add_chain(h, base, 4);
    raw.send(&Request::GraphCompute(small)).unwrap();
    raw.call(&Request::DeviceCount, 4).unwrap();

    let (g, last) = add_chain(h, base, n);
    let bytes = Request::GraphCompute(g).encode();
    let payload = bytes.len() as u64 - 9;
    assert!(
        payload > l.max_message / 2 && payload <= l.max_message,
        "{payload}"
    );
    let measured = reset_peak_rss();
    let before = rss();
    raw.send_bytes(&bytes).unwrap();
    raw.call(&Request::DeviceCount, 4).unwrap();
    let grown = peak_rss().saturating_sub(before);
    drop(bytes);
    let got = raw
        .call(
            &Request::GetTensor {
                tensor: f32_rec(1, h, base + last, [4, 1, 1, 1]),
                offset: 0,
                size: 16,
            },
            16,
        )
        .unwrap();
    assert_eq!(
        f32::from_le_bytes(got[..4].try_into().unwrap()),
        (n + 1) as f32
    );
    eprintln!(
        "graph of {payload} payload bytes: peak RSS +{grown} bytes ({:.2}x), message memory held {}",
        grown as f64 / payload as f64,
        server.stats().inflight_bytes
    );
    assert_eq!(server.stats().inflight_bytes, payload * GRAPH_COST);
    if measured {
        assert!(
            grown <= payload * GRAPH_COST,
            "{grown} > {GRAPH_COST} x {payload}"
        );
    }
    // One byte over the limit is refused from its header, before any read.
    let mut big = Raw::connect(addr);
    let mut head = vec![Command::GraphCompute as u8];
    head.extend((l.max_message + 1).to_le_bytes());
    big.send_bytes(&head).unwrap();
    let mut b = [0u8; 1];
    assert!(matches!(big.s.read(&mut b), Ok(0) | Err(_)));
    drop(raw);
    server
        .wait_for(Duration::from_secs(5), |s| {
            s.inflight_bytes == 0 && s.active_connections == 0
        })
        .unwrap();
}

/// Item 3: message memory is bounded across all connections: a second
/// large graph waits for room and gives up at the I/O timeout, a trickle
/// loses its reservation at the rate deadline, and the server goes on.
#[test]
fn message_memory_in_flight_is_bounded_globally() {
    let limits = Limits {
        io_timeout: Duration::from_millis(600),
        ..Limits::with_mem(256 << 20)
    };
    let max = limits.max_inflight;
    let size = limits.max_message - 1024; // costs nearly all of max_inflight
    let (addr, server) = cpu_server(1, limits);
    let start = |raw: &mut Raw| {
        let mut head = vec![Command::GraphCompute as u8];
        head.extend(size.to_le_bytes());
        head.extend(0u32.to_le_bytes()); // device 0
        raw.send_bytes(&head).unwrap();
    };
    // A trickles one byte per 300 ms: each read is in time, the whole is not.
    let mut a = Raw::connect(addr);
    start(&mut a);
    server
        .wait_for(Duration::from_secs(5), |s| s.inflight_bytes > 0)
        .unwrap();
    let mut b = Raw::connect(addr);
    start(&mut b);
    let t0 = Instant::now();
    let mut peak = 0;
    while t0.elapsed() < Duration::from_millis(2500) {
        peak = peak.max(server.stats().inflight_bytes);
        let _ = a.s.write_all(&[0]);
        std::thread::sleep(Duration::from_millis(300));
    }
    assert!(peak <= max, "{peak} > {max}");
    for (name, raw) in [("waiting", &mut b), ("trickling", &mut a)] {
        assert!(
            raw.closed_within(Duration::from_secs(5)),
            "{name} still open"
        );
    }
    let s = server
        .wait_for(Duration::from_secs(5), |s| s.inflight_bytes == 0)
        .unwrap();
    assert!(s.dropped_connections >= 2, "{s:?}");
    well_behaved_session(addr);
}

/// A connection with a k = 256 buffer and the time one product takes there.
fn matmul_setup(addr: std::net::SocketAddr) -> (Raw, u64, u64, Duration) {
    let mut raw = Raw::connect(addr);
    let (h, base) = raw.alloc(12 * 256 * 256);
    let t0 = Instant::now();
    raw.send(&Request::GraphCompute(matmul_graph(h, base, 256, 16)))
        .unwrap();
    raw.call(&Request::DeviceCount, 4).unwrap();
    (raw, h, base, t0.elapsed() / 16)
}

/// Item 4: a computation stops soon after its client closes the connection,
/// even with the client's next request queued behind it (as strata's client
/// queues DEVICE_COUNT to wait for the result).
#[test]
fn computation_stops_when_its_client_goes_away() {
    let (addr, server) = cpu_server(1, Limits::with_mem(1 << 30));
    let (mut raw, h, base, per) = matmul_setup(addr);
    let n = ((20.0 / per.as_secs_f64()) as u64).clamp(2000, 40_000);
    let full = per * n as u32;
    raw.send(&Request::GraphCompute(matmul_graph(h, base, 256, n)))
        .unwrap();
    raw.send(&Request::DeviceCount).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let closed = Instant::now();
    drop(raw);
    server
        .wait_for(Duration::from_secs(20), |s| {
            s.aborted_computations == 1 && s.active_connections == 0
        })
        .unwrap();
    let took = closed.elapsed();
    eprintln!("{n} products ({full:?} in all): stopped {took:?} after the client left");
    assert!(took < full / 4 && took < Duration::from_secs(3), "{took:?}");
}

/// Item 4: a graph computing longer than `max_compute` is aborted and its
/// connection closed; the server serves the next client.
#[test]
fn computation_past_the_time_limit_is_aborted() {
    let limits = Limits {
        max_compute: Some(Duration::from_millis(400)),
        ..Limits::with_mem(1 << 30)
    };
    let (addr, server) = cpu_server(1, limits);
    let (mut raw, h, base, per) = matmul_setup(addr);
    let n = ((10.0 / per.as_secs_f64()) as u64).clamp(1000, 40_000);
    let t0 = Instant::now();
    raw.send(&Request::GraphCompute(matmul_graph(h, base, 256, n)))
        .unwrap();
    let mut b = [0u8; 1];
    raw.send(&Request::DeviceCount).unwrap();
    assert!(matches!(raw.s.read(&mut b), Ok(0) | Err(_)), "answered");
    let took = t0.elapsed();
    assert!(took < Duration::from_secs(3), "{took:?}");
    let s = server.stats();
    assert_eq!(s.aborted_computations, 1, "{s:?}");
    assert!(s.dropped_connections >= 1, "{s:?}");
    well_behaved_session(addr);
}
