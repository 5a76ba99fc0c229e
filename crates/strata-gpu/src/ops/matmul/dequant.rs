//! The WGSL dequantizers (`shaders/dequant.wgsl`) for the slots of one
//! shader: `dq_sK(row byte, group)` gives 8 consecutive elements of a row of
//! slot K as two vec4s, whatever the slot's type.

use strata::DType;

const SRC: &str = include_str!("../../shaders/dequant.wgsl");

/// The section of the shader file named `name` (between `//@ name` and the
/// next `//@ ` line).
fn section(name: &str) -> &'static str {
    let mut parts = SRC.split("//@ ");
    parts
        .find_map(|p| {
            let (head, body) = p.split_once('\n')?;
            (head.trim() == name).then_some(body)
        })
        .unwrap_or("")
}

/// The shader section of weight type `t`; `None` for types without one.
fn type_section(t: DType) -> Option<&'static str> {
    Some(match t {
        DType::F32 => "f32",
        DType::F16 => "f16",
        DType::BF16 => "bf16",
        DType::Q4_0 => "q4_0",
        DType::Q4_1 => "q4_1",
        DType::Q5_0 => "q5_0",
        DType::Q5_1 => "q5_1",
        DType::Q8_0 => "q8_0",
        DType::Q2_K => "q2_k",
        DType::Q3_K => "q3_k",
        DType::Q4_K => "q4_k",
        DType::Q5_K => "q5_k",
        DType::Q6_K => "q6_k",
        DType::IQ4_NL => "iq4_nl",
        DType::IQ4_XS => "iq4_xs",
        _ => return None,
    })
}

/// Whether `dq_sK` exists for `t`.
pub(crate) fn has(t: DType) -> bool {
    type_section(t).is_some()
}

/// The WGSL defining `dq_sK` for each `(K, type)` of `slots` (types for
/// which [`has`] is true; at most one block-quantized slot).
pub(crate) fn source(slots: &[(usize, DType)]) -> String {
    let mut s = section("common").to_string();
    for &(k, t) in slots {
        let Some(name) = type_section(t) else {
            continue;
        };
        let mut text = String::new();
        if t.is_quantized() {
            text.push_str(section("words"));
            text.push_str(section(name));
            text.push_str(&format!(
                "fn dq_SLOT(row: u32, g: u32) -> V8 {{\n    \
                 return dqb_SLOT(row + (g / {gpb}u) * {ts}u, g % {gpb}u);\n}}\n",
                gpb = t.block_size() / 8,
                ts = t.type_size()
            ));
        } else {
            text.push_str(&section("float").replace("FTY", name));
            text.push_str(section(name));
        }
        s.push_str(
            &text
                .replace("SLOTI", &format!("{k}u"))
                .replace("SLOT", &format!("s{k}")),
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_weight_type_has_its_section() {
        for t in strata::conformance::WEIGHT_TYPES {
            let name = type_section(t).unwrap();
            assert!(section(name).contains("fn dq"), "{name}");
            let src = source(&[(0, t), (1, DType::F32)]);
            assert!(src.contains("fn dq_s0(") && src.contains("fn dq_s1("));
            assert!(!src.contains("SLOT"));
        }
    }
}
