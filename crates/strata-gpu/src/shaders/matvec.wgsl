// Matrix × few vectors: dst[:, c] = s0-matrix(c) · s1-column(c), one
// workgroup per 64 / TPR × 2 rows of one column c, TPR invocations per 2
// rows striding over K in groups of 8 (weights dequantized in registers, the
// activations loaded once for 2 rows), partial sums reduced in workgroup
// memory. COLMAP picks the column mapping: MUL_MAT
// (broadcast over dims 2, 3) or MUL_MAT_ID (the expert from the ids in s2).
DEQUANT

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

var<workgroup> red0: array<f32, 64>;
var<workgroup> red1: array<f32, 64>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let t = lid % TPR;
    let r0 = (wid.x * (64u / TPR) + lid / TPR) * 2u;
    let c = wid.y + wid.z * MAXY;
    if (c >= P.dn.y) { return; }
    let cm = COLMAP(c);
    let m = P.ne[0].y;
    let nb1 = P.nb[0].y;
    let groups = (P.ne[0].x + 7u) / 8u;
    // the second row past m re-reads the first and is not stored; the
    // accumulators are plain variables (private arrays indexed at run time
    // live in memory on some drivers)
    var acc0 = 0.0;
    var acc1 = 0.0;
    if (r0 < m && cm.w == 1u) {
        let ar0 = cm.x + r0 * nb1;
        let ar1 = select(ar0, ar0 + nb1, r0 + 1u < m);
        for (var g = t; g < groups; g += TPR) {
            let y = dq_s1(cm.y, g);
            let w0 = dq_s0(ar0, g);
            let w1 = dq_s0(ar1, g);
            acc0 += dot(w0.a, y.a) + dot(w0.b, y.b);
            acc1 += dot(w1.a, y.a) + dot(w1.b, y.b);
        }
    }
    red0[lid] = acc0;
    red1[lid] = acc1;
    workgroupBarrier();
    for (var s = TPR / 2u; s > 0u; s >>= 1u) {
        if (t < s) {
            red0[lid] += red0[lid + s];
            red1[lid] += red1[lid + s];
        }
        workgroupBarrier();
    }
    if (t == 0u && r0 < m) {
        ST(cm.z + r0 * P.nb[4].x, red0[lid] + BIAS(c, r0));
        if (r0 + 1u < m) { ST(cm.z + (r0 + 1u) * P.nb[4].x, red1[lid] + BIAS(c, r0 + 1u)); }
    }
}
