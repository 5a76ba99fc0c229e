//! Bounded fuzzing that runs with the tests: random bytes through the
//! decoder, and mutated sessions through the server's command loop held in
//! memory. Failing inputs are kept in tests/corpus/; the cargo-fuzz target
//! (fuzz/) starts from fuzz/corpus/rpc_server, checked here to match the
//! seed script.

mod common;

use std::io::{Cursor, Read, Write};
use std::sync::Arc;

use common::*;
use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;
use strata_rpc::proto::{decode_request, GraphMsg, Request, RpcTensor, MAX_SRC};
use strata_rpc::server::{CpuBackendFactory, Limits, Session, SessionEnd};

struct Duplex {
    input: Cursor<Vec<u8>>,
    output: Vec<u8>,
}

impl Read for Duplex {
    fn read(&mut self, b: &mut [u8]) -> std::io::Result<usize> {
        self.input.read(b)
    }
}

impl Write for Duplex {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.output.extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The first buffer of a fresh standalone session gets this handle and base.
const H: u64 = 0x5000_0001;
const BASE: u64 = 0x1000_0000_0000;

/// A valid session script touching every command.
fn seed_script() -> Vec<Vec<u8>> {
    let t = f32_rec(1, H, BASE, [4, 1, 1, 1]);
    let data = [0u8; 16];
    let g = add_graph(H, BASE);
    vec![
        Request::Hello { caps: [0; 24] }.encode(),
        Request::AllocBuffer {
            device: 0,
            size: 4096,
        }
        .encode(),
        Request::BufferGetBase { remote_ptr: H }.encode(),
        Request::GetAlignment { device: 0 }.encode(),
        Request::GetMaxSize { device: 0 }.encode(),
        Request::DeviceCount.encode(),
        Request::GetDeviceMemory { device: 0 }.encode(),
        set(t, 0, &data).encode(),
        Request::SetTensorHash {
            tensor: t,
            offset: 0,
            hash: 1,
        }
        .encode(),
        Request::GetTensor {
            tensor: t,
            offset: 0,
            size: 16,
        }
        .encode(),
        Request::MemsetTensor {
            tensor: t,
            offset: 0,
            size: 16,
            value: 3,
        }
        .encode(),
        Request::CopyTensor {
            src: t,
            dst: f32_rec(2, H, BASE + 16, [4, 1, 1, 1]),
        }
        .encode(),
        Request::InitTensor { tensor: t }.encode(),
        Request::GetAllocSize {
            device: 0,
            tensor: t,
            srcs: Box::new([RpcTensor::default(); MAX_SRC]),
        }
        .encode(),
        Request::GraphCompute(g).encode(),
        Request::GraphRecompute { device: 0 }.encode(),
        Request::BufferClear {
            remote_ptr: H,
            value: 0,
        }
        .encode(),
        Request::FreeBuffer { remote_ptr: H }.encode(),
    ]
}

/// A standalone session on one CPU thread (1 MiB of memory, messages up to
/// 1 MiB), and a duplex whose input is `bytes`.
fn session(bytes: Vec<u8>) -> (Session, Duplex) {
    let limits = Limits {
        max_message: 1 << 20,
        ..Limits::with_mem(1 << 20)
    };
    let s = Session::standalone(Arc::new(CpuBackendFactory::new(1)), limits);
    let io = Duplex {
        input: Cursor::new(bytes),
        output: Vec::new(),
    };
    (s, io)
}

fn run_session(bytes: Vec<u8>) -> (SessionEnd, usize) {
    let (mut s, mut io) = session(bytes);
    let end = s.serve(&mut io);
    let stats = s.stats_handle();
    drop(s);
    let after = stats.get();
    assert_eq!(after.active_connections, 0);
    assert_eq!(after.allocated_bytes, 0);
    (end, after.live_buffers)
}

#[test]
fn seed_script_runs_cleanly_in_memory() {
    let (end, live) = run_session(seed_script().concat());
    assert_eq!(end, SessionEnd::Closed);
    assert_eq!(live, 0);
    // and the corpus for cargo-fuzz stays in sync with it
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/rpc_server");
    if std::env::var_os("STRATA_WRITE_CORPUS").is_some() {
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("seed_all_commands"), seed_script().concat()).unwrap();
    }
    let seed = std::fs::read(dir.join("seed_all_commands")).expect("corpus seed present");
    assert_eq!(
        seed,
        seed_script().concat(),
        "regenerate fuzz/corpus/rpc_server/seed_all_commands"
    );
}

/// Every input cargo-fuzz kept replays through the command loop cleanly.
#[test]
fn cargo_fuzz_corpus_replays_cleanly() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/rpc_server");
    let mut n = 0;
    for e in std::fs::read_dir(dir).unwrap() {
        let bytes = std::fs::read(e.unwrap().path()).unwrap();
        let (_end, live) = run_session(bytes);
        assert_eq!(live, 0);
        n += 1;
    }
    assert!(n >= 1);
}

/// The input cargo-fuzz stopped on under AddressSanitizer
/// (`memcpy-param-overlap`, issue 16 item 5), reduced: a COPY_TENSOR whose
/// source and destination overlap inside one buffer, then a read of the buffer.
fn overlap_script() -> Vec<u8> {
    let whole = f32_rec(1, H, BASE, [64, 1, 1, 1]);
    let data: Vec<u8> = (0..64u32).flat_map(|i| (i as f32).to_le_bytes()).collect();
    [
        Request::Hello { caps: [0; 24] }.encode(),
        Request::AllocBuffer {
            device: 0,
            size: 4096,
        }
        .encode(),
        set(whole, 0, &data).encode(),
        Request::CopyTensor {
            src: f32_rec(2, H, BASE, [40, 1, 1, 1]),
            dst: f32_rec(3, H, BASE + 20, [40, 1, 1, 1]),
        }
        .encode(),
        Request::GetTensor {
            tensor: whole,
            offset: 0,
            size: 256,
        }
        .encode(),
    ]
    .concat()
}

/// Replays the crash input kept in tests/corpus: the copy is a memmove
/// (the destination holds the source as it was) and the session ends cleanly.
#[test]
fn overlapping_copy_tensor_crash_input_is_a_memmove() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/corpus/crash-copy-tensor-overlap");
    if std::env::var_os("STRATA_WRITE_CORPUS").is_some() {
        std::fs::write(&path, overlap_script()).unwrap();
    }
    let bytes = std::fs::read(&path).expect("crash input present");
    assert_eq!(bytes, overlap_script(), "regenerate {}", path.display());
    let (mut s, mut io) = session(bytes);
    assert_eq!(s.serve(&mut io), SessionEnd::Closed);
    // HELLO (8 + 28), ALLOC_BUFFER (8 + 16), COPY_TENSOR (8 + 1), GET_TENSOR (8 + 256)
    let out = io.output;
    assert_eq!(out.len(), 36 + 24 + 9 + 264);
    assert_eq!(out[36 + 24 + 8], 1, "COPY_TENSOR answered 'copied'");
    let got: Vec<f32> = out[out.len() - 256..]
        .chunks(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    let mut want: Vec<f32> = (0..64).map(|i| i as f32).collect();
    want.copy_within(0..40, 5);
    assert_eq!(got, want);
    // and, like every kept input, through the bounded replay
    let (_end, live) = run_session(overlap_script());
    assert_eq!(live, 0);
}

/// Every input kept in tests/corpus (`crash-*`, `oom-*`: where cargo-fuzz
/// stopped) replays through the command loop cleanly.
#[test]
fn kept_fuzz_findings_replay_cleanly() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus");
    let mut n = 0;
    for e in std::fs::read_dir(dir).unwrap() {
        let path = e.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if name.starts_with("crash-") || name.starts_with("oom-") {
            let (_end, live) = run_session(std::fs::read(&path).unwrap());
            assert_eq!(live, 0, "{name}");
            n += 1;
        }
    }
    assert!(n >= 2);
}

/// The input on which cargo-fuzz stopped with out-of-memory (a 13.6 GB
/// work buffer): a MUL_MAT whose operand has stride-0 dimensions spans a
/// few bytes of its buffer but many rows, and the CPU backend sized its
/// scratch by the rows. The server bounds backend scratch and refuses it.
#[test]
fn oversized_work_memory_is_refused() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/corpus/oom-stride0-matmul-work");
    let (end, live) = run_session(std::fs::read(path).unwrap());
    assert!(
        matches!(&end, SessionEnd::Refused(r) if r.contains("work memory")),
        "{end:?}"
    );
    assert_eq!(live, 0);
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 256,
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(
            "tests/corpus/hardening.proptest-regressions",
        ))),
        ..ProptestConfig::default()
    })]

    /// Random bytes through the decoder of every command: never a panic.
    #[test]
    fn decoder_never_panics(cmd in 0u8..=255, payload in proptest::collection::vec(any::<u8>(), 0..1400)) {
        let _ = decode_request(cmd, &payload);
        let _ = GraphMsg::decode(&payload);
        let _ = RpcTensor::decode(&payload);
    }

    /// Valid sessions with random byte mutations: the command loop ends
    /// (closed or refused), never panics, and frees everything.
    #[test]
    fn mutated_sessions_never_panic(
        keep in proptest::collection::vec(any::<bool>(), 18),
        muts in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..24),
        tail in proptest::collection::vec(any::<u8>(), 0..64),
    ) {
        let script = seed_script();
        let mut bytes: Vec<u8> = script[0].clone();
        for (m, k) in script[1..].iter().zip(&keep) {
            if *k { bytes.extend_from_slice(m); }
        }
        let n = bytes.len();
        for (pos, val) in muts {
            let p = 9 + 24 + pos % (n - 33).max(1); // keep HELLO intact
            if p < n { bytes[p] = val; }
        }
        bytes.extend(tail);
        let (_end, live) = run_session(bytes);
        prop_assert_eq!(live, 0);
    }

    /// Graph records with several random field values at once (an op
    /// together with shapes, strides or parameters): refused or computed,
    /// never a panic.
    #[test]
    fn random_graph_fields_never_panic(
        muts in proptest::collection::vec((0usize..12, any::<u64>(), 0usize..3), 1..5),
        op in 0u32..110,
    ) {
        let mut g = add_graph(H, BASE);
        g.tensors[2].op = op;
        for (field, value, which) in muts {
            let t = &mut g.tensors[which];
            match field {
                0 => t.id = value,
                1 => t.dtype = value as u32 % 50,
                2 => t.buffer = value,
                3 => t.ne[(value % 4) as usize] = (value >> 8) as u32 >> (value % 32),
                4 => t.nb[(value % 4) as usize] = (value >> 8) as u32 >> (value % 32),
                5 => t.op = (value % 110) as u32,
                6 => t.op_params[(value % 16) as usize] = (value >> 8) as i32 >> (value % 32),
                7 => t.src[(value % 10) as usize] = value >> 60,
                8 => t.view_src = value % 40,
                9 => t.view_offs = value >> (value % 64),
                10 => t.data = BASE.wrapping_add(value % 8192).wrapping_sub(4096),
                _ => t.flags = value as i32,
            }
        }
        let bytes = [
            Request::Hello { caps: [0; 24] }.encode(),
            Request::AllocBuffer { device: 0, size: 4096 }.encode(),
            Request::GraphCompute(g).encode(),
            Request::GetTensor { tensor: f32_rec(1, H, BASE, [4, 1, 1, 1]), offset: 0, size: 16 }.encode(),
        ].concat();
        let (_end, live) = run_session(bytes);
        prop_assert_eq!(live, 0);
    }
}
