
// The row kernels' entry point and workgroup reductions: one workgroup of
// WGS invocations (the including shader defines `const WGS: u32`, a power of
// two) per row (i1, i2, i3) of the destination, P.dn.y rows; the including
// shader defines `fn row_main(i1: u32, i2: u32, i3: u32, lid: u32)`.
// Reductions return a value uniform across the workgroup, so callers may
// branch on it around barriers.
@compute @workgroup_size(WGS)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let r = group_index(wid, nwg);
    if (r >= P.dn.y) { return; }
    let rc = row_coords(r, P.ne[4]);
    row_main(rc.x, rc.y, rc.z, lid);
}

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

// (i1, i2, i3) of row `r` of shape `ne`.
fn row_coords(r: u32, ne: vec4<u32>) -> vec3<u32> {
    return vec3<u32>(r % ne.y, (r / ne.y) % ne.z, r / (ne.y * ne.z));
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
