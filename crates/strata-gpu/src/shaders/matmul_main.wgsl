// MUL_MAT's entry point of the tiled kernels (after `matmul_tiled.wgsl` or
// `matmul_int.wgsl`, before `matmul_store.wgsl`). Grid: (row tiles, column
// tiles, ne2 ne3 of dst); s0 broadcast over dst's dims 2 and 3.
@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let n = P.ne[4];
    let m = P.ne[0].y;
    let i2 = wid.z % n.z;
    let i3 = wid.z / n.z;
    let a0 = addr(0u, 0u, 0u, i2 / (n.z / P.ne[0].z), i3 / (n.w / P.ne[0].w));
    let r0 = wid.x * 64u;
    let c0 = wid.y * 64u;
    // this invocation loads row / column lid of the tile
    let o = tile(a0 + (r0 + lid) * P.nb[0].y, r0 + lid < m, bsel(c0 + lid, i2, i3),
                 c0 + lid < n.y, lid);
    let r = r0 + (lid & 7u) * 8u;
    let c = c0 + (lid >> 3u) * 8u;
    store4(r, c, i2, i3, o.m00);
    store4(r, c + 4u, i2, i3, o.m01);
    store4(r + 4u, c, i2, i3, o.m10);
    store4(r + 4u, c + 4u, i2, i3, o.m11);
}
