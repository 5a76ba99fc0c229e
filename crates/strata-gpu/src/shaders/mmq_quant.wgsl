// MUL_MAT's integer-dot path, first dispatch: quantizes every column of s1
// (any float type, any strides) into 8-bit blocks of 32 as the CPU
// quantizes activations to Q8_0 / Q8_1 (strata's quant/q8.rs): d = amax / 127,
// q = roundf(x / d) (ties away from zero, by 1 / d as the CPU), d kept
// rounded to f16 (ties to even) and s = f16(d · Σq) with the unrounded d.
// One invocation per block; P.dn.y blocks, P.dn.z (KB) per column. The
// destination is the backend's scratch buffer (bound as d): column c's
// quants, four to a word, are words c · 8 KB + 8 b .. + 8 (block b), and its
// (d, s) pairs follow all the quants, as f32 at word P.dn.w + 2 (c · KB + b).
// Columns are s1's (i1, i2, i3) in order; elements past ne0 count as 0.
DEQUANT

// x rounded to the nearest f16 value (ties to even; subnormals; ±inf past
// the f16 range), as f32.
fn f16_round(x: f32) -> f32 {
    let a = abs(x);
    if (a != a) { return x; }
    if (a >= 65520.0) { return bitcast<f32>((bitcast<u32>(x) & 0x80000000u) | 0x7f800000u); }
    if (a < 6.103515625e-05) {
        // multiples of 2^-24 (x · 2^24 is exact; WGSL's round is ties to even)
        return round(x * 16777216.0) * 5.9604644775390625e-08;
    }
    let u = bitcast<u32>(x);
    return bitcast<f32>((u + 0xfffu + ((u >> 13u) & 1u)) & 0xffffe000u);
}

// C's roundf of x · id, saturated to i8 (NaN gives 0), four at a time.
fn q4(x: vec4<f32>, id: f32) -> vec4<i32> {
    var r = x * id;
    r = select(r, vec4<f32>(0.0), r != r);
    r = clamp(r, vec4<f32>(-128.0), vec4<f32>(127.0));
    let t = trunc(r);
    let f = r - t;
    let up = select(vec4<i32>(0), vec4<i32>(1), f >= vec4<f32>(0.5));
    let down = select(vec4<i32>(0), vec4<i32>(1), f <= vec4<f32>(-0.5));
    return vec4<i32>(t) + up - down;
}

fn item_main(i: u32) {
    let kb = P.dn.z;
    let c = i / kb;
    let b = i % kb;
    let n = P.ne[1];
    let col = addr(1u, 0u, c % n.y, (c / n.y) % n.z, c / (n.y * n.z));
    let v0 = dq_s1(col, b * 4u);
    let v1 = dq_s1(col, b * 4u + 1u);
    let v2 = dq_s1(col, b * 4u + 2u);
    let v3 = dq_s1(col, b * 4u + 3u);
    let m = max(max(max(abs(v0.a), abs(v0.b)), max(abs(v1.a), abs(v1.b))),
                max(max(abs(v2.a), abs(v2.b)), max(abs(v3.a), abs(v3.b))));
    let amax = max(max(m.x, m.y), max(m.z, m.w));
    let sc = amax / 127.0;
    var id = 0.0;
    if (sc != 0.0) { id = 1.0 / sc; }
    let q = array<vec4<i32>, 8>(q4(v0.a, id), q4(v0.b, id), q4(v1.a, id), q4(v1.b, id),
                                q4(v2.a, id), q4(v2.b, id), q4(v3.a, id), q4(v3.b, id));
    var sum = 0;
    let w = i * 8u;
    for (var j = 0u; j < 8u; j++) {
        d[w + j] = pack4xI8(q[j]);
        sum += dot(q[j], vec4<i32>(1));
    }
    let s = P.dn.w + 2u * i;
    d[s] = bitcast<u32>(f16_round(sc));
    d[s + 1u] = bitcast<u32>(f16_round(f32(sum) * sc));
}
