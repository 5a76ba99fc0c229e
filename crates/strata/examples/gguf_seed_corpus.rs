//! Writes the cargo-fuzz seed corpus for `fuzz/fuzz_targets/gguf_reader.rs`.
//!
//! `cargo run -p strata --example gguf_seed_corpus -- fuzz/corpus/gguf_reader`

#[path = "../tests/common/gguf_seeds.rs"]
mod gguf_seeds;

fn main() -> std::io::Result<()> {
    let dir = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "fuzz/corpus/gguf_reader".into());
    std::fs::create_dir_all(&dir)?;
    for (name, bytes) in gguf_seeds::seeds() {
        // No ".gguf" extension: the repository ignores *.gguf (model files).
        let path = std::path::Path::new(&dir).join(format!("seed-{name}"));
        std::fs::write(&path, &bytes)?;
        println!("{} ({} bytes)", path.display(), bytes.len());
    }
    Ok(())
}
