//! Many sequences in one KV cache (issue #43): every family's tiny model
//! decodes B = 1, 2, 4, 8 and 16 sequences of different prompt lengths
//! together, and each sequence's greedy tokens and logits equal decoding it
//! alone, bit for bit (the batch-invariance contract of
//! `strata_models::context`); random cache operations keep the cells'
//! invariants and give the logits a cache rebuilt from scratch gives; a
//! shared prefix is one copy; refused batches name what is wrong and leave
//! the cache unchanged; graph inputs no node reads (#47: every layer of a
//! Gemma 3 sliding, none sliding, one layer) are skipped.

mod support;
#[path = "support/tiny_models.rs"]
mod tiny_models;

use std::sync::Arc;

use proptest::prelude::*;
use strata_models::{
    Batch, BatchError, Context, ContextOptions, LoadOptions, Logits, Model, ModelError, SeqId,
};
use tiny_models::{configs, load, write, Config, Fam, WType, N_VOCAB};

fn model(cfg: &Config) -> Arc<Model> {
    load(&write(cfg).0, &LoadOptions::default()).unwrap()
}

fn opts(n_seq: usize, n_ubatch: usize, threads: usize) -> ContextOptions {
    ContextOptions {
        n_ctx: 512,
        n_batch: 512,
        n_ubatch,
        n_threads: threads,
        n_seq_max: n_seq,
        batch_invariant: true,
        ..ContextOptions::default()
    }
}

fn argmax(x: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &v) in x.iter().enumerate() {
        if v > x[best] {
            best = i;
        }
    }
    best as u32
}

/// A prompt of `n` tokens for sequence `s` (distinct per sequence).
fn prompt(s: usize, n: usize) -> Vec<u32> {
    (0..n)
        .map(|i| ((s * 37 + i * 11 + 5) % (N_VOCAB - 2)) as u32)
        .collect()
}

/// Greedy decoding of `prompt` alone in a fresh context: the logits of the
/// prompt's last token and of each generated token, and the tokens.
fn alone(
    m: &Arc<Model>,
    o: &ContextOptions,
    prompt: &[u32],
    n_gen: usize,
) -> (Vec<Vec<f32>>, Vec<u32>) {
    let mut ctx = Context::new(m.clone(), o.clone()).unwrap();
    let mut logits = vec![ctx.decode(prompt, Logits::Last).unwrap()];
    let mut toks = Vec::new();
    for _ in 0..n_gen {
        let t = argmax(logits.last().unwrap());
        toks.push(t);
        logits.push(ctx.decode(&[t], Logits::Last).unwrap());
    }
    (logits, toks)
}

/// The same sequences decoded together: every prompt in one batch, then
/// one batch per step with the next token of every sequence.
fn together(
    m: &Arc<Model>,
    o: &ContextOptions,
    prompts: &[Vec<u32>],
    n_gen: usize,
) -> (Vec<Vec<Vec<f32>>>, Vec<Vec<u32>>) {
    let mut ctx = Context::new(m.clone(), o.clone()).unwrap();
    let b_n = prompts.len();
    let mut b = Batch::new();
    for (s, p) in prompts.iter().enumerate() {
        b.add_seq(p, 0, s as SeqId, true);
    }
    let out = ctx.decode_batch(&b).unwrap();
    let mut last: Vec<usize> = Vec::new();
    let mut at = 0;
    for p in prompts {
        at += p.len();
        last.push(at - 1);
    }
    let mut logits: Vec<Vec<Vec<f32>>> = last
        .iter()
        .map(|&i| vec![out.get(i).unwrap().to_vec()])
        .collect();
    let mut toks = vec![Vec::new(); b_n];
    for _ in 0..n_gen {
        let mut b = Batch::new();
        // the sequences in reverse order: another placement in the batch
        for s in (0..b_n).rev() {
            let t = argmax(logits[s].last().unwrap());
            toks[s].push(t);
            let pos = ctx.seq_pos_max(s as SeqId).unwrap() + 1;
            b.add(t, pos, &[s as SeqId], true);
        }
        let out = ctx.decode_batch(&b).unwrap();
        for (s, l) in logits.iter_mut().enumerate() {
            l.push(out.get(b_n - 1 - s).unwrap().to_vec());
        }
        ctx.cells().check().unwrap();
    }
    (logits, toks)
}

fn same_bits(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}

fn check_invariance(cfg: &Config, sizes: &[usize], n_ubatch: usize) {
    check_model(&model(cfg), cfg.name, sizes, n_ubatch, 3);
}

fn check_model(m: &Arc<Model>, name: &str, sizes: &[usize], n_ubatch: usize, n_gen: usize) {
    for &b_n in sizes {
        let o = opts(b_n, n_ubatch, 2);
        let prompts: Vec<Vec<u32>> = (0..b_n).map(|s| prompt(s, 3 + (s * 7) % 23)).collect();
        let (lt, tt) = together(m, &o, &prompts, n_gen);
        for (s, p) in prompts.iter().enumerate() {
            // alone: in a context of one sequence, another thread count
            let (la, ta) = alone(m, &opts(1, n_ubatch, 1), p, n_gen);
            assert_eq!(ta, tt[s], "{name}: B={b_n} seq {s}: greedy tokens");
            for (k, (a, t)) in la.iter().zip(&lt[s]).enumerate() {
                assert!(
                    same_bits(a, t),
                    "{name}: B={b_n} seq {s} step {k}: logits differ (max |d| {})",
                    a.iter()
                        .zip(t)
                        .map(|(x, y)| (x - y).abs())
                        .fold(0.0, f32::max)
                );
            }
        }
    }
}

#[test]
fn every_family_decodes_sequences_together_bit_for_bit() {
    for cfg in configs() {
        check_invariance(&cfg, &[1, 2, 4, 8, 16], 512);
    }
}

#[test]
fn smollm2_decodes_sequences_together_bit_for_bit() {
    let Some(path) = support::require_model("the SmolLM2 batch-invariance test") else {
        return;
    };
    let m = Arc::new(Model::load(&path, &LoadOptions::default(), None).unwrap());
    // prompts of 3 to 25 tokens; the 16 together are one 200-token batch
    check_model(&m, "SmolLM2", &[1, 2, 4, 8, 16], 512, 4);
    // and in micro-batches of 32 tokens
    check_model(&m, "SmolLM2", &[8], 32, 2);
}

#[test]
fn quantized_weights_and_small_ubatches_are_invariant_too() {
    // Q8_0 matrices go through the packed integer tiles; micro-batches of 7
    // tokens split the prompts elsewhere than a lone run does
    for name in [
        "llama3-untied-ropefreqs",
        "qwen3moe-8x2",
        "gemma3-swa-untied",
    ] {
        let mut cfg = configs().into_iter().find(|c| c.name == name).unwrap();
        cfg.wtype = WType::Q8_0;
        check_invariance(&cfg, &[4, 8], 7);
    }
}

#[test]
fn a_shared_prefix_is_one_copy_computed_once() {
    let cfg = configs().into_iter().next().unwrap();
    let m = model(&cfg);
    let o = ContextOptions {
        n_ctx: 1024,
        ..opts(8, 512, 2)
    };
    let mut ctx = Context::new(m.clone(), o.clone()).unwrap();
    let prefix = prompt(99, 400);
    let mut b = Batch::new();
    for (i, &t) in prefix.iter().enumerate() {
        let last = i + 1 == prefix.len();
        b.add(t, i as i32, &[0, 1, 2, 3, 4, 5, 6, 7], last);
    }
    let shared = ctx.decode_batch(&b).unwrap();
    assert_eq!(ctx.kv_used(), 400, "one copy of the prefix");
    assert_eq!(ctx.timings().tokens, 400, "the prefix computed once");
    // each sequence continues with its own token
    let mut b = Batch::new();
    for s in 0..8u32 {
        b.add(s + 1, 400, &[s], true);
    }
    let out = ctx.decode_batch(&b).unwrap();
    assert_eq!(ctx.kv_used(), 408);
    assert_eq!(ctx.timings().tokens, 408);
    // and equals that sequence computed alone
    let mut lone = Context::new(m.clone(), opts(1, 512, 2)).unwrap();
    let l0 = lone.decode(&prefix, Logits::Last).unwrap();
    assert!(same_bits(&l0, shared.get(399).unwrap()));
    let l1 = lone.decode(&[4], Logits::Last).unwrap();
    assert!(same_bits(&l1, out.get(3).unwrap()));
    // seq_cp shares without computing: a ninth view of sequence 0
    ctx.seq_rm(Some(7), ..).unwrap();
    assert_eq!(ctx.kv_used(), 407);
    ctx.seq_cp(0, 7, ..).unwrap();
    assert_eq!(ctx.kv_used(), 407);
    assert_eq!(ctx.seq_pos_max(7), Some(400));
}

#[test]
fn refused_batches_name_the_problem_and_change_nothing() {
    let cfg = configs().into_iter().next().unwrap();
    let m = model(&cfg);
    let mut ctx = Context::new(
        m,
        ContextOptions {
            n_ctx: 16,
            ..opts(2, 16, 1)
        },
    )
    .unwrap();
    let mut b = Batch::new();
    b.add_seq(&[1, 2, 3], 0, 0, true);
    b.add_seq(&[4, 5, 6, 7], 0, 1, true);
    ctx.decode_batch(&b).unwrap();
    let before = format!("{:?}", ctx.cells());
    let err = |b: &Batch, ctx: &mut Context| match ctx.decode_batch(b) {
        Err(ModelError::Batch(e)) => e,
        other => panic!("expected a batch error, got {other:?}"),
    };
    let mut b = Batch::new();
    b.add(1, 0, &[2], true);
    assert_eq!(
        err(&b, &mut ctx),
        BatchError::SeqOutOfRange {
            seq: 2,
            n_seq_max: 2
        }
    );
    let mut b = Batch::new();
    b.add(1, 0, &[300], true);
    assert!(matches!(
        err(&b, &mut ctx),
        BatchError::SeqOutOfRange { seq: 300, .. }
    ));
    let mut b = Batch::new();
    b.add(1, 3, &[0], false).add(1, 16, &[0], true);
    assert_eq!(
        err(&b, &mut ctx),
        BatchError::PosOutOfRange {
            seq: 0,
            pos: 16,
            n_ctx: 16
        }
    );
    let mut b = Batch::new();
    b.add(1, 5, &[0], true);
    let e = err(&b, &mut ctx);
    assert_eq!(
        e,
        BatchError::PosNotConsecutive {
            seq: 0,
            expected: 3,
            got: 5
        }
    );
    assert!(e.to_string().contains("sequence 0"), "{e}");
    let mut b = Batch::new();
    b.add_seq(&[1; 10], 3, 0, true);
    assert_eq!(
        err(&b, &mut ctx),
        BatchError::NoFreeCells {
            needed: 10,
            free: 9,
            size: 16
        }
    );
    let mut b = Batch::new();
    b.add(N_VOCAB as u32, 3, &[0], true);
    assert!(matches!(
        err(&b, &mut ctx),
        BatchError::TokenOutOfVocab { index: 0, .. }
    ));
    let mut b = Batch::new();
    b.add(1, 3, &[], true);
    assert_eq!(err(&b, &mut ctx), BatchError::NoSequence { index: 0 });
    assert_eq!(err(&Batch::new(), &mut ctx), BatchError::Empty);
    let mut b = Batch::new();
    b.add(1, 3, &[0], true)
        .add(1, 4, &[1], true)
        .add(2, 4, &[0], true);
    assert_eq!(
        err(&b, &mut ctx),
        BatchError::TooManyOutputs {
            wanted: 3,
            reserved: 2
        }
    );
    assert!(ctx.seq_rm(Some(5), ..).is_err());
    assert_eq!(format!("{:?}", ctx.cells()), before, "the cache changed");
}

#[test]
fn removing_a_shared_range_leaves_the_other_sequence_intact() {
    let cfg = configs().into_iter().next().unwrap();
    let m = model(&cfg);
    let mut ctx = Context::new(m.clone(), opts(2, 512, 2)).unwrap();
    let p = prompt(3, 20);
    ctx.decode_batch(Batch::new().add_seq(&p, 0, 0, false))
        .unwrap();
    ctx.seq_cp(0, 1, ..).unwrap();
    ctx.seq_rm(Some(0), 10..).unwrap();
    assert_eq!(ctx.kv_used(), 20);
    assert_eq!(ctx.seq_pos_max(0), Some(9));
    assert_eq!(ctx.seq_pos_max(1), Some(19));
    let out = ctx
        .decode_batch(Batch::new().add(7, 20, &[1], true))
        .unwrap();
    let mut lone = Context::new(m, opts(1, 512, 2)).unwrap();
    lone.decode(&p, Logits::Last).unwrap();
    let want = lone.decode(&[7], Logits::Last).unwrap();
    assert!(same_bits(out.get(0).unwrap(), &want));
}

#[test]
fn a_position_shift_rotates_the_cached_keys() {
    // llama.cpp's context shift: drop positions 4..8 and move 8..12 down
    // by 4; the next token's logits equal a cache that computed the kept
    // tokens at their new positions (up to the f16 cache's rounding of the
    // rotated keys), and differ from the cache with the gap left in. One
    // layer, so that the cached K/V of a token depend on its id and
    // position only (deeper, they carry what the dropped tokens said)
    for cfg in configs()
        .into_iter()
        .filter(|c| !c.name.starts_with("phi3"))
    {
        let cfg = Config { n_layer: 1, ..cfg };
        let m = model(&cfg);
        let p = prompt(1, 12);
        let kept: Vec<u32> = p[..4].iter().chain(&p[8..]).copied().collect();
        let mut a = Context::new(m.clone(), opts(1, 512, 1)).unwrap();
        a.decode(&kept, Logits::Last).unwrap();
        let want = a.decode(&[9], Logits::Last).unwrap();
        let mut b = Context::new(m.clone(), opts(2, 512, 1)).unwrap();
        b.decode(&p, Logits::Last).unwrap();
        b.seq_rm(Some(0), 4..8).unwrap();
        let mut gap = Context::new(m, opts(2, 512, 1)).unwrap();
        gap.decode(&p, Logits::Last).unwrap();
        gap.seq_rm(Some(0), 4..8).unwrap();
        b.seq_add(0, 8.., -4).unwrap();
        b.cells().check().unwrap();
        assert_eq!((b.seq_pos_min(0), b.seq_pos_max(0)), (Some(0), Some(7)));
        let got = b.decode_batch(Batch::new().add(9, 8, &[0], true)).unwrap();
        let got = got.get(0).unwrap();
        let dist = |x: &[f32], y: &[f32]| {
            x.iter()
                .zip(y)
                .map(|(a, b)| (a - b).abs())
                .fold(0.0, f32::max)
        };
        let d = dist(&want, got);
        let far = gap
            .decode_batch(Batch::new().add(9, 12, &[0], true))
            .unwrap();
        let d_far = dist(&want, far.get(0).unwrap());
        assert!(
            d < 2e-3 && d_far > 4.0 * d,
            "{}: shifted {d}, gap left {d_far}",
            cfg.name
        );
    }
    // LongRoPE scales magnitudes: a second rotation is refused, nothing moves
    let cfg = configs()
        .into_iter()
        .find(|c| c.name == "phi3-fused-longrope")
        .unwrap();
    let mut c = Context::new(model(&cfg), opts(1, 512, 1)).unwrap();
    c.decode(&prompt(0, 6), Logits::Last).unwrap();
    let before = format!("{:?}", c.cells());
    let e = c.seq_add(0, 2.., -1).unwrap_err().to_string();
    assert!(e.contains("RoPE scaling"), "{e}");
    assert_eq!(format!("{:?}", c.cells()), before);
}

/// Gemma 3 with 4 layers and the default pattern (every 6th layer global):
/// every layer slides, so the global mask has no reader. And the other
/// shapes that leave an input unread: no sliding layer, one layer.
#[test]
fn inputs_no_node_reads_are_skipped() {
    let g3 = configs()
        .into_iter()
        .find(|c| c.fam == Fam::Gemma3)
        .unwrap();
    let shapes = [
        Config {
            n_layer: 4,
            n_swa: Some(4),
            swa_pattern: None,
            ..g3.clone()
        },
        Config {
            n_layer: 1,
            n_swa: Some(4),
            swa_pattern: None,
            ..g3.clone()
        },
        Config {
            n_layer: 2,
            n_swa: Some(4),
            swa_pattern: Some(1),
            ..g3.clone()
        },
    ];
    let mut cases: Vec<Config> = shapes.to_vec();
    for c in configs() {
        cases.push(Config { n_layer: 1, ..c });
    }
    for cfg in cases {
        let m = model(&cfg);
        let mut ctx = Context::new(m, opts(2, 512, 1)).unwrap();
        let l = ctx
            .decode(&prompt(0, 9), Logits::Last)
            .unwrap_or_else(|e| panic!("{}: {e}", cfg.name));
        assert!(l.iter().all(|x| x.is_finite()), "{}", cfg.name);
        let l = ctx.decode(&[3], Logits::Last).unwrap();
        assert!(l.iter().all(|x| x.is_finite()), "{}", cfg.name);
    }
}

/// A random cache operation.
#[derive(Clone, Debug)]
enum Op {
    /// Append `n` tokens to sequence `s` (`n` ≥ 1).
    Append(u32, usize),
    Rm(u32, i32, i32),
    Cp(u32, u32),
    Keep(u32),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u32..4, 1usize..9).prop_map(|(s, n)| Op::Append(s, n)),
        2 => (0u32..4, 0i32..30, 0i32..30).prop_map(|(s, a, b)| Op::Rm(s, a.min(b), a.max(b) + 1)),
        1 => (0u32..4, 0u32..4).prop_map(|(a, b)| Op::Cp(a, b)),
        1 => (0u32..4).prop_map(Op::Keep),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    /// Random appends (batches of several sequences at once), removals,
    /// copies and keeps: the cells' invariants hold after each, and each
    /// sequence's next-token logits equal a fresh cache that computed just
    /// that sequence's tokens from scratch.
    #[test]
    fn random_cache_operations_match_a_rebuilt_cache(ops in proptest::collection::vec(op(), 1..14)) {
        let cfg = configs().into_iter().find(|c| c.name == "qwen2-untied-bias").unwrap();
        let m = model(&cfg);
        let mut ctx = Context::new(m.clone(), ContextOptions { n_ctx: 96, ..opts(4, 16, 2) }).unwrap();
        // what each sequence holds: its tokens by position
        let mut hist: Vec<Vec<u32>> = vec![Vec::new(); 4];
        let mut tok = 1u32;
        let mut i = 0;
        while i < ops.len() {
            // consecutive appends go in one batch
            let mut b = Batch::new();
            let mut added: Vec<(u32, u32)> = Vec::new();
            while let Some(Op::Append(s, n)) = ops.get(i) {
                // one run per sequence per batch
                if added.iter().any(|&(t, _)| t == *s) { break; }
                let p0 = hist[*s as usize].len();
                for k in 0..*n {
                    tok = (tok * 7 + 3) % (N_VOCAB as u32 - 2);
                    b.add(tok, (p0 + k) as i32, &[*s], false);
                    added.push((*s, tok));
                }
                i += 1;
            }
            if !b.is_empty() {
                match ctx.decode_batch(&b) {
                    Ok(_) => {
                        for (s, t) in added { hist[s as usize].push(t); }
                    }
                    Err(ModelError::Batch(BatchError::NoFreeCells { .. })) => {}
                    Err(e) => panic!("{e}"),
                }
            } else {
                match &ops[i] {
                    Op::Rm(s, a, b) => {
                        ctx.seq_rm(Some(*s), *a..*b).unwrap();
                        // removing the middle of a sequence leaves a gap the
                        // next append cannot continue: keep the prefix only
                        let h = &mut hist[*s as usize];
                        if (*a as usize) < h.len() {
                            ctx.seq_rm(Some(*s), *a..).unwrap();
                            h.truncate(*a as usize);
                        }
                    }
                    Op::Cp(a, b) if a == b => {}
                    Op::Cp(a, b) => {
                        ctx.seq_rm(Some(*b), ..).unwrap();
                        ctx.seq_cp(*a, *b, ..).unwrap();
                        hist[*b as usize] = hist[*a as usize].clone();
                    }
                    Op::Keep(s) => {
                        ctx.seq_keep(*s).unwrap();
                        for (k, h) in hist.iter_mut().enumerate() {
                            if k != *s as usize { h.clear(); }
                        }
                    }
                    Op::Append(..) => unreachable!(),
                }
                i += 1;
            }
            ctx.cells().check().map_err(TestCaseError::fail)?;
            for (s, h) in hist.iter().enumerate() {
                let max = ctx.seq_pos_max(s as SeqId);
                prop_assert_eq!(max, h.len().checked_sub(1).map(|p| p as i32));
            }
        }
        // the next token of every non-empty sequence against a rebuilt cache
        for (s, h) in hist.iter().enumerate() {
            if h.is_empty() || ctx.kv_used() == 96 { continue; }
            let out = ctx.decode_batch(Batch::new().add(5, h.len() as i32, &[s as SeqId], true)).unwrap();
            let mut fresh = Context::new(m.clone(), ContextOptions { n_ctx: 96, ..opts(1, 16, 1) }).unwrap();
            fresh.decode(h, Logits::Last).unwrap();
            let want = fresh.decode(&[5], Logits::Last).unwrap();
            prop_assert!(same_bits(out.get(0).unwrap(), &want), "sequence {}", s);
            ctx.seq_rm(Some(s as SeqId), h.len() as i32..).unwrap();
        }
    }
}
