//! A loaded model: hyperparameters, tokenizer, and weights as strata tensors.
//!
//! Weights on the CPU wrap the memory-mapped file zero-copy in one read-only
//! host buffer marked [`BufferUsage::Weights`]; weights placed on another
//! device (by `-ngl` / `-ot`) are copied into that device's buffers, also
//! marked WEIGHTS, so the scheduler runs their ops there.
//!
//! When the CPU's active instruction-set level has kernels over the packed
//! layout ([`strata::quant::packed::has_kernels`]), CPU weights that can be
//! packed ([`strata::quant::packed::eligible`]: Q4_0 / Q4_1 / Q5_0 / Q5_1 /
//! Q8_0 matrices with rows in groups of 16) are instead copied into a
//! `CPU_PACKED` buffer ([`strata::cpu::packed_buffer_type`]) at load, which
//! stores them repacked for those kernels; the rest stay mapped. Turn it off
//! with [`LoadOptions::no_repack`] (the CLI's `--no-repack` or
//! `STRATA_NO_REPACK=1`).

mod extras;
mod family;
mod hparams;
mod moe;
mod placement;
mod weights;

use std::collections::BTreeMap;
use std::path::Path;
use std::ptr::NonNull;
use std::sync::Arc;

use strata::backend::{alloc_tensors, tensor_set, Buffer, BufferUsage, Device};
use strata::cpu::HostBuffer;
use strata::gguf::{GgufFile, TensorInfo};
use strata::{ResultExt as _, Tensor};

pub use extras::{Shaping, Swa};
pub use family::{Family, Need, Spec};
pub use hparams::{HParams, RopeScaling};
pub use moe::MAX_EXPERTS;
pub use placement::{layer_of, Devices, LayerMap, Override, PlacementSpec, SplitMode};

use crate::tokenizer::Tokenizer;
use crate::{ModelError, Result};

/// Progress callback: `(bytes done, bytes total)` while weights are copied to devices.
pub type Progress<'a> = &'a mut dyn FnMut(usize, usize);

/// How to load a model.
#[derive(Clone, Default)]
pub struct LoadOptions {
    /// Non-CPU devices in priority order (`--device`); the CPU is always added last.
    pub devices: Vec<Arc<dyn Device>>,
    /// Placement policy (`-ngl`, `-ot`).
    pub placement: PlacementSpec,
    /// Keep every CPU weight mapped in ggml's layout instead of repacking
    /// eligible ones for the packed matmul kernels (`--no-repack`; the
    /// `strata` CLI also sets it for `STRATA_NO_REPACK=1`: the library reads
    /// no environment).
    pub no_repack: bool,
}

/// True when CPU weights of `dtype` and shape `ne` are to be repacked at load.
fn repack(opts: &LoadOptions, dtype: strata::DType, ne: [usize; 4]) -> bool {
    use strata::{isa, quant::packed};
    !opts.no_repack && packed::has_kernels(isa::active(), dtype) && packed::eligible(dtype, ne)
}

/// The weights of one transformer block (the optional ones as the
/// family's [`Spec`] allows).
#[derive(Clone, Debug)]
pub struct Layer {
    /// Pre-attention RMS norm weight.
    pub attn_norm: Tensor,
    /// Query projection (a view of `wqkv`'s first rows when the file fuses them).
    pub wq: Tensor,
    /// Key projection (a view of `wqkv` when fused).
    pub wk: Tensor,
    /// Value projection (a view of `wqkv` when fused).
    pub wv: Tensor,
    /// Fused Q, K, V projection (`attn_qkv`, Phi-3): the graph multiplies by
    /// it once and splits the result by views, as llama.cpp does.
    pub wqkv: Option<Tensor>,
    /// Fused Q, K, V bias (`attn_qkv.bias`).
    pub bqkv: Option<Tensor>,
    /// Attention output projection.
    pub wo: Tensor,
    /// Query bias (Qwen 2).
    pub bq: Option<Tensor>,
    /// Key bias.
    pub bk: Option<Tensor>,
    /// Value bias.
    pub bv: Option<Tensor>,
    /// Attention output bias.
    pub bo: Option<Tensor>,
    /// Per-head RMS norm weight of the queries (Qwen 3), `[head_dim_k]`.
    pub attn_q_norm: Option<Tensor>,
    /// Per-head RMS norm weight of the keys (Qwen 3), `[head_dim_k]`.
    pub attn_k_norm: Option<Tensor>,
    /// RoPE frequency factors (`rope_freqs.weight`, Llama 3.1+), `[n_rot / 2]`:
    /// the file's tensor, or its copy on this layer's device.
    pub rope_freqs: Option<Tensor>,
    /// LongRoPE factors for contexts longer than the original training
    /// context (`rope_factors_long.weight`, Phi-3), `[n_rot / 2]`, on this
    /// layer's device.
    pub rope_long: Option<Tensor>,
    /// LongRoPE factors for the other contexts (`rope_factors_short.weight`).
    pub rope_short: Option<Tensor>,
    /// Pre-FFN RMS norm weight.
    pub ffn_norm: Tensor,
    /// Mixture-of-experts router (`ffn_gate_inp`), `[n_embd, n_expert]`:
    /// when present, `ffn_gate`, `ffn_up` and `ffn_down` are the experts'
    /// stacks (`ffn_{gate,up,down}_exps`, one matrix per expert along ne2).
    pub ffn_gate_inp: Option<Tensor>,
    /// FFN gate projection (`[n_embd, n_ff_exp, n_expert]` in a MoE layer;
    /// absent when `ffn_up` holds gate and up fused).
    pub ffn_gate: Option<Tensor>,
    /// FFN up projection (`[n_embd, n_ff_exp, n_expert]` in a MoE layer;
    /// `[n_embd, 2·n_ff]`, gate rows first, when fused: Phi-3).
    pub ffn_up: Tensor,
    /// FFN down projection (`[n_ff_exp, n_embd, n_expert]` in a MoE layer).
    pub ffn_down: Tensor,
    /// FFN gate bias.
    pub ffn_gate_b: Option<Tensor>,
    /// FFN up bias.
    pub ffn_up_b: Option<Tensor>,
    /// FFN down bias.
    pub ffn_down_b: Option<Tensor>,
    /// RMS norm weight of the attention output (Gemma's `post_attention_norm`).
    pub attn_post_norm: Option<Tensor>,
    /// RMS norm weight of the FFN output (Gemma's `post_ffw_norm`).
    pub ffn_post_norm: Option<Tensor>,
}

impl Layer {
    /// Every weight of the block, the optional ones that are present included.
    pub fn tensors(&self) -> impl Iterator<Item = &Tensor> + '_ {
        // a fused model's wq/wk/wv are views of wqkv, not weights of their own
        let separate = match self.wqkv {
            None => [Some(&self.wq), Some(&self.wk), Some(&self.wv)],
            Some(_) => [None; 3],
        };
        [
            &self.attn_norm,
            &self.wo,
            &self.ffn_norm,
            &self.ffn_up,
            &self.ffn_down,
        ]
        .into_iter()
        .chain(separate.into_iter().flatten())
        .chain(
            [
                &self.wqkv,
                &self.bqkv,
                &self.ffn_gate,
                &self.rope_long,
                &self.rope_short,
                &self.bq,
                &self.bk,
                &self.bv,
                &self.bo,
                &self.attn_q_norm,
                &self.attn_k_norm,
                &self.rope_freqs,
                &self.ffn_gate_inp,
                &self.ffn_gate_b,
                &self.ffn_up_b,
                &self.ffn_down_b,
                &self.attn_post_norm,
                &self.ffn_post_norm,
            ]
            .into_iter()
            .flatten(),
        )
    }
}

/// Bytes a device needs for a model (the `--fit` report).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeviceBytes {
    /// Weight bytes.
    pub weights: usize,
    /// Number of weight tensors.
    pub n_tensors: usize,
    /// KV cache bytes (f16 K and V for the context asked for).
    pub kv_cache: usize,
}

/// Where every weight would go and what each device would hold (no loading).
#[derive(Clone, Debug)]
pub struct FitReport {
    /// Device names, the CPU last.
    pub devices: Vec<String>,
    /// Bytes per device (same order).
    pub bytes: Vec<DeviceBytes>,
    /// Each tensor's device index, in file order.
    pub tensors: Vec<(String, usize)>,
}

impl FitReport {
    /// A human-readable table.
    pub fn to_text(&self) -> String {
        let mut s =
            String::from("device                       tensors     weights MiB   KV cache MiB\n");
        for (name, b) in self.devices.iter().zip(&self.bytes) {
            s += &format!(
                "{name:<28} {:>8} {:>15.2} {:>14.2}\n",
                b.n_tensors,
                b.weights as f64 / 1048576.0,
                b.kv_cache as f64 / 1048576.0
            );
        }
        s
    }
}

/// A model ready to run.
pub struct Model {
    /// Hyperparameters.
    pub hparams: HParams,
    /// The tokenizer.
    pub tokenizer: Tokenizer,
    /// `tokenizer.chat_template`, if any.
    pub chat_template: Option<String>,
    /// Token embedding (input; also the output head when `output.weight` is absent).
    pub tok_embd: Tensor,
    /// Final norm weight.
    pub output_norm: Tensor,
    /// Output projection (a device copy of the embedding when tied and offloaded).
    pub output: Tensor,
    /// Output bias (`output.bias`, Qwen 2), `[n_vocab]`.
    pub output_b: Option<Tensor>,
    /// True when the output head is the token embedding.
    pub tied_output: bool,
    /// Transformer blocks.
    pub layers: Vec<Layer>,
    /// Devices (the CPU last) and which layer is where.
    pub devices: Devices,
    /// Device of each layer, the output and the input.
    pub layer_map: LayerMap,
    file: GgufFile,
    buffers: Vec<Arc<dyn Buffer>>,
    repacked_bytes: usize,
}

impl std::fmt::Debug for Model {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Model")
            .field("hparams", &self.hparams)
            .field("devices", &self.devices)
            .finish_non_exhaustive()
    }
}

fn tensor_err(name: &str, msg: impl Into<String>) -> ModelError {
    ModelError::Tensor {
        name: name.to_string(),
        msg: msg.into(),
    }
}

/// Placement of every tensor of `f` (device index per tensor info).
fn assign(
    f: &GgufFile,
    hp: &HParams,
    spec: &PlacementSpec,
    devs: &Devices,
) -> Result<(LayerMap, Vec<usize>)> {
    let map = spec.layer_map(hp.n_layer, devs)?;
    let mut out = Vec::with_capacity(f.tensors().len());
    for t in f.tensors() {
        let default = match layer_of(t.name()) {
            Some(l) if l < hp.n_layer => map.layers[l],
            Some(_) => {
                return Err(tensor_err(
                    t.name(),
                    format!("layer out of range (model has {})", hp.n_layer),
                ))
            }
            None if t.name().starts_with("output") => map.output,
            None => map.input,
        };
        out.push(spec.device_for(t.name(), default, devs)?);
    }
    Ok((map, out))
}

/// KV cache bytes of each device for `n_ctx` positions (f16 K and V).
fn kv_bytes(hp: &HParams, map: &LayerMap, n_dev: usize, n_ctx: usize) -> Result<Vec<usize>> {
    let overflow = || ModelError::KvCacheTooLarge { n_ctx };
    let mut v = vec![0usize; n_dev];
    let per_layer = (hp.n_embd_k_gqa() + hp.n_embd_v_gqa())
        .checked_mul(n_ctx)
        .and_then(|x| x.checked_mul(2))
        .ok_or_else(overflow)?;
    for &d in &map.layers {
        v[d] = v[d].checked_add(per_layer).ok_or_else(overflow)?;
    }
    Ok(v)
}

/// The embedding's rows must match the tokenizer's vocabulary.
fn check_vocab(hp: &HParams, tokenizer: &Tokenizer) -> Result<()> {
    if tokenizer.n_vocab() != hp.n_vocab {
        return Err(tensor_err(
            "token_embd.weight",
            format!(
                "{} rows but the tokenizer has {} tokens",
                hp.n_vocab,
                tokenizer.n_vocab()
            ),
        ));
    }
    Ok(())
}

/// The CPU's weights: the whole file wrapped zero-copy, read-only.
fn map_file(f: &GgufFile) -> Arc<dyn Buffer> {
    let bytes = f.as_bytes();
    let ptr = NonNull::new(bytes.as_ptr() as *mut u8).unwrap_or(NonNull::dangling());
    // SAFETY: the bytes belong to the GgufBytes kept alive by the Arc moved
    // into the buffer as its owner; the buffer is read-only, so nothing
    // writes through the pointer; the mapping is never modified by strata.
    let host =
        unsafe { HostBuffer::from_raw_parts(ptr, bytes.len(), Box::new(f.bytes().clone()), true) };
    let host: Arc<dyn Buffer> = Arc::new(host);
    host.set_usage(BufferUsage::Weights);
    host
}

/// Every weight as a tensor, and where its bytes go.
struct Placed<'f> {
    /// All weights by name (mapped ones already placed in the host buffer).
    tensors: BTreeMap<String, Tensor>,
    /// Weights to copy into each device's buffers.
    per_dev: Vec<Vec<(Tensor, &'f TensorInfo)>>,
    /// CPU weights to repack into `CPU_PACKED`.
    packed: Vec<(Tensor, &'f TensorInfo)>,
    /// The tied output head's copy on an offloaded output device.
    output_copy: Option<Tensor>,
    /// No `output.weight`: the head is the token embedding.
    tied: bool,
    /// The copies of each tensor every layer reads (`rope_freqs.weight`,
    /// the LongRoPE factors) on the devices holding layers other than its
    /// own (llama.cpp duplicates them per layer for the same reason: a CPU
    /// weight would pull every offloaded layer's ROPE back to the CPU).
    shared: Vec<(&'static str, Vec<(usize, Tensor)>)>,
}

/// `rope_factors_long.weight` (LongRoPE, Phi-3).
const ROPE_LONG: &str = "rope_factors_long.weight";
/// `rope_factors_short.weight`.
const ROPE_SHORT: &str = "rope_factors_short.weight";

/// The tensors outside the blocks that every layer of a `spec` model reads.
fn shared_names(spec: Spec) -> Vec<&'static str> {
    let mut v = Vec::new();
    if spec.rope_freqs != Need::No {
        v.push(ROPE_FREQS);
    }
    if spec.rope_factors != Need::No {
        v.extend([ROPE_LONG, ROPE_SHORT]);
    }
    v
}

/// The devices holding layers other than `home` (where a tensor every layer
/// reads lives), each once.
fn other_layer_devices(map: &LayerMap, home: usize) -> Vec<usize> {
    let mut v: Vec<usize> = map.layers.iter().copied().filter(|&d| d != home).collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// Creates a tensor per weight and decides its memory: mapped from the file
/// (placed at once), repacked, or copied to its device.
fn place<'f>(
    f: &'f GgufFile,
    hp: &HParams,
    opts: &LoadOptions,
    devs: &Devices,
    map: &LayerMap,
    assigned: &[usize],
    host: &Arc<dyn Buffer>,
) -> Result<Placed<'f>> {
    let data_offset = f.data_offset();
    let make = |info: &TensorInfo| -> Result<Tensor> {
        let dims = &info.shape()[..info.n_dims().max(1)];
        Ok(Tensor::new(info.dtype(), dims)?.with_name(info.name()))
    };
    let mut tensors: BTreeMap<String, Tensor> = BTreeMap::new();
    let mut per_dev: Vec<Vec<(Tensor, &TensorInfo)>> = vec![Vec::new(); devs.list().len()];
    let mut packed: Vec<(Tensor, &TensorInfo)> = Vec::new();
    for (info, &d) in f.tensors().iter().zip(assigned) {
        let t = make(info)?;
        if d == devs.cpu() && repack(opts, t.dtype(), t.ne()) {
            packed.push((t.clone(), info));
        } else if d == devs.cpu() {
            t.set_storage(host.clone(), data_offset + info.offset())?;
        } else {
            per_dev[d].push((t.clone(), info));
        }
        tensors.insert(info.name().to_string(), t);
    }
    let mut shared = Vec::new();
    for wanted in shared_names(hp.family.spec()) {
        let Some((info, &home)) = f
            .tensors()
            .iter()
            .zip(assigned)
            .find(|(i, _)| i.name() == wanted)
        else {
            continue;
        };
        let mut copies = Vec::new();
        for d in other_layer_devices(map, home) {
            let name = format!("{wanted} (copy on {})", devs.list()[d].name());
            let t = make(info)?.with_name(name);
            per_dev[d].push((t.clone(), info));
            copies.push((d, t));
        }
        shared.push((wanted, copies));
    }
    let tied = hp.family.spec().output == Need::No || !tensors.contains_key("output.weight");
    let mut output_copy = None;
    if tied && map.output != devs.cpu() {
        let info = f
            .tensor("token_embd.weight")
            .ok_or_else(|| tensor_err("token_embd.weight", "missing"))?;
        let t = make(info)?.with_name("output.weight (tied to token_embd)");
        per_dev[map.output].push((t.clone(), info));
        output_copy = Some(t);
    }
    Ok(Placed {
        tensors,
        per_dev,
        packed,
        output_copy,
        tied,
        shared,
    })
}

/// Writes the weights that are not mapped: repacked CPU weights, then each
/// device's copies, reporting progress. Returns every weight buffer (the
/// mapped `host` first) and the bytes repacked.
fn upload(
    f: &GgufFile,
    placed: &Placed<'_>,
    devs: &Devices,
    host: Arc<dyn Buffer>,
    progress: &mut Option<Progress<'_>>,
) -> Result<(Vec<Arc<dyn Buffer>>, usize)> {
    let total: usize = placed
        .per_dev
        .iter()
        .flatten()
        .chain(&placed.packed)
        .map(|(_, i)| i.size())
        .sum();
    let mut done = 0;
    let mut buffers = vec![host];
    let repacked_bytes = placed.packed.iter().map(|(_, i)| i.size()).sum();
    if !placed.packed.is_empty() {
        let bufs = pack_weights(f, &placed.packed)?;
        done += repacked_bytes;
        if let Some(p) = progress.as_mut() {
            p(done, total);
        }
        buffers.extend(bufs);
    }
    // Each device's weights are written by a thread of its own, so that
    // uploads to several remote devices overlap; progress is reported here.
    let mut lists = Vec::new();
    for (d, list) in placed.per_dev.iter().enumerate() {
        if list.is_empty() {
            continue;
        }
        let ts: Vec<Tensor> = list.iter().map(|(t, _)| t.clone()).collect();
        let bufs = alloc_tensors(&ts, &devs.list()[d].default_buffer_type())?;
        for b in &bufs {
            b.set_usage(BufferUsage::Weights);
        }
        buffers.extend(bufs);
        lists.push(list);
    }
    let (tx, rx) = std::sync::mpsc::channel::<usize>();
    std::thread::scope(|s| -> Result<()> {
        let handles: Vec<_> = lists
            .iter()
            .map(|list| {
                let tx = tx.clone();
                s.spawn(move || -> Result<()> {
                    for (t, info) in list.iter() {
                        tensor_set(t, 0, f.tensor_data(info))
                            .with_context(|| format!("loading tensor '{}'", t.name()))?;
                        let _ = tx.send(info.size());
                    }
                    Ok(())
                })
            })
            .collect();
        drop(tx);
        for n in rx {
            done += n;
            if let Some(p) = progress.as_mut() {
                p(done, total);
            }
        }
        for h in handles {
            h.join().unwrap_or_else(|p| std::panic::resume_unwind(p))?;
        }
        Ok(())
    })?;
    Ok((buffers, repacked_bytes))
}

/// Allocates `packed` in `CPU_PACKED` buffers and writes them (repacking),
/// releasing each tensor's mapped bytes once written.
fn pack_weights(f: &GgufFile, packed: &[(Tensor, &TensorInfo)]) -> Result<Vec<Arc<dyn Buffer>>> {
    let data_offset = f.data_offset();
    let ts: Vec<Tensor> = packed.iter().map(|(t, _)| t.clone()).collect();
    let bufs = alloc_tensors(&ts, &strata::cpu::packed_buffer_type())?;
    for b in &bufs {
        b.set_usage(BufferUsage::Weights);
    }
    // Packing is a byte shuffle per 16-row group: spread the tensors
    // over the cores (each writes its own tensors' bytes).
    let nth = std::thread::available_parallelism().map_or(1, |n| n.get().min(8));
    std::thread::scope(|s| -> Result<()> {
        let handles: Vec<_> = (0..nth)
            .map(|i| {
                s.spawn(move || -> Result<()> {
                    for (t, info) in packed.iter().skip(i).step_by(nth) {
                        tensor_set(t, 0, f.tensor_data(info))
                            .with_context(|| format!("loading tensor '{}'", t.name()))?;
                        // The mapped copy is not read again.
                        let at = data_offset + info.offset();
                        f.bytes().release(at..at + info.size());
                    }
                    Ok(())
                })
            })
            .collect();
        for h in handles {
            h.join().expect("packing thread panicked")?;
        }
        Ok(())
    })?;
    Ok(bufs.into())
}

/// `rope_freqs.weight`: per-dimension RoPE frequency factors (Llama 3.1+).
const ROPE_FREQS: &str = "rope_freqs.weight";

impl Model {
    /// Reports where each tensor would go and what every device would hold
    /// for a context of `n_ctx`, without loading any weight (`--fit`).
    pub fn fit(path: impl AsRef<Path>, opts: &LoadOptions, n_ctx: usize) -> Result<FitReport> {
        let f = GgufFile::open(path)?;
        let hp = HParams::from_gguf(&f)?;
        let devs = Devices::new(opts.devices.clone())?;
        let (map, assigned) = assign(&f, &hp, &opts.placement, &devs)?;
        let kv = kv_bytes(&hp, &map, devs.list().len(), n_ctx)?;
        let mut bytes = vec![DeviceBytes::default(); devs.list().len()];
        for (t, &d) in f.tensors().iter().zip(&assigned) {
            bytes[d].weights += t.size();
            bytes[d].n_tensors += 1;
        }
        // a tied head on an offloaded output device is duplicated there
        if f.tensor("output.weight").is_none() && map.output != map.input {
            if let Some(t) = f.tensor("token_embd.weight") {
                bytes[map.output].weights += t.size();
                bytes[map.output].n_tensors += 1;
            }
        }
        // and the RoPE factors on every other device holding layers
        for wanted in shared_names(hp.family.spec()) {
            let found = f
                .tensors()
                .iter()
                .zip(&assigned)
                .find(|(t, _)| t.name() == wanted);
            if let Some((t, &home)) = found {
                for d in other_layer_devices(&map, home) {
                    bytes[d].weights += t.size();
                    bytes[d].n_tensors += 1;
                }
            }
        }
        for (b, k) in bytes.iter_mut().zip(kv) {
            b.kv_cache = k;
        }
        Ok(FitReport {
            devices: devs.names(),
            bytes,
            tensors: f
                .tensors()
                .iter()
                .map(|t| t.name().to_string())
                .zip(assigned)
                .collect(),
        })
    }

    /// Opens and loads the model at `path`.
    pub fn load(
        path: impl AsRef<Path>,
        opts: &LoadOptions,
        progress: Option<Progress<'_>>,
    ) -> Result<Model> {
        let f = GgufFile::open(path)?;
        Model::from_gguf(f, opts, progress)
    }

    /// Loads a model from an opened GGUF file, in stages: hyperparameters
    /// and tokenizer, the device of every weight, tensors and where their
    /// bytes go (mapped, repacked or copied), the bytes themselves, then the
    /// named weights of each layer, checked against the hyperparameters.
    pub fn from_gguf(
        f: GgufFile,
        opts: &LoadOptions,
        mut progress: Option<Progress<'_>>,
    ) -> Result<Model> {
        let hp = HParams::from_gguf(&f)?;
        let tokenizer = crate::gguf::tokenizer(&f)?;
        check_vocab(&hp, &tokenizer)?;
        let devs = Devices::new(opts.devices.clone())?;
        let (map, assigned) = assign(&f, &hp, &opts.placement, &devs)?;
        let host = map_file(&f);
        let placed = place(&f, &hp, opts, &devs, &map, &assigned, &host)?;
        let (buffers, repacked_bytes) = upload(&f, &placed, &devs, host, &mut progress)?;
        let tied = placed.tied;
        let w = weights::named_weights(placed, &hp, &map)?;
        Ok(Model {
            chat_template: crate::gguf::chat_template(&f),
            hparams: hp,
            tokenizer,
            tok_embd: w.tok_embd,
            output_norm: w.output_norm,
            output: w.output,
            output_b: w.output_b,
            tied_output: tied,
            layers: w.layers,
            devices: devs,
            layer_map: map,
            file: f,
            buffers,
            repacked_bytes,
        })
    }

    /// The GGUF file the model was loaded from.
    pub fn file(&self) -> &GgufFile {
        &self.file
    }

    /// Weight bytes held by each device (the CPU last; the CPU's are mapped,
    /// not copied, except those repacked into a `CPU_PACKED` buffer).
    pub fn weight_bytes(&self) -> Vec<usize> {
        let mut v = vec![0; self.devices.list().len()];
        let mut all = vec![&self.tok_embd, &self.output_norm, &self.output];
        all.extend(&self.output_b);
        for l in &self.layers {
            all.extend(l.tensors());
        }
        let mut seen = std::collections::HashSet::new();
        for t in all {
            if !seen.insert(t.id()) {
                continue;
            }
            if let Some(st) = t.storage() {
                let name = st.buffer.buffer_type().name();
                let d = self
                    .devices
                    .list()
                    .iter()
                    .position(|d| d.default_buffer_type().name() == name)
                    .unwrap_or(self.devices.cpu());
                v[d] += t.nbytes();
            }
        }
        v
    }

    /// Bytes of CPU weights repacked at load into a `CPU_PACKED` buffer (0
    /// when repacking is off or the CPU has no packed kernels).
    pub fn repacked_bytes(&self) -> usize {
        self.repacked_bytes
    }

    /// Number of buffers holding weights (the mapped file plus device copies).
    pub fn n_buffers(&self) -> usize {
        self.buffers.len()
    }
}
