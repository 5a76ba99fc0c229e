//! Structured output: OpenAI's `response_format` (`json_object`,
//! `json_schema`) enforced token by token with llguidance.
//!
//! A [`GrammarTokenizer`] is built once per model from its strata tokenizer:
//! every token's bytes go into a toktrie [`TokTrie`] (control, unknown and
//! end-of-generation tokens marked special with toktrie's `0xFF` prefix, so
//! a grammar never produces them as text), and an llguidance
//! [`ParserFactory`] is made over it. Each request then gets a
//! [`Constraint`] from a [`GrammarSpec`]: ask it which tokens are
//! [`allowed`](Constraint::allowed) next, feed it the chosen token with
//! [`accept`](Constraint::accept), and stop the request when it
//! [`is_finished`](Constraint::is_finished).
//!
//! Everything a request sizes is bounded: the schema's JSON size
//! ([`MAX_SCHEMA_BYTES`]) and nesting ([`MAX_SCHEMA_DEPTH`]) are checked
//! before compiling, and llguidance runs under tighter limits than its
//! defaults (grammar size, lexer states, lexer fuel per mask). Whitespace
//! between JSON tokens is bounded as in llama.cpp's JSON-schema grammars
//! (one space, or one or two newlines and up to 20 spaces or tabs), so a
//! constrained model cannot run on emitting blank space.
//!
//! ```no_run
//! use strata_serve::grammar::{GrammarSpec, GrammarTokenizer};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let tokenizer: strata_models::tokenizer::Tokenizer = todo!();
//! let gt = GrammarTokenizer::new(&tokenizer)?;
//! let mut c = gt.constraint(&GrammarSpec::JsonObject)?;
//! while !c.is_finished() {
//!     let mask = c.allowed()?;
//!     let token = mask.iter().next().ok_or("nothing allowed")?; // a sampler picks here
//!     c.accept(token)?;
//!     # break;
//! }
//! # Ok(())
//! # }
//! ```

use std::fmt;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use llguidance::api::{ParserLimits, StopReason, TopLevelGrammar};
use llguidance::{Matcher, ParserFactory};
use serde_json::Value;
use strata_models::tokenizer::{TokenType, Tokenizer};
use toktrie::{SimpleVob, TokEnv, TokRxInfo, TokTrie, TokenId, TokenizerEnv};

/// The largest schema accepted, in bytes of compact JSON.
pub const MAX_SCHEMA_BYTES: usize = 256 * 1024;

/// The deepest nesting of JSON arrays/objects accepted in a schema (an
/// object property's schema is two levels below its object: `properties`,
/// then the property).
pub const MAX_SCHEMA_DEPTH: usize = 64;

/// llama.cpp's JSON-schema whitespace (`space ::= | " " | "\n"{1,2} [ \t]{0,20}`),
/// as the regex llguidance matches between JSON tokens.
const JSON_WHITESPACE: &str = r"[ ]|\n{1,2}[ \t]{0,20}";

/// llguidance's limits for one request (its defaults allow up to ~500 MB of
/// lexer states and multi-megabyte grammars).
fn parser_limits() -> ParserLimits {
    ParserLimits {
        // grammar symbols: a few hundred kB of schema
        max_grammar_size: 100_000,
        // ~1-2 kB each: at most ~100 MB per request, usually far fewer
        max_lexer_states: 50_000,
        // ~20 ms to build the lexer
        initial_lexer_fuel: 1_000_000,
        // ~15 ms of lexer work per token mask at most
        step_lexer_fuel: 200_000,
        step_max_items: 50_000,
        max_items_in_row: 2_000,
        precompute_large_lexemes: true,
        // errors go back to API users: no internal parser dumps
        verbose_errors: false,
    }
}

/// Errors from building a grammar tokenizer, compiling a grammar or
/// matching tokens against it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GrammarError {
    /// The model's tokenizer has no end-of-generation token.
    #[error(
        "the model's tokenizer has no end-of-generation token, so a constrained output could \
         never end: structured output is unavailable for this model"
    )]
    NoEndOfGeneration,
    /// The vocabulary could not be read or turned into a token trie.
    #[error("cannot prepare the tokenizer for structured output: {0}")]
    Tokenizer(String),
    /// `response_format` is not a shape this server understands.
    #[error("invalid response_format: {0}")]
    ResponseFormat(String),
    /// The schema is larger than [`MAX_SCHEMA_BYTES`].
    #[error(
        "the JSON schema is larger than {limit} bytes: send a smaller schema \
         (shared parts can go in $defs and be used by $ref)"
    )]
    SchemaTooLarge {
        /// The limit in bytes.
        limit: usize,
    },
    /// The schema nests deeper than [`MAX_SCHEMA_DEPTH`].
    #[error(
        "the JSON schema nests deeper than {limit} levels: flatten it \
         (deep parts can go in $defs and be used by $ref)"
    )]
    SchemaTooDeep {
        /// The nesting limit.
        limit: usize,
    },
    /// llguidance rejected the schema (unknown keyword, bad `$ref`,
    /// unsatisfiable constraints, a grammar over the size limits...).
    #[error("invalid JSON schema: {0}")]
    InvalidSchema(String),
    /// The grammar does not allow this token here (or the token id is not
    /// in the vocabulary).
    #[error("the grammar does not allow token {token} here: {reason}")]
    TokenRejected {
        /// The token.
        token: u32,
        /// llguidance's reason.
        reason: String,
    },
    /// The output is complete and a token other than end-of-generation was
    /// given.
    #[error(
        "the constrained output is already complete: only an end-of-generation token may \
         follow, got token {0}"
    )]
    AfterEnd(u32),
    /// Computing the next allowed tokens failed (the grammar allows nothing,
    /// or llguidance hit a limit); the request cannot go on.
    #[error("structured output failed: {0}")]
    Matcher(String),
}

/// Strips llguidance's non-verbose marker from an error message.
fn llg_msg(e: impl fmt::Display) -> String {
    let s = e.to_string();
    s.trim_end_matches("<non-verbose/>").trim_end().to_string()
}

/// What a request's output must be.
#[derive(Debug, Clone, PartialEq)]
pub enum GrammarSpec {
    /// Any JSON object (OpenAI's `{"type": "json_object"}`).
    JsonObject,
    /// A JSON value that validates against this JSON schema (OpenAI's
    /// `{"type": "json_schema", "json_schema": {"schema": ...}}`).
    JsonSchema(Value),
}

impl GrammarSpec {
    /// Parses OpenAI's `response_format`:
    ///
    /// - `null` or `{"type": "text"}`: no constraint (`None`);
    /// - `{"type": "json_object"}`: [`GrammarSpec::JsonObject`]; with a
    ///   `"schema"` member (llama-server's extension),
    ///   [`GrammarSpec::JsonSchema`] of it;
    /// - `{"type": "json_schema", "json_schema": {"schema": ...}}`:
    ///   [`GrammarSpec::JsonSchema`]; without `schema`, any JSON object.
    ///
    /// Anything else (not an object, no `type`, an unknown `type`, a
    /// `json_schema` that is not an object) is an error.
    pub fn from_response_format(v: &Value) -> Result<Option<GrammarSpec>, GrammarError> {
        let bad = |m: &str| Err(GrammarError::ResponseFormat(m.to_string()));
        let obj = match v {
            Value::Null => return Ok(None),
            Value::Object(o) => o,
            _ => return bad("expected an object such as {\"type\": \"json_object\"}"),
        };
        let ty = match obj.get("type") {
            Some(Value::String(t)) => t.as_str(),
            Some(_) => return bad("\"type\" must be a string"),
            None => {
                return bad("missing \"type\" (one of \"text\", \"json_object\", \"json_schema\")")
            }
        };
        match ty {
            "text" => Ok(None),
            "json_object" => Ok(Some(match obj.get("schema") {
                None | Some(Value::Null) => GrammarSpec::JsonObject,
                Some(s) => GrammarSpec::JsonSchema(s.clone()),
            })),
            "json_schema" => match obj.get("json_schema") {
                Some(Value::Object(js)) => Ok(Some(match js.get("schema") {
                    None | Some(Value::Null) => GrammarSpec::JsonObject,
                    Some(s) => GrammarSpec::JsonSchema(s.clone()),
                })),
                Some(_) => bad("\"json_schema\" must be an object with a \"schema\" member"),
                None => {
                    bad("type \"json_schema\" needs a \"json_schema\": {\"schema\": ...} member")
                }
            },
            other => Err(GrammarError::ResponseFormat(format!(
                "unknown type {other:?} (expected \"text\", \"json_object\" or \"json_schema\")"
            ))),
        }
    }
}

/// Parses OpenAI's `response_format` (see [`GrammarSpec::from_response_format`]).
pub fn from_response_format(v: &Value) -> Result<Option<GrammarSpec>, GrammarError> {
    GrammarSpec::from_response_format(v)
}

/// The set of token ids a grammar allows next.
#[derive(Clone)]
pub struct TokenMask(SimpleVob);

impl fmt::Debug for TokenMask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokenMask")
            .field("n_vocab", &self.n_vocab())
            .field("allowed", &self.count())
            .finish()
    }
}

impl TokenMask {
    /// Whether `id` is allowed (ids past the vocabulary never are).
    pub fn contains(&self, id: u32) -> bool {
        (id as usize) < self.0.len() && self.0.is_allowed(id)
    }

    /// The vocabulary size the mask covers.
    pub fn n_vocab(&self) -> usize {
        self.0.len()
    }

    /// How many tokens are allowed.
    pub fn count(&self) -> usize {
        self.iter().count()
    }

    /// The allowed ids, ascending.
    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        let n = self.0.len();
        self.0.iter().take_while(move |&id| (id as usize) < n)
    }

    /// Sets every disallowed entry of `logits` (indexed by token id) to
    /// negative infinity; entries past the vocabulary are disallowed.
    pub fn mask_logits(&self, logits: &mut [f32]) {
        let words = self.0.as_slice();
        let n = self.0.len().min(logits.len());
        for (w, chunk) in logits[..n].chunks_mut(32).enumerate() {
            let bits = words.get(w).copied().unwrap_or(0);
            if bits == u32::MAX {
                continue;
            }
            for (b, l) in chunk.iter_mut().enumerate() {
                if bits & (1 << b) == 0 {
                    *l = f32::NEG_INFINITY;
                }
            }
        }
        logits[n..].fill(f32::NEG_INFINITY);
    }
}

/// llguidance's view of a strata tokenizer: the trie of token bytes and
/// strata's own tokenization (checked against the trie, greedy otherwise).
struct StrataTokEnv {
    trie: TokTrie,
    tokenizer: Tokenizer,
}

impl TokenizerEnv for StrataTokEnv {
    fn tok_trie(&self) -> &TokTrie {
        &self.trie
    }

    fn tokenize_bytes(&self, s: &[u8]) -> Vec<TokenId> {
        if let Ok(text) = std::str::from_utf8(s) {
            if let Ok(ids) = self.tokenizer.encode(text, false, false) {
                // strata drops bytes it cannot spell with the vocabulary;
                // llguidance needs tokens that give back exactly `s`
                if ids.iter().all(|&t| (t as usize) < self.trie.vocab_size())
                    && self.trie.decode_raw(&ids) == s
                {
                    return ids;
                }
            }
        }
        self.trie.greedy_tokenize(s)
    }
}

struct Shared {
    factory: ParserFactory,
    eog: Vec<u32>,
    eog_mask: TokenMask,
}

/// A model's tokenizer prepared for llguidance; cheap to clone (shared).
#[derive(Clone)]
pub struct GrammarTokenizer(Arc<Shared>);

impl fmt::Debug for GrammarTokenizer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GrammarTokenizer")
            .field("n_vocab", &self.n_vocab())
            .field("eog", &self.0.eog)
            .finish()
    }
}

impl GrammarTokenizer {
    /// Prepares `tok` (once per model: it walks the whole vocabulary).
    ///
    /// Fails when the tokenizer has no end-of-generation token (a
    /// constrained output could never end).
    pub fn new(tok: &Tokenizer) -> Result<Self, GrammarError> {
        let n = tok.n_vocab();
        let vocab_size = u32::try_from(n)
            .map_err(|_| GrammarError::Tokenizer(format!("{n} tokens do not fit in u32 ids")))?;
        let terr = |e: strata_models::TokenizerError| GrammarError::Tokenizer(e.to_string());
        let mut words = Vec::with_capacity(n);
        for id in 0..vocab_size {
            let piece = tok.token_to_piece(id).map_err(terr)?;
            let special = tok.is_eog(id)
                || matches!(
                    tok.token_type(id).map_err(terr)?,
                    TokenType::Control | TokenType::Unknown
                );
            if special && !piece.is_empty() {
                let mut w = Vec::with_capacity(piece.len() + 1);
                w.push(TokTrie::SPECIAL_TOKEN_MARKER);
                w.extend_from_slice(piece);
                words.push(w);
            } else {
                words.push(piece.to_vec());
            }
        }
        // EOS first: llguidance reports it as "the" EOS token
        let mut eog = tok.eog_ids();
        eog.retain(|&t| t < vocab_size);
        if let Some(e) = tok.eos().filter(|e| eog.contains(e)) {
            eog.retain(|&t| t != e);
            eog.insert(0, e);
        }
        let Some(&first_eog) = eog.first() else {
            return Err(GrammarError::NoEndOfGeneration);
        };
        let in_vocab = |t: Option<u32>| t.filter(|&t| t < vocab_size);
        let info = TokRxInfo {
            vocab_size,
            tok_eos: first_eog,
            tok_bos: in_vocab(tok.bos()),
            tok_pad: in_vocab(tok.pad()),
            tok_unk: in_vocab(tok.unk()),
            tok_end_of_turn: in_vocab(tok.eot()),
        };
        // toktrie and llguidance assert on what they are given: a panic
        // there becomes an error
        let (eog_mask, mut factory) =
            llguidance::panic_utils::catch_unwind(AssertUnwindSafe(|| {
                let trie = TokTrie::from(&info, &words).with_eos_tokens(&eog);
                let eog_mask = TokenMask(trie.eos_token_set());
                let env: TokEnv = Arc::new(StrataTokEnv {
                    trie,
                    tokenizer: tok.clone(),
                });
                Ok((eog_mask, ParserFactory::new_simple(&env)?))
            }))
            .map_err(|e| GrammarError::Tokenizer(format!("llguidance: {}", llg_msg(e))))?;
        factory.quiet();
        *factory.limits_mut() = parser_limits();
        Ok(GrammarTokenizer(Arc::new(Shared {
            factory,
            eog,
            eog_mask,
        })))
    }

    /// The vocabulary size.
    pub fn n_vocab(&self) -> usize {
        self.0.eog_mask.n_vocab()
    }

    /// The end-of-generation tokens a finished grammar allows (EOS first).
    pub fn eog(&self) -> &[u32] {
        &self.0.eog
    }

    /// A fresh constraint for one request's output.
    ///
    /// Errors name what is wrong with the schema (a client error: the
    /// server answers it with HTTP 400).
    pub fn constraint(&self, spec: &GrammarSpec) -> Result<Constraint, GrammarError> {
        let mut schema = match spec {
            GrammarSpec::JsonObject => serde_json::json!({ "type": "object" }),
            GrammarSpec::JsonSchema(s) => {
                check_schema_size(s)?;
                s.clone()
            }
        };
        if let Value::Object(o) = &mut schema {
            if !o.contains_key("x-guidance") {
                o.insert(
                    "x-guidance".into(),
                    serde_json::json!({ "whitespace_pattern": JSON_WHITESPACE }),
                );
            }
        }
        let grammar = TopLevelGrammar::from_json_schema(schema);
        // compiling is not guarded by llguidance itself (masks are)
        let factory = &self.0.factory;
        let parser = llguidance::panic_utils::catch_unwind(AssertUnwindSafe(|| {
            factory.create_parser(grammar)
        }))
        .map_err(|e| GrammarError::InvalidSchema(llg_msg(e)))?;
        let matcher = Matcher::new(Ok(parser));
        if let Some(e) = matcher.get_error() {
            return Err(GrammarError::InvalidSchema(llg_msg(e)));
        }
        Ok(Constraint {
            matcher,
            shared: self.0.clone(),
            mask: None,
            finished: false,
        })
    }
}

/// Rejects schemas deeper than [`MAX_SCHEMA_DEPTH`] (checked without
/// recursion) or larger than [`MAX_SCHEMA_BYTES`].
fn check_schema_size(v: &Value) -> Result<(), GrammarError> {
    let mut stack = vec![(v, 1usize)];
    while let Some((v, depth)) = stack.pop() {
        let children: Box<dyn Iterator<Item = &Value>> = match v {
            Value::Array(a) => Box::new(a.iter()),
            Value::Object(o) => Box::new(o.values()),
            _ => continue,
        };
        if depth > MAX_SCHEMA_DEPTH {
            return Err(GrammarError::SchemaTooDeep {
                limit: MAX_SCHEMA_DEPTH,
            });
        }
        stack.extend(children.map(|c| (c, depth + 1)));
    }
    // depth is bounded now, so serializing (recursive) is safe
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            if self.0 > MAX_SCHEMA_BYTES {
                return Err(std::io::Error::other("schema too large"));
            }
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    serde_json::to_writer(&mut Count(0), v).map_err(|_| GrammarError::SchemaTooLarge {
        limit: MAX_SCHEMA_BYTES,
    })
}

/// One request's grammar state.
pub struct Constraint {
    matcher: Matcher,
    shared: Arc<Shared>,
    /// The mask for the current state, once computed.
    mask: Option<TokenMask>,
    finished: bool,
}

impl fmt::Debug for Constraint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Constraint")
            .field("finished", &self.finished)
            .field("stop_reason", &self.matcher.stop_reason())
            .finish()
    }
}

impl Constraint {
    /// The tokens allowed next. Once the grammar is finished that is only
    /// the end-of-generation tokens. Computed once per state: the first
    /// call after [`Constraint::accept`] does the work (for a 49k-token
    /// vocabulary, tens of microseconds typically, up to about a millisecond
    /// where a string opens and most tokens are allowed).
    ///
    /// Errors when the grammar allows nothing or llguidance hits a limit;
    /// the request cannot continue then.
    pub fn allowed(&mut self) -> Result<&TokenMask, GrammarError> {
        if self.finished {
            return Ok(&self.shared.eog_mask);
        }
        if self.mask.is_none() {
            let m = self
                .matcher
                .compute_mask()
                .map_err(|e| GrammarError::Matcher(llg_msg(e)))?;
            if m.is_zero() {
                return Err(GrammarError::Matcher(
                    "the grammar allows no token here".into(),
                ));
            }
            self.mask = Some(TokenMask(m));
        }
        self.mask
            .as_ref()
            .ok_or_else(|| GrammarError::Matcher("token mask missing".into()))
    }

    /// Advances the grammar by the generated `token`. After the grammar is
    /// finished only end-of-generation tokens are accepted (and change
    /// nothing).
    pub fn accept(&mut self, token: u32) -> Result<(), GrammarError> {
        if self.finished {
            return if self.shared.eog.contains(&token) {
                Ok(())
            } else {
                Err(GrammarError::AfterEnd(token))
            };
        }
        if token as usize >= self.shared.eog_mask.n_vocab() {
            return Err(GrammarError::TokenRejected {
                token,
                reason: format!(
                    "not in the vocabulary of {} tokens",
                    self.shared.eog_mask.n_vocab()
                ),
            });
        }
        self.mask = None;
        self.matcher
            .consume_token(token)
            .map_err(|e| GrammarError::TokenRejected {
                token,
                reason: llg_msg(e),
            })?;
        self.finished = matches!(
            self.matcher.stop_reason(),
            StopReason::NoExtension | StopReason::EndOfSentence
        );
        Ok(())
    }

    /// Whether the output is complete: the grammar accepts it and only an
    /// end-of-generation token may follow (the server ends the request here
    /// with `finish_reason` `"stop"`).
    pub fn is_finished(&self) -> bool {
        self.finished
    }
}

#[cfg(test)]
pub(crate) mod tests;
