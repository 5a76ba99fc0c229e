//! The server's lazy repacking of MUL_MAT weights and its `--preload`
//! files: repacked weights read back bit-exact through every command
//! (GET_TENSOR, partial SET_TENSOR, COPY_TENSOR, SET_TENSOR_HASH, MEMSET,
//! BUFFER_CLEAR), results equal the server that keeps ggml's layout, other
//! uses of packed bytes unpack them; preloaded files answer SET_TENSOR_HASH
//! from strata's client and from hand-made messages, and bad files give
//! typed errors.

mod common;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use common::*;
use strata::backend::{alloc_tensors, BufferUsage, Device};
use strata::gguf::GgufWriter;
use strata::quant::packed;
use strata::{DType, Tensor};
use strata_rpc::proto::{fnv1a, GraphMsg, Request, RpcTensor, FLAG_COMPUTE};
use strata_rpc::server::{CpuBackendFactory, Limits, Preload, Server, ServerHandle};
use strata_rpc::ClientOptions;

/// Weight rows, columns (k) and activation columns of the test matmul.
const ROWS: u32 = 32;
const K: u32 = 64;
const N: u32 = 4;

fn server(repack: bool) -> (SocketAddr, ServerHandle) {
    server_with(
        Arc::new(CpuBackendFactory::new(2).with_repack(repack)),
        Limits::default(),
    )
}

/// Valid Q8_0 bytes of a `K` x `ROWS` weight (quantized from random values).
fn q8_bytes(seed: u64) -> Vec<u8> {
    let t = Tensor::new(DType::Q8_0, &[K as usize, ROWS as usize]).unwrap();
    let _b = alloc_tensors(std::slice::from_ref(&t), &strata::cpu::cpu_buffer_type()).unwrap();
    t.write_f32(&Rng::new(seed).vec((K * ROWS) as usize, -2.0, 2.0))
        .unwrap();
    t.read_bytes().unwrap()
}

fn q8_rec(id: u64, h: u64, data: u64, rows: u32) -> RpcTensor {
    let row = K / 32 * 34;
    RpcTensor {
        id,
        dtype: DType::Q8_0.ggml_id(),
        buffer: h,
        ne: [K, rows, 1, 1],
        nb: [34, row, row * rows, row * rows],
        data,
        ..RpcTensor::default()
    }
}

/// Layout of the test buffer: weight, its copy, activations, result.
struct Buf {
    h: u64,
    base: u64,
}
const WSIZE: u64 = (K / 32 * 34 * ROWS) as u64;
impl Buf {
    fn w(&self) -> RpcTensor {
        q8_rec(1, self.h, self.base, ROWS)
    }
    fn w_copy(&self) -> RpcTensor {
        q8_rec(5, self.h, self.base + 4096, ROWS)
    }
    fn x(&self) -> RpcTensor {
        f32_rec(2, self.h, self.base + 8192, [K, N, 1, 1])
    }
    fn out(&self) -> RpcTensor {
        f32_rec(3, self.h, self.base + 12288, [ROWS, N, 1, 1])
    }
    /// out = W x, with W's first `rows` rows (a second record over the
    /// same bytes when `rows` < ROWS).
    fn matmul(&self, rows: u32) -> GraphMsg {
        let w = q8_rec(if rows == ROWS { 1 } else { 9 }, self.h, self.base, rows);
        let mut out = f32_rec(3, self.h, self.base + 12288, [rows, N, 1, 1]);
        out.op = strata::ops::Op::MulMat.ggml_id();
        out.flags = FLAG_COMPUTE;
        out.src[0] = w.id;
        out.src[1] = 2;
        GraphMsg {
            device: 0,
            nodes: vec![3],
            tensors: vec![w, self.x(), out],
        }
    }
}

/// A raw client with the test buffer allocated and W, x written.
fn setup(addr: SocketAddr, w: &[u8]) -> (Raw, Buf) {
    let mut r = Raw::connect(addr);
    let (h, base) = r.alloc(16384);
    let b = Buf { h, base };
    r.send(&set(b.w(), 0, w)).unwrap();
    r.send(&set(b.x(), 0, &x_bytes())).unwrap();
    (r, b)
}

fn get(r: &mut Raw, t: RpcTensor, offset: u64, size: u64) -> Vec<u8> {
    r.call(
        &Request::GetTensor {
            tensor: t,
            offset,
            size,
        },
        size as usize,
    )
    .unwrap()
}

fn compute(r: &mut Raw, g: &GraphMsg, b: &Buf, rows: u32) -> Vec<u8> {
    r.send(&Request::GraphCompute(g.clone())).unwrap();
    let mut out = b.out();
    out.ne[0] = rows;
    get(r, out, 0, (rows * N * 4) as u64)
}

fn packs_q8() -> bool {
    packed::has_kernels(strata::isa::active(), DType::Q8_0)
}

fn x_bytes() -> Vec<u8> {
    Rng::new(9)
        .vec((K * N) as usize, -1.0, 1.0)
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect()
}

/// W's first `rows` rows times x on the local CPU, with W in `CPU_PACKED`
/// when the server packs (the same kernels), in ggml's layout otherwise.
fn local(w: &[u8], rows: u32) -> Vec<u8> {
    use strata::backend::Backend;
    let wt = Tensor::new(DType::Q8_0, &[K as usize, rows as usize]).unwrap();
    let buft = if packs_q8() {
        strata::cpu::packed_buffer_type()
    } else {
        strata::cpu::cpu_buffer_type()
    };
    let _bw = alloc_tensors(std::slice::from_ref(&wt), &buft).unwrap();
    wt.write_bytes(0, &w[..wt.nbytes()]).unwrap();
    let x = Tensor::new(DType::F32, &[K as usize, N as usize]).unwrap();
    let y = strata::ops::mul_mat(&wt, &x).unwrap();
    let _b = alloc_tensors(&[x.clone(), y.clone()], &strata::cpu::cpu_buffer_type()).unwrap();
    x.write_bytes(0, &x_bytes()).unwrap();
    let mut g = strata::Graph::new();
    g.expand(&y);
    strata::cpu::CpuBackend::new(2).graph_compute(&g).unwrap();
    y.read_bytes().unwrap()
}

/// Equal within the rounding of a different summation order.
fn close(a: &[u8], b: &[u8]) {
    let f = |v: &[u8]| -> Vec<f32> {
        v.chunks(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect()
    };
    let (a, b) = (f(a), f(b));
    let scale = b.iter().fold(1f32, |m, v| m.max(v.abs()));
    for (i, (x, y)) in a.iter().zip(&b).enumerate() {
        assert!((x - y).abs() <= 1e-5 * scale, "{i}: {x} vs {y}");
    }
}

/// A repacking server and one keeping ggml's layout, each with a client
/// holding W (`w`) and x.
fn pair(w: &[u8]) -> (ServerHandle, ServerHandle, (Raw, Buf), (Raw, Buf)) {
    let (a_addr, a_srv) = server(true);
    let (p_addr, p_srv) = server(false);
    (a_srv, p_srv, setup(a_addr, w), setup(p_addr, w))
}

#[test]
fn repacked_weights_read_back_exactly_and_compute_as_unpacked() {
    let w = q8_bytes(1);
    let (a_srv, _p_srv, (mut a, ab), (mut p, pb)) = pair(&w);
    let y = compute(&mut p, &pb.matmul(ROWS), &pb, ROWS);
    let ya = compute(&mut a, &ab.matmul(ROWS), &ab, ROWS);
    assert_eq!(
        ya,
        local(&w, ROWS),
        "the local CPU's result for these weights"
    );
    close(&ya, &y);
    let packed_now = a_srv.stats().repacked_tensors;
    assert_eq!(packed_now, usize::from(packs_q8()), "W packed on first use");
    // Whole and partial reads: ggml's bytes.
    assert_eq!(get(&mut a, ab.w(), 0, WSIZE), w);
    assert_eq!(get(&mut a, ab.w(), 37, 301), w[37..338].to_vec());
    // A partial write inside a packed group, then read and compute.
    let patch: Vec<u8> = q8_bytes(2)[100..140].to_vec();
    for (r, b) in [(&mut a, &ab), (&mut p, &pb)] {
        r.send(&set(b.w(), 100, &patch)).unwrap();
    }
    let mut w2 = w.clone();
    w2[100..140].copy_from_slice(&patch);
    assert_eq!(get(&mut a, ab.w(), 0, WSIZE), w2);
    let y2 = compute(&mut p, &pb.matmul(ROWS), &pb, ROWS);
    assert_ne!(y2, y);
    let y2a = compute(&mut a, &ab.matmul(ROWS), &ab, ROWS);
    assert_eq!(y2a, local(&w2, ROWS));
    close(&y2a, &y2);
    // COPY_TENSOR out of the packed weight gives ggml's bytes.
    let ok = a
        .call(
            &Request::CopyTensor {
                src: ab.w(),
                dst: ab.w_copy(),
            },
            1,
        )
        .unwrap();
    assert_eq!(ok, vec![1]);
    assert_eq!(get(&mut a, ab.w_copy(), 0, WSIZE), w2);
    // MEMSET over part of it.
    a.send(&Request::MemsetTensor {
        tensor: ab.w(),
        offset: 500,
        size: 70,
        value: 0,
    })
    .unwrap();
    w2[500..570].fill(0);
    assert_eq!(get(&mut a, ab.w(), 0, WSIZE), w2);
    // Restore W from its copy (COPY_TENSOR into the packed weight).
    a.call(
        &Request::CopyTensor {
            src: ab.w_copy(),
            dst: ab.w(),
        },
        1,
    )
    .unwrap();
    w2[500..570].copy_from_slice(
        &{
            let mut v = w.clone();
            v[100..140].copy_from_slice(&patch);
            v
        }[500..570],
    );
    assert_eq!(get(&mut a, ab.w(), 0, WSIZE), w2);
    assert_eq!(compute(&mut a, &ab.matmul(ROWS), &ab, ROWS), y2a);
    // BUFFER_CLEAR: everything reads as the value, packed bytes included.
    a.send(&Request::BufferClear {
        remote_ptr: ab.h,
        value: 7,
    })
    .unwrap();
    assert_eq!(get(&mut a, ab.w(), 0, WSIZE), vec![7u8; WSIZE as usize]);
}

#[test]
fn other_uses_unpack_and_recompute_follows_layout_changes() {
    let w = q8_bytes(3);
    let (a_srv, _p_srv, (mut a, ab), (mut p, pb)) = pair(&w);
    let full = local(&w, ROWS);
    let half = local(&w, 16);
    close(&full, &compute(&mut p, &pb.matmul(ROWS), &pb, ROWS));
    close(&half, &compute(&mut p, &pb.matmul(16), &pb, 16));
    assert_eq!(compute(&mut a, &ab.matmul(ROWS), &ab, ROWS), full);
    // A record over part of the packed weight: unpacked, then it is packed
    // on its own, and the whole weight again after it.
    assert_eq!(compute(&mut a, &ab.matmul(16), &ab, 16), half);
    assert_eq!(compute(&mut a, &ab.matmul(ROWS), &ab, ROWS), full);
    if packs_q8() {
        assert_eq!(a_srv.stats().repacked_tensors, 3);
    }
    // INIT_TENSOR over the packed weight unpacks it; GRAPH_RECOMPUTE of the
    // kept graph then repacks it and must not reuse a plan made for the
    // packed bytes of before.
    a.send(&Request::InitTensor { tensor: ab.w() }).unwrap();
    assert_eq!(get(&mut a, ab.w(), 0, WSIZE), w);
    a.send(&Request::GraphRecompute { device: 0 }).unwrap();
    assert_eq!(get(&mut a, ab.out(), 0, (ROWS * N * 4) as u64), full);
    // A graph that writes into the weight's bytes (a GET_ROWS of W into
    // a tensor over W itself would be refused by ggml too; use SET through
    // an F32 view: an ADD whose result lands on W's first 64 bytes).
    let mut g = add_graph(ab.h, ab.base + 14336);
    g.tensors[2].data = ab.base; // c = a + b written over W's first bytes
    a.send(&Request::GraphCompute(g.clone())).unwrap();
    let mut pg = add_graph(pb.h, pb.base + 14336);
    pg.tensors[2].data = pb.base;
    p.send(&Request::GraphCompute(pg)).unwrap();
    assert_eq!(get(&mut a, ab.w(), 0, WSIZE), get(&mut p, pb.w(), 0, WSIZE));
}

/// A GGUF file in the temp directory holding one F32 tensor of `bytes`.
fn gguf_with(name: &str, bytes: &[u8]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("strata-preload-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    let mut g = GgufWriter::new();
    g.add_tensor("w", DType::F32, &[bytes.len() / 4], bytes.to_vec())
        .unwrap();
    g.write_to_path(&path).unwrap();
    path
}

#[test]
fn preloaded_tensors_answer_set_tensor_hash() {
    let bytes = Rng::new(5).bytes(4096 * 4);
    let path = gguf_with("one.gguf", &bytes);
    let preload = Preload::open(std::slice::from_ref(&path), 1024).unwrap();
    assert_eq!((preload.len(), preload.bytes()), (1, bytes.len() as u64));
    assert_eq!(preload.get(fnv1a(&bytes)), Some(&bytes[..]));
    // Below the threshold nothing is indexed.
    assert!(Preload::open(std::slice::from_ref(&path), 1 << 20)
        .unwrap()
        .is_empty());
    let (addr, h) = Server::bind(
        "127.0.0.1:0",
        Arc::new(CpuBackendFactory::new(1)),
        Limits::default(),
    )
    .unwrap()
    .with_preload(preload)
    .spawn_background()
    .unwrap();
    // strata's client: the weight upload is one SET_TENSOR_HASH that hits.
    let opts = ClientOptions {
        hash_threshold: 1024,
        ..ClientOptions::default()
    };
    let (_p, dev) = device_opts(addr, opts);
    let t = Tensor::new(DType::F32, &[4096]).unwrap();
    let bufs = alloc_tensors(std::slice::from_ref(&t), &dev.default_buffer_type()).unwrap();
    bufs[0].set_usage(BufferUsage::Weights);
    t.write_bytes(0, &bytes).unwrap();
    assert_eq!(h.stats().preload_hits, 1);
    assert_eq!(t.read_bytes().unwrap(), bytes);
    // A hand-made SET_TENSOR_HASH: hit (1) writes the file's bytes, an
    // unknown hash answers 0 and leaves the tensor alone.
    let mut r = Raw::connect(addr);
    let (bh, base) = r.alloc(4096 * 4 + 64);
    let rec = f32_rec(1, bh, base, [4096, 1, 1, 1]);
    let hash = |hash| Request::SetTensorHash {
        tensor: rec,
        offset: 0,
        hash,
    };
    assert_eq!(r.call(&hash(fnv1a(&bytes) ^ 1), 1).unwrap(), vec![0]);
    assert_eq!(get(&mut r, rec, 0, 16), vec![0u8; 16]);
    assert_eq!(r.call(&hash(fnv1a(&bytes)), 1).unwrap(), vec![1]);
    assert_eq!(get(&mut r, rec, 0, bytes.len() as u64), bytes);
    assert_eq!(h.stats().preload_hits, 2);
    // A hit that does not fit the tensor is refused (connection closed).
    let small = f32_rec(2, bh, base, [16, 1, 1, 1]);
    r.send(&Request::SetTensorHash {
        tensor: small,
        offset: 0,
        hash: fnv1a(&bytes),
    })
    .unwrap();
    assert!(r.closed_within(std::time::Duration::from_secs(5)));
    // A directory preloads its .gguf files.
    let dir = path.parent().unwrap().to_path_buf();
    let more = Rng::new(6).bytes(2048 * 4);
    gguf_with("two.gguf", &more);
    let p = Preload::open(std::slice::from_ref(&dir), 1024).unwrap();
    assert_eq!((p.files(), p.len()), (2, 2));
    assert_eq!(p.get(fnv1a(&more)), Some(&more[..]));
}

#[test]
fn bad_preload_paths_give_typed_errors() {
    let dir = std::env::temp_dir().join(format!("strata-preload-bad-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let open = |p: &PathBuf| Preload::open(std::slice::from_ref(p), 0).unwrap_err();
    let missing = dir.join("missing.gguf");
    assert!(
        matches!(open(&missing).root(), strata::Error::Io { .. }),
        "{}",
        open(&missing)
    );
    // A directory without .gguf files.
    let e = open(&dir);
    assert!(matches!(e, strata::Error::BadValue { .. }), "{e}");
    // Empty, garbage, truncated files: errors naming the file, no panic.
    let good = {
        let mut g = GgufWriter::new();
        g.add_tensor("w", DType::F32, &[256], vec![1u8; 1024])
            .unwrap();
        g.to_bytes().unwrap()
    };
    let mut rng = Rng::new(11);
    let mut cases: Vec<Vec<u8>> =
        vec![Vec::new(), rng.bytes(300), good[..good.len() - 10].to_vec()];
    for _ in 0..200 {
        let mut v = good.clone();
        let at = rng.below(v.len());
        v[at] = rng.next_u64() as u8;
        v.truncate(rng.below(good.len() + 1).max(at + 1));
        cases.push(v);
    }
    for (i, bytes) in cases.iter().enumerate() {
        let p = dir.join(format!("c{i}.gguf"));
        std::fs::write(&p, bytes).unwrap();
        if let Err(e) = Preload::open(std::slice::from_ref(&p), 0) {
            assert!(e.to_string().contains(&format!("c{i}.gguf")), "{e}");
        }
        std::fs::remove_file(&p).unwrap();
    }
    let _ = std::fs::remove_dir_all(&dir);
}
