//! Grammar tests over a small in-memory GPT-2-style tokenizer, and one over
//! the real default model's tokenizer when it is present.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use strata_models::tokenizer::{Tokenizer, TokenizerParts};

use super::*;
use crate::sampling::{RequestSampler, SamplingParams};

/// GPT-2's byte → unicode map (printable Latin-1 maps to itself, the rest
/// to U+0100 onwards in byte order).
fn byte_char(b: u8) -> char {
    let printable = |b: u8| matches!(b, 0x21..=0x7E | 0xA1..=0xAC | 0xAE..=0xFF);
    if printable(b) {
        return char::from(b);
    }
    let n = (0..b).filter(|&x| !printable(x)).count() as u32;
    char::from_u32(0x100 + n).unwrap_or('?')
}

fn byte_encode(s: &str) -> String {
    s.bytes().map(byte_char).collect()
}

/// Multi-byte text tokens of the tiny vocabulary (after the 256 byte tokens).
pub(crate) const EXTRA: &[&str] = &[
    "{\"",
    "\":",
    "\",",
    "\"}",
    " \"",
    "\": \"",
    "true",
    "false",
    "null",
    "name",
    "age",
    "color",
    "red",
    "green",
    "blue",
    "tags",
    "  ",
    "\n  ",
    "12",
    "0.5",
    "<|im_start|>x",
];

/// Control tokens, after [`EXTRA`]: `<|endoftext|>` (EOS) and `<|im_end|>`
/// end generation, `<|im_start|>` does not.
pub(crate) const SPECIALS: &[&str] = &["<|endoftext|>", "<|im_start|>", "<|im_end|>"];

/// A byte-level BPE tokenizer: every byte, [`EXTRA`] and [`SPECIALS`]; no
/// merges (so strata tokenizes into single bytes).
pub(crate) fn tiny_tokenizer() -> Tokenizer {
    let mut tokens: Vec<String> = (0..=255u8).map(|b| byte_char(b).to_string()).collect();
    tokens.extend(EXTRA.iter().map(|t| byte_encode(t)));
    let n_text = tokens.len();
    tokens.extend(SPECIALS.iter().map(|t| t.to_string()));
    let mut types = vec![1i32; n_text];
    types.extend(SPECIALS.iter().map(|_| 3));
    let eos = n_text as u32;
    Tokenizer::from_parts(TokenizerParts {
        model: "gpt2".into(),
        pre: "default".into(),
        tokens,
        token_types: types,
        bos_id: Some(eos),
        eos_id: Some(eos),
        ..TokenizerParts::default()
    })
    .expect("the tiny tokenizer builds")
}

/// Ids of the tiny vocabulary's specials.
pub(crate) fn tiny_special(name: &str) -> u32 {
    let i = SPECIALS.iter().position(|s| *s == name).expect("a special");
    (256 + EXTRA.len() + i) as u32
}

/// A small xorshift generator for test logits.
pub(crate) struct XorShift(pub u64);

impl XorShift {
    pub(crate) fn next_f32(&mut self) -> f32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 40) as f32 / (1u64 << 24) as f32
    }
}

/// Samples under `spec` with random logits (seeded), favouring tokens that
/// close strings, objects and arrays so that walks end, until the grammar
/// is finished; returns the text (without end-of-generation tokens).
fn random_walk(tok: &Tokenizer, gt: &GrammarTokenizer, spec: &GrammarSpec, seed: u64) -> String {
    let closers: Vec<u32> = ["\"", "}", "]", "\"}", "\","]
        .iter()
        .map(|t| tok.token_id(&byte_encode(t)).expect("closer token"))
        .collect();
    let c = gt.constraint(spec).expect("constraint");
    // a second constraint fed the same tokens checks every choice
    let mut check = gt.constraint(spec).expect("constraint");
    let p = SamplingParams {
        temperature: 1.0,
        top_k: 0,
        top_p: 1.0,
        min_p: 0.0,
        seed,
        ..SamplingParams::default()
    };
    let mut s = RequestSampler::new(&p, Some(c), gt.eog().to_vec()).expect("sampler");
    let mut rng = XorShift(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let mut ids = Vec::new();
    for _ in 0..4000 {
        let mut logits: Vec<f32> = (0..tok.n_vocab()).map(|_| rng.next_f32() * 4.0).collect();
        for &t in &closers {
            logits[t as usize] += 5.0;
        }
        let out = s.sample(&logits).expect("sample");
        assert!(
            check.allowed().expect("mask").contains(out.token),
            "seed {seed}: token {} not allowed after {:?}",
            out.token,
            tok.decode(&ids, false, false)
        );
        s.accept(out.token).expect("accept");
        check.accept(out.token).expect("accept");
        if gt.eog().contains(&out.token) {
            break;
        }
        ids.push(out.token);
        if s.grammar_finished() {
            break;
        }
    }
    assert!(
        s.grammar_finished(),
        "seed {seed}: grammar not finished after {} tokens: {:?}",
        ids.len(),
        tok.decode(&ids, false, false)
    );
    tok.decode(&ids, false, true).expect("decode")
}

#[test]
fn tokenizer_eog_and_specials() {
    let tok = tiny_tokenizer();
    let gt = GrammarTokenizer::new(&tok).unwrap();
    assert_eq!(gt.n_vocab(), tok.n_vocab());
    let (eos, end) = (tiny_special("<|endoftext|>"), tiny_special("<|im_end|>"));
    assert_eq!(gt.eog(), &[eos, end]);
    // a fresh JSON grammar never allows a control token or the text token
    // that spells one, nor end-of-generation before anything was written
    let mut c = gt.constraint(&GrammarSpec::JsonObject).unwrap();
    let m = c.allowed().unwrap();
    for s in SPECIALS {
        assert!(!m.contains(tiny_special(s)), "{s} allowed");
    }
    assert!(m.contains(u32::from(b'{')));
    assert!(!m.contains(u32::from(b'[')));
    assert!(!m.contains(u32::MAX));
}

#[test]
fn tokenizer_without_eog_is_an_error() {
    // SentencePiece defaults EOS to id 2: with two tokens there is none
    let tok = Tokenizer::from_parts(TokenizerParts {
        model: "llama".into(),
        tokens: vec!["a".into(), "b".into()],
        add_bos: Some(false),
        ..TokenizerParts::default()
    })
    .unwrap();
    assert!(tok.eog_ids().is_empty());
    let e = GrammarTokenizer::new(&tok).unwrap_err();
    assert_eq!(e, GrammarError::NoEndOfGeneration);
    assert!(e.to_string().contains("end-of-generation"), "{e}");
}

#[test]
fn json_object_walks_parse_as_objects() {
    let tok = tiny_tokenizer();
    let gt = GrammarTokenizer::new(&tok).unwrap();
    for seed in 1..=12 {
        let text = random_walk(&tok, &gt, &GrammarSpec::JsonObject, seed);
        let v: Value =
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("seed {seed}: {e}: {text:?}"));
        assert!(v.is_object(), "seed {seed}: not an object: {text}");
    }
}

fn person_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "name": { "type": "string", "maxLength": 12 },
            "age": { "type": "integer", "minimum": 0, "maximum": 150 },
            "color": { "enum": ["red", "green", "blue"] },
            "tags": { "type": "array", "items": { "type": "boolean" }, "maxItems": 3 }
        },
        "required": ["name", "age", "color"],
        "additionalProperties": false
    })
}

/// Checks `v` against [`person_schema`] by hand.
fn check_person(v: &Value) -> Result<(), String> {
    let o = v.as_object().ok_or("not an object")?;
    for k in o.keys() {
        if !["name", "age", "color", "tags"].contains(&k.as_str()) {
            return Err(format!("extra key {k}"));
        }
    }
    let name = o.get("name").and_then(Value::as_str).ok_or("name")?;
    if name.chars().count() > 12 {
        return Err(format!("name too long: {name:?}"));
    }
    let age = o
        .get("age")
        .and_then(Value::as_i64)
        .ok_or("age not an integer")?;
    if !(0..=150).contains(&age) {
        return Err(format!("age {age} out of range"));
    }
    let color = o.get("color").and_then(Value::as_str).ok_or("color")?;
    if !["red", "green", "blue"].contains(&color) {
        return Err(format!("color {color:?}"));
    }
    if let Some(t) = o.get("tags") {
        let t = t.as_array().ok_or("tags not an array")?;
        if t.len() > 3 || !t.iter().all(Value::is_boolean) {
            return Err(format!("tags {t:?}"));
        }
    }
    Ok(())
}

#[test]
fn json_schema_walks_validate() {
    let tok = tiny_tokenizer();
    let gt = GrammarTokenizer::new(&tok).unwrap();
    let spec = GrammarSpec::JsonSchema(person_schema());
    for seed in 1..=12 {
        let text = random_walk(&tok, &gt, &spec, seed);
        let v: Value =
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("seed {seed}: {e}: {text:?}"));
        check_person(&v).unwrap_or_else(|e| panic!("seed {seed}: {e}: {text}"));
    }
    // the hand check itself rejects what the schema rejects
    assert!(check_person(&json!({"name": "a", "age": 1, "color": "pink"})).is_err());
    assert!(check_person(&json!({"name": "a", "age": 1.5, "color": "red"})).is_err());
    assert!(check_person(&json!({"name": "a", "color": "red"})).is_err());
    assert!(check_person(&json!({"name": "a", "age": 2, "color": "red", "x": 1})).is_err());
    assert!(check_person(&json!({"name": "a", "age": 2, "color": "red"})).is_ok());
}

/// Feeds `text` byte by byte (single-byte tokens) and returns the error, if
/// any.
fn feed(c: &mut Constraint, text: &str) -> Result<(), GrammarError> {
    for b in text.bytes() {
        let t = u32::from(b);
        if !c.allowed()?.contains(t) {
            return Err(GrammarError::TokenRejected {
                token: t,
                reason: "not in mask".into(),
            });
        }
        c.accept(t)?;
    }
    Ok(())
}

#[test]
fn constraint_accepts_valid_text_and_rejects_the_rest() {
    let tok = tiny_tokenizer();
    let gt = GrammarTokenizer::new(&tok).unwrap();
    let eos = tiny_special("<|endoftext|>");
    let spec = GrammarSpec::JsonSchema(person_schema());

    let mut c = gt.constraint(&spec).unwrap();
    feed(&mut c, r#"{"name": "Ada", "age": 36, "color": "blue"}"#).unwrap();
    // done: only end-of-generation may follow
    assert!(c.is_finished());
    let m = c.allowed().unwrap();
    assert_eq!(m.iter().collect::<Vec<_>>(), gt.eog());
    assert!(matches!(
        c.accept(u32::from(b' ')),
        Err(GrammarError::AfterEnd(32))
    ));
    c.accept(eos).unwrap();
    assert!(c.is_finished());

    // wrong enum value, a missing required key, an extra key
    for bad in [
        r#"{"name": "Ada", "age": 36, "color": "pink"}"#,
        r#"{"name": "Ada", "color": "red"}"#,
        r#"{"name": "Ada", "age": 36, "color": "red", "x": 1}"#,
        r#"{"name": "Ada", "age": -1, "color": "red"}"#,
        r#"[1]"#,
    ] {
        let mut c = gt.constraint(&spec).unwrap();
        assert!(feed(&mut c, bad).is_err(), "accepted {bad}");
    }

    // a token the mask does not allow is an error from accept too
    let mut c = gt.constraint(&GrammarSpec::JsonObject).unwrap();
    let e = c.accept(u32::from(b'x')).unwrap_err();
    assert!(
        matches!(e, GrammarError::TokenRejected { token: 120, .. }),
        "{e}"
    );
    let mut c = gt.constraint(&GrammarSpec::JsonObject).unwrap();
    assert!(matches!(
        c.accept(1_000_000),
        Err(GrammarError::TokenRejected { .. })
    ));

    // an object is complete once closed: end-of-generation then finishes it
    let mut c = gt.constraint(&GrammarSpec::JsonObject).unwrap();
    feed(&mut c, "{}").unwrap();
    if !c.is_finished() {
        assert!(c.allowed().unwrap().contains(eos));
        c.accept(eos).unwrap();
    }
    assert!(c.is_finished());
}

#[test]
fn whitespace_between_tokens_is_bounded() {
    let tok = tiny_tokenizer();
    let gt = GrammarTokenizer::new(&tok).unwrap();
    let mut c = gt.constraint(&GrammarSpec::JsonObject).unwrap();
    feed(&mut c, "{\n").unwrap();
    feed(&mut c, &" ".repeat(20)).unwrap();
    assert!(feed(&mut c, " ").is_err(), "a 21st space was allowed");
    let mut c = gt.constraint(&GrammarSpec::JsonObject).unwrap();
    assert!(
        feed(&mut c, "{\n\n\n").is_err(),
        "three newlines were allowed"
    );
}

#[test]
fn invalid_schemas_are_errors_that_say_why() {
    let tok = tiny_tokenizer();
    let gt = GrammarTokenizer::new(&tok).unwrap();
    for (schema, says) in [
        (json!({"type": "objekt"}), "objekt"),
        (json!({"$ref": "#/$defs/missing"}), "missing"),
        (json!({"type": "integer", "minimum": 5, "maximum": 1}), ""),
        (json!({"type": "string", "pattern": "(unclosed"}), ""),
        (json!(7), ""),
    ] {
        let e = gt
            .constraint(&GrammarSpec::JsonSchema(schema.clone()))
            .unwrap_err();
        let msg = e.to_string();
        eprintln!("{schema} -> {msg}");
        assert!(
            matches!(e, GrammarError::InvalidSchema(_)),
            "{schema}: {e:?}"
        );
        assert!(msg.contains(says), "{schema}: {msg}");
        assert!(!msg.contains("non-verbose"), "{msg}");
    }
}

/// Schemas that recurse, ask for huge sizes or heavy regexes compile or
/// fail with a schema error, quickly; masks under them stay bounded.
#[test]
fn hostile_schemas_are_bounded() {
    let tok = tiny_tokenizer();
    let gt = GrammarTokenizer::new(&tok).unwrap();
    for schema in [
        json!({"$ref": "#"}),
        json!({"type": "object", "properties": {"a": {"$ref": "#"}}, "required": ["a"]}),
        json!({"anyOf": [{"$ref": "#"}, {"type": "null"}]}),
        json!({"type": "string", "pattern": "^(a|b)*c{1000}{1000}$"}),
        json!({"type": "string", "pattern": "^((a+)+)+(b|c|d|e)*{5}x$"}),
        json!({"type": "string", "minLength": 1_000_000, "maxLength": 2_000_000}),
        json!({"type": "array", "minItems": 100_000, "items": {"type": "integer"}}),
        json!({"type": "integer", "minimum": 1e300}),
        json!({"type": "number", "multipleOf": 1e-300}),
        json!({"allOf": [{"type": "string"}, {"type": "integer"}]}),
        json!(false),
        json!(true),
    ] {
        let t0 = Instant::now();
        match gt.constraint(&GrammarSpec::JsonSchema(schema.clone())) {
            Ok(mut c) => {
                // a few masks and tokens under it
                for _ in 0..8 {
                    let Ok(m) = c.allowed() else { break };
                    let Some(t) = m.iter().find(|t| !gt.eog().contains(t)) else {
                        break;
                    };
                    if c.accept(t).is_err() {
                        break;
                    }
                }
            }
            Err(e) => {
                assert!(
                    matches!(e, GrammarError::InvalidSchema(_)),
                    "{schema}: {e:?}"
                );
            }
        }
        let took = t0.elapsed();
        eprintln!("{schema}: {took:?}");
        assert!(took < Duration::from_secs(5), "{schema} took {took:?}");
    }
}

#[test]
fn oversized_schemas_are_rejected_before_compiling() {
    let tok = tiny_tokenizer();
    let gt = GrammarTokenizer::new(&tok).unwrap();
    let mut deep = json!({"type": "string"});
    for _ in 0..MAX_SCHEMA_DEPTH {
        deep = json!({"type": "object", "properties": {"a": deep}});
    }
    assert_eq!(
        gt.constraint(&GrammarSpec::JsonSchema(deep)).unwrap_err(),
        GrammarError::SchemaTooDeep {
            limit: MAX_SCHEMA_DEPTH
        }
    );
    let big: serde_json::Map<String, Value> = (0..20_000)
        .map(|i| (format!("property_{i}"), json!({"type": "string"})))
        .collect();
    let e = gt
        .constraint(&GrammarSpec::JsonSchema(
            json!({"type": "object", "properties": big}),
        ))
        .unwrap_err();
    assert_eq!(
        e,
        GrammarError::SchemaTooLarge {
            limit: MAX_SCHEMA_BYTES
        }
    );
    // the deepest allowed nesting compiles (no stack trouble on a test thread)
    let mut ok = json!({"type": "string"});
    for _ in 0..(MAX_SCHEMA_DEPTH / 2 - 1) {
        ok = json!({"type": "object", "properties": {"a": ok}, "required": ["a"]});
    }
    let mut c = gt.constraint(&GrammarSpec::JsonSchema(ok)).unwrap();
    feed(&mut c, "{\"a\":{\"a\":").unwrap();
}

#[test]
fn response_format_shapes() {
    let schema = json!({"type": "object", "properties": {"a": {"type": "integer"}}});
    let ok = |v: Value| from_response_format(&v).unwrap();
    assert_eq!(ok(Value::Null), None);
    assert_eq!(ok(json!({"type": "text"})), None);
    assert_eq!(
        ok(json!({"type": "json_object"})),
        Some(GrammarSpec::JsonObject)
    );
    assert_eq!(
        ok(json!({"type": "json_object", "schema": schema})),
        Some(GrammarSpec::JsonSchema(schema.clone()))
    );
    assert_eq!(
        ok(
            json!({"type": "json_schema", "json_schema": {"name": "x", "strict": true, "schema": schema}})
        ),
        Some(GrammarSpec::JsonSchema(schema.clone()))
    );
    assert_eq!(
        ok(json!({"type": "json_schema", "json_schema": {"name": "x"}})),
        Some(GrammarSpec::JsonObject)
    );
    for bad in [
        json!("json_object"),
        json!({}),
        json!({"type": 3}),
        json!({"type": "xml"}),
        json!({"type": "json_schema"}),
        json!({"type": "json_schema", "json_schema": "x"}),
    ] {
        let e = from_response_format(&bad).unwrap_err();
        assert!(matches!(e, GrammarError::ResponseFormat(_)), "{bad}: {e:?}");
    }
    let e = from_response_format(&json!({"type": "xml"})).unwrap_err();
    assert!(e.to_string().contains("\"xml\""), "{e}");
}

#[test]
fn token_mask_masks_logits_past_the_vocabulary() {
    let tok = tiny_tokenizer();
    let gt = GrammarTokenizer::new(&tok).unwrap();
    let mut c = gt.constraint(&GrammarSpec::JsonObject).unwrap();
    let m = c.allowed().unwrap();
    let mut logits = vec![1.0f32; tok.n_vocab() + 40];
    m.mask_logits(&mut logits);
    for (i, &l) in logits.iter().enumerate() {
        assert_eq!(l == 1.0, m.contains(i as u32), "token {i}");
    }
    assert_eq!(logits.iter().filter(|&&l| l == 1.0).count(), m.count());
    assert!(m.count() >= 1);
    // shorter logits than the vocabulary are fine too
    let mut short = vec![1.0f32; 10];
    m.mask_logits(&mut short);
    assert!(short.iter().all(|&l| l == f32::NEG_INFINITY));
}

#[test]
fn constraint_and_tokenizer_are_send() {
    fn send<T: Send>() {}
    fn sync<T: Send + Sync>() {}
    send::<Constraint>();
    sync::<GrammarTokenizer>();
}

/// The default model, or `None` when it is absent (a failure instead under
/// `STRATA_REQUIRE_MODEL=1`).
fn default_model() -> Option<PathBuf> {
    let path = match std::env::var_os("STRATA_MODEL") {
        Some(p) => PathBuf::from(p),
        None => PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
            .join(".cache/strata/SmolLM2-135M-Instruct.Q4_1.gguf"),
    };
    if path.exists() {
        return Some(path);
    }
    let msg = format!(
        "SKIPPED: model {} not found (run .ci/fetch-models.sh); the real-vocabulary grammar test did not run",
        path.display()
    );
    if std::env::var("STRATA_REQUIRE_MODEL").is_ok_and(|v| v == "1") {
        panic!("{msg} (STRATA_REQUIRE_MODEL=1)");
    }
    eprintln!("{msg}");
    None
}

/// The default model's tokenizer, or `None` when the model is absent (see
/// [`default_model`]).
fn real_tokenizer() -> Option<Tokenizer> {
    let file = strata::gguf::GgufFile::open(default_model()?).unwrap();
    Some(strata_models::gguf::tokenizer(&file).unwrap())
}

/// With the real vocabulary: steer a constrained walk to a target JSON text
/// (at each step the allowed token spelling the longest prefix of what is
/// left), check it ends there, and report the mask time per token.
#[test]
fn real_vocabulary_schema_walk() {
    let Some(tok) = real_tokenizer() else { return };
    let t0 = Instant::now();
    let gt = GrammarTokenizer::new(&tok).unwrap();
    eprintln!(
        "GrammarTokenizer::new: {:?} for {} tokens",
        t0.elapsed(),
        tok.n_vocab()
    );
    assert!(gt.eog().contains(&tok.eos().unwrap()));
    let target = r#"{"name": "Ada Lovelace", "age": 36, "color": "green", "tags": [true, false]}"#;
    let t0 = Instant::now();
    let mut c = gt
        .constraint(&GrammarSpec::JsonSchema(person_schema()))
        .unwrap();
    eprintln!("constraint (schema compile): {:?}", t0.elapsed());
    let pieces: Vec<Vec<u8>> = (0..tok.n_vocab() as u32)
        .map(|t| tok.token_to_piece(t).unwrap().to_vec())
        .collect();
    let mut rest = target.as_bytes();
    let mut times: Vec<Duration> = Vec::new();
    let mut n_allowed = Vec::new();
    let mut steps = 0;
    while !c.is_finished() {
        steps += 1;
        assert!(steps < 200, "no end after {steps} tokens");
        let t0 = Instant::now();
        let m = c.allowed().unwrap();
        times.push(t0.elapsed());
        n_allowed.push(m.count());
        let next = if rest.is_empty() {
            m.iter().find(|t| gt.eog().contains(t))
        } else {
            m.iter()
                .filter(|&t| {
                    let p = &pieces[t as usize];
                    !p.is_empty() && !gt.eog().contains(&t) && rest.starts_with(p)
                })
                .max_by_key(|&t| pieces[t as usize].len())
        };
        let t = next.unwrap_or_else(|| {
            panic!(
                "no allowed token continues {:?} ({} allowed)",
                String::from_utf8_lossy(rest),
                m.count()
            )
        });
        c.accept(t).unwrap();
        if !gt.eog().contains(&t) {
            rest = &rest[pieces[t as usize].len()..];
        }
    }
    assert!(rest.is_empty(), "finished early, left {rest:?}");
    times.sort();
    let total: Duration = times.iter().sum();
    eprintln!(
        "mask per token over {} steps: mean {:?}, median {:?}, max {:?}; allowed counts {:?}",
        times.len(),
        total / times.len() as u32,
        times[times.len() / 2],
        times[times.len() - 1],
        n_allowed
    );
}

/// With the real vocabulary: random-logit sampling under `json_object`
/// through [`RequestSampler`] (up to 300 tokens), every choice allowed; the
/// time per `sample` (mask, masking, draw) is reported.
#[test]
fn real_vocabulary_random_json_object() {
    let Some(tok) = real_tokenizer() else { return };
    let gt = GrammarTokenizer::new(&tok).unwrap();
    let spec = GrammarSpec::JsonObject;
    let p = SamplingParams {
        temperature: 1.0,
        top_k: 0,
        top_p: 1.0,
        min_p: 0.0,
        seed: 1,
        ..SamplingParams::default()
    };
    let mut s =
        RequestSampler::new(&p, Some(gt.constraint(&spec).unwrap()), gt.eog().to_vec()).unwrap();
    let mut check = gt.constraint(&spec).unwrap();
    let id = |t: &str| tok.encode(t, false, false).unwrap()[0];
    let quotes = [id("\""), id("\",")];
    let closers = [id("}"), id("\"}")];
    // "{}" is one token: rule it out so that the object has members
    let empty = tok.encode("{}", false, false).unwrap();
    let mut rng = XorShift(77);
    let mut ids = Vec::new();
    let mut took = Duration::ZERO;
    let mut mask_took = Vec::new();
    for step in 0..300 {
        let mut logits: Vec<f32> = (0..tok.n_vocab()).map(|_| rng.next_f32() * 4.0).collect();
        for &t in &quotes {
            logits[t as usize] += 8.0;
        }
        for &t in &closers {
            logits[t as usize] += if step < 40 { -8.0 } else { 8.0 };
        }
        if empty.len() == 1 {
            logits[empty[0] as usize] = f32::NEG_INFINITY;
        }
        let t0 = Instant::now();
        let out = s.sample(&logits).unwrap();
        took += t0.elapsed();
        let t0 = Instant::now();
        let allowed = check.allowed().unwrap().contains(out.token);
        mask_took.push(t0.elapsed());
        assert!(allowed);
        s.accept(out.token).unwrap();
        check.accept(out.token).unwrap();
        ids.push(out.token);
        if s.grammar_finished() || gt.eog().contains(&out.token) {
            break;
        }
    }
    let text = tok.decode(&ids, false, false).unwrap();
    mask_took.sort();
    eprintln!(
        "json_object, {} tokens: sample() {:?} per token (top-k 0: strata's sampler sorts \
         every allowed token); the mask alone: mean {:?}, \
         median {:?}, max {:?}; text {text:?}",
        ids.len(),
        took / ids.len() as u32,
        mask_took.iter().sum::<Duration>() / mask_took.len() as u32,
        mask_took[mask_took.len() / 2],
        mask_took[mask_took.len() - 1],
    );
    if s.grammar_finished() {
        let v: Value = serde_json::from_str(&text).unwrap();
        assert!(v.is_object());
    }
}
