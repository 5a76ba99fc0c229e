// ROPE fused into SET_ROWS (the K cache write, issue #45): s0 [ne0, ne1,
// n, ne3] (f32, contiguous) rotated as ROPE does, its rows read as the
// rows [ne0 * ne1] of a [ne0 * ne1, n, ne3] reshape and stored into the
// destination rows the ids in s3 select (I32, or I64 as two words;
// `IDX64`), converted to d's type. One invocation per (pair j, i1, i3)
// walks the rows in order, so a repeated id keeps the last row written,
// as SET_ROWS does; out-of-range ids are skipped. With `HAS_V` the V
// cache write joins (issue #45): items from P.i.y on store the V rows.

// The destination row of reshaped row i of plane i2, or 0xffffffff.
fn row_id(i: u32, i2: u32) -> u32 {
    let b = addr(3u, i, i2 % P.ne[3].y, 0u, 0u);
    var v = ld_u32_s3(b);
    if (IDX64 && ld_u32_s3(b + 4u) != 0u) { v = 0xffffffffu; }
    if (v >= P.ne[4].y) { return 0xffffffffu; }
    return v;
}

// Element e of each V row (s2: f32 [P.ne[2].x, n], rows in order) into
// the V cache row the same id selects: the cache starts at byte P.j.x of d,
// its rows P.j.y bytes apart, of the K cache's type and cell count.
fn v_item(e: u32) {
    for (var t = 0u; t < P.ne[2].y; t++) {
        let row = row_id(t, 0u);
        if (row == 0xffffffffu) { continue; }
        ST(P.j.x + row * P.j.y + e * P.nb[4].x, ld_f32_s2(addr(2u, e, t, 0u, 0u)));
    }
}

fn item_main(i: u32) {
    if (HAS_V && i >= P.i.y) {
        v_item(i - P.i.y);
        return;
    }
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
