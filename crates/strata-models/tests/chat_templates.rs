//! The families' own chat templates (llama.cpp's copies in
//! `tests/data/chat/templates/`: Llama 3.1, Qwen 2.5, Qwen 3, Gemma 2,
//! Phi-3.5) rendered by strata's [`ChatTemplate`] byte-identical to Python
//! jinja2 configured as Hugging Face transformers renders them
//! (`tests/data/chat/goldens.json`, made by
//! `scripts/chat_template_goldens.py`), for a few conversations with and
//! without the generation prompt; a template's `raise_exception` and a
//! malformed template are typed errors naming the template.

mod support;

use std::path::PathBuf;

use serde_json::Value;
use strata_models::chat::{ChatTemplate, Message};
use strata_models::ModelError;
use support::messages;

fn data_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/chat")
}

fn goldens() -> Value {
    serde_json::from_slice(&std::fs::read(data_dir().join("goldens.json")).unwrap()).unwrap()
}

fn template(stem: &str, t: &Value) -> ChatTemplate {
    let path = data_dir().join(format!("templates/{stem}.jinja"));
    let source = std::fs::read_to_string(&path).unwrap();
    ChatTemplate::named(
        stem,
        &source,
        t["bos_token"].as_str().unwrap(),
        t["eos_token"].as_str().unwrap(),
    )
    .unwrap_or_else(|e| panic!("{stem}: {e}"))
}

#[test]
fn family_templates_render_like_transformers() {
    let g = goldens();
    let mut failures = Vec::new();
    let mut n = 0;
    for (stem, t) in g["templates"].as_object().unwrap() {
        let tmpl = template(stem, t);
        for (case, want) in t["cases"].as_object().unwrap() {
            let (conv, gen) = case.rsplit_once('.').unwrap();
            let msgs = messages(&g["conversations"][conv]);
            let got = tmpl.render(&msgs, gen == "gen");
            n += 1;
            match (got, want.get("text"), want.get("error")) {
                (Ok(text), Some(w), _) if text == w.as_str().unwrap() => {}
                (Ok(text), Some(w), _) => failures.push(format!(
                    "{stem} {case}:\n   got {text:?}\n  want {:?}",
                    w.as_str().unwrap()
                )),
                (Err(ModelError::Template { name, msg }), None, Some(w))
                    if name == *stem && msg.contains(w.as_str().unwrap()) => {}
                (got, _, _) => failures.push(format!("{stem} {case}: {got:?}, want {want}")),
            }
        }
    }
    assert_eq!(n, 5 * 4 * 2);
    assert!(
        failures.is_empty(),
        "{} of {n} renderings differ from transformers:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn gemma_refuses_a_system_message_naming_the_template() {
    let g = goldens();
    let stem = "google-gemma-2-2b-it";
    let tmpl = template(stem, &g["templates"][stem]);
    let e = tmpl
        .render(
            &[Message::new("system", "x"), Message::new("user", "y")],
            true,
        )
        .unwrap_err();
    assert!(
        matches!(&e, ModelError::Template { name, msg } if name == stem
            && msg.contains("System role not supported")),
        "{e:?}"
    );
    assert!(e.to_string().contains(stem), "{e}");
}

#[test]
fn malformed_templates_are_typed_errors_naming_the_template() {
    for src in [
        "{% for m in messages %}{{ m.content }}",
        "{{ messages[0].content ",
        "{% if %}x{% endif %}",
        "{{ 'a'.nosuchmethod() }}",
    ] {
        let r = ChatTemplate::named("broken.jinja", src, "", "")
            .and_then(|t| t.render(&[Message::new("user", "hi")], true));
        match r {
            Err(ModelError::Template { name, .. }) => assert_eq!(name, "broken.jinja", "{src}"),
            other => panic!("{src}: {other:?}"),
        }
    }
}
