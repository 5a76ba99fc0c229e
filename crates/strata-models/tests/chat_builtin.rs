//! llama.cpp's built-in chat templates (`--chat-template NAME`) rendered by
//! strata's [`Builtin`] byte-identical to llama.cpp:
//!
//! - `tests/data/chat/builtin/test_chat_template_cases.json`: the expected
//!   outputs of llama.cpp's own test table (`tests/test-chat-template.cpp`):
//!   its six-message conversation (plus a case's extra messages) rendered
//!   with the generation prompt by the built-in llama.cpp detects for each
//!   model's template;
//! - `tests/data/chat/builtin/renderings.json`: llama.cpp's renderer
//!   (`src/llama-chat.cpp`) compiled and run on every built-in name, for
//!   conversations that reach each format's branches, with and without the
//!   generation prompt.
//!
//! Both come from the llama.cpp vendored in llama-cpp-python 0.3.36
//! (ggml-org/llama.cpp@0c1e57098), written by
//! `scripts/builtin_chat_template_goldens.py`.

mod support;

use std::path::PathBuf;

use serde_json::Value;
use strata_models::chat::Builtin;
use support::messages;

fn data(file: &str) -> Value {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/chat/builtin")
        .join(file);
    serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap()
}

/// The names are llama.cpp's table, all of them, in its order.
#[test]
fn names_are_llamacpps() {
    let d = data("renderings.json");
    let theirs: Vec<&str> = d["names"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap())
        .collect();
    let ours: Vec<&str> = Builtin::all().map(Builtin::name).collect();
    assert_eq!(ours, theirs);
}

/// Every case of llama.cpp's test table that a built-in renders.
#[test]
fn llamacpp_test_cases() {
    let d = data("test_chat_template_cases.json");
    let conversation = messages(&d["conversation"]);
    let mut failures = Vec::new();
    let mut covered = std::collections::BTreeSet::new();
    let cases = d["cases"].as_array().unwrap();
    assert!(cases.len() >= 30, "{} cases", cases.len());
    for case in cases {
        let name = case["name"].as_str().unwrap();
        let builtin = case["builtin"].as_str().unwrap();
        let b = Builtin::from_name(builtin)
            .unwrap_or_else(|| panic!("{name}: no built-in '{builtin}'"));
        covered.insert(builtin);
        let mut chat = conversation.clone();
        chat.extend(messages(&case["extra_conversation"]));
        let got = b.render(&chat, true);
        let want = case["expected_output"].as_str().unwrap();
        if got != want {
            failures.push(format!(
                "{name} ({builtin}):\n   got {got:?}\n  want {want:?}"
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // the names the test table covers (the rest: `every_name_as_llamacpp_renders`)
    for must in [
        "chatml",
        "llama2",
        "llama3",
        "gemma",
        "phi3",
        "mistral-v1",
        "mistral-v3",
        "mistral-v7",
        "vicuna",
        "deepseek",
        "deepseek2",
        "command-r",
        "monarch",
        "orion",
        "openchat",
        "granite",
    ] {
        assert!(
            covered.contains(must),
            "{must} not in llama.cpp's test table"
        );
    }
}

/// Every name, on every conversation, with and without the generation
/// prompt, as llama.cpp's renderer.
#[test]
fn every_name_as_llamacpp_renders() {
    let d = data("renderings.json");
    let convs = &d["conversations"];
    let mut failures = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for r in d["renderings"].as_array().unwrap() {
        let name = r["template"].as_str().unwrap();
        let b = Builtin::from_name(name).unwrap_or_else(|| panic!("no built-in '{name}'"));
        let conv = r["conversation"].as_str().unwrap();
        let agp = r["add_generation_prompt"].as_bool().unwrap();
        let got = b.render(&messages(&convs[conv]), agp);
        let want = r["output"].as_str().unwrap();
        if got != want {
            failures.push(format!(
                "{name} on {conv} (generation prompt {agp}):\n   got {got:?}\n  want {want:?}"
            ));
        }
        seen.insert(name);
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert_eq!(
        seen.len(),
        Builtin::all().count(),
        "every name has renderings"
    );
}
