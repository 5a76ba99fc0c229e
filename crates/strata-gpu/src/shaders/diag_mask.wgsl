// DIAG_MASK_INF: element (i0, i1) is -inf when i0 > n_past (P.dn.z) + i1,
// else a copy of s0; one invocation per element.
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = item_id(wid, nwg, lid, 256u);
    if (i >= P.dn.y) { return; }
    let c = coords(i, P.ne[4]);
    let b = addr(4u, c.x, c.y, c.z, c.w);
    if (c.x <= P.dn.z + c.y) {
        ST(b, LD0(addr(0u, c.x, c.y, c.z, c.w)));
    } else {
        st_u32(b, 0xff800000u); // -inf
    }
}
