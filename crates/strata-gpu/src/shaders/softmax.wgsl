// SOFT_MAX: one workgroup per row; x·scale (P.f.x) + slope·mask (s1, rows
// broadcast over dims 2 and 3), optional sinks (s2, one per head); a row
// whose logits are all -inf is all zeros. Each invocation writes only the
// elements it read, so dst may alias s0.
const WGS: u32 = 256u;

fn logit(i: u32, i1: u32, i2: u32, i3: u32, slope: f32) -> f32 {
    var x = LD0(addr(0u, i, i1, i2, i3)) * P.f.x;
    if (HAS_MASK) {
        let m = P.ne[1];
        x += slope * MASK_LD(addr(1u, i, i1, i2 % m.z, i3 % m.w));
    }
    return x;
}

fn row_main(i1: u32, i2: u32, i3: u32, lid: u32) {
    let n = P.ne[0].x;
    let slope = alibi_slope(i2);
    var m = -3.4028234663852886e38;
    for (var i = lid; i < n; i += WGS) {
        let x = logit(i, i1, i2, i3, slope);
        if (!is_masked(x)) { m = max(m, x); }
    }
    m = wg_max(lid, m);
    // every logit masked: zeros (with or without a sink)
    if (m <= -3.4028234663852886e38) {
        for (var i = lid; i < n; i += WGS) { ST(addr(4u, i, i1, i2, i3), 0.0); }
        return;
    }
    var sink = 0.0;
    if (HAS_SINKS) {
        sink = ld_f32_s2(P.off[2] + 4u * i2);
        m = max(m, sink);
    }
    var s = 0.0;
    for (var i = lid; i < n; i += WGS) {
        let x = logit(i, i1, i2, i3, slope);
        s += select(exp(x - m), 0.0, is_masked(x));
    }
    s = wg_sum(lid, s);
    if (HAS_SINKS) { s += exp(sink - m); }
    let inv = 1.0 / s;
    for (var i = lid; i < n; i += WGS) {
        let x = logit(i, i1, i2, i3, slope);
        ST(addr(4u, i, i1, i2, i3), select(exp(x - m), 0.0, is_masked(x)) * inv);
    }
}
