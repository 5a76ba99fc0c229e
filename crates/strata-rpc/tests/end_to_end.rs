//! Real client against real server on loopback: every op with a CPU kernel
//! through RPC equals the local CPU bit for bit; graphs, recompute, memory,
//! several devices, concurrent clients, cleanup, the hashed upload path.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use strata::backend::{
    alloc_graph, alloc_tensors, Backend, Buffer, BufferType, BufferUsage, Device, DeviceProvider,
    Registry,
};
use strata::ops::{self, GluOp, UnaryOp};
use strata::{cpu, DType, Graph, Tensor};
use strata_rpc::server::{CpuBackendFactory, Limits, Server};
use strata_rpc::{ClientOptions, RpcProvider};

type Build = fn(&[Tensor]) -> strata::Result<Tensor>;

/// One op test: input types/shapes, value range, and how to build the output.
struct Case {
    name: &'static str,
    inputs: &'static [(DType, &'static [usize])],
    range: (f32, f32),
    build: Build,
}

const F32: DType = DType::F32;
const F16: DType = DType::F16;
const M: &[usize] = &[16, 5, 3];
const ROW: &[usize] = &[16, 1, 3];
const ANY: (f32, f32) = (-3.0, 3.0);
const POS: (f32, f32) = (0.1, 4.0);

/// Adding an op with a CPU kernel is one line here.
const CASES: &[Case] = &[
    Case {
        name: "add",
        inputs: &[(F32, M), (F32, M)],
        range: ANY,
        build: |x| ops::add(&x[0], &x[1]),
    },
    Case {
        name: "add_bcast",
        inputs: &[(F32, M), (F32, ROW)],
        range: ANY,
        build: |x| ops::add(&x[0], &x[1]),
    },
    Case {
        name: "add_f16",
        inputs: &[(F16, M), (F16, M)],
        range: ANY,
        build: |x| ops::add(&x[0], &x[1]),
    },
    Case {
        name: "sub",
        inputs: &[(F32, M), (F32, ROW)],
        range: ANY,
        build: |x| ops::sub(&x[0], &x[1]),
    },
    Case {
        name: "mul",
        inputs: &[(F32, M), (F32, M)],
        range: ANY,
        build: |x| ops::mul(&x[0], &x[1]),
    },
    Case {
        name: "div",
        inputs: &[(F32, M), (F32, M)],
        range: POS,
        build: |x| ops::div(&x[0], &x[1]),
    },
    Case {
        name: "scale",
        inputs: &[(F32, M)],
        range: ANY,
        build: |x| ops::scale_bias(&x[0], 0.75, -0.5),
    },
    Case {
        name: "sqr",
        inputs: &[(F32, M)],
        range: ANY,
        build: |x| ops::sqr(&x[0]),
    },
    Case {
        name: "sqrt",
        inputs: &[(F32, M)],
        range: POS,
        build: |x| ops::sqrt(&x[0]),
    },
    Case {
        name: "log",
        inputs: &[(F32, M)],
        range: POS,
        build: |x| ops::log(&x[0]),
    },
    Case {
        name: "sin",
        inputs: &[(F32, M)],
        range: ANY,
        build: |x| ops::sin(&x[0]),
    },
    Case {
        name: "cos",
        inputs: &[(F32, M)],
        range: ANY,
        build: |x| ops::cos(&x[0]),
    },
    Case {
        name: "clamp",
        inputs: &[(F32, M)],
        range: ANY,
        build: |x| ops::clamp(&x[0], -1.0, 0.5),
    },
    Case {
        name: "abs",
        inputs: &[(F32, M)],
        range: ANY,
        build: |x| ops::unary(&x[0], UnaryOp::Abs),
    },
    Case {
        name: "neg",
        inputs: &[(F32, M)],
        range: ANY,
        build: |x| ops::unary(&x[0], UnaryOp::Neg),
    },
    Case {
        name: "tanh",
        inputs: &[(F32, M)],
        range: ANY,
        build: |x| ops::unary(&x[0], UnaryOp::Tanh),
    },
    Case {
        name: "relu",
        inputs: &[(F32, M)],
        range: ANY,
        build: |x| ops::unary(&x[0], UnaryOp::Relu),
    },
    Case {
        name: "sigmoid",
        inputs: &[(F32, M)],
        range: ANY,
        build: |x| ops::unary(&x[0], UnaryOp::Sigmoid),
    },
    Case {
        name: "gelu",
        inputs: &[(F32, M)],
        range: ANY,
        build: |x| ops::unary(&x[0], UnaryOp::Gelu),
    },
    Case {
        name: "gelu_quick",
        inputs: &[(F32, M)],
        range: ANY,
        build: |x| ops::unary(&x[0], UnaryOp::GeluQuick),
    },
    Case {
        name: "silu",
        inputs: &[(F32, M)],
        range: ANY,
        build: |x| ops::unary(&x[0], UnaryOp::Silu),
    },
    Case {
        name: "exp",
        inputs: &[(F32, M)],
        range: ANY,
        build: |x| ops::unary(&x[0], UnaryOp::Exp),
    },
    Case {
        name: "silu_f16",
        inputs: &[(F16, M)],
        range: ANY,
        build: |x| ops::silu(&x[0]),
    },
    Case {
        name: "reglu",
        inputs: &[(F32, M), (F32, M)],
        range: ANY,
        build: |x| ops::glu_split(&x[0], &x[1], GluOp::Reglu),
    },
    Case {
        name: "geglu",
        inputs: &[(F32, M), (F32, M)],
        range: ANY,
        build: |x| ops::glu_split(&x[0], &x[1], GluOp::Geglu),
    },
    Case {
        name: "swiglu",
        inputs: &[(F32, M), (F32, M)],
        range: ANY,
        build: |x| ops::swiglu_split(&x[0], &x[1]),
    },
    Case {
        name: "swiglu_fused_swapped",
        inputs: &[(F32, M)],
        range: ANY,
        build: |x| ops::glu(&x[0], GluOp::Swiglu, true),
    },
    Case {
        name: "view_2d",
        inputs: &[(F32, M)],
        range: ANY,
        build: |x| ops::sqr(&ops::view_2d(&x[0], 8, 4, 64, 16)?),
    },
    Case {
        name: "permute",
        inputs: &[(F32, M)],
        range: ANY,
        build: |x| ops::unary(&ops::permute(&x[0], [1, 0, 2, 3])?, UnaryOp::Neg),
    },
    Case {
        name: "transpose",
        inputs: &[(F32, M), (F32, &[5, 16, 3])],
        range: ANY,
        build: |x| ops::add(&x[1], &ops::transpose(&x[0])?),
    },
    Case {
        name: "reshape",
        inputs: &[(F32, M)],
        range: ANY,
        build: |x| ops::sin(&ops::reshape(&x[0], &[80, 3])?),
    },
];

fn inputs(case: &Case) -> Vec<Tensor> {
    case.inputs
        .iter()
        .enumerate()
        .map(|(i, (dt, dims))| Tensor::new(*dt, dims).unwrap().with_name(format!("in{i}")))
        .collect()
}

fn data(case: &Case, seed: u64) -> Vec<Vec<f32>> {
    let mut rng = Rng::new(seed);
    case.inputs
        .iter()
        .map(|(_, dims)| rng.vec(dims.iter().product(), case.range.0, case.range.1))
        .collect()
}

/// `case`'s graph in memory of `buft`, its inputs holding `vals`: the
/// output, the graph and the buffers.
fn prepared(
    case: &Case,
    vals: &[Vec<f32>],
    buft: &Arc<dyn BufferType>,
) -> (Tensor, Graph, Vec<Arc<dyn Buffer>>) {
    let x = inputs(case);
    let out = (case.build)(&x).unwrap();
    let g = Graph::build(std::slice::from_ref(&out));
    let bufs = Vec::from(alloc_graph(&g, buft).unwrap());
    for (t, v) in x.iter().zip(vals) {
        t.write_f32(v).unwrap();
    }
    (out, g, bufs)
}

fn run_local(case: &Case, vals: &[Vec<f32>]) -> Vec<u8> {
    let (out, g, _b) = prepared(case, vals, &cpu::cpu_buffer_type());
    cpu::compute(&g, 2).unwrap();
    out.read_bytes().unwrap()
}

fn run_remote(case: &Case, vals: &[Vec<f32>], dev: &Arc<dyn Device>) -> Vec<u8> {
    let (out, g, _b) = prepared(case, vals, &dev.default_buffer_type());
    dev.init_backend().unwrap().graph_compute(&g).unwrap();
    out.read_bytes().unwrap()
}

#[test]
fn every_op_through_rpc_equals_local_cpu_bit_for_bit() {
    // Servers computing with 1, 2 and 3 threads all match the local CPU.
    for nth in 1..=3 {
        let (addr, server) = cpu_server(nth, Limits::default());
        let mut reg = Registry::with_defaults();
        reg.register(Arc::new(RpcProvider::new()));
        let dev = reg.device(&format!("RPC[{addr}]")).unwrap();
        assert_eq!(dev.name(), format!("RPC[{addr}]"));
        for (i, case) in CASES.iter().enumerate() {
            let vals = data(case, 100 + i as u64);
            let local = run_local(case, &vals);
            let remote = run_remote(case, &vals, &dev);
            assert!(!local.is_empty());
            assert_eq!(
                local, remote,
                "op case '{}', {nth} server threads",
                case.name
            );
        }
        // Everything was freed as the tests' buffers went away.
        server
            .wait_for(Duration::from_secs(5), |s| s.live_buffers == 0)
            .unwrap();
        assert_eq!(server.stats().refused_messages, 0);
    }
}

/// A small MLP-like stack: three layers of (mul by weight, add bias, silu),
/// weights in a WEIGHTS buffer, activations in a compute buffer; recomputed
/// with new inputs via GRAPH_RECOMPUTE.
#[test]
fn multi_layer_graph_and_recompute() {
    let (addr, _server) = cpu_server(3, Limits::default());
    let (_p, dev) = device(addr);
    let build = |w: &[Tensor], b: &[Tensor], x: &Tensor| -> Tensor {
        let mut h = x.clone();
        for l in 0..3 {
            h = ops::silu(&ops::add(&ops::mul(&h, &w[l]).unwrap(), &b[l]).unwrap()).unwrap();
            h = ops::scale(&h, 0.5).unwrap();
        }
        h
    };
    // fresh weights, biases, input, and the output and graph over them
    let mk = || {
        let w: Vec<Tensor> = (0..3)
            .map(|_| Tensor::new(DType::F32, &[32, 4]).unwrap())
            .collect();
        let b: Vec<Tensor> = (0..3)
            .map(|_| Tensor::new(DType::F32, &[32]).unwrap())
            .collect();
        let x = Tensor::new(DType::F32, &[32, 4]).unwrap();
        let out = build(&w, &b, &x);
        let g = Graph::build(std::slice::from_ref(&out));
        (w, b, x, out, g)
    };
    let mut rng = Rng::new(7);
    let wv: Vec<Vec<f32>> = (0..3).map(|_| rng.vec(128, -1.0, 1.0)).collect();
    let bv: Vec<Vec<f32>> = (0..3).map(|_| rng.vec(32, -1.0, 1.0)).collect();
    let xs: Vec<Vec<f32>> = (0..3).map(|_| rng.vec(128, -2.0, 2.0)).collect();
    let write_params = |w: &[Tensor], b: &[Tensor]| {
        for l in 0..3 {
            w[l].write_f32(&wv[l]).unwrap();
            b[l].write_f32(&bv[l]).unwrap();
        }
    };

    // local reference
    let (w, b, x, out, g) = mk();
    let _bufs = cpu::alloc_graph_host(&g).unwrap();
    write_params(&w, &b);
    let mut want = Vec::new();
    for xv in &xs {
        x.write_f32(xv).unwrap();
        cpu::compute(&g, 1).unwrap();
        want.push(out.read_bytes().unwrap());
    }

    // every input through `backend` gives the local result
    let same_as_local = |backend: &mut dyn Backend, g: &Graph, x: &Tensor, out: &Tensor| {
        for (i, xv) in xs.iter().enumerate() {
            x.write_f32(xv).unwrap();
            backend.graph_compute(g).unwrap();
            assert_eq!(out.read_bytes().unwrap(), want[i], "input {i}");
        }
    };

    // remote
    let (w, b, x, out, g) = mk();
    assert_eq!(g.nodes().len(), 12);
    let buft = dev.default_buffer_type();
    let params: Vec<Tensor> = w.iter().chain(&b).cloned().collect();
    let wbufs = alloc_tensors(&params, &buft).unwrap();
    wbufs[0].set_usage(BufferUsage::Weights);
    let rest: Vec<Tensor> = g.leafs().iter().chain(g.nodes()).cloned().collect();
    let _cbufs = alloc_tensors(&rest, &buft).unwrap();
    write_params(&w, &b);
    let mut backend = dev.rpc_backend();
    same_as_local(&mut backend, &g, &x, &out);
    assert_eq!(backend.graphs_sent(), 1);
    assert_eq!(backend.graphs_recomputed(), 2);
    // Freeing any buffer makes the server forget cached graphs: the client
    // must send the graph again rather than recompute.
    let extra = buft.clone().alloc_buffer(64).unwrap();
    drop(extra);
    backend.graph_compute(&g).unwrap();
    assert_eq!(backend.graphs_sent(), 2);
    assert_eq!(out.read_bytes().unwrap(), want[2]);

    // With recompute disabled the graph is always sent in full.
    let opts = ClientOptions {
        recompute: false,
        ..ClientOptions::default()
    };
    let (_p2, dev2) = device_opts(addr, opts);
    let (w, b, x, out, g) = mk();
    let _bufs2 = alloc_graph(&g, &dev2.default_buffer_type()).unwrap();
    write_params(&w, &b);
    let mut backend = dev2.rpc_backend();
    same_as_local(&mut backend, &g, &x, &out);
    assert_eq!((backend.graphs_sent(), backend.graphs_recomputed()), (3, 0));
}

/// The client re-runs the graph a device holds without serializing it only
/// while the graph reads and writes the same memory and no other graph
/// replaced it there: a moved tensor or another backend's graph in between
/// sends it in full again, and every result is still right.
#[test]
fn recompute_needs_the_same_memory_and_the_held_graph() {
    let (addr, _server) = cpu_server(1, Limits::default());
    let (_p, dev) = device(addr);
    let buft = dev.default_buffer_type();
    let x = Tensor::new(DType::F32, &[16]).unwrap();
    let y = ops::scale(&x, 2.0).unwrap();
    let g = Graph::build(std::slice::from_ref(&y));
    let _bufs = alloc_graph(&g, &buft).unwrap();
    let xv: Vec<f32> = (0..16).map(|i| i as f32).collect();
    let times = |v: &[f32], k: f32| -> Vec<f32> { v.iter().map(|a| a * k).collect() };
    x.write_f32(&xv).unwrap();
    let mut a = dev.rpc_backend();
    a.graph_compute(&g).unwrap();
    a.graph_compute(&g).unwrap();
    assert_eq!((a.graphs_sent(), a.graphs_recomputed()), (1, 1));
    assert_eq!(y.to_f32_vec().unwrap(), times(&xv, 2.0));
    // the re-run skipped serialization (the storage key matched)
    assert_eq!(a.graphs_rerun_by_key(), 1);

    // The result moves to another buffer (nothing freed): a recompute would
    // write the old place, so the graph goes in full.
    let other = buft.clone().alloc_buffer(y.nbytes()).unwrap();
    y.set_storage(other.clone(), 0).unwrap();
    let xv2: Vec<f32> = (0..16).map(|i| 1.0 - i as f32).collect();
    x.write_f32(&xv2).unwrap();
    a.graph_compute(&g).unwrap();
    assert_eq!((a.graphs_sent(), a.graphs_recomputed()), (2, 1));
    assert_eq!(y.to_f32_vec().unwrap(), times(&xv2, 2.0));

    // Another backend's graph replaces it on the device: sent in full again.
    let z = ops::scale(&x, 3.0).unwrap();
    let g2 = Graph::build(std::slice::from_ref(&z));
    let _bufs2 = alloc_tensors(std::slice::from_ref(&z), &buft).unwrap();
    let mut b = dev.rpc_backend();
    b.graph_compute(&g2).unwrap();
    assert_eq!(z.to_f32_vec().unwrap(), times(&xv2, 3.0));
    x.write_f32(&xv).unwrap();
    a.graph_compute(&g).unwrap();
    assert_eq!((a.graphs_sent(), a.graphs_recomputed()), (3, 1));
    assert_eq!(y.to_f32_vec().unwrap(), times(&xv, 2.0));
    a.graph_compute(&g).unwrap();
    assert_eq!((a.graphs_sent(), a.graphs_recomputed()), (3, 2));
    assert_eq!(a.graphs_rerun_by_key(), 2);
}

#[test]
fn memory_reporting_follows_allocations() {
    let (addr, server) = cpu_server(1, Limits::with_mem(64 << 20));
    let (_p, dev) = device(addr);
    let m0 = dev.memory().unwrap();
    assert_eq!(m0.total, 64 << 20);
    assert_eq!(m0.free, 64 << 20);
    let buft = dev.default_buffer_type();
    assert_eq!(buft.max_size(), 64 << 20);
    assert_eq!(buft.alignment(), strata::cpu::HOST_ALIGNMENT);
    let b = buft.clone().alloc_buffer(10 << 20).unwrap();
    assert_eq!(b.size(), 10 << 20);
    assert_ne!(b.base(), 0);
    assert_eq!(b.base() % buft.alignment() as u64, 0);
    assert_eq!(dev.memory().unwrap().free, 54 << 20);
    assert_eq!(server.stats().allocated_bytes, 10 << 20);
    // Over the budget: a typed out-of-memory error, connection still fine.
    let err = buft.clone().alloc_buffer(60 << 20).err().unwrap();
    assert!(matches!(err, strata::Error::OutOfMemory { .. }), "{err}");
    drop(b);
    assert_eq!(dev.memory().unwrap().free, 64 << 20);
    assert_eq!(server.stats().live_buffers, 0);
}

#[test]
fn several_devices_one_connection() {
    let f = Arc::new(CpuBackendFactory::new(1).with_devices(2));
    let (addr, server) = server_with(f, Limits::default());
    let mut reg = Registry::new();
    let p = Arc::new(RpcProvider::new());
    reg.register(p.clone());
    let d0 = reg.device(&format!("RPC0[{addr}]")).unwrap();
    let d1 = reg.device(&format!("RPC1[{addr}]")).unwrap();
    assert_eq!(
        reg.device(&format!("RPC[{addr}]")).unwrap().name(),
        d0.name()
    );
    assert!(reg.device(&format!("RPC2[{addr}]")).is_err());
    assert_eq!(p.devices().len(), 2);
    assert!(!d0.supports_buft(&d1.default_buffer_type()));
    assert!(d1.supports_buft(&d1.default_buffer_type()));
    let case = &CASES[0];
    let vals = data(case, 1);
    let want = run_local(case, &vals);
    assert_eq!(run_remote(case, &vals, &d0), want);
    assert_eq!(run_remote(case, &vals, &d1), want);
    assert_eq!(server.stats().total_connections, 1);
}

#[test]
fn two_concurrent_clients_have_separate_state() {
    let (addr, server) = cpu_server(1, Limits::default());
    let threads: Vec<_> = (0..2)
        .map(|k| {
            std::thread::spawn(move || {
                let (_p, dev) = device(addr);
                let dev: Arc<dyn Device> = dev;
                for i in 0..5 {
                    let case = &CASES[(k * 7 + i) % CASES.len()];
                    let vals = data(case, (k * 100 + i) as u64);
                    assert_eq!(
                        run_remote(case, &vals, &dev),
                        run_local(case, &vals),
                        "{}",
                        case.name
                    );
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(server.stats().total_connections, 2);
    assert_eq!(server.stats().refused_messages, 0);
}

#[test]
fn disconnect_frees_every_buffer() {
    let (addr, server) = cpu_server(1, Limits::default());
    {
        let mut raw = Raw::connect(addr);
        raw.alloc(1 << 20);
        raw.alloc(4096);
        server
            .wait_for(Duration::from_secs(5), |s| s.live_buffers == 2)
            .unwrap();
        assert_eq!(server.stats().allocated_bytes, (1 << 20) + 4096);
        // dropped without FREE_BUFFER
    }
    server
        .wait_for(Duration::from_secs(5), |s| {
            s.live_buffers == 0 && s.allocated_bytes == 0 && s.active_connections == 0
        })
        .unwrap();
}

#[test]
fn hashed_upload_uses_the_server_cache() {
    let dir = std::env::temp_dir().join(format!("strata-rpc-cache-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let server = Server::bind(
        "127.0.0.1:0",
        Arc::new(CpuBackendFactory::new(1)),
        Limits::default(),
    )
    .unwrap()
    .with_cache_dir(&dir)
    .unwrap();
    let (addr, _h) = server.spawn_background().unwrap();
    let opts = ClientOptions {
        hash_threshold: 1024,
        ..ClientOptions::default()
    };
    let mut rng = Rng::new(3);
    let bytes = rng.bytes(4096 * 4);
    let hash = strata_rpc::proto::fnv1a(&bytes);
    let upload = |expect_cached: bool| {
        let (_p, dev) = device_opts(addr, opts.clone());
        let t = Tensor::new(DType::F32, &[4096]).unwrap();
        let bufs = alloc_tensors(std::slice::from_ref(&t), &dev.default_buffer_type()).unwrap();
        bufs[0].set_usage(BufferUsage::Weights);
        assert_eq!(dir.join(format!("{hash:016x}")).exists(), expect_cached);
        t.write_bytes(0, &bytes).unwrap();
        assert_eq!(t.read_bytes().unwrap(), bytes);
    };
    upload(false); // miss: SET_TENSOR_HASH answers 0, SET_TENSOR stores the file
    assert_eq!(
        std::fs::read(dir.join(format!("{hash:016x}"))).unwrap(),
        bytes
    );
    // Second client: the data comes from the cache file. Prove it by
    // changing the file: the tensor then holds the file's bytes.
    let mut changed = bytes.clone();
    changed[0] ^= 0xff;
    std::fs::write(dir.join(format!("{hash:016x}")), &changed).unwrap();
    let (_p, dev) = device_opts(addr, opts.clone());
    let t = Tensor::new(DType::F32, &[4096]).unwrap();
    let bufs = alloc_tensors(std::slice::from_ref(&t), &dev.default_buffer_type()).unwrap();
    bufs[0].set_usage(BufferUsage::Weights);
    t.write_bytes(0, &bytes).unwrap();
    assert_eq!(t.read_bytes().unwrap(), changed);
    std::fs::write(dir.join(format!("{hash:016x}")), &bytes).unwrap();
    upload(true);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn copy_memset_clear_and_alloc_size() {
    let (addr, _server) = cpu_server(1, Limits::default());
    let (_p, dev) = device(addr);
    let buft = dev.default_buffer_type();
    let a = Tensor::new(DType::F32, &[8, 2]).unwrap();
    let b = Tensor::new(DType::F32, &[8, 2]).unwrap();
    let _ba = alloc_tensors(std::slice::from_ref(&a), &buft).unwrap();
    let bb = alloc_tensors(std::slice::from_ref(&b), &buft).unwrap();
    let v: Vec<f32> = (0..16).map(|i| i as f32).collect();
    a.write_f32(&v).unwrap();
    strata::backend::tensor_copy(&a, &b).unwrap(); // COPY_TENSOR between two buffers
    assert_eq!(b.to_f32_vec().unwrap(), v);
    strata::backend::tensor_memset(&b, 4, 8, 0).unwrap();
    let mut w = v.clone();
    w[1] = 0.0;
    w[2] = 0.0;
    assert_eq!(b.to_f32_vec().unwrap(), w);
    bb[0].clear(0).unwrap();
    assert_eq!(b.to_f32_vec().unwrap(), vec![0.0; 16]);
    // remote to local and back
    let h = Tensor::new(DType::F32, &[8, 2]).unwrap();
    let _bh = cpu::alloc_graph_host(&Graph::build(std::slice::from_ref(&h))).unwrap();
    strata::backend::tensor_copy(&a, &h).unwrap();
    assert_eq!(h.to_f32_vec().unwrap(), v);
    // GET_ALLOC_SIZE (asked for matrix products and odd quantized rows)
    let q = Tensor::new(DType::Q8_0, &[64, 2]).unwrap();
    assert_eq!(buft.alloc_size(&q), q.nbytes());
    let rpc_dev = device(addr).1;
    assert_eq!(
        rpc_dev
            .rpc_backend()
            .serialize(&Graph::new())
            .unwrap()
            .nodes
            .len(),
        0
    );
}

#[test]
fn large_transfers_cross_chunk_boundaries() {
    let (addr, _server) = cpu_server(1, Limits::default());
    let (_p, dev) = device(addr);
    let n = (9 << 20) / 4 + 3; // > two 4 MiB server chunks, odd size
    let t = Tensor::new(DType::F32, &[n]).unwrap();
    let _b = alloc_tensors(std::slice::from_ref(&t), &dev.default_buffer_type()).unwrap();
    let bytes = Rng::new(11).bytes(n * 4);
    t.write_bytes(0, &bytes).unwrap();
    assert_eq!(t.read_bytes().unwrap(), bytes);
    let mut part = vec![0u8; 5 << 20];
    strata::backend::tensor_get(&t, 1234, &mut part).unwrap();
    assert_eq!(part, bytes[1234..1234 + (5 << 20)]);
    let patch = vec![7u8; (4 << 20) + 9];
    t.write_bytes(100, &patch).unwrap();
    let back = t.read_bytes().unwrap();
    assert_eq!(&back[..100], &bytes[..100]);
    assert_eq!(&back[100..100 + patch.len()], &patch[..]);
    assert_eq!(&back[100 + patch.len()..], &bytes[100 + patch.len()..]);
}
