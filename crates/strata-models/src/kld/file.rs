//! Reading and writing base files in both layouts.

use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use super::{
    bad_file, io_err, llama_row_len, BaseRow, Format, Header, LLAMA_MAGIC, TOPK_MAGIC, TOPK_VERSION,
};
use crate::{ModelError, Result};

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
                return Err(ModelError::LogitsFile {
                    path: path.display().to_string(),
                    msg: format!(
                        "a row of another layout than {f:?} (n_vocab {})",
                        self.header.n_vocab
                    ),
                })
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
