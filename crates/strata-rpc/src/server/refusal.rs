//! [`Refusal`]: why the server refused a request (and closed the connection).
//! Each reason names the tensor, buffer or device involved; the text is what
//! the server logs and what [`SessionEnd::Refused`](super::SessionEnd) carries.

use std::fmt;

/// Why a request was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// A device index the server does not have.
    NoDevice {
        /// The index asked for.
        device: u32,
        /// Devices the server has.
        n: usize,
    },
    /// The backend of a device could not be started.
    BackendStart {
        /// The device.
        device: usize,
        /// The backend's error.
        why: String,
    },
    /// A computation failed (or was aborted).
    ComputeFailed {
        /// The device.
        device: usize,
        /// The backend's error.
        why: String,
    },
    /// GRAPH_RECOMPUTE on a device that has no stored graph.
    NoGraph {
        /// The device.
        device: usize,
    },
    /// A tensor record whose type id the server does not know.
    UnsupportedType {
        /// The tensor's name.
        tensor: String,
        /// The ggml type id received.
        dtype: u32,
    },
    /// A tensor record that cannot be a tensor here (layout, op, storage).
    BadTensor {
        /// The tensor's name.
        tensor: String,
        /// What is wrong.
        why: String,
    },
    /// A buffer handle that is not one of this connection's.
    UnknownBuffer {
        /// What referenced it.
        what: String,
        /// The handle received.
        handle: u64,
    },
    /// A tensor that must have storage has no buffer.
    NoStorage {
        /// The tensor's name.
        tensor: String,
        /// Its data pointer (nonzero: a pointer without a buffer).
        data: u64,
    },
    /// A tensor's address lies outside its buffer.
    OutsideBuffer {
        /// The tensor's name.
        tensor: String,
        /// The address received.
        data: u64,
        /// The buffer's first address.
        base: u64,
        /// One past the buffer's last address.
        end: u64,
    },
    /// A tensor's bytes run past the end of its buffer.
    PastBufferEnd {
        /// The tensor's name.
        tensor: String,
        /// The tensor's bytes.
        bytes: usize,
        /// Its offset in the buffer.
        offset: u64,
        /// The buffer's size.
        size: u64,
    },
    /// A byte range that is not inside the tensor it reads or writes.
    RangeOutsideTensor {
        /// The tensor's name.
        tensor: String,
        /// Start of the range.
        offset: u64,
        /// Length of the range.
        len: u64,
        /// The tensor's bytes.
        size: usize,
    },
    /// A graph message naming a tensor id it has no record for.
    MissingRecord {
        /// What referenced it (a node, a source, a view).
        user: String,
        /// The wire id.
        id: u64,
    },
    /// A graph message over the server's limits.
    GraphTooLarge {
        /// Nodes in the message.
        nodes: usize,
        /// Tensor records in the message.
        tensors: usize,
        /// The node limit.
        max_nodes: usize,
        /// The tensor-record limit.
        max_tensors: usize,
    },
    /// A graph message that contradicts itself or strata's shape inference.
    BadGraph(String),
    /// A request arriving where the protocol does not allow it.
    Protocol(&'static str),
    /// A backend operation (set, copy, clear, buffer allocation) failed.
    Failed(String),
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::NoDevice { device, n } => {
                write!(f, "device {device} does not exist ({n} devices)")
            }
            Refusal::BackendStart { device, why } => {
                write!(f, "cannot start a backend on device {device}: {why}")
            }
            Refusal::ComputeFailed { device, why } => {
                write!(f, "graph computation failed on device {device}: {why}")
            }
            Refusal::NoGraph { device } => write!(f, "no graph to recompute on device {device}"),
            Refusal::UnsupportedType { tensor, dtype } => write!(
                f,
                "tensor '{tensor}': type id {dtype} is not supported by this server"
            ),
            Refusal::BadTensor { tensor, why } => write!(f, "tensor '{tensor}': {why}"),
            Refusal::UnknownBuffer { what, handle } => write!(
                f,
                "{what}: buffer handle {handle:#x} is not one of this connection's"
            ),
            Refusal::NoStorage { tensor, data: 0 } => {
                write!(f, "tensor '{tensor}' has no storage on this server")
            }
            Refusal::NoStorage { tensor, data } => write!(
                f,
                "tensor '{tensor}': data pointer {data:#x} without a buffer (invalid data ptr)"
            ),
            Refusal::OutsideBuffer {
                tensor,
                data,
                base,
                end,
            } => write!(
                f,
                "tensor '{tensor}': data {data:#x} is outside its buffer [{base:#x}, {end:#x})"
            ),
            Refusal::PastBufferEnd {
                tensor,
                bytes,
                offset,
                size,
            } => write!(
                f,
                "tensor '{tensor}': {bytes} bytes at offset {offset} exceed its buffer of {size} bytes"
            ),
            Refusal::RangeOutsideTensor {
                tensor,
                offset,
                len,
                size,
            } => write!(
                f,
                "range {offset}+{len} exceeds tensor '{tensor}' of {size} bytes"
            ),
            Refusal::MissingRecord { user, id } => write!(
                f,
                "{user} references tensor id {id:#x}, which the message lacks"
            ),
            Refusal::GraphTooLarge {
                nodes,
                tensors,
                max_nodes,
                max_tensors,
            } => write!(
                f,
                "graph of {nodes} nodes / {tensors} tensors exceeds the limits {max_nodes} / {max_tensors}"
            ),
            Refusal::BadGraph(why) | Refusal::Failed(why) => f.write_str(why),
            Refusal::Protocol(why) => f.write_str(why),
        }
    }
}

impl From<strata::Error> for Refusal {
    fn from(e: strata::Error) -> Refusal {
        Refusal::Failed(e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::Refusal;

    #[test]
    fn reasons_name_what_they_refuse() {
        let r = Refusal::NoStorage {
            tensor: "x".into(),
            data: 0,
        };
        assert_eq!(r.to_string(), "tensor 'x' has no storage on this server");
        let r = Refusal::NoStorage {
            tensor: "x".into(),
            data: 0x40,
        };
        assert!(r.to_string().contains("0x40 without a buffer"), "{r}");
        let r = Refusal::UnknownBuffer {
            what: "tensor 'y'".into(),
            handle: 0x1f,
        };
        assert_eq!(
            r.to_string(),
            "tensor 'y': buffer handle 0x1f is not one of this connection's"
        );
        let r = Refusal::NoDevice { device: 3, n: 1 };
        assert_eq!(r.to_string(), "device 3 does not exist (1 devices)");
    }
}
