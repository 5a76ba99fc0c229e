use std::sync::OnceLock;

use proptest::prelude::*;
use strata_models::sample::{argmax, Sampler, SamplerConfig};

use super::*;
use crate::grammar::tests::{tiny_special, tiny_tokenizer, XorShift};
use crate::grammar::{GrammarSpec, GrammarTokenizer};

const NEG: f32 = f32::NEG_INFINITY;

fn greedy() -> SamplingParams {
    SamplingParams {
        temperature: 0.0,
        ..SamplingParams::default()
    }
}

fn random_logits(rng: &mut XorShift, n: usize) -> Vec<f32> {
    // quantized so that ties happen
    (0..n)
        .map(|_| (rng.next_f32() * 16.0).floor() - 8.0)
        .collect()
}

#[test]
fn greedy_is_argmax_of_the_raw_logits() {
    let mut rng = XorShift(7);
    for temp in [0.0, -1.0] {
        let p = SamplingParams {
            temperature: temp,
            ..SamplingParams::default()
        };
        let mut s = RequestSampler::new(&p, None, vec![]).unwrap();
        for n in [1, 2, 5, 100, 49_152] {
            for _ in 0..5 {
                let mut l = random_logits(&mut rng, n);
                if n > 3 {
                    l[1] = NEG;
                }
                let want = argmax(&l).unwrap();
                let got = s.sample(&l).unwrap().token;
                assert_eq!(got, want, "n {n}");
                s.accept(got).unwrap();
            }
        }
    }
    // ties go to the lowest id
    let mut s = RequestSampler::new(&greedy(), None, vec![]).unwrap();
    assert_eq!(s.sample(&[1.0, 3.0, 2.0, 3.0]).unwrap().token, 1);
    // default penalties are off: repeated tokens stay the choice
    for _ in 0..3 {
        s.accept(1).unwrap();
        assert_eq!(s.sample(&[1.0, 3.0, 2.0, 3.0]).unwrap().token, 1);
    }
}

#[test]
fn penalties_match_a_hand_computed_reference() {
    let p = SamplingParams {
        repeat_penalty: 1.25,
        frequency_penalty: 0.5,
        presence_penalty: 0.75,
        penalty_last_n: 4,
        ..greedy()
    };
    let mut s = RequestSampler::new(&p, None, vec![]).unwrap();
    for t in [3, 2, 3, 2, 5, 2, 7] {
        s.accept(t).unwrap();
    }
    // window: the last four, [2, 5, 2, 7]; token 3 has left it
    let logits = [1.0, -0.5, 2.0, -1.0, 0.25, 0.0, 1.5, -2.0];
    let out = s.sample(&logits).unwrap();
    let want = [
        1.0,   // not in the window
        -0.5,  // not in the window
        -0.15, // 2.0 / 1.25 = 1.6, - (2 × 0.5 + 0.75) = -0.15
        -1.0,  // left the window
        0.25,  // never seen
        -1.25, // 0.0 × 1.25 = 0, - (0.5 + 0.75)
        1.5,   // never seen
        -3.75, // -2.0 × 1.25 = -2.5, - 1.25
    ];
    for (i, (&got, &w)) in s.work.iter().zip(&want).enumerate() {
        assert!((got - w).abs() < 1e-6, "token {i}: {got} vs {w}");
    }
    // greedy picks the best penalized logit: 1.5 (token 6)
    assert_eq!(out.token, 6);

    // only the presence penalty: -0.75 once, however often the token came
    let p = SamplingParams {
        presence_penalty: 0.75,
        penalty_last_n: 64,
        ..greedy()
    };
    let mut s = RequestSampler::new(&p, None, vec![]).unwrap();
    for _ in 0..5 {
        s.accept(0).unwrap();
    }
    s.sample(&[1.0, 0.5]).unwrap();
    assert!((s.work[0] - 0.25).abs() < 1e-6, "{}", s.work[0]);
    // penalty_last_n = 0 turns penalties off
    let p = SamplingParams {
        repeat_penalty: 2.0,
        frequency_penalty: 1.0,
        penalty_last_n: 0,
        ..greedy()
    };
    let mut s = RequestSampler::new(&p, None, vec![]).unwrap();
    s.accept(0).unwrap();
    assert_eq!(s.sample(&[1.0, 0.5]).unwrap().token, 0);
    assert_eq!(s.work, [1.0, 0.5]);
    // a negative frequency penalty encourages repeats
    let p = SamplingParams {
        frequency_penalty: -1.0,
        ..greedy()
    };
    let mut s = RequestSampler::new(&p, None, vec![]).unwrap();
    s.accept(1).unwrap();
    assert_eq!(s.sample(&[1.0, 0.5]).unwrap().token, 1);
}

/// f64 log-softmax.
fn log_softmax(l: &[f32]) -> Vec<f64> {
    let m = l
        .iter()
        .map(|&x| f64::from(x))
        .fold(f64::NEG_INFINITY, f64::max);
    let s: f64 = l.iter().map(|&x| (f64::from(x) - m).exp()).sum();
    l.iter().map(|&x| f64::from(x) - m - s.ln()).collect()
}

#[test]
fn logprobs_match_an_f64_log_softmax() {
    let mut rng = XorShift(99);
    for (n, k) in [(20, 20), (1000, 5), (49_152, 20), (3, 0)] {
        let mut l = random_logits(&mut rng, n);
        l[0] = NEG;
        let reference = log_softmax(&l);
        let p = SamplingParams {
            temperature: 0.7,
            logprobs: Some(k),
            seed: n as u64,
            ..SamplingParams::default()
        };
        let mut s = RequestSampler::new(&p, None, vec![]).unwrap();
        let out = s.sample(&l).unwrap();
        let lp = out.logprob.unwrap();
        let want = reference[out.token as usize];
        assert!((f64::from(lp) - want).abs() < 1e-5, "{lp} vs {want}");
        // the top k, by the reference, ties by lower id
        let mut order: Vec<usize> = (0..n).collect();
        order.sort_by(|&a, &b| reference[b].total_cmp(&reference[a]).then(a.cmp(&b)));
        assert_eq!(out.top.len(), k.min(n));
        for (j, &(id, lp)) in out.top.iter().enumerate() {
            assert_eq!(id as usize, order[j], "rank {j}");
            let want = reference[order[j]];
            let close = (f64::from(lp) - want).abs() < 1e-5 || f64::from(lp) == want;
            assert!(close, "n {n} rank {j}: {lp} vs {want}");
        }
        // the top list is sorted and its probabilities sum to at most 1;
        // with every token listed they sum to 1
        assert!(out.top.windows(2).all(|w| w[0].1 >= w[1].1));
        let sum: f64 = out.top.iter().map(|&(_, lp)| f64::from(lp).exp()).sum();
        assert!(sum <= 1.0 + 1e-5);
        if k == n {
            assert!((sum - 1.0).abs() < 1e-5, "sum {sum}");
            // the -inf token is last with -inf
            assert_eq!(out.top[n - 1], (0, NEG));
        }
    }
    // logprobs are of the raw logits, not the penalized or masked ones
    let p = SamplingParams {
        logprobs: Some(2),
        ignore_eos: true,
        ..greedy()
    };
    let mut s = RequestSampler::new(&p, None, vec![0]).unwrap();
    let l = [3.0f32, 1.0, 0.0];
    let out = s.sample(&l).unwrap();
    let r = log_softmax(&l);
    assert_eq!(out.token, 1);
    assert!((f64::from(out.logprob.unwrap()) - r[1]).abs() < 1e-6);
    assert_eq!(out.top[0].0, 0);
    assert!((f64::from(out.top[0].1) - r[0]).abs() < 1e-6);
    // off: nothing
    let mut s = RequestSampler::new(&greedy(), None, vec![]).unwrap();
    let out = s.sample(&l).unwrap();
    assert_eq!((out.logprob, out.top.len()), (None, 0));
}

#[test]
fn same_seed_same_tokens() {
    let run = |seed: u64| {
        let p = SamplingParams {
            temperature: 1.2,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            frequency_penalty: 0.3,
            seed,
            ..SamplingParams::default()
        };
        let mut s = RequestSampler::new(&p, None, vec![]).unwrap();
        let mut rng = XorShift(5);
        (0..200)
            .map(|_| {
                let l: Vec<f32> = (0..64).map(|_| rng.next_f32() * 3.0).collect();
                let t = s.sample(&l).unwrap().token;
                s.accept(t).unwrap();
                t
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(run(42), run(42));
    assert_ne!(run(42), run(43));
}

#[test]
fn without_extras_draws_equal_strata_sampler() {
    // no penalties, masks or grammar: the very draws of strata's sampler
    let p = SamplingParams {
        seed: 11,
        ..SamplingParams::default()
    };
    let mut s = RequestSampler::new(&p, None, vec![]).unwrap();
    let mut reference = Sampler::new(SamplerConfig {
        seed: 11,
        ..SamplerConfig::default()
    })
    .unwrap();
    let mut rng = XorShift(3);
    for _ in 0..100 {
        let l: Vec<f32> = (0..300).map(|_| rng.next_f32() * 6.0).collect();
        assert_eq!(s.sample(&l).unwrap().token, reference.sample(&l).unwrap());
    }
}

#[test]
fn invalid_params_are_rejected() {
    let d = SamplingParams::default();
    for (p, name) in [
        (
            SamplingParams {
                temperature: f32::NAN,
                ..d.clone()
            },
            "temperature",
        ),
        (
            SamplingParams {
                temperature: f32::INFINITY,
                ..d.clone()
            },
            "temperature",
        ),
        (
            SamplingParams {
                top_p: 1.01,
                ..d.clone()
            },
            "top_p",
        ),
        (
            SamplingParams {
                top_p: -0.1,
                ..d.clone()
            },
            "top_p",
        ),
        (
            SamplingParams {
                min_p: f32::NAN,
                ..d.clone()
            },
            "min_p",
        ),
        (
            SamplingParams {
                min_p: 2.0,
                ..d.clone()
            },
            "min_p",
        ),
        (
            SamplingParams {
                presence_penalty: 2.5,
                ..d.clone()
            },
            "presence_penalty",
        ),
        (
            SamplingParams {
                frequency_penalty: -3.0,
                ..d.clone()
            },
            "frequency_penalty",
        ),
        (
            SamplingParams {
                frequency_penalty: f32::NAN,
                ..d.clone()
            },
            "frequency_penalty",
        ),
        (
            SamplingParams {
                repeat_penalty: 0.0,
                ..d.clone()
            },
            "repeat_penalty",
        ),
        (
            SamplingParams {
                repeat_penalty: -1.0,
                ..d.clone()
            },
            "repeat_penalty",
        ),
        (
            SamplingParams {
                repeat_penalty: f32::INFINITY,
                ..d.clone()
            },
            "repeat_penalty",
        ),
        (
            SamplingParams {
                logprobs: Some(21),
                ..d.clone()
            },
            "top_logprobs",
        ),
    ] {
        let e = RequestSampler::new(&p, None, vec![]).unwrap_err();
        assert!(e.is_client_error(), "{e}");
        assert!(
            matches!(&e, SamplingError::InvalidParam { name: n, .. } if *n == name),
            "{e:?}"
        );
        assert!(e.to_string().contains(name), "{e}");
    }
    // the edges are fine
    for p in [
        SamplingParams {
            top_p: 0.0,
            min_p: 1.0,
            logprobs: Some(20),
            ..d.clone()
        },
        SamplingParams {
            presence_penalty: -2.0,
            frequency_penalty: 2.0,
            ..d.clone()
        },
        SamplingParams {
            temperature: -5.0,
            top_k: usize::MAX,
            penalty_last_n: usize::MAX,
            ..d.clone()
        },
    ] {
        let mut s = RequestSampler::new(&p, None, vec![]).unwrap();
        let t = s.sample(&[0.0, 1.0, 2.0]).unwrap().token;
        s.accept(t).unwrap();
    }
}

#[test]
fn bad_logits_are_errors() {
    let mut s = RequestSampler::new(&SamplingParams::default(), None, vec![]).unwrap();
    assert_eq!(s.sample(&[]), Err(SamplingError::EmptyLogits));
    assert!(matches!(
        s.sample(&[0.0, f32::NAN]),
        Err(SamplingError::BadLogit { token: 1, .. })
    ));
    assert!(matches!(
        s.sample(&[f32::INFINITY, 0.0]),
        Err(SamplingError::BadLogit { token: 0, .. })
    ));
    assert!(!SamplingError::EmptyLogits.is_client_error());
}

#[test]
fn ignore_eos_never_draws_end_of_generation() {
    for temp in [0.0, 1.0] {
        let p = SamplingParams {
            temperature: temp,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            ignore_eos: true,
            ..SamplingParams::default()
        };
        let mut s = RequestSampler::new(&p, None, vec![0, 3]).unwrap();
        for _ in 0..200 {
            let t = s.sample(&[9.0, 1.0, 0.5, 9.0]).unwrap().token;
            assert!(t == 1 || t == 2, "{t}");
        }
        // nothing else possible: an error, not an EOG token
        let e = s.sample(&[9.0, NEG, NEG, 9.0]).unwrap_err();
        assert!(matches!(e, SamplingError::NoCandidate(_)), "{e}");
    }
    // without ignore_eos the EOG token is the greedy choice
    let mut s = RequestSampler::new(&greedy(), None, vec![0, 3]).unwrap();
    assert_eq!(s.sample(&[9.0, 1.0, 0.5, 9.0]).unwrap().token, 0);
}

fn shared_grammar() -> &'static GrammarTokenizer {
    static GT: OnceLock<GrammarTokenizer> = OnceLock::new();
    GT.get_or_init(|| GrammarTokenizer::new(&tiny_tokenizer()).expect("grammar tokenizer"))
}

#[test]
fn grammar_masks_and_ends_with_eog() {
    let gt = shared_grammar();
    let n = gt.n_vocab();
    let eos = tiny_special("<|endoftext|>");
    let c = gt.constraint(&GrammarSpec::JsonObject).unwrap();
    let p = SamplingParams {
        ignore_eos: true,
        ..greedy()
    };
    let mut s = RequestSampler::new(&p, Some(c), gt.eog().to_vec()).unwrap();
    // 'x' is best but not allowed: an object starts with '{' (or the '{"'
    // token, of equal logit but a higher id)
    let mut l = vec![0.0f32; n];
    l[usize::from(b'x')] = 10.0;
    assert_eq!(s.sample(&l).unwrap().token, u32::from(b'{'));
    s.accept(u32::from(b'{')).unwrap();
    // a token the grammar rejects is an error from accept
    assert!(matches!(
        s.accept(u32::from(b'x')),
        Err(SamplingError::Grammar(_))
    ));
    let c = gt.constraint(&GrammarSpec::JsonObject).unwrap();
    let mut s = RequestSampler::new(&p, Some(c), gt.eog().to_vec()).unwrap();
    s.accept(u32::from(b'{')).unwrap();
    s.accept(u32::from(b'}')).unwrap();
    if !s.grammar_finished() {
        // accepting but not done: ignore_eos keeps the output going with
        // whitespace, so feed EOS directly
        s.accept(eos).unwrap();
    }
    assert!(s.grammar_finished());
    // finished: only end-of-generation, even with ignore_eos and a far
    // better other token
    let mut l = vec![5.0f32; n];
    l[eos as usize] = -50.0;
    assert!(gt.eog().contains(&s.sample(&l).unwrap().token));
    // every allowed token at -inf ('{' and '{"'): an error
    let c = gt.constraint(&GrammarSpec::JsonObject).unwrap();
    let mut s = RequestSampler::new(&greedy(), Some(c), gt.eog().to_vec()).unwrap();
    let mut l = vec![1.0f32; n];
    let mut check = gt.constraint(&GrammarSpec::JsonObject).unwrap();
    for t in check.allowed().unwrap().iter() {
        l[t as usize] = NEG;
    }
    assert!(matches!(s.sample(&l), Err(SamplingError::NoCandidate(_))));
}

fn params_strategy() -> impl Strategy<Value = SamplingParams> {
    (
        (
            prop_oneof![Just(0.0f32), -1.0f32..0.0, 0.01f32..3.0],
            0.0f32..=1.0,
            0usize..60,
            0.0f32..=1.0,
            any::<u64>(),
        ),
        (
            -2.0f32..=2.0,
            -2.0f32..=2.0,
            prop_oneof![Just(1.0f32), 0.05f32..5.0],
            0usize..16,
            prop::option::of(0usize..=20),
            any::<bool>(),
        ),
    )
        .prop_map(
            |((temperature, top_p, top_k, min_p, seed), (pp, fp, rp, last_n, logprobs, ie))| {
                SamplingParams {
                    temperature,
                    top_p,
                    top_k,
                    min_p,
                    seed,
                    presence_penalty: pp,
                    frequency_penalty: fp,
                    repeat_penalty: rp,
                    penalty_last_n: last_n,
                    logprobs,
                    ignore_eos: ie,
                }
            },
        )
}

fn logit() -> impl Strategy<Value = f32> {
    prop_oneof![
        8 => -30.0f32..30.0,
        1 => Just(NEG),
        1 => Just(0.0f32),
        1 => prop_oneof![Just(f32::MAX), Just(f32::MIN), Just(1e30f32), Just(-1e30f32)],
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Any logits and settings: no panic; the token is in range, finite
    /// after masking, never EOG under ignore_eos; an error only when every
    /// token is ruled out.
    #[test]
    fn random_logits_and_params(
        p in params_strategy(),
        steps in prop::collection::vec(prop::collection::vec(logit(), 1..40), 1..6),
    ) {
        let eog = vec![0u32, 2];
        let mut s = RequestSampler::new(&p, None, eog.clone()).unwrap();
        for l in &steps {
            match s.sample(l) {
                Ok(out) => {
                    prop_assert!((out.token as usize) < l.len());
                    let possible = l.iter().enumerate().any(|(i, &x)| {
                        x > NEG && !(p.ignore_eos && eog.contains(&(i as u32)))
                    });
                    if possible {
                        prop_assert!(l[out.token as usize] > NEG);
                    }
                    if p.ignore_eos {
                        prop_assert!(!eog.contains(&out.token));
                    }
                    prop_assert_eq!(out.logprob.is_some(), p.logprobs.is_some());
                    prop_assert_eq!(out.top.len(), p.logprobs.unwrap_or(0).min(l.len()));
                    s.accept(out.token).unwrap();
                }
                Err(SamplingError::NoCandidate(_)) => {
                    let none = l.iter().enumerate().all(|(i, &x)| {
                        x == NEG || (p.ignore_eos && eog.contains(&(i as u32)))
                    });
                    prop_assert!(none, "NoCandidate with a possible token");
                }
                Err(e) => prop_assert!(false, "unexpected error {e}"),
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Under a JSON grammar the chosen token is always one the mask allows
    /// (checked against a second constraint fed the same tokens).
    #[test]
    fn grammar_choices_are_allowed(
        p in params_strategy(),
        seed in any::<u64>(),
        extra in 0usize..40,
        schema in any::<bool>(),
    ) {
        let gt = shared_grammar();
        let spec = if schema {
            GrammarSpec::JsonSchema(serde_json::json!({
                "type": "object",
                "properties": {"a": {"type": "integer"}, "b": {"enum": ["red", "blue"]}},
                "required": ["b"]
            }))
        } else {
            GrammarSpec::JsonObject
        };
        let c = gt.constraint(&spec).unwrap();
        let mut check = gt.constraint(&spec).unwrap();
        let mut s = RequestSampler::new(&p, Some(c), gt.eog().to_vec()).unwrap();
        let mut rng = XorShift(seed | 1);
        for _ in 0..24 {
            let mut l: Vec<f32> = (0..gt.n_vocab() + extra)
                .map(|_| rng.next_f32() * 20.0 - 10.0)
                .collect();
            // now and then rule tokens out or give huge values
            for _ in 0..(seed % 5) {
                let i = (rng.next_f32() * l.len() as f32) as usize % l.len();
                l[i] = if rng.next_f32() < 0.5 { NEG } else { 1e30 };
            }
            match s.sample(&l) {
                Ok(out) => {
                    let mask = check.allowed().unwrap();
                    prop_assert!(mask.contains(out.token), "token {} not allowed", out.token);
                    s.accept(out.token).unwrap();
                    check.accept(out.token).unwrap();
                    if s.grammar_finished() {
                        break;
                    }
                }
                Err(SamplingError::NoCandidate(_)) => {
                    let mask = check.allowed().unwrap();
                    let none = mask.iter().all(|t| {
                        l[t as usize] == NEG || (p.ignore_eos && gt.eog().contains(&t))
                    });
                    prop_assert!(none, "NoCandidate with an allowed token");
                    break;
                }
                Err(e) => prop_assert!(false, "unexpected error {e}"),
            }
        }
    }
}
