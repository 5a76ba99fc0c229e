//! Quantizing GGUF models: `llama-quantize`'s job.
//!
//! [`quantize_file`] reads a GGUF model and writes it again with every
//! weight matrix in the types a [`FileType`] asks for, following
//! llama.cpp's per-tensor mixture rules ([`rules`]). The output is what
//! `llama-quantize` writes, byte for byte: the input's metadata in its
//! order, `general.quantization_version` = 2 and `general.file_type`
//! appended (as `gguf_set_val_*` moves a key it replaces to the end), the
//! split keys dropped, the tensors in llama.cpp's order
//! ([`rules::llama_order`]), each quantized from ggml's f32 rows
//! (requantized tensors are dequantized first, as ggml's `to_float`
//! does) by the same reference quantizers.
//!
//! It streams: tensors are read from the mapped input one at a time, in
//! slabs of rows, converted by `threads` threads, and appended to the
//! output; the input's pages are released after each tensor. The file is
//! written under a temporary name next to the output and renamed at the
//! end, so a failed run leaves no partial output. Non-finite values (in
//! the input, or produced by a conversion such as an f16 overflow) are an
//! error naming the tensor, row and column.

pub mod rules;
#[cfg(test)]
mod tests;

use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};

use strata::gguf::{GgufFile, GgufWriter, TensorInfo, Value};
use strata::{quant, DType};

pub use rules::{file_type_name, FileType, ModelInfo, TypeChoice, TypeChooser, TypeOptions};

/// The `general.quantization_version` llama.cpp writes (`GGML_QNT_VERSION`).
pub const QUANTIZATION_VERSION: u32 = 2;

/// Elements of f32 converted per slab of rows (at least one row): bounds
/// the memory a tensor takes while it is converted.
#[cfg(not(test))]
const SLAB_ELEMENTS: usize = 4 << 20;
/// Small slabs in the unit tests, so that tensors span several.
#[cfg(test)]
const SLAB_ELEMENTS: usize = 1000;

/// Keys `llama-quantize` drops from the input's metadata: those it sets
/// again (at the end) and the split keys.
const DROPPED_KEYS: [&str; 5] = [
    "general.quantization_version",
    "general.file_type",
    "split.no",
    "split.count",
    "split.tensors.count",
];

/// What went wrong while quantizing; every variant names the argument,
/// file or tensor concerned.
#[derive(Debug, thiserror::Error)]
pub enum QuantizeError {
    /// The file type argument is not one strata writes.
    #[error("unknown file type '{given}'; valid types: {valid}")]
    UnknownFileType {
        /// What was given.
        given: String,
        /// The valid names.
        valid: String,
    },
    /// A tensor type option names no type strata can store.
    #[error("{option}: '{given}' is not a tensor type strata can write; valid types: {valid}")]
    UnknownTensorType {
        /// The option (`--output-tensor-type`, ...).
        option: &'static str,
        /// What was given.
        given: String,
        /// The valid names.
        valid: String,
    },
    /// The input and the output are the same file.
    #[error("the output {} is the input file: choose another output path", path.display())]
    SameFile {
        /// The path given as output.
        path: PathBuf,
    },
    /// The input could not be opened or parsed.
    #[error("input: {0}")]
    Input(#[source] strata::Error),
    /// A metadata key the rules need is missing or unusable, or the input
    /// is of a kind strata does not quantize.
    #[error("input metadata '{key}': {msg}")]
    Metadata {
        /// The key.
        key: String,
        /// What is wrong.
        msg: String,
    },
    /// The output could not be created, written or renamed into place.
    #[error("output {}: {source}", path.display())]
    Output {
        /// The output path.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A quantized tensor would be quantized again without
    /// `--allow-requantize`.
    #[error(
        "tensor '{tensor}' is already quantized ({from}); converting it to {to} loses quality: \
         pass --allow-requantize to do it anyway"
    )]
    Requantize {
        /// The tensor.
        tensor: String,
        /// Its type in the input.
        from: DType,
        /// The type it would get.
        to: DType,
    },
    /// A tensor holds NaN or an infinity, or its conversion produced one.
    #[error("tensor '{tensor}': {value} at row {row}, column {col} {stage}")]
    NonFinite {
        /// The tensor.
        tensor: String,
        /// The row (over all of the tensor's higher dimensions).
        row: usize,
        /// The column.
        col: usize,
        /// The value.
        value: f32,
        /// Where: "in the input" or "after conversion to TYPE".
        stage: String,
    },
    /// The tensor's rows do not divide into the blocks of the type it
    /// should get.
    #[error("tensor '{tensor}': rows of {ncols} do not divide into {dtype} blocks of {}", dtype.block_size())]
    RowLength {
        /// The tensor.
        tensor: String,
        /// Its row length.
        ncols: usize,
        /// The type.
        dtype: DType,
    },
    /// The layer of an expert tensor could not be determined.
    #[error("tensor '{tensor}': {msg}")]
    Layer {
        /// The tensor.
        tensor: String,
        /// What is wrong.
        msg: String,
    },
    /// A tensor's type cannot be converted.
    #[error("tensor '{tensor}': cannot convert {from} to {to}")]
    Unsupported {
        /// The tensor.
        tensor: String,
        /// Its type.
        from: DType,
        /// The type asked for.
        to: DType,
    },
    /// The GGUF writer refused the output (an internal inconsistency or an
    /// I/O error while streaming).
    #[error("writing the output: {0}")]
    Write(#[source] strata::Error),
}

/// Result with a [`QuantizeError`].
pub type Result<T> = std::result::Result<T, QuantizeError>;

/// Options of [`quantize_file`] (those of `llama-quantize` strata has).
#[derive(Clone, Debug)]
pub struct QuantizeOptions {
    /// The file type.
    pub file_type: FileType,
    /// Allow converting tensors that are already quantized (they are
    /// dequantized to f32 first).
    pub allow_requantize: bool,
    /// No mixture rules: every quantized tensor gets the default type
    /// (rows that do not divide into its blocks still fall back).
    pub pure: bool,
    /// The type of `output.weight` (and of a tied `token_embd.weight`).
    pub output_tensor_type: Option<DType>,
    /// The type of `token_embd.weight`.
    pub token_embedding_type: Option<DType>,
    /// Threads converting rows (at least 1); the output does not depend on it.
    pub threads: usize,
}

impl QuantizeOptions {
    /// Defaults for `file_type`: no requantizing, mixtures on, all CPUs.
    pub fn new(file_type: FileType) -> QuantizeOptions {
        QuantizeOptions {
            file_type,
            allow_requantize: false,
            pure: false,
            output_tensor_type: None,
            token_embedding_type: None,
            threads: strata::cpu::default_threads(),
        }
    }

    fn type_options(&self) -> TypeOptions {
        TypeOptions {
            file_type: self.file_type,
            pure: self.pure,
            output_tensor_type: self.output_tensor_type,
            token_embedding_type: self.token_embedding_type,
        }
    }
}

/// Parses a tensor type named in option `option` (ggml's names,
/// case-insensitive: "q8_0", "Q6_K", "f16").
pub fn parse_tensor_type(option: &'static str, s: &str) -> Result<DType> {
    DType::from_name(s)
        .filter(|t| rules::is_storage_type(*t))
        .ok_or_else(|| QuantizeError::UnknownTensorType {
            option,
            given: s.to_string(),
            valid: rules::storage_type_names(),
        })
}

/// One tensor of the output.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorPlan {
    /// The name.
    pub name: String,
    /// Its type in the input.
    pub from: DType,
    /// Its type in the output.
    pub to: DType,
    /// The rules picked a type whose blocks do not divide the rows; this is
    /// that type (`to` is llama.cpp's fallback for it).
    pub fallback_from: Option<DType>,
    /// The shape (ggml `ne` order) as written: `ggml_n_dims` dimensions.
    pub dims: Vec<usize>,
    /// Bytes in the input.
    pub bytes_in: usize,
    /// Bytes in the output.
    pub bytes_out: usize,
    /// Index of the tensor in the input's tensor list.
    input_index: usize,
}

impl TensorPlan {
    /// Elements per row.
    pub fn ncols(&self) -> usize {
        self.dims[0]
    }

    /// Number of rows (all higher dimensions).
    pub fn nrows(&self) -> usize {
        self.dims[1..].iter().product()
    }
}

/// Everything [`quantize_file`] will write, decided before any tensor is
/// converted (so that a bad option or tensor fails before any work).
#[derive(Clone, Debug)]
pub struct Plan {
    /// What the rules know about the model.
    pub model: ModelInfo,
    /// The output's metadata, in order.
    pub metadata: Vec<(String, Value)>,
    /// The output's tensors, in order.
    pub tensors: Vec<TensorPlan>,
}

impl Plan {
    /// Number of tensors that needed the row-length fallback.
    pub fn n_fallback(&self) -> usize {
        self.tensors
            .iter()
            .filter(|t| t.fallback_from.is_some())
            .count()
    }

    /// Total tensor bytes in the input.
    pub fn bytes_in(&self) -> usize {
        self.tensors.iter().map(|t| t.bytes_in).sum()
    }

    /// Total tensor bytes in the output.
    pub fn bytes_out(&self) -> usize {
        self.tensors.iter().map(|t| t.bytes_out).sum()
    }
}

fn meta_err(key: &str, msg: impl Into<String>) -> QuantizeError {
    QuantizeError::Metadata {
        key: key.to_string(),
        msg: msg.into(),
    }
}

/// An unsigned count, or the first element of a per-layer array of them.
fn count_key(f: &GgufFile, key: &str) -> Result<Option<u32>> {
    let v = match f.metadata().get(key) {
        None => return Ok(None),
        Some(Value::Array(a)) => match a.as_u32().and_then(|v| v.first().copied()) {
            Some(x) => return Ok(Some(x)),
            None => a
                .as_i32()
                .and_then(|v| v.first().copied())
                .and_then(|x| u64::try_from(x).ok()),
        },
        Some(v) => v.to_u64(),
    };
    v.and_then(|x| u32::try_from(x).ok())
        .map(Some)
        .ok_or_else(|| meta_err(key, "expected an unsigned 32-bit count"))
}

/// What the rules need from the input's metadata.
pub fn model_info(f: &GgufFile) -> Result<ModelInfo> {
    let arch = f
        .metadata()
        .get_str("general.architecture")
        .map_err(|_| meta_err("general.architecture", "missing or not a string"))?
        .to_string();
    let key = |k: &str| format!("{arch}.{k}");
    let n_layer = count_key(f, &key("block_count"))?
        .ok_or_else(|| meta_err(&key("block_count"), "missing"))?;
    let n_head = count_key(f, &key("attention.head_count"))?.unwrap_or(0);
    let n_head_kv = count_key(f, &key("attention.head_count_kv"))?.unwrap_or(n_head);
    let n_expert = count_key(f, &key("expert_count"))?.unwrap_or(0);
    Ok(ModelInfo {
        arch,
        n_layer,
        n_head,
        n_head_kv,
        n_expert,
    })
}

/// Decides the output of quantizing `input` with `opts`: metadata, tensor
/// order and every tensor's type. Fails on the first tensor that cannot be
/// written (requantizing without permission, unconvertible types, rows
/// that do not divide).
pub fn plan(input: &GgufFile, opts: &QuantizeOptions) -> Result<Plan> {
    for (option, t) in [
        ("--output-tensor-type", opts.output_tensor_type),
        ("--token-embedding-type", opts.token_embedding_type),
    ] {
        if let Some(t) = t.filter(|t| !rules::is_storage_type(*t)) {
            return Err(QuantizeError::UnknownTensorType {
                option,
                given: t.name().to_string(),
                valid: rules::storage_type_names(),
            });
        }
    }
    if let Some(n) = input.metadata().get("split.count").and_then(Value::to_u64) {
        if n > 1 {
            return Err(meta_err(
                "split.count",
                format!("the input is one of {n} split files; merge them first (llama-gguf-split --merge)"),
            ));
        }
    }
    let model = model_info(input)?;
    let mut metadata: Vec<(String, Value)> = input
        .metadata()
        .iter()
        .filter(|(k, _)| !DROPPED_KEYS.contains(k))
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect();
    metadata.push((
        "general.quantization_version".into(),
        Value::U32(QUANTIZATION_VERSION),
    ));
    metadata.push(("general.file_type".into(), Value::U32(opts.file_type.id())));

    let mut order: Vec<(usize, &TensorInfo)> = input.tensors().iter().enumerate().collect();
    order.sort_by(|a, b| rules::llama_order(a.1.name(), b.1.name()));
    let mut chooser = TypeChooser::new(
        &model,
        opts.type_options(),
        order.iter().map(|(_, t)| t.name()),
    );
    let mut tensors = Vec::with_capacity(order.len());
    for (input_index, info) in order {
        let name = info.name();
        let shape = info.shape();
        let choice = chooser.choose(name, info.dtype(), &shape)?;
        let (from, to) = (info.dtype(), choice.dtype);
        if from != to {
            if from.is_quantized() && !opts.allow_requantize {
                return Err(QuantizeError::Requantize {
                    tensor: name.to_string(),
                    from,
                    to,
                });
            }
            if quant::dequantize_row_fn(from).is_none() || quant::quantize_row_fn(to).is_none() {
                return Err(QuantizeError::Unsupported {
                    tensor: name.to_string(),
                    from,
                    to,
                });
            }
        }
        let dims = shape[..rules::n_dims(&shape)].to_vec();
        let nrows: usize = dims[1..].iter().product();
        tensors.push(TensorPlan {
            name: name.to_string(),
            from,
            to,
            fallback_from: choice.fallback_from,
            bytes_in: info.size(),
            bytes_out: to.row_size(dims[0]) * nrows,
            dims,
            input_index,
        });
    }
    Ok(Plan {
        model,
        metadata,
        tensors,
    })
}

/// Where [`quantize_file`] is: reported after every slab of rows.
#[derive(Clone, Copy, Debug)]
pub struct Progress<'a> {
    /// Index of the tensor in the output (0-based).
    pub index: usize,
    /// Number of tensors.
    pub count: usize,
    /// The tensor.
    pub tensor: &'a TensorPlan,
    /// True once the tensor is completely written.
    pub tensor_done: bool,
    /// Input tensor bytes processed so far (all tensors).
    pub bytes_done: usize,
    /// Input tensor bytes in all.
    pub bytes_total: usize,
}

/// True if `a` and `b` name the same existing file (symbolic links
/// followed; hard links too on Unix).
fn same_file(a: &Path, b: &Path) -> bool {
    let (Ok(ma), Ok(mb)) = (std::fs::metadata(a), std::fs::metadata(b)) else {
        return false;
    };
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        ma.dev() == mb.dev() && ma.ino() == mb.ino()
    }
    #[cfg(not(unix))]
    {
        let _ = (ma, mb);
        matches!(
            (std::fs::canonicalize(a), std::fs::canonicalize(b)),
            (Ok(x), Ok(y)) if x == y
        )
    }
}

/// The temporary output file: removed when dropped unless renamed into
/// place.
struct TempOutput {
    path: PathBuf,
    done: bool,
}

impl Drop for TempOutput {
    fn drop(&mut self) {
        if !self.done {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Quantizes the GGUF model `input` into `output` (see the module doc);
/// `progress` is called after every slab of rows. Returns the plan that
/// was carried out.
pub fn quantize_file(
    input: &Path,
    output: &Path,
    opts: &QuantizeOptions,
    progress: &mut dyn FnMut(&Progress),
) -> Result<Plan> {
    let out_err = |source: std::io::Error| QuantizeError::Output {
        path: output.to_path_buf(),
        source,
    };
    if same_file(input, output) {
        return Err(QuantizeError::SameFile {
            path: output.to_path_buf(),
        });
    }
    if output.is_dir() {
        return Err(out_err(std::io::Error::new(
            std::io::ErrorKind::IsADirectory,
            "is a directory",
        )));
    }
    let f = GgufFile::open(input).map_err(QuantizeError::Input)?;
    let plan = plan(&f, opts)?;

    let file_name = output
        .file_name()
        .ok_or_else(|| {
            out_err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "has no file name",
            ))
        })?
        .to_string_lossy()
        .into_owned();
    let tmp_path = output.with_file_name(format!(".{file_name}.{}.partial", std::process::id()));
    let file = File::create(&tmp_path).map_err(out_err)?;
    let mut tmp = TempOutput {
        path: tmp_path,
        done: false,
    };

    let mut w = GgufWriter::new();
    for (k, v) in &plan.metadata {
        w.add_metadata(k.as_str(), v.clone())
            .map_err(QuantizeError::Write)?;
    }
    for t in &plan.tensors {
        w.add_tensor_info(t.name.as_str(), t.to, &t.dims)
            .map_err(QuantizeError::Write)?;
    }
    let mut stream = w
        .stream_to(BufWriter::with_capacity(1 << 20, file))
        .map_err(QuantizeError::Write)?;

    let threads = opts.threads.max(1);
    let bytes_total = plan.bytes_in();
    let mut bytes_done = 0;
    let mut out_buf = Vec::new();
    for (index, t) in plan.tensors.iter().enumerate() {
        let info = &f.tensors()[t.input_index];
        let data = f.tensor_data(info);
        let ncols = t.ncols();
        let (row_in, row_out) = (t.from.row_size(ncols), t.to.row_size(ncols));
        let slab_rows = (SLAB_ELEMENTS / ncols).max(1);
        let nrows = t.nrows();
        let mut r0 = 0;
        while r0 < nrows {
            let r1 = nrows.min(r0 + slab_rows);
            let src = &data[r0 * row_in..r1 * row_in];
            if t.from == t.to {
                check_rows(t, r0, src, None, threads)?;
                stream.write_data(src).map_err(QuantizeError::Write)?;
            } else {
                out_buf.resize((r1 - r0) * row_out, 0);
                check_rows(t, r0, src, Some(&mut out_buf), threads)?;
                stream.write_data(&out_buf).map_err(QuantizeError::Write)?;
            }
            bytes_done += src.len();
            r0 = r1;
            progress(&Progress {
                index,
                count: plan.tensors.len(),
                tensor: t,
                tensor_done: r0 == nrows,
                bytes_done,
                bytes_total,
            });
        }
        let start = f.data_offset() + info.offset();
        f.bytes().release(start..start + info.size());
    }
    let file = stream
        .finish()
        .map_err(QuantizeError::Write)?
        .into_inner()
        .map_err(|e| out_err(e.into_error()))?;
    file.sync_all().map_err(out_err)?;
    drop(file);
    std::fs::rename(&tmp.path, output).map_err(out_err)?;
    tmp.done = true;
    Ok(plan)
}

/// Checks (and with `dst`, converts) the rows `first_row..` of tensor `t`
/// held in `src`, on `threads` threads over contiguous row ranges: every
/// value must be finite in the input and, converted, in the output. The
/// first failing row (in row order) is reported.
fn check_rows(
    t: &TensorPlan,
    first_row: usize,
    src: &[u8],
    dst: Option<&mut Vec<u8>>,
    threads: usize,
) -> Result<()> {
    let ncols = t.ncols();
    let row_in = t.from.row_size(ncols);
    let row_out = t.to.row_size(ncols);
    let nrows = src.len() / row_in;
    let Some(dequant) = quant::dequantize_row_fn(t.from) else {
        // integer tensors are copied as they are (plan() refused converting them)
        return Ok(());
    };
    let convert = dst.is_some();
    let quantize = quant::quantize_row_fn(t.to);
    let dequant_out = quant::dequantize_row_fn(t.to);
    let mut empty = Vec::new();
    let dst = dst.unwrap_or(&mut empty);
    let dst_row = if convert { row_out } else { 0 };
    let parts = threads.min(nrows).max(1);
    let per = nrows.div_ceil(parts);

    let work = |row0: usize, src: &[u8], dst: &mut [u8]| -> Result<()> {
        let mut x = vec![0f32; ncols];
        let mut back = Vec::new();
        for (i, s) in src.chunks_exact(row_in).enumerate() {
            let row = first_row + row0 + i;
            dequant(s, &mut x);
            finite(t, row, &x, "in the input")?;
            if convert {
                let (Some(q), Some(dq)) = (quantize, dequant_out) else {
                    return Err(QuantizeError::Unsupported {
                        tensor: t.name.clone(),
                        from: t.from,
                        to: t.to,
                    });
                };
                let d = &mut dst[i * row_out..(i + 1) * row_out];
                q(&x, d);
                if t.to != DType::F32 {
                    back.resize(ncols, 0f32);
                    dq(d, &mut back);
                    finite(t, row, &back, &format!("after conversion to {}", t.to))?;
                }
            }
        }
        Ok(())
    };

    if parts == 1 {
        return work(0, src, dst);
    }
    let results: Vec<Result<()>> = std::thread::scope(|s| {
        let mut handles = Vec::with_capacity(parts);
        let mut rest_src = src;
        let mut rest_dst: &mut [u8] = dst;
        let mut row0 = 0;
        while row0 < nrows {
            let n = per.min(nrows - row0);
            let (s_part, s_rest) = rest_src.split_at(n * row_in);
            let (d_part, d_rest) = std::mem::take(&mut rest_dst).split_at_mut(n * dst_row);
            rest_src = s_rest;
            rest_dst = d_rest;
            let work = &work;
            handles.push(s.spawn(move || work(row0, s_part, d_part)));
            row0 += n;
        }
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
            .collect()
    });
    results.into_iter().collect()
}

/// The first non-finite value of row `row`, as an error.
fn finite(t: &TensorPlan, row: usize, x: &[f32], stage: &str) -> Result<()> {
    match x.iter().position(|v| !v.is_finite()) {
        None => Ok(()),
        Some(col) => Err(QuantizeError::NonFinite {
            tensor: t.name.clone(),
            row,
            col,
            value: x[col],
            stage: stage.to_string(),
        }),
    }
}
