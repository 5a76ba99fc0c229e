//! `strata compare -m MODEL --device X`: the model's graph for a prompt run
//! on X and on the CPU one node at a time, with the difference of every
//! node and the first one beyond a tolerance (ggml's
//! `ggml_backend_compare_graph_backend` as a tool, for backend authors). By
//! default every node is computed on X from the CPU's inputs, so a figure
//! is that op's own error; `--chained` lets X go on from its own results as
//! ggml does. Exit status 0 when no node is beyond the tolerance.

use strata::backend::{alloc_graph, compare_graph_backend, CompareOptions};
use strata::cpu::{cpu_buffer_type, CpuBackend};
use strata_models::cells::{Cells, SeqSet};
use strata_models::context::padded_kv;
use strata_models::graph::{self, BatchShape};
use strata_models::kv::KvCache;

use crate::common::{CliResult, ModelArgs};

/// The default `--tolerance`: the NMSE one node may show when it is
/// computed from the CPU's inputs (the default, isolated mode). Measured on
/// the default model (Q4_1, 5-token prompt), the GPU backend on llvmpipe
/// against the CPU reaches 6.7e-4 at a MUL_MAT (the CPU quantizes the
/// activations to Q8, the GPU does not) and 8e-7 at FLASH_ATTN_EXT; a wrong
/// op shows ~1. With `--chained` (ggml's way: each side from its own
/// results) errors add up along the graph: 8e-3 on the same run, so give a
/// looser tolerance there (e.g. 5e-2).
pub const DEFAULT_TOLERANCE: f64 = 5e-3;

/// Arguments of `strata compare`.
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub model: ModelArgs,
    /// The prompt whose graph is compared (all its tokens in one batch).
    #[arg(short = 'p', long, default_value = "The capital of France is")]
    pub prompt: String,
    /// The largest NMSE a node may show (test-backend-ops' error measure).
    #[arg(long, default_value_t = DEFAULT_TOLERANCE, allow_negative_numbers = true)]
    pub tolerance: f64,
    /// Stop at the first node beyond the tolerance.
    #[arg(long)]
    pub stop_at_first: bool,
    /// Let the device compute each node from its own earlier results (ggml's
    /// compare_graph_backend), so errors add up along the graph; by default
    /// each node gets the CPU's inputs and its figure is its own op's error.
    #[arg(long)]
    pub chained: bool,
}

/// Checks the options that make no sense here: the model stays on the CPU
/// (it is the reference), `--device` names the one device compared.
fn target_device(m: &ModelArgs) -> Result<String, strata::Error> {
    let bad = |arg: &str, value: String, expected: &str| strata::Error::BadValue {
        arg: arg.into(),
        value,
        expected: expected.into(),
    };
    if m.ngl != 0 || !m.place.ot.is_empty() || !m.tensor_split.is_empty() {
        return Err(bad(
            "-ngl / -ot / -ts",
            format!(
                "-ngl {} -ot {:?} -ts {:?}",
                m.ngl, m.place.ot, m.tensor_split
            ),
            "none: compare keeps the model on the CPU and copies the graph to --device itself",
        ));
    }
    match m.device.as_slice() {
        [one] => Ok(one.clone()),
        more => Err(bad(
            "--device",
            format!("{more:?}"),
            "exactly one device to compare with the CPU, e.g. --device GPU0",
        )),
    }
}

/// Runs the comparison and prints the table; an error when a node differs
/// beyond the tolerance.
pub fn run(a: Args) -> CliResult {
    let device = target_device(&a.model)?;
    if a.tolerance.is_nan() || a.tolerance < 0.0 {
        return Err(strata::Error::BadValue {
            arg: "--tolerance".into(),
            value: a.tolerance.to_string(),
            expected: "an NMSE of 0 or more, e.g. 1e-3".into(),
        }
        .into());
    }
    let mut target = crate::common::device(&device)?.init_backend()?;
    let mut cpu_only = a.model.clone();
    cpu_only.device.clear();
    // the reference computes from ggml's layout, as the device receives it
    // (repacked weights round differently: NMSE ~1e-5 after 30 layers)
    cpu_only.no_repack = true;
    let model = cpu_only.load()?;
    let tokens = model.tokenizer.encode(&a.prompt, true, true)?;
    if tokens.is_empty() {
        return Err(crate::common::EMPTY_PROMPT.into());
    }
    let n = tokens.len();
    let n_kv = padded_kv(n, a.model.ctx_size.max(n));
    let kv = KvCache::new(&model, n_kv)?;
    let shape = BatchShape {
        n_tokens: n,
        n_kv,
        n_outputs: 1,
    };
    let attention = a.model.context_options(false).attention;
    let g = graph::build(&model, &kv, shape, attention)?;
    let _bufs = alloc_graph(&g.graph, &cpu_buffer_type())?;
    let ids: Vec<i32> = tokens.iter().map(|&t| t as i32).collect();
    let positions: Vec<i32> = (0..n as i32).collect();
    // causal (and windowed in sliding-window layers): token i sees cells 0..=i
    let at: Vec<(i32, SeqSet)> = positions.iter().map(|&p| (p, SeqSet::one(0))).collect();
    let mut cells = Cells::new(n_kv, 1)?;
    let slots = cells.place(&at)?;
    g.write_inputs(
        &ids,
        &positions,
        &slots,
        &[n as i32 - 1],
        &cells,
        &at,
        model.hparams.swa.as_ref(),
    )?;
    let threads = a.model.context_options(false).n_threads;
    let mut reference = CpuBackend::new(threads);
    println!(
        "compare: {} ({}) against the CPU ({threads} threads): {} nodes of the graph of a \
         {n}-token prompt, tolerance {:.1e}, {}",
        device,
        target.device().description(),
        g.graph.nodes().len(),
        a.tolerance,
        if a.chained {
            "chained (each side from its own results)"
        } else {
            "isolated (every node from the CPU's inputs)"
        }
    );
    let opts = CompareOptions {
        tolerance: a.tolerance,
        stop_at_first: a.stop_at_first,
        isolate: !a.chained,
    };
    let cmp = compare_graph_backend(&mut reference, target.as_mut(), &g.graph, &opts)?;
    print!("{}", cmp.to_text());
    cmp.check()?;
    Ok(0)
}
