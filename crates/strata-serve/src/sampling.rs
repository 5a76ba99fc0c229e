//! The per-request sampler: strata's sampling chain
//! ([`strata_models::sample::Sampler`]: top-k, top-p, min-p, temperature,
//! a seeded draw) with what a server request adds on top:
//!
//! - llama.cpp's `penalties` sampler: over the last `penalty_last_n`
//!   generated tokens, each distinct token's logit is divided by
//!   `repeat_penalty` (multiplied when not positive), then lowered by
//!   `count × frequency_penalty + presence_penalty`;
//! - a grammar ([`Constraint`]): tokens it does not allow get −∞, and once
//!   it is finished only end-of-generation tokens may be drawn;
//! - `ignore_eos`: end-of-generation tokens get −∞ (unless a grammar allows
//!   nothing else);
//! - log-probabilities of the raw logits (log-softmax at temperature 1, as
//!   OpenAI and llama-server report them) of the chosen token and the top n.
//!
//! A temperature of 0 or less is greedy: the token is
//! [`strata_models::sample::argmax`] of the logits after penalties and
//! masks, so with neither it is exactly `strata run --temp 0`'s choice. The
//! same seed gives the same tokens.
//!
//! ```
//! use strata_serve::sampling::{RequestSampler, SamplingParams};
//!
//! let p = SamplingParams { temperature: 0.0, logprobs: Some(1), ..SamplingParams::default() };
//! let mut s = RequestSampler::new(&p, None, vec![3])?;
//! let out = s.sample(&[0.5, 2.0, -1.0, 1.0])?;
//! assert_eq!(out.token, 1);
//! assert_eq!(out.top[0].0, 1);
//! s.accept(out.token)?;
//! # Ok::<(), strata_serve::sampling::SamplingError>(())
//! ```

use std::collections::{HashMap, VecDeque};

use strata_models::sample::{argmax, Sampler, SamplerConfig};

use crate::grammar::{Constraint, GrammarError};

/// The most alternatives [`SamplingParams::logprobs`] may ask for (OpenAI's
/// `top_logprobs` limit).
pub const MAX_TOP_LOGPROBS: usize = 20;

/// A request's sampling settings.
#[derive(Debug, Clone, PartialEq)]
pub struct SamplingParams {
    /// Temperature; 0 or less is greedy.
    pub temperature: f32,
    /// Keep the smallest set of tokens whose probability reaches this (1 = off).
    pub top_p: f32,
    /// Keep the k most likely tokens (0 = all).
    pub top_k: usize,
    /// Drop tokens less likely than `min_p` × the most likely one (0 = off).
    pub min_p: f32,
    /// Seed of the random draw.
    pub seed: u64,
    /// Subtracted once from the logit of every token in the penalty window
    /// (OpenAI's range, −2 to 2; 0 = off).
    pub presence_penalty: f32,
    /// Subtracted from a token's logit once per occurrence in the penalty
    /// window (−2 to 2; 0 = off).
    pub frequency_penalty: f32,
    /// Divides positive (multiplies other) logits of tokens in the penalty
    /// window (1 = off).
    pub repeat_penalty: f32,
    /// How many of the last generated tokens the penalties look at (0 = off).
    pub penalty_last_n: usize,
    /// `None`: no log-probabilities; `Some(n)`: the chosen token's and the n
    /// most likely tokens' (n at most [`MAX_TOP_LOGPROBS`]).
    pub logprobs: Option<usize>,
    /// Never draw an end-of-generation token.
    pub ignore_eos: bool,
}

impl Default for SamplingParams {
    /// llama-server's defaults: temperature 0.8, top-k 40, top-p 0.95,
    /// min-p 0.05, penalties off over a 64-token window, no
    /// log-probabilities, seed 0 (a server draws a fresh seed for requests
    /// that give none, as llama-server does).
    fn default() -> Self {
        SamplingParams {
            temperature: 0.8,
            top_p: 0.95,
            top_k: 40,
            min_p: 0.05,
            seed: 0,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            repeat_penalty: 1.0,
            penalty_last_n: 64,
            logprobs: None,
            ignore_eos: false,
        }
    }
}

impl SamplingParams {
    /// Checks every setting's range (the errors are the client's:
    /// [`SamplingError::is_client_error`]).
    pub fn validate(&self) -> Result<(), SamplingError> {
        let bad = |name: &'static str, value: String, expected: &'static str| {
            Err(SamplingError::InvalidParam {
                name,
                value,
                expected,
            })
        };
        if !self.temperature.is_finite() {
            return bad(
                "temperature",
                self.temperature.to_string(),
                "a finite number (0 or less is greedy)",
            );
        }
        if !(0.0..=1.0).contains(&self.top_p) {
            return bad("top_p", self.top_p.to_string(), "between 0 and 1");
        }
        if !(0.0..=1.0).contains(&self.min_p) {
            return bad("min_p", self.min_p.to_string(), "between 0 and 1");
        }
        if !(-2.0..=2.0).contains(&self.presence_penalty) {
            return bad(
                "presence_penalty",
                self.presence_penalty.to_string(),
                "between -2 and 2",
            );
        }
        if !(-2.0..=2.0).contains(&self.frequency_penalty) {
            return bad(
                "frequency_penalty",
                self.frequency_penalty.to_string(),
                "between -2 and 2",
            );
        }
        if !(self.repeat_penalty.is_finite() && self.repeat_penalty > 0.0) {
            return bad(
                "repeat_penalty",
                self.repeat_penalty.to_string(),
                "a positive number (1 is off)",
            );
        }
        if let Some(n) = self.logprobs.filter(|&n| n > MAX_TOP_LOGPROBS) {
            return bad("top_logprobs", n.to_string(), "at most 20");
        }
        Ok(())
    }

    fn penalties_active(&self) -> bool {
        self.penalty_last_n > 0
            && (self.repeat_penalty != 1.0
                || self.frequency_penalty != 0.0
                || self.presence_penalty != 0.0)
    }
}

/// Errors from [`RequestSampler`].
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SamplingError {
    /// A setting is out of range (the client's error).
    #[error("invalid sampling parameter {name} = {value}: must be {expected}")]
    InvalidParam {
        /// The setting's API name.
        name: &'static str,
        /// The value given.
        value: String,
        /// What it must be.
        expected: &'static str,
    },
    /// [`RequestSampler::sample`] got no logits.
    #[error("no logits to sample from (an empty vocabulary?)")]
    EmptyLogits,
    /// A logit is NaN or +∞: the model's output is broken.
    #[error("the logit of token {token} is {value}: the model produced NaN or +inf, so no token can be sampled")]
    BadLogit {
        /// The token.
        token: u32,
        /// Its logit.
        value: f32,
    },
    /// Every token is ruled out (by the grammar, `ignore_eos`, or −∞ logits).
    #[error("no token can be sampled: {0}")]
    NoCandidate(String),
    /// The grammar failed.
    #[error("structured output: {0}")]
    Grammar(#[from] GrammarError),
    /// strata's sampler failed (a bug: the settings were checked).
    #[error("sampler: {0}")]
    Sampler(String),
}

impl SamplingError {
    /// Whether the request is at fault (HTTP 400) rather than the server or
    /// the model.
    pub fn is_client_error(&self) -> bool {
        matches!(self, SamplingError::InvalidParam { .. })
    }
}

/// One sampled token.
#[derive(Debug, Clone, PartialEq)]
pub struct Sampled {
    /// The token.
    pub token: u32,
    /// Its log-probability under the raw logits, when asked for.
    pub logprob: Option<f32>,
    /// The most likely tokens and their log-probabilities under the raw
    /// logits, most likely first (ties: lower id first); empty unless asked
    /// for.
    pub top: Vec<(u32, f32)>,
}

/// A request's sampler: its settings, RNG, penalty window and grammar.
#[derive(Debug)]
pub struct RequestSampler {
    params: SamplingParams,
    sampler: Sampler,
    constraint: Option<Constraint>,
    eog: Vec<u32>,
    /// The last `penalty_last_n` generated tokens and their counts.
    window: VecDeque<u32>,
    counts: HashMap<u32, u32>,
    /// Reused per token: the logits after penalties and masks, and the
    /// still-possible tokens when a mask applies.
    work: Vec<f32>,
    cand_ids: Vec<u32>,
    cand_logits: Vec<f32>,
}

impl RequestSampler {
    /// A sampler for one request; `eog` are the model's end-of-generation
    /// tokens (for `ignore_eos` and a finished grammar). Errors on settings
    /// out of range.
    pub fn new(
        p: &SamplingParams,
        constraint: Option<Constraint>,
        eog: Vec<u32>,
    ) -> Result<Self, SamplingError> {
        p.validate()?;
        let sampler = Sampler::new(SamplerConfig {
            temperature: p.temperature,
            top_k: p.top_k,
            top_p: p.top_p,
            min_p: p.min_p,
            // penalties are applied here, over generated tokens only
            repeat_penalty: 1.0,
            repeat_last_n: 0,
            seed: p.seed,
        })
        .map_err(|e| SamplingError::Sampler(e.to_string()))?;
        Ok(RequestSampler {
            params: p.clone(),
            sampler,
            constraint,
            eog,
            window: VecDeque::new(),
            counts: HashMap::new(),
            work: Vec::new(),
            cand_ids: Vec::new(),
            cand_logits: Vec::new(),
        })
    }

    /// The settings.
    pub fn params(&self) -> &SamplingParams {
        &self.params
    }

    /// Picks the next token from `logits` (one per token id; ids past the
    /// grammar's vocabulary are never allowed by a grammar).
    pub fn sample(&mut self, logits: &[f32]) -> Result<Sampled, SamplingError> {
        if logits.is_empty() {
            return Err(SamplingError::EmptyLogits);
        }
        if let Some(i) = logits
            .iter()
            .position(|l| l.is_nan() || *l == f32::INFINITY)
        {
            return Err(SamplingError::BadLogit {
                token: i as u32,
                value: logits[i],
            });
        }
        self.work.clear();
        self.work.extend_from_slice(logits);
        self.apply_penalties();
        let masked = self.apply_masks()?;
        let greedy = self.params.temperature <= 0.0;
        let token = if masked {
            self.cand_ids.clear();
            self.cand_logits.clear();
            for (i, &l) in self.work.iter().enumerate() {
                if l > f32::NEG_INFINITY {
                    self.cand_ids.push(i as u32);
                    self.cand_logits.push(l);
                }
            }
            if self.cand_ids.is_empty() {
                return Err(SamplingError::NoCandidate(self.why_nothing()));
            }
            let idx = if greedy {
                argmax(&self.cand_logits)
            } else {
                Some(self.draw_candidate()?)
            };
            idx.and_then(|i| self.cand_ids.get(i as usize).copied())
                .ok_or_else(|| SamplingError::Sampler("candidate index out of range".into()))?
        } else {
            let best = argmax(&self.work)
                .ok_or_else(|| SamplingError::Sampler("no maximum of the logits".into()))?;
            if greedy {
                best
            } else {
                let t = self
                    .sampler
                    .sample(&self.work)
                    .map_err(|e| SamplingError::Sampler(e.to_string()))?;
                // a rounding slip past the last likely token could land on
                // a -inf one: take the most likely instead
                match self.work.get(t as usize) {
                    Some(&l) if l > f32::NEG_INFINITY => t,
                    _ => best,
                }
            }
        };
        let (logprob, top) = match self.params.logprobs {
            None => (None, Vec::new()),
            Some(n) => {
                let (lp, top) = logprobs(logits, token, n);
                (Some(lp), top)
            }
        };
        Ok(Sampled {
            token,
            logprob,
            top,
        })
    }

    /// Draws among the candidates (all with finite logits); an index into
    /// them.
    fn draw_candidate(&mut self) -> Result<u32, SamplingError> {
        self.sampler
            .sample(&self.cand_logits)
            .map_err(|e| SamplingError::Sampler(e.to_string()))
    }

    /// Records a generated token: the penalty window and the grammar state.
    pub fn accept(&mut self, token: u32) -> Result<(), SamplingError> {
        if let Some(c) = &mut self.constraint {
            c.accept(token)?;
        }
        if self.params.penalties_active() {
            if self.window.len() == self.params.penalty_last_n {
                if let Some(old) = self.window.pop_front() {
                    if let Some(c) = self.counts.get_mut(&old) {
                        *c -= 1;
                        if *c == 0 {
                            self.counts.remove(&old);
                        }
                    }
                }
            }
            self.window.push_back(token);
            *self.counts.entry(token).or_insert(0) += 1;
        }
        Ok(())
    }

    /// Whether the grammar (if any) is complete: only end-of-generation
    /// may follow, and the server ends the request with `finish_reason`
    /// `"stop"`.
    pub fn grammar_finished(&self) -> bool {
        self.constraint
            .as_ref()
            .is_some_and(Constraint::is_finished)
    }

    /// llama.cpp's `penalties` sampler over the window, on `work`.
    fn apply_penalties(&mut self) {
        if !self.params.penalties_active() {
            return;
        }
        let p = &self.params;
        for (&tok, &count) in &self.counts {
            let Some(l) = self.work.get_mut(tok as usize) else {
                continue;
            };
            if *l == f32::NEG_INFINITY {
                continue;
            }
            if *l <= 0.0 {
                *l *= p.repeat_penalty;
            } else {
                *l /= p.repeat_penalty;
            }
            let present = if count > 0 { p.presence_penalty } else { 0.0 };
            // a finite logit stays finite (no accidental -inf mask, no +inf)
            *l = (*l - (count as f32 * p.frequency_penalty + present)).clamp(f32::MIN, f32::MAX);
        }
    }

    /// Grammar and `ignore_eos` masks on `work`; whether any applied.
    fn apply_masks(&mut self) -> Result<bool, SamplingError> {
        let eog = &self.eog;
        let mut mask_eog = self.params.ignore_eos;
        let mut masked = false;
        if let Some(c) = &mut self.constraint {
            masked = true;
            if c.is_finished() {
                // only end-of-generation; the grammar's end wins over ignore_eos
                for (i, l) in self.work.iter_mut().enumerate() {
                    if !eog.contains(&(i as u32)) {
                        *l = f32::NEG_INFINITY;
                    }
                }
                mask_eog = false;
            } else {
                let mask = c.allowed()?;
                mask.mask_logits(&mut self.work);
                // ... and over ignore_eos when it allows nothing else
                mask_eog &= mask.iter().any(|t| !eog.contains(&t));
            }
        }
        if mask_eog {
            masked = true;
            for &t in eog {
                if let Some(l) = self.work.get_mut(t as usize) {
                    *l = f32::NEG_INFINITY;
                }
            }
        }
        Ok(masked)
    }

    fn why_nothing(&self) -> String {
        match &self.constraint {
            Some(c) if c.is_finished() => {
                "the grammar is complete and the model has no end-of-generation token".into()
            }
            Some(_) => "every token the grammar allows has a logit of -inf".into(),
            None => "every token is end-of-generation (ignore_eos) or has a logit of -inf".into(),
        }
    }
}

/// Log-softmax of `logits` at temperature 1: the log-probability of
/// `token` and the `n` most likely tokens (ties: lower id first).
fn logprobs(logits: &[f32], token: u32, n: usize) -> (f32, Vec<(u32, f32)>) {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let lse = if max == f32::NEG_INFINITY {
        f64::NEG_INFINITY
    } else {
        let sum: f64 = logits.iter().map(|&l| f64::from((l - max).exp())).sum();
        f64::from(max) + sum.ln()
    };
    let lp = |l: f32| {
        if l == f32::NEG_INFINITY {
            f32::NEG_INFINITY
        } else {
            (f64::from(l) - lse) as f32
        }
    };
    let chosen = logits
        .get(token as usize)
        .map_or(f32::NEG_INFINITY, |&l| lp(l));
    // top n by logit, scanning ids in ascending order: a later equal logit
    // has a higher id, so it only goes in after the equal ones
    let mut top: Vec<(u32, f32)> = Vec::with_capacity(n + 1);
    if n > 0 {
        for (i, &l) in logits.iter().enumerate() {
            if top.len() == n && top.last().is_some_and(|&(_, m)| l <= m) {
                continue;
            }
            let at = top.partition_point(|&(_, m)| m >= l);
            top.insert(at, (i as u32, l));
            top.truncate(n);
        }
    }
    for e in &mut top {
        e.1 = lp(e.1);
    }
    (chosen, top)
}

#[cfg(test)]
mod tests;
