//! `strata inspect FILE`: metadata and tensors of a GGUF file, its file
//! type by llama.cpp's name and the number of tensors of each type.

use std::path::PathBuf;

use strata::gguf::{GgufFile, Value};
use strata::DType;

/// Arguments of `strata inspect`.
#[derive(clap::Args)]
pub struct Args {
    /// The GGUF file.
    pub file: PathBuf,
    /// Also list every tensor.
    #[arg(long)]
    pub tensors: bool,
}

fn short(v: &Value) -> String {
    let s = format!("{v:?}");
    if s.len() > 100 {
        format!(
            "{}… ({} chars)",
            &s[..s.char_indices().nth(97).map_or(s.len(), |(i, _)| i)],
            s.len()
        )
    } else {
        s
    }
}

/// Prints the file; exit code 0.
pub fn run(a: Args) -> strata::Result<i32> {
    let f = GgufFile::open(&a.file)?;
    println!(
        "{}: GGUF v{}, alignment {}, {} metadata keys, {} tensors",
        a.file.display(),
        f.version(),
        f.alignment(),
        f.metadata().len(),
        f.tensors().len()
    );
    match f
        .metadata()
        .get("general.file_type")
        .and_then(Value::to_u64)
    {
        Some(id) => {
            let name = u32::try_from(id)
                .map(strata_models::quantize::file_type_name)
                .unwrap_or_else(|_| "unknown, may not work".to_string());
            println!("file type: {name} (general.file_type = {id})");
        }
        None => println!("file type: not recorded (no general.file_type)"),
    }
    let counts: Vec<String> = DType::ALL
        .iter()
        .filter_map(|&t| {
            let n = f.tensors().iter().filter(|x| x.dtype() == t).count();
            (n > 0).then(|| format!("{n} {t}"))
        })
        .collect();
    println!("tensor types: {}", counts.join(", "));
    for (k, v) in f.metadata().iter() {
        println!("  {k} = {}", short(v));
    }
    let total: usize = f.tensors().iter().map(|t| t.size()).sum();
    println!("tensor data: {:.2} MiB", total as f64 / (1 << 20) as f64);
    if a.tensors {
        for t in f.tensors() {
            println!(
                "  {:<32} {:>5} {:?} {} bytes",
                t.name(),
                t.dtype().name(),
                t.dims(),
                t.size()
            );
        }
    }
    Ok(0)
}
