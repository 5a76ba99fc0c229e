//! GGUF metadata values: the 13 value types (`enum gguf_type`), scalar
//! values, typed arrays (including arrays of arrays) and the ordered
//! key → value map of a file.

use std::collections::HashMap;
use std::fmt;

use crate::error::{Error, Result};

/// A GGUF metadata value type, with GGUF's numeric ids 0..=12.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ValueType {
    /// `u8` (id 0).
    U8,
    /// `i8` (id 1).
    I8,
    /// `u16` (id 2).
    U16,
    /// `i16` (id 3).
    I16,
    /// `u32` (id 4).
    U32,
    /// `i32` (id 5).
    I32,
    /// `f32` (id 6).
    F32,
    /// `bool`, one byte 0 or 1 (id 7).
    Bool,
    /// UTF-8 string, `u64` length then bytes (id 8).
    String,
    /// Array: `u32` element type, `u64` count, elements (id 9).
    Array,
    /// `u64` (id 10).
    U64,
    /// `i64` (id 11).
    I64,
    /// `f64` (id 12).
    F64,
}

impl ValueType {
    /// All value types in id order.
    pub const ALL: [ValueType; 13] = [
        ValueType::U8,
        ValueType::I8,
        ValueType::U16,
        ValueType::I16,
        ValueType::U32,
        ValueType::I32,
        ValueType::F32,
        ValueType::Bool,
        ValueType::String,
        ValueType::Array,
        ValueType::U64,
        ValueType::I64,
        ValueType::F64,
    ];

    /// GGUF's numeric id of this type.
    pub const fn id(self) -> u32 {
        match self {
            ValueType::U8 => 0,
            ValueType::I8 => 1,
            ValueType::U16 => 2,
            ValueType::I16 => 3,
            ValueType::U32 => 4,
            ValueType::I32 => 5,
            ValueType::F32 => 6,
            ValueType::Bool => 7,
            ValueType::String => 8,
            ValueType::Array => 9,
            ValueType::U64 => 10,
            ValueType::I64 => 11,
            ValueType::F64 => 12,
        }
    }

    /// The type with GGUF id `id`, or `None` if there is none.
    pub fn from_id(id: u32) -> Option<ValueType> {
        ValueType::ALL.get(usize::try_from(id).ok()?).copied()
    }

    /// Lower-case name ("u32", "string", "array", ...).
    pub const fn name(self) -> &'static str {
        match self {
            ValueType::U8 => "u8",
            ValueType::I8 => "i8",
            ValueType::U16 => "u16",
            ValueType::I16 => "i16",
            ValueType::U32 => "u32",
            ValueType::I32 => "i32",
            ValueType::F32 => "f32",
            ValueType::Bool => "bool",
            ValueType::String => "string",
            ValueType::Array => "array",
            ValueType::U64 => "u64",
            ValueType::I64 => "i64",
            ValueType::F64 => "f64",
        }
    }

    /// Encoded size in bytes of a scalar type; `None` for string and array.
    pub const fn scalar_size(self) -> Option<usize> {
        match self {
            ValueType::U8 | ValueType::I8 | ValueType::Bool => Some(1),
            ValueType::U16 | ValueType::I16 => Some(2),
            ValueType::U32 | ValueType::I32 | ValueType::F32 => Some(4),
            ValueType::U64 | ValueType::I64 | ValueType::F64 => Some(8),
            ValueType::String | ValueType::Array => None,
        }
    }

    /// The fewest bytes one value of this type can take in a file (string:
    /// its `u64` length; array: element type and count). The reader checks
    /// `count * min_encoded_size` against the bytes left before allocating.
    pub const fn min_encoded_size(self) -> usize {
        match self.scalar_size() {
            Some(n) => n,
            None => match self {
                ValueType::String => 8,
                _ => 12,
            },
        }
    }
}

impl fmt::Display for ValueType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A typed GGUF array. Arrays of arrays nest: each inner array has its own
/// element type.
#[derive(Clone, Debug, PartialEq)]
pub enum Array {
    /// Array of `u8`.
    U8(Vec<u8>),
    /// Array of `i8`.
    I8(Vec<i8>),
    /// Array of `u16`.
    U16(Vec<u16>),
    /// Array of `i16`.
    I16(Vec<i16>),
    /// Array of `u32`.
    U32(Vec<u32>),
    /// Array of `i32`.
    I32(Vec<i32>),
    /// Array of `f32`.
    F32(Vec<f32>),
    /// Array of `bool`.
    Bool(Vec<bool>),
    /// Array of strings.
    String(Vec<String>),
    /// Array of arrays.
    Array(Vec<Array>),
    /// Array of `u64`.
    U64(Vec<u64>),
    /// Array of `i64`.
    I64(Vec<i64>),
    /// Array of `f64`.
    F64(Vec<f64>),
}

macro_rules! array_accessors {
    ($($variant:ident, $method:ident, $t:ty;)*) => {
        impl Array {
            /// The element type.
            pub fn elem_type(&self) -> ValueType {
                match self {
                    $(Array::$variant(_) => ValueType::$variant,)*
                }
            }

            /// Number of elements.
            pub fn len(&self) -> usize {
                match self {
                    $(Array::$variant(v) => v.len(),)*
                }
            }

            $(
                #[doc = concat!("The elements if this is an array of `", stringify!($t), "`.")]
                pub fn $method(&self) -> Option<&[$t]> {
                    match self {
                        Array::$variant(v) => Some(v),
                        _ => None,
                    }
                }
            )*
        }

        $(
            impl From<Vec<$t>> for Array {
                fn from(v: Vec<$t>) -> Array {
                    Array::$variant(v)
                }
            }
        )*
    };
}

array_accessors! {
    U8, as_u8, u8;
    I8, as_i8, i8;
    U16, as_u16, u16;
    I16, as_i16, i16;
    U32, as_u32, u32;
    I32, as_i32, i32;
    F32, as_f32, f32;
    Bool, as_bool, bool;
    String, as_string, String;
    Array, as_array, Array;
    U64, as_u64, u64;
    I64, as_i64, i64;
    F64, as_f64, f64;
}

impl Array {
    /// True if the array has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Type description for error messages: "array of string".
    fn describe(&self) -> String {
        format!("array of {}", self.elem_type())
    }
}

impl From<Vec<&str>> for Array {
    fn from(v: Vec<&str>) -> Array {
        Array::String(v.into_iter().map(str::to_owned).collect())
    }
}

/// One GGUF metadata value.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// `u8`.
    U8(u8),
    /// `i8`.
    I8(i8),
    /// `u16`.
    U16(u16),
    /// `i16`.
    I16(i16),
    /// `u32`.
    U32(u32),
    /// `i32`.
    I32(i32),
    /// `f32`.
    F32(f32),
    /// `bool`.
    Bool(bool),
    /// UTF-8 string.
    String(String),
    /// Array.
    Array(Array),
    /// `u64`.
    U64(u64),
    /// `i64`.
    I64(i64),
    /// `f64`.
    F64(f64),
}

macro_rules! value_from {
    ($($variant:ident, $t:ty;)*) => {
        impl Value {
            /// The value's type.
            pub fn value_type(&self) -> ValueType {
                match self {
                    $(Value::$variant(_) => ValueType::$variant,)*
                }
            }
        }
        $(
            impl From<$t> for Value {
                fn from(v: $t) -> Value {
                    Value::$variant(v)
                }
            }
        )*
    };
}

value_from! {
    U8, u8;
    I8, i8;
    U16, u16;
    I16, i16;
    U32, u32;
    I32, i32;
    F32, f32;
    Bool, bool;
    String, String;
    Array, Array;
    U64, u64;
    I64, i64;
    F64, f64;
}

impl From<&str> for Value {
    fn from(v: &str) -> Value {
        Value::String(v.to_owned())
    }
}

impl<T> From<Vec<T>> for Value
where
    Array: From<Vec<T>>,
{
    fn from(v: Vec<T>) -> Value {
        Value::Array(Array::from(v))
    }
}

impl Value {
    /// The value as a non-negative integer of any integer type, if it is one
    /// and fits in `u64`.
    pub fn to_u64(&self) -> Option<u64> {
        match *self {
            Value::U8(v) => Some(v.into()),
            Value::U16(v) => Some(v.into()),
            Value::U32(v) => Some(v.into()),
            Value::U64(v) => Some(v),
            Value::I8(v) => u64::try_from(v).ok(),
            Value::I16(v) => u64::try_from(v).ok(),
            Value::I32(v) => u64::try_from(v).ok(),
            Value::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    /// Type description for error messages: "u32", "array of string".
    fn describe(&self) -> String {
        match self {
            Value::Array(a) => a.describe(),
            v => v.value_type().name().to_owned(),
        }
    }

    /// Short description for error messages: scalars with their value
    /// ("u32 48"), strings and arrays by type and length only, so that a
    /// hostile file cannot blow up an error message.
    pub(crate) fn summary(&self) -> String {
        match self {
            Value::String(s) => format!("string of {} bytes", s.len()),
            Value::Array(a) => format!("{} of length {}", a.describe(), a.len()),
            Value::U8(x) => format!("u8 {x}"),
            Value::I8(x) => format!("i8 {x}"),
            Value::U16(x) => format!("u16 {x}"),
            Value::I16(x) => format!("i16 {x}"),
            Value::U32(x) => format!("u32 {x}"),
            Value::I32(x) => format!("i32 {x}"),
            Value::F32(x) => format!("f32 {x}"),
            Value::Bool(x) => format!("bool {x}"),
            Value::U64(x) => format!("u64 {x}"),
            Value::I64(x) => format!("i64 {x}"),
            Value::F64(x) => format!("f64 {x}"),
        }
    }
}

/// The metadata of a GGUF file: key → value pairs in file order, with
/// lookup by key. Typed getters return [`Error::Format`] naming the key
/// when it is missing or has another type.
#[derive(Clone, Debug, Default)]
pub struct Metadata {
    source: String,
    entries: Vec<(String, Value)>,
    index: HashMap<String, usize>,
}

macro_rules! typed_getters {
    ($($method:ident, $variant:ident, $t:ty, $name:literal;)*) => {
        impl Metadata {
            $(
                #[doc = concat!("The `", $name, "` value of `key`; an error naming the key if it is missing or of another type.")]
                pub fn $method(&self, key: &str) -> Result<$t> {
                    match self.require(key)? {
                        Value::$variant(v) => Ok(*v),
                        other => Err(self.type_error(key, $name, &other.describe())),
                    }
                }
            )*
        }
    };
}

typed_getters! {
    get_u8, U8, u8, "u8";
    get_i8, I8, i8, "i8";
    get_u16, U16, u16, "u16";
    get_i16, I16, i16, "i16";
    get_u32, U32, u32, "u32";
    get_i32, I32, i32, "i32";
    get_f32, F32, f32, "f32";
    get_bool, Bool, bool, "bool";
    get_u64, U64, u64, "u64";
    get_i64, I64, i64, "i64";
    get_f64, F64, f64, "f64";
}

macro_rules! typed_array_getters {
    ($($method:ident, $accessor:ident, $t:ty, $name:literal;)*) => {
        impl Metadata {
            $(
                #[doc = concat!("The elements of `key` if it is an array of ", $name, "; an error naming the key otherwise.")]
                pub fn $method(&self, key: &str) -> Result<&[$t]> {
                    match self.require(key)? {
                        Value::Array(a) => a
                            .$accessor()
                            .ok_or_else(|| self.type_error(key, concat!("array of ", $name), &a.describe())),
                        other => Err(self.type_error(key, concat!("array of ", $name), &other.describe())),
                    }
                }
            )*
        }
    };
}

typed_array_getters! {
    get_str_array, as_string, String, "string";
    get_f32_array, as_f32, f32, "f32";
    get_i32_array, as_i32, i32, "i32";
    get_u32_array, as_u32, u32, "u32";
}

impl Metadata {
    /// Empty metadata for the file or stream `source` (used in errors).
    pub(crate) fn new(source: impl Into<String>) -> Metadata {
        Metadata {
            source: source.into(),
            entries: Vec::new(),
            index: HashMap::new(),
        }
    }

    /// Appends `key`, or replaces its value if `replace` is set; a duplicate
    /// key is an error otherwise.
    pub(crate) fn insert(&mut self, key: String, value: Value, replace: bool) -> Result<()> {
        if let Some(&i) = self.index.get(&key) {
            if replace {
                self.entries[i].1 = value;
                return Ok(());
            }
            return Err(Error::Format {
                source_name: self.source.clone(),
                field: format!("metadata key '{key}'"),
                msg: "duplicate key".into(),
            });
        }
        self.index.insert(key.clone(), self.entries.len());
        self.entries.push((key, value));
        Ok(())
    }

    /// Number of key → value pairs.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True if there are no pairs.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The value of `key`, if present.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.index.get(key).map(|&i| &self.entries[i].1)
    }

    /// True if `key` is present.
    pub fn contains_key(&self, key: &str) -> bool {
        self.index.contains_key(key)
    }

    /// The pairs in file order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&str, &Value)> + '_ {
        self.entries.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// The keys in file order.
    pub fn keys(&self) -> impl ExactSizeIterator<Item = &str> + '_ {
        self.entries.iter().map(|(k, _)| k.as_str())
    }

    /// The string value of `key`; an error naming the key if it is missing
    /// or of another type.
    pub fn get_str(&self, key: &str) -> Result<&str> {
        match self.require(key)? {
            Value::String(s) => Ok(s),
            other => Err(self.type_error(key, "string", &other.describe())),
        }
    }

    /// The array value of `key` (any element type); an error naming the key
    /// if it is missing or not an array.
    pub fn get_array(&self, key: &str) -> Result<&Array> {
        match self.require(key)? {
            Value::Array(a) => Ok(a),
            other => Err(self.type_error(key, "array", &other.describe())),
        }
    }

    /// The value of `key` as a `usize`, accepting any integer type whose
    /// value is non-negative and fits; an error naming the key otherwise.
    pub fn get_usize(&self, key: &str) -> Result<usize> {
        let v = self.require(key)?;
        v.to_u64()
            .and_then(|n| usize::try_from(n).ok())
            .ok_or_else(|| Error::Format {
                source_name: self.source.clone(),
                field: format!("metadata key '{key}'"),
                msg: format!(
                    "expected a non-negative integer that fits usize, found {}",
                    v.summary()
                ),
            })
    }

    fn require(&self, key: &str) -> Result<&Value> {
        self.get(key).ok_or_else(|| Error::Format {
            source_name: self.source.clone(),
            field: format!("metadata key '{key}'"),
            msg: "missing".into(),
        })
    }

    fn type_error(&self, key: &str, expected: &str, found: &str) -> Error {
        Error::Format {
            source_name: self.source.clone(),
            field: format!("metadata key '{key}'"),
            msg: format!("expected {expected}, found {found}"),
        }
    }
}

impl PartialEq for Metadata {
    /// Equal if the pairs are equal and in the same order (the source name
    /// is ignored).
    fn eq(&self, other: &Metadata) -> bool {
        self.entries == other.entries
    }
}
