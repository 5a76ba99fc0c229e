// Block quantizers (ggml's reference ones, no importance weights), as
// crates/strata/src/quant implements them: each quantizes the block of 32
// (or 256: K-quants, IQ4_XS) values of `xb` into the block at byte `o` of the destination
// (even: f16 scales are stored as 16-bit words).

var<private> xb: array<f32, BLOCK_N>;
// table indices / levels of the elements of `xb`
var<private> lv: array<u32, BLOCK_N>;

var<private> IQ4NL: array<f32, 16> = array<f32, 16>(
    -127.0, -104.0, -83.0, -65.0, -49.0, -35.0, -22.0, -10.0,
    1.0, 13.0, 25.0, 38.0, 53.0, 69.0, 89.0, 113.0);

fn inv_or_zero(d: f32) -> f32 {
    if (d != 0.0) { return 1.0 / d; }
    return 0.0;
}

// C roundf (ties away from zero) into -128..127.
fn round_i8(r: f32) -> u32 {
    let c = clamp(r, -128.0, 127.0);
    let t = i32(c);
    let fr = c - f32(t);
    return bitcast<u32>(t + select(0, 1, fr >= 0.5) - select(0, 1, fr <= -0.5)) & 0xffu;
}

// Q8_0 (34 B): f16 d = amax / 127, 32 x i8.
fn quant_q8_0(o: u32) {
    var amax = 0.0;
    for (var k = 0u; k < 32u; k++) { amax = max(amax, abs(xb[k])); }
    let d = amax / 127.0;
    let id = inv_or_zero(d);
    st_u16(o, f16_bits(d));
    for (var k = 0u; k < 32u; k++) { st_u8(o + 2u + k, round_i8(xb[k] * id)); }
}

// (max, amax) updated with v: the value of largest magnitude with its
// sign, and that magnitude (the first on ties).
fn smax(m: vec2<f32>, v: f32) -> vec2<f32> {
    if (abs(v) > m.y) { return vec2<f32>(v, abs(v)); }
    return m;
}

// The element of xb[base..base + n] of largest magnitude, with its sign,
// and that magnitude (first on ties).
fn signed_amax(base: u32, n: u32) -> vec2<f32> {
    var m = vec2<f32>(0.0, 0.0);
    for (var k = base; k < base + n; k++) { m = smax(m, xb[k]); }
    return m;
}

// True when xb[0..n] holds NaN or an infinity.
fn nonfinite(n: u32) -> bool {
    var bad = false;
    for (var k = 0u; k < n; k++) {
        if ((bitcast<u32>(xb[k]) & 0x7f800000u) == 0x7f800000u) { bad = true; }
    }
    return bad;
}

// Q4_0 (18 B): f16 d = max / -8, nibbles q = min(15, trunc(x / d + 8.5)),
// element j low and j + 16 high in byte j.
fn quant_q4_0(o: u32) {
    let d = signed_amax(0u, 32u).x / -8.0;
    let id = inv_or_zero(d);
    st_u16(o, f16_bits(d));
    for (var j = 0u; j < 16u; j++) {
        let qa = u32(clamp(i32(xb[j] * id + 8.5), 0, 15));
        let qb = u32(clamp(i32(xb[j + 16u] * id + 8.5), 0, 15));
        st_u8(o + 2u + j, qa | (qb << 4u));
    }
}

// The index of the IQ4_NL value nearest x (ties to the upper one).
fn iq4_index(x: f32) -> u32 {
    if (x <= IQ4NL[0]) { return 0u; }
    if (x >= IQ4NL[15]) { return 15u; }
    var lo = 0u;
    var hi = 15u;
    loop {
        if (hi - lo <= 1u) { break; }
        let mid = (lo + hi) / 2u;
        if (x < IQ4NL[mid]) { hi = mid; } else { lo = mid; }
    }
    if (x - IQ4NL[hi - 1u] < IQ4NL[hi] - x) { return hi - 1u; }
    return hi;
}

// Sum w q x and sum w q^2 (w = x^2) over the 32 values from xb[base] for
// the table values nearest id * x; keeps the indices in lv when `keep`.
fn iq4_fit(base: u32, id: f32, keep: bool) -> vec2<f32> {
    var sumqx = 0.0;
    var sumq2 = 0.0;
    for (var k = base; k < base + 32u; k++) {
        let v = xb[k];
        let l = iq4_index(id * v);
        if (keep) { lv[k] = l; }
        let q = IQ4NL[l];
        let w = v * v;
        sumqx += w * q * v;
        sumq2 += w * q * q;
    }
    return vec2<f32>(sumqx, sumq2);
}

// The scale of the 32 values from xb[base] (0 when all are ~0, leaving lv
// alone): the least-squares refit of the absolute-maximum guess, then of
// the 2 ntry + 1 trial scales (none for ntry < 0); lv keeps the guess's
// indices.
fn iq4_scale(base: u32, ntry: i32) -> f32 {
    let m = signed_amax(base, 32u);
    if (m.y < 1e-15) { return 0.0; }
    let v0 = IQ4NL[0];
    var d0 = m.x / v0;
    if (ntry > 0) { d0 = -m.x / v0; }
    let s = iq4_fit(base, 1.0 / d0, true);
    var d = 0.0;
    if (s.y > 0.0) { d = s.x / s.y; }
    var best = d * s.x;
    for (var t = -ntry; t <= ntry; t++) {
        let id = f32(t + i32(v0)) / m.x;
        let u = iq4_fit(base, id, false);
        if (u.y > 0.0 && u.x * u.x > best * u.y) {
            d = u.x / u.y;
            best = d * u.x;
        }
    }
    return d;
}

// Packs the 32 indices from lv[base] into 16 bytes at byte o (element j
// low, j + 16 high).
fn iq4_pack(base: u32, o: u32) {
    for (var j = 0u; j < 16u; j++) { st_u8(o + j, lv[base + j] | (lv[base + j + 16u] << 4u)); }
}

// IQ4_NL (18 B) without trial scales (ggml's from_float); a block holding
// NaN or inf gets a NaN scale and zero indices.
fn quant_iq4_nl(o: u32) {
    if (nonfinite(32u)) {
        st_u16(o, 0x7e00u);
        for (var j = 0u; j < 16u; j++) { st_u8(o + 2u + j, 0u); }
        return;
    }
    for (var k = 0u; k < 32u; k++) { lv[k] = 8u; }
    st_u16(o, f16_bits(iq4_scale(0u, -1)));
    iq4_pack(0u, o + 2u);
}
