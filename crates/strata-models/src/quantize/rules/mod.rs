//! Which type each tensor gets: llama.cpp's file types (`llama_ftype`) and
//! its per-tensor mixture rules (`llama-quant.cpp`), restated.
//!
//! The rules depend on the tensor's name (its category), its row length,
//! the model's layer / head / expert counts and the position of the tensor
//! among those of its category, counted in llama.cpp's tensor order (see
//! [`llama_order`]).

use std::cmp::Ordering;

use strata::DType;

use super::QuantizeError;

/// The file types (`general.file_type`, llama.cpp's `llama_ftype`) strata
/// writes: the default tensor type and, for the `_S` / `_M` / `_L` K-quant
/// mixes, which tensors get more bits.
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FileType {
    /// Every matrix in f16.
    F16,
    /// Every matrix in bf16.
    BF16,
    /// Q4_0 (output / tied embedding: Q6_K).
    Q4_0,
    /// Q4_1 (output / tied embedding: Q6_K).
    Q4_1,
    /// Q5_0 (output / tied embedding: Q6_K).
    Q5_0,
    /// Q5_1 (output / tied embedding: Q6_K).
    Q5_1,
    /// Q8_0.
    Q8_0,
    /// Q2_K, with Q3_K / Q4_K attention-v, Q3_K ffn_down and attn_output.
    Q2_K,
    /// Q3_K - Small: Q3_K everywhere but the output.
    Q3_K_S,
    /// Q3_K - Medium: Q5_K / Q4_K attention-v, Q5_K / Q4_K ffn_down, Q4_K attn_output.
    Q3_K_M,
    /// Q3_K - Large: Q5_K attention-v, ffn_down and attn_output.
    Q3_K_L,
    /// Q4_K - Small: Q5_K on the first four attention-v and the first eighth of ffn_down.
    Q4_K_S,
    /// Q4_K - Medium: Q6_K on half of attention-v and ffn_down (`use_more_bits`).
    Q4_K_M,
    /// Q5_K - Small.
    Q5_K_S,
    /// Q5_K - Medium: Q6_K on half of attention-v and ffn_down.
    Q5_K_M,
    /// Q6_K.
    Q6_K,
    /// IQ4_NL (Q5_K attention-v with grouped-query attention ≥ 4, Q5_K on
    /// the first eighth of ffn_down).
    IQ4_NL,
    /// IQ4_XS (as IQ4_NL).
    IQ4_XS,
}

impl FileType {
    /// Every file type strata writes, in `llama_ftype` id order.
    pub const ALL: [FileType; 18] = [
        FileType::F16,
        FileType::Q4_0,
        FileType::Q4_1,
        FileType::Q8_0,
        FileType::Q5_0,
        FileType::Q5_1,
        FileType::Q2_K,
        FileType::Q3_K_S,
        FileType::Q3_K_M,
        FileType::Q3_K_L,
        FileType::Q4_K_S,
        FileType::Q4_K_M,
        FileType::Q5_K_S,
        FileType::Q5_K_M,
        FileType::Q6_K,
        FileType::IQ4_NL,
        FileType::IQ4_XS,
        FileType::BF16,
    ];

    /// llama.cpp's id (`llama_ftype`), the value of `general.file_type`.
    pub const fn id(self) -> u32 {
        match self {
            FileType::F16 => 1,
            FileType::Q4_0 => 2,
            FileType::Q4_1 => 3,
            FileType::Q8_0 => 7,
            FileType::Q5_0 => 8,
            FileType::Q5_1 => 9,
            FileType::Q2_K => 10,
            FileType::Q3_K_S => 11,
            FileType::Q3_K_M => 12,
            FileType::Q3_K_L => 13,
            FileType::Q4_K_S => 14,
            FileType::Q4_K_M => 15,
            FileType::Q5_K_S => 16,
            FileType::Q5_K_M => 17,
            FileType::Q6_K => 18,
            FileType::IQ4_NL => 25,
            FileType::IQ4_XS => 30,
            FileType::BF16 => 32,
        }
    }

    /// The name `strata quantize` and `llama-quantize` take ("Q4_K_M").
    pub const fn name(self) -> &'static str {
        match self {
            FileType::F16 => "F16",
            FileType::BF16 => "BF16",
            FileType::Q4_0 => "Q4_0",
            FileType::Q4_1 => "Q4_1",
            FileType::Q5_0 => "Q5_0",
            FileType::Q5_1 => "Q5_1",
            FileType::Q8_0 => "Q8_0",
            FileType::Q2_K => "Q2_K",
            FileType::Q3_K_S => "Q3_K_S",
            FileType::Q3_K_M => "Q3_K_M",
            FileType::Q3_K_L => "Q3_K_L",
            FileType::Q4_K_S => "Q4_K_S",
            FileType::Q4_K_M => "Q4_K_M",
            FileType::Q5_K_S => "Q5_K_S",
            FileType::Q5_K_M => "Q5_K_M",
            FileType::Q6_K => "Q6_K",
            FileType::IQ4_NL => "IQ4_NL",
            FileType::IQ4_XS => "IQ4_XS",
        }
    }

    /// The type of every tensor the mixture rules do not single out.
    pub const fn default_type(self) -> DType {
        match self {
            FileType::F16 => DType::F16,
            FileType::BF16 => DType::BF16,
            FileType::Q4_0 => DType::Q4_0,
            FileType::Q4_1 => DType::Q4_1,
            FileType::Q5_0 => DType::Q5_0,
            FileType::Q5_1 => DType::Q5_1,
            FileType::Q8_0 => DType::Q8_0,
            FileType::Q2_K => DType::Q2_K,
            FileType::Q3_K_S | FileType::Q3_K_M | FileType::Q3_K_L => DType::Q3_K,
            FileType::Q4_K_S | FileType::Q4_K_M => DType::Q4_K,
            FileType::Q5_K_S | FileType::Q5_K_M => DType::Q5_K,
            FileType::Q6_K => DType::Q6_K,
            FileType::IQ4_NL => DType::IQ4_NL,
            FileType::IQ4_XS => DType::IQ4_XS,
        }
    }

    /// The file type with `llama_ftype` id `id`, if strata writes it.
    pub fn from_id(id: u32) -> Option<FileType> {
        FileType::ALL.into_iter().find(|t| t.id() == id)
    }

    /// Parses a name as `llama-quantize` does: case-insensitive, the
    /// aliases `Q3_K` / `Q4_K` / `Q5_K` for the `_M` mixes, or the numeric
    /// id. The error lists the valid names.
    pub fn parse(s: &str) -> Result<FileType, QuantizeError> {
        let alias = match s.to_ascii_uppercase().as_str() {
            "Q3_K" => Some(FileType::Q3_K_M),
            "Q4_K" => Some(FileType::Q4_K_M),
            "Q5_K" => Some(FileType::Q5_K_M),
            _ => None,
        };
        alias
            .or_else(|| {
                FileType::ALL
                    .into_iter()
                    .find(|t| t.name().eq_ignore_ascii_case(s))
            })
            .or_else(|| s.parse::<u32>().ok().and_then(FileType::from_id))
            .ok_or_else(|| QuantizeError::UnknownFileType {
                given: s.to_string(),
                valid: FileType::valid_names(),
            })
    }

    /// The names [`parse`](Self::parse) takes, for messages.
    pub fn valid_names() -> String {
        let mut names: Vec<&str> = FileType::ALL.iter().map(|t| t.name()).collect();
        names.extend(["Q3_K", "Q4_K", "Q5_K"]);
        names.join(", ")
    }

    /// llama.cpp's description ("Q4_K - Medium"), as [`file_type_name`].
    pub fn description(self) -> String {
        file_type_name(self.id())
    }
}

impl std::fmt::Display for FileType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// llama.cpp's name for a `general.file_type` value (`llama_ftype_name`),
/// for every file type llama.cpp knows, not only those strata writes
/// ("Q4_K - Medium", "IQ2_XS - 2.3125 bpw", "unknown, may not work");
/// with the "guessed" bit (1024) set, prefixed "(guessed) ".
pub fn file_type_name(id: u32) -> String {
    const GUESSED: u32 = 1024;
    let name = match id & !GUESSED {
        0 => "all F32",
        1 => "F16",
        2 => "Q4_0",
        3 => "Q4_1",
        7 => "Q8_0",
        8 => "Q5_0",
        9 => "Q5_1",
        10 => "Q2_K - Medium",
        11 => "Q3_K - Small",
        12 => "Q3_K - Medium",
        13 => "Q3_K - Large",
        14 => "Q4_K - Small",
        15 => "Q4_K - Medium",
        16 => "Q5_K - Small",
        17 => "Q5_K - Medium",
        18 => "Q6_K",
        19 => "IQ2_XXS - 2.0625 bpw",
        20 => "IQ2_XS - 2.3125 bpw",
        21 => "Q2_K - Small",
        22 => "IQ3_XS - 3.3 bpw",
        23 => "IQ3_XXS - 3.0625 bpw",
        24 => "IQ1_S - 1.5625 bpw",
        25 => "IQ4_NL - 4.5 bpw",
        26 => "IQ3_S - 3.4375 bpw",
        27 => "IQ3_S mix - 3.66 bpw",
        28 => "IQ2_S - 2.5 bpw",
        29 => "IQ2_M - 2.7 bpw",
        30 => "IQ4_XS - 4.25 bpw",
        31 => "IQ1_M - 1.75 bpw",
        32 => "BF16",
        36 => "TQ1_0 - 1.69 bpw ternary",
        37 => "TQ2_0 - 2.06 bpw ternary",
        38 => "MXFP4 MoE",
        39 => "NVFP4",
        40 => "Q1_0",
        41 => "Q2_0",
        _ => "unknown, may not work",
    };
    if id & GUESSED != 0 {
        format!("(guessed) {name}")
    } else {
        name.to_string()
    }
}

/// The tensor types `--output-tensor-type` / `--token-embedding-type` may
/// name: the float and block types strata quantizes to (not the
/// activation-only Q8_1 / Q8_K, not the integer types).
pub fn is_storage_type(t: DType) -> bool {
    (t.is_float() || t.is_quantized()) && t != DType::Q8_1 && t != DType::Q8_K
}

/// The names of the [`is_storage_type`] types, for messages.
pub fn storage_type_names() -> String {
    DType::ALL
        .iter()
        .filter(|t| is_storage_type(**t))
        .map(|t| t.name())
        .collect::<Vec<_>>()
        .join(", ")
}

/// What the rules need to know about the model (from its metadata).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelInfo {
    /// `general.architecture`.
    pub arch: String,
    /// `{arch}.block_count`.
    pub n_layer: u32,
    /// `{arch}.attention.head_count` (the first layer's, if per layer).
    pub n_head: u32,
    /// `{arch}.attention.head_count_kv` (default: `n_head`).
    pub n_head_kv: u32,
    /// `{arch}.expert_count` (default 0).
    pub n_expert: u32,
}

impl ModelInfo {
    /// Query heads per KV head (0 without KV heads).
    fn n_gqa(&self) -> u32 {
        self.n_head.checked_div(self.n_head_kv).unwrap_or(0)
    }

    fn is_falcon(&self) -> bool {
        self.arch == "falcon"
    }

    /// llama.cpp's `LLM_TYPE_70B`, the one model size the rules look at.
    fn is_70b(&self) -> bool {
        match self.arch.as_str() {
            "llama" => self.n_expert != 8 && self.n_layer == 80 && self.n_head != self.n_head_kv,
            "qwen2" | "deci" | "olmo" => self.n_layer == 80,
            "jais2" => self.n_layer == 68,
            _ => false,
        }
    }
}

/// The options that change the choice of types.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TypeOptions {
    /// The file type.
    pub file_type: FileType,
    /// Every quantized tensor gets the default type (no mixture rules; the
    /// row-length fallback still applies).
    pub pure: bool,
    /// The type of `output.weight` (and, with tied embeddings, of
    /// `token_embd.weight`).
    pub output_tensor_type: Option<DType>,
    /// The type of `token_embd.weight`.
    pub token_embedding_type: Option<DType>,
}

/// What kind of tensor a name is, for the rules (llama.cpp's
/// `tensor_category`, by substring).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Category {
    TokenEmbd,
    AttnQ,
    /// `attn_v`, `attn_qkv`, `attn_kv_b`: treated alike.
    AttnV,
    AttnK,
    AttnOutput,
    FfnUp,
    FfnGate,
    FfnDown,
    Output,
    Other,
}

fn is_token_embd(name: &str) -> bool {
    name == "token_embd.weight" || name == "per_layer_token_embd.weight"
}

fn category(name: &str) -> Category {
    if name == "output.weight" {
        return Category::Output;
    }
    if is_token_embd(name) {
        return Category::TokenEmbd;
    }
    let has = |s: &str| name.contains(s);
    if has("attn_qkv.weight") || has("attn_kv_b.weight") || has("attn_v.weight") {
        Category::AttnV
    } else if has("attn_k.weight") {
        Category::AttnK
    } else if has("attn_q.weight") {
        Category::AttnQ
    } else if has("attn_output.weight") {
        Category::AttnOutput
    } else if has("ffn_up") {
        Category::FfnUp
    } else if has("ffn_gate") {
        Category::FfnGate
    } else if has("ffn_down") {
        Category::FfnDown
    } else {
        Category::Other
    }
}

/// Substrings of names llama.cpp never quantizes (small or sensitive
/// tensors of various architectures).
const NEVER_QUANTIZED: &[&str] = &[
    "_norm.weight",
    "ffn_gate_inp.weight",
    "ffn_gate_tid2eid.weight",
    "altup",
    "laurel",
    "per_layer_model_proj",
    "ssm_conv1d",
    "shortconv.conv.weight",
    "indexer.k_proj.weight",
    "indexer.q_proj.weight",
    "time_mix_first.weight",
    "time_mix_w0.weight",
    "time_mix_w1.weight",
    "time_mix_w2.weight",
    "time_mix_v0.weight",
    "time_mix_v1.weight",
    "time_mix_v2.weight",
    "time_mix_a0.weight",
    "time_mix_a1.weight",
    "time_mix_a2.weight",
    "time_mix_g1.weight",
    "time_mix_g2.weight",
    "time_mix_decay_w1.weight",
    "time_mix_decay_w2.weight",
    "time_mix_lerp_fused.weight",
    "attn_rel_b.weight",
    ".position_embd",
    "sam.pos_embd",
    "sam.neck.",
    "sam.net_",
    ".rel_pos",
    ".patch_embd",
    ".patch_merger",
    "a.rvq.codebook",
    "mm.a.code_embd",
];

/// ggml's `ggml_n_dims`: the dimensions up to the last one above 1 (at
/// least 1).
pub fn n_dims(shape: &[usize]) -> usize {
    shape.iter().rposition(|&d| d > 1).map_or(1, |i| i + 1)
}

/// True if the rules may change the tensor's type: a matrix (2 or more
/// dimensions) named `*weight`, and not one of the tensors llama.cpp keeps
/// as they are (norms, positional and token-type embeddings, expert
/// routers, ...).
pub fn allows_quantization(name: &str, shape: &[usize]) -> bool {
    n_dims(shape) >= 2
        && name.ends_with("weight")
        && name != "position_embd.weight"
        && name != "token_types.weight"
        && !NEVER_QUANTIZED.iter().any(|s| name.contains(s))
}

/// The layer of a `blk.N.` name, as `sscanf(name, "blk.%d.")` reads it.
pub fn layer_of(name: &str) -> Option<i64> {
    let rest = name.strip_prefix("blk.")?;
    let (sign, digits) = match rest.as_bytes().first() {
        Some(b'-') => (-1, &rest[1..]),
        Some(b'+') => (1, &rest[1..]),
        _ => (1, rest),
    };
    let end = digits
        .bytes()
        .position(|b| !b.is_ascii_digit())
        .unwrap_or(digits.len());
    digits[..end].parse::<i64>().ok().map(|v| sign * v)
}

/// llama.cpp's tensor order (its loader's `weights_map`): tensors outside
/// `blk.N.` first, then by layer number, then by name (bytewise).
pub fn llama_order(a: &str, b: &str) -> Ordering {
    let la = layer_of(a).unwrap_or(-1);
    let lb = layer_of(b).unwrap_or(-1);
    la.cmp(&lb).then_with(|| a.as_bytes().cmp(b.as_bytes()))
}

/// The type chosen for one tensor, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TypeChoice {
    /// The type to write.
    pub dtype: DType,
    /// The row length did not divide into the blocks of the type the rules
    /// picked; this is llama.cpp's fallback (Q4_K → Q5_0, Q6_K → Q8_0, ...),
    /// from that type.
    pub fallback_from: Option<DType>,
}

/// The mixture state over one pass through the tensors (llama.cpp's
/// `quantize_state_impl` counters).
pub struct TypeChooser<'a> {
    model: &'a ModelInfo,
    opts: TypeOptions,
    n_attention_wv: i64,
    i_attention_wv: i64,
    i_ffn_down: i64,
    has_tied_embeddings: bool,
}

fn use_more_bits(i_layer: i64, n_layers: i64) -> bool {
    i_layer < n_layers / 8 || i_layer >= 7 * n_layers / 8 || (i_layer - n_layers / 8) % 3 == 2
}

impl<'a> TypeChooser<'a> {
    /// A chooser for the tensors named `names` (all of the file's, in any
    /// order): the counts the rules need are taken from them.
    pub fn new<'n>(
        model: &'a ModelInfo,
        opts: TypeOptions,
        names: impl IntoIterator<Item = &'n str>,
    ) -> TypeChooser<'a> {
        let mut n_attention_wv = 0;
        let mut has_tied_embeddings = true;
        for name in names {
            match category(name) {
                Category::AttnV => n_attention_wv += 1,
                Category::Output => has_tied_embeddings = false,
                _ => {}
            }
        }
        TypeChooser {
            model,
            opts,
            n_attention_wv,
            i_attention_wv: 0,
            i_ffn_down: 0,
            has_tied_embeddings,
        }
    }

    /// The type of the tensor `name` of type `current` and shape `shape`.
    /// Call it once per tensor in [`llama_order`]: the layer-position rules
    /// count the tensors of each category as they come.
    pub fn choose(
        &mut self,
        name: &str,
        current: DType,
        shape: &[usize],
    ) -> Result<TypeChoice, QuantizeError> {
        let keep = TypeChoice {
            dtype: current,
            fallback_from: None,
        };
        if !allows_quantization(name, shape) {
            return Ok(keep);
        }
        let cat = category(name);
        let explicit = match cat {
            Category::TokenEmbd => self.opts.token_embedding_type,
            Category::Output => self.opts.output_tensor_type,
            _ => None,
        };
        if let Some(t) = explicit {
            // as llama.cpp: the type asked for, without the fallback; a row
            // that does not divide into its blocks is refused
            if !shape[0].is_multiple_of(t.block_size()) {
                return Err(QuantizeError::RowLength {
                    tensor: name.to_string(),
                    ncols: shape[0],
                    dtype: t,
                });
            }
            return Ok(TypeChoice {
                dtype: t,
                fallback_from: None,
            });
        }
        let default = self.opts.file_type.default_type();
        if !default.is_quantized() {
            return Ok(TypeChoice {
                dtype: default,
                fallback_from: None,
            });
        }
        let mut t = default;
        if !self.opts.pure {
            t = self.mixture(name, shape, cat, t)?;
        }
        fallback(name, shape[0], t)
    }

    /// llama.cpp's `llama_tensor_get_type_impl` for the file types strata
    /// writes.
    fn mixture(
        &mut self,
        name: &str,
        shape: &[usize],
        cat: Category,
        mut t: DType,
    ) -> Result<DType, QuantizeError> {
        use FileType as F;
        let ft = self.opts.file_type;
        let m = self.model;
        if cat == Category::Output || (self.has_tied_embeddings && cat == Category::TokenEmbd) {
            if let Some(o) = self.opts.output_tensor_type {
                t = o;
            } else if m.is_falcon() || !shape[0].is_multiple_of(t.block_size()) {
                t = DType::Q8_0;
            } else if t != DType::Q8_0 {
                t = DType::Q6_K;
            }
            return Ok(t);
        }
        match cat {
            Category::TokenEmbd => {
                if let Some(e) = self.opts.token_embedding_type {
                    t = e;
                }
            }
            Category::AttnV => {
                let i = self.i_attention_wv;
                match ft {
                    F::Q2_K => {
                        t = if m.n_gqa() >= 4 {
                            DType::Q4_K
                        } else {
                            DType::Q3_K
                        }
                    }
                    F::Q3_K_M => t = if i < 2 { DType::Q5_K } else { DType::Q4_K },
                    F::Q3_K_L => t = DType::Q5_K,
                    F::IQ4_NL | F::IQ4_XS if m.n_gqa() >= 4 => t = DType::Q5_K,
                    F::Q4_K_M | F::Q5_K_M if use_more_bits(i, self.n_attention_wv) => {
                        t = DType::Q6_K
                    }
                    F::Q4_K_S if i < 4 => t = DType::Q5_K,
                    _ => {}
                }
                if m.is_70b() && matches!(t, DType::Q3_K | DType::Q4_K) {
                    // 8 heads share attn_v in the 70B llama: more bits are cheap there
                    t = DType::Q5_K;
                }
                if m.n_expert == 8 {
                    t = DType::Q8_0;
                }
                self.i_attention_wv += 1;
            }
            Category::AttnK if m.n_expert == 8 => t = DType::Q8_0,
            Category::FfnDown => {
                let n = i64::from(m.n_layer);
                let i = if m.n_expert > 1 {
                    // experts are not consecutive: the layer comes from the name
                    match layer_of(name) {
                        Some(i) if (0..n).contains(&i) => i,
                        Some(i) => {
                            return Err(QuantizeError::Layer {
                                tensor: name.to_string(),
                                msg: format!("layer {i} is outside 0..{n}"),
                            })
                        }
                        None => {
                            return Err(QuantizeError::Layer {
                                tensor: name.to_string(),
                                msg: "no layer number (blk.N.) in the name".into(),
                            })
                        }
                    }
                } else {
                    self.i_ffn_down
                };
                let falcon = m.is_falcon();
                match ft {
                    F::Q2_K => t = DType::Q3_K,
                    F::Q3_K_M => {
                        t = if i < n / 16 {
                            DType::Q5_K
                        } else if !falcon || use_more_bits(i, n) {
                            DType::Q4_K
                        } else {
                            DType::Q3_K
                        }
                    }
                    F::Q3_K_L => t = if falcon { DType::Q4_K } else { DType::Q5_K },
                    F::Q4_K_M => {
                        if falcon {
                            t = if i < n / 16 {
                                DType::Q6_K
                            } else if use_more_bits(i, n) {
                                DType::Q5_K
                            } else {
                                DType::Q4_K
                            };
                        } else if use_more_bits(i, n) {
                            t = DType::Q6_K;
                        }
                    }
                    F::IQ4_NL | F::IQ4_XS if i < n / 8 => t = DType::Q5_K,
                    F::Q5_K_M if use_more_bits(i, n) => t = DType::Q6_K,
                    F::Q4_K_S if !falcon && i < n / 8 => t = DType::Q5_K,
                    _ => {}
                }
                self.i_ffn_down += 1;
            }
            Category::AttnOutput => {
                if !m.is_falcon() {
                    if m.n_expert == 8 {
                        if matches!(
                            ft,
                            F::Q2_K
                                | F::Q3_K_S
                                | F::Q3_K_M
                                | F::IQ4_NL
                                | F::Q4_K_S
                                | F::Q4_K_M
                                | F::IQ4_XS
                        ) {
                            t = DType::Q5_K;
                        }
                    } else {
                        match ft {
                            F::Q2_K => t = DType::Q3_K,
                            F::Q3_K_M => t = DType::Q4_K,
                            F::Q3_K_L => t = DType::Q5_K,
                            _ => {}
                        }
                    }
                } else if ft == F::Q3_K_L {
                    t = DType::Q4_K;
                }
            }
            _ => {}
        }
        Ok(t)
    }
}

/// llama.cpp's `tensor_type_fallback`: a row of `ncols` that does not
/// divide into `t`'s blocks gets a 32-block type of about as many bits, or
/// F16 if even that does not fit.
fn fallback(name: &str, ncols: usize, t: DType) -> Result<TypeChoice, QuantizeError> {
    if ncols.is_multiple_of(t.block_size()) {
        return Ok(TypeChoice {
            dtype: t,
            fallback_from: None,
        });
    }
    let mut f = match t {
        DType::IQ4_XS => DType::IQ4_NL,
        DType::Q2_K | DType::Q3_K => DType::Q4_0,
        DType::Q4_K => DType::Q5_0,
        DType::Q5_K => DType::Q5_1,
        DType::Q6_K => DType::Q8_0,
        other if other.block_size() <= 32 => other,
        other => {
            return Err(QuantizeError::RowLength {
                tensor: name.to_string(),
                ncols,
                dtype: other,
            })
        }
    };
    if !ncols.is_multiple_of(f.block_size()) {
        f = DType::F16;
    }
    Ok(TypeChoice {
        dtype: f,
        fallback_from: Some(t),
    })
}

#[cfg(test)]
mod tests;
