//@ common
// The integer-dot path's weight blocks: `wblk(row, kb)` unpacks 32-element
// block kb of the s0 row at byte `row` into eight words of four signed
// bytes (elements 4j..4j+3 in word j: `lo` words 0..3, `hi` 4..7) and the
// f32 terms that turn integer sums into the product: element e is
// `sd.x · q` (e < 16) or `sd.y · q` (e >= 16), plus `m`. The Rust side
// (`ops/matmul/intdot.rs`) includes the dequantizers' `words` section for
// s0 before this, then the section of s0's type.
struct WB { lo: vec4<u32>, hi: vec4<u32>, sd: vec2<f32>, m: f32 }

const NIB: vec4<u32> = vec4<u32>(0x0f0f0f0fu);

// The four bytes of each word less `k` (each byte holding 0..2k-1), as
// signed bytes: the top bit set first keeps borrows inside each byte.
fn sub_bytes(x: vec4<u32>, k: u32) -> vec4<u32> {
    let hi = vec4<u32>(0x80808080u);
    return ((x | hi) - vec4<u32>(k * 0x01010101u)) ^ hi;
}

// Bits 0..3 of each of `h` in bit 4 of its four bytes.
fn hb4v(h: vec4<u32>) -> vec4<u32> {
    let one = vec4<u32>(1u);
    return ((h & one) | ((h & vec4<u32>(2u)) << vec4<u32>(7u)) | ((h & vec4<u32>(4u)) << vec4<u32>(14u))
        | ((h & vec4<u32>(8u)) << vec4<u32>(21u))) << vec4<u32>(4u);
}

// Four consecutive words from byte b.
fn w4(b: u32) -> vec4<u32> {
    return vec4<u32>(w_s0(b), w_s0(b + 4u), w_s0(b + 8u), w_s0(b + 12u));
}

//@ q4_0
// 18 B: f16 d, 16 B nibbles (element j: low nibble of byte j, j + 16 high); q - 8.
fn wblk(row: u32, kb: u32) -> WB {
    let b = row + kb * 18u;
    let d = h_s0(b);
    let x = w4(b + 2u);
    return WB(sub_bytes(x & NIB, 8u), sub_bytes((x >> vec4<u32>(4u)) & NIB, 8u), vec2<f32>(d), 0.0);
}

//@ q4_1
// 20 B: f16 d, f16 m, 16 B nibbles; d q + m.
fn wblk(row: u32, kb: u32) -> WB {
    let b = row + kb * 20u;
    let dm = unpack2x16float(w_s0(b));
    let x = w4(b + 4u);
    return WB(x & NIB, (x >> vec4<u32>(4u)) & NIB, vec2<f32>(dm.x), dm.y);
}

//@ q5_0
// 22 B: f16 d, u32 qh (bit e: element e's fifth bit), 16 B nibbles; q - 16.
fn wblk(row: u32, kb: u32) -> WB {
    let b = row + kb * 22u;
    let d = h_s0(b);
    let qh = vec4<u32>(w_s0(b + 2u));
    let x = w4(b + 6u);
    let lo = (x & NIB) | hb4v(qh >> vec4<u32>(0u, 4u, 8u, 12u));
    let hi = ((x >> vec4<u32>(4u)) & NIB) | hb4v(qh >> vec4<u32>(16u, 20u, 24u, 28u));
    return WB(sub_bytes(lo, 16u), sub_bytes(hi, 16u), vec2<f32>(d), 0.0);
}

//@ q5_1
// 24 B: f16 d, f16 m, u32 qh, 16 B nibbles; d q + m.
fn wblk(row: u32, kb: u32) -> WB {
    let b = row + kb * 24u;
    let dm = unpack2x16float(w_s0(b));
    let qh = vec4<u32>(w_s0(b + 4u));
    let x = w4(b + 8u);
    let lo = (x & NIB) | hb4v(qh >> vec4<u32>(0u, 4u, 8u, 12u));
    let hi = ((x >> vec4<u32>(4u)) & NIB) | hb4v(qh >> vec4<u32>(16u, 20u, 24u, 28u));
    return WB(lo, hi, vec2<f32>(dm.x), dm.y);
}

//@ q8_0
// 34 B: f16 d, 32 i8.
fn wblk(row: u32, kb: u32) -> WB {
    let b = row + kb * 34u;
    return WB(w4(b + 2u), w4(b + 18u), vec2<f32>(h_s0(b)), 0.0);
}

//@ q4_k
// 144 B super-blocks of 8 × 32: f16 d, f16 dmin, 12 B 6-bit scales and
// mins, 128 B nibbles (sub-block j: bytes 32 (j / 2) .., high nibbles when j
// is odd); d sc q - dmin mn.
fn wblk(row: u32, kb: u32) -> WB {
    let b = row + (kb >> 3u) * 144u;
    let j = kb & 7u;
    let s = k_scale_s0(b, j * 4u);
    let o = b + 16u + 32u * (j >> 1u);
    let sh = vec4<u32>(4u * (j & 1u));
    return WB((w4(o) >> sh) & NIB, (w4(o + 16u) >> sh) & NIB, vec2<f32>(s.x), -s.y);
}

//@ q6_k
// 210 B super-blocks of 8 × 32: 128 B low nibbles, 64 B high 2 bits, 16 i8
// scales (one per 16), f16 d; d sc (q - 32). Sub-block j = 4 h + k: low
// nibble k / 2 of bytes 64 h + 32 (k % 2) .., bits 2k of bytes 128 + 32 h ...
fn wblk(row: u32, kb: u32) -> WB {
    let b = row + (kb >> 3u) * 210u;
    let j = kb & 7u;
    let h = j >> 2u;
    let k = j & 3u;
    let o = b + 64u * h + 32u * (k & 1u);
    let q = b + 128u + 32u * h;
    let sh = vec4<u32>(4u * (k >> 1u));
    let sq = vec4<u32>(2u * k);
    let three = vec4<u32>(0x03030303u);
    let lo = ((w4(o) >> sh) & NIB) | (((w4(q) >> sq) & three) << vec4<u32>(4u));
    let hi = ((w4(o + 16u) >> sh) & NIB) | (((w4(q + 16u) >> sq) & three) << vec4<u32>(4u));
    let sc = w_s0(b + 192u + 2u * j);
    let s2 = vec2<f32>(f32(bitcast<i32>(sc << 24u) >> 24u), f32(bitcast<i32>(sc << 16u) >> 24u));
    return WB(sub_bytes(lo, 32u), sub_bytes(hi, 32u), h_s0(b + 208u) * s2, 0.0);
}
