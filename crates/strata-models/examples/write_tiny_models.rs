//! Writes the tests' tiny random-weight models (every family; the generator
//! in `tests/support/tiny_models.rs`) as `DIR/NAME.gguf`, for running
//! llama.cpp on them (`scripts/llamacpp_family_goldens.sh`). Prints each
//! model's name and FNV-1a 64 hash (recorded in the golden manifest).
//!
//!     cargo run -p strata-models --example write_tiny_models -- DIR
//!
//! With `--bench` it writes instead the models of realistic width that
//! PERFORMANCE.md's family table benchmarks (`tiny_models::bench_configs`):
//!
//!     cargo run --release -p strata-models --example write_tiny_models -- DIR --bench

#[path = "../tests/support/tiny_models.rs"]
mod tiny_models;

fn main() -> std::io::Result<()> {
    let Some(dir) = std::env::args_os().nth(1) else {
        eprintln!("usage: write_tiny_models DIR [--bench]");
        std::process::exit(2);
    };
    let dir = std::path::PathBuf::from(dir);
    std::fs::create_dir_all(&dir)?;
    let bench = std::env::args().nth(2).as_deref() == Some("--bench");
    let configs = if bench {
        tiny_models::bench_configs()
    } else {
        tiny_models::golden_configs()
    };
    for cfg in configs {
        let (bytes, _) = tiny_models::write(&cfg);
        let path = dir.join(format!("{}.gguf", cfg.name));
        std::fs::write(&path, &bytes)?;
        println!("{} {:016x}", cfg.name, tiny_models::fnv1a64(&bytes));
    }
    Ok(())
}
