
// dst = s0 OP s1, s1 broadcast over dst's shape (its ne divides dst's).
fn elem(c: vec4<u32>) {
    let n1 = P.ne[1];
    let a = LD0(addr(0u, c.x, c.y, c.z, c.w));
    let b = LD1(addr(1u, c.x % n1.x, c.y % n1.y, c.z % n1.z, c.w % n1.w));
    ST(addr(4u, c.x, c.y, c.z, c.w), OPER);
}
