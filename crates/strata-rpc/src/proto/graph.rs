//! GRAPH_COMPUTE payload: `device u32 | n_nodes u32 | node ids u64[n] |
//! n_tensors u32 | rpc_tensor[m]`.

use super::{u32_at, u64_at, Command, DecodeError, RpcTensor, RPC_TENSOR_SIZE};

/// A serialized graph: node ids in execution order and every tensor record
/// the nodes reference (directly or through sources and view bases).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GraphMsg {
    /// Device index on the server.
    pub device: u32,
    /// Ids of the nodes, in execution order.
    pub nodes: Vec<u64>,
    /// Every tensor needed, each once.
    pub tensors: Vec<RpcTensor>,
}

impl GraphMsg {
    /// Payload size of this message.
    pub fn encoded_len(&self) -> usize {
        12 + 8 * self.nodes.len() + RPC_TENSOR_SIZE * self.tensors.len()
    }

    /// Appends the payload to `out`.
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        out.reserve(self.encoded_len());
        out.extend_from_slice(&self.device.to_le_bytes());
        out.extend_from_slice(&(self.nodes.len() as u32).to_le_bytes());
        for id in &self.nodes {
            out.extend_from_slice(&id.to_le_bytes());
        }
        out.extend_from_slice(&(self.tensors.len() as u32).to_le_bytes());
        for t in &self.tensors {
            t.encode_into(out);
        }
    }

    /// Decodes a payload. Bytes after the last record are ignored, as ggml does.
    pub fn decode(b: &[u8]) -> Result<GraphMsg, DecodeError> {
        let err = |msg: String| DecodeError::new(Some(Command::GraphCompute), msg);
        if b.len() < 8 {
            return Err(err(format!(
                "payload has {} bytes, at least 8 needed",
                b.len()
            )));
        }
        let device = u32_at(b, 0);
        let n = u32_at(b, 4) as u64;
        let len = b.len() as u64;
        let tensors_at = 12 + 8 * n; // < 2^36: no overflow
        if len < tensors_at {
            return Err(err(format!(
                "{n} node ids need {tensors_at} bytes, payload has {len}"
            )));
        }
        let m = u32_at(b, (tensors_at - 4) as usize) as u64;
        let end = tensors_at + RPC_TENSOR_SIZE as u64 * m;
        if len < end {
            return Err(err(format!(
                "{m} tensor records need {end} bytes, payload has {len}"
            )));
        }
        let nodes = (0..n as usize).map(|i| u64_at(b, 8 + 8 * i)).collect();
        let tensors = (0..m as usize)
            .map(|i| {
                let off = tensors_at as usize + RPC_TENSOR_SIZE * i;
                RpcTensor::decode(&b[off..off + RPC_TENSOR_SIZE]).expect("length checked")
            })
            .collect();
        Ok(GraphMsg {
            device,
            nodes,
            tensors,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_add_node_is_908_bytes_and_round_trips() {
        let mut g = GraphMsg {
            device: 0,
            nodes: vec![3],
            tensors: vec![RpcTensor::default(); 3],
        };
        for (i, t) in g.tensors.iter_mut().enumerate() {
            t.id = i as u64 + 1;
        }
        let mut b = Vec::new();
        g.encode_into(&mut b);
        assert_eq!(b.len(), 908);
        assert_eq!(g.encoded_len(), 908);
        assert_eq!(&b[4..8], &[1, 0, 0, 0]);
        assert_eq!(&b[16..20], &[3, 0, 0, 0]);
        assert_eq!(GraphMsg::decode(&b).unwrap(), g);
        b.extend_from_slice(&[9; 5]);
        assert_eq!(GraphMsg::decode(&b).unwrap(), g);
        assert!(GraphMsg::decode(&b[..907]).is_err());
        assert!(GraphMsg::decode(&b[..7]).is_err());
        let mut huge = b.clone();
        huge[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(GraphMsg::decode(&huge).is_err());
        g.tensors.clear();
        b.clear();
        g.nodes.clear();
        g.encode_into(&mut b);
        assert_eq!(GraphMsg::decode(&b).unwrap(), g);
        let _ = &mut g;
    }
}
