//! Shared helpers for strata's integration tests: deterministic random data,
//! running a graph on the CPU, and comparing against f64 references.
#![allow(dead_code)]

pub mod attn;
pub mod matmul;
pub mod qblock;

use strata::{cpu, DType, Graph, Tensor};

/// The deterministic generator of the conformance suite.
#[allow(unused_imports)]
pub use strata::conformance::Rng;

/// A new input tensor (flag INPUT) of `dtype` and shape `dims`, named `name`.
pub fn tensor(name: &str, dtype: DType, dims: &[usize]) -> Tensor {
    let t = Tensor::new(dtype, dims).unwrap().with_name(name);
    t.set_input();
    t
}

/// FLASH_ATTN_EXT of `q`, `k`, `v` with an optional mask and sinks and
/// (scale, max_bias, softcap); the library's builder has no sinks
/// argument, so the generic constructor.
pub fn flash_attn(
    (q, k, v): (&Tensor, &Tensor, &Tensor),
    mask: Option<&Tensor>,
    sinks: Option<&Tensor>,
    (scale, max_bias, softcap): (f32, f32, f32),
) -> Tensor {
    let op = strata::ops::Op::FlashAttnExt {
        scale,
        max_bias,
        softcap,
    };
    let srcs = vec![
        Some(q.clone()),
        Some(k.clone()),
        Some(v.clone()),
        mask.cloned(),
        sinks.cloned(),
    ];
    strata::ops::make(op, srcs, None).unwrap()
}

/// Allocates the graph of `out` on the host, writes `inputs` (converted to
/// each tensor's type), computes it on `cpu` and reads `out` as f32.
pub fn compute_with(
    out: &Tensor,
    inputs: &[(&Tensor, &[f32])],
    cpu: &mut cpu::CpuBackend,
) -> Vec<f32> {
    use strata::backend::Backend;
    let g = Graph::build(std::slice::from_ref(out));
    let _bufs = cpu::alloc_graph_host(&g).unwrap();
    for (t, v) in inputs {
        write_input(t, v);
    }
    cpu.graph_compute(&g).unwrap();
    out.to_f32_vec().unwrap()
}

/// Allocates the graph of `outputs` on the CPU, writes `inputs` (converted to
/// each tensor's type), computes with `nth` threads, reads every output as f32.
pub fn run(outputs: &[Tensor], inputs: &[(&Tensor, &[f32])], nth: usize) -> Vec<Vec<f32>> {
    let g = Graph::build(outputs);
    let _bufs = cpu::alloc_graph_host(&g).unwrap();
    for (t, v) in inputs {
        write_input(t, v);
    }
    cpu::compute(&g, nth).unwrap();
    outputs.iter().map(|t| t.to_f32_vec().unwrap()).collect()
}

/// Writes `v` into allocated tensor `t`, converted to its type (I32 tensors
/// get the values truncated to integers, every other type as f32).
pub fn write_input(t: &Tensor, v: &[f32]) {
    if t.dtype() == DType::I32 {
        let ints: Vec<i32> = v.iter().map(|&x| x as i32).collect();
        t.write_i32(&ints).unwrap();
    } else {
        t.write_f32(v).unwrap();
    }
}

/// The values `v` as stored in `dtype` and read back (rounding of f16/bf16/quant).
pub fn round_trip(dtype: DType, v: &[f32]) -> Vec<f32> {
    if dtype == DType::F32 {
        return v.to_vec();
    }
    let t = Tensor::new(dtype, &[v.len()]).unwrap();
    let _b = strata::backend::alloc_tensors(&[t.clone()], &cpu::cpu_buffer_type()).unwrap();
    t.write_f32(v).unwrap();
    t.to_f32_vec().unwrap()
}

/// The values `v` as the CPU backend at level `isa` stores them in `dtype`
/// (CPY / SET_ROWS, and the activations of a MUL_MAT in the weight's dot
/// type): Q8_0 / Q8_1 through the level's own row quantizer
/// (`simd::quantize_row_fn_for`, bit-identical to ggml's reference on
/// every level today, but the kernels under test are what the CPU runs),
/// every other type as [`round_trip`].
pub fn cpu_round_trip_at(isa: strata::isa::Isa, dtype: DType, v: &[f32]) -> Vec<f32> {
    if !matches!(dtype, DType::Q8_0 | DType::Q8_1) {
        return round_trip(dtype, v);
    }
    let quantize = strata::quant::simd::quantize_row_fn_for(isa, dtype).unwrap();
    let mut q = vec![0u8; dtype.row_size(v.len())];
    quantize(v, &mut q);
    let mut out = vec![0f32; v.len()];
    strata::quant::dequantize_row(dtype, &q, &mut out).unwrap();
    out
}

/// [`cpu_round_trip_at`] at the active level.
pub fn cpu_round_trip(dtype: DType, v: &[f32]) -> Vec<f32> {
    cpu_round_trip_at(strata::isa::active(), dtype, v)
}

/// Normalized mean squared error, as ggml's test-backend-ops: sum((a-b)²) / sum(b²).
pub fn nmse(got: &[f32], want: &[f64]) -> f64 {
    assert_eq!(got.len(), want.len(), "length differs");
    let mut err = 0.0;
    let mut norm = 0.0;
    for (&g, &w) in got.iter().zip(want) {
        if g.is_infinite() && w.is_infinite() && (g > 0.0) == (w > 0.0) {
            continue;
        }
        err += (g as f64 - w) * (g as f64 - w);
        norm += w * w;
    }
    if norm == 0.0 {
        err
    } else {
        err / norm
    }
}

/// Asserts `got` matches the f64 reference within normalized error `tol`
/// and that no value is NaN where the reference is not.
pub fn assert_close(what: &str, got: &[f32], want: &[f64], tol: f64) {
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        assert!(!g.is_nan() || w.is_nan(), "{what}: NaN at {i} (want {w})");
    }
    let e = nmse(got, want);
    assert!(
        e <= tol,
        "{what}: nmse {e:e} > {tol:e}\n got[..8] {:?}\nwant[..8] {:?}",
        &got[..got.len().min(8)],
        &want[..want.len().min(8)]
    );
}
