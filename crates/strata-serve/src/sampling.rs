//! Per-request sampling (stub until the sampler lands).
use crate::grammar::Constraint;

/// Sampling parameters.
#[derive(Clone, Debug)]
pub struct SamplingParams {
    /// t
    pub temperature: f32,
    /// p
    pub top_p: f32,
    /// k
    pub top_k: usize,
    /// m
    pub min_p: f32,
    /// s
    pub seed: u64,
    /// pp
    pub presence_penalty: f32,
    /// fp
    pub frequency_penalty: f32,
    /// rp
    pub repeat_penalty: f32,
    /// n
    pub penalty_last_n: usize,
    /// lp
    pub logprobs: Option<usize>,
    /// ie
    pub ignore_eos: bool,
}
impl Default for SamplingParams {
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
/// Sampled.
#[derive(Clone, Debug)]
pub struct Sampled {
    /// t
    pub token: u32,
    /// lp
    pub logprob: Option<f32>,
    /// top
    pub top: Vec<(u32, f32)>,
}
/// Error.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct SamplingError(String);
/// Sampler.
pub struct RequestSampler {
    s: strata_models::sample::Sampler,
}
impl RequestSampler {
    /// new
    pub fn new(
        p: &SamplingParams,
        _c: Option<Constraint>,
        _eog: Vec<u32>,
    ) -> Result<Self, SamplingError> {
        let s = strata_models::sample::Sampler::new(strata_models::sample::SamplerConfig {
            temperature: p.temperature,
            top_k: p.top_k,
            top_p: p.top_p,
            min_p: p.min_p,
            repeat_penalty: p.repeat_penalty,
            repeat_last_n: p.penalty_last_n,
            seed: p.seed,
        })
        .map_err(|e| SamplingError(e.to_string()))?;
        Ok(RequestSampler { s })
    }
    /// sample
    pub fn sample(&mut self, logits: &[f32]) -> Result<Sampled, SamplingError> {
        let t = self
            .s
            .sample(logits)
            .map_err(|e| SamplingError(e.to_string()))?;
        Ok(Sampled {
            token: t,
            logprob: None,
            top: vec![],
        })
    }
    /// accept
    pub fn accept(&mut self, t: u32) -> Result<(), SamplingError> {
        self.s.accept(t);
        Ok(())
    }
    /// done
    pub fn grammar_finished(&self) -> bool {
        false
    }
}
