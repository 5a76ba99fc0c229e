//! Minimal GGUF metadata reader for tests: just enough to pull the `tokenizer.ggml.*` keys
//! out of a model file. Stops before the tensor data. To be replaced by strata's GGUF reader.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, BufReader, Read};
use std::path::Path;

use strata_models::TokenizerParts;

/// A metadata value.
#[derive(Debug, Clone)]
pub enum Value {
    UInt(u64),
    Int(i64),
    Float(f64),
    Bool(bool),
    Str(String),
    Array(Vec<Value>),
}

fn bad(msg: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.into())
}

struct R<T: Read>(T);

impl<T: Read> R<T> {
    fn bytes<const N: usize>(&mut self) -> io::Result<[u8; N]> {
        let mut b = [0u8; N];
        self.0.read_exact(&mut b)?;
        Ok(b)
    }
    fn u32(&mut self) -> io::Result<u32> {
        Ok(u32::from_le_bytes(self.bytes()?))
    }
    fn u64(&mut self) -> io::Result<u64> {
        Ok(u64::from_le_bytes(self.bytes()?))
    }
    fn string(&mut self) -> io::Result<String> {
        let n = self.u64()? as usize;
        let mut v = vec![0u8; n];
        self.0.read_exact(&mut v)?;
        String::from_utf8(v).map_err(|_| bad("non-UTF-8 string"))
    }
    fn value(&mut self, ty: u32) -> io::Result<Value> {
        Ok(match ty {
            0 => Value::UInt(u8::from_le_bytes(self.bytes()?) as u64),
            1 => Value::Int(i8::from_le_bytes(self.bytes()?) as i64),
            2 => Value::UInt(u16::from_le_bytes(self.bytes()?) as u64),
            3 => Value::Int(i16::from_le_bytes(self.bytes()?) as i64),
            4 => Value::UInt(self.u32()? as u64),
            5 => Value::Int(i32::from_le_bytes(self.bytes()?) as i64),
            6 => Value::Float(f32::from_le_bytes(self.bytes()?) as f64),
            7 => Value::Bool(self.bytes::<1>()?[0] != 0),
            8 => Value::Str(self.string()?),
            9 => {
                let elem = self.u32()?;
                let n = self.u64()? as usize;
                let mut v = Vec::with_capacity(n.min(1 << 20));
                for _ in 0..n {
                    v.push(self.value(elem)?);
                }
                Value::Array(v)
            }
            10 => Value::UInt(self.u64()?),
            11 => Value::Int(i64::from_le_bytes(self.bytes()?)),
            12 => Value::Float(f64::from_le_bytes(self.bytes()?)),
            t => return Err(bad(format!("unknown GGUF value type {t}"))),
        })
    }
}

/// Reads all metadata key/values of a GGUF (v2/v3) file.
pub fn read_metadata(path: &Path) -> io::Result<HashMap<String, Value>> {
    let mut r = R(BufReader::new(File::open(path)?));
    if &r.bytes::<4>()? != b"GGUF" {
        return Err(bad("not a GGUF file"));
    }
    let version = r.u32()?;
    if version < 2 {
        return Err(bad(format!("GGUF version {version} not supported")));
    }
    let _n_tensors = r.u64()?;
    let n_kv = r.u64()?;
    let mut kv = HashMap::new();
    for _ in 0..n_kv {
        let key = r.string()?;
        let ty = r.u32()?;
        kv.insert(key, r.value(ty)?);
    }
    Ok(kv)
}

fn str_of(v: &Value) -> Option<String> {
    match v {
        Value::Str(s) => Some(s.clone()),
        _ => None,
    }
}

fn u32_of(v: &Value) -> Option<u32> {
    match *v {
        Value::UInt(x) => u32::try_from(x).ok(),
        Value::Int(x) => u32::try_from(x).ok(),
        _ => None,
    }
}

/// The tokenizer parts of a GGUF file.
pub fn load_parts(path: &Path) -> io::Result<TokenizerParts> {
    let kv = read_metadata(path)?;
    let get = |k: &str| kv.get(&format!("tokenizer.ggml.{k}"));
    let strings = |k: &str| -> Vec<String> {
        match get(k) {
            Some(Value::Array(a)) => a.iter().filter_map(str_of).collect(),
            _ => Vec::new(),
        }
    };
    let id = |k: &str| get(k).and_then(u32_of);
    let flag = |k: &str| match get(k) {
        Some(Value::Bool(b)) => Some(*b),
        _ => None,
    };
    Ok(TokenizerParts {
        model: get("model").and_then(str_of).unwrap_or_default(),
        pre: get("pre").and_then(str_of).unwrap_or_default(),
        tokens: strings("tokens"),
        token_types: match get("token_type") {
            Some(Value::Array(a)) => a
                .iter()
                .map(|v| match *v {
                    Value::Int(x) => x as i32,
                    Value::UInt(x) => x as i32,
                    _ => 0,
                })
                .collect(),
            _ => Vec::new(),
        },
        merges: strings("merges"),
        scores: match get("scores") {
            Some(Value::Array(a)) => Some(
                a.iter()
                    .map(|v| match *v {
                        Value::Float(x) => x as f32,
                        _ => 0.0,
                    })
                    .collect(),
            ),
            _ => None,
        },
        bos_id: id("bos_token_id"),
        eos_id: id("eos_token_id"),
        eot_id: id("eot_token_id"),
        unk_id: id("unknown_token_id"),
        pad_id: id("padding_token_id"),
        add_bos: flag("add_bos_token"),
        add_eos: flag("add_eos_token"),
        add_space_prefix: flag("add_space_prefix"),
    })
}
