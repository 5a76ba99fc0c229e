// RMS_NORM fused with the MUL by its weight (issue #45), optionally after
// the ADD whose sum it normalizes (`HAS_ADD`): one workgroup per row of d;
// x = s0 (+ s2, the sum stored into s3, which shares d's buffer), all f32,
// the weight s1 broadcast over d: d = x / sqrt(mean(x^2) + eps) * s1.
// Each invocation writes only the elements it read, so d and s3 may alias
// the sources.
const WGS: u32 = 256u;

// Element i of row (i1, i2, i3) of x, the first time (storing the sum).
fn x_first(i: u32, i1: u32, i2: u32, i3: u32) -> f32 {
    if (HAS_ADD) {
        let v = ld_f32_s0(addr(0u, i, i1, i2, i3)) + ld_f32_s2(addr(2u, i, i1, i2, i3));
        s3[addr(3u, i, i1, i2, i3) >> 2u] = bitcast<u32>(v);
        return v;
    }
    return ld_f32_s0(addr(0u, i, i1, i2, i3));
}

// Element i of row (i1, i2, i3) of x again (the stored sum).
fn x_again(i: u32, i1: u32, i2: u32, i3: u32) -> f32 {
    if (HAS_ADD) { return ld_f32_s3(addr(3u, i, i1, i2, i3)); }
    return ld_f32_s0(addr(0u, i, i1, i2, i3));
}

fn row_main(i1: u32, i2: u32, i3: u32, lid: u32) {
    let n = P.ne[4].x;
    var q = 0.0;
    for (var i = lid; i < n; i += WGS) {
        let x = x_first(i, i1, i2, i3);
        q += x * x;
    }
    let scale = 1.0 / sqrt(wg_sum(lid, q) / f32(n) + P.f.x);
    let nw = P.ne[1];
    for (var i = lid; i < n; i += WGS) {
        let w = ld_f32_s1(addr(1u, i % nw.x, i1 % nw.y, i2 % nw.z, i3 % nw.w));
        ST(addr(4u, i, i1, i2, i3), x_again(i, i1, i2, i3) * scale * w);
    }
}
