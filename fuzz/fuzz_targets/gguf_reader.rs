//! cargo-fuzz target for the GGUF reader: any input must parse to `Ok` or
//! `Error::Format`, never panic, and an accepted file must be walkable.
//!
//! `cargo +nightly fuzz run gguf_reader fuzz/corpus/gguf_reader -- -max_total_time=60`
#![no_main]

use libfuzzer_sys::fuzz_target;
use strata::gguf::GgufFile;
use strata::Error;

fuzz_target!(|data: &[u8]| {
    match GgufFile::from_bytes(data.to_vec()) {
        Ok(f) => {
            assert!(f.data_offset() <= data.len());
            for t in f.tensors() {
                assert_eq!(f.tensor_data(t).len(), t.size());
                assert_eq!(t.offset() % f.alignment(), 0);
            }
            for (k, v) in f.metadata().iter() {
                assert!(f.metadata().get(k).is_some_and(|g| std::ptr::eq(g, v)));
            }
        }
        Err(Error::Format { .. }) => {}
        Err(e) => panic!("unexpected error kind: {e}"),
    }
});
