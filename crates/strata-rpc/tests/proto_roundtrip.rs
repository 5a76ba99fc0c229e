//! Every message type survives encode → decode unchanged, with the framing
//! and sizes of protocol 7.0.0.

use proptest::prelude::*;
use strata_rpc::proto::{
    decode_flag, decode_pair, decode_request, decode_u32, decode_u64, frame_response,
    hello_response, pair_payload, parse_request_header, Command, GraphMsg, Request, RpcTensor,
    SetTensorHeader, MAX_SRC, RPC_TENSOR_SIZE,
};

fn tensor(seed: u64) -> RpcTensor {
    let mut t = RpcTensor {
        id: seed,
        dtype: (seed % 31) as u32,
        buffer: seed.wrapping_mul(31),
        ne: [1, 2, 3, (seed % 7) as u32],
        nb: [4, 8, 24, 72],
        op: (seed % 101) as u32,
        flags: 16,
        view_src: seed ^ 5,
        view_offs: seed << 3,
        data: seed.wrapping_mul(0x1000),
        use_count: 2,
        ..RpcTensor::default()
    };
    t.op_params[3] = -(seed as i32);
    t.src[9] = seed + 1;
    t.set_name(&format!("t{seed}"));
    t
}

fn all_requests(data: &[u8]) -> Vec<Request<'_>> {
    let mut srcs = Box::new([RpcTensor::default(); MAX_SRC]);
    srcs[2] = tensor(9);
    vec![
        Request::AllocBuffer {
            device: 1,
            size: 1 << 40,
        },
        Request::GetAlignment { device: 2 },
        Request::GetMaxSize { device: 3 },
        Request::BufferGetBase {
            remote_ptr: 0xdead_beef,
        },
        Request::FreeBuffer { remote_ptr: 7 },
        Request::BufferClear {
            remote_ptr: 8,
            value: 0x5a,
        },
        Request::SetTensor {
            header: SetTensorHeader {
                tensor: tensor(1),
                cache_flag: 1,
                offset: 12,
            },
            data,
        },
        Request::SetTensorHash {
            tensor: tensor(2),
            offset: 3,
            hash: 0x88d6_ce57_89d3_5325,
        },
        Request::GetTensor {
            tensor: tensor(3),
            offset: 4,
            size: 5,
        },
        Request::CopyTensor {
            src: tensor(4),
            dst: tensor(5),
        },
        Request::GraphCompute(GraphMsg {
            device: 1,
            nodes: vec![6, 7],
            tensors: vec![tensor(6), tensor(7), tensor(8)],
        }),
        Request::GetDeviceMemory { device: 4 },
        Request::InitTensor { tensor: tensor(10) },
        Request::GetAllocSize {
            device: 5,
            tensor: tensor(11),
            srcs,
        },
        Request::Hello { caps: [3; 24] },
        Request::DeviceCount,
        Request::GraphRecompute { device: 6 },
        Request::MemsetTensor {
            tensor: tensor(12),
            offset: 13,
            size: 14,
            value: 15,
        },
    ]
}

#[test]
fn every_request_round_trips() {
    let data: Vec<u8> = (0..100).collect();
    let reqs = all_requests(&data);
    let mut seen = std::collections::HashSet::new();
    for r in &reqs {
        let bytes = r.encode();
        let head: [u8; 9] = bytes[..9].try_into().unwrap();
        let (cmd, size) = parse_request_header(&head);
        assert_eq!(cmd, r.command() as u8);
        assert_eq!(size as usize, bytes.len() - 9, "{}", r.command());
        if let Some(n) = r.command().request_size() {
            assert_eq!(size as usize, n, "{}", r.command());
        }
        let back = decode_request(cmd, &bytes[9..]).unwrap();
        assert_eq!(&back, r);
        // header + bulk split gives the same bytes
        let (h, tail) = r.encode_parts();
        assert_eq!([h, tail.to_vec()].concat(), bytes);
        seen.insert(r.command());
    }
    assert_eq!(
        seen.len(),
        Command::ALL.len(),
        "a command is missing from the test"
    );
    // graph size: 12 + 8n + 296m
    let g = &reqs[10];
    assert_eq!(g.encode().len(), 9 + 12 + 16 + 3 * RPC_TENSOR_SIZE);
}

#[test]
fn every_response_round_trips() {
    let p = pair_payload(1 << 50, 17);
    assert_eq!(
        decode_pair(Command::AllocBuffer, &p).unwrap(),
        (1 << 50, 17)
    );
    assert_eq!(
        decode_u64(Command::GetAlignment, &64u64.to_le_bytes()).unwrap(),
        64
    );
    assert_eq!(
        decode_u32(Command::DeviceCount, &3u32.to_le_bytes()).unwrap(),
        3
    );
    assert!(decode_flag(Command::CopyTensor, &[1]).unwrap());
    assert!(!decode_flag(Command::SetTensorHash, &[0]).unwrap());
    assert!(decode_flag(Command::SetTensorHash, &[2]).is_err());
    assert!(decode_pair(Command::GetDeviceMemory, &p[..15]).is_err());
    assert!(decode_u64(Command::GetMaxSize, &[0; 9]).is_err());
    assert!(decode_u32(Command::DeviceCount, &[0; 8]).is_err());
    let f = frame_response(&hello_response());
    assert_eq!(&f[..12], &[28, 0, 0, 0, 0, 0, 0, 0, 7, 0, 0, 0]);
    assert_eq!(f.len(), 8 + 28);
    // every command's response size
    for c in Command::ALL {
        match c.response_size() {
            None => assert!(matches!(
                c,
                Command::FreeBuffer
                    | Command::BufferClear
                    | Command::SetTensor
                    | Command::GraphCompute
                    | Command::InitTensor
                    | Command::GraphRecompute
                    | Command::MemsetTensor
            )),
            Some(None) => assert_eq!(c, Command::GetTensor),
            Some(Some(n)) => assert!(n > 0),
        }
    }
}

proptest! {
    #[test]
    fn any_tensor_record_round_trips(
        id in any::<u64>(), dtype in any::<u32>(), buffer in any::<u64>(),
        ne in any::<[u32; 4]>(), nb in any::<[u32; 4]>(), op in any::<u32>(),
        params in any::<[i32; 16]>(), flags in any::<i32>(), src in any::<[u64; 10]>(),
        view in any::<(u64, u64)>(), data in any::<u64>(), name in "[a-z_.0-9]{0,70}", uc in any::<i32>(),
    ) {
        let mut t = RpcTensor { id, dtype, buffer, ne, nb, op, op_params: params, flags, src,
            view_src: view.0, view_offs: view.1, data, use_count: uc, ..RpcTensor::default() };
        t.set_name(&name);
        let b = t.encode();
        prop_assert_eq!(RpcTensor::decode(&b), Some(t));
        prop_assert_eq!(t.name_str(), name.chars().take(63).collect::<String>());
    }
}
