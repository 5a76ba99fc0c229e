
fn gelu(x: f32) -> f32 {
    let t = clamp(0.7978845608 * x * (1.0 + 0.044715 * x * x), -15.0, 15.0);
    return 0.5 * x * (1.0 + tanh(t));
}

fn sigmoid(x: f32) -> f32 {
    return 1.0 / (1.0 + exp(-x));
}

// dst = f(s0), element by element over dst's shape (s0 has the same shape).
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = item_id(wid, nwg, lid, 256u);
    if (i >= P.dn.y) { return; }
    let c = coords(i, P.ne[4]);
    let x = LD0(addr(0u, c.x, c.y, c.z, c.w));
    ST(addr(4u, c.x, c.y, c.z, c.w), EXPR);
}
