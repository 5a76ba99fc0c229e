// MUL_MAT's integer-dot path, second dispatch: 64 × 64 tiles of dst (rows
// of s0 × columns of s1) per workgroup of 64, K in blocks of 32. s0 is the
// quantized weight (`wblk` unpacks a block into signed bytes); s1 is the
// scratch the first dispatch wrote (`mmq_quant.wgsl`: a column's blocks of
// 32 signed bytes, then the (d, s) pairs from word P.dn.w). Each
// invocation computes 8 × 8 outputs: per block, exact i32 sums of
// `dot4I8Packed` over the block (per half of 16 where the weight has a scale
// per 16: HALVES), then in f32 `acc += (d_w d_a) Σ` and, for weights with a
// minimum (MINS), `+ m_w s_a`. This file is the tile (`tile`, `bsel`);
// the entry point follows it: MUL_MAT's (`matmul_main.wgsl`) or
// MUL_MAT_ID's (`matmul_id.wgsl`).
DEQUANT
WEIGHTS

// [word j][64 rows / 4] of the tile's weight block, and per row the two
// half scales then the minimum: [0..16) lo, [16..32) hi, [32..48) m.
var<workgroup> Aq: array<vec4<u32>, 128>;
var<workgroup> Ad: array<vec4<f32>, 48>;
// [word j][64 columns / 4] of the activations' block, and per column d,
// then s.
var<workgroup> Bq: array<vec4<u32>, 128>;
var<workgroup> Bd: array<vec4<f32>, 32>;

// Stores the 8 words of row (column) `i`'s block.
fn put_a(i: u32, lo: vec4<u32>, hi: vec4<u32>) {
    let q = i >> 2u;
    let c = i & 3u;
    Aq[q][c] = lo.x; Aq[16u + q][c] = lo.y; Aq[32u + q][c] = lo.z; Aq[48u + q][c] = lo.w;
    Aq[64u + q][c] = hi.x; Aq[80u + q][c] = hi.y; Aq[96u + q][c] = hi.z; Aq[112u + q][c] = hi.w;
}
fn put_b(i: u32, lo: vec4<u32>, hi: vec4<u32>) {
    let q = i >> 2u;
    let c = i & 3u;
    Bq[q][c] = lo.x; Bq[16u + q][c] = lo.y; Bq[32u + q][c] = lo.z; Bq[48u + q][c] = lo.w;
    Bq[64u + q][c] = hi.x; Bq[80u + q][c] = hi.y; Bq[96u + q][c] = hi.z; Bq[112u + q][c] = hi.w;
}

// Four rows' words `a` times one column's word `b`.
fn d4(a: vec4<u32>, b: u32) -> vec4<i32> {
    return vec4<i32>(dot4I8Packed(a.x, b), dot4I8Packed(a.y, b), dot4I8Packed(a.z, b),
                     dot4I8Packed(a.w, b));
}

// Integer sums of 4 rows × 8 columns.
struct S8 { c0: vec4<i32>, c1: vec4<i32>, c2: vec4<i32>, c3: vec4<i32>,
            c4: vec4<i32>, c5: vec4<i32>, c6: vec4<i32>, c7: vec4<i32> }

// `s` plus rows `a` times the 8 columns of `b0`, `b1`.
fn acc8(s: S8, a: vec4<u32>, b0: vec4<u32>, b1: vec4<u32>) -> S8 {
    return S8(s.c0 + d4(a, b0.x), s.c1 + d4(a, b0.y), s.c2 + d4(a, b0.z), s.c3 + d4(a, b0.w),
              s.c4 + d4(a, b1.x), s.c5 + d4(a, b1.y), s.c6 + d4(a, b1.z), s.c7 + d4(a, b1.w));
}

// The f32 terms of 4 rows × 4 columns: `m` plus (rows' scale `da` ×
// columns' `db`) × sums, plus rows' minimum `ma` × columns' `sb`.
fn fold(m: mat4x4<f32>, c0: vec4<i32>, c1: vec4<i32>, c2: vec4<i32>, c3: vec4<i32>,
        da: vec4<f32>, db: vec4<f32>, ma: vec4<f32>, sb: vec4<f32>) -> mat4x4<f32> {
    var r = mat4x4<f32>(m[0] + vec4<f32>(c0) * (da * db.x), m[1] + vec4<f32>(c1) * (da * db.y),
                        m[2] + vec4<f32>(c2) * (da * db.z), m[3] + vec4<f32>(c3) * (da * db.w));
    if (MINS) {
        r = r + mat4x4<f32>(ma * sb.x, ma * sb.y, ma * sb.z, ma * sb.w);
    }
    return r;
}

// The 8 × 8 outputs of one invocation of a tile: rows 8 (lid % 8)..,
// columns 8 (lid / 8).. as rows 0-3 / 4-7 × columns 0-3 / 4-7.
struct Acc { m00: mat4x4<f32>, m01: mat4x4<f32>, m10: mat4x4<f32>, m11: mat4x4<f32> }

// The index of s1's column (i1, i2, i3) among the columns the first
// dispatch quantized (s1's in order), as `tile` takes it.
fn bsel(i1: u32, i2: u32, i3: u32) -> u32 {
    return i1 + P.ne[1].y * (i2 + P.ne[1].z * i3);
}

// One 64 × 64 tile: invocation `lid` loads the weight row at byte `arow`
// (where `aok`, else zeros) and the quantized column `bcol` (`bsel`; where
// `bok`) and returns its outputs. Has barriers: call it in uniform control
// flow.
fn tile(arow: u32, aok: bool, bcol: u32, bok: bool, lid: u32) -> Acc {
    let kb = P.dn.z;
    let bq = bcol * 8u * kb;
    let bd = P.dn.w + 2u * bcol * kb;
    let tr = (lid & 7u) * 2u;
    let tc = (lid >> 3u) * 2u;
    var m00 = mat4x4<f32>();
    var m01 = mat4x4<f32>();
    var m10 = mat4x4<f32>();
    var m11 = mat4x4<f32>();
    let zi = vec4<i32>(0);
    let zs = S8(zi, zi, zi, zi, zi, zi, zi, zi);
    let ai = lid >> 2u;
    let ac = lid & 3u;
    for (var b = 0u; b < kb; b++) {
        var w = WB(vec4<u32>(0u), vec4<u32>(0u), vec2<f32>(0.0), 0.0);
        if (aok) { w = wblk(arow, b); }
        put_a(lid, w.lo, w.hi);
        Ad[ai][ac] = w.sd.x; Ad[16u + ai][ac] = w.sd.y; Ad[32u + ai][ac] = w.m;
        var y = vec2<f32>(0.0);
        var q0 = vec4<u32>(0u);
        var q1 = vec4<u32>(0u);
        if (bok) {
            let o = bq + b * 8u;
            q0 = vec4<u32>(s1[o], s1[o + 1u], s1[o + 2u], s1[o + 3u]);
            q1 = vec4<u32>(s1[o + 4u], s1[o + 5u], s1[o + 6u], s1[o + 7u]);
            y = vec2<f32>(bitcast<f32>(s1[bd + 2u * b]), bitcast<f32>(s1[bd + 2u * b + 1u]));
        }
        put_b(lid, q0, q1);
        Bd[ai][ac] = y.x; Bd[16u + ai][ac] = y.y;
        workgroupBarrier();
        let db0 = Bd[tc];
        let db1 = Bd[tc + 1u];
        let sb0 = Bd[16u + tc];
        let sb1 = Bd[16u + tc + 1u];
        let ma0 = Ad[32u + tr];
        let ma1 = Ad[32u + tr + 1u];
        var t0 = zs;
        var t1 = zs;
        for (var j = 0u; j < 8u; j++) {
            let b0 = Bq[j * 16u + tc];
            let b1 = Bq[j * 16u + tc + 1u];
            t0 = acc8(t0, Aq[j * 16u + tr], b0, b1);
            t1 = acc8(t1, Aq[j * 16u + tr + 1u], b0, b1);
            if (HALVES && j == 3u) {
                // the first half's scales; the second's below
                let da0 = Ad[tr];
                let da1 = Ad[tr + 1u];
                let z4 = vec4<f32>(0.0);
                m00 = fold(m00, t0.c0, t0.c1, t0.c2, t0.c3, da0, db0, z4, z4);
                m01 = fold(m01, t0.c4, t0.c5, t0.c6, t0.c7, da0, db1, z4, z4);
                m10 = fold(m10, t1.c0, t1.c1, t1.c2, t1.c3, da1, db0, z4, z4);
                m11 = fold(m11, t1.c4, t1.c5, t1.c6, t1.c7, da1, db1, z4, z4);
                t0 = zs;
                t1 = zs;
            }
        }
        var h = 0u;
        if (HALVES) { h = 16u; }
        let da0 = Ad[h + tr];
        let da1 = Ad[h + tr + 1u];
        m00 = fold(m00, t0.c0, t0.c1, t0.c2, t0.c3, da0, db0, ma0, sb0);
        m01 = fold(m01, t0.c4, t0.c5, t0.c6, t0.c7, da0, db1, ma0, sb1);
        m10 = fold(m10, t1.c0, t1.c1, t1.c2, t1.c3, da1, db0, ma1, sb0);
        m11 = fold(m11, t1.c4, t1.c5, t1.c6, t1.c7, da1, db1, ma1, sb1);
        workgroupBarrier();
    }
    return Acc(m00, m01, m10, m11);
}
