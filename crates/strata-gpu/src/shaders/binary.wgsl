
// dst = s0 OP s1, s1 broadcast over dst's shape (its ne divides dst's).
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = item_id(wid, nwg, lid, 256u);
    if (i >= P.dn.y) { return; }
    let c = coords(i, P.ne[4]);
    let n1 = P.ne[1];
    let a = LD0(addr(0u, c.x, c.y, c.z, c.w));
    let b = LD1(addr(1u, c.x % n1.x, c.y % n1.y, c.z % n1.z, c.w % n1.w));
    ST(addr(4u, c.x, c.y, c.z, c.w), OPER);
}
