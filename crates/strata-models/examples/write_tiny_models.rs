//! Writes the tests' tiny random-weight models (every family; the generator
//! in `tests/support/tiny_models.rs`) as `DIR/NAME.gguf`, for running
//! llama.cpp on them (`scripts/llamacpp_family_goldens.sh`). Prints each
//! model's name and FNV-1a 64 hash (recorded in the golden manifest).
//!
//!     cargo run -p strata-models --example write_tiny_models -- DIR

#[path = "../tests/support/tiny_models.rs"]
mod tiny_models;

fn main() -> std::io::Result<()> {
    let Some(dir) = std::env::args_os().nth(1) else {
        eprintln!("usage: write_tiny_models DIR");
        std::process::exit(2);
    };
    let dir = std::path::PathBuf::from(dir);
    std::fs::create_dir_all(&dir)?;
    for cfg in tiny_models::golden_configs() {
        let (bytes, _) = tiny_models::write(&cfg);
        let path = dir.join(format!("{}.gguf", cfg.name));
        std::fs::write(&path, &bytes)?;
        println!("{} {:016x}", cfg.name, tiny_models::fnv1a64(&bytes));
    }
    Ok(())
}
