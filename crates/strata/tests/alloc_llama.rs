//! The memory planner on SmolLM2-135M-shaped llama graphs (the shapes of the
//! plan_report example): the default strategy stays within 5 % of the
//! live-set lower bound and below llama.cpp's CPU compute buffer.

#[path = "../examples/shapes/llama.rs"]
#[allow(dead_code)]
mod llama;

use strata::alloc::{Planner, Strategy};
use strata::cpu::cpu_buffer_type;

const MIB: f64 = 1024.0 * 1024.0;

#[test]
fn default_strategy_meets_the_targets() {
    assert_eq!(Strategy::default(), Strategy::GreedyBySize);
    // llama.cpp b11312, CPU, n_ubatch 512: (n_ctx, flash on, flash off) MiB
    let llama_cpp = [
        (512, 98.25, 98.25),
        (2048, 102.51, 99.38),
        (8192, 98.25, 166.38),
    ];
    for (n_ctx, on, off) in llama_cpp {
        for (flash, reference) in [(true, on), (false, off)] {
            let g = llama::build(llama::SMOLLM2_135M, 512, n_ctx, flash).unwrap();
            let ext = |t: &strata::Tensor| g.external.contains(&t.id());
            let mut peaks = Vec::new();
            for s in [Strategy::GreedyBySize, Strategy::BestFit] {
                let p = Planner::new(&[cpu_buffer_type()])
                    .unwrap()
                    .with_strategy(s)
                    .plan_n(&g.graph, None, None, &ext)
                    .unwrap();
                let b = &p.buffers()[0];
                // the logits alone are 512 x 49152 x 4 bytes, kept to the end
                assert!(b.lower_bound >= 512 * 49152 * 4);
                assert!(b.peak >= b.lower_bound);
                peaks.push((b.peak, b.lower_bound));
            }
            let (peak, lb) = peaks[0];
            let what = format!("n_ctx {n_ctx} flash {flash}");
            assert!(peak as f64 <= 1.05 * lb as f64, "{what}: {peak} vs {lb}");
            assert!(
                peak as f64 / MIB <= reference,
                "{what}: {} MiB",
                peak as f64 / MIB
            );
            assert!(peak <= peaks[1].0, "{what}: greedy worse than best fit");
        }
    }
}
