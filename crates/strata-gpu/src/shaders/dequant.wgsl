//@ common
// Dequantizers: `dq_sK(row, g)` returns elements 8g..8g+7 of the row that
// starts at byte `row` of slot sK, as two vec4s. The Rust side
// (`ops/matmul/dequant.rs`) includes this section once, then for each slot
// the sections of its type with the slot's name and index substituted for
// the placeholders; for block types it appends `dq_sK`, which finds the
// block and calls `dqb_sK(block byte, group in block)`. Blocks are not word
// aligned: words are assembled from two loads where needed.
struct V8 { a: vec4<f32>, b: vec4<f32> }

// The four bytes of `x` as floats (unsigned; signed).
fn u4(x: u32) -> vec4<f32> {
    return vec4<f32>((vec4<u32>(x) >> vec4<u32>(0u, 8u, 16u, 24u)) & vec4<u32>(0xffu));
}
fn i4(x: u32) -> vec4<f32> {
    return vec4<f32>(bitcast<vec4<i32>>(vec4<u32>(x) << vec4<u32>(24u, 16u, 8u, 0u)) >> vec4<u32>(24u));
}

var<private> IQ4_KV: array<f32, 16> = array<f32, 16>(
    -127.0, -104.0, -83.0, -65.0, -49.0, -35.0, -22.0, -10.0,
    1.0, 13.0, 25.0, 38.0, 53.0, 69.0, 89.0, 113.0);

// The IQ4 values of the four nibble indices in the bytes of `x` (0..15 each).
fn kv4(x: u32) -> vec4<f32> {
    return vec4<f32>(IQ4_KV[x & 15u], IQ4_KV[(x >> 8u) & 15u], IQ4_KV[(x >> 16u) & 15u],
                     IQ4_KV[(x >> 24u) & 15u]);
}

// Bits 0..3 of h in the low bits of the four bytes.
fn hb4(h: u32) -> u32 {
    return (h & 1u) | ((h & 2u) << 7u) | ((h & 4u) << 14u) | ((h & 8u) << 21u);
}

//@ words
// The 4 bytes at any byte address; the f16 at an even one; one byte.
fn w_SLOT(b: u32) -> u32 {
    let w = b >> 2u;
    let s = (b & 3u) * 8u;
    let lo = SLOT[w];
    if (s == 0u) { return lo; }
    return (lo >> s) | (SLOT[w + 1u] << (32u - s));
}
fn h_SLOT(b: u32) -> f32 {
    return unpack2x16float(SLOT[b >> 2u] >> ((b & 2u) * 8u)).x;
}
fn b_SLOT(b: u32) -> u32 {
    return (SLOT[b >> 2u] >> ((b & 3u) * 8u)) & 0xffu;
}

// (scale, min) of K-quant sub-block j from the 12 packed bytes at s.
fn scale_min_SLOT(s: u32, j: u32) -> vec2<f32> {
    if (j < 4u) {
        return vec2<f32>(f32(b_SLOT(s + j) & 63u), f32(b_SLOT(s + j + 4u) & 63u));
    }
    let q = b_SLOT(s + j + 4u);
    let sc = (q & 15u) | ((b_SLOT(s + j - 4u) >> 6u) << 4u);
    let mn = (q >> 4u) | ((b_SLOT(s + j) >> 6u) << 4u);
    return vec2<f32>(f32(sc), f32(mn));
}
// (scale, min) of the group-g elements of the Q4_K / Q5_K block at b.
fn k_scale_SLOT(b: u32, g: u32) -> vec2<f32> {
    return unpack2x16float(w_SLOT(b)) * scale_min_SLOT(b + 4u, g >> 2u);
}

//@ float
// Float rows: any element stride, elements past ne0 read as 0; whole words
// when the type's section says the 8 elements are contiguous (`fast_SLOT`).
fn dq_SLOT(row: u32, g: u32) -> V8 {
    let e = g * 8u;
    let nb = P.nb[SLOTI].x;
    let k = P.ne[SLOTI].x;
    if (fast_SLOT(row, nb, e + 8u <= k)) { return dqf_SLOT(row, g); }
    var v: array<f32, 8>;
    for (var i = 0u; i < 8u; i++) {
        v[i] = select(0.0, ld_FTY_SLOT(row + (e + i) * nb), e + i < k);
    }
    return V8(vec4<f32>(v[0], v[1], v[2], v[3]), vec4<f32>(v[4], v[5], v[6], v[7]));
}

//@ f32
fn fast_SLOT(row: u32, nb: u32, whole: bool) -> bool { return nb == 4u && whole; }
fn dqf_SLOT(row: u32, g: u32) -> V8 {
    let w = (row >> 2u) + g * 8u;
    return V8(bitcast<vec4<f32>>(vec4<u32>(SLOT[w], SLOT[w + 1u], SLOT[w + 2u], SLOT[w + 3u])),
              bitcast<vec4<f32>>(vec4<u32>(SLOT[w + 4u], SLOT[w + 5u], SLOT[w + 6u], SLOT[w + 7u])));
}

//@ f16
fn fast_SLOT(row: u32, nb: u32, whole: bool) -> bool { return nb == 2u && whole && (row & 3u) == 0u; }
fn dqf_SLOT(row: u32, g: u32) -> V8 {
    let w = (row >> 2u) + g * 4u;
    return V8(vec4<f32>(unpack2x16float(SLOT[w]), unpack2x16float(SLOT[w + 1u])),
              vec4<f32>(unpack2x16float(SLOT[w + 2u]), unpack2x16float(SLOT[w + 3u])));
}

//@ bf16
fn fast_SLOT(row: u32, nb: u32, whole: bool) -> bool { return nb == 2u && whole && (row & 3u) == 0u; }
fn dqf_SLOT(row: u32, g: u32) -> V8 {
    let w = (row >> 2u) + g * 4u;
    let x = vec4<u32>(SLOT[w], SLOT[w + 1u], SLOT[w + 2u], SLOT[w + 3u]);
    let lo = bitcast<vec4<f32>>(x << vec4<u32>(16u));
    let hi = bitcast<vec4<f32>>(x & vec4<u32>(0xffff0000u));
    return V8(vec4<f32>(lo.x, hi.x, lo.y, hi.y), vec4<f32>(lo.z, hi.z, lo.w, hi.w));
}

//@ q4_0
// 18 B: f16 d, 16 B nibbles (element j low nibble of byte j, j+16 high).
fn dqb_SLOT(b: u32, g: u32) -> V8 {
    let d = h_SLOT(b);
    let o = b + 2u + (g & 1u) * 8u;
    let sh = (g >> 1u) * 4u;
    let x = (w_SLOT(o) >> sh) & 0x0f0f0f0fu;
    let y = (w_SLOT(o + 4u) >> sh) & 0x0f0f0f0fu;
    return V8((u4(x) - 8.0) * d, (u4(y) - 8.0) * d);
}

//@ q4_1
// 20 B: f16 d, f16 m, 16 B nibbles.
fn dqb_SLOT(b: u32, g: u32) -> V8 {
    let dm = unpack2x16float(w_SLOT(b));
    let o = b + 4u + (g & 1u) * 8u;
    let sh = (g >> 1u) * 4u;
    let x = (w_SLOT(o) >> sh) & 0x0f0f0f0fu;
    let y = (w_SLOT(o + 4u) >> sh) & 0x0f0f0f0fu;
    return V8(u4(x) * dm.x + dm.y, u4(y) * dm.x + dm.y);
}

//@ q5_0
// 22 B: f16 d, u32 qh (bit e: element e's fifth bit), 16 B nibbles.
fn dqb_SLOT(b: u32, g: u32) -> V8 {
    let d = h_SLOT(b);
    let qh = w_SLOT(b + 2u) >> (g * 8u);
    let o = b + 6u + (g & 1u) * 8u;
    let sh = (g >> 1u) * 4u;
    let x = ((w_SLOT(o) >> sh) & 0x0f0f0f0fu) | (hb4(qh) << 4u);
    let y = ((w_SLOT(o + 4u) >> sh) & 0x0f0f0f0fu) | (hb4(qh >> 4u) << 4u);
    return V8((u4(x) - 16.0) * d, (u4(y) - 16.0) * d);
}

//@ q5_1
// 24 B: f16 d, f16 m, u32 qh, 16 B nibbles.
fn dqb_SLOT(b: u32, g: u32) -> V8 {
    let dm = unpack2x16float(w_SLOT(b));
    let qh = w_SLOT(b + 4u) >> (g * 8u);
    let o = b + 8u + (g & 1u) * 8u;
    let sh = (g >> 1u) * 4u;
    let x = ((w_SLOT(o) >> sh) & 0x0f0f0f0fu) | (hb4(qh) << 4u);
    let y = ((w_SLOT(o + 4u) >> sh) & 0x0f0f0f0fu) | (hb4(qh >> 4u) << 4u);
    return V8(u4(x) * dm.x + dm.y, u4(y) * dm.x + dm.y);
}

//@ q8_0
// 34 B: f16 d, 32 i8.
fn dqb_SLOT(b: u32, g: u32) -> V8 {
    let d = h_SLOT(b);
    let o = b + 2u + g * 8u;
    return V8(i4(w_SLOT(o)) * d, i4(w_SLOT(o + 4u)) * d);
}

//@ q2_k
// 84 B: 16 B scales (low nibble scale, high min, per 16), 64 B 2-bit
// quants, f16 d, f16 dmin. Element e: byte 32 (e / 128) + e % 32, bits
// 2 ((e % 128) / 32).
fn dqb_SLOT(b: u32, g: u32) -> V8 {
    let e = g * 8u;
    let sc = b_SLOT(b + (g >> 1u));
    let dm = unpack2x16float(w_SLOT(b + 80u));
    let dl = dm.x * f32(sc & 15u);
    let ml = dm.y * f32(sc >> 4u);
    let o = b + 16u + 32u * (e >> 7u) + (e & 31u);
    let sh = 2u * ((e >> 5u) & 3u);
    let x = (w_SLOT(o) >> sh) & 0x03030303u;
    let y = (w_SLOT(o + 4u) >> sh) & 0x03030303u;
    return V8(u4(x) * dl - ml, u4(y) * dl - ml);
}

//@ q3_k
// 110 B: 32 B high-bit mask, 64 B 2-bit quants, 12 B 6-bit scales, f16 d.
fn dqb_SLOT(b: u32, g: u32) -> V8 {
    let e = g * 8u;
    let j = g >> 1u;
    var lo = b_SLOT(b + 96u + (j & 7u));
    lo = select(lo & 15u, lo >> 4u, j >= 8u);
    let hi = (b_SLOT(b + 104u + (j & 3u)) >> (2u * (j >> 2u))) & 3u;
    let dl = h_SLOT(b + 108u) * (f32(lo | (hi << 4u)) - 32.0);
    let o = b + 32u + 32u * (e >> 7u) + (e & 31u);
    let sh = 2u * ((e >> 5u) & 3u);
    let m = b + (e & 31u);
    let hs = e >> 5u;
    let x = ((w_SLOT(o) >> sh) & 0x03030303u) + (((w_SLOT(m) >> hs) & 0x01010101u) << 2u);
    let y = ((w_SLOT(o + 4u) >> sh) & 0x03030303u) + (((w_SLOT(m + 4u) >> hs) & 0x01010101u) << 2u);
    return V8((u4(x) - 4.0) * dl, (u4(y) - 4.0) * dl);
}

//@ q4_k
// 144 B: f16 d, f16 dmin, 12 B 6-bit scales and mins (per 32), 128 B nibbles
// (element e: byte 32 (e / 64) + e % 32, high nibble when (e / 32) is odd).
fn dqb_SLOT(b: u32, g: u32) -> V8 {
    let e = g * 8u;
    let s = k_scale_SLOT(b, g);
    let o = b + 16u + 32u * (e >> 6u) + (e & 31u);
    let sh = 4u * ((e >> 5u) & 1u);
    let x = (w_SLOT(o) >> sh) & 0x0f0f0f0fu;
    let y = (w_SLOT(o + 4u) >> sh) & 0x0f0f0f0fu;
    return V8(u4(x) * s.x - s.y, u4(y) * s.x - s.y);
}

//@ q5_k
// 176 B: as Q4_K, then 32 B high bits (element e: bit e / 32 of byte e % 32)
// before the 128 B of nibbles.
fn dqb_SLOT(b: u32, g: u32) -> V8 {
    let e = g * 8u;
    let s = k_scale_SLOT(b, g);
    let o = b + 48u + 32u * (e >> 6u) + (e & 31u);
    let sh = 4u * ((e >> 5u) & 1u);
    let m = b + 16u + (e & 31u);
    let hs = e >> 5u;
    let x = ((w_SLOT(o) >> sh) & 0x0f0f0f0fu) | (((w_SLOT(m) >> hs) & 0x01010101u) << 4u);
    let y = ((w_SLOT(o + 4u) >> sh) & 0x0f0f0f0fu) | (((w_SLOT(m + 4u) >> hs) & 0x01010101u) << 4u);
    return V8(u4(x) * s.x - s.y, u4(y) * s.x - s.y);
}

//@ q6_k
// 210 B: 128 B low nibbles, 64 B high 2 bits, 16 i8 scales, f16 d. Element
// e = 128 h + 32 k + i: nibble k / 2 of byte 64 h + 32 (k % 2) + i, bits 2k
// of byte 128 + 32 h + i.
fn dqb_SLOT(b: u32, g: u32) -> V8 {
    let e = g * 8u;
    let h = e >> 7u;
    let k = (e >> 5u) & 3u;
    let i = e & 31u;
    let sc = f32(bitcast<i32>(b_SLOT(b + 192u + (g >> 1u)) << 24u) >> 24u);
    let dl = h_SLOT(b + 208u) * sc;
    let o = b + 64u * h + 32u * (k & 1u) + i;
    let sh = 4u * (k >> 1u);
    let q = b + 128u + 32u * h + i;
    let x = ((w_SLOT(o) >> sh) & 0x0f0f0f0fu) | (((w_SLOT(q) >> (2u * k)) & 0x03030303u) << 4u);
    let y = ((w_SLOT(o + 4u) >> sh) & 0x0f0f0f0fu) | (((w_SLOT(q + 4u) >> (2u * k)) & 0x03030303u) << 4u);
    return V8((u4(x) - 32.0) * dl, (u4(y) - 32.0) * dl);
}

//@ iq4_nl
// 18 B: f16 d, 16 B of 4-bit indices into the IQ4 values (as Q4_0).
fn dqb_SLOT(b: u32, g: u32) -> V8 {
    let d = h_SLOT(b);
    let o = b + 2u + (g & 1u) * 8u;
    let sh = (g >> 1u) * 4u;
    return V8(kv4(w_SLOT(o) >> sh) * d, kv4(w_SLOT(o + 4u) >> sh) * d);
}

//@ iq4_xs
// 136 B: f16 d, u16 scales_h (2 bits per 32), 4 B scales_l (4 bits per
// 32), 8 x 16 B of indices laid out as IQ4_NL's.
fn dqb_SLOT(b: u32, g: u32) -> V8 {
    let j = g >> 2u;
    let lo = (b_SLOT(b + 4u + (j >> 1u)) >> (4u * (j & 1u))) & 15u;
    let hi = (w_SLOT(b + 2u) >> (2u * j)) & 3u;
    let dl = h_SLOT(b) * (f32(lo | (hi << 4u)) - 32.0);
    let o = b + 8u + 16u * j + (g & 1u) * 8u;
    let sh = ((g >> 1u) & 1u) * 4u;
    return V8(kv4(w_SLOT(o) >> sh) * dl, kv4(w_SLOT(o + 4u) >> sh) * dl);
}
