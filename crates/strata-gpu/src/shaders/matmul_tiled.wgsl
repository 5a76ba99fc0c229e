ENABLE_F16
// Matrix × matrix: 64 × 64 tiles of dst (rows of s0 × columns of s1) per
// workgroup of 64, K in steps of 32 through workgroup memory, weights
// dequantized on load; 8 × 8 outputs per invocation (few workgroup-memory
// loads per multiply-add: those are gathers on llvmpipe). The tiles hold
// f32 (16 KiB) or, on the f16 tiles path, f16 (8 KiB: the first line
// enables f16 then), whose products and sums are still f32. This file is
// the tile (`tile`, `bsel`); the entry point follows it: MUL_MAT's
// (`matmul_main.wgsl`) or MUL_MAT_ID's (`matmul_id.wgsl`).
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

// The 8 × 8 outputs of one invocation of a tile: rows 8 (lid % 8)..,
// columns 8 (lid / 8).. as rows 0-3 / 4-7 × columns 0-3 / 4-7 (plain
// variables, not arrays indexed at run time).
struct Acc { m00: mat4x4<f32>, m01: mat4x4<f32>, m10: mat4x4<f32>, m11: mat4x4<f32> }

// The byte address of s1's column (i1, i2, i3), as `tile` takes it.
fn bsel(i1: u32, i2: u32, i3: u32) -> u32 {
    return addr(1u, 0u, i1, i2, i3);
}

// One 64 × 64 tile: invocation `lid` loads the weight row at byte `arow`
// (where `aok`, else zeros) and the s1 column `bcol` (`bsel`; where `bok`)
// and returns its outputs. Has barriers: call it in uniform control flow.
fn tile(arow: u32, aok: bool, bcol: u32, bok: bool, lid: u32) -> Acc {
    let tr = (lid & 7u) * 2u;
    let tc = (lid >> 3u) * 2u;
    var o = Acc();
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
            o.m00 += outer(a, b);
            o.m01 += outer(a, b2);
            o.m10 += outer(a2, b);
            o.m11 += outer(a2, b2);
        }
        workgroupBarrier();
    }
    return o;
}
