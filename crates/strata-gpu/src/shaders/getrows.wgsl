// GET_ROWS: dst[:, i10, i11, i12] = s0[:, ids[i10, i11, i12], i11, i12], one
// invocation per 8 elements of a destination row; rows out of range are left.
DEQUANT

fn item_main(i: u32) {
    let n = P.ne[4];
    let groups = (n.x + 7u) / 8u;
    let g = i % groups;
    let r = i / groups;
    let i10 = r % n.y;
    let i11 = (r / n.y) % n.z;
    let i12 = r / (n.y * n.z);
    let row = ld_i32_s1(addr(1u, i10, i11, i12, 0u));
    if (row < 0 || u32(row) >= P.ne[0].y) { return; }
    let v = dq_s0(addr(0u, 0u, u32(row), i11, i12), g);
    for (var j = 0u; j < 4u; j++) {
        let e = g * 8u + j;
        if (e < n.x) { ST(addr(4u, e, i10, i11, i12), v.a[j]); }
        if (e + 4u < n.x) { ST(addr(4u, e + 4u, i10, i11, i12), v.b[j]); }
    }
}
