//! The 296-byte serialized tensor (`rpc_tensor`), packed little-endian.

use super::{u32_at, u64_at, MAX_SRC};

/// Size of a serialized tensor record.
pub const RPC_TENSOR_SIZE: usize = 296;
/// Flag bit: the node must be computed (backends skip nodes without it).
pub const FLAG_COMPUTE: i32 = 16;
/// Bytes of the name field (ggml's `GGML_MAX_NAME`).
pub const NAME_SIZE: usize = 64;

/// A tensor as it travels on the wire. Values are taken verbatim; validation
/// is the server's job.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct RpcTensor {
    /// Client-chosen identity; 0 = null tensor.
    pub id: u64,
    /// ggml type id.
    pub dtype: u32,
    /// Buffer handle, or 0.
    pub buffer: u64,
    /// Elements per dimension (truncated to 32 bits on the wire).
    pub ne: [u32; 4],
    /// Byte strides (truncated to 32 bits on the wire).
    pub nb: [u32; 4],
    /// ggml op id.
    pub op: u32,
    /// Op parameters: 16 32-bit slots.
    pub op_params: [i32; 16],
    /// Flag bits ([`FLAG_COMPUTE`], INPUT 1, OUTPUT 2, ...).
    pub flags: i32,
    /// Source ids; 0 = none.
    pub src: [u64; MAX_SRC],
    /// Id of the tensor this one is a view of; 0 = none.
    pub view_src: u64,
    /// Byte offset of the view inside `view_src`.
    pub view_offs: u64,
    /// Server-side address of element 0 (`base + offset`), or 0.
    pub data: u64,
    /// NUL-terminated, zero-filled name.
    pub name: [u8; NAME_SIZE],
    /// Number of graph consumers (0 = unknown, always safe).
    pub use_count: i32,
}

impl Default for RpcTensor {
    fn default() -> RpcTensor {
        RpcTensor {
            id: 0,
            dtype: 0,
            buffer: 0,
            ne: [0; 4],
            nb: [0; 4],
            op: 0,
            op_params: [0; 16],
            flags: 0,
            src: [0; MAX_SRC],
            view_src: 0,
            view_offs: 0,
            data: 0,
            name: [0; NAME_SIZE],
            use_count: 0,
        }
    }
}

impl std::fmt::Debug for RpcTensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "RpcTensor {{ id: {:#x}, '{}', type {}, op {}, ne {:?}, nb {:?}, buffer {:#x}, data {:#x}, src {:?}, view {:#x}+{} }}",
            self.id,
            self.name_str(),
            self.dtype,
            self.op,
            self.ne,
            self.nb,
            self.buffer,
            self.data,
            self.src,
            self.view_src,
            self.view_offs
        )
    }
}

impl RpcTensor {
    /// The name up to the first NUL (at most 63 bytes, lossy UTF-8).
    pub fn name_str(&self) -> String {
        let end = self.name[..NAME_SIZE - 1]
            .iter()
            .position(|&b| b == 0)
            .unwrap_or(NAME_SIZE - 1);
        String::from_utf8_lossy(&self.name[..end]).into_owned()
    }

    /// Sets the name: at most 63 bytes (cut at a character boundary), zero-filled.
    pub fn set_name(&mut self, name: &str) {
        self.name = [0; NAME_SIZE];
        let mut end = name.len().min(NAME_SIZE - 1);
        while !name.is_char_boundary(end) {
            end -= 1;
        }
        self.name[..end].copy_from_slice(&name.as_bytes()[..end]);
    }

    /// Appends the 296-byte encoding to `out`.
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        let start = out.len();
        out.extend_from_slice(&self.id.to_le_bytes());
        out.extend_from_slice(&self.dtype.to_le_bytes());
        out.extend_from_slice(&self.buffer.to_le_bytes());
        for v in self.ne {
            out.extend_from_slice(&v.to_le_bytes());
        }
        for v in self.nb {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out.extend_from_slice(&self.op.to_le_bytes());
        for v in self.op_params {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out.extend_from_slice(&self.flags.to_le_bytes());
        for v in self.src {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out.extend_from_slice(&self.view_src.to_le_bytes());
        out.extend_from_slice(&self.view_offs.to_le_bytes());
        out.extend_from_slice(&self.data.to_le_bytes());
        out.extend_from_slice(&self.name);
        out.extend_from_slice(&self.use_count.to_le_bytes());
        debug_assert_eq!(out.len() - start, RPC_TENSOR_SIZE);
    }

    /// The 296-byte encoding.
    pub fn encode(&self) -> [u8; RPC_TENSOR_SIZE] {
        let mut v = Vec::with_capacity(RPC_TENSOR_SIZE);
        self.encode_into(&mut v);
        let mut a = [0u8; RPC_TENSOR_SIZE];
        a.copy_from_slice(&v);
        a
    }

    /// Decodes a record from exactly [`RPC_TENSOR_SIZE`] bytes (`None` for any other length).
    pub fn decode(b: &[u8]) -> Option<RpcTensor> {
        if b.len() != RPC_TENSOR_SIZE {
            return None;
        }
        let mut t = RpcTensor {
            id: u64_at(b, 0),
            dtype: u32_at(b, 8),
            buffer: u64_at(b, 12),
            op: u32_at(b, 52),
            flags: u32_at(b, 120) as i32,
            view_src: u64_at(b, 204),
            view_offs: u64_at(b, 212),
            data: u64_at(b, 220),
            use_count: u32_at(b, 292) as i32,
            ..RpcTensor::default()
        };
        for k in 0..4 {
            t.ne[k] = u32_at(b, 20 + 4 * k);
            t.nb[k] = u32_at(b, 36 + 4 * k);
        }
        for k in 0..16 {
            t.op_params[k] = u32_at(b, 56 + 4 * k) as i32;
        }
        for k in 0..MAX_SRC {
            t.src[k] = u64_at(b, 124 + 8 * k);
        }
        t.name.copy_from_slice(&b[228..228 + NAME_SIZE]);
        Some(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Appendix A of the protocol description, byte for byte.
    #[test]
    fn matches_the_documented_add_node() {
        let mut t = RpcTensor {
            id: 0x30,
            dtype: 0,
            buffer: 0xB0000,
            ne: [4, 2, 1, 1],
            nb: [4, 16, 32, 32],
            op: 2,
            flags: 16,
            data: 0x7F00_0000_1020,
            use_count: 1,
            ..RpcTensor::default()
        };
        t.src[0] = 0x10;
        t.src[1] = 0x20;
        t.set_name("c");
        let b = t.encode();
        let mut want = [0u8; RPC_TENSOR_SIZE];
        want[0x00] = 0x30;
        want[0x0e] = 0x0b;
        for (k, v) in [4u8, 2, 1, 1, 4, 16, 32, 32].iter().enumerate() {
            want[0x14 + 4 * k] = *v;
        }
        want[0x34] = 2;
        want[0x78] = 0x10;
        want[0x7c] = 0x10;
        want[0x84] = 0x20;
        want[0xdc..0xe4].copy_from_slice(&[0x20, 0x10, 0, 0, 0, 0x7f, 0, 0]);
        want[0xe4] = b'c';
        want[0x124] = 1;
        assert_eq!(b, want);
        assert_eq!(RpcTensor::decode(&b), Some(t));
        assert_eq!(t.name_str(), "c");
        assert!(RpcTensor::decode(&b[1..]).is_none());
    }

    #[test]
    fn long_and_unterminated_names() {
        let mut t = RpcTensor::default();
        t.set_name(&"é".repeat(40));
        assert_eq!(t.name_str().len(), 62);
        assert_eq!(t.name[63], 0);
        let mut b = t.encode();
        b[228..292].fill(b'x');
        assert_eq!(RpcTensor::decode(&b).unwrap().name_str(), "x".repeat(63));
    }
}
