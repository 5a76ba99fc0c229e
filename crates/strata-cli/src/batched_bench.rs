//! `strata batched-bench`: llama-batched-bench's measurement of many
//! sequences decoded together. For each prompt length PP, generation length
//! TG and sequence count B: the B prompts in one batch (or one prompt
//! shared by all with `--pps`), then TG steps that each decode the next
//! token of every sequence in one batch. Its table has llama-batched-bench's
//! columns and meanings.

use std::time::Instant;

use strata_models::{Batch, Context, SeqId};

use crate::common::{CliResult, ModelArgs};

/// Arguments of `strata batched-bench`.
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Prompt lengths (comma-separated).
    #[arg(long = "npp", value_delimiter = ',', default_value = "128")]
    pub npp: Vec<usize>,
    /// Generation lengths (comma-separated).
    #[arg(long = "ntg", value_delimiter = ',', default_value = "128")]
    pub ntg: Vec<usize>,
    /// Numbers of sequences decoded together (comma-separated).
    #[arg(long = "npl", value_delimiter = ',', default_value = "1,2,4,8,16,32")]
    pub npl: Vec<usize>,
    /// One prompt shared by every sequence (computed once, then shared with seq_cp).
    #[arg(long = "pps")]
    pub pps: bool,
    /// Attention as llama.cpp chooses it (tiled prompts, split-KV decode)
    /// instead of the batch-invariant two-pass path.
    #[arg(long = "no-batch-invariant")]
    pub no_batch_invariant: bool,
    /// Print JSON lines instead of the table.
    #[arg(long)]
    pub json: bool,
}

/// Cells a test needs (llama-batched-bench's `n_ctx_req`).
pub fn cells_needed(pp: usize, tg: usize, pl: usize, shared: bool) -> usize {
    if shared {
        pp + pl * tg
    } else {
        pl * (pp + tg)
    }
}

/// One line of the table.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    /// Prompt length.
    pub pp: usize,
    /// Generation length.
    pub tg: usize,
    /// Sequences.
    pub pl: usize,
    /// Cells used (`N_KV`).
    pub n_kv: usize,
    /// Prompt seconds.
    pub t_pp: f64,
    /// Generation seconds.
    pub t_tg: f64,
    /// Prompts shared.
    pub shared: bool,
}

impl Row {
    /// Prompt tokens per second.
    pub fn s_pp(&self) -> f64 {
        let n = if self.shared {
            self.pp
        } else {
            self.pl * self.pp
        };
        n as f64 / self.t_pp
    }
    /// Generated tokens per second.
    pub fn s_tg(&self) -> f64 {
        (self.pl * self.tg) as f64 / self.t_tg
    }
    /// Tokens per second over the whole test.
    pub fn s(&self) -> f64 {
        self.n_kv as f64 / (self.t_pp + self.t_tg)
    }
    /// The row as llama-batched-bench prints it.
    pub fn line(&self) -> String {
        format!(
            "|{:6} | {:6} | {:4} | {:6} | {:8.3} | {:8.2} | {:8.3} | {:8.2} | {:8.3} | {:8.2} |",
            self.pp,
            self.tg,
            self.pl,
            self.n_kv,
            self.t_pp,
            self.s_pp(),
            self.t_tg,
            self.s_tg(),
            self.t_pp + self.t_tg,
            self.s()
        )
    }
}

/// The prompt batches of one test: the prompts sequence by sequence, each
/// in position order, as llama-batched-bench b11312 adds them (so each
/// prompt's cells are contiguous in the cache), cut into pieces of at most
/// `n_batch` tokens (its `decode_helper`); only each prompt's last token
/// asks for logits. One prompt (sequence 0) when `shared`.
fn prompt_pieces(pp: usize, pl: usize, shared: bool, n_batch: usize) -> Vec<Batch> {
    let mut pieces = Vec::new();
    let mut piece = Batch::new();
    for j in 0..if shared { 1 } else { pl } {
        for i in 0..pp {
            piece.add(0, i as i32, &[j as SeqId], i + 1 == pp);
            if piece.len() == n_batch.max(1) {
                pieces.push(std::mem::take(&mut piece));
            }
        }
    }
    if !piece.is_empty() {
        pieces.push(piece);
    }
    pieces
}

/// One test: PP prompt tokens per sequence (or one shared prompt), TG steps.
fn one(
    ctx: &mut Context,
    pp: usize,
    tg: usize,
    pl: usize,
    shared: bool,
    n_batch: usize,
) -> Result<Row, Box<dyn std::error::Error>> {
    ctx.clear()?;
    let t0 = Instant::now();
    for piece in prompt_pieces(pp, pl, shared, n_batch) {
        ctx.decode_batch(&piece)?;
    }
    if shared {
        for j in 1..pl {
            ctx.seq_cp(0, j as SeqId, ..)?;
        }
    }
    let t_pp = t0.elapsed().as_secs_f64();
    let t1 = Instant::now();
    for i in 0..tg {
        let mut b = Batch::new();
        for j in 0..pl {
            b.add(0, (pp + i) as i32, &[j as SeqId], true);
        }
        ctx.decode_batch(&b)?;
    }
    let t_tg = t1.elapsed().as_secs_f64();
    Ok(Row {
        pp,
        tg,
        pl,
        n_kv: cells_needed(pp, tg, pl, shared),
        t_pp,
        t_tg,
        shared,
    })
}

/// Runs `strata batched-bench`.
pub fn run(a: Args) -> CliResult {
    for (flag, v) in [("--npp", &a.npp), ("--ntg", &a.ntg), ("--npl", &a.npl)] {
        if v.is_empty() {
            return Err(format!("{flag} needs at least one value").into());
        }
    }
    if a.npl.contains(&0) || a.npp.contains(&0) {
        return Err("--npp and --npl values must be at least 1".into());
    }
    let n_seq = a.npl.iter().copied().max().unwrap_or(1);
    if n_seq > strata_models::cells::MAX_SEQ {
        return Err(format!(
            "--npl {n_seq}: at most {} sequences",
            strata_models::cells::MAX_SEQ
        )
        .into());
    }
    let model = a.model.load()?;
    let mut opts = a.model.context_options(false);
    opts.n_seq_max = n_seq.max(a.model.n_parallel);
    opts.batch_invariant = !a.no_batch_invariant;
    let n_kv_max = opts.n_ctx;
    let n_batch = opts.n_batch.max(1);
    let mut ctx = Context::with_sched_config(model, opts.clone(), crate::settings::sched_config())?;
    // warm-up: one token of every sequence
    let mut b = Batch::new();
    for j in 0..n_seq {
        b.add(0, 0, &[j as SeqId], true);
    }
    ctx.decode_batch(&b)?;
    if !a.json {
        println!(
            "main: n_kv_max = {n_kv_max}, n_batch = {}, n_ubatch = {}, flash_attn = {}, \
             is_pp_shared = {}, n_threads = {}, batch_invariant = {}",
            opts.n_batch,
            ctx.options().n_ubatch,
            i32::from(!a.model.no_flash_attn),
            i32::from(a.pps),
            opts.n_threads,
            i32::from(opts.batch_invariant),
        );
        println!();
        println!(
            "|    PP |     TG |    B |   N_KV |   T_PP s | S_PP t/s |   T_TG s | S_TG t/s |      T s |    S t/s |"
        );
        println!(
            "|-------|--------|------|--------|----------|----------|----------|----------|----------|----------|"
        );
    }
    for &pp in &a.npp {
        for &tg in &a.ntg {
            for &pl in &a.npl {
                if cells_needed(pp, tg, pl, a.pps) > n_kv_max {
                    continue; // as llama-batched-bench: the test does not fit -c
                }
                let r = one(&mut ctx, pp, tg, pl, a.pps, n_batch)?;
                if a.json {
                    println!(
                        "{}",
                        serde_json::json!({
                            "n_kv_max": n_kv_max, "n_batch": opts.n_batch,
                            "n_ubatch": ctx.options().n_ubatch, "is_pp_shared": a.pps,
                            "n_threads": opts.n_threads, "pp": r.pp, "tg": r.tg, "pl": r.pl,
                            "n_kv": r.n_kv, "t_pp": r.t_pp, "speed_pp": r.s_pp(), "t_tg": r.t_tg,
                            "speed_tg": r.s_tg(), "t": r.t_pp + r.t_tg, "speed": r.s(),
                        })
                    );
                } else {
                    println!("{}", r.line());
                }
            }
        }
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prompts_go_sequence_by_sequence_in_pieces_of_n_batch() {
        let pieces = prompt_pieces(3, 2, false, 4);
        assert_eq!(pieces.iter().map(Batch::len).collect::<Vec<_>>(), [4, 2]);
        let tokens: Vec<(i32, Vec<SeqId>, bool)> = pieces
            .iter()
            .flat_map(|b| (0..b.len()).map(|i| b.get(i).unwrap()))
            .map(|(_, pos, seqs, logits)| (pos, seqs.iter().collect(), logits))
            .collect();
        let want = [(0, 0, false), (1, 0, false), (2, 0, true)];
        let want: Vec<(i32, Vec<SeqId>, bool)> = [0, 1]
            .iter()
            .flat_map(|&s| want.iter().map(move |&(p, _, l)| (p, vec![s], l)))
            .collect();
        assert_eq!(tokens, want);
        // a shared prompt is sequence 0's alone
        let shared = prompt_pieces(3, 4, true, 512);
        assert_eq!(shared.len(), 1);
        assert_eq!(shared[0].len(), 3);
    }

    #[test]
    fn cells_and_speeds_as_llama_batched_bench() {
        assert_eq!(cells_needed(128, 128, 4, false), 1024);
        assert_eq!(cells_needed(128, 128, 4, true), 640);
        let r = Row {
            pp: 128,
            tg: 128,
            pl: 4,
            n_kv: 1024,
            t_pp: 0.5,
            t_tg: 2.0,
            shared: false,
        };
        assert_eq!(r.s_pp(), 1024.0);
        assert_eq!(r.s_tg(), 256.0);
        assert_eq!(r.s(), 1024.0 / 2.5);
        assert_eq!(
            r.line(),
            "|   128 |    128 |    4 |   1024 |    0.500 |  1024.00 |    2.000 |   256.00 |    2.500 |   409.60 |"
        );
    }
}
