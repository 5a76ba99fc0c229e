// The matrix-vector entry point without subgroup operations: TPR
// invocations per 2 rows, partial sums reduced in workgroup memory.

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
