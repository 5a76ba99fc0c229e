//! The seed program (ggml's `simple-backend`), on strata's CPU backend:
//! a mul_mat of A (4×2) and B (3×2) — ggml semantics, so the result is
//! (A·Bᵀ)ᵀ, printed transposed as ggml's example does — then two ADDs with
//! tensors C and D that live in a second buffer.
//!
//! Run: `cargo run --release --example simple_backend`

use std::sync::Arc;

use strata::backend::{alloc_tensors, Backend, Buffer, BufferUsage};
use strata::cpu::{cpu_buffer_type, CpuBackend};
use strata::{ops, DType, Graph, Result, Tensor};

const ROWS_A: usize = 4;
const COLS_A: usize = 2;
const MATRIX_A: [f32; ROWS_A * COLS_A] = [2.0, 8.0, 5.0, 1.0, 4.0, 2.0, 8.0, 6.0];
const ROWS_B: usize = 3;
const COLS_B: usize = 2;
const MATRIX_B: [f32; ROWS_B * COLS_B] = [10.0, 5.0, 9.0, 9.0, 5.0, 4.0];

/// What the example computes, for printing and for its test.
struct Run {
    result: Vec<f32>,
    graph: Graph,
    buffers: Vec<(String, Arc<dyn Buffer>)>,
}

fn run(n_threads: usize) -> Result<Run> {
    // Weights-like tensors A, B in one buffer...
    let a = Tensor::new(DType::F32, &[COLS_A, ROWS_A])?.with_name("a");
    let b = Tensor::new(DType::F32, &[COLS_B, ROWS_B])?.with_name("b");
    // ...and C, D (shaped like the mul_mat result, [ROWS_A, ROWS_B]) in a second one.
    let c = Tensor::new(DType::F32, &[ROWS_A, ROWS_B])?.with_name("c");
    let d = Tensor::new(DType::F32, &[ROWS_A, ROWS_B])?.with_name("d");

    // Writing before allocation is the seeds' bug 1: here a typed error, not an abort.
    let err = c.write_f32(&[0.0; ROWS_A * ROWS_B]).unwrap_err();
    assert!(err.to_string().contains("has no buffer"), "{err}");

    let buft = cpu_buffer_type();
    let buf_ab = alloc_tensors(&[a.clone(), b.clone()], &buft)?.remove(0);
    let buf_cd = alloc_tensors(&[c.clone(), d.clone()], &buft)?.remove(0);
    buf_ab.set_usage(BufferUsage::Weights);
    a.write_f32(&MATRIX_A)?;
    b.write_f32(&MATRIX_B)?;
    c.write_f32(&(1..=12).map(|x| x as f32).collect::<Vec<_>>())?;
    d.write_f32(&[0.5; ROWS_A * ROWS_B])?;

    let mm = ops::mul_mat(&a, &b)?.with_name("mul_mat_0");
    let add0 = ops::add(&mm, &c)?.with_name("add_0");
    let add1 = ops::add(&add0, &d)?.with_name("add_1");
    add1.set_output();
    let graph = Graph::build(&[add1.clone()]);

    // Intermediate results in a third buffer.
    let buf_nodes = alloc_tensors(graph.nodes(), &buft)?.remove(0);
    buf_nodes.set_usage(BufferUsage::Compute);

    let mut cpu = CpuBackend::new(n_threads);
    cpu.graph_compute(&graph)?;
    Ok(Run {
        result: add1.to_f32_vec()?,
        graph,
        buffers: vec![
            ("weights".into(), buf_ab),
            ("inputs".into(), buf_cd),
            ("compute".into(), buf_nodes),
        ],
    })
}

fn buffer_label(run: &Run, t: &Tensor) -> String {
    let Some(buf) = t.buffer() else {
        return "(no buffer)".into();
    };
    let st = t.storage().expect("allocated");
    run.buffers
        .iter()
        .find(|(_, b)| Arc::ptr_eq(b, &buf))
        .map_or_else(
            || buf.name(),
            |(n, b)| format!("{} buffer '{n}' ({:?}) +{}", b.name(), b.usage(), st.offset),
        )
}

fn main() -> Result<()> {
    let run = run(strata::cpu::default_threads())?;
    println!("mul mat ({ROWS_A} x {ROWS_B}) + c + d (transposed result, ggml layout):");
    for j in 0..ROWS_B {
        let row: Vec<String> = (0..ROWS_A)
            .map(|i| format!("{:.2}", run.result[j * ROWS_A + i]))
            .collect();
        println!("  [ {} ]", row.join(" "));
    }
    println!(
        "\ngraph: {} nodes, {} leafs",
        run.graph.nodes().len(),
        run.graph.leafs().len()
    );
    for (i, t) in run.graph.nodes().iter().enumerate() {
        let srcs: Vec<String> = t.srcs().map(|s| s.name()).collect();
        println!(
            "  node {i}: {:<10} {:<8} {:?} <- [{}]  in {}",
            t.name(),
            t.op().name(),
            &t.ne()[..2],
            srcs.join(", "),
            buffer_label(&run, t)
        );
    }
    for (i, t) in run.graph.leafs().iter().enumerate() {
        println!(
            "  leaf {i}: {:<10} {:?}  in {}",
            t.name(),
            &t.ne()[..2],
            buffer_label(&run, t)
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seed_numbers() {
        // ggml's simple example prints this mul_mat result (transposed):
        // [ 60 55 50 110 ; 90 54 54 126 ; 42 29 28 64 ]; C adds 1..12, D adds 0.5.
        let mm = [
            60.0, 55.0, 50.0, 110.0, 90.0, 54.0, 54.0, 126.0, 42.0, 29.0, 28.0, 64.0,
        ];
        for n_threads in 1..=3 {
            let run = run(n_threads).unwrap();
            let want: Vec<f32> = mm
                .iter()
                .enumerate()
                .map(|(i, v)| v + (i + 1) as f32 + 0.5)
                .collect();
            assert_eq!(run.result, want, "{n_threads} threads");
            assert_eq!(run.graph.nodes().len(), 3);
            assert_eq!(run.graph.leafs().len(), 4);
            for t in run.graph.nodes().iter().chain(run.graph.leafs()) {
                assert!(t.is_allocated(), "{}", t.name());
            }
        }
    }
}
