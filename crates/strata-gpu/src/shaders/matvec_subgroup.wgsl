
// The matrix-vector entry point with subgroup reductions: each subgroup
// computes 2 rows at a time, its invocations striding over K, and one
// `subgroupAdd` per row sums their parts (no workgroup memory, no barrier).
// A workgroup owns RPW rows (2 × 64 / the adapter's smallest subgroup
// size); its subgroups take them 2 by 2, so any subgroup size the driver
// picks covers them all. Control flow is uniform within each subgroup at
// the reductions.

@compute @workgroup_size(64)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(subgroup_id) sg: u32,
    @builtin(num_subgroups) nsg: u32,
    @builtin(subgroup_invocation_id) lane: u32,
    @builtin(subgroup_size) width: u32,
) {
    let c = wid.y + wid.z * MAXY;
    if (c >= P.dn.y) { return; }
    let cm = COLMAP(c);
    let m = P.ne[0].y;
    let nb1 = P.nb[0].y;
    let groups = (P.ne[0].x + 7u) / 8u;
    let end = min(wid.x * RPW + RPW, m);
    for (var r0 = wid.x * RPW + sg * 2u; r0 < end; r0 += nsg * 2u) {
        // the second row past m re-reads the first and is not stored
        var acc0 = 0.0;
        var acc1 = 0.0;
        if (cm.w == 1u) {
            let ar0 = cm.x + r0 * nb1;
            let ar1 = select(ar0, ar0 + nb1, r0 + 1u < m);
            for (var g = lane; g < groups; g += width) {
                let y = dq_s1(cm.y, g);
                let w0 = dq_s0(ar0, g);
                let w1 = dq_s0(ar1, g);
                acc0 += dot(w0.a, y.a) + dot(w0.b, y.b);
                acc1 += dot(w1.a, y.a) + dot(w1.b, y.b);
            }
        }
        let sum0 = subgroupAdd(acc0);
        let sum1 = subgroupAdd(acc1);
        if (lane == 0u) {
            ST(cm.z + r0 * P.nb[4].x, sum0 + BIAS(c, r0));
            if (r0 + 1u < m) { ST(cm.z + (r0 + 1u) * P.nb[4].x, sum1 + BIAS(c, r0 + 1u)); }
        }
    }
}
