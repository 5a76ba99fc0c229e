
// SET_ROWS into a float destination: one invocation per (i0, i2, i3) walks
// the rows in order, copying element i0 of each into its dst row.
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let t = item_id(wid, nwg, lid, 256u);
    if (t >= P.dn.y) { return; }
    let ne = P.ne[0];
    let c = coords(t, vec4<u32>(ne.x, ne.z, ne.w, 1u));
    for (var i = 0u; i < ne.y; i++) {
        let r = row_id(i, c.y, c.z);
        if (r != 0xffffffffu) {
            ST(addr(4u, c.x, r, c.y, c.z), LD0(addr(0u, c.x, i, c.y, c.z)));
        }
    }
}
