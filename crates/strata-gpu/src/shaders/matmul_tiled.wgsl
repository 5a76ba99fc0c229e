ENABLE_F16
// Matrix × matrix: 64 × 64 tiles of dst (rows of s0 × columns of s1) per
// workgroup of 64, K in steps of 32 through workgroup memory, weights
// dequantized on load; 8 × 8 outputs per invocation (few workgroup-memory
// loads per multiply-add: those are gathers on llvmpipe). The tiles hold
// f32 (16 KiB) or, on the f16 tiles path, f16 (8 KiB: the first line
// enables f16 then), whose products and sums are still f32. Grid: (row
// tiles, column tiles, ne2 ne3 of dst).
DEQUANT

// [k][64 rows / 4] and [k][64 columns / 4]
var<workgroup> As: array<vec4<TILE_T>, 512>;
var<workgroup> Bs: array<vec4<TILE_T>, 512>;

// Stores the 32 K values of row (column) `i` of a tile, as 4 groups of 8.
fn put_a(i: u32, g: u32, v: V8) {
    let base = g * 128u + (i >> 2u);
    let c = i & 3u;
    As[base][c] = TILE_T(v.a.x); As[base + 16u][c] = TILE_T(v.a.y);
    As[base + 32u][c] = TILE_T(v.a.z); As[base + 48u][c] = TILE_T(v.a.w);
    As[base + 64u][c] = TILE_T(v.b.x); As[base + 80u][c] = TILE_T(v.b.y);
    As[base + 96u][c] = TILE_T(v.b.z); As[base + 112u][c] = TILE_T(v.b.w);
}
fn put_b(i: u32, g: u32, v: V8) {
    let base = g * 128u + (i >> 2u);
    let c = i & 3u;
    Bs[base][c] = TILE_T(v.a.x); Bs[base + 16u][c] = TILE_T(v.a.y);
    Bs[base + 32u][c] = TILE_T(v.a.z); Bs[base + 48u][c] = TILE_T(v.a.w);
    Bs[base + 64u][c] = TILE_T(v.b.x); Bs[base + 80u][c] = TILE_T(v.b.y);
    Bs[base + 96u][c] = TILE_T(v.b.z); Bs[base + 112u][c] = TILE_T(v.b.w);
}

fn outer(a: vec4<f32>, b: vec4<f32>) -> mat4x4<f32> {
    return mat4x4<f32>(a * b.x, a * b.y, a * b.z, a * b.w);
}

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
    let arow = a0 + (r0 + lid) * P.nb[0].y;
    let bcol = addr(1u, 0u, c0 + lid, i2, i3);
    let aok = r0 + lid < m;
    let bok = c0 + lid < n.y;
    // and computes rows 8 tr.., columns 8 tc.. (matrices: rows 0-3 / 4-7 ×
    // columns 0-3 / 4-7; plain variables, not arrays indexed at run time)
    let tr = (lid & 7u) * 2u;
    let tc = (lid >> 3u) * 2u;
    var m00 = mat4x4<f32>();
    var m01 = mat4x4<f32>();
    var m10 = mat4x4<f32>();
    var m11 = mat4x4<f32>();
    let z = V8(vec4<f32>(0.0), vec4<f32>(0.0));
    let steps = (P.ne[0].x + 31u) / 32u;
    for (var s = 0u; s < steps; s++) {
        for (var g = 0u; g < 4u; g++) {
            var w = z;
            if (aok) { w = dq_s0(arow, s * 4u + g); }
            put_a(lid, g, w);
            var y = z;
            if (bok) { y = dq_s1(bcol, s * 4u + g); }
            put_b(lid, g, y);
        }
        workgroupBarrier();
        for (var kk = 0u; kk < 32u; kk++) {
            let a = vec4<f32>(As[kk * 16u + tr]);
            let a2 = vec4<f32>(As[kk * 16u + tr + 1u]);
            let b = vec4<f32>(Bs[kk * 16u + tc]);
            let b2 = vec4<f32>(Bs[kk * 16u + tc + 1u]);
            m00 += outer(a, b);
            m01 += outer(a, b2);
            m10 += outer(a2, b);
            m11 += outer(a2, b2);
        }
        workgroupBarrier();
    }
    let r = r0 + tr * 4u;
    let c = c0 + tc * 4u;
    store4(r, c, i2, i3, m00);
    store4(r, c + 4u, i2, i3, m01);
    store4(r + 4u, c, i2, i3, m10);
    store4(r + 4u, c + 4u, i2, i3, m11);
}
