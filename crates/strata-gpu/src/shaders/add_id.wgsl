// ADD_ID: dst[:, i1, i2] = s0[:, i1, i2] + s1[:, ids[i1, i2]] (ids s2 I32;
// an id outside s1's rows adds nothing).
fn elem(c: vec4<u32>) {
    var v = LD0(addr(0u, c.x, c.y, c.z, c.w));
    let e = ld_i32_s2(addr(2u, c.y, c.z, 0u, 0u));
    if (e >= 0 && u32(e) < P.ne[1].y) {
        v += LD1(addr(1u, c.x, u32(e), 0u, 0u));
    }
    ST(addr(4u, c.x, c.y, c.z, c.w), v);
}
