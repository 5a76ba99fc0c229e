//! Prints a GGUF file's header, metadata (arrays abbreviated) and tensors.
//!
//! `cargo run -p strata --example gguf_dump -- model.gguf`

use strata::gguf::{GgufFile, Value};

fn main() -> strata::Result<()> {
    let Some(path) = std::env::args().nth(1) else {
        eprintln!("usage: gguf_dump FILE.gguf");
        std::process::exit(2);
    };
    let f = GgufFile::open(&path)?;
    println!(
        "{path}: GGUF v{}, alignment {}, data at {}, {} bytes",
        f.version(),
        f.alignment(),
        f.data_offset(),
        f.as_bytes().len()
    );
    println!("{} metadata keys:", f.metadata().len());
    for (k, v) in f.metadata().iter() {
        match v {
            Value::Array(a) => println!("  {k}: array of {} x {}", a.len(), a.elem_type()),
            Value::String(s) if s.len() > 80 => println!("  {k}: string of {} bytes", s.len()),
            v => println!("  {k}: {v:?}"),
        }
    }
    println!("{} tensors:", f.tensors().len());
    for t in f.tensors() {
        println!(
            "  {:<32} {:<5} {:?} offset {} size {}",
            t.name(),
            t.dtype().name(),
            t.dims(),
            t.offset(),
            t.size()
        );
    }
    Ok(())
}
