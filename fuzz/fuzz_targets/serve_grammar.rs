//! Structured output: any `response_format` / JSON schema, compiled for a
//! byte-level vocabulary, then a walk taking the first allowed token.
//! Errors are fine; panics and hangs are not.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;
use strata_models::tokenizer::{Tokenizer, TokenizerParts};
use strata_serve::grammar::{self, GrammarTokenizer};

fn byte_char(b: u8) -> char {
    let printable = |x: u8| (b'!'..=b'~').contains(&x) || (0xa1..=0xac).contains(&x) || x >= 0xae;
    if printable(b) {
        return char::from(b);
    }
    let n = (0..b).filter(|&x| !printable(x)).count() as u32;
    char::from_u32(0x100 + n).unwrap_or('?')
}

fn tokenizer() -> &'static GrammarTokenizer {
    static T: OnceLock<GrammarTokenizer> = OnceLock::new();
    T.get_or_init(|| {
        let mut tokens: Vec<String> = (0..=255u8).map(|b| byte_char(b).to_string()).collect();
        tokens.push("<|endoftext|>".into());
        let mut types = vec![1i32; 256];
        types.push(3);
        let tok = Tokenizer::from_parts(TokenizerParts {
            model: "gpt2".into(),
            pre: "default".into(),
            tokens,
            token_types: types,
            eos_id: Some(256),
            ..TokenizerParts::default()
        })
        .unwrap();
        GrammarTokenizer::new(&tok).unwrap()
    })
}

fuzz_target!(|data: &[u8]| {
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(data) else {
        return;
    };
    let spec = match grammar::from_response_format(&v) {
        Ok(Some(s)) => s,
        Ok(None) => return,
        // a bare schema, as Ollama's `format` sends it
        Err(_) => grammar::GrammarSpec::JsonSchema(v),
    };
    let Ok(mut c) = tokenizer().constraint(&spec) else {
        return;
    };
    for _ in 0..64 {
        if c.is_finished() {
            break;
        }
        let Ok(mask) = c.allowed() else { break };
        let Some(t) = mask.iter().next() else { break };
        if c.accept(t).is_err() {
            break;
        }
    }
});
