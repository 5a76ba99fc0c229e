//! FLASH_ATTN_EXT's exponential at the edges (issue #17: soft_max and
//! FLASH_ATTN_EXT compute the same e^x; `vector_kernels.rs` checks the
//! soft_max side, and `attn::x86`'s unit tests that both use the same
//! vector exp bit for bit).

mod common;

use common::{tensor, Rng};
use strata::backend::Backend;
use strata::cpu::{alloc_graph_host, CpuBackend};
use strata::isa::Isa;
use strata::{ops, DType, Graph};

/// The levels this CPU runs, scalar first.
fn levels() -> Vec<Isa> {
    Isa::ALL.into_iter().filter(|i| i.is_supported()).collect()
}

/// The scores at the edges of the exponential (issue #17: soft_max and
/// FLASH_ATTN_EXT compute the same e^x): q = 0, so each key's score is its
/// mask value; key 0 scores 0 (the maximum) and V is the identity, so
/// output element j is `e^(s_j) / Σ e^(s_k)`. Checked against f64 on every
/// path (split-KV, one-chunk, tiled) at every level: within a few f32
/// rounding steps where e^s is normal, and within the subnormal range
/// (< 2^-126, which the vector exp flushes to 0) below it.
#[test]
fn exp_of_scores_matches_f64_at_the_edges() {
    let edges = [
        0.0f32, -1e-3, -1.0, -10.0, -50.0, -87.0, -87.3, -87.33, -87.336, -87.34, -88.0, -88.7,
        -90.0, -95.0, -100.0, -103.9, -104.0, -1e30,
    ];
    let n_kv = 512; // split-KV needs 512 keys; the rest are masked out
    let mut row = vec![f32::NEG_INFINITY; n_kv];
    row[..edges.len()].copy_from_slice(&edges);
    let total: f64 = edges.iter().map(|&s| (s as f64).exp()).sum();
    let want: Vec<f64> = (0..n_kv)
        .map(|j| row[j] as f64)
        .map(|s| if s.is_finite() { s.exp() / total } else { 0.0 })
        .collect();
    let mut rng = Rng::new(17);
    let k_vals = rng.vec(8 * n_kv, -1.0, 1.0);
    let mut eye = vec![0f32; n_kv * n_kv];
    for j in 0..n_kv {
        eye[j * n_kv + j] = 1.0;
    }
    for isa in levels() {
        for n_q in [1, 2, 64] {
            let q = tensor("q", DType::F32, &[8, n_q, 1, 1]);
            let k = tensor("k", DType::F32, &[8, n_kv, 1, 1]);
            let v = tensor("v", DType::F32, &[n_kv, n_kv, 1, 1]);
            let m = tensor("mask", DType::F32, &[n_kv, n_q]);
            let out = ops::flash_attn_ext(&q, &k, &v, Some(&m), 1.0, 0.0, 0.0).unwrap();
            let g = Graph::build(std::slice::from_ref(&out));
            let _bufs = alloc_graph_host(&g).unwrap();
            q.write_f32(&vec![0.0; 8 * n_q]).unwrap();
            k.write_f32(&k_vals).unwrap();
            v.write_f32(&eye).unwrap();
            m.write_f32(&row.repeat(n_q)).unwrap();
            let mut cpu = CpuBackend::new(2);
            cpu.set_isa(isa).unwrap();
            cpu.graph_compute(&g).unwrap();
            let got = out.to_f32_vec().unwrap();
            for (i, (&x, &w)) in got.iter().zip(want.iter().cycle()).enumerate() {
                let ok = if w >= f32::MIN_POSITIVE as f64 {
                    (x as f64 - w).abs() <= 5e-7 * w
                } else {
                    (0.0..f32::MIN_POSITIVE).contains(&x)
                };
                let s = row[i % n_kv];
                assert!(ok, "{isa} n_q={n_q}: score {s}: got {x:e}, want {w:e}");
            }
        }
    }
}
