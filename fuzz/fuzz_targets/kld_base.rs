//! cargo-fuzz target for KL-divergence base files (llama.cpp's
//! `--kl-divergence-base` layout and strata's top-k layout): any input must
//! read to rows or to `ModelError::LogitsFile`, never panic or allocate more
//! than the input's size allows, and every row read must compare against
//! logits of the header's vocabulary.
//!
//! `cargo +nightly fuzz run kld_base fuzz/corpus/kld_base -- -max_total_time=60`
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::path::Path;
use strata_models::kld::{compare, BaseReader};
use strata_models::ModelError;

fuzz_target!(|data: &[u8]| {
    let name = Path::new("fuzz-input");
    let mut r = match BaseReader::from_reader(name, data, data.len() as u64) {
        Ok(r) => r,
        Err(ModelError::LogitsFile { .. }) => return,
        Err(e) => panic!("unexpected error kind: {e}"),
    };
    let h = r.header().clone();
    assert_eq!(h.tokens.len(), h.n_ctx * h.n_chunk);
    let logits: Vec<f32> = (0..h.n_vocab).map(|i| (i % 7) as f32).collect();
    let mut chunk = 0;
    loop {
        match r.next_chunk() {
            Ok(Some(rows)) => {
                assert_eq!(rows.len(), h.scored_per_chunk());
                let toks = h.chunk_tokens(chunk);
                for (j, row) in rows.iter().enumerate() {
                    let target = toks[h.first() + j + 1] as usize;
                    // NaN/inf log-probabilities give NaN statistics, not a panic
                    let _ = compare(row, &logits, target).expect("rows fit the header");
                }
                chunk += 1;
            }
            Ok(None) => break,
            Err(ModelError::LogitsFile { .. }) => break,
            Err(e) => panic!("unexpected error kind: {e}"),
        }
    }
});
