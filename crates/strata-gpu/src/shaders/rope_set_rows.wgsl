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

fn item_main(i: u32) {
    let jr = rope_split(i);
    let ne = P.ne[0];
    let i1 = jr.y % ne.y;
    let i3 = jr.y / ne.y;
    for (var i2 = 0u; i2 < ne.z; i2++) {
        let row = row_id(i2, i3);
        if (row == 0xffffffffu) { continue; }
        rope_item(jr.x, i1, i2, i3, addr(4u, ne.x * i1, row, i3, 0u));
    }
}
