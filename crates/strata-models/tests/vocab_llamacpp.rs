//! llama.cpp's own tokenizer test cases (`tests/test-tokenizer-0.cpp` over
//! `models/ggml-vocab-NAME.gguf` + `.gguf.inp` / `.gguf.out`) replayed
//! against strata's tokenizer: for each vocabulary the families ship
//! (Llama 3's `llama-bpe`, `qwen2`, Phi-3's SentencePiece `phi-3`, Llama 2's
//! `llama-spm`), every input must give exactly llama.cpp's ids (tokenized
//! as the C++ test does: no BOS/EOS added, special tokens not parsed).
//!
//! The `.inp` / `.out` files are committed (`tests/data/vocab/`, see its
//! README); the vocab-only GGUFs (0.7–8 MB) are not: `.ci/fetch-models.sh`
//! extracts them from the PyPI sdist `llama-cpp-python==0.3.36` into
//! `~/.cache/strata/vocab/` (or `$STRATA_VOCAB_DIR`). Without them the
//! test prints why it skipped and passes, unless `STRATA_REQUIRE_MODEL=1`.

use std::path::PathBuf;

use strata::gguf::GgufFile;
use strata_models::Tokenizer;

/// The vocabularies compared, with the tokenizer model each has.
const VOCABS: [&str; 4] = ["llama-bpe", "qwen2", "phi-3", "llama-spm"];

fn vocab_dir() -> PathBuf {
    if let Some(p) = std::env::var_os("STRATA_VOCAB_DIR") {
        return PathBuf::from(p);
    }
    let home = std::env::var_os("HOME").unwrap_or_default();
    PathBuf::from(home).join(".cache/strata/vocab")
}

fn data_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/vocab")
}

/// The tokenizer of `ggml-vocab-NAME.gguf`, or `None` (skipped) when the
/// file is missing and `STRATA_REQUIRE_MODEL` is not 1.
fn load(name: &str) -> Option<Tokenizer> {
    let path = vocab_dir().join(format!("ggml-vocab-{name}.gguf"));
    if !path.exists() {
        let msg = format!(
            "SKIPPED: {} not found (run .ci/fetch-models.sh or set STRATA_VOCAB_DIR); \
             the {name} tokenizer cases did not run",
            path.display()
        );
        if std::env::var("STRATA_REQUIRE_MODEL").is_ok_and(|v| v == "1") {
            panic!("{msg} (STRATA_REQUIRE_MODEL=1)");
        }
        eprintln!("{msg}");
        return None;
    }
    let file = GgufFile::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    Some(
        strata_models::gguf::tokenizer(&file)
            .unwrap_or_else(|e| panic!("{}: tokenizer: {e}", path.display())),
    )
}

/// The cases of `NAME.gguf.inp` / `.out` as test-tokenizer-0.cpp reads
/// them: inputs separated by `\n__ggml_vocab_test__\n` (the file ends
/// with one), one line of space-separated ids per input.
fn cases(name: &str) -> Vec<(String, Vec<u32>)> {
    let read = |ext: &str| {
        let p = data_dir().join(format!("ggml-vocab-{name}.gguf.{ext}"));
        std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
    };
    let (inp, out) = (read("inp"), read("out"));
    let sep = "\n__ggml_vocab_test__\n";
    // as the C++ reader: nothing after a final separator is a case
    let inp = inp.strip_suffix(sep).unwrap_or(&inp);
    let inputs: Vec<&str> = inp.split(sep).collect();
    let outputs: Vec<Vec<u32>> = out
        .lines()
        .map(|l| l.split_whitespace().map(|t| t.parse().unwrap()).collect())
        .collect();
    assert_eq!(
        inputs.len(),
        outputs.len(),
        "{name}: .inp and .out disagree"
    );
    inputs.into_iter().map(String::from).zip(outputs).collect()
}

fn check(name: &str) {
    let Some(tok) = load(name) else { return };
    let cases = cases(name);
    assert!(cases.len() > 30, "{name}: only {} cases", cases.len());
    let mut failures = Vec::new();
    for (text, want) in &cases {
        match tok.encode(text, false, false) {
            Ok(got) if got == *want => {}
            Ok(got) => failures.push(format!("{text:?}\n   got {got:?}\n  want {want:?}")),
            Err(e) => failures.push(format!("{text:?}: {e}")),
        }
    }
    println!("{name}: {} cases, {} differ", cases.len(), failures.len());
    assert!(
        failures.is_empty(),
        "{name}: {} of {} cases differ from llama.cpp:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

/// One test per vocabulary, so that each passes or fails on its own.
macro_rules! vocab_tests {
    ($($test:ident => $vocab:expr),* $(,)?) => {
        $(
            #[test]
            fn $test() {
                check($vocab);
            }
        )*
    };
}

vocab_tests! {
    llama_bpe_ids_match_llamacpp => VOCABS[0],
    qwen2_ids_match_llamacpp => VOCABS[1],
    phi3_ids_match_llamacpp => VOCABS[2],
    llama_spm_ids_match_llamacpp => VOCABS[3],
}
