//! Unit tests: round trips through the writer and one test per rejection.

use super::*;

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Metadata with every value type, including nested and empty arrays.
fn all_values() -> Vec<(&'static str, Value)> {
    vec![
        ("general.architecture", Value::from("llama")),
        ("t.u8", Value::U8(200)),
        ("t.i8", Value::I8(-100)),
        ("t.u16", Value::U16(60000)),
        ("t.i16", Value::I16(-30000)),
        ("t.u32", Value::U32(4_000_000_000)),
        ("t.i32", Value::I32(-2_000_000_000)),
        ("t.f32", Value::F32(1.5e-5)),
        ("t.bool", Value::Bool(true)),
        ("t.string", Value::from("héllo ✓")),
        ("t.u64", Value::U64(u64::MAX)),
        ("t.i64", Value::I64(i64::MIN)),
        ("t.f64", Value::F64(-2.25)),
        ("t.arr.u8", Value::from(vec![1u8, 2, 3])),
        ("t.arr.i8", Value::from(vec![-1i8, 2])),
        ("t.arr.u16", Value::from(vec![1u16, 65535])),
        ("t.arr.i16", Value::from(vec![-1i16])),
        ("t.arr.u32", Value::from(vec![7u32, 8])),
        ("t.arr.i32", Value::from(vec![1i32, -1, 3])),
        ("t.arr.f32", Value::from(vec![0.5f32, -0.25])),
        ("t.arr.bool", Value::from(vec![true, false, true])),
        ("t.arr.string", Value::from(vec!["a", "", "ü"])),
        ("t.arr.u64", Value::from(vec![u64::MAX])),
        ("t.arr.i64", Value::from(vec![i64::MIN, 0])),
        ("t.arr.f64", Value::from(vec![1.0f64])),
        ("t.arr.empty", Value::from(Vec::<u32>::new())),
        (
            "t.arr.nested",
            Value::from(vec![
                Array::from(vec![1u32, 2]),
                Array::from(vec!["x"]),
                Array::from(vec![Array::from(vec![true])]),
                Array::from(Vec::<f64>::new()),
            ]),
        ),
    ]
}

/// A writer-made file with every value type and three tensor types.
pub(crate) fn sample(alignment: Option<usize>) -> Vec<u8> {
    let mut w = GgufWriter::new();
    if let Some(a) = alignment {
        w.set_alignment(a).unwrap();
    }
    for (k, v) in all_values() {
        w.add_metadata(k, v).unwrap();
    }
    let norm = f32_bytes(&[1.0, 2.0, 3.0]);
    let q41: Vec<u8> = (0..2 * 20 * 3).map(|i| i as u8).collect();
    let q80: Vec<u8> = (0..34 * 2).map(|i| (i * 7) as u8).collect();
    w.add_tensor("output_norm.weight", DType::F32, &[3], norm)
        .unwrap();
    w.add_tensor("blk.0.attn_q.weight", DType::Q4_1, &[64, 3], q41)
        .unwrap();
    w.add_tensor("token_embd.weight", DType::Q8_0, &[32, 1, 2, 1], q80)
        .unwrap();
    w.to_bytes().unwrap()
}

fn field_of(e: Error) -> (String, String) {
    match e {
        Error::Format { field, msg, .. } => (field, msg),
        e => panic!("expected a format error, got {e:?}"),
    }
}

fn parse_err(bytes: Vec<u8>) -> (String, String) {
    field_of(GgufFile::from_bytes(bytes).expect_err("file should be rejected"))
}

/// Asserts that parsing `bytes` fails at `field` with a message that
/// contains `part`.
#[track_caller]
fn assert_parse_err(bytes: Vec<u8>, field: &str, part: &str) {
    let (got, msg) = parse_err(bytes);
    assert_eq!(got, field, "{msg}");
    assert!(msg.contains(part), "{got}: {msg} (wanted {part})");
}

#[test]
fn gguf_round_trip_all_value_types_and_tensors() {
    for alignment in [None, Some(1), Some(8), Some(64)] {
        let bytes = sample(alignment);
        let f = GgufFile::from_bytes(bytes.clone()).unwrap();
        assert_eq!(f.version(), 3);
        assert_eq!(f.alignment(), alignment.unwrap_or(32));
        assert_eq!(f.data_offset() % f.alignment(), 0);
        let mut expect: Vec<(&str, Value)> = all_values();
        if let Some(a) = alignment {
            expect.insert(0, ("general.alignment", Value::U32(a as u32)));
        }
        let got: Vec<(&str, Value)> = f.metadata().iter().map(|(k, v)| (k, v.clone())).collect();
        assert_eq!(got, expect);

        let names: Vec<&str> = f.tensors().iter().map(|t| t.name()).collect();
        assert_eq!(
            names,
            [
                "output_norm.weight",
                "blk.0.attn_q.weight",
                "token_embd.weight"
            ]
        );
        let q = f.tensor("blk.0.attn_q.weight").unwrap();
        assert_eq!(
            (q.dtype(), q.n_dims(), q.shape(), q.size()),
            (DType::Q4_1, 2, [64, 3, 1, 1], 120)
        );
        assert_eq!(q.dims(), [64, 3]);
        assert_eq!(
            f.tensor_data(q),
            (0..120).map(|i| i as u8).collect::<Vec<_>>()
        );
        let e = f.tensor("token_embd.weight").unwrap();
        assert_eq!(
            (e.n_dims(), e.shape(), e.n_elements()),
            (4, [32, 1, 2, 1], 64)
        );
        assert_eq!(
            f.tensor_data(e),
            (0..68).map(|i| (i * 7) as u8).collect::<Vec<_>>()
        );
        let n = &f.tensors()[0];
        assert_eq!(f.tensor_data(n), f32_bytes(&[1.0, 2.0, 3.0]));
        for t in f.tensors() {
            assert_eq!(t.offset() % f.alignment(), 0, "{}", t.name());
        }
        // Zero copy: the tensor data points into the file bytes.
        let base = f.as_bytes().as_ptr() as usize;
        assert_eq!(
            f.tensor_data(q).as_ptr() as usize,
            base + f.data_offset() + q.offset()
        );
        assert_eq!(f.data_section().len(), bytes.len() - f.data_offset());
    }
}

#[test]
fn gguf_typed_getters_name_the_key() {
    let f = GgufFile::from_bytes(sample(None)).unwrap();
    let m = f.metadata();
    assert_eq!(m.get_str("general.architecture").unwrap(), "llama");
    assert_eq!(m.get_u8("t.u8").unwrap(), 200);
    assert_eq!(m.get_i8("t.i8").unwrap(), -100);
    assert_eq!(m.get_u16("t.u16").unwrap(), 60000);
    assert_eq!(m.get_i16("t.i16").unwrap(), -30000);
    assert_eq!(m.get_u32("t.u32").unwrap(), 4_000_000_000);
    assert_eq!(m.get_i32("t.i32").unwrap(), -2_000_000_000);
    assert_eq!(m.get_f32("t.f32").unwrap(), 1.5e-5);
    assert!(m.get_bool("t.bool").unwrap());
    assert_eq!(m.get_u64("t.u64").unwrap(), u64::MAX);
    assert_eq!(m.get_i64("t.i64").unwrap(), i64::MIN);
    assert_eq!(m.get_f64("t.f64").unwrap(), -2.25);
    assert_eq!(m.get_usize("t.u16").unwrap(), 60000);
    assert_eq!(m.get_str_array("t.arr.string").unwrap(), ["a", "", "ü"]);
    assert_eq!(m.get_f32_array("t.arr.f32").unwrap(), [0.5, -0.25]);
    assert_eq!(m.get_i32_array("t.arr.i32").unwrap(), [1, -1, 3]);
    assert_eq!(m.get_u32_array("t.arr.u32").unwrap(), [7, 8]);
    assert_eq!(
        m.get_array("t.arr.empty").unwrap().elem_type(),
        ValueType::U32
    );
    assert!(m.get_array("t.arr.empty").unwrap().is_empty());
    assert_eq!(
        m.get("t.arr.nested").unwrap().value_type(),
        ValueType::Array
    );
    assert!(m.contains_key("t.bool") && !m.contains_key("nope"));

    let (field, msg) = field_of(m.get_u32("t.string").unwrap_err());
    assert_eq!(
        (field.as_str(), msg.as_str()),
        ("metadata key 't.string'", "expected u32, found string")
    );
    let (field, msg) = field_of(m.get_str_array("t.arr.i32").unwrap_err());
    assert_eq!(field, "metadata key 't.arr.i32'");
    assert_eq!(msg, "expected array of string, found array of i32");
    let (field, msg) = field_of(m.get_f32("missing.key").unwrap_err());
    assert_eq!(
        (field.as_str(), msg.as_str()),
        ("metadata key 'missing.key'", "missing")
    );
    let (_, msg) = field_of(m.get_usize("t.arr.string").unwrap_err());
    assert!(msg.ends_with("found array of string of length 3"), "{msg}");
    assert!(m.get_usize("t.i64").is_err());
    assert!(m.get_array("t.u8").is_err());
}

#[test]
fn gguf_open_maps_a_file_and_writer_writes_paths() {
    let dir = std::env::temp_dir().join(format!("strata-gguf-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("sample.gguf");
    let mut w = GgufWriter::new();
    w.add_metadata("general.name", "tiny").unwrap();
    let data = f32_bytes(&[4.0; 8]);
    w.add_tensor("a", DType::F32, &[4, 2], data.as_slice())
        .unwrap();
    w.write_to_path(&path).unwrap();
    let f = GgufFile::open(&path).unwrap();
    assert!(f.bytes().is_mmap());
    assert_eq!(f.source_name(), path.display().to_string());
    assert_eq!(f.tensor_data(f.tensor("a").unwrap()), data);

    let empty = dir.join("empty.gguf");
    std::fs::write(&empty, b"").unwrap();
    let e = GgufFile::open(&empty).unwrap_err();
    assert!(e.to_string().contains("empty.gguf: bad magic"), "{e}");
    let e = GgufFile::open(dir.join("absent.gguf")).unwrap_err();
    assert!(matches!(e, Error::Io { .. }), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn gguf_file_without_tensors_and_v2_are_read() {
    let mut w = GgufWriter::new();
    w.add_metadata("k", 1u32).unwrap();
    let mut bytes = w.to_bytes().unwrap();
    // No tensors: the padding after the infos may be missing.
    let f = GgufFile::from_bytes(bytes.clone()).unwrap();
    assert_eq!(f.tensors().len(), 0);
    bytes.truncate(4 + 4 + 8 + 8 + 8 + 1 + 4 + 4);
    let f = GgufFile::from_bytes(bytes.clone()).unwrap();
    assert_eq!(f.metadata().get_u32("k").unwrap(), 1);
    assert!(f.data_section().is_empty());
    // v2 has the same layout as v3.
    bytes[4] = 2;
    assert_eq!(GgufFile::from_bytes(bytes).unwrap().version(), 2);
}

// ---- raw builder for malformed files ----

struct Raw(Vec<u8>);

impl Raw {
    fn header(version: u32, n_tensors: u64, n_kv: u64) -> Raw {
        let mut r = Raw(b"GGUF".to_vec());
        r.u32(version).u64(n_tensors).u64(n_kv);
        r
    }
    fn u32(&mut self, v: u32) -> &mut Raw {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn u64(&mut self, v: u64) -> &mut Raw {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn bytes(&mut self, b: &[u8]) -> &mut Raw {
        self.0.extend_from_slice(b);
        self
    }
    fn str(&mut self, s: &str) -> &mut Raw {
        self.u64(s.len() as u64).bytes(s.as_bytes())
    }
    fn kv_u32(&mut self, k: &str, v: u32) -> &mut Raw {
        self.str(k).u32(ValueType::U32.id()).u32(v)
    }
    fn tensor(&mut self, name: &str, dims: &[u64], ty: u32, offset: u64) -> &mut Raw {
        self.str(name).u32(dims.len() as u32);
        for &d in dims {
            self.u64(d);
        }
        self.u32(ty).u64(offset)
    }
    /// Pads to 32 and appends `n` data bytes.
    fn data(&mut self, n: usize) -> Vec<u8> {
        let mut v = self.0.clone();
        v.resize(v.len().div_ceil(32) * 32 + n, 0xAB);
        v
    }
}

#[test]
fn gguf_raw_builder_makes_valid_files() {
    let f = GgufFile::from_bytes(
        Raw::header(3, 2, 1)
            .kv_u32("a", 1)
            .tensor("x", &[8], 0, 0)
            .tensor("y", &[32, 2], 8, 32)
            .data(32 + 68),
    )
    .unwrap();
    assert_eq!(f.tensors()[1].size(), 68);
}

/// Files with K-quant and IQ4 tensors (ggml ids 10..15, 20, 23) load: each
/// tensor gets its type and ggml's byte size. Ids strata does not know
/// (16, an IQ2 type) are still refused by name.
#[test]
fn gguf_reads_k_quant_and_iq4_tensors() {
    let types = [
        (10, DType::Q2_K, 84),
        (11, DType::Q3_K, 110),
        (12, DType::Q4_K, 144),
        (13, DType::Q5_K, 176),
        (14, DType::Q6_K, 210),
        (15, DType::Q8_K, 292),
        (20, DType::IQ4_NL, 18 * 8),
        (23, DType::IQ4_XS, 136),
    ];
    let mut raw = Raw::header(3, types.len() as u64, 0);
    let mut offset = 0u64;
    for (i, &(id, _, bytes)) in types.iter().enumerate() {
        raw.tensor(&format!("t{i}"), &[256, 2], id, offset);
        offset += (2 * bytes as u64).div_ceil(32) * 32;
    }
    let f = GgufFile::from_bytes(raw.data(offset as usize)).unwrap();
    for (t, &(_, dtype, bytes)) in f.tensors().iter().zip(&types) {
        assert_eq!((t.dtype(), t.size()), (dtype, 2 * bytes), "{}", t.name());
        assert_eq!(t.shape(), [256, 2, 1, 1]);
    }
    assert_parse_err(
        Raw::header(3, 1, 0).tensor("t", &[256], 16, 0).data(256),
        "tensor 't' type",
        "unknown or unsupported ggml type id 16",
    );
    assert_parse_err(
        Raw::header(3, 1, 0).tensor("t", &[128], 14, 0).data(256),
        "tensor 't' row length",
        "q6_K block size 256",
    );
}

#[test]
fn gguf_rejects_bad_header() {
    assert_parse_err(b"GGML\x03\0\0\0".to_vec(), "magic", "not a GGUF file");
    assert_parse_err(Raw::header(1, 0, 0).0, "version", "v1 is not supported");
    let (_, msg) = parse_err(Raw::header(3u32.swap_bytes(), 0, 0).0);
    assert!(msg.contains("big-endian"), "{msg}");
    let (_, msg) = parse_err(Raw::header(4, 0, 0).0);
    assert!(msg.contains("unsupported version 4"), "{msg}");
    assert_eq!(parse_err(b"GG".to_vec()).0, "magic");
    assert_eq!(parse_err(b"GGUF\x03\0".to_vec()).0, "version");
    assert_eq!(parse_err(b"GGUF\x03\0\0\0\0\0".to_vec()).0, "tensor_count");
}

#[test]
fn gguf_rejects_absurd_counts_and_lengths() {
    assert_parse_err(Raw::header(3, u64::MAX, 0).0, "tensor_count", "cannot fit");
    assert_eq!(parse_err(Raw::header(3, 0, 1 << 40).0).0, "kv_count");
    // Each count alone fits, both together do not.
    let mut r = Raw::header(3, 1, 2);
    r.bytes(&[0; 30]);
    assert_eq!(parse_err(r.0).0, "kv_count");
    // String length larger than the file.
    let mut r = Raw::header(3, 0, 1);
    r.u64(u64::MAX).bytes(&[0; 16]);
    assert_parse_err(r.0, "metadata key #0", "string length");
    // Array length larger than the file.
    let mut r = Raw::header(3, 0, 1);
    r.str("arr")
        .u32(ValueType::Array.id())
        .u32(ValueType::U64.id())
        .u64(1 << 60);
    assert_parse_err(r.0, "metadata key 'arr'", "array length");
    // Array of strings: each needs at least 8 bytes.
    let mut r = Raw::header(3, 0, 1);
    r.str("arr")
        .u32(ValueType::Array.id())
        .u32(ValueType::String.id())
        .u64(4)
        .bytes(&[0; 24]);
    assert!(parse_err(r.0).1.contains("array length 4"));
}

#[test]
fn gguf_rejects_bad_metadata() {
    let mut r = Raw::header(3, 0, 1);
    r.str("k").u32(13).u32(0);
    assert_parse_err(r.0, "metadata key 'k'", "unknown value type id 13");
    let mut r = Raw::header(3, 0, 1);
    r.str("k").u32(ValueType::Array.id()).u32(99).u64(0);
    assert!(parse_err(r.0).1.contains("unknown value type id 99"));

    let mut r = Raw::header(3, 0, 2);
    r.kv_u32("dup", 1).kv_u32("dup", 2);
    let (field, msg) = parse_err(r.0);
    assert_eq!(
        (field.as_str(), msg.as_str()),
        ("metadata key 'dup'", "duplicate key")
    );

    let mut r = Raw::header(3, 0, 1);
    r.u64(2).bytes(&[0xff, 0xfe]).u32(0).bytes(&[0]);
    assert_parse_err(r.0, "metadata key #0", "invalid UTF-8");
    let mut r = Raw::header(3, 0, 1);
    r.str("s").u32(ValueType::String.id()).u64(1).bytes(&[0x80]);
    assert!(parse_err(r.0).1.contains("invalid UTF-8"));

    let mut r = Raw::header(3, 0, 1);
    r.str("b").u32(ValueType::Bool.id()).bytes(&[2]);
    assert!(parse_err(r.0).1.contains("bool byte is 2"));

    // Arrays nested deeper than the limit.
    let mut r = Raw::header(3, 0, 1);
    r.str("deep").u32(ValueType::Array.id());
    for _ in 0..limits::MAX_ARRAY_DEPTH {
        r.u32(ValueType::Array.id()).u64(1);
    }
    r.u32(ValueType::U8.id()).u64(0);
    assert_parse_err(r.0, "metadata key 'deep'", "nested deeper");

    for bad in [0u32, 3, 48] {
        let mut r = Raw::header(3, 0, 1);
        r.kv_u32("general.alignment", bad);
        assert_parse_err(r.0, "metadata key 'general.alignment'", "power of two");
    }
    let mut r = Raw::header(3, 0, 1);
    r.str("general.alignment")
        .u32(ValueType::String.id())
        .str("32");
    assert!(parse_err(r.0).1.contains("power of two"));
}

#[test]
fn gguf_rejects_bad_tensor_infos() {
    let one = |name: &str, dims: &[u64], ty: u32, offset: u64, data: usize| {
        Raw::header(3, 1, 0)
            .tensor(name, dims, ty, offset)
            .data(data)
    };
    assert_parse_err(
        one("t", &[1, 1, 1, 1, 1], 0, 0, 4),
        "tensor 't' n_dims",
        "5 > 4",
    );
    assert_parse_err(
        one("t", &[4, 0], 0, 0, 16),
        "tensor 't' dims",
        "dimension 1 is zero",
    );
    assert_parse_err(
        one("t", &[1 << 32, 1 << 32], 0, 0, 0),
        "tensor 't' dims",
        "overflows",
    );
    assert_parse_err(
        one("t", &[u64::MAX, 2], 0, 0, 0),
        "tensor 't' dims",
        "overflows",
    );
    assert_parse_err(
        one("t", &[1 << 62], 0, 0, 0),
        "tensor 't' size",
        "overflows",
    );
    assert_parse_err(
        one("t", &[4], 4, 0, 16),
        "tensor 't' type",
        "unknown or unsupported ggml type id 4",
    );
    assert_parse_err(one("t", &[4], 1000, 0, 16), "tensor 't' type", "id 1000");
    assert_parse_err(
        one("t", &[48], 8, 0, 64),
        "tensor 't' row length",
        "not a multiple of the q8_0 block size 32",
    );
    assert_parse_err(
        one("t", &[4], 0, 16, 64),
        "tensor 't' offset",
        "not a multiple of the alignment 32",
    );
    assert_parse_err(
        one("t", &[8], 0, 0, 31),
        "tensor 't' offset",
        "outside the 31-byte data section",
    );
    assert_parse_err(
        one("t", &[8], 0, 1 << 63, 64),
        "tensor 't' offset",
        "outside",
    );
    assert_parse_err(
        one("t", &[8], 0, u64::MAX - 31, 64),
        "tensor 't' offset",
        "",
    );
    assert_parse_err(one("", &[8], 0, 0, 32), "tensor #0 name", "empty");
    assert_parse_err(
        one("t", &[8], 0, 0, 0)[..50].to_vec(),
        "tensor 't' offset",
        "truncated",
    );
    // Infos end, data section missing entirely.
    let mut r = Raw::header(3, 1, 0);
    r.tensor("t", &[8], 0, 0);
    assert_parse_err(r.0.clone(), "data section", "past the end");

    let two = |a: (&str, u64), b: (&str, u64), data: usize| {
        Raw::header(3, 2, 0)
            .tensor(a.0, &[16], 0, a.1)
            .tensor(b.0, &[16], 0, b.1)
            .data(data)
    };
    assert_parse_err(
        two(("a", 0), ("a", 64), 128),
        "tensor 'a' name",
        "duplicate",
    );
    assert_parse_err(
        two(("a", 0), ("b", 32), 128),
        "tensor 'b' offset",
        "overlaps tensor 'a'",
    );
    assert_parse_err(
        two(("a", 64), ("b", 32), 128),
        "tensor 'a' offset",
        "overlaps tensor 'b'",
    );
    assert!(GgufFile::from_bytes(two(("a", 64), ("b", 0), 128)).is_ok());

    // The tensor name must be valid UTF-8 too.
    let mut r = Raw::header(3, 1, 0);
    r.u64(1).bytes(&[0xc3]).u32(1).u64(8).u32(0).u64(0);
    assert_parse_err(r.data(32), "tensor #0 name", "invalid UTF-8");
}

#[test]
fn gguf_every_truncation_is_an_error() {
    let bytes = sample(None);
    let f = GgufFile::from_bytes(bytes.clone()).unwrap();
    let end = f
        .tensors()
        .iter()
        .map(|t| t.data_range().end)
        .max()
        .unwrap();
    // Cutting only the padding after the last tensor leaves a valid file.
    for len in f.data_offset() + end..bytes.len() {
        assert!(GgufFile::from_bytes(bytes[..len].to_vec()).is_ok());
    }
    for len in 0..f.data_offset() + end {
        let r = GgufFile::from_bytes(bytes[..len].to_vec());
        let e = r.expect_err("a truncated file must be rejected");
        assert!(matches!(e, Error::Format { .. }), "{e}");
    }
}

#[test]
fn gguf_writer_rejects_bad_input() {
    let mut w = GgufWriter::new();
    w.add_metadata("k", 1u8).unwrap();
    assert!(w.add_metadata("k", 2u8).is_err());
    assert!(w.add_metadata("general.alignment", 3u32).is_err());
    assert!(w.add_metadata("general.alignment", 32u64).is_err());
    let mut deep = Array::from(vec![1u8]);
    for _ in 1..limits::MAX_ARRAY_DEPTH {
        deep = Array::from(vec![deep]);
    }
    w.add_metadata("deep.ok", deep.clone()).unwrap();
    assert!(w.add_metadata("deep.bad", Array::from(vec![deep])).is_err());
    assert!(w.set_alignment(0).is_err());
    assert!(w.set_alignment(24).is_err());
    w.set_alignment(16).unwrap();
    w.set_alignment(64).unwrap();
    assert_eq!(w.alignment(), 64);
    assert_eq!(w.metadata().get_u32("general.alignment").unwrap(), 64);
    assert!(w.add_tensor("", DType::F32, &[1], vec![0; 4]).is_err());
    assert!(w.add_tensor("t", DType::F32, &[], vec![]).is_err());
    assert!(w
        .add_tensor("t", DType::F32, &[1, 1, 1, 1, 1], vec![0; 4])
        .is_err());
    assert!(w.add_tensor("t", DType::F32, &[0], vec![]).is_err());
    assert!(w.add_tensor("t", DType::Q4_0, &[16], vec![0; 9]).is_err());
    assert!(w.add_tensor("t", DType::F32, &[2], vec![0; 4]).is_err());
    assert!(w
        .add_tensor("t", DType::F32, &[usize::MAX, 2], vec![])
        .is_err());
    w.add_tensor("t", DType::F32, &[1], vec![0; 4]).unwrap();
    assert!(w.add_tensor("t", DType::F32, &[1], vec![0; 4]).is_err());
    let f = GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap();
    assert_eq!((f.alignment(), f.data_offset() % 64), (64, 0));
}

/// The sample's tensors, streamed: some declared and written in pieces,
/// some added with their bytes, at several alignments.
#[test]
fn gguf_stream_writes_the_same_bytes_as_the_whole_file_writer() {
    for alignment in [None, Some(64), Some(1)] {
        let whole = sample(alignment);
        let f = GgufFile::from_bytes(whole.clone()).unwrap();
        let mut w = GgufWriter::new();
        if let Some(a) = alignment {
            w.set_alignment(a).unwrap();
        }
        for (k, v) in all_values() {
            w.add_metadata(k, v).unwrap();
        }
        let infos = f.tensors().to_vec();
        // the middle tensor comes with its bytes, the others are streamed
        for (i, t) in infos.iter().enumerate() {
            if i == 1 {
                w.add_tensor(t.name(), t.dtype(), t.dims(), f.tensor_data(t))
                    .unwrap();
            } else {
                w.add_tensor_info(t.name(), t.dtype(), t.dims()).unwrap();
            }
        }
        assert!(w.to_bytes().is_err(), "declared tensors need the stream");
        let mut s = w.stream_to(Vec::new()).unwrap();
        for (i, t) in infos.iter().enumerate() {
            if i == 1 {
                continue;
            }
            assert_eq!(s.current_tensor(), Some(t.name()));
            assert_eq!(s.remaining(), t.size());
            for piece in f.tensor_data(t).chunks(5) {
                s.write_data(piece).unwrap();
            }
        }
        assert_eq!(s.current_tensor(), None);
        assert_eq!(s.position(), whole.len());
        assert_eq!(s.finish().unwrap(), whole, "alignment {alignment:?}");
    }
}

#[test]
fn gguf_stream_refuses_too_many_and_too_few_bytes() {
    let mut w = GgufWriter::new();
    w.add_tensor_info("a", DType::F32, &[2]).unwrap();
    w.add_tensor_info("b", DType::Q8_0, &[32]).unwrap();
    let mut s = w.stream_to(Vec::new()).unwrap();
    let e = s.write_data(&[0u8; 12]).unwrap_err();
    assert!(
        e.to_string().contains("tensor 'a': 12 bytes given, 8"),
        "{e}"
    );
    s.write_data(&[0u8; 8]).unwrap();
    s.write_data(&[0u8; 30]).unwrap();
    let mut s2 = GgufWriter::new();
    s2.add_tensor_info("c", DType::F32, &[1]).unwrap();
    let s2 = s2.stream_to(Vec::new()).unwrap();
    let e = s2.finish().unwrap_err();
    assert!(
        e.to_string().contains("tensor 'c': 0 of its 4 bytes"),
        "{e}"
    );
    let e = s.finish().unwrap_err();
    assert!(e.to_string().contains("tensor 'b': 30 of its 34"), "{e}");
    let mut w = GgufWriter::new();
    w.add_tensor_info("a", DType::F32, &[1]).unwrap();
    let mut s = w.stream_to(Vec::new()).unwrap();
    s.write_data(&[0u8; 4]).unwrap();
    let e = s.write_data(&[0u8; 1]).unwrap_err();
    assert!(e.to_string().contains("after the last tensor"), "{e}");
    let bytes = s.finish().unwrap();
    assert_eq!(GgufFile::from_bytes(bytes).unwrap().tensors().len(), 1);
}

/// Issue 16 item 10: a directory given as a model file is named and
/// explained (mapping it failed with "No such device (os error 19)").
#[test]
fn opening_a_directory_says_so() {
    let dir = std::env::temp_dir();
    let e = GgufFile::open(&dir).unwrap_err().to_string();
    assert!(
        e.contains(&dir.display().to_string()) && e.contains("is a directory"),
        "{e}"
    );
}
