// GLU: dst = act(gate) * up, one invocation per element. Gate is s0 at
// element offset P.dn.z along dim 0; up is UPLD (s1, or s0 for the fused
// form) at offset P.dn.w.
fn gelu_tanh(x: f32) -> f32 {
    let t = clamp(0.7978845608 * x * (1.0 + 0.044715 * x * x), -15.0, 15.0);
    return 0.5 * x * (1.0 + tanh(t));
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = item_id(wid, nwg, lid, 256u);
    if (i >= P.dn.y) { return; }
    let c = coords(i, P.ne[4]);
    let g = LD0(addr(0u, c.x + P.dn.z, c.y, c.z, c.w));
    let u = UPLD(addr(UPK, c.x + P.dn.w, c.y, c.z, c.w));
    ST(addr(4u, c.x, c.y, c.z, c.w), (ACT) * u);
}
