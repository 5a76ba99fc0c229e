//! `--chat-template NAME|FILE` and `--chat-template-file FILE` for `strata
//! chat` and `run --chat` (issue #47), on a tiny writer-made llama whose
//! vocabulary holds every byte (GPT-2's byte alphabet), so any rendered
//! prompt tokenizes: the chatml fallback with one warning at start for a
//! model without a template, built-in names rendered as llama.cpp does,
//! template errors (unknown name, unreadable or malformed file, a template
//! failing on the test conversation) before the first prompt, and a chat
//! that goes on after an error in one turn.

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use strata::gguf::Value;

/// GPT-2's byte-to-character alphabet (`bytes_to_unicode`): the token text
/// of each byte.
fn byte_alphabet() -> Vec<String> {
    let mut bs: Vec<u32> = (u32::from(b'!')..=u32::from(b'~'))
        .chain(0xa1..=0xac)
        .chain(0xae..=0xff)
        .collect();
    let mut cs = bs.clone();
    let mut n = 0;
    for b in 0..256 {
        if !bs.contains(&b) {
            bs.push(b);
            cs.push(256 + n);
            n += 1;
        }
    }
    let mut pairs: Vec<(u32, u32)> = bs.into_iter().zip(cs).collect();
    pairs.sort_unstable();
    pairs
        .into_iter()
        .map(|(_, c)| char::from_u32(c).unwrap().to_string())
        .collect()
}

/// A tiny random llama whose vocabulary is the byte alphabet, with a
/// 512-token context, saved as `dir/file`, with `template` as its
/// `tokenizer.chat_template` when given.
fn tiny_model(dir: &Path, file: &str, template: Option<&str>) -> PathBuf {
    let mut set = vec![("llama.context_length", Value::U32(512))];
    if let Some(t) = template {
        set.push(("tokenizer.chat_template", t.into()));
    }
    common::tiny_llama(dir, file, byte_alphabet(), &set)
}

struct TempDir(PathBuf);
impl TempDir {
    fn new(tag: &str) -> TempDir {
        let dir =
            std::env::temp_dir().join(format!("strata-cli-tmpl-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}
impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn strata(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_strata"))
        .args(args)
        .output()
        .expect("run strata")
}

/// `strata chat` with `input` on stdin.
fn chat(args: &[&str], input: &str) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_strata"))
        .arg("chat")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run strata chat");
    // the process may have ended (an error at start) before reading it
    let _ = child.stdin.take().unwrap().write_all(input.as_bytes());
    child.wait_with_output().unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `run --chat` greedy, one token: its stdout begins with the rendered prompt.
fn run_chat(m: &str, extra: &[&str]) -> Output {
    let base = [
        "run", "-m", m, "-p", "hello", "-n", "1", "-c", "256", "-t", "1", "--temp", "0", "--chat",
    ];
    strata(&[&base[..], extra].concat())
}

fn ok_stdout(o: &Output) -> String {
    assert!(o.status.success(), "strata failed: {}", text(&o.stderr));
    text(&o.stdout)
}

const WARNING: &str = "the model has no chat template";

/// A model without a template: chatml, as llama.cpp, and a warning printed
/// once, before the first prompt; a named template replaces the fallback
/// without the warning.
#[test]
fn no_template_falls_back_to_chatml_with_one_warning() {
    let dir = TempDir::new("fallback");
    let model = tiny_model(&dir.0, "bare.gguf", None);
    let m = model.to_str().unwrap();

    let o = run_chat(m, &[]);
    assert!(
        ok_stdout(&o).starts_with("<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n"),
        "{}",
        text(&o.stdout)
    );
    let err = text(&o.stderr);
    assert_eq!(err.matches(WARNING).count(), 1, "{err}");
    assert!(
        err.contains("chatml") && err.contains("--chat-template"),
        "{err}"
    );

    let o = chat(
        &["-m", m, "-n", "2", "-c", "256", "-t", "1", "--temp", "0"],
        "hello\nagain\n",
    );
    let err = text(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert_eq!(err.matches(WARNING).count(), 1, "{err}");
    let warned = err.find(WARNING).unwrap();
    let first_prompt = err.find("> ").expect("a prompt");
    assert!(warned < first_prompt, "the warning comes first: {err}");
    assert_eq!(err.matches("tokens/s]").count(), 2, "two answers: {err}");

    let o = run_chat(m, &["--chat-template", "zephyr"]);
    assert!(
        ok_stdout(&o).starts_with("<|user|>\nhello<|endoftext|>\n<|assistant|>\n"),
        "{}",
        text(&o.stdout)
    );
    assert!(!text(&o.stderr).contains(WARNING));
}

/// Built-in names render as llama.cpp's formats, in place of the model's
/// own template.
#[test]
fn builtin_names_replace_the_model_template() {
    let dir = TempDir::new("names");
    let model = tiny_model(&dir.0, "own.gguf", Some("OWN {{ messages[0].content }}"));
    let m = model.to_str().unwrap();
    assert!(ok_stdout(&run_chat(m, &[])).starts_with("OWN hello"));
    for (name, want) in [
        (
            "llama3",
            "<|start_header_id|>user<|end_header_id|>\n\nhello<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
        ),
        ("gemma", "<start_of_turn>user\nhello<end_of_turn>\n<start_of_turn>model\n"),
        ("llama2", "[INST] hello [/INST]"),
        ("mistral-v7", "[INST] hello[/INST]"),
        ("phi3", "<|user|>\nhello<|end|>\n<|assistant|>\n"),
        ("chatml", "<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n"),
    ] {
        let o = run_chat(m, &["--chat-template", name]);
        let out = ok_stdout(&o);
        assert!(out.starts_with(want), "{name}: {out:?}");
        assert!(!text(&o.stderr).contains(WARNING), "{name}");
    }
    // the system prompt goes through the built-in too (gemma merges it)
    let o = chat(
        &[
            "-m",
            m,
            "-n",
            "1",
            "-c",
            "256",
            "-t",
            "1",
            "--temp",
            "0",
            "--chat-template",
            "gemma",
            "--system",
            "Be brief.",
        ],
        "hi\n",
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
}

/// Template errors come at start, before the first prompt, naming the
/// template and what to do: an unknown name, a missing or malformed file, a
/// model template that does not parse, one that fails on the test
/// conversation; and the flags need `--chat` on `run`.
#[test]
fn template_errors_come_at_start() {
    let dir = TempDir::new("errors");
    let model = tiny_model(&dir.0, "bare.gguf", None);
    let m = model.to_str().unwrap();
    let args = |extra: &[&str]| -> Vec<String> {
        ["-m", m, "-n", "1", "-c", "256", "-t", "1"]
            .iter()
            .chain(extra)
            .map(|s| s.to_string())
            .collect()
    };
    let start_error = |o: &Output, says: &[&str]| {
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{err}");
        assert!(!err.contains("> "), "no prompt before the error: {err}");
        for s in says {
            assert!(err.contains(s), "{s:?} not in: {err}");
        }
        assert!(!err.contains("panicked"), "{err}");
    };

    let unknown = args(&["--chat-template", "llama-9"]);
    let unknown: Vec<&str> = unknown.iter().map(String::as_str).collect();
    start_error(
        &chat(&unknown, "hello\n"),
        &[
            "--chat-template 'llama-9'",
            "built-in",
            "chatml, command-r",
            "zephyr",
        ],
    );
    start_error(
        &strata(&[&["run", "-p", "hi", "--chat"], &unknown[..]].concat()),
        &["--chat-template 'llama-9'"],
    );
    // the flags only with --chat
    let o = strata(&["run", "-m", m, "-p", "hi", "--chat-template", "chatml"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        text(&o.stderr).contains("add --chat"),
        "{}",
        text(&o.stderr)
    );
    // not both
    let o = strata(&[
        "chat",
        "-m",
        m,
        "--chat-template",
        "chatml",
        "--chat-template-file",
        "x",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));

    let missing = dir.0.join("missing.jinja");
    let missing = missing.to_str().unwrap();
    start_error(
        &chat(&["-m", m, "--chat-template-file", missing], "hello\n"),
        &["missing.jinja", "cannot be read"],
    );
    let broken = dir.0.join("broken.jinja");
    std::fs::write(&broken, "{% for m in messages %}{{ m.content }}").unwrap();
    start_error(
        &chat(
            &["-m", m, "--chat-template", broken.to_str().unwrap()],
            "hello\n",
        ),
        &["broken.jinja", "fix the file"],
    );

    let bad_model = tiny_model(&dir.0, "bad.gguf", Some("{% if %}"));
    start_error(
        &chat(&["-m", bad_model.to_str().unwrap()], "hello\n"),
        &["tokenizer.chat_template", "--chat-template"],
    );
    let no_system = tiny_model(
        &dir.0,
        "nosys.gguf",
        Some("{% if messages[0].role == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}{{ messages[-1].content }}"),
    );
    start_error(
        &chat(
            &["-m", no_system.to_str().unwrap(), "--system", "Be brief."],
            "hello\n",
        ),
        &[
            "tokenizer.chat_template",
            "System role not supported",
            "test conversation",
        ],
    );
}

/// A temporary directory `name` holding a tiny model without a template
/// and the Jinja file `template.jinja` holding `template`; returns the
/// directory (removed on drop), the model's path and the file's.
fn bare_model_and_template(name: &str, template: &str) -> (TempDir, String, String) {
    let dir = TempDir::new(name);
    let model = tiny_model(&dir.0, "bare.gguf", None);
    let file = dir.0.join("template.jinja");
    std::fs::write(&file, template).unwrap();
    let path = |p: PathBuf| p.into_os_string().into_string().unwrap();
    (dir, path(model), path(file))
}

/// A Jinja file works through both flags, with the model's BOS text.
#[test]
fn file_templates_work() {
    let (_dir, m, f) = bare_model_and_template(
        "file",
        "{% for m in messages %}[{{ m.role }}:{{ m.content }}]{% endfor %}{% if add_generation_prompt %}>{% endif %}",
    );
    let (m, f) = (m.as_str(), f.as_str());
    for flag in ["--chat-template", "--chat-template-file"] {
        let o = run_chat(m, &[flag, f]);
        assert!(
            ok_stdout(&o).starts_with("[user:hello]>"),
            "{flag}: {}",
            text(&o.stdout)
        );
        assert!(!text(&o.stderr).contains(WARNING), "{flag}");
    }
}

/// Errors in one turn (the template raising on a message, a prompt past the
/// context) print and return to the prompt; the chat answers the next
/// message and exits 0.
#[test]
fn chat_goes_on_after_a_failed_turn() {
    let (_dir, m, file) = bare_model_and_template(
        "goes-on",
        "{% for m in messages %}{% if m.content == 'boom' %}{{ raise_exception('no booms here') }}{% endif %}{{ m.role }}: {{ m.content }}\n{% endfor %}assistant:",
    );
    let long = "x".repeat(200);
    let input = format!("hello\nboom\n{long}\nagain\n/exit\nnever read\n");
    let o = chat(
        &[
            "-m",
            &m,
            "-n",
            "3",
            "-c",
            "128",
            "-t",
            "1",
            "--temp",
            "0",
            "--chat-template",
            &file,
        ],
        &input,
    );
    let err = text(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(err.matches("no booms here").count(), 1, "{err}");
    assert_eq!(err.matches("the conversation goes on").count(), 2, "{err}");
    // hello, again answered; five prompts: hello, boom, long, again, /exit
    assert_eq!(err.matches("tokens/s]").count(), 2, "{err}");
    assert_eq!(err.matches("> ").count(), 5, "{err}");
    let boom = err.find("no booms here").unwrap();
    let answers: Vec<usize> = err.match_indices("tokens/s]").map(|(i, _)| i).collect();
    assert!(answers[0] < boom && boom < answers[1], "{err}");
}
