//! Conformance cases for runs of ops a backend may fuse into one kernel.

use super::*;

/// Runs of ops a backend may compute in one kernel (ggml-vulkan's fusions,
/// issue #45), each named by its ops joined with `+`: RMS_NORM then MUL by
/// the weight; ADD, RMS_NORM of the sum and MUL, with the sum used again
/// (it is the residual); MUL_MAT then ADD of a bias, a row or a whole
/// matrix; ROPE, reshaped into rows, into SET_ROWS (the K cache write),
/// alone or with the V rows' SET_ROWS (the same ids) after it;
/// the gate and up products of one activation (types may differ), then
/// their GLU; a GLU (two operands, or the halves of one) into the down
/// product, with or without the residual ADD.
pub(super) fn fused_cases(v: &mut Vec<OpCase>) {
    v.push(case("RMS_NORM+MUL(ne=[64,5,2],w=[64])", 1e-6, || {
        let x = t(DType::F32, &[64, 5, 2])?;
        let w = t(DType::F32, &[64])?;
        let out = ops::mul(&ops::rms_norm(&x, 1e-5)?, &w)?;
        Ok((vec![(x, U), (w, U)], out))
    }));
    v.push(case("ADD+RMS_NORM+MUL(ne=[300,3,2],w=[300])", 1e-6, || {
        let a = t(DType::F32, &[300, 3, 2])?;
        let b = t(DType::F32, &[300, 3, 2])?;
        let w = t(DType::F32, &[300])?;
        let sum = ops::add(&a, &b)?;
        let normed = ops::mul(&ops::rms_norm(&sum, 1e-6)?, &w)?;
        let out = ops::add(&normed, &sum)?;
        Ok((vec![(a, U), (b, U), (w, U)], out))
    }));
    for (a_t, bias_rows) in [
        (DType::F32, 1),
        (DType::F16, 3),
        (DType::Q8_0, 1),
        (DType::Q4_K, 3),
    ] {
        let k = a_t.block_size().max(64);
        let tol = if a_t.is_quantized() { 1e-4 } else { 1e-5 };
        v.push(case(
            format!("MUL_MAT+ADD(type_a={a_t},m=16,n=3,k={k},bias=[16,{bias_rows}])"),
            tol,
            move || {
                let a = t(a_t, &[k, 16])?;
                let b = t(DType::F32, &[k, 3])?;
                let bias = t(DType::F32, &[16, bias_rows])?;
                let out = ops::add(&ops::mul_mat(&a, &b)?, &bias)?;
                Ok((vec![(a, U), (b, U), (bias, U)], out))
            },
        ));
    }
    let ropes = [
        (DType::F16, RopeMode::Normal, 64),
        (DType::F32, RopeMode::Neox, 32),
    ];
    for (kv_t, mode, n_dims) in ropes {
        v.push(case(
            format!("ROPE+SET_ROWS(kv={kv_t},mode={mode:?},n_dims={n_dims})"),
            1e-6,
            move || {
                // [head dim 64, 2 KV heads, 3 tokens] into 8 cells
                let x = t(DType::F32, &[64, 2, 3])?;
                let pos = t(DType::I32, &[3])?;
                let cache = t(kv_t, &[128, 8])?;
                let ids = t(DType::I32, &[3])?;
                let r = ops::rope(&x, &pos, RopeParams::new(n_dims, mode, 10000.0))?;
                let rows = ops::reshape(&r, &[128, 3])?;
                let out = ops::set_rows(&cache, &rows, &ids)?;
                let ins = vec![
                    (x, U),
                    (pos, Fill::Index(100)),
                    (cache, U),
                    (ids, Fill::Permutation(8)),
                ];
                Ok((ins, out))
            },
        ));
    }
    for (kv_t, mode) in [(DType::F16, RopeMode::Neox), (DType::F32, RopeMode::Normal)] {
        v.push(case(
            format!("ROPE+SET_ROWS+SET_ROWS(kv={kv_t},mode={mode:?})"),
            1e-6,
            move || {
                // K [64, 2, 3] and V rows [96, 3] into caches of 8 cells
                let x = t(DType::F32, &[64, 2, 3])?;
                let vr = t(DType::F32, &[96, 3])?;
                let pos = t(DType::I32, &[3])?;
                let k_cache = t(kv_t, &[128, 8])?;
                let v_cache = t(kv_t, &[96, 8])?;
                let ids = t(DType::I32, &[3])?;
                let r = ops::rope(&x, &pos, RopeParams::new(64, mode, 10000.0))?;
                let k_all = ops::set_rows(&k_cache, &ops::reshape(&r, &[128, 3])?, &ids)?;
                let v_all = ops::set_rows(&v_cache, &vr, &ids)?;
                // both caches in the result
                let out = ops::concat(
                    &ops::reshape(&k_all, &[128 * 8])?,
                    &ops::reshape(&v_all, &[96 * 8])?,
                    0,
                )?;
                let ins = vec![
                    (x, U),
                    (vr, U),
                    (pos, Fill::Index(100)),
                    (k_cache, U),
                    (v_cache, U),
                    (ids, Fill::Permutation(8)),
                ];
                Ok((ins, out))
            },
        ));
    }
    let glus = [
        (DType::F32, DType::F32, GluOp::Swiglu, 1),
        (DType::Q4_1, DType::Q4_1, GluOp::Swiglu, 1),
        (DType::Q4_K, DType::Q6_K, GluOp::Swiglu, 3),
        (DType::Q8_0, DType::Q8_0, GluOp::Geglu, 2),
    ];
    for (gate_t, up_t, op, n) in glus {
        let k = gate_t.block_size().max(up_t.block_size()).max(64);
        let tol = if gate_t.is_quantized() { 1e-4 } else { 1e-5 };
        v.push(case(
            format!("MUL_MAT+MUL_MAT+GLU(gate={gate_t},up={up_t},op={op:?},m=40,n={n},k={k})"),
            tol,
            move || {
                let wg = t(gate_t, &[k, 40])?;
                let wu = t(up_t, &[k, 40])?;
                let x = t(DType::F32, &[k, n])?;
                let out = ops::glu_split(&ops::mul_mat(&wg, &x)?, &ops::mul_mat(&wu, &x)?, op)?;
                Ok((vec![(wg, U), (wu, U), (x, U)], out))
            },
        ));
    }
    // (down type, op, operands: None two, Some(swapped) one, the ADD, n)
    let downs = [
        (DType::Q4_1, GluOp::Swiglu, None, true, 1),
        (DType::Q6_K, GluOp::Geglu, Some(false), false, 2),
        (DType::F16, GluOp::Reglu, Some(true), true, 3),
        (DType::Q8_0, GluOp::GegluErf, None, false, 1),
    ];
    for (down_t, op, one, add, n) in downs {
        // the CPU quantizes the GLU's output, whose values lean positive
        // (a GELU's): across seeds Q6_K's products differ by up to 1.7e-4
        // (a GLU wrongly fused: 4e-2 and more)
        let tol = if down_t.is_quantized() { 3e-4 } else { 1e-5 };
        let form = one.map_or("split".to_string(), |s| format!("swapped={s}"));
        v.push(case(
            format!("GLU+MUL_MAT+ADD(down={down_t},op={op:?},{form},add={add},m=16,n={n},k=256)"),
            tol,
            move || {
                let w = t(down_t, &[256, 16])?;
                let res = t(DType::F32, &[16, n])?;
                let (mut ins, glu) = match one {
                    None => {
                        let (g, u) = (t(DType::F32, &[256, n])?, t(DType::F32, &[256, n])?);
                        let glu = ops::glu_split(&g, &u, op)?;
                        (vec![(g, U), (u, U)], glu)
                    }
                    Some(swapped) => {
                        let gu = t(DType::F32, &[512, n])?;
                        let glu = ops::glu(&gu, op, swapped)?;
                        (vec![(gu, U)], glu)
                    }
                };
                let mut out = ops::mul_mat(&w, &glu)?;
                if add {
                    out = ops::add(&out, &res)?;
                    ins.push((res, U));
                }
                ins.push((w, U));
                Ok((ins, out))
            },
        ));
    }
}
