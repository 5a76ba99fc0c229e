//! The matmuls' cache blocking ([`Blocking`], from the cache sizes detected
//! at run time or set with `CpuBackend::set_cache_sizes`) only groups work:
//! the float GEMM's column passes and the packed quantized matmul's column
//! blocks change with the sizes, and every output keeps its bits. Checked
//! at every level this CPU runs, on 1 and 2 threads, for a Xeon's 2 MiB L2
//! (the blocking tuned on it), Zen 3's 512 KiB and caches small enough to
//! give one panel a pass.

use std::sync::Arc;

use strata::backend::{alloc_tensors, Backend, Buffer};
use strata::conformance::Rng;
use strata::cpu::{alloc_graph_host, packed_buffer_type, CpuBackend};
use strata::isa::cache::{Blocking, CacheSizes};
use strata::isa::Isa;
use strata::{ops, DType, Graph, Tensor};

const ZEN3: CacheSizes = CacheSizes {
    l1d: 32 << 10,
    l2: 512 << 10,
    l3: 32 << 20,
};

/// One panel a pass for the float GEMM, the smallest packed column block.
const TINY: CacheSizes = CacheSizes {
    l1d: 4 << 10,
    l2: 8 << 10,
    l3: 64 << 10,
};

const SIZES: [CacheSizes; 3] = [CacheSizes::DEFAULT, ZEN3, TINY];

/// `a` [k, m] (packed when `packed`) × `b` [k, n] F32 on the CPU at `isa`
/// with `nth` threads blocking for `caches`; every output's bits.
fn product(
    at: DType,
    (k, m, n): (usize, usize, usize),
    packed: bool,
    isa: Isa,
    nth: usize,
    caches: CacheSizes,
) -> Vec<u32> {
    let mut rng = Rng::new(5);
    let a = Tensor::new(at, &[k, m]).unwrap();
    let mut bufs: Vec<Arc<dyn Buffer>> = Vec::new();
    if packed {
        bufs.extend(
            alloc_tensors(std::slice::from_ref(&a), &packed_buffer_type())
                .unwrap()
                .into_vec(),
        );
    }
    let b = Tensor::new(DType::F32, &[k, n]).unwrap();
    let out = ops::mul_mat(&a, &b).unwrap();
    let g = Graph::build(&[out.clone()]);
    bufs.extend(alloc_graph_host(&g).unwrap());
    a.write_f32(&rng.vec(k * m, -1.0, 1.0)).unwrap();
    b.write_f32(&rng.vec(k * n, -1.0, 1.0)).unwrap();
    let mut cpu = CpuBackend::new(nth);
    cpu.set_isa(isa).unwrap();
    cpu.set_cache_sizes(caches);
    assert_eq!(cpu.cache_sizes(), caches);
    cpu.graph_compute(&g).unwrap();
    let bits = out
        .to_f32_vec()
        .unwrap()
        .iter()
        .map(|x| x.to_bits())
        .collect();
    drop(bufs);
    bits
}

fn levels() -> Vec<Isa> {
    Isa::ALL.into_iter().filter(|i| i.is_supported()).collect()
}

/// Every (level, threads, sizes) gives the bits of the first.
fn same_bits(what: &str, f: impl Fn(Isa, usize, CacheSizes) -> Vec<u32>) {
    for isa in levels() {
        let want = f(isa, 1, CacheSizes::DEFAULT);
        for nth in [1, 2] {
            for c in SIZES {
                assert!(
                    f(isa, nth, c) == want,
                    "{what} at {isa}, {nth} threads, caches {c}: bits differ from 2 MiB L2"
                );
            }
        }
    }
}

#[test]
fn float_gemm_bits_do_not_depend_on_the_column_passes() {
    // The shapes run several passes with the small sizes: K = 576 has K
    // blocks of 192 (Zen 3: 56 panels a pass), K = 300 two of 150 (the
    // passes of the second K block add to the first's tiles).
    let tiny = Blocking::for_caches(TINY);
    assert_eq!(tiny.gemm_pass_panels(150, 6), 1);
    for at in [DType::F16, DType::BF16, DType::F32] {
        for (k, m, n) in [(300, 50, 37), (576, 64, 400)] {
            same_bits(&format!("{at} {k}x{m}x{n}"), |isa, nth, c| {
                product(at, (k, m, n), false, isa, nth, c)
            });
        }
    }
}

#[test]
fn packed_bits_do_not_depend_on_the_column_blocks() {
    // Q8_0 K = 256: 320 bytes of prepared activations a column; 300 columns
    // are one block with 2 MiB of L2 (256 KiB), two with Zen 3's (64 KiB),
    // three with the smallest (32 KiB).
    for at in [DType::Q8_0, DType::Q4_0] {
        same_bits(&format!("packed {at}"), |isa, nth, c| {
            product(at, (256, 32, 300), true, isa, nth, c)
        });
    }
}

#[test]
fn the_backend_blocks_for_the_detected_sizes_by_default() {
    let cpu = CpuBackend::new(1);
    assert_eq!(cpu.cache_sizes(), strata::isa::cache::detected());
}
