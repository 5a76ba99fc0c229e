//! The tokenizer llama.cpp uses for GGUF models, rebuilt to give the same token ids.
//!
//! A [`Tokenizer`] is built from plain data ([`TokenizerParts`]) so that a GGUF loader can
//! fill it from the `tokenizer.ggml.*` metadata:
//!
//! | GGUF key                          | field                     |
//! |-----------------------------------|---------------------------|
//! | `tokenizer.ggml.model`            | [`TokenizerParts::model`] |
//! | `tokenizer.ggml.pre`              | [`TokenizerParts::pre`]   |
//! | `tokenizer.ggml.tokens`           | [`TokenizerParts::tokens`] |
//! | `tokenizer.ggml.token_type`       | [`TokenizerParts::token_types`] |
//! | `tokenizer.ggml.merges`           | [`TokenizerParts::merges`] |
//! | `tokenizer.ggml.scores`           | [`TokenizerParts::scores`] |
//! | `tokenizer.ggml.{bos,eos,eot,unknown,padding}_token_id` | `*_id` fields |
//! | `tokenizer.ggml.add_{bos,eos}_token` | [`TokenizerParts::add_bos`], [`TokenizerParts::add_eos`] |
//!
//! Byte-level BPE (`model = "gpt2"`) is the main target and is checked against llama.cpp's
//! output for SmolLM2; SentencePiece-style vocabularies (`model = "llama"`) follow llama.cpp's
//! SPM code but have only hand-built tests so far. BPE encoding follows llama.cpp's
//! `llama_tokenize`: special tokens are cut out of the text first (see `special.rs`), the rest
//! is split into words by the pre-tokenizer (`pretokenize.rs`), each word is byte-encoded with
//! the GPT-2 byte ↔ unicode map and merged by BPE rank (`bpe.rs`).
//!
//! llama.cpp behaviours reproduced on purpose (they differ from HF `tokenizers`):
//! - Pre-tokenizer regexes run in sequence, each over the pieces of the previous one; the
//!   GPT-2 and LLaMA-3 regexes use llama.cpp's hand-written splitters, whose `\s+(?!\S)`
//!   look-ahead stops at the piece end (SmolLM: `\p{N}` first, so `" 2024"` gives `" "`,
//!   `"2"`, `"0"`, ...). Unknown `pre` names fall back to llama.cpp's "default" rules.
//! - Special tokens are cut out longest-text-first over the whole input (not leftmost
//!   longest match); user-defined tokens are cut out even when `parse_special` is false.
//! - A BPE symbol that is not a token falls back to its single ASCII bytes as tokens.
//! - Tokens whose text looks like an end-of-turn/-generation or FIM marker are forced to
//!   control type; `<|im_end|>`, `<|endoftext|>`, ... are end-of-generation.
//! - Detokenization: control tokens render only with `unparse_special`; the `clean_spaces`
//!   passes run for BPE unless the pre-tokenizer turns them off (SmolLM does).

mod bpe;
mod decode;
mod pretokenize;
mod special;
mod spm;
mod symbol;

use std::collections::{HashMap, HashSet};

#[cfg(test)]
use decode::clean_spaces;
pub use pretokenize::PreTokenizer;

/// Errors from building or using a [`Tokenizer`].
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TokenizerError {
    /// `tokenizer.ggml.model` names a tokenizer this crate does not implement.
    #[error("unsupported tokenizer model {0:?} (implemented: \"gpt2\" BPE, \"llama\" SPM)")]
    UnsupportedModel(String),
    /// The vocabulary has no tokens.
    #[error("the vocabulary is empty")]
    EmptyVocab,
    /// A per-token array does not have one entry per token.
    #[error("{what} has {got} entries but the vocabulary has {expected} tokens")]
    LengthMismatch {
        /// Which array.
        what: &'static str,
        /// Number of tokens.
        expected: usize,
        /// Number of entries found.
        got: usize,
    },
    /// A token id is not below the vocabulary size.
    #[error("token id {id} is out of range (vocabulary of {n_vocab})")]
    TokenOutOfRange {
        /// The offending id.
        id: u32,
        /// Vocabulary size.
        n_vocab: usize,
    },
    /// A special token id in the metadata is not a token of the vocabulary.
    #[error(
        "tokenizer.ggml.{key} = {id} is not a token id (the vocabulary has {n_vocab} tokens): \
         the file's metadata is broken; fix or remove the key"
    )]
    SpecialOutOfRange {
        /// The key, e.g. `bos_token_id`.
        key: &'static str,
        /// The id given.
        id: u32,
        /// Vocabulary size.
        n_vocab: usize,
    },
    /// `add_bos`/`add_eos` is set but the model has no such token.
    #[error("the model asks to add a {0} token but has none")]
    MissingSpecial(&'static str),
    /// SentencePiece text needs a byte token (`<0xAB>`) the vocabulary lacks.
    #[error("no byte token for 0x{0:02X}")]
    MissingByteToken(u8),
    /// A pre-tokenizer regex failed to compile (a bug in this crate).
    #[error("pre-tokenizer regex: {0}")]
    Regex(String),
}

/// Result with a [`TokenizerError`].
pub type Result<T> = std::result::Result<T, TokenizerError>;

/// llama.cpp's token types (`tokenizer.ggml.token_type` values).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TokenType {
    /// 0, or any value not listed here.
    Undefined,
    /// 1: ordinary text token.
    Normal,
    /// 2: the unknown token.
    Unknown,
    /// 3: control token (`<|im_start|>`, `<|endoftext|>`): parsed only with `parse_special`,
    /// rendered only when asked to.
    Control,
    /// 4: user-defined token: always cut out of the text and always rendered verbatim.
    UserDefined,
    /// 5: unused slot.
    Unused,
    /// 6: byte token (`<0x0A>`), SentencePiece vocabularies only.
    Byte,
}

impl TokenType {
    /// Maps a GGUF `token_type` value; unknown values become [`TokenType::Undefined`] as in
    /// llama.cpp.
    pub fn from_i32(v: i32) -> Self {
        match v {
            1 => Self::Normal,
            2 => Self::Unknown,
            3 => Self::Control,
            4 => Self::UserDefined,
            5 => Self::Unused,
            6 => Self::Byte,
            _ => Self::Undefined,
        }
    }
}

/// Everything needed to build a [`Tokenizer`], as plain data (see the module docs for the
/// GGUF keys each field comes from).
#[derive(Debug, Clone, Default)]
pub struct TokenizerParts {
    /// `tokenizer.ggml.model`: `"gpt2"` for byte-level BPE, `"llama"` for SentencePiece.
    pub model: String,
    /// `tokenizer.ggml.pre`: pre-tokenizer name (`"smollm"`, `"llama-bpe"`, `"gpt-2"`, ...).
    /// Empty or unknown names get llama.cpp's `"default"` rules.
    pub pre: String,
    /// Token texts, by id. For BPE these are byte-encoded (`Ġ` for a space).
    pub tokens: Vec<String>,
    /// Token types, by id ([`TokenType`] values); empty means all [`TokenType::Normal`].
    pub token_types: Vec<i32>,
    /// BPE merges, `"left right"`, in rank order.
    pub merges: Vec<String>,
    /// Token scores: the merge priority of SentencePiece vocabularies; unused by BPE.
    pub scores: Option<Vec<f32>>,
    /// Beginning-of-sequence token.
    pub bos_id: Option<u32>,
    /// End-of-sequence token.
    pub eos_id: Option<u32>,
    /// End-of-turn token; when absent it is guessed from the token texts, as llama.cpp does.
    pub eot_id: Option<u32>,
    /// Unknown token.
    pub unk_id: Option<u32>,
    /// Padding token.
    pub pad_id: Option<u32>,
    /// `tokenizer.ggml.add_bos_token`; `None` (key absent) means llama.cpp's default for the
    /// pre-tokenizer (true for LLaMA-3 style, else false).
    pub add_bos: Option<bool>,
    /// `tokenizer.ggml.add_eos_token`; `None` means false.
    pub add_eos: Option<bool>,
    /// `tokenizer.ggml.add_space_prefix`; `None` means llama.cpp's default (true for
    /// SentencePiece, false for BPE).
    pub add_space_prefix: Option<bool>,
    /// `general.name`: llama.cpp sets per-token attributes by it (a name
    /// containing `phi-3` / `phi3`: special tokens take the whitespace after
    /// them, see [`Tokenizer::encode`]). Empty when unknown.
    pub model_name: String,
}

/// Texts llama.cpp takes as end-of-turn when no `eot_token_id` is given (in this order here;
/// llama.cpp walks a hash map, so with several candidates its pick is unspecified).
const EOT_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|end_of_text|>",
    "<EOT>",
    "_<EOT>",
    "<｜end▁of▁sentence｜>",
    "<end_of_utterance>",
];

/// Texts llama.cpp takes as end-of-generation.
const EOG_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "<|end_of_text|>",
    "<end_of_utterance>",
];

/// The algorithm behind a vocabulary.
#[derive(Debug, Clone)]
enum Kind {
    /// Byte-level BPE (`gpt2`).
    Bpe {
        ranks: bpe::MergeRanks,
        pre: PreTokenizer,
        ignore_merges: bool,
    },
    /// SentencePiece (`llama`): merges by score.
    Spm { scores: Vec<f32> },
}

/// Fill-in-the-middle token texts llama.cpp recognises (first found per group is taken and
/// forced to [`TokenType::Control`]); the pad, repo and file-separator groups also end
/// generation.
const FIM_TEXTS: &[(&[&str], bool)] = &[
    (
        &[
            "<|fim_prefix|>",
            "<fim-prefix>",
            "<fim_prefix>",
            "<｜fim▁begin｜>",
            "<PRE>",
            "▁<PRE>",
            "<|code_prefix|>",
        ],
        false,
    ),
    (
        &[
            "<|fim_suffix|>",
            "<fim-suffix>",
            "<fim_suffix>",
            "<｜fim▁hole｜>",
            "<SUF>",
            "▁<SUF>",
            "<|code_suffix|>",
        ],
        false,
    ),
    (
        &[
            "<|fim_middle|>",
            "<fim-middle>",
            "<fim_middle>",
            "<｜fim▁end｜>",
            "<MID>",
            "▁<MID>",
            "<|code_middle|>",
        ],
        false,
    ),
    (&["<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>"], true),
    (
        &[
            "<|fim_repo|>",
            "<|repo_name|>",
            "<fim-repo>",
            "<REPO>",
            "<reponame>",
        ],
        true,
    ),
    (&["<|file_sep|>"], true),
];

/// A llama.cpp-compatible tokenizer (byte-level BPE or SentencePiece).
#[derive(Debug, Clone)]
pub struct Tokenizer {
    tokens: Vec<String>,
    types: Vec<TokenType>,
    token_to_id: HashMap<String, u32>,
    kind: Kind,
    add_space_prefix: bool,
    clean_spaces: bool,
    bos: Option<u32>,
    eos: Option<u32>,
    eot: Option<u32>,
    unk: Option<u32>,
    pad: Option<u32>,
    add_bos: bool,
    add_eos: bool,
    eog: HashSet<u32>,
    /// Control / user-defined / unknown tokens, longest text first.
    specials: Vec<u32>,
    /// Tokens that drop the whitespace after them when split out (llama.cpp's
    /// RSTRIP attribute, which it sets by model name).
    rstrip: HashSet<u32>,
    /// `token_to_piece(id, special = true)` for every id.
    pieces: Vec<Vec<u8>>,
    byte_table: [char; 256],
}

/// The tokens llama.cpp gives the RSTRIP attribute (`llama_vocab::impl::load`,
/// "set attributes by model name"): for a model whose lowercased
/// `general.name` contains `phi-3` or `phi3`, every special token and `</s>`,
/// except `<unk>`, `<s>` and `<|endoftext|>`. (llama.cpp fails to load such
/// a vocabulary without those four tokens; strata sets what it has.)
fn rstrip_tokens(
    model_name: &str,
    specials: &[u32],
    token_to_id: &HashMap<String, u32>,
) -> HashSet<u32> {
    let name = model_name.to_ascii_lowercase();
    if !(name.contains("phi-3") || name.contains("phi3")) {
        return HashSet::new();
    }
    let mut set: HashSet<u32> = specials.iter().copied().collect();
    set.extend(token_to_id.get("</s>"));
    for t in ["<unk>", "<s>", "<|endoftext|>"] {
        if let Some(id) = token_to_id.get(t) {
            set.remove(id);
        }
    }
    set
}

impl Tokenizer {
    /// Builds a tokenizer from GGUF-style parts, applying llama.cpp's load-time rules:
    /// empty token texts become `[EMPTY_<id>]`, special ids out of range are ignored, BPE
    /// defaults BOS/EOS to id 11 when the model names none, end-of-turn/-generation tokens
    /// are recognised by their text and forced to [`TokenType::Control`].
    pub fn from_parts(parts: TokenizerParts) -> Result<Self> {
        let is_bpe = match parts.model.as_str() {
            "gpt2" => true,
            "llama" => false,
            _ => return Err(TokenizerError::UnsupportedModel(parts.model)),
        };
        let n = parts.tokens.len();
        if n == 0 {
            return Err(TokenizerError::EmptyVocab);
        }
        let mut types: Vec<TokenType> = if parts.token_types.is_empty() {
            vec![TokenType::Normal; n]
        } else if parts.token_types.len() != n {
            return Err(TokenizerError::LengthMismatch {
                what: "token_types",
                expected: n,
                got: parts.token_types.len(),
            });
        } else {
            parts
                .token_types
                .iter()
                .map(|&t| TokenType::from_i32(t))
                .collect()
        };
        if let Some(scores) = &parts.scores {
            if scores.len() != n {
                return Err(TokenizerError::LengthMismatch {
                    what: "scores",
                    expected: n,
                    got: scores.len(),
                });
            }
        }
        let tokens: Vec<String> = parts
            .tokens
            .into_iter()
            .enumerate()
            .map(|(i, t)| {
                if t.is_empty() {
                    format!("[EMPTY_{i}]")
                } else {
                    t
                }
            })
            .collect();
        let mut token_to_id = HashMap::with_capacity(n);
        for (i, t) in tokens.iter().enumerate() {
            // later duplicates win, as with llama.cpp's `token_to_id[word] = i`
            token_to_id.insert(t.clone(), i as u32);
        }
        let in_range = |id: Option<u32>| id.filter(|&i| (i as usize) < n);
        // An id the file gives must exist (llama.cpp warns and falls back to
        // a default: that silently changes what the model sees).
        for (key, id) in [
            ("bos_token_id", parts.bos_id),
            ("eos_token_id", parts.eos_id),
            ("eot_token_id", parts.eot_id),
            ("unknown_token_id", parts.unk_id),
            ("padding_token_id", parts.pad_id),
        ] {
            if let Some(id) = id.filter(|&i| i as usize >= n) {
                return Err(TokenizerError::SpecialOutOfRange {
                    key,
                    id,
                    n_vocab: n,
                });
            }
        }
        let (kind, add_bos_default, clean_spaces, default_ids) = if is_bpe {
            let (pre, d) = PreTokenizer::for_name(&parts.pre)?;
            let kind = Kind::Bpe {
                ranks: bpe::MergeRanks::from_lines(&parts.merges),
                pre,
                ignore_merges: d.ignore_merges,
            };
            // llama.cpp's gpt2 defaults: bos = eos = 11, no unk
            (kind, d.add_bos, d.clean_spaces, (Some(11), Some(11), None))
        } else {
            let scores = parts.scores.clone().unwrap_or_else(|| vec![0.0; n]);
            // llama.cpp's llama (SPM) defaults: bos 1, eos 2, unk 0
            (
                Kind::Spm { scores },
                true,
                false,
                (Some(1), Some(2), Some(0)),
            )
        };
        let bos = in_range(parts.bos_id).or(in_range(default_ids.0));
        let eos = in_range(parts.eos_id).or(in_range(default_ids.1));
        let unk = in_range(parts.unk_id).or(in_range(default_ids.2));
        let mut eot = in_range(parts.eot_id);
        if eot.is_none() {
            eot = EOT_TEXTS.iter().find_map(|t| token_to_id.get(*t).copied());
            if let Some(id) = eot {
                types[id as usize] = TokenType::Control;
            }
        }
        let mut eog = HashSet::new();
        for &(texts, ends) in FIM_TEXTS {
            if let Some(id) = texts.iter().find_map(|t| token_to_id.get(*t).copied()) {
                types[id as usize] = TokenType::Control;
                if ends {
                    eog.insert(id);
                }
            }
        }
        for t in EOG_TEXTS {
            if let Some(&id) = token_to_id.get(*t) {
                eog.insert(id);
                types[id as usize] = TokenType::Control;
            }
        }
        // llama.cpp's gpt-oss (harmony) hack: these always render
        for t in ["<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"] {
            if let Some(&id) = token_to_id.get(t) {
                types[id as usize] = TokenType::UserDefined;
            }
        }
        eog.extend(eos);
        eog.extend(eot);
        // ... and with <|return|> and <|call|> present, <|end|> is not end-of-generation
        let eog_text = |t: &str| token_to_id.get(t).filter(|id| eog.contains(id)).copied();
        if let (Some(_), Some(_), Some(end)) = (
            eog_text("<|return|>"),
            eog_text("<|call|>"),
            eog_text("<|end|>"),
        ) {
            eog.remove(&end);
            types[end as usize] = TokenType::UserDefined;
        }
        let add_bos = parts.add_bos.unwrap_or(add_bos_default);
        let add_eos = parts.add_eos.unwrap_or(false);
        if add_bos && bos.is_none() {
            return Err(TokenizerError::MissingSpecial("BOS"));
        }
        if add_eos && eos.is_none() {
            return Err(TokenizerError::MissingSpecial("EOS"));
        }
        let mut specials: Vec<u32> = (0..n as u32)
            .filter(|&i| {
                matches!(
                    types[i as usize],
                    TokenType::Control | TokenType::UserDefined | TokenType::Unknown
                )
            })
            .collect();
        // llama.cpp uses an unstable sort by length; ties keep id order here.
        specials.sort_by_key(|&i| std::cmp::Reverse(tokens[i as usize].len()));
        let rstrip = rstrip_tokens(&parts.model_name, &specials, &token_to_id);

        let mut tok = Self {
            tokens,
            types,
            token_to_id,
            kind,
            add_space_prefix: parts.add_space_prefix.unwrap_or(!is_bpe),
            clean_spaces,
            bos,
            eos,
            eot,
            unk,
            pad: in_range(parts.pad_id),
            add_bos,
            add_eos,
            eog,
            specials,
            rstrip,
            pieces: Vec::new(),
            byte_table: pretokenize::byte_to_unicode_table(),
        };
        tok.pieces = (0..n as u32).map(|id| tok.render_piece(id)).collect();
        Ok(tok)
    }

    /// Number of tokens in the vocabulary.
    pub fn n_vocab(&self) -> usize {
        self.tokens.len()
    }

    /// Number of distinct BPE merge pairs (0 for SentencePiece).
    pub fn n_merges(&self) -> usize {
        match &self.kind {
            Kind::Bpe { ranks, .. } => ranks.len(),
            Kind::Spm { .. } => 0,
        }
    }

    /// Whether this is a byte-level BPE vocabulary (else SentencePiece).
    pub fn is_bpe(&self) -> bool {
        matches!(self.kind, Kind::Bpe { .. })
    }

    /// Beginning-of-sequence token, if any.
    pub fn bos(&self) -> Option<u32> {
        self.bos
    }

    /// End-of-sequence token, if any.
    pub fn eos(&self) -> Option<u32> {
        self.eos
    }

    /// End-of-turn token, if any.
    pub fn eot(&self) -> Option<u32> {
        self.eot
    }

    /// Unknown token, if any.
    pub fn unk(&self) -> Option<u32> {
        self.unk
    }

    /// Padding token, if any.
    pub fn pad(&self) -> Option<u32> {
        self.pad
    }

    /// Whether `encode(.., add_special = true, ..)` prepends BOS.
    pub fn add_bos(&self) -> bool {
        self.add_bos
    }

    /// Whether `encode(.., add_special = true, ..)` appends EOS.
    pub fn add_eos(&self) -> bool {
        self.add_eos
    }

    /// Whether generation should stop at `id` (EOS, EOT and the tokens llama.cpp recognises
    /// by text, such as `<|im_end|>` and `<|endoftext|>`).
    pub fn is_eog(&self, id: u32) -> bool {
        self.eog.contains(&id)
    }

    /// All end-of-generation tokens, ascending.
    pub fn eog_ids(&self) -> Vec<u32> {
        let mut v: Vec<u32> = self.eog.iter().copied().collect();
        v.sort_unstable();
        v
    }

    /// The pre-tokenizer in use (BPE only).
    pub fn pre_tokenizer(&self) -> Option<&PreTokenizer> {
        match &self.kind {
            Kind::Bpe { pre, .. } => Some(pre),
            Kind::Spm { .. } => None,
        }
    }

    /// Type of a token (after llama.cpp's load-time overrides).
    pub fn token_type(&self, id: u32) -> Result<TokenType> {
        self.check(id)?;
        Ok(self.types[id as usize])
    }

    /// Raw vocabulary text of a token (byte-encoded for BPE).
    pub fn token_text(&self, id: u32) -> Result<&str> {
        self.check(id)?;
        Ok(&self.tokens[id as usize])
    }

    /// Id of the token whose raw vocabulary text is `text`.
    pub fn token_id(&self, text: &str) -> Option<u32> {
        self.token_to_id.get(text).copied()
    }

    fn check(&self, id: u32) -> Result<()> {
        if (id as usize) < self.tokens.len() {
            Ok(())
        } else {
            Err(TokenizerError::TokenOutOfRange {
                id,
                n_vocab: self.tokens.len(),
            })
        }
    }

    /// Tokenizes `text` like llama.cpp's `llama_tokenize`.
    ///
    /// `add_special` adds BOS/EOS when the model asks for them ([`Tokenizer::add_bos`]);
    /// `parse_special` lets control tokens written in the text (`<|im_start|>`) become their
    /// ids; user-defined tokens are always recognised, as in llama.cpp.
    pub fn encode(&self, text: &str, add_special: bool, parse_special: bool) -> Result<Vec<u32>> {
        let specials: Vec<special::Special<'_>> = self
            .specials
            .iter()
            .filter(|&&id| {
                parse_special
                    || !matches!(
                        self.types[id as usize],
                        TokenType::Control | TokenType::Unknown
                    )
            })
            .map(|&id| special::Special {
                id,
                text: self.tokens[id as usize].as_str(),
                lstrip: false,
                rstrip: self.rstrip.contains(&id),
            })
            .collect();
        let mut out = Vec::new();
        if add_special && self.add_bos {
            out.extend(self.bos);
        }
        // SPM: a space is put before text that starts the input or follows a special token
        let mut prev_special = true;
        for frag in special::partition(text, &specials) {
            match frag {
                special::Fragment::Token(id) => {
                    out.push(id);
                    prev_special = true;
                }
                special::Fragment::Text(range) => {
                    let text = &text[range];
                    match &self.kind {
                        Kind::Bpe {
                            ranks,
                            pre,
                            ignore_merges,
                        } => self.encode_bpe(text, ranks, pre, *ignore_merges, &mut out),
                        Kind::Spm { scores } => {
                            let prefix = if self.add_space_prefix && prev_special {
                                " "
                            } else {
                                ""
                            };
                            self.encode_spm(&format!("{prefix}{text}"), scores, &mut out)?;
                        }
                    }
                    prev_special = false;
                }
            }
        }
        if add_special && self.add_eos {
            out.extend(self.eos);
        }
        Ok(out)
    }

    /// SentencePiece over one raw-text fragment (llama.cpp's `llm_tokenizer_spm_session`).
    fn encode_spm(&self, text: &str, scores: &[f32], out: &mut Vec<u32>) -> Result<()> {
        let escaped = spm::escape_whitespace(text);
        for piece in spm::merge(&escaped, &self.token_to_id, scores) {
            if let Some(&id) = self.token_to_id.get(piece) {
                out.push(id);
                continue;
            }
            // not a token: spell it out as <0xAB> byte tokens (or the byte itself)
            for b in piece.bytes() {
                let hex = format!("<0x{b:02X}>");
                let id = self
                    .token_to_id
                    .get(&hex)
                    .or_else(|| {
                        b.is_ascii()
                            .then(|| self.token_to_id.get(&char::from(b).to_string()))
                            .flatten()
                    })
                    .ok_or(TokenizerError::MissingByteToken(b))?;
                out.push(*id);
            }
        }
        Ok(())
    }

    /// BPE over one raw-text fragment.
    fn encode_bpe(
        &self,
        text: &str,
        ranks: &bpe::MergeRanks,
        pre: &PreTokenizer,
        ignore_merges: bool,
        out: &mut Vec<u32>,
    ) {
        for word in pre.split(text) {
            let encoded = pretokenize::byte_encode(word, &self.byte_table);
            if ignore_merges {
                if let Some(&id) = self.token_to_id.get(&encoded) {
                    out.push(id);
                    continue;
                }
            }
            for sym in bpe::merge_word(&encoded, ranks) {
                match self.token_to_id.get(sym) {
                    Some(&id) => out.push(id),
                    None => {
                        // llama.cpp falls back to looking up each *byte* of the symbol text;
                        // only ASCII bytes can be whole strings, the rest are dropped.
                        for b in sym.bytes().filter(u8::is_ascii) {
                            let s = char::from(b).to_string();
                            if let Some(&id) = self.token_to_id.get(&s) {
                                out.push(id);
                            }
                        }
                    }
                }
            }
        }
    }

    fn render_piece(&self, id: u32) -> Vec<u8> {
        let text = &self.tokens[id as usize];
        match self.types[id as usize] {
            TokenType::Control | TokenType::Unknown | TokenType::UserDefined => {
                text.as_bytes().to_vec()
            }
            TokenType::Normal if self.is_bpe() => self.byte_decode(text),
            TokenType::Normal => spm::unescape_whitespace(text).into_bytes(),
            TokenType::Byte if !self.is_bpe() => spm::byte_of_token(text).into_iter().collect(),
            _ => Vec::new(),
        }
    }

    /// GPT-2 unicode → bytes (llama.cpp's `llama_decode_text`, including its
    /// `[UNK_BYTE_0x..]` marker for characters outside the map).
    fn byte_decode(&self, text: &str) -> Vec<u8> {
        let mut out = Vec::with_capacity(text.len());
        for c in text.chars() {
            match unicode_to_byte(c, &self.byte_table) {
                Some(b) => out.push(b),
                None => {
                    out.extend_from_slice(b"[UNK_BYTE_0x");
                    let mut buf = [0u8; 4];
                    for b in c.encode_utf8(&mut buf).bytes() {
                        out.extend_from_slice(format!("{b:02x}").as_bytes());
                    }
                    out.extend_from_slice(text.as_bytes());
                    out.push(b']');
                }
            }
        }
        out
    }
}

fn unicode_to_byte(c: char, table: &[char; 256]) -> Option<u8> {
    let v = c as u32;
    // printable Latin-1 maps to itself; the rest lives at U+0100..U+0143
    if (0x21..=0x7E).contains(&v) || (0xA1..=0xAC).contains(&v) || (0xAE..=0xFF).contains(&v) {
        return Some(v as u8);
    }
    if (0x100..0x100 + 68).contains(&v) {
        return table.iter().position(|&t| t == c).map(|b| b as u8);
    }
    None
}

#[cfg(test)]
mod tests;
