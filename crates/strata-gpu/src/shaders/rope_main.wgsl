// ROPE: each invocation rotates one pair of one row of s0 into d (or
// copies one element past n_dims).
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
    let i2 = (r / ne.y) % ne.z;
    let i3 = r / (ne.y * ne.z);
    if (j >= h) {
        let k = j + h;
        ST(addr(4u, k, i1, i2, i3), LD0(addr(0u, k, i1, i2, i3)));
        return;
    }
    let cs = rope_cs(j, i2);
    let ab = rope_pair(j);
    let x0 = LD0(addr(0u, ab.x, i1, i2, i3));
    let x1 = LD0(addr(0u, ab.y, i1, i2, i3));
    ST(addr(4u, ab.x, i1, i2, i3), x0 * cs.x - x1 * cs.y);
    ST(addr(4u, ab.y, i1, i2, i3), x0 * cs.y + x1 * cs.x);
}
