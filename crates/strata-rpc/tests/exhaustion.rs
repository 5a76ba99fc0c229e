//! Issue 16: resource exhaustion by hostile or broken clients. The memory
//! budget and lazy commit, idle and slow connections, message memory, and
//! computations whose client went away. Loopback only; every wait bounded.

mod common;

use std::sync::Mutex;

use common::*;
use strata_rpc::proto::Request;
use strata_rpc::server::{default_mem_budget, Limits};

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
