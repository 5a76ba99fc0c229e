//! Issue 16 soak: 50 well-behaved clients running sessions back to back
//! while a hostile flood (idle sockets, garbage, oversized and memory-hungry
//! requests, trickled messages, abandoned computations) hits the same
//! server. No well-behaved session may fail, and the server's RSS stays
//! within its budget (buffers + message memory + per-connection overhead).
//!
//! Ignored by default (about a minute of full load on every core):
//! `cargo test --release -p strata-rpc --test soak -- --ignored --nocapture`;
//! `STRATA_SOAK_SECS` sets the duration (at most 280 s). Loopback only;
//! every loop ends at the deadline.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use strata::backend::{alloc_graph, Device};
use strata::{ops, DType, Graph, Tensor};
use strata_rpc::proto::{Command, Request};
use strata_rpc::server::Limits;
use strata_rpc::ClientOptions;

const CLIENTS: usize = 50;

fn rss() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    statm
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(0)
        * 4096
}

/// One well-behaved session through strata's client: connect, allocate,
/// upload, compute (a*b + a), read back and check, disconnect.
fn session(addr: SocketAddr, seed: u64) -> Result<(), String> {
    let p = strata_rpc::RpcProvider::with_options(ClientOptions {
        timeout: Duration::from_secs(60),
        ..ClientOptions::default()
    });
    let dev: Arc<dyn Device> = p
        .connect(&addr.to_string())
        .map_err(|e| format!("connect: {e}"))?
        .remove(0);
    let n = 4096;
    let a = Tensor::new(DType::F32, &[n]).map_err(|e| e.to_string())?;
    let b = Tensor::new(DType::F32, &[n]).map_err(|e| e.to_string())?;
    let c =
        ops::add(&ops::mul(&a, &b).map_err(|e| e.to_string())?, &a).map_err(|e| e.to_string())?;
    let g = Graph::build(std::slice::from_ref(&c));
    let _bufs = alloc_graph(&g, &dev.default_buffer_type()).map_err(|e| format!("alloc: {e}"))?;
    let x: Vec<f32> = (0..n).map(|i| ((i as u64 + seed) % 97) as f32).collect();
    let y: Vec<f32> = (0..n)
        .map(|i| ((i as u64 * 7 + seed) % 13) as f32)
        .collect();
    a.write_f32(&x).map_err(|e| format!("upload: {e}"))?;
    b.write_f32(&y).map_err(|e| format!("upload: {e}"))?;
    let mut be = dev.init_backend().map_err(|e| e.to_string())?;
    be.graph_compute(&g).map_err(|e| format!("compute: {e}"))?;
    be.synchronize().map_err(|e| format!("compute: {e}"))?;
    let got = c.to_f32_vec().map_err(|e| format!("read: {e}"))?;
    let want: Vec<f32> = x.iter().zip(&y).map(|(a, b)| a * b + a).collect();
    if got != want {
        return Err("wrong result".into());
    }
    Ok(())
}

/// A HELLO'd raw connection, or None when the server refused it.
fn hello(addr: SocketAddr) -> Option<TcpStream> {
    let mut s = TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    s.write_all(&Request::Hello { caps: [0; 24] }.encode())
        .ok()?;
    let mut r = [0u8; 36];
    s.read_exact(&mut r).ok()?;
    Some(s)
}

fn call(s: &mut TcpStream, req: &Request<'_>, len: usize) -> Option<Vec<u8>> {
    s.write_all(&req.encode()).ok()?;
    let mut v = vec![0u8; 8 + len];
    s.read_exact(&mut v).ok()?;
    Some(v.split_off(8))
}

/// Reads until the server closes the connection (bounded by the read timeout).
fn until_closed(s: &mut TcpStream) {
    let mut b = [0u8; 4096];
    for _ in 0..1000 {
        match s.read(&mut b) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
    }
}

#[test]
#[ignore = "soak: about a minute of full load; run with --ignored"]
fn soak_50_clients_under_a_hostile_flood() {
    let secs: u64 = std::env::var("STRATA_SOAK_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(60)
        .clamp(5, 280);
    let budget: u64 = 256 << 20;
    // Every client comes from 127.0.0.1 here, so the per-address cap is the total one.
    let limits = Limits {
        max_per_address: 64,
        handshake_timeout: Duration::from_secs(2),
        io_timeout: Duration::from_secs(2),
        ..Limits::with_mem(budget)
    };
    let bound =
        limits.mem + limits.max_inflight + (limits.max_connections as u64) * (2 << 20) + (64 << 20);
    let (addr, server) = cpu_server(1, limits.clone());
    let baseline = rss();
    let end = Instant::now() + Duration::from_secs(secs);
    let stop = Arc::new(AtomicBool::new(false));
    let peak = Arc::new(AtomicU64::new(0));
    let sessions = Arc::new(AtomicUsize::new(0));
    let failures: Arc<Mutex<Vec<String>>> = Arc::default();
    let hostile = Arc::new(AtomicUsize::new(0));

    let monitor = {
        let (stop, peak) = (stop.clone(), peak.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                peak.fetch_max(rss(), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(50));
            }
        })
    };
    let mut threads = Vec::new();
    for c in 0..CLIENTS {
        let (sessions, failures) = (sessions.clone(), failures.clone());
        threads.push(std::thread::spawn(move || {
            let mut k = 0u64;
            while Instant::now() < end {
                match session(addr, c as u64 * 1000 + k) {
                    Ok(()) => {
                        sessions.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => failures.lock().unwrap().push(format!("client {c}: {e}")),
                }
                k += 1;
            }
        }));
    }
    // Idle sockets: 40 more every 200 ms, the newest 200 kept open.
    {
        let hostile = hostile.clone();
        threads.push(std::thread::spawn(move || {
            let mut open = std::collections::VecDeque::new();
            while Instant::now() < end {
                for _ in 0..40 {
                    if let Ok(s) = TcpStream::connect(addr) {
                        open.push_back(s);
                        hostile.fetch_add(1, Ordering::Relaxed);
                    }
                }
                while open.len() > 200 {
                    open.pop_front();
                }
                std::thread::sleep(Duration::from_millis(200));
            }
        }));
    }
    // Garbage: unknown commands, commands before HELLO, huge headers.
    {
        let hostile = hostile.clone();
        threads.push(std::thread::spawn(move || {
            let mut i = 0u64;
            while Instant::now() < end {
                i += 1;
                let Ok(mut s) = TcpStream::connect(addr) else {
                    continue;
                };
                let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
                let bytes: Vec<u8> = match i % 4 {
                    0 => vec![200; 64],
                    1 => Request::AllocBuffer {
                        device: 0,
                        size: 1 << 40,
                    }
                    .encode(),
                    2 => [
                        Request::Hello { caps: [0; 24] }.encode(),
                        vec![Command::GraphCompute as u8],
                        u64::MAX.to_le_bytes().to_vec(),
                    ]
                    .concat(),
                    _ => [
                        Request::Hello { caps: [0; 24] }.encode(),
                        vec![Command::SetTensor as u8],
                        (1u64 << 50).to_le_bytes().to_vec(),
                    ]
                    .concat(),
                };
                let _ = s.write_all(&bytes);
                until_closed(&mut s);
                hostile.fetch_add(1, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(20));
            }
        }));
    }
    // Memory: a 1 TiB ask, then all but 32 MiB of the budget in 32 MiB
    // buffers, each touched (BUFFER_CLEAR), held for a second.
    {
        let hostile = hostile.clone();
        let chunks = (budget >> 25) - 1;
        threads.push(std::thread::spawn(move || {
            while Instant::now() < end {
                if let Some(mut s) = hello(addr) {
                    let _ = call(
                        &mut s,
                        &Request::AllocBuffer {
                            device: 0,
                            size: 1 << 40,
                        },
                        16,
                    );
                    for _ in 0..chunks {
                        let Some(r) = call(
                            &mut s,
                            &Request::AllocBuffer {
                                device: 0,
                                size: 32 << 20,
                            },
                            16,
                        ) else {
                            break;
                        };
                        let h = u64::from_le_bytes(r[..8].try_into().unwrap());
                        if h != 0 {
                            let _ = s.write_all(
                                &Request::BufferClear {
                                    remote_ptr: h,
                                    value: 0xff,
                                }
                                .encode(),
                            );
                        }
                    }
                    let _ = call(&mut s, &Request::DeviceCount, 4);
                    std::thread::sleep(Duration::from_millis(1000));
                    hostile.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    // Trickle: a 3 MiB graph announced, then a byte every 100 ms.
    {
        let hostile = hostile.clone();
        let size = (3u64 << 20).min(limits.max_message);
        threads.push(std::thread::spawn(move || {
            while Instant::now() < end {
                if let Some(mut s) = hello(addr) {
                    let mut head = vec![Command::GraphCompute as u8];
                    head.extend(size.to_le_bytes());
                    let _ = s.write_all(&head);
                    while Instant::now() < end && s.write_all(&[0]).is_ok() {
                        std::thread::sleep(Duration::from_millis(100));
                        let _ = s.set_nonblocking(true);
                        let mut b = [0u8; 1];
                        let closed = matches!(s.read(&mut b), Ok(0));
                        let _ = s.set_nonblocking(false);
                        if closed {
                            break;
                        }
                    }
                    hostile.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    // Abandoned computations: a long graph, then gone.
    {
        let hostile = hostile.clone();
        threads.push(std::thread::spawn(move || {
            while Instant::now() < end {
                if let Some(mut s) = hello(addr) {
                    if let Some(r) = call(
                        &mut s,
                        &Request::AllocBuffer {
                            device: 0,
                            size: 12 * 256 * 256,
                        },
                        16,
                    ) {
                        let h = u64::from_le_bytes(r[..8].try_into().unwrap());
                        if let Some(b) = call(&mut s, &Request::BufferGetBase { remote_ptr: h }, 8)
                        {
                            let base = u64::from_le_bytes(b.try_into().unwrap());
                            let _ = s.write_all(
                                &Request::GraphCompute(matmul_graph(h, base, 256, 2000)).encode(),
                            );
                            let _ = s.write_all(&Request::DeviceCount.encode());
                            std::thread::sleep(Duration::from_millis(200));
                        }
                    }
                    hostile.fetch_add(1, Ordering::Relaxed);
                }
                std::thread::sleep(Duration::from_millis(2000));
            }
        }));
    }

    for t in threads {
        t.join().unwrap();
    }
    // Everything is released once the flood and the clients are gone.
    let settled = server.wait_for(Duration::from_secs(30), |s| {
        s.active_connections == 0 && s.allocated_bytes == 0 && s.inflight_bytes == 0
    });
    stop.store(true, Ordering::Relaxed);
    monitor.join().unwrap();
    let stats = server.stats();
    let grown = peak.load(Ordering::Relaxed).saturating_sub(baseline);
    let failures = failures.lock().unwrap();
    eprintln!(
        "soak {secs} s: {} well-behaved sessions, {} failed; {} hostile connections; \
         peak RSS +{} MiB (bound {} MiB: budget {} + messages {} + connections); {stats:?}",
        sessions.load(Ordering::Relaxed),
        failures.len(),
        hostile.load(Ordering::Relaxed),
        grown >> 20,
        bound >> 20,
        limits.mem >> 20,
        limits.max_inflight >> 20,
    );
    assert!(
        failures.is_empty(),
        "{:?}",
        &failures[..failures.len().min(10)]
    );
    assert!(sessions.load(Ordering::Relaxed) >= CLIENTS * 3);
    assert!(grown <= bound, "RSS grew {grown} > {bound}");
    assert!(settled.is_ok(), "{settled:?}");
    assert!(
        stats.dropped_connections > 0
            && stats.refused_messages > 0
            && stats.aborted_computations > 0,
        "{stats:?}"
    );
}
