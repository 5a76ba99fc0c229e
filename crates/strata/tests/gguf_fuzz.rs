//! Bounded proptest fuzzing of the GGUF reader, run in CI: mutated valid
//! files (bit flips, truncation, spliced bytes, planted u32/u64 counts) must
//! give `Ok` or `Error::Format`, never a panic; an `Ok` file must be fully
//! walkable. Cases: 512 per property, or `$STRATA_FUZZ_CASES`.
//!
//! The unbounded counterpart is the cargo-fuzz target `fuzz/fuzz_targets/gguf_reader.rs`.

mod common {
    pub mod gguf_seeds;
}

use std::sync::OnceLock;

use proptest::prelude::*;
use proptest::sample::Index;
use strata::gguf::{GgufFile, Value};
use strata::Error;

fn seeds() -> &'static [(&'static str, Vec<u8>)] {
    static SEEDS: OnceLock<Vec<(&'static str, Vec<u8>)>> = OnceLock::new();
    SEEDS.get_or_init(common::gguf_seeds::seeds)
}

fn cases() -> u32 {
    std::env::var("STRATA_FUZZ_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(512)
}

#[derive(Clone, Debug)]
enum Mutation {
    FlipBit(Index, u8),
    Truncate(Index),
    Splice {
        at: Index,
        remove: usize,
        insert: Vec<u8>,
    },
    PutU64 {
        at: Option<Index>,
        value: u64,
    },
    PutU32 {
        at: Index,
        value: u32,
    },
}

fn interesting_u64() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(0u64),
        Just(1),
        Just(u64::MAX),
        Just(u64::MAX / 2 + 1),
        Just(1 << 32),
        Just(u32::MAX as u64),
        0u64..256,
        any::<u64>(),
    ]
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        3 => (any::<Index>(), 0u8..8).prop_map(|(i, b)| Mutation::FlipBit(i, b)),
        1 => any::<Index>().prop_map(Mutation::Truncate),
        2 => (any::<Index>(), 0usize..16, prop::collection::vec(any::<u8>(), 0..16))
            .prop_map(|(at, remove, insert)| Mutation::Splice { at, remove, insert }),
        // `None` plants the value on a header count (tensor_count or kv_count).
        2 => (prop::option::weighted(0.7, any::<Index>()), interesting_u64())
            .prop_map(|(at, value)| Mutation::PutU64 { at, value }),
        1 => (any::<Index>(), prop_oneof![0u32..16, Just(u32::MAX), any::<u32>()])
            .prop_map(|(at, value)| Mutation::PutU32 { at, value }),
    ]
}

fn apply(bytes: &mut Vec<u8>, m: &Mutation, header_pick: bool) {
    if bytes.is_empty() {
        return;
    }
    let n = bytes.len();
    match m {
        Mutation::FlipBit(i, b) => bytes[i.index(n)] ^= 1 << b,
        Mutation::Truncate(i) => bytes.truncate(i.index(n)),
        Mutation::Splice { at, remove, insert } => {
            let at = at.index(n);
            let end = (at + remove).min(n);
            bytes.splice(at..end, insert.iter().copied());
        }
        Mutation::PutU64 { at, value } => {
            let at = match at {
                Some(i) => i.index(n),
                None if header_pick => 8,
                None => 16,
            }
            .min(n);
            let end = (at + 8).min(n);
            bytes[at..end].copy_from_slice(&value.to_le_bytes()[..end - at]);
        }
        Mutation::PutU32 { at, value } => {
            let at = at.index(n);
            let end = (at + 4).min(n);
            bytes[at..end].copy_from_slice(&value.to_le_bytes()[..end - at]);
        }
    }
}

/// Parses `bytes`; an accepted file is walked completely.
fn check(bytes: Vec<u8>) -> Result<(), TestCaseError> {
    let len = bytes.len();
    match GgufFile::from_bytes(bytes) {
        Ok(f) => {
            prop_assert!(f.data_offset() <= len);
            // Aligned, except a file without tensors may end before the padding.
            prop_assert!(
                f.data_offset() % f.alignment() == 0
                    || (f.tensors().is_empty() && f.data_offset() == len)
            );
            for t in f.tensors() {
                let d = f.tensor_data(t);
                prop_assert_eq!(d.len(), t.size());
                prop_assert_eq!(t.offset() % f.alignment(), 0);
                prop_assert!(f.tensor(t.name()).is_some_and(|g| std::ptr::eq(g, t)));
                prop_assert!(t.dims().iter().all(|&x| x > 0));
            }
            for (k, v) in f.metadata().iter() {
                prop_assert!(f.metadata().get(k).is_some_and(|g| std::ptr::eq(g, v)));
                if let Value::Array(a) = v {
                    let _ = (a.len(), a.elem_type());
                }
            }
            Ok(())
        }
        Err(Error::Format { .. }) => Ok(()),
        Err(e) => Err(TestCaseError::fail(format!("unexpected error kind: {e}"))),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn gguf_fuzz_mutated_files_never_panic(
        seed in any::<Index>(),
        mutations in prop::collection::vec(mutation(), 1..5),
        header_pick in any::<bool>(),
    ) {
        let seeds = seeds();
        let mut bytes = seeds[seed.index(seeds.len())].1.clone();
        for m in &mutations {
            apply(&mut bytes, m, header_pick);
        }
        check(bytes)?;
    }

    #[test]
    fn gguf_fuzz_random_bytes_after_header_never_panic(
        version in prop_oneof![Just(2u32), Just(3u32)],
        n_tensors in 0u64..4,
        n_kv in 0u64..4,
        body in prop::collection::vec(any::<u8>(), 0..512),
    ) {
        let mut bytes = b"GGUF".to_vec();
        bytes.extend_from_slice(&version.to_le_bytes());
        bytes.extend_from_slice(&n_tensors.to_le_bytes());
        bytes.extend_from_slice(&n_kv.to_le_bytes());
        bytes.extend_from_slice(&body);
        check(bytes)?;
    }
}

#[test]
fn gguf_fuzz_seeds_are_valid() {
    for (name, bytes) in seeds() {
        let f = GgufFile::from_bytes(bytes.clone())
            .unwrap_or_else(|e| panic!("seed {name} does not parse: {e}"));
        check(bytes.clone()).unwrap();
        assert!(bytes.len() < 2048, "seed {name} should stay tiny");
        let _ = f;
    }
}

#[test]
fn gguf_fuzz_committed_corpus_parses() {
    // The cargo-fuzz seed corpus is made by `examples/gguf_seed_corpus.rs`
    // from the same seeds; it must stay in sync with them.
    let dir =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/gguf_reader");
    for (name, bytes) in seeds() {
        let path = dir.join(format!("seed-{name}"));
        let on_disk = std::fs::read(&path).unwrap_or_else(|e| {
            panic!(
                "{}: {e}: regenerate with the gguf_seed_corpus example",
                path.display()
            )
        });
        assert_eq!(
            &on_disk,
            bytes,
            "{} is stale: regenerate it",
            path.display()
        );
    }
}
