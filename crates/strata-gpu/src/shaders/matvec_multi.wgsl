
// Two or three MUL_MATs of the same activation columns fused (the Q, K and
// V projections; the feed-forward's gate and up): the matrices are in s0,
// s2 and s3, the columns in s1, each product (f32, contiguous) at its own
// byte offset of d (P.dn.x, P.i.x, P.i.y); P.i.z products. The workgroups
// along x take the first matrix's rows RPW at a time, then the second's,
// then the third's; within one, as the subgroup matrix-vector kernel: each
// subgroup 2 rows at a time, its invocations striding over K, one
// `subgroupAdd` per row. Control flow is uniform within each subgroup at
// the reductions.

fn dq_k(k: u32, row: u32, g: u32) -> V8 {
    if (k == 0u) { return dq_s0(row, g); }
    if (k == 1u) { return dq_s2(row, g); }
    return DQ3(row, g);
}

@compute @workgroup_size(64)
fn main(in: SgIn) {
    let c = in.wid.y;
    // which product, and which block of its rows
    let b0 = (P.ne[0].y + RPW - 1u) / RPW;
    let b1 = (P.ne[2].y + RPW - 1u) / RPW;
    var k = 0u;
    var blk = in.wid.x;
    if (blk >= b0) {
        k = 1u;
        blk -= b0;
        if (blk >= b1) {
            k = 2u;
            blk -= b1;
        }
    }
    if (k >= P.i.z) { return; }
    var m = P.ne[0].y;
    var wbase = P.off.x;
    var wnb = P.nb[0].y;
    var dbase = P.dn.x;
    if (k == 1u) {
        m = P.ne[2].y;
        wbase = P.off.z;
        wnb = P.nb[2].y;
        dbase = P.i.x;
    } else if (k == 2u) {
        m = P.ne[3].y;
        wbase = P.off.w;
        wnb = P.nb[3].y;
        dbase = P.i.y;
    }
    let xc = addr(1u, 0u, c, 0u, 0u);
    let dc = dbase + c * m * 4u;
    let groups = (P.ne[0].x + 7u) / 8u;
    let end = min(blk * RPW + RPW, m);
    for (var r0 = blk * RPW + in.sg * 2u; r0 < end; r0 += in.nsg * 2u) {
        // the second row past m re-reads the first and is not stored
        let ar0 = wbase + r0 * wnb;
        let ar1 = select(ar0, ar0 + wnb, r0 + 1u < m);
        var acc0 = 0.0;
        var acc1 = 0.0;
        for (var g = in.lane; g < groups; g += in.width) {
            let y = dq_s1(xc, g);
            let w0 = dq_k(k, ar0, g);
            let w1 = dq_k(k, ar1, g);
            acc0 += dot(w0.a, y.a) + dot(w0.b, y.b);
            acc1 += dot(w1.a, y.a) + dot(w1.b, y.b);
        }
        let sum0 = subgroupAdd(acc0);
        let sum1 = subgroupAdd(acc1);
        if (in.lane == 0u) {
            ST(dc + r0 * 4u, sum0);
            if (r0 + 1u < m) { ST(dc + (r0 + 1u) * 4u, sum1); }
        }
    }
}
