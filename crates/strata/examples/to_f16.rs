//! Rewrites a GGUF model with every quantized weight dequantized to F16
//! (or BF16 / F32 with a third argument), metadata unchanged except
//! `general.file_type`; F32 tensors (norms) stay F32.
//!
//! `cargo run --release -p strata --example to_f16 -- in.gguf out.gguf [f16|bf16|f32]`

use strata::gguf::{GgufFile, GgufWriter};
use strata::{quant, DType};

fn main() -> strata::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 3 {
        eprintln!("usage: to_f16 IN.gguf OUT.gguf [f16|bf16|f32]");
        std::process::exit(2);
    }
    let (to, file_type) = match args.get(3).map(String::as_str).unwrap_or("f16") {
        "f16" => (DType::F16, 1u32),
        "bf16" => (DType::BF16, 32),
        "f32" => (DType::F32, 0),
        t => panic!("unknown type {t}"),
    };
    let f = GgufFile::open(&args[1])?;
    let mut w = GgufWriter::new();
    for (k, v) in f.metadata().iter() {
        if k == "general.alignment" {
            continue;
        }
        let v = if k == "general.file_type" {
            file_type.into()
        } else {
            v.clone()
        };
        w.add_metadata(k, v)?;
    }
    for t in f.tensors() {
        let data = f.tensor_data(t);
        if !t.dtype().is_quantized() && t.dtype() != DType::F16 && t.dtype() != DType::BF16 {
            w.add_tensor(t.name(), t.dtype(), t.dims(), data.to_vec())?;
            continue;
        }
        let n = t.n_elements();
        let mut vals = vec![0f32; n];
        let row = t.dims()[0];
        let src_row = t.dtype().row_size(row);
        for (s, d) in data.chunks_exact(src_row).zip(vals.chunks_exact_mut(row)) {
            quant::dequantize_row(t.dtype(), s, d)?;
        }
        let mut out = vec![0u8; to.row_size(row) * (n / row)];
        for (s, d) in vals
            .chunks_exact(row)
            .zip(out.chunks_exact_mut(to.row_size(row)))
        {
            quant::quantize_row(to, s, d)?;
        }
        w.add_tensor(t.name(), to, t.dims(), out)?;
    }
    w.write_to_path(&args[2])
}
