// CPY / CONT / DUP between float (or equal) types: dst element i (in dst's
// logical order, ne0 fastest) takes src0's element i in src0's logical
// order, so the shapes may differ when the element counts agree. `GET(` and
// `PUT(` are a typed load/store (converting through f32) or, for equal
// types, raw 16/32-bit moves.
fn elem(c: vec4<u32>) {
    let i = ((c.w * P.ne[4].z + c.z) * P.ne[4].y + c.y) * P.ne[4].x + c.x;
    let s = coords(i, P.ne[0]);
    PUT(addr(4u, c.x, c.y, c.z, c.w), GET(addr(0u, s.x, s.y, s.z, s.w)));
}
