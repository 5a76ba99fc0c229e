//! KL-divergence base files: a model's log-probabilities over a text, saved
//! once (`--kl-divergence-base FILE`) and compared against another model,
//! build or instruction-set level later (`--kl-divergence`), as llama.cpp's
//! `llama-perplexity` does it.
//!
//! Two layouts, told apart by their first eight bytes:
//!
//! * **llama.cpp's** (`_logits_`): `n_ctx`, `n_vocab`, `n_chunk` as 32-bit
//!   little-endian integers, then the `n_chunk · n_ctx` token ids (i32), then
//!   for every chunk the `n_ctx − 1 − n_ctx/2` scored positions, each a row of
//!   `nv = 2⌈n_vocab/2⌉ + 4` u16: two f32 (`scale`, `min_log_prob`) and one u16
//!   `q_i` per token with `log p_i = scale · q_i + min_log_prob` (logits more
//!   than 16 below the maximum are clamped to the minimum). Files written by
//!   `llama-perplexity --kl-divergence-base` read here and files written here
//!   read in llama.cpp.
//! * **strata's top-k** (`STRATAKL`): version 1, `n_ctx`, `n_vocab`,
//!   `n_chunk`, `k` (u32), the token ids (u32), then per scored position the
//!   f32 log-probability of the token that follows and the `k` most likely
//!   tokens as (u32 id, f32 log-probability), most likely first. It is ~100×
//!   smaller (a reference that can be committed to a repository); its KL
//!   divergence groups the tokens outside the top `k` into one outcome, so it
//!   is a lower bound of the full one (the grouping property of the KL
//!   divergence), equal to it when those tokens carry no mass.
//!
//! [`compare`] scores one position the way llama.cpp does (KL divergence over
//! the base's tokens with log-probability above −16, Δp of the token that
//! follows, same most-likely token) and [`KldStats`] accumulates the summary
//! llama.cpp prints.
//!
//! Every size read from a file is checked against the file's length before
//! anything is allocated, so a corrupt or hostile file gives a
//! [`ModelError::LogitsFile`] naming it.

use std::path::Path;

use crate::{ModelError, Result};

mod file;
mod stats;
#[cfg(test)]
mod tests;

pub use file::{convert_to_top_k, BaseReader, BaseWriter};
pub use stats::{Estimate, KldStats};

/// First bytes of llama.cpp's layout.
pub const LLAMA_MAGIC: [u8; 8] = *b"_logits_";
/// First bytes of strata's top-k layout.
pub const TOPK_MAGIC: [u8; 8] = *b"STRATAKL";
/// Version of the top-k layout this module reads and writes.
pub const TOPK_VERSION: u32 = 1;
/// Largest context accepted from a file.
pub const MAX_N_CTX: usize = 1 << 20;
/// Largest vocabulary accepted from a file.
pub const MAX_N_VOCAB: usize = 1 << 22;
/// Largest `k` of the top-k layout.
pub const MAX_TOP_K: usize = 1 << 16;

/// Log-probabilities at or below this are left out of the KL sum (llama.cpp's rule).
const MIN_LOG_PROB: f32 = -16.0;

/// Which layout a base file has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// llama.cpp's `--kl-divergence-base` layout (every token, 16-bit).
    Llama,
    /// strata's compact layout with the `k` most likely tokens per position.
    TopK(usize),
}

/// What a base file holds besides the rows: its layout, the chunking and the
/// evaluated tokens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Header {
    /// Row layout.
    pub format: Format,
    /// Tokens per chunk.
    pub n_ctx: usize,
    /// Vocabulary size of the model that wrote it.
    pub n_vocab: usize,
    /// Number of chunks.
    pub n_chunk: usize,
    /// The `n_chunk · n_ctx` evaluated tokens (before any BOS replacement).
    pub tokens: Vec<u32>,
}

impl Header {
    /// First scored position of a chunk (`n_ctx / 2`).
    pub fn first(&self) -> usize {
        self.n_ctx / 2
    }

    /// Scored positions per chunk (`n_ctx − 1 − n_ctx/2`).
    pub fn scored_per_chunk(&self) -> usize {
        self.n_ctx - 1 - self.n_ctx / 2
    }

    /// The tokens of chunk `i`.
    pub fn chunk_tokens(&self, i: usize) -> &[u32] {
        &self.tokens[i * self.n_ctx..(i + 1) * self.n_ctx]
    }

    fn header_bytes(&self) -> usize {
        let fields = match self.format {
            Format::Llama => 3,
            Format::TopK(_) => 5,
        };
        8 + 4 * fields + 4 * self.tokens.len()
    }

    fn row_bytes(&self) -> usize {
        match self.format {
            Format::Llama => 2 * llama_row_len(self.n_vocab),
            Format::TopK(k) => 4 + 8 * k,
        }
    }

    fn check(&self, path: &Path) -> Result<()> {
        let bad = |msg: String| Err(bad_file(path, msg));
        if !(4..=MAX_N_CTX).contains(&self.n_ctx) {
            return bad(format!(
                "n_ctx {} is outside 4..={MAX_N_CTX}; the file is corrupt or not a base file",
                self.n_ctx
            ));
        }
        if !(1..=MAX_N_VOCAB).contains(&self.n_vocab) {
            return bad(format!(
                "n_vocab {} is outside 1..={MAX_N_VOCAB}",
                self.n_vocab
            ));
        }
        if self.n_chunk == 0 {
            return bad("it holds no chunk".into());
        }
        if let Format::TopK(k) = self.format {
            if !(1..=MAX_TOP_K.min(self.n_vocab)).contains(&k) {
                return bad(format!(
                    "top-k {k} is outside 1..=min(n_vocab, {MAX_TOP_K})"
                ));
            }
        }
        if let Some(t) = self.tokens.iter().find(|&&t| t as usize >= self.n_vocab) {
            return bad(format!(
                "token id {t} is outside the vocabulary of {}",
                self.n_vocab
            ));
        }
        Ok(())
    }
}

/// u16 per row of llama.cpp's layout.
fn llama_row_len(n_vocab: usize) -> usize {
    2 * n_vocab.div_ceil(2) + 4
}

fn bad_file(path: &Path, msg: String) -> ModelError {
    ModelError::LogitsFile {
        path: path.display().to_string(),
        msg,
    }
}

fn io_err(path: &Path, what: &str, e: std::io::Error) -> ModelError {
    bad_file(path, format!("{what}: {e}"))
}

/// The base distribution at one scored position.
#[derive(Clone, Debug, PartialEq)]
pub enum BaseRow {
    /// llama.cpp's encoding: `log p_i = scale · q_i + min_log_prob`.
    Quantized {
        /// Step between two codes.
        scale: f32,
        /// Log-probability of code 0.
        min_log_prob: f32,
        /// One code per vocabulary entry.
        q: Vec<u16>,
    },
    /// The most likely tokens, most likely first, and the log-probability of
    /// the token that follows.
    TopK {
        /// Token ids, by decreasing probability (ties: lower id first).
        ids: Vec<u32>,
        /// Their log-probabilities.
        log_probs: Vec<f32>,
        /// Log-probability of the token that follows this position.
        target_log_prob: f32,
    },
}

/// `round(x)` with ties to even, as llama.cpp's `nearest_int` (for the
/// range it is used on).
fn nearest(x: f32) -> u16 {
    x.round_ties_even().clamp(0.0, 65535.0) as u16
}

/// `log Σ exp(l_i − max)` in f64, and the first index of the maximum.
fn log_sum_exp(logits: &[f32]) -> (f32, f64, usize) {
    let (mut max, mut imax) = (logits[0], 0);
    for (i, &v) in logits.iter().enumerate().skip(1) {
        if v > max {
            max = v;
            imax = i;
        }
    }
    let s: f64 = logits.iter().map(|&v| ((v - max) as f64).exp()).sum();
    (max, s.ln(), imax)
}

impl BaseRow {
    /// llama.cpp's 16-bit encoding of `log softmax(logits)`.
    pub fn quantize(logits: &[f32]) -> BaseRow {
        let (max, lse, _) = log_sum_exp(logits);
        let min = logits.iter().fold(max, |a, &b| a.min(b)).max(max - 16.0);
        let lse = lse as f32;
        let min_log_prob = min - max - lse;
        let scale = (max - min) / 65535.0;
        let q = if scale > 0.0 {
            let inv = 1.0 / scale;
            logits
                .iter()
                .map(|&v| if v > min { nearest(inv * (v - min)) } else { 0 })
                .collect()
        } else {
            vec![0; logits.len()]
        };
        BaseRow::Quantized {
            scale,
            min_log_prob,
            q,
        }
    }

    /// The `k` most likely tokens of `log softmax(logits)` and the
    /// log-probability of `target`.
    pub fn top_k(logits: &[f32], target: usize, k: usize) -> BaseRow {
        let (max, lse, _) = log_sum_exp(logits);
        let lp = |v: f32| ((v - max) as f64 - lse) as f32;
        let all: Vec<f32> = logits.iter().map(|&v| lp(v)).collect();
        top_k_of(&all, target, k)
    }

    /// The same distribution in the top-k layout.
    pub fn to_top_k(&self, target: usize, k: usize) -> BaseRow {
        match self {
            BaseRow::Quantized { .. } => {
                let all: Vec<f32> = (0..self.len()).map(|i| self.log_prob(i)).collect();
                top_k_of(&all, target, k)
            }
            BaseRow::TopK { .. } => self.clone(),
        }
    }

    /// Tokens the row describes (the vocabulary for the quantized layout, `k` for top-k).
    pub fn len(&self) -> usize {
        match self {
            BaseRow::Quantized { q, .. } => q.len(),
            BaseRow::TopK { ids, .. } => ids.len(),
        }
    }

    /// True if the row describes no token.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Log-probability of vocabulary entry `i` (quantized layout) or of the
    /// `i`-th most likely token (top-k layout).
    pub fn log_prob(&self, i: usize) -> f32 {
        match self {
            BaseRow::Quantized {
                scale,
                min_log_prob,
                q,
            } => scale * q[i] as f32 + min_log_prob,
            BaseRow::TopK { log_probs, .. } => log_probs[i],
        }
    }
}

fn top_k_of(log_probs: &[f32], target: usize, k: usize) -> BaseRow {
    let mut idx: Vec<u32> = (0..log_probs.len() as u32).collect();
    let k = k.min(idx.len());
    let cmp = |a: &u32, b: &u32| {
        log_probs[*b as usize]
            .total_cmp(&log_probs[*a as usize])
            .then(a.cmp(b))
    };
    if k < idx.len() {
        idx.select_nth_unstable_by(k, cmp);
        idx.truncate(k);
    }
    idx.sort_unstable_by(cmp);
    BaseRow::TopK {
        log_probs: idx.iter().map(|&i| log_probs[i as usize]).collect(),
        ids: idx,
        target_log_prob: log_probs[target],
    }
}

/// How one position of the compared model differs from the base.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Position {
    /// KL(base ‖ compared) at this position.
    pub kld: f64,
    /// p(next token) compared − p(next token) base.
    pub p_diff: f64,
    /// −log p(next token) of the compared model.
    pub nll: f64,
    /// −log p(next token) of the base.
    pub nll_base: f64,
    /// Both put the same token first.
    pub same_top: bool,
}

/// Compares the compared model's `logits` at one position with the base row,
/// `target` being the token that follows.
///
/// Errors: a row that does not fit `logits` (another vocabulary) or a
/// target outside it ([`ModelError::KldBaseRow`]).
pub fn compare(base: &BaseRow, logits: &[f32], target: usize) -> Result<Position> {
    let (max, lse, imax) = log_sum_exp(logits);
    let lq: Vec<f64> = logits.iter().map(|&v| (v - max) as f64 - lse).collect();
    compare_log_probs(base, &lq, imax, target)
}

/// [`compare`] with the compared model's log-probabilities `lq` given
/// (already normalized, e.g. read from another base file) and its most
/// likely token `imax`.
///
/// Errors: as [`compare`].
pub fn compare_log_probs(
    base: &BaseRow,
    lq: &[f64],
    imax: usize,
    target: usize,
) -> Result<Position> {
    let n = lq.len();
    let fits = match base {
        BaseRow::Quantized { q, .. } => q.len() == n,
        BaseRow::TopK { ids, .. } => ids.iter().all(|&i| (i as usize) < n) && !ids.is_empty(),
    };
    if !fits || target >= n || imax >= n {
        return Err(ModelError::KldBaseRow {
            n_logits: n,
            target,
        });
    }
    let lq = |i: usize| lq[i];
    let nll = -lq(target);
    let (kld, nll_base, imax_base) = match base {
        BaseRow::Quantized { q, .. } => {
            let mut kld = 0.0;
            let (mut best, mut imax_base) = (f32::NEG_INFINITY, 0);
            for i in 0..q.len() {
                let lp = base.log_prob(i);
                if i == 0 || lp > best {
                    best = lp;
                    imax_base = i;
                }
                if lp > MIN_LOG_PROB {
                    kld += (lp as f64).exp() * (lp as f64 - lq(i));
                }
            }
            (kld, -(base.log_prob(target) as f64), imax_base)
        }
        BaseRow::TopK {
            ids,
            log_probs,
            target_log_prob,
        } => {
            let mut in_top = vec![false; n];
            let (mut kld, mut p_top) = (0.0, 0.0);
            for (&i, &lp) in ids.iter().zip(log_probs) {
                let lp = lp as f64;
                kld += lp.exp() * (lp - lq(i as usize));
                p_top += lp.exp();
                in_top[i as usize] = true;
            }
            // the rest of the vocabulary as one outcome; its base mass below
            // what the f32 log-probabilities resolve is rounding, not mass
            let p_rest = 1.0 - p_top;
            if p_rest > 64.0 * f32::EPSILON as f64 {
                let q_rest: f64 = (0..n).filter(|&i| !in_top[i]).map(|i| lq(i).exp()).sum();
                kld += p_rest * (p_rest.ln() - q_rest.max(1e-300).ln());
            }
            (kld, -(*target_log_prob as f64), ids[0] as usize)
        }
    };
    Ok(Position {
        kld,
        p_diff: (-nll).exp() - (-nll_base).exp(),
        nll,
        nll_base,
        same_top: imax == imax_base,
    })
}
