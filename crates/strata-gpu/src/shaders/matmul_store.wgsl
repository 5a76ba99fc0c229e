// The tiled MUL_MAT kernels' stores: a 4 × 4 block of dst, inside dst.

// Rows r..r+3 of columns c..c+3 (constant column indices: a matrix indexed
// at run time would live in memory).
fn store4(r: u32, c: u32, i2: u32, i3: u32, v: mat4x4<f32>) {
    store(r, c, i2, i3, v[0]);
    store(r, c + 1u, i2, i3, v[1]);
    store(r, c + 2u, i2, i3, v[2]);
    store(r, c + 3u, i2, i3, v[3]);
}

// Rows r..r+3 of column c, those inside dst.
fn store(r: u32, c: u32, i2: u32, i3: u32, v: vec4<f32>) {
    if (c >= P.ne[4].y) { return; }
    let m = P.ne[0].y;
    if (r < m) { ST(addr(4u, r, c, i2, i3), v.x); }
    if (r + 1u < m) { ST(addr(4u, r + 1u, c, i2, i3), v.y); }
    if (r + 2u < m) { ST(addr(4u, r + 2u, c, i2, i3), v.z); }
    if (r + 3u < m) { ST(addr(4u, r + 3u, c, i2, i3), v.w); }
}
