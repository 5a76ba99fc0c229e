//! Pipelining with a remote device: the RPC backend runs graphs
//! asynchronously, so `Scheduler::compute_async` returns while the server is
//! still computing, the CPU can go on with the next batch's CPU split (into
//! the other pipeline copy), and `synchronize` waits. The server's backend
//! here blocks on a gate the test opens, so nothing depends on timing.

mod common;

use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use strata::backend::{alloc_tensors, Backend, BufferUsage, Device};
use strata::cpu::CpuBackend;
use strata::sched::{SchedConfig, Scheduler};
use strata::Graph;
use strata::{ops, DType, Tensor};
use strata_rpc::server::{Limits, ServerHandle};
use strata_rpc::RpcProvider;

type Gate = Arc<(Mutex<bool>, Condvar)>;

/// A one-CPU factory whose backends wait for `gate` to open before each graph.
fn gated_factory(gate: Gate) -> common::HookedCpuFactory {
    common::HookedCpuFactory {
        name: "GATED",
        before: Arc::new(move || {
            let (open, cv) = &*gate;
            let mut g = open.lock().unwrap();
            while !*g {
                g = cv.wait(g).unwrap();
            }
        }),
    }
}

/// A closed [`Gate`], a server whose backends wait for it, and a client
/// device of that server (with its provider; keep both alive).
fn gated_device() -> (Gate, ServerHandle, Arc<RpcProvider>, Arc<dyn Device>) {
    let gate: Gate = Arc::new((Mutex::new(false), Condvar::new()));
    let (addr, server) =
        common::server_with(Arc::new(gated_factory(gate.clone())), Limits::default());
    let (p, dev) = common::device(addr);
    (gate, server, p, dev)
}

#[test]
fn compute_async_returns_while_the_remote_split_runs() {
    let (gate, _server, _p, dev) = gated_device();
    // weights on the remote device; x is a CPU input scaled on the CPU first
    let w = Tensor::new(DType::F32, &[4, 4]).unwrap().with_name("w");
    let wb = alloc_tensors(&[w.clone()], &dev.default_buffer_type()).unwrap();
    wb[0].set_usage(BufferUsage::Weights);
    w.write_f32(&(0..16).map(|i| i as f32).collect::<Vec<_>>())
        .unwrap();
    let x = Tensor::new(DType::F32, &[4, 2]).unwrap().with_name("x");
    x.set_input();
    let one = Tensor::new(DType::F32, &[1]).unwrap().with_name("one");
    let ob = alloc_tensors(&[one.clone()], &strata::cpu::cpu_buffer_type()).unwrap();
    ob[0].set_usage(BufferUsage::Weights);
    one.write_f32(&[2.0]).unwrap();
    let xs = ops::mul(&x, &one).unwrap().with_name("xs"); // CPU (weight `one`)
    let y = ops::mul_mat(&w, &xs).unwrap().with_name("y"); // remote (weight `w`)
    y.set_output();
    let g = Graph::build(&[y.clone()]);
    let backends: Vec<Box<dyn Backend>> =
        vec![dev.init_backend().unwrap(), Box::new(CpuBackend::new(1))];
    let mut sched = Scheduler::new(
        backends,
        None,
        SchedConfig {
            n_copies: 2,
            ..SchedConfig::default()
        },
    )
    .unwrap();
    sched.alloc_graph(&g).unwrap();
    assert_eq!(sched.n_splits(), 2);

    let (tx, rx) = mpsc::channel();
    let worker = std::thread::spawn(move || {
        for batch in 0..2 {
            x.write_f32(&[batch as f32 + 1.0; 8]).unwrap();
            sched.compute_async(&g).unwrap();
            // returned with the remote split still behind the closed gate
            tx.send(batch).unwrap();
        }
        sched.synchronize().unwrap();
        y.to_f32_vec().unwrap()
    });
    // both batches were dispatched while the server could not compute:
    // compute_async did not wait for the remote split
    for want in 0..2 {
        let got = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("compute_async blocked on the remote device");
        assert_eq!(got, want);
        // the gate is still closed: the server has not finished anything
        assert!(!*gate.0.lock().unwrap());
        if want == 0 {
            continue;
        }
    }
    *gate.0.lock().unwrap() = true;
    gate.1.notify_all();
    let out = worker.join().unwrap();
    // batch 2: xs = 2 * 2 = 4 everywhere; y[r] = 4 * sum of row r of w
    let want: Vec<f32> = (0..2)
        .flat_map(|_| (0..4).map(|r| 4.0 * (0..4).map(|c| (r * 4 + c) as f32).sum::<f32>()))
        .collect();
    assert_eq!(out, want);
}

#[test]
fn async_writes_and_reads_queue_behind_the_running_graph() {
    let (gate, _server, _p, dev) = gated_device();
    let a = Tensor::new(DType::F32, &[4]).unwrap().with_name("a");
    let b = ops::scale(&a, 2.0).unwrap().with_name("b");
    let g = Graph::build(&[b.clone()]);
    let _bufs = strata::backend::alloc_graph(&g, &dev.default_buffer_type()).unwrap();
    a.write_f32(&[1.0; 4]).unwrap();
    let host = Tensor::new(DType::F32, &[4]).unwrap().with_name("host");
    let _hb = alloc_tensors(&[host.clone()], &strata::cpu::cpu_buffer_type()).unwrap();
    let mut backend = dev.init_backend().unwrap();
    let (tx, rx) = mpsc::channel();
    let b2 = b.clone();
    let worker = std::thread::spawn(move || {
        let b = b2;
        backend.graph_compute(&g).unwrap();
        // queued behind the graph the server cannot finish yet
        let fives: Vec<u8> = [5.0f32; 4].iter().flat_map(|x| x.to_le_bytes()).collect();
        backend.set_tensor_async(&a, 0, &fives).unwrap();
        // a tensor in host memory goes through its own buffer
        backend.set_tensor_async(&host, 4, &fives[..4]).unwrap();
        tx.send(()).unwrap();
        // answered after the graph: it read a = 1
        let mut out = [0u8; 16];
        backend.get_tensor_async(&b, 0, &mut out).unwrap();
        let first: Vec<f32> = out
            .chunks(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        backend.graph_compute(&g).unwrap();
        backend.synchronize().unwrap();
        (first, b.to_f32_vec().unwrap(), host.to_f32_vec().unwrap())
    });
    rx.recv_timeout(Duration::from_secs(30))
        .expect("set_tensor_async waited for the remote graph");
    assert!(!*gate.0.lock().unwrap());
    *gate.0.lock().unwrap() = true;
    gate.1.notify_all();
    let (first, second, host) = worker.join().unwrap();
    assert_eq!(first, vec![2.0; 4]);
    assert_eq!(second, vec![10.0; 4]);
    assert_eq!(host[1], 5.0);
    // out-of-range asynchronous writes are refused, typed
    let mut backend = dev.init_backend().unwrap();
    let err = backend.set_tensor_async(&b, 12, &[0u8; 8]).unwrap_err();
    assert!(matches!(err, strata::Error::OutOfBounds { .. }), "{err}");
}
