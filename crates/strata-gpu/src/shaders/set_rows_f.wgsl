
// SET_ROWS into a float destination: one invocation per (i0, i2, i3) walks
// the rows in order, copying element i0 of each into its dst row.
fn item_main(t: u32) {
    let ne = P.ne[0];
    let c = coords(t, vec4<u32>(ne.x, ne.z, ne.w, 1u));
    for (var i = 0u; i < ne.y; i++) {
        let r = row_id(i, c.y, c.z);
        if (r != 0xffffffffu) {
            ST(addr(4u, c.x, r, c.y, c.z), LD0(addr(0u, c.x, i, c.y, c.z)));
        }
    }
}
