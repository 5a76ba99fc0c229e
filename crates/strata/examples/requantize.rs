//! Requantizes a GGUF model's quantized matrices to another block type
//! (through f32), e.g. to make Q4_0 / Q8_0 variants of a Q4_1 model for
//! benchmarks: `cargo run --release -p strata --example requantize -- IN OUT q4_0`.
//!
//! Every quantized tensor except `token_embd.weight` is dequantized and
//! quantized to the target type; other tensors and all metadata are copied
//! (`general.file_type` is updated).

use strata::gguf::{GgufFile, GgufWriter, Value};
use strata::{quant, DType};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let [_, input, output, ty] = &args[..] else {
        return Err(
            "usage: requantize IN.gguf OUT.gguf TYPE (q4_0, q4_1, q5_0, q5_1, q8_0)".into(),
        );
    };
    let target = DType::from_name(ty).ok_or("unknown type")?;
    let file_type: u32 = match target {
        DType::Q4_0 => 2,
        DType::Q4_1 => 3,
        DType::Q5_0 => 8,
        DType::Q5_1 => 9,
        DType::Q8_0 => 7,
        _ => return Err("target must be a block type".into()),
    };
    let f = GgufFile::open(input)?;
    let mut w = GgufWriter::new();
    for (k, v) in f.metadata().iter() {
        if k == "general.alignment" {
            continue;
        }
        let v = if k == "general.file_type" {
            Value::from(file_type)
        } else {
            v.clone()
        };
        w.add_metadata(k, v)?;
    }
    let mut datas = Vec::new();
    for t in f.tensors() {
        let data = f.tensor_data(t);
        let keep = !t.dtype().is_quantized() || t.name() == "token_embd.weight";
        if keep {
            datas.push((t, t.dtype(), data.to_vec()));
            continue;
        }
        let n = t.n_elements();
        let mut x = vec![0f32; n];
        let k = t.shape()[0];
        let rows = n / k;
        let rs_in = t.dtype().row_size(k);
        let rs_out = target.row_size(k);
        let mut out = vec![0u8; rs_out * rows];
        for r in 0..rows {
            let xr = &mut x[r * k..(r + 1) * k];
            quant::dequantize_row(t.dtype(), &data[r * rs_in..(r + 1) * rs_in], xr)?;
            quant::quantize_row(target, xr, &mut out[r * rs_out..(r + 1) * rs_out])?;
        }
        datas.push((t, target, out));
    }
    for (t, dt, data) in &datas {
        w.add_tensor(t.name(), *dt, t.dims(), data.as_slice())?;
    }
    w.write_to_path(output)?;
    println!("wrote {output}");
    Ok(())
}
