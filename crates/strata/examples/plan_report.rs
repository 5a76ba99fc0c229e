//! Memory-planner report on SmolLM2-135M-shaped llama graphs: peak and
//! live-set lower bound of the compute buffer for ggml's online best fit and
//! the offline greedy-by-size strategy, next to llama.cpp's CPU compute
//! buffer sizes for the same model.
//!
//! `cargo run --release --example plan_report`

#[path = "shapes/llama.rs"]
mod llama;

use strata::alloc::{Planner, Strategy};
use strata::cpu::cpu_buffer_type;

fn mib(b: usize) -> f64 {
    b as f64 / (1024.0 * 1024.0)
}

/// llama.cpp's CPU compute buffer (MiB) for n_ubatch 512: (n_ctx, flash on, flash off).
const LLAMA_CPP: [(usize, f64, f64); 3] = [
    (512, 98.25, 98.25),
    (2048, 102.51, 99.38),
    (8192, 98.25, 166.38),
];

fn main() -> strata::Result<()> {
    let hp = llama::SMOLLM2_135M;
    println!("SmolLM2-135M shapes ({hp:?}), f16 KV cache, CPU buffer type (64-byte alignment)");
    println!();
    println!("| batch | n_ctx | flash attn | nodes | best fit peak | greedy-by-size peak | lower bound | best fit / LB | greedy / LB | llama.cpp |");
    println!("|---|---|---|---|---|---|---|---|---|---|");
    let cases = [
        (512, 512),
        (512, 2048),
        (512, 8192),
        (1, 512),
        (1, 2048),
        (1, 8192),
    ];
    for (n_tokens, n_ctx) in cases {
        for flash in [true, false] {
            let g = llama::build(hp, n_tokens, n_ctx, flash)?;
            assert_eq!(g.logits.ne(), [hp.n_vocab, n_tokens, 1, 1]);
            let ext = |t: &strata::Tensor| g.external.contains(&t.id());
            let mut row = Vec::new();
            for s in [Strategy::BestFit, Strategy::GreedyBySize] {
                let planner = Planner::new(&[cpu_buffer_type()])?.with_strategy(s);
                let t0 = std::time::Instant::now();
                let plan = planner.plan_n(&g.graph, None, None, &ext)?;
                eprintln!(
                    "{s}: planned {} nodes in {:?}",
                    g.graph.nodes().len(),
                    t0.elapsed()
                );
                row.push((plan.buffers()[0].peak, plan.buffers()[0].lower_bound));
            }
            assert_eq!(
                row[0].1, row[1].1,
                "the lower bound does not depend on the strategy"
            );
            let lb = row[0].1;
            let reference = LLAMA_CPP
                .iter()
                .find(|r| r.0 == n_ctx && n_tokens == 512)
                .map_or("–".to_string(), |r| {
                    format!("{:.2} MiB", if flash { r.1 } else { r.2 })
                });
            println!(
                "| {n_tokens} | {n_ctx} | {} | {} | {:.2} MiB | {:.2} MiB | {:.2} MiB | {:.3} | {:.3} | {reference} |",
                if flash { "on" } else { "off" },
                g.graph.nodes().len(),
                mib(row[0].0),
                mib(row[1].0),
                mib(lb),
                row[0].0 as f64 / lb as f64,
                row[1].0 as f64 / lb as f64,
            );
        }
    }
    Ok(())
}
