//! Requests and responses: typed values and their payload encodings.

use super::graph::GraphMsg;
use super::{
    request_header, u32_at, u64_at, Command, DecodeError, RpcTensor, CONN_CAPS_SIZE, MAX_SRC,
    RPC_TENSOR_SIZE, SET_TENSOR_FIXED,
};

/// The fixed part of a SET_TENSOR request (the data follows it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SetTensorHeader {
    /// Destination tensor.
    pub tensor: RpcTensor,
    /// 1 = the server should store the data in its file cache.
    pub cache_flag: u8,
    /// Byte offset inside the tensor.
    pub offset: u64,
}

/// A client→server message, borrowing bulk data from the payload.
// One request is decoded at a time; boxing the records would only add allocations.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq)]
pub enum Request<'a> {
    /// ALLOC_BUFFER.
    AllocBuffer {
        /// Device index.
        device: u32,
        /// Bytes.
        size: u64,
    },
    /// GET_ALIGNMENT.
    GetAlignment {
        /// Device index.
        device: u32,
    },
    /// GET_MAX_SIZE.
    GetMaxSize {
        /// Device index.
        device: u32,
    },
    /// BUFFER_GET_BASE.
    BufferGetBase {
        /// Buffer handle.
        remote_ptr: u64,
    },
    /// FREE_BUFFER.
    FreeBuffer {
        /// Buffer handle.
        remote_ptr: u64,
    },
    /// BUFFER_CLEAR.
    BufferClear {
        /// Buffer handle.
        remote_ptr: u64,
        /// Fill byte.
        value: u8,
    },
    /// SET_TENSOR.
    SetTensor {
        /// Tensor, cache flag and offset.
        header: SetTensorHeader,
        /// Bytes to write.
        data: &'a [u8],
    },
    /// SET_TENSOR_HASH.
    SetTensorHash {
        /// Destination tensor.
        tensor: RpcTensor,
        /// Byte offset inside the tensor.
        offset: u64,
        /// FNV-1a of the bytes.
        hash: u64,
    },
    /// GET_TENSOR.
    GetTensor {
        /// Source tensor.
        tensor: RpcTensor,
        /// Byte offset inside the tensor.
        offset: u64,
        /// Bytes to read.
        size: u64,
    },
    /// COPY_TENSOR.
    CopyTensor {
        /// Source.
        src: RpcTensor,
        /// Destination.
        dst: RpcTensor,
    },
    /// GRAPH_COMPUTE.
    GraphCompute(GraphMsg),
    /// GET_DEVICE_MEMORY.
    GetDeviceMemory {
        /// Device index.
        device: u32,
    },
    /// INIT_TENSOR.
    InitTensor {
        /// The tensor.
        tensor: RpcTensor,
    },
    /// GET_ALLOC_SIZE.
    GetAllocSize {
        /// Device index.
        device: u32,
        /// The tensor.
        tensor: RpcTensor,
        /// Its sources (all-zero records when absent).
        srcs: Box<[RpcTensor; MAX_SRC]>,
    },
    /// HELLO.
    Hello {
        /// Transport capabilities (all zero = plain TCP).
        caps: [u8; CONN_CAPS_SIZE],
    },
    /// DEVICE_COUNT.
    DeviceCount,
    /// GRAPH_RECOMPUTE.
    GraphRecompute {
        /// Device index.
        device: u32,
    },
    /// MEMSET_TENSOR.
    MemsetTensor {
        /// The tensor.
        tensor: RpcTensor,
        /// Byte offset inside the tensor.
        offset: u64,
        /// Bytes to set.
        size: u64,
        /// Fill byte.
        value: u8,
    },
}

fn tensor_at(b: &[u8], off: usize) -> RpcTensor {
    RpcTensor::decode(&b[off..off + RPC_TENSOR_SIZE]).expect("length checked by caller")
}

/// Decodes the payload of command byte `cmd`. Fixed-size commands must have
/// exactly their size; SET_TENSOR needs at least 305 bytes; GRAPH_COMPUTE is
/// checked by [`GraphMsg::decode`].
pub fn decode_request(cmd: u8, payload: &[u8]) -> Result<Request<'_>, DecodeError> {
    let c = Command::from_u8(cmd)
        .ok_or_else(|| DecodeError::new(None, format!("unknown command {cmd}")))?;
    match c.request_size() {
        Some(n) if payload.len() != n => {
            return Err(DecodeError::new(
                Some(c),
                format!("payload has {} bytes, expected {n}", payload.len()),
            ))
        }
        None if c == Command::SetTensor && payload.len() < SET_TENSOR_FIXED => {
            return Err(DecodeError::new(
                Some(c),
                format!(
                    "payload has {} bytes, at least {SET_TENSOR_FIXED} needed",
                    payload.len()
                ),
            ))
        }
        _ => {}
    }
    let b = payload;
    Ok(match c {
        Command::AllocBuffer => Request::AllocBuffer {
            device: u32_at(b, 0),
            size: u64_at(b, 4),
        },
        Command::GetAlignment => Request::GetAlignment {
            device: u32_at(b, 0),
        },
        Command::GetMaxSize => Request::GetMaxSize {
            device: u32_at(b, 0),
        },
        Command::BufferGetBase => Request::BufferGetBase {
            remote_ptr: u64_at(b, 0),
        },
        Command::FreeBuffer => Request::FreeBuffer {
            remote_ptr: u64_at(b, 0),
        },
        Command::BufferClear => Request::BufferClear {
            remote_ptr: u64_at(b, 0),
            value: b[8],
        },
        Command::SetTensor => Request::SetTensor {
            header: SetTensorHeader {
                tensor: tensor_at(b, 0),
                cache_flag: b[RPC_TENSOR_SIZE],
                offset: u64_at(b, RPC_TENSOR_SIZE + 1),
            },
            data: &b[SET_TENSOR_FIXED..],
        },
        Command::SetTensorHash => Request::SetTensorHash {
            tensor: tensor_at(b, 0),
            offset: u64_at(b, RPC_TENSOR_SIZE),
            hash: u64_at(b, RPC_TENSOR_SIZE + 8),
        },
        Command::GetTensor => Request::GetTensor {
            tensor: tensor_at(b, 0),
            offset: u64_at(b, RPC_TENSOR_SIZE),
            size: u64_at(b, RPC_TENSOR_SIZE + 8),
        },
        Command::CopyTensor => Request::CopyTensor {
            src: tensor_at(b, 0),
            dst: tensor_at(b, RPC_TENSOR_SIZE),
        },
        Command::GraphCompute => Request::GraphCompute(GraphMsg::decode(b)?),
        Command::GetDeviceMemory => Request::GetDeviceMemory {
            device: u32_at(b, 0),
        },
        Command::InitTensor => Request::InitTensor {
            tensor: tensor_at(b, 0),
        },
        Command::GetAllocSize => {
            let mut srcs = Box::new([RpcTensor::default(); MAX_SRC]);
            for (k, s) in srcs.iter_mut().enumerate() {
                *s = tensor_at(b, 4 + RPC_TENSOR_SIZE * (k + 1));
            }
            Request::GetAllocSize {
                device: u32_at(b, 0),
                tensor: tensor_at(b, 4),
                srcs,
            }
        }
        Command::Hello => {
            let mut caps = [0u8; CONN_CAPS_SIZE];
            caps.copy_from_slice(b);
            Request::Hello { caps }
        }
        Command::DeviceCount => Request::DeviceCount,
        Command::GraphRecompute => Request::GraphRecompute {
            device: u32_at(b, 0),
        },
        Command::MemsetTensor => Request::MemsetTensor {
            tensor: tensor_at(b, 0),
            offset: u64_at(b, RPC_TENSOR_SIZE),
            size: u64_at(b, RPC_TENSOR_SIZE + 8),
            value: b[RPC_TENSOR_SIZE + 16],
        },
    })
}

impl Request<'_> {
    /// The command.
    pub fn command(&self) -> Command {
        match self {
            Request::AllocBuffer { .. } => Command::AllocBuffer,
            Request::GetAlignment { .. } => Command::GetAlignment,
            Request::GetMaxSize { .. } => Command::GetMaxSize,
            Request::BufferGetBase { .. } => Command::BufferGetBase,
            Request::FreeBuffer { .. } => Command::FreeBuffer,
            Request::BufferClear { .. } => Command::BufferClear,
            Request::SetTensor { .. } => Command::SetTensor,
            Request::SetTensorHash { .. } => Command::SetTensorHash,
            Request::GetTensor { .. } => Command::GetTensor,
            Request::CopyTensor { .. } => Command::CopyTensor,
            Request::GraphCompute(_) => Command::GraphCompute,
            Request::GetDeviceMemory { .. } => Command::GetDeviceMemory,
            Request::InitTensor { .. } => Command::InitTensor,
            Request::GetAllocSize { .. } => Command::GetAllocSize,
            Request::Hello { .. } => Command::Hello,
            Request::DeviceCount => Command::DeviceCount,
            Request::GraphRecompute { .. } => Command::GraphRecompute,
            Request::MemsetTensor { .. } => Command::MemsetTensor,
        }
    }

    /// The framed message split in two: header plus fixed payload, and the
    /// bulk bytes that follow (SET_TENSOR's data, sent without copying).
    pub fn encode_parts(&self) -> (Vec<u8>, &[u8]) {
        let mut p = Vec::new();
        let mut tail: &[u8] = &[];
        match self {
            Request::AllocBuffer { device, size } => {
                p.extend_from_slice(&device.to_le_bytes());
                p.extend_from_slice(&size.to_le_bytes());
            }
            Request::GetAlignment { device }
            | Request::GetMaxSize { device }
            | Request::GetDeviceMemory { device }
            | Request::GraphRecompute { device } => p.extend_from_slice(&device.to_le_bytes()),
            Request::BufferGetBase { remote_ptr } | Request::FreeBuffer { remote_ptr } => {
                p.extend_from_slice(&remote_ptr.to_le_bytes())
            }
            Request::BufferClear { remote_ptr, value } => {
                p.extend_from_slice(&remote_ptr.to_le_bytes());
                p.push(*value);
            }
            Request::SetTensor { header, data } => {
                header.tensor.encode_into(&mut p);
                p.push(header.cache_flag);
                p.extend_from_slice(&header.offset.to_le_bytes());
                tail = data;
            }
            // a tensor, a byte offset and a u64 (the hash, the byte count;
            // MEMSET_TENSOR adds its byte value)
            Request::SetTensorHash {
                tensor,
                offset,
                hash: n,
            }
            | Request::GetTensor {
                tensor,
                offset,
                size: n,
            }
            | Request::MemsetTensor {
                tensor,
                offset,
                size: n,
                ..
            } => {
                tensor.encode_into(&mut p);
                p.extend_from_slice(&offset.to_le_bytes());
                p.extend_from_slice(&n.to_le_bytes());
                if let Request::MemsetTensor { value, .. } = self {
                    p.push(*value);
                }
            }
            Request::CopyTensor { src, dst } => {
                src.encode_into(&mut p);
                dst.encode_into(&mut p);
            }
            Request::GraphCompute(g) => g.encode_into(&mut p),
            Request::InitTensor { tensor } => tensor.encode_into(&mut p),
            Request::GetAllocSize {
                device,
                tensor,
                srcs,
            } => {
                p.extend_from_slice(&device.to_le_bytes());
                tensor.encode_into(&mut p);
                for s in srcs.iter() {
                    s.encode_into(&mut p);
                }
            }
            Request::Hello { caps } => p.extend_from_slice(caps),
            Request::DeviceCount => {}
        }
        let total = (p.len() + tail.len()) as u64;
        let mut out = Vec::with_capacity(9 + p.len());
        out.extend_from_slice(&request_header(self.command(), total));
        out.extend_from_slice(&p);
        (out, tail)
    }

    /// The whole framed message in one vector.
    pub fn encode(&self) -> Vec<u8> {
        let (mut head, tail) = self.encode_parts();
        head.extend_from_slice(tail);
        head
    }
}

/// The framed response (`size u64 | payload`) for a payload.
pub fn frame_response(payload: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(8 + payload.len());
    v.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    v.extend_from_slice(payload);
    v
}

/// Payload of a 16-byte response made of two u64 (ALLOC_BUFFER, GET_DEVICE_MEMORY).
pub fn pair_payload(a: u64, b: u64) -> [u8; 16] {
    let mut r = [0u8; 16];
    r[..8].copy_from_slice(&a.to_le_bytes());
    r[8..].copy_from_slice(&b.to_le_bytes());
    r
}

/// `b`, a response payload that must be exactly `N` bytes.
fn fixed<const N: usize>(cmd: Command, b: &[u8]) -> Result<&[u8; N], DecodeError> {
    b.try_into().map_err(|_| {
        DecodeError::new(
            Some(cmd),
            format!("response has {} bytes, expected {N}", b.len()),
        )
    })
}

/// Decodes a 16-byte two-u64 response payload.
pub fn decode_pair(cmd: Command, b: &[u8]) -> Result<(u64, u64), DecodeError> {
    let b = fixed::<16>(cmd, b)?;
    Ok((u64_at(b, 0), u64_at(b, 8)))
}

/// Decodes an 8-byte u64 response payload.
pub fn decode_u64(cmd: Command, b: &[u8]) -> Result<u64, DecodeError> {
    Ok(u64::from_le_bytes(*fixed(cmd, b)?))
}

/// Decodes a 4-byte u32 response payload (DEVICE_COUNT).
pub fn decode_u32(cmd: Command, b: &[u8]) -> Result<u32, DecodeError> {
    Ok(u32::from_le_bytes(*fixed(cmd, b)?))
}

/// Decodes a 1-byte status response (SET_TENSOR_HASH, COPY_TENSOR): 1 = yes, 0 = no.
pub fn decode_flag(cmd: Command, b: &[u8]) -> Result<bool, DecodeError> {
    match b {
        [0] => Ok(false),
        [1] => Ok(true),
        _ => Err(DecodeError::new(
            Some(cmd),
            format!("response {b:?} is not a single 0/1 byte"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Appendix B examples.
    #[test]
    fn documented_session_bytes() {
        let a = Request::AllocBuffer {
            device: 0,
            size: 1024,
        }
        .encode();
        assert_eq!(
            a,
            [0, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0, 0, 0, 0]
        );
        assert_eq!(Request::DeviceCount.encode(), [15, 0, 0, 0, 0, 0, 0, 0, 0]);
        let r = Request::GraphRecompute { device: 0 }.encode();
        assert_eq!(r, [16, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        let data = [1u8; 16];
        let s = Request::SetTensor {
            header: SetTensorHeader {
                tensor: RpcTensor::default(),
                cache_flag: 0,
                offset: 0,
            },
            data: &data,
        }
        .encode();
        assert_eq!(s.len(), 9 + 305 + 16);
        assert_eq!(u64_at(&s, 1), 321);
    }
}
