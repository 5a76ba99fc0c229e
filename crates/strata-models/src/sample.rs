//! Token sampling: greedy, repetition penalty, top-k, top-p, min-p,
//! temperature and a seeded random draw (llama.cpp's default chain order:
//! penalties → top-k → top-p → min-p → temperature → draw). The same seed
//! gives the same tokens.

use std::collections::VecDeque;

use crate::{ModelError, Result};

/// Sampling settings (llama.cpp's defaults).
#[derive(Clone, Debug, PartialEq)]
pub struct SamplerConfig {
    /// Temperature; 0 or less means greedy (argmax, ties to the lowest id).
    pub temperature: f32,
    /// Keep the k most likely tokens (0 = all).
    pub top_k: usize,
    /// Keep the smallest set whose probability reaches p (1 = all).
    pub top_p: f32,
    /// Drop tokens less likely than `min_p` × the most likely one (0 = off).
    pub min_p: f32,
    /// Divide positive (multiply negative) logits of recent tokens by this (1 = off).
    pub repeat_penalty: f32,
    /// How many recent tokens the penalty looks at.
    pub repeat_last_n: usize,
    /// RNG seed.
    pub seed: u64,
}

impl Default for SamplerConfig {
    fn default() -> SamplerConfig {
        SamplerConfig {
            temperature: 0.8,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.05,
            repeat_penalty: 1.0,
            repeat_last_n: 64,
            seed: 0,
        }
    }
}

impl SamplerConfig {
    /// Greedy decoding.
    pub fn greedy() -> SamplerConfig {
        SamplerConfig {
            temperature: 0.0,
            ..SamplerConfig::default()
        }
    }

    fn validate(&self) -> Result<()> {
        let bad = |param, value, need| Err(ModelError::SamplingParam { param, value, need });
        if !self.temperature.is_finite() {
            return bad("temperature", self.temperature, "finite");
        }
        if !(0.0..=1.0).contains(&self.top_p) {
            return bad("top-p", self.top_p, "in [0, 1]");
        }
        if !(0.0..=1.0).contains(&self.min_p) {
            return bad("min-p", self.min_p, "in [0, 1]");
        }
        if !(self.repeat_penalty.is_finite() && self.repeat_penalty > 0.0) {
            return bad("repeat penalty", self.repeat_penalty, "positive");
        }
        Ok(())
    }
}

/// xoshiro256** seeded through splitmix64: small, fast, reproducible everywhere.
#[derive(Clone, Debug)]
pub struct Rng {
    s: [u64; 4],
}

impl Rng {
    /// A generator for `seed`.
    pub fn new(seed: u64) -> Rng {
        let mut x = seed;
        let mut next = || {
            x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = x;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        };
        Rng {
            s: [next(), next(), next(), next()],
        }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let r = self.s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = self.s[1] << 17;
        self.s[2] ^= self.s[0];
        self.s[3] ^= self.s[1];
        self.s[1] ^= self.s[2];
        self.s[0] ^= self.s[3];
        self.s[2] ^= t;
        self.s[3] = self.s[3].rotate_left(45);
        r
    }

    /// Uniform in [0, 1).
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// A sampler with its RNG and the recent-token window for the penalty.
#[derive(Clone, Debug)]
pub struct Sampler {
    cfg: SamplerConfig,
    rng: Rng,
    recent: VecDeque<u32>,
    cand: Vec<(u32, f32)>,
}

/// Index of the largest value (ties: lowest index); `None` for an empty slice.
pub fn argmax(logits: &[f32]) -> Option<u32> {
    let mut best: Option<(usize, f32)> = None;
    for (i, &v) in logits.iter().enumerate() {
        if best.is_none_or(|(_, b)| v > b) {
            best = Some((i, v));
        }
    }
    best.map(|(i, _)| i as u32)
}

impl Sampler {
    /// A sampler; errors on out-of-range settings.
    pub fn new(cfg: SamplerConfig) -> Result<Sampler> {
        cfg.validate()?;
        Ok(Sampler {
            rng: Rng::new(cfg.seed),
            recent: VecDeque::with_capacity(cfg.repeat_last_n),
            cand: Vec::new(),
            cfg,
        })
    }

    /// The settings.
    pub fn config(&self) -> &SamplerConfig {
        &self.cfg
    }

    /// Records a token (prompt or generated) for the repetition penalty.
    pub fn accept(&mut self, token: u32) {
        if self.cfg.repeat_last_n == 0 {
            return;
        }
        if self.recent.len() == self.cfg.repeat_last_n {
            self.recent.pop_front();
        }
        self.recent.push_back(token);
    }

    /// Picks the next token from `logits` (one per vocabulary entry).
    pub fn sample(&mut self, logits: &[f32]) -> Result<u32> {
        if logits.is_empty() {
            return Err(ModelError::NoLogits);
        }
        self.cand.clear();
        self.cand
            .extend(logits.iter().enumerate().map(|(i, &l)| (i as u32, l)));
        // repetition penalty (llama.cpp: each distinct recent token once)
        if self.cfg.repeat_penalty != 1.0 {
            let mut seen = std::collections::HashSet::new();
            for &t in &self.recent {
                if (t as usize) < self.cand.len() && seen.insert(t) {
                    let l = &mut self.cand[t as usize].1;
                    *l = if *l <= 0.0 {
                        *l * self.cfg.repeat_penalty
                    } else {
                        *l / self.cfg.repeat_penalty
                    };
                }
            }
        }
        if self.cfg.temperature <= 0.0 {
            let best = self
                .cand
                .iter()
                .fold(None::<(u32, f32)>, |b, &(i, l)| match b {
                    Some((_, bl)) if bl >= l => b,
                    _ => Some((i, l)),
                })
                .map(|(i, _)| i)
                .unwrap_or(0);
            return Ok(best);
        }
        // sort descending by logit (ties: lower id first)
        let by_logit = |a: &(u32, f32), b: &(u32, f32)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
        if self.cfg.top_k > 0 && self.cfg.top_k < self.cand.len() {
            self.cand
                .select_nth_unstable_by(self.cfg.top_k - 1, by_logit);
            self.cand.truncate(self.cfg.top_k);
        }
        self.cand.sort_unstable_by(by_logit);
        let probs = |c: &[(u32, f32)], t: f32| -> Vec<f64> {
            let m = c[0].1 as f64;
            let e: Vec<f64> = c
                .iter()
                .map(|&(_, l)| ((l as f64 - m) / t as f64).exp())
                .collect();
            let s: f64 = e.iter().sum();
            e.into_iter().map(|x| x / s).collect()
        };
        if self.cfg.top_p < 1.0 {
            let p = probs(&self.cand, 1.0);
            let mut acc = 0.0;
            let mut keep = p.len();
            for (i, &pi) in p.iter().enumerate() {
                acc += pi;
                if acc >= self.cfg.top_p as f64 {
                    keep = i + 1;
                    break;
                }
            }
            self.cand.truncate(keep.max(1));
        }
        if self.cfg.min_p > 0.0 {
            let top = self.cand[0].1 as f64;
            let cut = top + (self.cfg.min_p as f64).ln();
            let keep = self
                .cand
                .iter()
                .take_while(|&&(_, l)| l as f64 >= cut)
                .count();
            self.cand.truncate(keep.max(1));
        }
        let p = probs(&self.cand, self.cfg.temperature);
        let r = self.rng.next_f64();
        let mut acc = 0.0;
        for (i, &pi) in p.iter().enumerate() {
            acc += pi;
            if r < acc {
                return Ok(self.cand[i].0);
            }
        }
        Ok(self.cand[self.cand.len() - 1].0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn logits() -> Vec<f32> {
        vec![1.0, 3.0, 2.5, -1.0, 3.0, 0.0]
    }

    #[test]
    fn greedy_takes_argmax_lowest_id_on_ties() {
        let mut s = Sampler::new(SamplerConfig::greedy()).unwrap();
        assert_eq!(s.sample(&logits()).unwrap(), 1);
        assert_eq!(argmax(&logits()), Some(1));
    }

    #[test]
    fn repetition_penalty_moves_greedy_choice() {
        let mut s = Sampler::new(SamplerConfig {
            repeat_penalty: 2.0,
            ..SamplerConfig::greedy()
        })
        .unwrap();
        s.accept(1);
        s.accept(4);
        // 3.0 / 2 = 1.5 < 2.5
        assert_eq!(s.sample(&logits()).unwrap(), 2);
    }

    #[test]
    fn same_seed_same_tokens_and_seed_matters() {
        let cfg = SamplerConfig {
            temperature: 1.5,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            seed: 42,
            ..SamplerConfig::default()
        };
        let draw = |seed| {
            let mut s = Sampler::new(SamplerConfig {
                seed,
                ..cfg.clone()
            })
            .unwrap();
            (0..200)
                .map(|_| s.sample(&logits()).unwrap())
                .collect::<Vec<_>>()
        };
        assert_eq!(draw(42), draw(42));
        assert_ne!(draw(42), draw(43));
    }

    #[test]
    fn frequencies_follow_the_softmax() {
        let mut s = Sampler::new(SamplerConfig {
            temperature: 1.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            seed: 7,
            ..SamplerConfig::default()
        })
        .unwrap();
        let l = [0.0f32, (2.0f32).ln(), (3.0f32).ln()]; // probabilities 1/6, 2/6, 3/6
        let mut n = [0usize; 3];
        let draws = 60_000;
        for _ in 0..draws {
            n[s.sample(&l).unwrap() as usize] += 1;
        }
        for (i, want) in [1.0 / 6.0, 2.0 / 6.0, 3.0 / 6.0].iter().enumerate() {
            let got = n[i] as f64 / draws as f64;
            assert!((got - want).abs() < 0.01, "token {i}: {got} vs {want}");
        }
    }

    #[test]
    fn top_k_top_p_min_p_restrict_the_candidates() {
        let l = [5.0f32, 4.0, 3.0, 2.0, 1.0, 0.0];
        let only = |cfg: SamplerConfig| {
            let mut s = Sampler::new(cfg).unwrap();
            let mut seen = std::collections::BTreeSet::new();
            for _ in 0..2000 {
                seen.insert(s.sample(&l).unwrap());
            }
            seen.into_iter().collect::<Vec<_>>()
        };
        let base = SamplerConfig {
            temperature: 5.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            seed: 3,
            ..SamplerConfig::default()
        };
        assert_eq!(
            only(SamplerConfig {
                top_k: 2,
                ..base.clone()
            }),
            vec![0, 1]
        );
        // p: .636 .234 .086 ...: top-p 0.8 keeps two
        assert_eq!(
            only(SamplerConfig {
                top_p: 0.8,
                ..base.clone()
            }),
            vec![0, 1]
        );
        // min-p 0.3: keeps logits >= 5 + ln 0.3 = 3.80
        assert_eq!(
            only(SamplerConfig {
                min_p: 0.3,
                ..base.clone()
            }),
            vec![0, 1]
        );
        assert_eq!(only(base).len(), 6);
    }

    #[test]
    fn bad_settings_are_errors() {
        for cfg in [
            SamplerConfig {
                top_p: 1.5,
                ..SamplerConfig::default()
            },
            SamplerConfig {
                min_p: -0.1,
                ..SamplerConfig::default()
            },
            SamplerConfig {
                repeat_penalty: 0.0,
                ..SamplerConfig::default()
            },
            SamplerConfig {
                temperature: f32::NAN,
                ..SamplerConfig::default()
            },
        ] {
            assert!(Sampler::new(cfg).is_err());
        }
        assert!(Sampler::new(SamplerConfig::greedy())
            .unwrap()
            .sample(&[])
            .is_err());
    }
}
