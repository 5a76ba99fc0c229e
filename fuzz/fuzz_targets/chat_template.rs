//! cargo-fuzz target for chat templates (they come from GGUF metadata, so
//! they are untrusted input): any source must compile and render to text or
//! to `ModelError::Template`, never panic, overflow the stack or allocate
//! past the guard's limits (libFuzzer's `-rss_limit_mb` catches the last).
//!
//! `cargo +nightly fuzz run chat_template fuzz/corpus/chat_template -- -max_total_time=60 -rss_limit_mb=1024`
#![no_main]

use libfuzzer_sys::fuzz_target;
use strata_models::chat::{ChatTemplate, Message};
use strata_models::ModelError;

fuzz_target!(|data: &[u8]| {
    let source = String::from_utf8_lossy(data);
    let t = match ChatTemplate::named("fuzz-input", &source, "<s>", "</s>") {
        Ok(t) => t,
        Err(ModelError::Template { .. }) => return,
        Err(e) => panic!("unexpected error kind: {e}"),
    };
    let messages = [
        Message::new("system", "You are helpful."),
        Message::new("user", "Hi {{ there }} {% if %}"),
        Message::new("assistant", "Hello."),
    ];
    for add in [false, true] {
        match t.render(&messages, add) {
            Ok(_) | Err(ModelError::Template { .. }) => {}
            Err(e) => panic!("unexpected error kind: {e}"),
        }
    }
});
