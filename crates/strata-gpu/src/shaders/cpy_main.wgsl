
// The entry point of the shaders with one invocation per destination
// element (CPY, REPEAT, CONCAT, ADD_ID): `elem(c)` writes dst's element at
// coordinates c.
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = item_id(wid, nwg, lid, 256u);
    if (i >= P.dn.y) { return; }
    elem(coords(i, P.ne[4]));
}
