//! Hostile and malformed messages: each closes only that connection, with
//! no effect outside the client's own buffers. One regression test per
//! published ggml RPC advisory class and a malformed-message test per
//! command (the fuzzers are in fuzz.rs).

mod common;

use std::io::Read;
use std::net::SocketAddr;
use std::time::Duration;

use common::*;
use strata_rpc::proto::{
    request_header, Command, GraphMsg, Request, RpcTensor, SetTensorHeader, FLAG_COMPUTE, MAX_SRC,
};
use strata_rpc::server::{Limits, ServerHandle};

const BUF: u64 = 4096;

/// A victim connection holding a buffer full of 0xAB, to prove attacks on
/// another connection neither read nor change it.
struct Victim {
    raw: Raw,
    handle: u64,
    base: u64,
}

impl Victim {
    fn new(addr: SocketAddr) -> Victim {
        let mut raw = Raw::connect(addr);
        let (handle, base) = raw.alloc(BUF);
        raw.send(&Request::BufferClear {
            remote_ptr: handle,
            value: 0xAB,
        })
        .unwrap();
        Victim { raw, handle, base }
    }
    fn intact(&mut self) {
        let t = f32_rec(1, self.handle, self.base, [1024, 1, 1, 1]);
        let r = self
            .raw
            .call(
                &Request::GetTensor {
                    tensor: t,
                    offset: 0,
                    size: BUF,
                },
                BUF as usize,
            )
            .unwrap();
        assert!(r.iter().all(|&b| b == 0xAB), "victim buffer changed");
    }
}

/// Runs `attack` on a fresh connection (with a 4 KiB buffer: handle, base)
/// and asserts the server closed it, logged a refusal, and still serves.
fn assert_refused(
    addr: SocketAddr,
    server: &ServerHandle,
    attack: impl FnOnce(&mut Raw, u64, u64),
) {
    let before = server.stats().refused_messages;
    let mut raw = Raw::connect(addr);
    let (h, base) = raw.alloc(BUF);
    attack(&mut raw, h, base);
    assert!(raw.is_closed(), "the server kept the connection open");
    server
        .wait_for(Duration::from_secs(5), |s| s.refused_messages > before)
        .expect("refusal not counted");
    // The server is alive and serves others.
    let mut other = Raw::connect(addr);
    assert_eq!(other.call(&Request::DeviceCount, 4).unwrap(), [1, 0, 0, 0]);
}

fn setup() -> (SocketAddr, ServerHandle) {
    cpu_server(1, Limits::default())
}

// ---- CVE-2024-42477: get_tensor / set_tensor out of bounds via offsets and sizes ----

#[test]
fn cve_2024_42477_set_and_get_outside_the_tensor_or_buffer() {
    let (addr, server) = setup();
    let mut victim = Victim::new(addr);
    let t = |h, base| f32_rec(1, h, base, [16, 1, 1, 1]); // 64 bytes
                                                          // write past the tensor's end (inside the buffer: ggml aborted here)
    assert_refused(addr, &server, |r, h, b| {
        r.send(&set(t(h, b), 60, &[1; 8])).unwrap()
    });
    // write with an offset that wraps around
    assert_refused(addr, &server, |r, h, b| {
        r.send(&set(t(h, b), u64::MAX - 3, &[1; 8])).unwrap()
    });
    // read past the buffer
    assert_refused(addr, &server, |r, h, b| {
        let _ = r.send(&Request::GetTensor {
            tensor: t(h, b),
            offset: 0,
            size: BUF * 2,
        });
    });
    // read with size that overflows offset + size
    assert_refused(addr, &server, |r, h, b| {
        let _ = r.send(&Request::GetTensor {
            tensor: t(h, b),
            offset: 8,
            size: u64::MAX,
        });
    });
    // memset past the end
    assert_refused(addr, &server, |r, h, b| {
        r.send(&Request::MemsetTensor {
            tensor: t(h, b),
            offset: 32,
            size: 64,
            value: 7,
        })
        .unwrap()
    });
    // tensor itself larger than its buffer
    assert_refused(addr, &server, |r, h, b| {
        r.send(&set(f32_rec(1, h, b, [2048, 1, 1, 1]), 0, &[1; 4]))
            .unwrap()
    });
    // tensor placed at the buffer's end, extending beyond
    assert_refused(addr, &server, |r, h, b| {
        r.send(&set(t(h, b + BUF - 32), 0, &[1; 4])).unwrap()
    });
    // ne * nb overflows 64 bits
    assert_refused(addr, &server, |r, h, b| {
        let mut x = t(h, b);
        x.ne = [u32::MAX, u32::MAX, u32::MAX, 2];
        x.nb = [4, u32::MAX, u32::MAX, u32::MAX];
        r.send(&set(x, 0, &[1; 4])).unwrap()
    });
    // a huge stride on a dimension of size > 1
    assert_refused(addr, &server, |r, h, b| {
        let mut x = t(h, b);
        x.ne = [4, 2, 1, 1];
        x.nb = [4, u32::MAX, 16, 16];
        r.send(&set(x, 0, &[1; 4])).unwrap()
    });
    // COPY_TENSOR into a destination that runs past its buffer
    assert_refused(addr, &server, |r, h, b| {
        let src = f32_rec(1, h, b, [1024, 1, 1, 1]);
        let dst = f32_rec(2, h, b + 16, [1024, 1, 1, 1]);
        let _ = r.send(&Request::CopyTensor { src, dst });
    });
    victim.intact();
}

// ---- CVE-2024-42478 / CVE-2024-42479: arbitrary read / write via crafted data pointers ----

#[test]
fn cve_2024_42478_42479_crafted_data_pointers() {
    let (addr, server) = setup();
    let mut victim = Victim::new(addr);
    let (vh, vb) = (victim.handle, victim.base);
    let local = &victim as *const Victim as u64; // a real address in this process
                                                 // the victim's address with our own handle
    assert_refused(addr, &server, |r, h, _| {
        r.send(&set(f32_rec(1, h, vb, [4, 1, 1, 1]), 0, &[0; 16]))
            .unwrap()
    });
    // the victim's handle (another connection's buffer)
    assert_refused(addr, &server, |r, _, _| {
        r.send(&set(f32_rec(1, vh, vb, [4, 1, 1, 1]), 0, &[0; 16]))
            .unwrap()
    });
    assert_refused(addr, &server, |r, _, _| {
        let _ = r.send(&Request::GetTensor {
            tensor: f32_rec(1, vh, vb, [4, 1, 1, 1]),
            offset: 0,
            size: 16,
        });
    });
    // a raw process address
    assert_refused(addr, &server, |r, h, _| {
        let _ = r.send(&Request::GetTensor {
            tensor: f32_rec(1, h, local, [4, 1, 1, 1]),
            offset: 0,
            size: 16,
        });
    });
    // data before the buffer's base
    assert_refused(addr, &server, |r, h, b| {
        r.send(&set(f32_rec(1, h, b - 64, [4, 1, 1, 1]), 0, &[0; 16]))
            .unwrap()
    });
    // data + nbytes wraps around 2^64
    assert_refused(addr, &server, |r, h, _| {
        r.send(&set(f32_rec(1, h, u64::MAX - 8, [4, 1, 1, 1]), 0, &[0; 16]))
            .unwrap()
    });
    // COPY_TENSOR reading the victim's buffer into ours
    assert_refused(addr, &server, |r, h, b| {
        let _ = r.send(&Request::CopyTensor {
            src: f32_rec(1, vh, vb, [4, 1, 1, 1]),
            dst: f32_rec(2, h, b, [4, 1, 1, 1]),
        });
    });
    // BUFFER_CLEAR / FREE_BUFFER / BUFFER_GET_BASE of the victim's handle
    assert_refused(addr, &server, |r, _, _| {
        r.send(&Request::BufferClear {
            remote_ptr: vh,
            value: 0,
        })
        .unwrap()
    });
    assert_refused(addr, &server, |r, _, _| {
        r.send(&Request::FreeBuffer { remote_ptr: vh }).unwrap()
    });
    assert_refused(addr, &server, |r, _, _| {
        let _ = r.send(&Request::BufferGetBase { remote_ptr: vh });
    });
    victim.intact();
}

fn graph_refused(
    addr: SocketAddr,
    server: &ServerHandle,
    edit: impl FnOnce(&mut GraphMsg, u64, u64),
) {
    assert_refused(addr, server, |r, h, b| {
        let mut g = add_graph(h, b);
        edit(&mut g, h, b);
        r.send(&Request::GraphCompute(g)).unwrap();
    });
}

#[test]
fn valid_graph_is_accepted() {
    let (addr, server) = setup();
    let mut r = Raw::connect(addr);
    let (h, b) = r.alloc(BUF);
    let one: Vec<u8> = [1.0f32; 4].iter().flat_map(|v| v.to_le_bytes()).collect();
    r.send(&set(f32_rec(1, h, b, [4, 1, 1, 1]), 0, &one))
        .unwrap();
    r.send(&set(f32_rec(1, h, b + 16, [4, 1, 1, 1]), 0, &one))
        .unwrap();
    r.send(&Request::GraphCompute(add_graph(h, b))).unwrap();
    let out = r
        .call(
            &Request::GetTensor {
                tensor: f32_rec(1, h, b + 32, [4, 1, 1, 1]),
                offset: 0,
                size: 16,
            },
            16,
        )
        .unwrap();
    let two: Vec<u8> = [2.0f32; 4].iter().flat_map(|v| v.to_le_bytes()).collect();
    assert_eq!(out, two);
    r.send(&Request::GraphRecompute { device: 0 }).unwrap();
    assert_eq!(r.call(&Request::DeviceCount, 4).unwrap(), [1, 0, 0, 0]);
    assert_eq!(server.stats().refused_messages, 0);
}

// ---- CVE-2026-34159: graph records bypassing validation ----

#[test]
fn cve_2026_34159_graph_tensor_validation_bypass() {
    let (addr, server) = setup();
    let mut victim = Victim::new(addr);
    let vb = victim.base;
    // buffer 0 with a non-zero data pointer (the advisory itself)
    graph_refused(addr, &server, |g, _, _| {
        g.tensors[0].buffer = 0;
        g.tensors[0].data = vb;
    });
    graph_refused(addr, &server, |g, _, _| {
        g.tensors[2].buffer = 0;
        g.tensors[2].data = vb;
    });
    // a node writing outside its buffer
    graph_refused(addr, &server, |g, _, b| g.tensors[2].data = b + BUF - 8);
    // a leaf whose handle is unknown
    graph_refused(addr, &server, |g, _, _| g.tensors[1].buffer = 0xdead);
    // leaf with no storage at all (ggml dereferenced null)
    graph_refused(addr, &server, |g, _, _| {
        g.tensors[1].buffer = 0;
        g.tensors[1].data = 0;
    });
    victim.intact();
}

#[test]
fn graph_structure_is_validated() {
    let (addr, server) = setup();
    // node id 0 (ggml segfaulted)
    graph_refused(addr, &server, |g, _, _| g.nodes = vec![0]);
    // dangling source
    graph_refused(addr, &server, |g, _, _| g.tensors[2].src[1] = 99);
    // dangling view_src
    graph_refused(addr, &server, |g, _, _| g.tensors[2].view_src = 98);
    // node listed twice
    graph_refused(addr, &server, |g, _, _| g.nodes = vec![30, 30]);
    // node without a record
    graph_refused(addr, &server, |g, _, _| g.nodes = vec![31]);
    // a cycle: c = a + d, d = c + b
    graph_refused(addr, &server, |g, h, b| {
        let mut d = g.tensors[2];
        d.id = 40;
        d.data = b + 48;
        d.src = [30, 20, 0, 0, 0, 0, 0, 0, 0, 0];
        g.tensors[2].src[0] = 40;
        g.tensors.push(d);
        g.nodes = vec![30, 40];
        let _ = h;
    });
    // a node that is its own source
    graph_refused(addr, &server, |g, _, _| g.tensors[2].src[0] = 30);
    // shape the op cannot produce
    graph_refused(addr, &server, |g, _, _| g.tensors[2].ne = [2, 2, 1, 1]);
    graph_refused(addr, &server, |g, _, _| g.tensors[2].nb = [4, 8, 16, 16]);
    // type mismatch: result claims f16
    graph_refused(addr, &server, |g, _, _| {
        g.tensors[2].dtype = 1;
        g.tensors[2].nb = [2, 8, 8, 8];
    });
    // sources that cannot broadcast
    graph_refused(addr, &server, |g, _, _| {
        g.tensors[1].ne = [3, 1, 1, 1];
        g.tensors[1].nb = [4, 12, 12, 12];
    });
    // unknown or removed type ids
    for ty in [4u32, 31, 43, 1000] {
        graph_refused(addr, &server, move |g, _, _| g.tensors[0].dtype = ty);
    }
    // host function pointers and unknown ops
    for op in [92u32, 93, 94, 95, 101, 150, u32::MAX] {
        graph_refused(addr, &server, move |g, _, _| g.tensors[2].op = op);
    }
    // bad op parameters: UNARY with an unknown function, PERMUTE not a permutation
    graph_refused(addr, &server, |g, _, _| {
        g.tensors[2].op = 91;
        g.tensors[2].op_params[0] = 99;
    });
    // a node with op NONE
    graph_refused(addr, &server, |g, _, _| g.tensors[2].op = 0);
    // ne[0] not a multiple of the block size (Q8_0 leaf with 7 elements)
    graph_refused(addr, &server, |g, _, _| {
        g.tensors[0].dtype = 8;
        g.tensors[0].ne = [7, 1, 1, 1];
        g.tensors[0].nb = [34, 34, 34, 34];
    });
    // a RESHAPE whose claimed shape overflows when multiplied out
    graph_refused(addr, &server, |g, _, _| {
        g.tensors[2].op = 36;
        g.tensors[2].src[1] = 0;
        g.tensors[2].ne = [u32::MAX; 4];
        g.tensors[2].nb = [4, u32::MAX, u32::MAX, u32::MAX];
    });
    // more nodes than the limit
    let (addr2, server2) = cpu_server(
        1,
        Limits {
            max_graph_nodes: 2,
            ..Limits::default()
        },
    );
    graph_refused(addr2, &server2, |g, _, _| {
        for k in 0..3 {
            let mut n = g.tensors[2];
            n.id = 100 + k;
            g.tensors.push(n);
            g.nodes.push(100 + k);
        }
    });
}

#[test]
fn views_are_checked_against_inference() {
    let (addr, server) = setup();
    // VIEW node of a (16 floats) at byte offset 8 with 4 elements
    let view = |h: u64, b: u64, offs: u64, data: u64, ne0: u32| {
        let a = f32_rec(10, h, b, [16, 1, 1, 1]);
        let mut v = f32_rec(30, h, data, [ne0, 1, 1, 1]);
        v.op = 37;
        v.op_params[0] = offs as i32;
        v.flags = FLAG_COMPUTE;
        v.src[0] = 10;
        v.view_src = 10;
        v.view_offs = offs;
        let mut s = f32_rec(40, h, b + 128, [ne0, 1, 1, 1]);
        s.op = 9; // SQR of the view
        s.flags = FLAG_COMPUTE;
        s.src[0] = 30;
        GraphMsg {
            device: 0,
            nodes: vec![30, 40],
            tensors: vec![a, v, s],
        }
    };
    // consistent: accepted
    let mut r = Raw::connect(addr);
    let (h, b) = r.alloc(BUF);
    r.send(&Request::GraphCompute(view(h, b, 8, b + 8, 4)))
        .unwrap();
    assert_eq!(r.call(&Request::DeviceCount, 4).unwrap(), [1, 0, 0, 0]);
    // view extends past its base tensor
    assert_refused(addr, &server, |r, h, b| {
        r.send(&Request::GraphCompute(view(h, b, 56, b + 56, 4)))
            .unwrap()
    });
    // data disagrees with view_src + offset
    assert_refused(addr, &server, |r, h, b| {
        r.send(&Request::GraphCompute(view(h, b, 8, b + 1024, 4)))
            .unwrap()
    });
    // view_offs disagrees with the op's offset
    assert_refused(addr, &server, |r, h, b| {
        let mut g = view(h, b, 8, b + 8, 4);
        g.tensors[1].view_offs = 0;
        r.send(&Request::GraphCompute(g)).unwrap()
    });
}

/// GET_ROWS / SET_ROWS (ggml issues 26825, 26912): mismatched shapes are
/// refused by inference; out-of-range indices must never touch memory —
/// whatever the backend does with them, the server survives.
#[test]
fn get_rows_and_set_rows_indices() {
    let (addr, server) = setup();
    let rows = |h: u64, b: u64, idx_ne: u32, dst_ne1: u32, op: u32| {
        let data = f32_rec(10, h, b, [4, 8, 1, 1]); // 8 rows of 4
        let mut idx = f32_rec(20, h, b + 256, [idx_ne, 1, 1, 1]);
        idx.dtype = 26; // I32
        let mut out = f32_rec(30, h, b + 512, [4, dst_ne1, 1, 1]);
        out.op = op;
        out.flags = FLAG_COMPUTE;
        if op == 40 {
            out.src = [10, 20, 0, 0, 0, 0, 0, 0, 0, 0];
            GraphMsg {
                device: 0,
                nodes: vec![30],
                tensors: vec![data, idx, out],
            }
        } else {
            // SET_ROWS: rows src0 (idx_ne rows), indices src1, destination src2
            let mut src = f32_rec(40, h, b + 1024, [4, idx_ne, 1, 1]);
            src.id = 40;
            out.src = [40, 20, 10, 0, 0, 0, 0, 0, 0, 0];
            out.ne = [4, 8, 1, 1];
            out.nb = [4, 16, 128, 128];
            out.data = b;
            out.view_src = 10;
            GraphMsg {
                device: 0,
                nodes: vec![30],
                tensors: vec![data, idx, src, out],
            }
        }
    };
    // shape mismatch: output rows disagree with the index count
    assert_refused(addr, &server, |r, h, b| {
        r.send(&Request::GraphCompute(rows(h, b, 2, 3, 40)))
            .unwrap()
    });
    // consistent shapes with out-of-range indices: refused (at validation
    // or compute), the server survives, memory outside the buffer untouched.
    let mut victim = Victim::new(addr);
    for op in [40u32, 42] {
        let mut r = Raw::connect(addr);
        let (h, b) = r.alloc(BUF);
        let idx: Vec<u8> = [7i32, 1_000_000]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let mut it = f32_rec(20, h, b + 256, [2, 1, 1, 1]);
        it.dtype = 26;
        r.send(&set(it, 0, &idx)).unwrap();
        r.send(&Request::GraphCompute(rows(h, b, 2, 2, op)))
            .unwrap();
        assert!(r.is_closed(), "op {op}: out-of-range index accepted");
    }
    victim.intact();
    let mut other = Raw::connect(addr);
    assert_eq!(other.call(&Request::DeviceCount, 4).unwrap(), [1, 0, 0, 0]);
}

#[test]
fn recompute_after_free_is_refused() {
    let (addr, server) = setup();
    assert_refused(addr, &server, |r, h, b| {
        r.send(&Request::GraphCompute(add_graph(h, b))).unwrap();
        r.send(&Request::FreeBuffer { remote_ptr: h }).unwrap();
        r.send(&Request::GraphRecompute { device: 0 }).unwrap();
    });
}

// ---- malformed messages, one per command ----

/// The framed bytes of `cmd` with a payload of `len` zero bytes.
fn framed(cmd: u8, len: usize) -> Vec<u8> {
    let mut v = request_header(Command::Hello, len as u64).to_vec();
    v[0] = cmd;
    v.extend(std::iter::repeat_n(0u8, len));
    v
}

#[test]
fn malformed_message_per_command() {
    let (addr, server) = setup();
    for c in Command::ALL {
        // wrong size for fixed commands; too short for variable ones
        let bad = match c.request_size() {
            Some(n) => vec![n + 1, n.saturating_sub(1)],
            None => vec![if c == Command::SetTensor { 304 } else { 7 }],
        };
        for len in bad {
            if c.request_size() == Some(0) && len == 0 {
                continue;
            }
            assert_refused(addr, &server, |r, _, _| {
                let _ = r.send_bytes(&framed(c as u8, len));
            });
        }
    }
    // semantic garbage per command, well-framed
    let bad_dev = 7u32;
    let zero = RpcTensor::default();
    let bad_type = RpcTensor {
        dtype: 1000,
        ..zero
    };
    let cases: Vec<Box<dyn Fn(u64, u64) -> Request<'static>>> = vec![
        Box::new(move |_, _| Request::AllocBuffer {
            device: bad_dev,
            size: 16,
        }),
        Box::new(move |_, _| Request::GetAlignment { device: bad_dev }),
        Box::new(move |_, _| Request::GetMaxSize { device: bad_dev }),
        Box::new(|_, _| Request::BufferGetBase { remote_ptr: 1 }),
        Box::new(|_, _| Request::FreeBuffer { remote_ptr: 0 }),
        Box::new(|_, _| Request::BufferClear {
            remote_ptr: 12345,
            value: 1,
        }),
        Box::new(move |_, _| Request::SetTensor {
            header: SetTensorHeader {
                tensor: bad_type,
                cache_flag: 0,
                offset: 0,
            },
            data: &[],
        }),
        Box::new(|h, b| Request::GetTensor {
            tensor: f32_rec(1, h, b, [0, 1, 1, 1]),
            offset: 0,
            size: 4,
        }),
        Box::new(move |h, b| Request::CopyTensor {
            src: f32_rec(1, h, b, [4, 1, 1, 1]),
            dst: zero,
        }),
        Box::new(move |_, _| {
            Request::GraphCompute(GraphMsg {
                device: bad_dev,
                nodes: vec![],
                tensors: vec![],
            })
        }),
        Box::new(move |_, _| Request::GetDeviceMemory { device: bad_dev }),
        Box::new(move |_, _| Request::InitTensor { tensor: bad_type }),
        Box::new(move |_, _| Request::GetAllocSize {
            device: 0,
            tensor: bad_type,
            srcs: Box::new([zero; MAX_SRC]),
        }),
        Box::new(|_, _| Request::Hello { caps: [0; 24] }),
        Box::new(move |_, _| Request::GraphRecompute { device: bad_dev }),
        Box::new(|_, _| Request::GraphRecompute { device: 0 }),
        Box::new(|h, b| Request::MemsetTensor {
            tensor: f32_rec(1, h, b, [4, 1, 1, 1]),
            offset: 17,
            size: 0,
            value: 0,
        }),
    ];
    for make in &cases {
        assert_refused(addr, &server, |r, h, b| {
            let _ = r.send(&make(h, b));
        });
    }
    // unknown command numbers, including NONE and COUNT
    for cmd in [18u8, 19, 200, 255] {
        assert_refused(addr, &server, |r, _, _| {
            let _ = r.send_bytes(&framed(cmd, 0));
        });
    }
    // a variable-size message claiming 2^63 bytes: closed without allocating
    assert_refused(addr, &server, |r, _, _| {
        let mut v = request_header(Command::SetTensor, 1 << 63).to_vec();
        v.extend([0u8; 16]);
        let _ = r.send_bytes(&v);
    });
    // a graph message larger than the graph limits allow: refused unread
    assert_refused(addr, &server, |r, _, _| {
        let mut v = request_header(Command::GraphCompute, 4 << 30).to_vec();
        v.extend([0u8; 16]);
        let _ = r.send_bytes(&v);
    });
    // anything before HELLO
    let mut raw = Raw::connect_no_hello(addr);
    raw.send(&Request::DeviceCount).unwrap();
    let mut b = [0u8; 1];
    assert!(matches!(raw.s.read(&mut b), Ok(0) | Err(_)));
    // an old client's empty HELLO
    let mut raw = Raw::connect_no_hello(addr);
    raw.send_bytes(&framed(Command::Hello as u8, 0)).unwrap();
    assert!(matches!(raw.s.read(&mut b), Ok(0) | Err(_)));
}
