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
    // the second row past m re-reads the first and is not stored
    var acc = vec2<f32>(0.0);
    if (r0 < m && cm.w == 1u) {
        let ar0 = cm.x + r0 * nb1;
        acc = dot2_s0(cm.y, ar0, select(ar0, ar0 + nb1, r0 + 1u < m), t, TPR);
    }
    red0[lid] = acc.x;
    red1[lid] = acc.y;
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
