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

use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use crate::{ModelError, Result};

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
/// target outside it ([`ModelError::Invalid`]).
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
        return Err(ModelError::Invalid(format!(
            "KL divergence: the base row does not match {n} logits (target {target}); \
             was the base written with another model's vocabulary?"
        )));
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

/// Reads a base file chunk by chunk (from a file, or any reader of known length).
pub struct BaseReader<R = BufReader<File>> {
    path: PathBuf,
    header: Header,
    r: R,
    next: usize,
}

fn read_u32(r: &mut impl Read, path: &Path, what: &str) -> Result<u32> {
    let mut b = [0u8; 4];
    r.read_exact(&mut b)
        .map_err(|e| io_err(path, &format!("reading {what}"), e))?;
    Ok(u32::from_le_bytes(b))
}

impl BaseReader {
    /// Opens a base file of either layout and reads its header.
    ///
    /// Errors: [`ModelError::LogitsFile`] for a file that cannot be read,
    /// has another layout, sizes out of range, token ids outside the
    /// vocabulary, or a length that does not match its header (truncated or
    /// with trailing bytes).
    pub fn open(path: &Path) -> Result<BaseReader> {
        let f = File::open(path).map_err(|e| io_err(path, "cannot open it", e))?;
        let len = f
            .metadata()
            .map_err(|e| io_err(path, "cannot read its size", e))?
            .len();
        BaseReader::from_reader(path, BufReader::with_capacity(1 << 16, f), len)
    }
}

impl<R: Read> BaseReader<R> {
    /// Reads the header of `len` bytes of a base file from `r`; `name` names
    /// it in errors. Errors as [`BaseReader::open`].
    pub fn from_reader(name: &Path, mut r: R, len: u64) -> Result<BaseReader<R>> {
        let path = name;
        let mut magic = [0u8; 8];
        r.read_exact(&mut magic)
            .map_err(|e| io_err(path, "reading the magic", e))?;
        let format =
            match magic {
                LLAMA_MAGIC => Format::Llama,
                TOPK_MAGIC => {
                    let v = read_u32(&mut r, path, "the version")?;
                    if v != TOPK_VERSION {
                        return Err(bad_file(
                            path,
                            format!("top-k layout version {v}; this strata reads {TOPK_VERSION}"),
                        ));
                    }
                    Format::TopK(0)
                }
                _ => return Err(bad_file(
                    path,
                    "does not look like a file of log-probabilities (no `_logits_` or `STRATAKL` \
                     magic); write one with `--kl-divergence-base FILE` first"
                        .into(),
                )),
            };
        let n_ctx = read_u32(&mut r, path, "n_ctx")? as usize;
        let n_vocab = read_u32(&mut r, path, "n_vocab")? as usize;
        let n_chunk = read_u32(&mut r, path, "n_chunk")? as usize;
        let format = match format {
            Format::TopK(_) => Format::TopK(read_u32(&mut r, path, "k")? as usize),
            f => f,
        };
        let mut header = Header {
            format,
            n_ctx,
            n_vocab,
            n_chunk,
            tokens: Vec::new(),
        };
        // check the sizes and the length before allocating anything by them
        let probe = Header {
            tokens: Vec::new(),
            ..header.clone()
        };
        probe.check(path)?;
        let expected = (n_chunk as u128) * (n_ctx as u128) * 4
            + probe.header_bytes() as u128
            + (n_chunk as u128) * (probe.scored_per_chunk() as u128) * (probe.row_bytes() as u128);
        if expected != len as u128 {
            return Err(bad_file(
                path,
                format!(
                    "{len} bytes, but its header (n_ctx {n_ctx}, n_vocab {n_vocab}, {n_chunk} chunks) \
                     needs {expected}; the file is truncated or corrupt"
                ),
            ));
        }
        let mut raw = vec![0u8; n_chunk * n_ctx * 4];
        r.read_exact(&mut raw)
            .map_err(|e| io_err(path, "reading the tokens", e))?;
        header.tokens = raw
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        header.check(path)?;
        Ok(BaseReader {
            path: path.to_path_buf(),
            header,
            r,
            next: 0,
        })
    }

    /// The file's header.
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// The scored rows of the next chunk, or `None` after the last.
    pub fn next_chunk(&mut self) -> Result<Option<Vec<BaseRow>>> {
        if self.next == self.header.n_chunk {
            return Ok(None);
        }
        self.next += 1;
        let h = &self.header;
        let path = &self.path;
        let mut rows = Vec::with_capacity(h.scored_per_chunk());
        let mut buf = vec![0u8; h.row_bytes()];
        for _ in 0..h.scored_per_chunk() {
            self.r
                .read_exact(&mut buf)
                .map_err(|e| io_err(path, "reading a row", e))?;
            let f = |o: usize| f32::from_le_bytes([buf[o], buf[o + 1], buf[o + 2], buf[o + 3]]);
            let row = match h.format {
                Format::Llama => BaseRow::Quantized {
                    scale: f(0),
                    min_log_prob: f(4),
                    q: buf[8..8 + 2 * h.n_vocab]
                        .chunks_exact(2)
                        .map(|c| u16::from_le_bytes([c[0], c[1]]))
                        .collect(),
                },
                Format::TopK(k) => {
                    let mut ids = Vec::with_capacity(k);
                    let mut log_probs = Vec::with_capacity(k);
                    for j in 0..k {
                        let o = 4 + 8 * j;
                        let id = u32::from_le_bytes([buf[o], buf[o + 1], buf[o + 2], buf[o + 3]]);
                        if id as usize >= h.n_vocab {
                            return Err(bad_file(
                                path,
                                format!("token id {id} outside the vocabulary of {}", h.n_vocab),
                            ));
                        }
                        ids.push(id);
                        log_probs.push(f(o + 4));
                    }
                    BaseRow::TopK {
                        ids,
                        log_probs,
                        target_log_prob: f(0),
                    }
                }
            };
            rows.push(row);
        }
        Ok(Some(rows))
    }
}

/// Writes a base file; the file appears under its name only when
/// [`finish`](BaseWriter::finish) succeeds (it is written to a temporary
/// name beside it first).
pub struct BaseWriter {
    path: PathBuf,
    tmp: PathBuf,
    header: Header,
    w: Option<BufWriter<File>>,
    rows: usize,
}

impl BaseWriter {
    /// Starts a file with the given header.
    ///
    /// Errors: a header with sizes out of range or a file that cannot be created.
    pub fn create(path: &Path, header: Header) -> Result<BaseWriter> {
        header.check(path)?;
        if header.tokens.len() != header.n_chunk * header.n_ctx {
            return Err(bad_file(
                path,
                format!(
                    "{} tokens for {} chunks of {}",
                    header.tokens.len(),
                    header.n_chunk,
                    header.n_ctx
                ),
            ));
        }
        let mut name = path.file_name().unwrap_or_default().to_os_string();
        name.push(".partial");
        let tmp = path.with_file_name(name);
        let f = File::create(&tmp).map_err(|e| io_err(path, "cannot create it", e))?;
        let mut w = BufWriter::with_capacity(1 << 16, f);
        let mut put = |b: &[u8]| w.write_all(b);
        let res = (|| -> std::io::Result<()> {
            match header.format {
                Format::Llama => {
                    put(&LLAMA_MAGIC)?;
                    put(&(header.n_ctx as u32).to_le_bytes())?;
                    put(&(header.n_vocab as u32).to_le_bytes())?;
                    put(&(header.n_chunk as u32).to_le_bytes())?;
                }
                Format::TopK(k) => {
                    put(&TOPK_MAGIC)?;
                    put(&TOPK_VERSION.to_le_bytes())?;
                    put(&(header.n_ctx as u32).to_le_bytes())?;
                    put(&(header.n_vocab as u32).to_le_bytes())?;
                    put(&(header.n_chunk as u32).to_le_bytes())?;
                    put(&(k as u32).to_le_bytes())?;
                }
            }
            for t in &header.tokens {
                put(&t.to_le_bytes())?;
            }
            Ok(())
        })();
        if let Err(e) = res {
            let _ = std::fs::remove_file(&tmp);
            return Err(io_err(path, "writing the header", e));
        }
        Ok(BaseWriter {
            path: path.to_path_buf(),
            tmp,
            header,
            w: Some(w),
            rows: 0,
        })
    }

    /// The header being written.
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// Appends the next scored position's row, which must have the file's
    /// layout (a quantized row for llama.cpp's, top-k with the file's `k` for strata's).
    pub fn write_row(&mut self, row: &BaseRow) -> Result<()> {
        let path = self.path.clone();
        let total = self.header.n_chunk * self.header.scored_per_chunk();
        if self.rows == total {
            return Err(bad_file(&path, format!("all {total} rows are written")));
        }
        let w = self
            .w
            .as_mut()
            .ok_or_else(|| bad_file(&path, "the writer failed earlier".into()))?;
        let res = match (self.header.format, row) {
            (
                Format::Llama,
                BaseRow::Quantized {
                    scale,
                    min_log_prob,
                    q,
                },
            ) if q.len() == self.header.n_vocab => (|| {
                w.write_all(&scale.to_le_bytes())?;
                w.write_all(&min_log_prob.to_le_bytes())?;
                let mut b = Vec::with_capacity(2 * llama_row_len(q.len()) - 8);
                for v in q {
                    b.extend_from_slice(&v.to_le_bytes());
                }
                b.resize(2 * llama_row_len(q.len()) - 8, 0);
                w.write_all(&b)
            })(),
            (
                Format::TopK(k),
                BaseRow::TopK {
                    ids,
                    log_probs,
                    target_log_prob,
                },
            ) if ids.len() == k && log_probs.len() == k => (|| {
                w.write_all(&target_log_prob.to_le_bytes())?;
                for (i, lp) in ids.iter().zip(log_probs) {
                    w.write_all(&i.to_le_bytes())?;
                    w.write_all(&lp.to_le_bytes())?;
                }
                Ok(())
            })(),
            (f, _) => {
                return Err(ModelError::Invalid(format!(
                    "KL-divergence base {}: a row of another layout than {f:?} (n_vocab {})",
                    path.display(),
                    self.header.n_vocab
                )))
            }
        };
        if let Err(e) = res {
            self.w = None;
            let _ = std::fs::remove_file(&self.tmp);
            return Err(io_err(&path, "writing a row", e));
        }
        self.rows += 1;
        Ok(())
    }

    /// Flushes the file and gives it its name.
    ///
    /// Errors: rows missing, or the file cannot be written or renamed.
    pub fn finish(mut self) -> Result<()> {
        let total = self.header.n_chunk * self.header.scored_per_chunk();
        let w = self
            .w
            .take()
            .ok_or_else(|| bad_file(&self.path, "the writer failed earlier".into()))?;
        if self.rows != total {
            let _ = std::fs::remove_file(&self.tmp);
            return Err(bad_file(
                &self.path,
                format!("{} of {total} rows written", self.rows),
            ));
        }
        let res = w
            .into_inner()
            .map_err(|e| e.into_error())
            .and_then(|f| f.sync_all())
            .and_then(|()| std::fs::rename(&self.tmp, &self.path));
        if let Err(e) = res {
            let _ = std::fs::remove_file(&self.tmp);
            return Err(io_err(&self.path, "finishing it", e));
        }
        Ok(())
    }
}

impl Drop for BaseWriter {
    fn drop(&mut self) {
        if self.w.take().is_some() {
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}

/// Rewrites a base file of either layout in the top-k layout with `k` tokens per position.
pub fn convert_to_top_k(input: &Path, output: &Path, k: usize) -> Result<()> {
    let mut r = BaseReader::open(input)?;
    let h = r.header().clone();
    let k = k.min(h.n_vocab);
    if let Format::TopK(have) = h.format {
        if have < k {
            return Err(bad_file(
                input,
                format!("holds the top {have} tokens per position; cannot write the top {k}"),
            ));
        }
    }
    let mut w = BaseWriter::create(
        output,
        Header {
            format: Format::TopK(k),
            ..h.clone()
        },
    )?;
    let mut chunk = 0;
    while let Some(rows) = r.next_chunk()? {
        let toks = h.chunk_tokens(chunk);
        for (j, row) in rows.iter().enumerate() {
            let target = toks[h.first() + j + 1] as usize;
            let row = match row {
                BaseRow::TopK {
                    ids,
                    log_probs,
                    target_log_prob,
                } => BaseRow::TopK {
                    ids: ids[..k].to_vec(),
                    log_probs: log_probs[..k].to_vec(),
                    target_log_prob: *target_log_prob,
                },
                q => q.to_top_k(target, k),
            };
            w.write_row(&row)?;
        }
        chunk += 1;
    }
    w.finish()
}

/// Accumulates [`Position`]s into llama.cpp's summary statistics.
#[derive(Clone, Debug, Default)]
pub struct KldStats {
    kld: Vec<f64>,
    p_diff: Vec<f64>,
    sum_nll: f64,
    sum_nll2: f64,
    sum_nll_base: f64,
    sum_nll_base2: f64,
    sum_nll_nll_base: f64,
    sum_kld: f64,
    sum_kld2: f64,
    sum_p_diff: f64,
    sum_p_diff2: f64,
    sum_p_diff4: f64,
    n_same_top: usize,
}

/// A mean and its uncertainty (standard error).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Estimate {
    /// The mean.
    pub value: f64,
    /// Its standard error.
    pub unc: f64,
}

fn mean_unc(sum: f64, sum2: f64, n: usize) -> Estimate {
    if n == 0 {
        return Estimate::default();
    }
    let f = sum / n as f64;
    let df = sum2 / n as f64 - f * f;
    let unc = if df > 0.0 && n > 10 {
        (df / (n - 1) as f64).sqrt()
    } else {
        0.0
    };
    Estimate { value: f, unc }
}

/// Linear interpolation between the sorted values (llama.cpp's percentile).
fn percentile(sorted: &[f64], fraction: f64) -> f64 {
    if fraction <= 0.0 {
        return sorted[0];
    }
    if fraction >= 1.0 {
        return sorted[sorted.len() - 1];
    }
    let p = fraction * (sorted.len() - 1) as f64;
    let ip = p as usize;
    let t = p - ip as f64;
    (1.0 - t) * sorted[ip] + t * sorted[(ip + 1).min(sorted.len() - 1)]
}

fn median(sorted: &[f64]) -> f64 {
    let n = sorted.len();
    if n.is_multiple_of(2) {
        0.5 * (sorted[n / 2] + sorted[n / 2 - 1])
    } else {
        sorted[n / 2]
    }
}

impl KldStats {
    /// Adds one position.
    pub fn add(&mut self, p: Position) {
        self.kld.push(p.kld);
        self.p_diff.push(p.p_diff);
        self.sum_nll += p.nll;
        self.sum_nll2 += p.nll * p.nll;
        self.sum_nll_base += p.nll_base;
        self.sum_nll_base2 += p.nll_base * p.nll_base;
        self.sum_nll_nll_base += p.nll * p.nll_base;
        self.sum_kld += p.kld;
        self.sum_kld2 += p.kld * p.kld;
        self.sum_p_diff += p.p_diff;
        self.sum_p_diff2 += p.p_diff * p.p_diff;
        self.sum_p_diff4 += p.p_diff.powi(4);
        self.n_same_top += p.same_top as usize;
    }

    /// Positions added.
    pub fn count(&self) -> usize {
        self.kld.len()
    }

    /// Perplexity of the compared model.
    pub fn ppl(&self) -> Estimate {
        let l = mean_unc(self.sum_nll, self.sum_nll2, self.count());
        let v = l.value.exp();
        Estimate {
            value: v,
            unc: v * l.unc,
        }
    }

    /// Perplexity of the base.
    pub fn ppl_base(&self) -> Estimate {
        let l = mean_unc(self.sum_nll_base, self.sum_nll_base2, self.count());
        let v = l.value.exp();
        Estimate {
            value: v,
            unc: v * l.unc,
        }
    }

    /// Mean KL divergence.
    pub fn mean_kld(&self) -> Estimate {
        mean_unc(self.sum_kld, self.sum_kld2, self.count())
    }

    /// Mean ln(PPL(Q)/PPL(base)).
    pub fn ln_ppl_ratio(&self) -> Estimate {
        let n = self.count();
        let a = mean_unc(self.sum_nll, self.sum_nll2, n);
        let b = mean_unc(self.sum_nll_base, self.sum_nll_base2, n);
        let cov = self.log_ppl_cov();
        Estimate {
            value: a.value - b.value,
            unc: (a.unc * a.unc + b.unc * b.unc - 2.0 * cov).max(0.0).sqrt(),
        }
    }

    fn log_ppl_cov(&self) -> f64 {
        let n = self.count();
        if n < 10 {
            return 0.0;
        }
        let nf = n as f64;
        (self.sum_nll_nll_base / nf - (self.sum_nll / nf) * (self.sum_nll_base / nf)) / (nf - 1.0)
    }

    /// RMS of Δp.
    pub fn rms_p_diff(&self) -> Estimate {
        let m = mean_unc(self.sum_p_diff2, self.sum_p_diff4, self.count());
        let v = m.value.sqrt();
        Estimate {
            value: v,
            unc: if v > 0.0 { 0.5 / v * m.unc } else { 0.0 },
        }
    }

    /// Fraction of positions where both put the same token first.
    pub fn same_top(&self) -> Estimate {
        let n = self.count();
        if n < 2 {
            return Estimate::default();
        }
        let p = self.n_same_top as f64 / n as f64;
        Estimate {
            value: p,
            unc: (p * (1.0 - p) / (n - 1) as f64).sqrt(),
        }
    }

    /// The KL divergence at `fraction` (0 = minimum, 0.5 = median, 1 = maximum).
    pub fn kld_percentile(&self, fraction: f64) -> f64 {
        if self.kld.is_empty() {
            return 0.0;
        }
        let mut v = self.kld.clone();
        v.sort_by(f64::total_cmp);
        if fraction == 0.5 {
            median(&v)
        } else {
            percentile(&v, fraction)
        }
    }

    /// One line per chunk, as llama.cpp prints while it runs: chunk, PPL,
    /// ln(PPL(Q)/PPL(base)), KL divergence, Δp RMS, same top p.
    pub fn progress_line(&self, chunk: usize) -> String {
        let (p, r, k, d, s) = (
            self.ppl(),
            self.ln_ppl_ratio(),
            self.mean_kld(),
            self.rms_p_diff(),
            self.same_top(),
        );
        format!(
            "{chunk:4}    {:9.4} ± {:9.4}    {:10.5} ± {:10.5}    {:10.5} ± {:10.5}    {:6.3} ± {:6.3} %    {:6.3} ± {:6.3} %",
            p.value,
            p.unc,
            r.value,
            r.unc,
            k.value,
            k.unc,
            100.0 * d.value,
            100.0 * d.unc,
            100.0 * s.value,
            100.0 * s.unc
        )
    }
}

impl std::fmt::Display for KldStats {
    /// llama.cpp's final summary (perplexity, KL divergence and token
    /// probability statistics), same labels and order.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self.count();
        if n == 0 {
            return writeln!(f, "no position scored");
        }
        let (ppl, base) = (self.ppl(), self.ppl_base());
        let la = mean_unc(self.sum_nll, self.sum_nll2, n);
        let lb = mean_unc(self.sum_nll_base, self.sum_nll_base2, n);
        let cov = self.log_ppl_cov();
        let ratio = self.ln_ppl_ratio();
        writeln!(f, "====== Perplexity statistics ======")?;
        writeln!(
            f,
            "Mean PPL(Q)                   : {:10.6} ± {:10.6}",
            ppl.value, ppl.unc
        )?;
        writeln!(
            f,
            "Mean PPL(base)                : {:10.6} ± {:10.6}",
            base.value, base.unc
        )?;
        let cor = if la.unc > 0.0 && lb.unc > 0.0 {
            cov / (la.unc * lb.unc)
        } else {
            0.0
        };
        writeln!(f, "Cor(ln(PPL(Q)), ln(PPL(base))): {:6.2}%", 100.0 * cor)?;
        writeln!(
            f,
            "Mean ln(PPL(Q)/PPL(base))     : {:10.6} ± {:10.6}",
            ratio.value, ratio.unc
        )?;
        let r = ratio.value.exp();
        writeln!(
            f,
            "Mean PPL(Q)/PPL(base)         : {:10.6} ± {:10.6}",
            r,
            r * ratio.unc
        )?;
        let ppl_cov = ppl.value * base.value * cov;
        writeln!(
            f,
            "Mean PPL(Q)-PPL(base)         : {:10.6} ± {:10.6}",
            ppl.value - base.value,
            (ppl.unc * ppl.unc + base.unc * base.unc - 2.0 * ppl_cov)
                .max(0.0)
                .sqrt()
        )?;
        writeln!(f)?;
        let mut kld = self.kld.clone();
        kld.sort_by(f64::total_cmp);
        let k = self.mean_kld();
        writeln!(f, "====== KL divergence statistics ======")?;
        writeln!(f, "Mean    KLD: {:10.6} ± {:10.6}", k.value, k.unc)?;
        writeln!(f, "Maximum KLD: {:10.6}", kld[n - 1])?;
        for (label, frac) in [
            ("99.9%", 0.999),
            ("99.0%", 0.990),
            ("95.0%", 0.950),
            ("90.0%", 0.900),
        ] {
            writeln!(f, "{label}   KLD: {:10.6}", percentile(&kld, frac))?;
        }
        writeln!(f, "Median  KLD: {:10.6}", median(&kld))?;
        for (label, frac) in [
            ("10.0%", 0.100),
            (" 5.0%", 0.050),
            (" 1.0%", 0.010),
            (" 0.1%", 0.001),
        ] {
            writeln!(f, "{label}   KLD: {:10.6}", percentile(&kld, frac))?;
        }
        writeln!(f, "Minimum KLD: {:10.6}", kld[0])?;
        writeln!(f)?;
        let mut dp = self.p_diff.clone();
        dp.sort_by(f64::total_cmp);
        let m = mean_unc(self.sum_p_diff, self.sum_p_diff2, n);
        writeln!(f, "====== Token probability statistics ======")?;
        writeln!(
            f,
            "Mean    Δp: {:6.3} ± {:5.3} %",
            100.0 * m.value,
            100.0 * m.unc
        )?;
        writeln!(f, "Maximum Δp: {:6.3}%", 100.0 * dp[n - 1])?;
        for (label, frac) in [
            ("99.9%", 0.999),
            ("99.0%", 0.990),
            ("95.0%", 0.950),
            ("90.0%", 0.900),
            ("75.0%", 0.750),
        ] {
            writeln!(f, "{label}   Δp: {:6.3}%", 100.0 * percentile(&dp, frac))?;
        }
        writeln!(f, "Median  Δp: {:6.3}%", 100.0 * median(&dp))?;
        for (label, frac) in [
            ("25.0%", 0.250),
            ("10.0%", 0.100),
            (" 5.0%", 0.050),
            (" 1.0%", 0.010),
            (" 0.1%", 0.001),
        ] {
            writeln!(f, "{label}   Δp: {:6.3}%", 100.0 * percentile(&dp, frac))?;
        }
        writeln!(f, "Minimum Δp: {:6.3}%", 100.0 * dp[0])?;
        let rms = self.rms_p_diff();
        writeln!(
            f,
            "RMS Δp    : {:6.3} ± {:5.3} %",
            100.0 * rms.value,
            100.0 * rms.unc
        )?;
        let s = self.same_top();
        writeln!(
            f,
            "Same top p: {:6.3} ± {:5.3} %",
            100.0 * s.value,
            100.0 * s.unc
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn logits(n: usize, seed: u64) -> Vec<f32> {
        // a fixed pseudo-random spread of about 20 nats
        let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
        (0..n)
            .map(|_| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((s >> 40) as f32 / (1u64 << 24) as f32) * 20.0 - 10.0
            })
            .collect()
    }

    fn log_softmax(x: &[f32]) -> Vec<f64> {
        let m = x.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b)) as f64;
        let s: f64 = x.iter().map(|&v| (v as f64 - m).exp()).sum();
        x.iter().map(|&v| v as f64 - m - s.ln()).collect()
    }

    fn kl_f64(p: &[f32], q: &[f32]) -> f64 {
        let (lp, lq) = (log_softmax(p), log_softmax(q));
        lp.iter().zip(&lq).map(|(a, b)| a.exp() * (a - b)).sum()
    }

    fn tmp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("strata-kld-{}-{name}", std::process::id()));
        let _ = std::fs::remove_file(&d);
        d
    }

    #[test]
    fn quantized_row_decodes_to_log_softmax_within_one_step() {
        let l = logits(1000, 1);
        let row = BaseRow::quantize(&l);
        let want = log_softmax(&l);
        let BaseRow::Quantized { scale, .. } = row else {
            panic!("quantized row expected")
        };
        for (i, &w) in want.iter().enumerate() {
            if w > want.iter().cloned().fold(f64::MIN, f64::max) - 16.0 {
                let got = row.log_prob(i) as f64;
                assert!((got - w).abs() <= scale as f64 + 1e-5, "{i}: {got} vs {w}");
            }
        }
    }

    #[test]
    fn kld_matches_an_f64_reference_in_both_layouts() {
        let (p, q) = (logits(512, 2), logits(512, 3));
        // mix them so the distributions are close but not equal
        let q: Vec<f32> = p.iter().zip(&q).map(|(a, b)| a + 0.3 * b).collect();
        let want = kl_f64(&p, &q);
        let full = compare(&BaseRow::quantize(&p), &q, 7).unwrap();
        assert!(
            (full.kld - want).abs() < 1e-3 * want.max(1e-3),
            "{} vs {want}",
            full.kld
        );
        let all = compare(&BaseRow::top_k(&p, 7, 512), &q, 7).unwrap();
        assert!(
            (all.kld - want).abs() < 1e-5 * want.max(1.0),
            "{} vs {want}",
            all.kld
        );
        // fewer tokens: a lower bound that grows with k
        let top64 = compare(&BaseRow::top_k(&p, 7, 64), &q, 7).unwrap().kld;
        let top256 = compare(&BaseRow::top_k(&p, 7, 256), &q, 7).unwrap().kld;
        assert!(0.0 < top64 && top64 <= top256 + 1e-9 && top256 <= all.kld + 1e-9);
        assert!((full.nll - all.nll).abs() < 1e-9);
        assert!((full.nll_base - all.nll_base).abs() < 1e-3);
        let same = compare(&BaseRow::top_k(&p, 3, 16), &p, 3).unwrap();
        assert!(same.kld.abs() < 1e-6 && same.same_top && same.p_diff.abs() < 1e-6);
    }

    #[test]
    fn files_round_trip_and_convert() {
        let (n_ctx, n_vocab, n_chunk) = (8usize, 37usize, 2usize);
        let tokens: Vec<u32> = (0..n_ctx * n_chunk)
            .map(|i| (i * 5 % n_vocab) as u32)
            .collect();
        let header = Header {
            format: Format::Llama,
            n_ctx,
            n_vocab,
            n_chunk,
            tokens: tokens.clone(),
        };
        let path = tmp("full");
        let mut w = BaseWriter::create(&path, header.clone()).unwrap();
        let mut rows = Vec::new();
        for c in 0..n_chunk {
            for j in 0..header.scored_per_chunk() {
                let row = BaseRow::quantize(&logits(n_vocab, (c * 100 + j) as u64));
                w.write_row(&row).unwrap();
                rows.push(row);
            }
        }
        assert!(!path.exists(), "the file appears only when finished");
        w.finish().unwrap();
        let len = std::fs::metadata(&path).unwrap().len() as usize;
        // llama.cpp's layout: 8 + 12 + tokens + rows of 2 * (38 + 4) bytes
        assert_eq!(len, 20 + 4 * 16 + 2 * 3 * 2 * 42);
        let mut r = BaseReader::open(&path).unwrap();
        assert_eq!(r.header(), &header);
        let mut back = Vec::new();
        while let Some(c) = r.next_chunk().unwrap() {
            back.extend(c);
        }
        assert_eq!(back, rows);

        let small = tmp("topk");
        convert_to_top_k(&path, &small, 5).unwrap();
        let mut r = BaseReader::open(&small).unwrap();
        assert_eq!(r.header().format, Format::TopK(5));
        assert_eq!(r.header().tokens, tokens);
        let c0 = r.next_chunk().unwrap().unwrap();
        let target = tokens[header.first() + 1] as usize;
        assert_eq!(c0[0], rows[0].to_top_k(target, 5));
        let BaseRow::TopK {
            log_probs,
            target_log_prob,
            ..
        } = &c0[0]
        else {
            panic!("top-k row expected")
        };
        assert!(log_probs.windows(2).all(|w| w[0] >= w[1]));
        assert_eq!(*target_log_prob, rows[0].log_prob(target));
        let _ = std::fs::remove_file(&path);
        let _ = std::fs::remove_file(&small);
    }

    #[test]
    fn hostile_files_are_refused_before_allocating() {
        let path = tmp("bad");
        let write = |b: &[u8]| std::fs::write(&path, b).unwrap();
        let header = |n_ctx: u32, n_vocab: u32, n_chunk: u32| {
            let mut b = LLAMA_MAGIC.to_vec();
            for v in [n_ctx, n_vocab, n_chunk] {
                b.extend_from_slice(&v.to_le_bytes());
            }
            b
        };
        for (bytes, needle) in [
            (b"nonsense".to_vec(), "does not look like"),
            (b"_logi".to_vec(), "magic"),
            (header(u32::MAX, 10, 1), "n_ctx"),
            (header(8, u32::MAX, 1), "n_vocab"),
            (header(8, 10, 0), "no chunk"),
            // a 2^31-chunk header in a 20-byte file: refused by its length
            (header(8, 10, 1 << 31), "truncated"),
        ] {
            write(&bytes);
            let e = BaseReader::open(&path).err().expect("refused").to_string();
            assert!(e.contains(needle) && e.contains("bad"), "{needle}: {e}");
        }
        // a token outside the vocabulary
        let mut b = header(4, 3, 1);
        b.extend([0u32, 1, 9, 2].iter().flat_map(|t| t.to_le_bytes()));
        b.extend(vec![0u8; 2 * llama_row_len(3)]);
        write(&b);
        let e = BaseReader::open(&path).err().expect("refused").to_string();
        assert!(e.contains("token id 9"), "{e}");
        // a top-k file whose k exceeds the vocabulary
        let mut b = TOPK_MAGIC.to_vec();
        for v in [TOPK_VERSION, 4, 3, 1, 7] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        write(&b);
        let e = BaseReader::open(&path).err().expect("refused").to_string();
        assert!(e.contains("top-k 7"), "{e}");
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn rows_of_another_vocabulary_are_refused() {
        let row = BaseRow::quantize(&logits(10, 1));
        assert!(compare(&row, &logits(11, 1), 0).is_err());
        assert!(compare(&row, &logits(10, 1), 10).is_err());
    }

    #[test]
    fn summary_has_llama_cpp_labels() {
        let mut s = KldStats::default();
        for i in 0..200 {
            let p = logits(64, i);
            let q: Vec<f32> = p.iter().map(|v| v * 1.01).collect();
            s.add(compare(&BaseRow::quantize(&p), &q, (i % 64) as usize).unwrap());
        }
        let text = s.to_string();
        for label in [
            "Mean PPL(Q)",
            "Mean    KLD:",
            "Median  KLD:",
            "99.0%   KLD:",
            "RMS Δp    :",
            "Same top p:",
        ] {
            assert!(text.contains(label), "{label} in\n{text}");
        }
        assert!(s.mean_kld().value > 0.0 && s.same_top().value > 0.9);
        assert!(s.kld_percentile(0.0) <= s.kld_percentile(0.5));
        assert!(s.kld_percentile(0.5) <= s.kld_percentile(1.0));
    }
}
