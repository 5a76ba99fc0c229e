
// Super-block (256) quantizers: IQ4_XS, Q6_K, Q4_K, Q5_K, Q3_K, Q2_K, as
// crates/strata/src/quant implements ggml's reference ones (no importance
// weights). With blocks of 32 these compile but are never called.

// Round to nearest, ties to even, as ggml's nearest_int (|v| < 2^22).
fn nearest_int(v: f32) -> i32 {
    let t = v + 12582912.0;
    return i32(bitcast<u32>(t) & 0x7fffffu) - 0x400000;
}

// v rounded to f16 and back (the value a stored scale reads back as).
fn f16_round(v: f32) -> f32 {
    return unpack2x16float(f16_bits(v)).x;
}

// A super-block holding NaN or inf: zero bytes, a NaN f16 at byte `d`.
fn nan_block(o: u32, d: u32) {
    for (var b = 0u; b < BLOCK_BYTESu; b++) { st_u8(o + b, 0u); }
    st_u16(o + d, 0x7e00u);
}

// IQ4_XS (136 B): f16 d, u16 scales_h, 4 B scales_l, 128 B qs; eight
// 6-bit sub-block scales relative to d = -max / 32, indices re-picked
// against them.
fn quant_iq4_xs(o: u32) {
    if (nonfinite(256u)) { nan_block(o, 0u); return; }
    var sc: array<f32, 8>;
    var m = vec2<f32>(0.0, 0.0);
    for (var j = 0u; j < 8u; j++) {
        sc[j] = iq4_scale(32u * j, 7);
        m = smax(m, sc[j]);
    }
    let d = -m.x / 32.0;
    st_u16(o, f16_bits(d));
    let id = inv_or_zero(d);
    var sh = 0u;
    var sl = array<u32, 4>(0u, 0u, 0u, 0u);
    for (var j = 0u; j < 8u; j++) {
        let l = clamp(nearest_int(id * sc[j]), -32, 31);
        let idl = inv_or_zero(d * f32(l));
        for (var k = 32u * j; k < 32u * j + 32u; k++) { lv[k] = iq4_index(idl * xb[k]); }
        let u = u32(l + 32);
        sl[j / 2u] |= (u & 15u) << (4u * (j % 2u));
        sh |= (u >> 4u) << (2u * j);
    }
    st_u16(o + 2u, sh);
    for (var j = 0u; j < 4u; j++) { st_u8(o + 4u + j, sl[j]); }
    for (var j = 0u; j < 8u; j++) { iq4_pack(32u * j, o + 8u + 16u * j); }
}

// Sum w x l and sum w l^2 (w = x^2) over the n values from xb[base] for the
// symmetric grid of iscale (levels in -nmax..nmax-1); keeps the levels
// (+ nmax) in lv when `keep`.
fn qx_sums(base: u32, n: u32, iscale: f32, nmax: i32, keep: bool) -> vec2<f32> {
    var sumlx = 0.0;
    var suml2 = 0.0;
    for (var k = base; k < base + n; k++) {
        let v = xb[k];
        let qi = clamp(nearest_int(iscale * v), -nmax, nmax - 1);
        if (keep) { lv[k] = u32(qi + nmax); }
        let q = f32(qi);
        let w = v * v;
        sumlx += w * v * q;
        suml2 += w * q * q;
    }
    return vec2<f32>(sumlx, suml2);
}

// ggml's make_qx_quants (rmse_type 1, no importance weights) over the n
// values from xb[base]: the scale, levels in lv.
fn make_qx(base: u32, n: u32, nmax: i32) -> f32 {
    let m = signed_amax(base, n);
    if (m.y < 1e-15) {
        for (var k = base; k < base + n; k++) { lv[k] = 0u; }
        return 0.0;
    }
    let s = qx_sums(base, n, -f32(nmax) / m.x, nmax, true);
    var scale = 0.0;
    if (s.y != 0.0) { scale = s.x / s.y; }
    var best = scale * s.x;
    for (var t = -9; t <= 9; t++) {
        if (t == 0) { continue; }
        let iscale = -(f32(nmax) + 0.1 * f32(t)) / m.x;
        let u = qx_sums(base, n, iscale, nmax, false);
        if (u.y > 0.0 && u.x * u.x > best * u.y) {
            _ = qx_sums(base, n, iscale, nmax, true);
            scale = u.x / u.y;
            best = scale * u.x;
        }
    }
    return scale;
}

var<private> gsc: array<f32, 16>;

// The scales of the 16 sub-blocks of 16 in gsc (make_q3 with nmax 4 for
// Q3_K, else make_qx with nmax 32 for Q6_K) and their signed maximum.
fn group16_scales(q3: bool) -> vec2<f32> {
    var m = vec2<f32>(0.0, 0.0);
    for (var j = 0u; j < 16u; j++) {
        if (q3) { gsc[j] = make_q3(16u * j, 16u, 4); } else { gsc[j] = make_qx(16u * j, 16u, 32); }
        m = smax(m, gsc[j]);
    }
    return m;
}

// Q6_K (210 B): 128 B ql, 64 B qh, 16 x i8 scales, f16 d.
fn quant_q6_k(o: u32) {
    if (nonfinite(256u)) { nan_block(o, 208u); return; }
    let m = group16_scales(false);
    if (m.y < 1e-15) {
        for (var b = 0u; b < 210u; b++) { st_u8(o + b, 0u); }
        return;
    }
    let iscale = -128.0 / m.x;
    st_u16(o + 208u, f16_bits(1.0 / iscale));
    let d = f16_round(1.0 / iscale);
    for (var j = 0u; j < 16u; j++) {
        let s = min(nearest_int(iscale * gsc[j]), 127);
        st_u8(o + 192u + j, bitcast<u32>(s) & 0xffu);
        // the stored byte read back as i8
        let dl = d * f32((s << 24u) >> 24u);
        if (dl == 0.0) { continue; }
        for (var k = 16u * j; k < 16u * j + 16u; k++) {
            lv[k] = u32(clamp(nearest_int(xb[k] / dl), -32, 31) + 32);
        }
    }
    for (var h = 0u; h < 2u; h++) {
        for (var i = 0u; i < 32u; i++) {
            let e = 128u * h + i;
            st_u8(o + 64u * h + i, (lv[e] & 15u) | ((lv[e + 64u] & 15u) << 4u));
            st_u8(o + 64u * h + 32u + i, (lv[e + 32u] & 15u) | ((lv[e + 96u] & 15u) << 4u));
            var qh = 0u;
            for (var k = 0u; k < 4u; k++) { qh |= (lv[e + 32u * k] >> 4u) << (2u * k); }
            st_u8(o + 128u + 32u * h + i, qh);
        }
    }
}

// The weight of value v in make_qkx2: |v| (Q2_K, `mad`) or av_x + |v|.
fn qkx2_w(v: f32, av_x: f32, mad: bool) -> f32 {
    if (mad) { return abs(v); }
    return av_x + abs(v);
}

// The error of a difference: absolute (`mad`) or squared.
fn qkx2_err(d: f32, mad: bool) -> f32 {
    if (mad) { return abs(d); }
    return d * d;
}

// ggml's make_qkx2_quants over the n (<= 32) values from xb[base], with
// weights |x| and absolute error (`mad`, Q2_K) or weights rms + |x| and
// squared error (Q4_K, Q5_K): returns (scale, -min), levels in lv.
fn make_qkx2(base: u32, n: u32, nmax: i32, rmin: f32, nstep: i32, mad: bool) -> vec2<f32> {
    var sum_x2 = 0.0;
    for (var k = base; k < base + n; k++) { sum_x2 += xb[k] * xb[k]; }
    let av_x = sqrt(sum_x2 / f32(n));
    var mn = xb[base];
    var mx = xb[base];
    var sum_w = qkx2_w(xb[base], av_x, mad);
    var sum_x = sum_w * xb[base];
    for (var k = base + 1u; k < base + n; k++) {
        let v = xb[k];
        if (v < mn) { mn = v; }
        if (v > mx) { mx = v; }
        let w = qkx2_w(v, av_x, mad);
        sum_w += w;
        sum_x += w * v;
    }
    if (mn > 0.0) { mn = 0.0; }
    if (mx == mn) {
        for (var k = base; k < base + n; k++) { lv[k] = 0u; }
        return vec2<f32>(0.0, -mn);
    }
    var iscale = f32(nmax) / (mx - mn);
    var scale = 1.0 / iscale;
    var best = 0.0;
    for (var k = base; k < base + n; k++) {
        let q = clamp(nearest_int(iscale * (xb[k] - mn)), 0, nmax);
        lv[k] = u32(q);
        let diff = scale * f32(q) + mn - xb[k];
        best += qkx2_w(xb[k], av_x, mad) * qkx2_err(diff, mad);
    }
    var aux: array<u32, 32>;
    for (var t = 0; t <= nstep; t++) {
        iscale = (rmin + 0.1 * f32(t) + f32(nmax)) / (mx - mn);
        var sum_l = 0.0;
        var sum_l2 = 0.0;
        var sum_xl = 0.0;
        for (var k = 0u; k < n; k++) {
            let v = xb[base + k];
            let qi = clamp(nearest_int(iscale * (v - mn)), 0, nmax);
            aux[k] = u32(qi);
            let w = qkx2_w(v, av_x, mad);
            let q = f32(qi);
            sum_l += w * q;
            sum_l2 += w * q * q;
            sum_xl += w * q * v;
        }
        let det = sum_w * sum_l2 - sum_l * sum_l;
        if (det > 0.0) {
            var this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
            var this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
            if (this_min > 0.0) {
                this_min = 0.0;
                this_scale = sum_xl / sum_l2;
            }
            var cur = 0.0;
            for (var k = 0u; k < n; k++) {
                let diff = this_scale * f32(aux[k]) + this_min - xb[base + k];
                cur += qkx2_w(xb[base + k], av_x, mad) * qkx2_err(diff, mad);
            }
            if (cur < best) {
                for (var k = 0u; k < n; k++) { lv[base + k] = aux[k]; }
                best = cur;
                scale = this_scale;
                mn = this_min;
            }
        }
    }
    return vec2<f32>(scale, -mn);
}

// Q4_K / Q5_K's shared part: fits the eight sub-blocks, writes d, dmin and
// the 12 scale bytes, and leaves every element's level (0..nmax, against
// the stored scales) in lv.
fn quant_k_scales(o: u32, nmax: i32, rmin: f32, nstep: i32) {
    var sc: array<f32, 8>;
    var mi: array<f32, 8>;
    var max_scale = 0.0;
    var max_min = 0.0;
    for (var j = 0u; j < 8u; j++) {
        let r = make_qkx2(32u * j, 32u, nmax, rmin, nstep, false);
        sc[j] = r.x;
        mi[j] = r.y;
        if (r.x > max_scale) { max_scale = r.x; }
        if (r.y > max_min) { max_min = r.y; }
    }
    var inv_scale = 0.0;
    if (max_scale > 0.0) { inv_scale = 63.0 / max_scale; }
    var inv_min = 0.0;
    if (max_min > 0.0) { inv_min = 63.0 / max_min; }
    var ls: array<u32, 8>;
    var lm: array<u32, 8>;
    for (var j = 0u; j < 8u; j++) {
        // ggml keeps the rounded values in a uint8_t before capping at 63
        ls[j] = min(bitcast<u32>(nearest_int(inv_scale * sc[j])) & 0xffu, 63u);
        lm[j] = min(bitcast<u32>(nearest_int(inv_min * mi[j])) & 0xffu, 63u);
    }
    for (var j = 0u; j < 4u; j++) {
        st_u8(o + 4u + j, ls[j] | ((ls[j + 4u] >> 4u) << 6u));
        st_u8(o + 8u + j, lm[j] | ((lm[j + 4u] >> 4u) << 6u));
        st_u8(o + 12u + j, (ls[j + 4u] & 15u) | ((lm[j + 4u] & 15u) << 4u));
    }
    st_u16(o, f16_bits(max_scale / 63.0));
    st_u16(o + 2u, f16_bits(max_min / 63.0));
    let d = f16_round(max_scale / 63.0);
    let dmin = f16_round(max_min / 63.0);
    for (var j = 0u; j < 8u; j++) {
        let dl = d * f32(ls[j]);
        if (dl == 0.0) { continue; }
        let ml = dmin * f32(lm[j]);
        for (var k = 32u * j; k < 32u * j + 32u; k++) {
            lv[k] = u32(clamp(nearest_int((xb[k] + ml) / dl), 0, nmax));
        }
    }
}

// Q4_K (144 B): f16 d, f16 dmin, 12 B scales, 128 B qs.
fn quant_q4_k(o: u32) {
    if (nonfinite(256u)) { nan_block(o, 0u); return; }
    quant_k_scales(o, 15, -1.0, 20);
    for (var i = 0u; i < 4u; i++) {
        for (var l = 0u; l < 32u; l++) {
            st_u8(o + 16u + 32u * i + l, lv[64u * i + l] | (lv[64u * i + 32u + l] << 4u));
        }
    }
}

// Q5_K (176 B): f16 d, f16 dmin, 12 B scales, 32 B qh, 128 B qs.
fn quant_q5_k(o: u32) {
    if (nonfinite(256u)) { nan_block(o, 0u); return; }
    quant_k_scales(o, 31, -0.5, 15);
    for (var m = 0u; m < 32u; m++) {
        var qh = 0u;
        for (var b = 0u; b < 8u; b++) { qh |= ((lv[32u * b + m] >> 4u) & 1u) << b; }
        st_u8(o + 16u + m, qh);
    }
    for (var i = 0u; i < 4u; i++) {
        for (var l = 0u; l < 32u; l++) {
            let a = lv[64u * i + l] & 15u;
            let b = lv[64u * i + 32u + l] & 15u;
            st_u8(o + 48u + 32u * i + l, a | (b << 4u));
        }
    }
}

// Packs the low two bits of the 256 levels in lv into 64 bytes at byte o
// (element 128 h + 32 k + l at bits 2 k of byte 32 h + l).
fn pack_q2(o: u32) {
    for (var h = 0u; h < 2u; h++) {
        for (var l = 0u; l < 32u; l++) {
            let e = 128u * h + l;
            var b = 0u;
            for (var k = 0u; k < 4u; k++) { b |= (lv[e + 32u * k] & 3u) << (2u * k); }
            st_u8(o + 32u * h + l, b);
        }
    }
}

// Q2_K (84 B): 16 B scales (low nibble scale, high nibble min), 64 B qs,
// f16 d, f16 dmin.
fn quant_q2_k(o: u32) {
    if (nonfinite(256u)) { nan_block(o, 80u); return; }
    var sc: array<f32, 16>;
    var mi: array<f32, 16>;
    var max_scale = 0.0;
    var max_min = 0.0;
    for (var j = 0u; j < 16u; j++) {
        let r = make_qkx2(16u * j, 16u, 3, -0.5, 15, true);
        sc[j] = r.x;
        mi[j] = r.y;
        if (r.x > max_scale) { max_scale = r.x; }
        if (r.y > max_min) { max_min = r.y; }
    }
    var by: array<u32, 16>;
    for (var j = 0u; j < 16u; j++) {
        var b = 0u;
        if (max_scale > 0.0) { b = bitcast<u32>(nearest_int(15.0 / max_scale * sc[j])) & 0xffu; }
        if (max_min > 0.0) { b |= bitcast<u32>(nearest_int(15.0 / max_min * mi[j]) << 4u) & 0xffu; }
        by[j] = b;
        st_u8(o + j, b);
    }
    var d = 0.0;
    if (max_scale > 0.0) { d = max_scale / 15.0; }
    var dmin = 0.0;
    if (max_min > 0.0) { dmin = max_min / 15.0; }
    st_u16(o + 80u, f16_bits(d));
    st_u16(o + 82u, f16_bits(dmin));
    d = f16_round(d);
    dmin = f16_round(dmin);
    for (var j = 0u; j < 16u; j++) {
        let dl = d * f32(by[j] & 15u);
        if (dl == 0.0) { continue; }
        let ml = dmin * f32(by[j] >> 4u);
        for (var k = 16u * j; k < 16u * j + 16u; k++) {
            lv[k] = u32(clamp(nearest_int((xb[k] + ml) / dl), 0, 3));
        }
    }
    pack_q2(o + 16u);
}

// ggml's make_q3_quants (with rmse) over the n values from xb[base]: the
// symmetric absolute-maximum grid, then single levels moved while that
// improves the weighted (x^2) fit, up to five passes; levels (+ nmax) in
// lv, returns the scale.
fn make_q3(base: u32, n: u32, nmax: i32) -> f32 {
    let m = signed_amax(base, n);
    if (m.y < 1e-15) {
        for (var k = base; k < base + n; k++) { lv[k] = 0u; }
        return 0.0;
    }
    let iscale = -f32(nmax) / m.x;
    var l: array<i32, 32>;
    var sumlx = 0.0;
    var suml2 = 0.0;
    for (var i = 0u; i < n; i++) {
        let x = xb[base + i];
        l[i] = clamp(nearest_int(iscale * x), -nmax, nmax - 1);
        let w = x * x;
        let q = f32(l[i]);
        sumlx += w * x * q;
        suml2 += w * q * q;
    }
    for (var it = 0; it < 5; it++) {
        var changed = false;
        for (var i = 0u; i < n; i++) {
            let x = xb[base + i];
            let w = x * x;
            let li = f32(l[i]);
            var slx = sumlx - w * x * li;
            if (slx > 0.0) {
                var sl2 = suml2 - w * li * li;
                let new_l = clamp(nearest_int(x * sl2 / slx), -nmax, nmax - 1);
                if (new_l != l[i]) {
                    let nl = f32(new_l);
                    slx += w * x * nl;
                    sl2 += w * nl * nl;
                    if (sl2 > 0.0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
                        l[i] = new_l;
                        sumlx = slx;
                        suml2 = sl2;
                        changed = true;
                    }
                }
            }
        }
        if (!changed) { break; }
    }
    for (var i = 0u; i < n; i++) { lv[base + i] = u32(l[i] + nmax); }
    if (suml2 > 0.0) { return sumlx / suml2; }
    return 0.0;
}

// Q3_K (110 B): 32 B hmask, 64 B qs, 12 B scales, f16 d.
fn quant_q3_k(o: u32) {
    if (nonfinite(256u)) { nan_block(o, 108u); return; }
    let mx = group16_scales(true).x;
    var by: array<u32, 12>;
    for (var j = 0u; j < 12u; j++) { by[j] = 0u; }
    var d = 0.0;
    if (mx != 0.0) {
        let iscale = -32.0 / mx;
        for (var j = 0u; j < 16u; j++) {
            // ggml keeps the rounded value in an int8_t before clamping
            let r = (nearest_int(iscale * gsc[j]) << 24u) >> 24u;
            let l = u32(clamp(r, -32, 31) + 32);
            if (j < 8u) { by[j] = l & 15u; } else { by[j - 8u] |= (l & 15u) << 4u; }
            by[8u + j % 4u] |= (l >> 4u) << (2u * (j / 4u));
        }
        d = 1.0 / iscale;
    }
    st_u16(o + 108u, f16_bits(d));
    for (var j = 0u; j < 12u; j++) { st_u8(o + 96u + j, by[j]); }
    d = f16_round(d);
    for (var j = 0u; j < 16u; j++) {
        var lo = by[j % 8u] & 15u;
        if (j >= 8u) { lo = by[j - 8u] >> 4u; }
        let hi = (by[8u + j % 4u] >> (2u * (j / 4u))) & 3u;
        let dl = d * f32(i32(lo | (hi << 4u)) - 32);
        if (dl == 0.0) { continue; }
        for (var k = 16u * j; k < 16u * j + 16u; k++) {
            lv[k] = u32(clamp(nearest_int(xb[k] / dl), -4, 3) + 4);
        }
    }
    for (var m = 0u; m < 32u; m++) {
        var h = 0u;
        for (var b = 0u; b < 8u; b++) { h |= select(0u, 1u, lv[32u * b + m] > 3u) << b; }
        st_u8(o + m, h);
    }
    pack_q2(o + 32u);
}
