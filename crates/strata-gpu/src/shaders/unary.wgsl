
fn gelu(x: f32) -> f32 {
    let t = clamp(0.7978845608 * x * (1.0 + 0.044715 * x * x), -15.0, 15.0);
    return 0.5 * x * (1.0 + tanh(t));
}

fn sigmoid(x: f32) -> f32 {
    return 1.0 / (1.0 + exp(-x));
}

// dst = f(s0), element by element over dst's shape (s0 has the same shape).
fn elem(c: vec4<u32>) {
    let x = LD0(addr(0u, c.x, c.y, c.z, c.w));
    ST(addr(4u, c.x, c.y, c.z, c.w), EXPR);
}
