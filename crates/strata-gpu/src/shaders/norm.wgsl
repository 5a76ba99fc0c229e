// NORM / RMS_NORM: one workgroup per row of s0 (f32), statistics reduced in
// shared memory; dst = (x - mean) / sqrt(var + eps), mean = 0 for RMS_NORM.
// Each invocation writes only the elements it read, so dst may alias s0.
const WGS: u32 = 256u;

fn row_main(i1: u32, i2: u32, i3: u32, lid: u32) {
    let n = P.ne[4].x;
    var mean = 0.0;
    if (CENTER) {
        var s = 0.0;
        for (var i = lid; i < n; i += WGS) { s += LD0(addr(0u, i, i1, i2, i3)); }
        mean = wg_sum(lid, s) / f32(n);
    }
    var q = 0.0;
    for (var i = lid; i < n; i += WGS) {
        let x = LD0(addr(0u, i, i1, i2, i3)) - mean;
        q += x * x;
    }
    let scale = 1.0 / sqrt(wg_sum(lid, q) / f32(n) + P.f.x);
    for (var i = lid; i < n; i += WGS) {
        ST(addr(4u, i, i1, i2, i3), (LD0(addr(0u, i, i1, i2, i3)) - mean) * scale);
    }
}
