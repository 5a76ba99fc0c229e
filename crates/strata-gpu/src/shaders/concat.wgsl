// CONCAT along dim `P.dn.z`: dst elements below s0's extent on that dim come
// from s0, the rest from s1 (shifted back), moved raw.
fn elem(c: vec4<u32>) {
    let dim = P.dn.z;
    let split = P.ne[0][dim];
    let o = addr(4u, c.x, c.y, c.z, c.w);
    if (c[dim] < split) {
        PUT(o, GET0(addr(0u, c.x, c.y, c.z, c.w)));
    } else {
        var s = c;
        s[dim] = c[dim] - split;
        PUT(o, GET1(addr(1u, s.x, s.y, s.z, s.w)));
    }
}
