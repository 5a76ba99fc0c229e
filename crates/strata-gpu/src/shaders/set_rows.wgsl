// SET_ROWS: rows s0 [ne0, n, ne2, ne3], row ids s1 (I32, or I64 as two
// words; `IDX64`) broadcast over dims 2, 3, the destination a view of
// source 2. A repeated id keeps the last row written, as on the CPU;
// out-of-range ids are skipped.

// The destination row selected by s0's row i of plane (i2, i3), or
// 0xffffffff when out of range.
fn row_id(i: u32, i2: u32, i3: u32) -> u32 {
    let b = addr(1u, i, i2 % P.ne[1].y, i3 % P.ne[1].z, 0u);
    var v = ld_u32_s1(b);
    if (IDX64 && ld_u32_s1(b + 4u) != 0u) { v = 0xffffffffu; }
    if (v >= P.ne[4].y) { return 0xffffffffu; }
    return v;
}
