// REPEAT: dst element (i0..i3) is s0's element (i0 % ne0, ..), moved raw.
fn elem(c: vec4<u32>) {
    let s = c % P.ne[0];
    PUT(addr(4u, c.x, c.y, c.z, c.w), GET0(addr(0u, s.x, s.y, s.z, s.w)));
}
