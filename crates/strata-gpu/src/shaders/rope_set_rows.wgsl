// ROPE fused into SET_ROWS (the K cache write, issue #45): s0 [ne0, ne1,
// n, ne3] (f32, contiguous) rotated as ROPE does, its rows read as the
// rows [ne0 * ne1] of a [ne0 * ne1, n, ne3] reshape and stored into the
// destination rows the ids in s3 select (I32, or I64 as two words;
// `IDX64`), converted to d's type. One invocation per (pair j, i1, i3)
// walks the rows in order, so a repeated id keeps the last row written,
// as SET_ROWS does; out-of-range ids are skipped.

// The destination row of reshaped row i of plane i2, or 0xffffffff.
fn row_id(i: u32, i2: u32) -> u32 {
    let b = addr(3u, i, i2 % P.ne[3].y, 0u, 0u);
    var v = ld_u32_s3(b);
    if (IDX64 && ld_u32_s3(b + 4u) != 0u) { v = 0xffffffffu; }
    if (v >= P.ne[4].y) { return 0xffffffffu; }
    return v;
}

// Stores element k of head i1 into row `row` of plane i3 of d.
fn put(k: u32, i1: u32, row: u32, i3: u32, v: f32) {
    ST(addr(4u, k + P.ne[0].x * i1, row, i3, 0u), v);
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = item_id(wid, nwg, lid, 256u);
    if (i >= P.dn.y) { return; }
    let ne = P.ne[0];
    let h = P.dn.z;
    let per_row = ne.x - h;
    let j = i % per_row;
    let r = i / per_row;
    let i1 = r % ne.y;
    let i3 = r / ne.y;
    for (var i2 = 0u; i2 < ne.z; i2++) {
        let row = row_id(i2, i3);
        if (row == 0xffffffffu) { continue; }
        if (j >= h) {
            let k = j + h;
            put(k, i1, row, i3, LD0(addr(0u, k, i1, i2, i3)));
            continue;
        }
        let cs = rope_cs(j, i2);
        let ab = rope_pair(j);
        let x0 = LD0(addr(0u, ab.x, i1, i2, i3));
        let x1 = LD0(addr(0u, ab.y, i1, i2, i3));
        put(ab.x, i1, row, i3, x0 * cs.x - x1 * cs.y);
        put(ab.y, i1, row, i3, x0 * cs.y + x1 * cs.x);
    }
}
