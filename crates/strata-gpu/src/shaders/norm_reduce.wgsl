
// Workgroup reductions over WGS invocations (the including shader defines
// `const WGS: u32`, a power of two). The result is uniform across the
// workgroup, so callers may branch on it around barriers.
var<workgroup> red: array<f32, WGS>;

fn wg_sum(lid: u32, v: f32) -> f32 {
    red[lid] = v;
    for (var s = WGS / 2u; s > 0u; s = s >> 1u) {
        workgroupBarrier();
        if (lid < s) { red[lid] = red[lid] + red[lid + s]; }
    }
    let r = workgroupUniformLoad(&red[0]);
    workgroupBarrier();
    return r;
}

fn wg_max(lid: u32, v: f32) -> f32 {
    red[lid] = v;
    for (var s = WGS / 2u; s > 0u; s = s >> 1u) {
        workgroupBarrier();
        if (lid < s) { red[lid] = max(red[lid], red[lid + s]); }
    }
    let r = workgroupUniformLoad(&red[0]);
    workgroupBarrier();
    return r;
}

// The workgroup's linear index in a grid of (x, y, z) workgroups.
fn group_index(wid: vec3<u32>, nwg: vec3<u32>) -> u32 {
    return (wid.z * nwg.y + wid.y) * nwg.x + wid.x;
}

// Whether `x` is -inf (a masked logit); -FLT_MAX and below count as masked.
fn is_masked(x: f32) -> bool {
    return x < -3.4e38;
}

// ALiBi slope of head `h` (1 without max_bias, P.f.y): m0^(h+1) below the
// largest power of two n (P.i.x), m1^(2(h-n)+1) above (m0, m1: P.f.z, P.f.w).
fn alibi_slope(h: u32) -> f32 {
    if (P.f.y <= 0.0) { return 1.0; }
    var base = P.f.z;
    var e = h + 1u;
    if (h >= P.i.x) {
        base = P.f.w;
        e = 2u * (h - P.i.x) + 1u;
    }
    var s = 1.0;
    for (var k = 0u; k < e; k++) { s *= base; }
    return s;
}
