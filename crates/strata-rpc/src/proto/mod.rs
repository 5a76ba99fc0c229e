//! ggml's RPC protocol 7.0.0: commands, the 296-byte tensor record, graph
//! messages, and their little-endian encodings. Pure functions over byte
//! slices: no sockets, no allocation beyond the decoded values.
//!
//! Framing: a request is `cmd u8 | size u64 | payload[size]`; a response is
//! `size u64 | payload[size]`. Only some commands have a response
//! ([`Command::response_size`]).

mod graph;
mod message;
mod tensor;

pub use graph::{GraphMsg, GraphView};
pub use message::{
    decode_flag, decode_pair, decode_request, decode_u32, decode_u64, frame_response, pair_payload,
    Request, SetTensorHeader,
};
pub use tensor::{RpcTensor, FLAG_COMPUTE, RPC_TENSOR_SIZE};

use std::fmt;

/// Protocol version spoken (major, minor, patch).
pub const PROTOCOL_VERSION: (u8, u8, u8) = (7, 0, 0);
/// Size of the transport capability block in HELLO (all zero = plain TCP).
pub const CONN_CAPS_SIZE: usize = 24;
/// Size of a request header (`cmd u8 | size u64`).
pub const REQUEST_HEADER_SIZE: usize = 9;
/// Uploads larger than this may use the hashed path (ggml's `HASH_THRESHOLD`).
pub const HASH_THRESHOLD: usize = 10 * 1024 * 1024;
/// Default server port.
pub const DEFAULT_PORT: u16 = 50052;
/// Number of source slots in a tensor record.
pub const MAX_SRC: usize = 10;
/// Bytes of the fixed part of SET_TENSOR (tensor, cache flag, offset).
pub const SET_TENSOR_FIXED: usize = RPC_TENSOR_SIZE + 1 + 8;

/// The RPC commands, with ggml's numbers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Command {
    /// Allocate a buffer on a device.
    AllocBuffer = 0,
    /// A device's buffer alignment.
    GetAlignment = 1,
    /// A device's largest buffer.
    GetMaxSize = 2,
    /// A buffer's base address.
    BufferGetBase = 3,
    /// Free a buffer (no response).
    FreeBuffer = 4,
    /// Fill a whole buffer with a byte (no response).
    BufferClear = 5,
    /// Write tensor bytes (no response).
    SetTensor = 6,
    /// Write tensor bytes from the server's cache, by hash.
    SetTensorHash = 7,
    /// Read tensor bytes.
    GetTensor = 8,
    /// Copy a tensor between two buffers of one server.
    CopyTensor = 9,
    /// Compute a graph (no response).
    GraphCompute = 10,
    /// A device's free and total memory.
    GetDeviceMemory = 11,
    /// Initialize a tensor in its buffer (no response).
    InitTensor = 12,
    /// Bytes a tensor needs in a device's memory.
    GetAllocSize = 13,
    /// Handshake (first message only).
    Hello = 14,
    /// Number of devices.
    DeviceCount = 15,
    /// Recompute the last graph of a device (no response).
    GraphRecompute = 16,
    /// Fill part of a tensor with a byte (no response).
    MemsetTensor = 17,
}

impl Command {
    /// Every command, in number order.
    pub const ALL: [Command; 18] = [
        Command::AllocBuffer,
        Command::GetAlignment,
        Command::GetMaxSize,
        Command::BufferGetBase,
        Command::FreeBuffer,
        Command::BufferClear,
        Command::SetTensor,
        Command::SetTensorHash,
        Command::GetTensor,
        Command::CopyTensor,
        Command::GraphCompute,
        Command::GetDeviceMemory,
        Command::InitTensor,
        Command::GetAllocSize,
        Command::Hello,
        Command::DeviceCount,
        Command::GraphRecompute,
        Command::MemsetTensor,
    ];

    /// The command with number `b` (18 = NONE and above are not commands).
    pub fn from_u8(b: u8) -> Option<Command> {
        Command::ALL.get(b as usize).copied()
    }

    /// ggml's name, e.g. `"SET_TENSOR"`.
    pub fn name(self) -> &'static str {
        match self {
            Command::AllocBuffer => "ALLOC_BUFFER",
            Command::GetAlignment => "GET_ALIGNMENT",
            Command::GetMaxSize => "GET_MAX_SIZE",
            Command::BufferGetBase => "BUFFER_GET_BASE",
            Command::FreeBuffer => "FREE_BUFFER",
            Command::BufferClear => "BUFFER_CLEAR",
            Command::SetTensor => "SET_TENSOR",
            Command::SetTensorHash => "SET_TENSOR_HASH",
            Command::GetTensor => "GET_TENSOR",
            Command::CopyTensor => "COPY_TENSOR",
            Command::GraphCompute => "GRAPH_COMPUTE",
            Command::GetDeviceMemory => "GET_DEVICE_MEMORY",
            Command::InitTensor => "INIT_TENSOR",
            Command::GetAllocSize => "GET_ALLOC_SIZE",
            Command::Hello => "HELLO",
            Command::DeviceCount => "DEVICE_COUNT",
            Command::GraphRecompute => "GRAPH_RECOMPUTE",
            Command::MemsetTensor => "MEMSET_TENSOR",
        }
    }

    /// Exact request payload size for fixed-size commands; `None` for the
    /// variable-size ones (SET_TENSOR, GRAPH_COMPUTE).
    pub fn request_size(self) -> Option<usize> {
        Some(match self {
            Command::AllocBuffer => 12,
            Command::GetAlignment | Command::GetMaxSize => 4,
            Command::BufferGetBase | Command::FreeBuffer => 8,
            Command::BufferClear => 9,
            Command::SetTensor | Command::GraphCompute => return None,
            Command::SetTensorHash | Command::GetTensor => RPC_TENSOR_SIZE + 16,
            Command::CopyTensor => 2 * RPC_TENSOR_SIZE,
            Command::GetDeviceMemory => 4,
            Command::InitTensor => RPC_TENSOR_SIZE,
            Command::GetAllocSize => 4 + (1 + MAX_SRC) * RPC_TENSOR_SIZE,
            Command::Hello => CONN_CAPS_SIZE,
            Command::DeviceCount => 0,
            Command::GraphRecompute => 4,
            Command::MemsetTensor => RPC_TENSOR_SIZE + 17,
        })
    }

    /// Response payload size: `None` when the command has no response at
    /// all, `Some(None)` when it is variable (GET_TENSOR: the size asked).
    pub fn response_size(self) -> Option<Option<usize>> {
        match self {
            Command::FreeBuffer
            | Command::BufferClear
            | Command::SetTensor
            | Command::GraphCompute
            | Command::InitTensor
            | Command::GraphRecompute
            | Command::MemsetTensor => None,
            Command::GetTensor => Some(None),
            Command::AllocBuffer | Command::GetDeviceMemory => Some(Some(16)),
            Command::GetAlignment
            | Command::GetMaxSize
            | Command::BufferGetBase
            | Command::GetAllocSize => Some(Some(8)),
            Command::SetTensorHash | Command::CopyTensor => Some(Some(1)),
            Command::Hello => Some(Some(4 + CONN_CAPS_SIZE)),
            Command::DeviceCount => Some(Some(4)),
        }
    }
}

impl fmt::Display for Command {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why bytes are not a valid message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DecodeError {
    /// The command being decoded (`None` before the command byte was known).
    pub command: Option<Command>,
    /// What is wrong.
    pub msg: String,
}

impl DecodeError {
    pub(crate) fn new(command: Option<Command>, msg: impl Into<String>) -> DecodeError {
        DecodeError {
            command,
            msg: msg.into(),
        }
    }
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.command {
            Some(c) => write!(f, "{c}: {}", self.msg),
            None => f.write_str(&self.msg),
        }
    }
}

impl std::error::Error for DecodeError {}

impl From<DecodeError> for strata::Error {
    fn from(e: DecodeError) -> strata::Error {
        strata::Error::Format {
            source_name: "RPC message".into(),
            field: e.command.map_or("command".into(), |c| c.name().to_string()),
            msg: e.msg,
        }
    }
}

/// 64-bit FNV-1a of `data` (the hash SET_TENSOR_HASH and the server cache use).
pub fn fnv1a(data: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in data {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// The 9-byte request header for `cmd` with a `size`-byte payload.
pub fn request_header(cmd: Command, size: u64) -> [u8; REQUEST_HEADER_SIZE] {
    let mut h = [0u8; REQUEST_HEADER_SIZE];
    h[0] = cmd as u8;
    h[1..].copy_from_slice(&size.to_le_bytes());
    h
}

/// Splits a request header into the raw command byte and the payload size.
pub fn parse_request_header(h: &[u8; REQUEST_HEADER_SIZE]) -> (u8, u64) {
    let mut s = [0u8; 8];
    s.copy_from_slice(&h[1..]);
    (h[0], u64::from_le_bytes(s))
}

/// The HELLO response payload: version 7.0.0, padding, zero capabilities.
pub fn hello_response() -> [u8; 4 + CONN_CAPS_SIZE] {
    let mut r = [0u8; 4 + CONN_CAPS_SIZE];
    r[0] = PROTOCOL_VERSION.0;
    r[1] = PROTOCOL_VERSION.1;
    r[2] = PROTOCOL_VERSION.2;
    r
}

/// Checks a HELLO response the way ggml's client does: major 7, minor <= 0
/// (any patch). Returns the server's version.
pub fn check_hello_response(payload: &[u8]) -> Result<(u8, u8, u8), DecodeError> {
    if payload.len() != 4 + CONN_CAPS_SIZE {
        return Err(DecodeError::new(
            Some(Command::Hello),
            format!(
                "response has {} bytes, expected {} (server speaks another protocol version)",
                payload.len(),
                4 + CONN_CAPS_SIZE
            ),
        ));
    }
    let v = (payload[0], payload[1], payload[2]);
    if v.0 != PROTOCOL_VERSION.0 || v.1 > PROTOCOL_VERSION.1 {
        return Err(DecodeError::new(
            Some(Command::Hello),
            format!(
                "server version {}.{}.{} is not compatible with {}.{}.{}",
                v.0, v.1, v.2, PROTOCOL_VERSION.0, PROTOCOL_VERSION.1, PROTOCOL_VERSION.2
            ),
        ));
    }
    Ok(v)
}

/// Little-endian readers over a slice that already has the right length.
pub(crate) fn u32_at(b: &[u8], off: usize) -> u32 {
    let mut x = [0u8; 4];
    x.copy_from_slice(&b[off..off + 4]);
    u32::from_le_bytes(x)
}

pub(crate) fn u64_at(b: &[u8], off: usize) -> u64 {
    let mut x = [0u8; 8];
    x.copy_from_slice(&b[off..off + 8]);
    u64::from_le_bytes(x)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv_matches_the_documented_vector() {
        let data: Vec<u8> = (0..16).flat_map(|_| 0..=255u8).collect();
        assert_eq!(data.len(), 4096);
        assert_eq!(fnv1a(&data), 0x88d6_ce57_89d3_5325);
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
    }

    #[test]
    fn hello_bytes_and_version_rule() {
        let h = request_header(Command::Hello, 24);
        assert_eq!(h, [0x0e, 0x18, 0, 0, 0, 0, 0, 0, 0]);
        let r = hello_response();
        assert_eq!(&r[..4], &[7, 0, 0, 0]);
        assert_eq!(check_hello_response(&r).unwrap(), (7, 0, 0));
        let mut patch = r;
        patch[2] = 9;
        assert!(check_hello_response(&patch).is_ok());
        let mut minor = r;
        minor[1] = 1;
        assert!(check_hello_response(&minor).is_err());
        let mut major = r;
        major[0] = 6;
        assert!(check_hello_response(&major).is_err());
        assert!(check_hello_response(&r[..3]).is_err());
    }

    #[test]
    fn command_numbers_and_sizes() {
        for (i, c) in Command::ALL.iter().enumerate() {
            assert_eq!(*c as usize, i);
            assert_eq!(Command::from_u8(i as u8), Some(*c));
        }
        assert_eq!(Command::from_u8(18), None);
        assert_eq!(Command::from_u8(255), None);
        assert_eq!(Command::GetAllocSize.request_size(), Some(3260));
        assert_eq!(Command::MemsetTensor.request_size(), Some(313));
        assert_eq!(Command::CopyTensor.request_size(), Some(592));
        assert_eq!(Command::GetTensor.request_size(), Some(312));
        assert_eq!(SET_TENSOR_FIXED, 305);
    }
}
