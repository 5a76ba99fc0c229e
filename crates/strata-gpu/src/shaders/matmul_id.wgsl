// MUL_MAT_ID's entry point of the tiled kernels (after `matmul_tiled.wgsl`
// or `matmul_int.wgsl`): s0 the experts' weights [K, M, n_expert], s1 the
// activations [K, n_b, tokens], s2 the I32 ids [n_used, tokens], dst
// [M, n_used, tokens]. Column c = s + n_used t (slot s, token t) is expert
// ids[s, t]'s weights times s1[:, s % n_b, t], stored at dst[:, s, t].
//
// Grid: (row tiles of M, J column groups, n_expert + 1). Workgroup
// (x, j, e) collects in workgroup memory, in column order, the columns
// whose id is e (for e = n_expert: whose id is outside 0..n_expert), and
// computes their groups of 64 j, j + J, j + 2J, … (J ≥ tokens / 64, so
// that routing without repeats needs one group a workgroup; more when a
// token picks an expert in several slots) as 64 × 64 tiles over rows
// 64 x.. of expert e. Slice n_expert stores zeros, as the matrix-vector
// kernel does for such columns. Every workgroup of an expert finds the same
// order of its columns, so the groups never overlap.
//
// The collection scans the ids twice, 64 invocations each over a segment:
// first counting (then one invocation turns the counts into each segment's
// first position, and a workgroup with no group of its own returns), then,
// per group, writing the columns whose position falls in the group.

// position of the first column of invocation i's segment among the matches
var<workgroup> seg: array<u32, 64>;
// the columns of the current group, in order
var<workgroup> cols: array<u32, 64>;
// the number of matches
var<workgroup> total: u32;

// Whether column c goes to expert e (e = n_expert: whether its id is
// invalid).
fn picks(c: u32, e: u32) -> bool {
    let nu = P.ne[2].x;
    let id = ld_i32_s2(addr(2u, c % nu, c / nu, 0u, 0u));
    let ok = id >= 0 && u32(id) < P.ne[0].z;
    return select(!ok, ok && u32(id) == e, e < P.ne[0].z);
}

// Rows r..r+3 of the group's column j (those inside dst; none past `here`).
fn store_id(r: u32, j: u32, here: u32, v: vec4<f32>) {
    if (j >= here) { return; }
    let c = cols[j];
    let nu = P.ne[2].x;
    let s = c % nu;
    let t = c / nu;
    let m = P.ne[0].y;
    if (r < m) { ST(addr(4u, r, s, t, 0u), v.x); }
    if (r + 1u < m) { ST(addr(4u, r + 1u, s, t, 0u), v.y); }
    if (r + 2u < m) { ST(addr(4u, r + 2u, s, t, 0u), v.z); }
    if (r + 3u < m) { ST(addr(4u, r + 3u, s, t, 0u), v.w); }
}

// Rows r..r+3 of the group's columns j..j+3.
fn store4_id(r: u32, j: u32, here: u32, v: mat4x4<f32>) {
    store_id(r, j, here, v[0]);
    store_id(r, j + 1u, here, v[1]);
    store_id(r, j + 2u, here, v[2]);
    store_id(r, j + 3u, here, v[3]);
}

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let e = wid.z;
    let experts = P.ne[0].z;
    let nu = P.ne[2].x;
    let n = nu * P.ne[2].y;
    let len = (n + 63u) / 64u;
    let lo = min(lid * len, n);
    let hi = min(lo + len, n);
    var mine = 0u;
    for (var c = lo; c < hi; c++) {
        if (picks(c, e)) { mine++; }
    }
    seg[lid] = mine;
    workgroupBarrier();
    if (lid == 0u) {
        var sum = 0u;
        for (var i = 0u; i < 64u; i++) {
            let x = seg[i];
            seg[i] = sum;
            sum += x;
        }
        total = sum;
    }
    // (a barrier before and after the load)
    let count = workgroupUniformLoad(&total);
    let first = seg[lid];
    let m = P.ne[0].y;
    let r0 = wid.x * 64u;
    let arow = addr(0u, 0u, r0 + lid, min(e, experts - 1u), 0u);
    let z = mat4x4<f32>();
    for (var g = wid.y; g * 64u < count; g += nwg.y) {
        let base = g * 64u;
        if (first < base + 64u && first + mine > base) {
            var p = first;
            for (var c = lo; c < hi && p < base + 64u; c++) {
                if (picks(c, e)) {
                    if (p >= base) { cols[p - base] = c; }
                    p++;
                }
            }
        }
        workgroupBarrier();
        let here = min(count - base, 64u);
        var bcol = 0u;
        if (lid < here) {
            let c = cols[lid];
            bcol = bsel((c % nu) % P.ne[1].y, c / nu, 0u);
        }
        var o = Acc(z, z, z, z);
        if (e < experts) {
            o = tile(arow, r0 + lid < m, bcol, lid < here, lid);
        }
        let r = r0 + (lid & 7u) * 8u;
        let j = (lid >> 3u) * 8u;
        store4_id(r, j, here, o.m00);
        store4_id(r, j + 4u, here, o.m01);
        store4_id(r + 4u, j, here, o.m10);
        store4_id(r + 4u, j + 4u, here, o.m11);
        // the next group's columns overwrite these
        workgroupBarrier();
    }
}
