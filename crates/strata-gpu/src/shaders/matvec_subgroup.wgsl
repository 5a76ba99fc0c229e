
// The matrix-vector entry point with subgroup reductions: each subgroup
// computes 2 rows at a time, its invocations striding over K, and one
// `subgroupAdd` per row sums their parts (no workgroup memory, no barrier).
// A workgroup owns RPW rows (2 × 64 / the adapter's smallest subgroup
// size); its subgroups take them 2 by 2, so any subgroup size the driver
// picks covers them all. Control flow is uniform within each subgroup at
// the reductions.

@compute @workgroup_size(64)
fn main(in: SgIn) {
    let c = in.wid.y + in.wid.z * MAXY;
    if (c >= P.dn.y) { return; }
    let cm = COLMAP(c);
    let m = P.ne[0].y;
    let nb1 = P.nb[0].y;
    let end = min(in.wid.x * RPW + RPW, m);
    for (var r0 = in.wid.x * RPW + in.sg * 2u; r0 < end; r0 += in.nsg * 2u) {
        // the second row past m re-reads the first and is not stored
        var acc = vec2<f32>(0.0);
        if (cm.w == 1u) {
            let ar0 = cm.x + r0 * nb1;
            acc = dot2_s0(cm.y, ar0, select(ar0, ar0 + nb1, r0 + 1u < m), in.lane, in.width);
        }
        let sum0 = subgroupAdd(acc.x);
        let sum1 = subgroupAdd(acc.y);
        if (in.lane == 0u) {
            ST(cm.z + r0 * P.nb[4].x, sum0 + BIAS(c, r0));
            if (r0 + 1u < m) { ST(cm.z + (r0 + 1u) * P.nb[4].x, sum1 + BIAS(c, r0 + 1u)); }
        }
    }
}
