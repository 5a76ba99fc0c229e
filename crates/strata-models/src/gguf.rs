//! Reading model pieces out of a GGUF file: the tokenizer (`tokenizer.ggml.*`)
//! and the chat template. Weights and hyperparameters are in [`crate::model`].

use strata::gguf::{Array, GgufFile, Value};

use crate::error::meta;
use crate::tokenizer::{Tokenizer, TokenizerParts};
use crate::Result;

fn opt_u32(f: &GgufFile, key: &str) -> Result<Option<u32>> {
    match f.metadata().get(key) {
        None => Ok(None),
        Some(v) => v
            .to_u64()
            .and_then(|x| u32::try_from(x).ok())
            .map(Some)
            .ok_or_else(|| meta(key, "expected a token id (unsigned integer)")),
    }
}

fn opt_bool(f: &GgufFile, key: &str) -> Result<Option<bool>> {
    match f.metadata().get(key) {
        None => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(_) => Err(meta(key, "expected a bool")),
    }
}

fn strings(f: &GgufFile, key: &str, required: bool) -> Result<Vec<String>> {
    match f.metadata().get(key) {
        None if !required => Ok(Vec::new()),
        None => Err(meta(key, "missing")),
        Some(Value::Array(Array::String(v))) => Ok(v.clone()),
        Some(_) => Err(meta(key, "expected an array of strings")),
    }
}

/// The `tokenizer.ggml.*` metadata of `f` as [`TokenizerParts`].
pub fn tokenizer_parts(f: &GgufFile) -> Result<TokenizerParts> {
    let m = f.metadata();
    let key = |k: &str| format!("tokenizer.ggml.{k}");
    let model = m
        .get_str(&key("model"))
        .map_err(|_| meta(&key("model"), "missing (not a model with a tokenizer?)"))?
        .to_string();
    let pre = m.get_str(&key("pre")).unwrap_or("default").to_string();
    let token_types = match m.get(&key("token_type")) {
        None => Vec::new(),
        Some(Value::Array(Array::I32(v))) => v.clone(),
        Some(Value::Array(Array::U32(v))) => v.iter().map(|&x| x as i32).collect(),
        Some(_) => return Err(meta(&key("token_type"), "expected an array of i32")),
    };
    let scores = match m.get(&key("scores")) {
        None => None,
        Some(Value::Array(Array::F32(v))) => Some(v.clone()),
        Some(_) => return Err(meta(&key("scores"), "expected an array of f32")),
    };
    Ok(TokenizerParts {
        model,
        pre,
        tokens: strings(f, &key("tokens"), true)?,
        token_types,
        merges: strings(f, &key("merges"), false)?,
        scores,
        bos_id: opt_u32(f, &key("bos_token_id"))?,
        eos_id: opt_u32(f, &key("eos_token_id"))?,
        eot_id: opt_u32(f, &key("eot_token_id"))?,
        unk_id: opt_u32(f, &key("unknown_token_id"))?,
        pad_id: opt_u32(f, &key("padding_token_id"))?,
        add_bos: opt_bool(f, &key("add_bos_token"))?,
        add_eos: opt_bool(f, &key("add_eos_token"))?,
        add_space_prefix: opt_bool(f, &key("add_space_prefix"))?,
        model_name: m.get_str("general.name").unwrap_or_default().to_string(),
    })
}

/// The tokenizer stored in `f`.
pub fn tokenizer(f: &GgufFile) -> Result<Tokenizer> {
    Ok(Tokenizer::from_parts(tokenizer_parts(f)?)?)
}

/// The chat template (`tokenizer.chat_template`), if the file has one.
pub fn chat_template(f: &GgufFile) -> Option<String> {
    f.metadata()
        .get_str("tokenizer.chat_template")
        .ok()
        .map(str::to_string)
}
