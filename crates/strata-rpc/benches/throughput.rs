//! RPC throughput on loopback: upload (SET_TENSOR) and download
//! (GET_TENSOR) of 1 KiB … 256 MiB tensors, and graph round-trip latency
//! (GRAPH_COMPUTE and GRAPH_RECOMPUTE of a small graph, including the
//! synchronizing request). Figures go to PERFORMANCE.md ("RPC").

use std::sync::Arc;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use strata::backend::{
    alloc_graph, alloc_tensors, tensor_get, tensor_set, Backend, Buffer, Device,
};
use strata::{ops, DType, Graph, Tensor};
use strata_rpc::server::{spawn_loopback_cpu, CpuBackendFactory, Limits, Server};
use strata_rpc::ClientOptions;
use strata_rpc::RpcProvider;

const SIZES: [(usize, &str); 6] = [
    (1 << 10, "1KiB"),
    (16 << 10, "16KiB"),
    (256 << 10, "256KiB"),
    (4 << 20, "4MiB"),
    (64 << 20, "64MiB"),
    (256 << 20, "256MiB"),
];

fn setup() -> (strata_rpc::ServerHandle, Arc<dyn Device>, RpcProvider) {
    // A memory budget makes GET_DEVICE_MEMORY (the upload sync) cheap.
    let (addr, handle) = Server::bind(
        "127.0.0.1:0",
        Arc::new(CpuBackendFactory::new(2)),
        Limits::with_mem(1 << 30),
    )
    .unwrap()
    .spawn_background()
    .unwrap();
    let p = RpcProvider::new();
    let dev: Arc<dyn Device> = p.connect(&addr.to_string()).unwrap().remove(0);
    (handle, dev, p)
}

fn tensor_on(dev: &Arc<dyn Device>, bytes: usize) -> (Tensor, Vec<Arc<dyn Buffer>>) {
    let t = Tensor::new(DType::I8, &[bytes]).unwrap();
    let b = alloc_tensors(std::slice::from_ref(&t), &dev.default_buffer_type()).unwrap();
    (t, b.into())
}

fn transfers(c: &mut Criterion) {
    let (_server, dev, _p) = setup();
    let mut up = c.benchmark_group("rpc_upload");
    for (size, name) in SIZES {
        let (t, _b) = tensor_on(&dev, size);
        let data = vec![0x5au8; size];
        up.throughput(Throughput::Bytes(size as u64));
        if size >= 64 << 20 {
            up.sample_size(10).measurement_time(Duration::from_secs(4));
        }
        up.bench_with_input(BenchmarkId::from_parameter(name), &size, |bch, _| {
            // SET_TENSOR has no answer: a request with one waits for the
            // server to have taken all the bytes.
            bch.iter(|| {
                tensor_set(&t, 0, &data).unwrap();
                dev.memory().unwrap()
            })
        });
    }
    up.finish();
    let mut down = c.benchmark_group("rpc_download");
    for (size, name) in SIZES {
        let (t, _b) = tensor_on(&dev, size);
        let mut out = vec![0u8; size];
        down.throughput(Throughput::Bytes(size as u64));
        if size >= 64 << 20 {
            down.sample_size(10)
                .measurement_time(Duration::from_secs(4));
        }
        down.bench_with_input(BenchmarkId::from_parameter(name), &size, |bch, _| {
            bch.iter(|| tensor_get(&t, 0, &mut out).unwrap())
        });
    }
    down.finish();
}

fn graph_latency(c: &mut Criterion) {
    let (addr, _server) = spawn_loopback_cpu(2).unwrap();
    let mut group = c.benchmark_group("rpc_graph_roundtrip");
    for recompute in [false, true] {
        let p = RpcProvider::with_options(ClientOptions {
            recompute,
            ..ClientOptions::default()
        });
        let dev = p.connect(&addr.to_string()).unwrap().remove(0);
        let a = Tensor::new(DType::F32, &[256]).unwrap();
        let b = Tensor::new(DType::F32, &[256]).unwrap();
        let out = ops::silu(&ops::add(&a, &b).unwrap()).unwrap();
        let g = Graph::build(std::slice::from_ref(&out));
        let _bufs = alloc_graph(&g, &dev.default_buffer_type()).unwrap();
        let mut backend = dev.rpc_backend();
        let name = if recompute {
            "recompute_2_nodes"
        } else {
            "compute_2_nodes"
        };
        group.bench_function(name, |bch| bch.iter(|| backend.graph_compute(&g).unwrap()));
    }
    group.finish();
}

criterion_group!(benches, transfers, graph_latency);
criterion_main!(benches);
