//! Conformance cases for mixture-of-experts ops.

use super::*;

/// MUL_MAT_ID for every weight type (rows a multiple of 16, so that the
/// `CPU_PACKED` device packs the legacy quants), with `b` broadcast over the
/// slots and per slot, one token, a prompt's 37 tokens for a few types, and
/// experts routed by ARGSORT as llama.cpp does; ADD_ID; TOP_K.
pub(super) fn moe_cases(v: &mut Vec<OpCase>) {
    // (n_expert, n_used, tokens, b per slot)
    let shapes = [(4, 2, 5, false), (6, 3, 1, true)];
    for a_t in WEIGHT_TYPES {
        let k = a_t.block_size().max(64);
        for (n_exp, n_used, n_tok, per_slot) in shapes {
            let n_b = if per_slot { n_used } else { 1 };
            let tol = if a_t.is_quantized() { 1e-4 } else { 1e-5 };
            v.push(case(
                format!("MUL_MAT_ID(type_a={a_t},n_expert={n_exp},n_used={n_used},n_b={n_b},tokens={n_tok},m=32,k={k})"),
                tol,
                move || {
                    let a = t(a_t, &[k, 32, n_exp])?;
                    let b = t(DType::F32, &[k, n_b, n_tok])?;
                    let ids = t(DType::I32, &[n_used, n_tok])?;
                    let out = ops::mul_mat_id(&a, &b, &ids)?;
                    Ok((vec![(a, U), (b, U), (ids, Fill::Index(n_exp))], out))
                },
            ));
        }
    }
    // prompt sizes: 74 columns over 8 experts, some 9 each (GPUs run these
    // on tiles; M off a 64-row tile, K off a 64-wide step where the block
    // allows)
    for a_t in [DType::F32, DType::Q4_0, DType::Q4_K, DType::Q6_K] {
        let k = if a_t.block_size() == 256 { 256 } else { 96 };
        for n_b in [1, 2] {
            let tol = if a_t.is_quantized() { 1e-4 } else { 1e-5 };
            v.push(case(
                format!(
                    "MUL_MAT_ID(type_a={a_t},n_expert=8,n_used=2,n_b={n_b},tokens=37,m=80,k={k})"
                ),
                tol,
                move || {
                    let a = t(a_t, &[k, 80, 8])?;
                    let b = t(DType::F32, &[k, n_b, 37])?;
                    let ids = t(DType::I32, &[2, 37])?;
                    let out = ops::mul_mat_id(&a, &b, &ids)?;
                    Ok((vec![(a, U), (b, U), (ids, Fill::Index(8))], out))
                },
            ));
        }
    }
    for a_t in [DType::F16, DType::Q4_0] {
        v.push(case(
            format!("MUL_MAT_ID(type_a={a_t},ids=argsort_top_k,n_expert=8,n_used=2,tokens=7)"),
            1e-4,
            move || {
                let a = t(a_t, &[64, 48, 8])?;
                let b = t(DType::F32, &[64, 1, 7])?;
                let logits = t(DType::F32, &[8, 7])?;
                let ids = ops::argsort_top_k(&logits, 2)?;
                let out = ops::mul_mat_id(&a, &b, &ids)?;
                Ok((vec![(a, U), (b, U), (logits, U)], out))
            },
        ));
    }
    v.push(case(
        "ADD_ID(n=16,n_expert=4,n_used=2,tokens=5)",
        1e-6,
        || {
            let a = t(DType::F32, &[16, 2, 5])?;
            let b = t(DType::F32, &[16, 4])?;
            let ids = t(DType::I32, &[2, 5])?;
            let out = ops::add_id(&a, &b, &ids)?;
            Ok((vec![(a, U), (b, U), (ids, Fill::Index(4))], out))
        },
    ));
    // TOP_K is the set of the k largest in no promised order: compared as
    // sets, or with ties as the values they pick ([`top_k_error`]).
    v.push(case("TOP_K(k=4,ne=[16,5,2])", 0.0, || {
        let a = t(DType::F32, &[16, 5, 2])?;
        Ok((vec![(a.clone(), U)], ops::top_k(&a, 4)?))
    }));
    // integers in 0..6 in rows of 16: the 4th largest is nearly always tied
    v.push(case("TOP_K(k=4,ne=[16,5,2],ties)", 0.0, || {
        let a = t(DType::F32, &[16, 5, 2])?;
        Ok((vec![(a.clone(), Fill::Index(6))], ops::top_k(&a, 4)?))
    }));
}
