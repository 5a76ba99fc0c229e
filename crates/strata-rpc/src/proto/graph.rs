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
        Ok(GraphView::parse(b)?.to_msg())
    }
}

/// A GRAPH_COMPUTE payload read in place: node ids and tensor records are
/// decoded when asked for, so a received graph costs no second copy of its
/// payload (the server's way to read graphs).
#[derive(Clone, Copy, Debug)]
pub struct GraphView<'a> {
    /// Device index on the server.
    pub device: u32,
    nodes: &'a [u8],
    tensors: &'a [u8],
}

impl<'a> GraphView<'a> {
    /// Checks the counts against the payload's length. Bytes after the last
    /// record are ignored, as ggml does.
    pub fn parse(b: &'a [u8]) -> Result<GraphView<'a>, DecodeError> {
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
        Ok(GraphView {
            device,
            nodes: &b[8..(tensors_at - 4) as usize],
            tensors: &b[tensors_at as usize..end as usize],
        })
    }

    /// Number of nodes.
    pub fn n_nodes(&self) -> usize {
        self.nodes.len() / 8
    }

    /// Id of node `i` (< [`GraphView::n_nodes`]).
    pub fn node(&self, i: usize) -> u64 {
        u64_at(self.nodes, 8 * i)
    }

    /// Node ids in execution order.
    pub fn nodes(&self) -> impl Iterator<Item = u64> + '_ {
        (0..self.n_nodes()).map(|i| self.node(i))
    }

    /// Number of tensor records.
    pub fn n_tensors(&self) -> usize {
        self.tensors.len() / RPC_TENSOR_SIZE
    }

    /// Id of record `i` without decoding the rest of it.
    pub fn tensor_id(&self, i: usize) -> u64 {
        u64_at(self.tensors, RPC_TENSOR_SIZE * i)
    }

    /// Record `i` (< [`GraphView::n_tensors`]), decoded.
    pub fn tensor(&self, i: usize) -> RpcTensor {
        let off = RPC_TENSOR_SIZE * i;
        RpcTensor::decode(&self.tensors[off..off + RPC_TENSOR_SIZE]).expect("length checked")
    }

    /// The owned message.
    pub fn to_msg(&self) -> GraphMsg {
        GraphMsg {
            device: self.device,
            nodes: self.nodes().collect(),
            tensors: (0..self.n_tensors()).map(|i| self.tensor(i)).collect(),
        }
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
        let v = GraphView::parse(&b).unwrap();
        assert_eq!((v.device, v.n_nodes(), v.n_tensors()), (0, 1, 3));
        assert_eq!((v.node(0), v.tensor_id(2)), (3, 3));
        assert_eq!(v.tensor(1), g.tensors[1]);
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
