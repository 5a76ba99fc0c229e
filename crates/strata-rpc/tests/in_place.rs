//! ggml clients send in-place ops (`ggml_scale_inplace`, `ggml_rope_inplace`
//! in test-backend-ops) as views of their first source with its strides: the
//! server accepts them when the layout is exactly the source's and computes
//! over the source's memory.

mod common;

use std::sync::Arc;

use strata::backend::{alloc_tensors, Registry};
use strata::ops::{self, Op, RopeMode, RopeParams};
use strata::{DType, Graph, Tensor};
use strata_rpc::server::Limits;
use strata_rpc::RpcProvider;

#[test]
fn in_place_ops_over_strided_sources_match_the_cpu() {
    let (addr, _server) = common::cpu_server(2, Limits::default());
    let mut reg = Registry::with_defaults();
    reg.register(Arc::new(RpcProvider::new()));
    let name = format!("RPC[{addr}]");
    let run = |remote: bool| -> Vec<f32> {
        let x = Tensor::new(DType::F32, &[8, 3, 4]).unwrap().with_name("x");
        let pos = Tensor::new(DType::I32, &[4]).unwrap().with_name("pos");
        // a permuted view [8, 4, 3] of x, then RoPE and SCALE in place over it
        let p = ops::permute(&x, [0, 2, 1, 3]).unwrap();
        let v = ops::view_3d(&x, [8, 3, 4], x.nb()[1], x.nb()[2], 0).unwrap();
        let r = ops::make_inplace(
            Op::Rope(RopeParams::new(8, RopeMode::Neox, 10000.0)),
            vec![Some(v), Some(pos.clone())],
        )
        .unwrap();
        let s = ops::make_inplace(
            Op::Scale {
                scale: 0.5,
                bias: 0.25,
            },
            vec![Some(p)],
        )
        .unwrap();
        let out = ops::add(
            &ops::cont(&r).unwrap(),
            &ops::cont(&ops::permute(&s, [0, 2, 1, 3]).unwrap()).unwrap(),
        )
        .unwrap();
        let g = Graph::build(&[out.clone()]);
        let all: Vec<Tensor> = g.leafs().iter().chain(g.nodes()).cloned().collect();
        let (buft, mut backend) = if remote {
            let b = reg.backend(&name).unwrap();
            (b.default_buffer_type(), b)
        } else {
            (strata::cpu::cpu_buffer_type(), reg.backend("CPU").unwrap())
        };
        let _bufs = alloc_tensors(&all, &buft).unwrap();
        x.write_f32(&(0..96).map(|i| (i as f32 * 0.37).sin()).collect::<Vec<_>>())
            .unwrap();
        pos.write_i32(&[3, 17, 40, 2]).unwrap();
        backend.graph_compute(&g).unwrap();
        out.to_f32_vec().unwrap()
    };
    let local = run(false);
    let remote = run(true);
    assert_eq!(local, remote);
}
