// Matrix × few vectors: dst[:, c] = s0-matrix(c) · s1-column(c). Each of
// a few rows of one column c is a dot product over K in groups of 8 (weights
// dequantized in registers, the activations loaded once for 2 rows), split
// among several invocations whose partial sums are then added: in workgroup
// memory (matvec_shared.wgsl) or with a subgroup reduction
// (matvec_subgroup.wgsl). COLMAP picks the column mapping: MUL_MAT
// (broadcast over dims 2, 3) or MUL_MAT_ID (the expert from the ids in s2).
// `y8_s1(column byte, group)` gives the column's 8 activations of a group:
// s1's, or with a GLU fused in (issue #45) the GLU of the gate in s1 and the
// up operand in s2 (`ops/matmul.rs` `activations`).
DEQUANT
Y8_FN

// (weights matrix byte, s1 column byte, dst column byte, 1 if valid) of
// column c = i1 + ne1 (i2 + ne2 i3) of the destination.
fn col_mm(c: u32) -> vec4<u32> {
    let n = P.ne[4];
    let i1 = c % n.y;
    let i2 = (c / n.y) % n.z;
    let i3 = c / (n.y * n.z);
    let a = addr(0u, 0u, 0u, i2 / (n.z / P.ne[0].z), i3 / (n.w / P.ne[0].w));
    return vec4<u32>(a, addr(1u, 0u, i1, i2, i3), addr(4u, 0u, i1, i2, i3), 1u);
}

// Column c = s + n_used t of MUL_MAT_ID: expert ids[s, t], activations
// s1[:, s % n_b, t].
fn col_id(c: u32) -> vec4<u32> {
    let nu = P.ne[2].x;
    let s = c % nu;
    let t = c / nu;
    let e = ld_i32_s2(addr(2u, s, t, 0u, 0u));
    let ok = e >= 0 && u32(e) < P.ne[0].z;
    let a = addr(0u, 0u, 0u, select(0u, u32(e), ok), 0u);
    return vec4<u32>(a, addr(1u, 0u, s % P.ne[1].y, t, 0u), addr(4u, 0u, s, t, 0u), select(0u, 1u, ok));
}

// Row r of column c of the bias in s3 (f32, broadcast over d): MUL_MAT
// fused with the ADD of a bias (issue #45); `BIAS` is `bias_none` without.
fn bias_s3(c: u32, r: u32) -> f32 {
    let n = P.ne[4];
    let b = P.ne[3];
    let i1 = c % n.y;
    let i2 = (c / n.y) % n.z;
    let i3 = c / (n.y * n.z);
    return ld_f32_s3(addr(3u, r % b.x, i1 % b.y, i2 % b.z, i3 % b.w));
}

fn bias_none(c: u32, r: u32) -> f32 {
    return 0.0;
}

// Rows at bytes ar0 and ar1 of s0 · the column at byte yc of s1, summed over
// the groups of 8 first, first + step, … (the activations loaded once for
// both rows; plain accumulators, not an array indexed at run time).
fn dot2_s0(yc: u32, ar0: u32, ar1: u32, first: u32, step: u32) -> vec2<f32> {
    let groups = (P.ne[0].x + 7u) / 8u;
    var acc = vec2<f32>(0.0);
    for (var g = first; g < groups; g += step) {
        let y = y8_s1(yc, g);
        let w0 = dq_s0(ar0, g);
        let w1 = dq_s0(ar1, g);
        acc += vec2<f32>(dot(w0.a, y.a) + dot(w0.b, y.b), dot(w1.a, y.a) + dot(w1.b, y.b));
    }
    return acc;
}
