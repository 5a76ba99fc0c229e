// SUM, SUM_ROWS, MEAN and ARGMAX: one workgroup of 256 per output value,
// reducing `P.dn.z` consecutive elements of s0 (in logical order, ne0
// fastest: a row, or for SUM the whole tensor); the partial results meet in
// shared memory by a tree. Output g is dst's element g in logical order;
// `PUTF(` stores a float result (scaled by `P.f.x`: 1 / ne0 for MEAN).

var<workgroup> sv: array<f32, 256>;
var<workgroup> si: array<u32, 256>;

// Element e of s0 (logical order) as f32.
fn elem(e: u32) -> f32 {
    let s = coords(e, P.ne[0]);
    return LD0(addr(0u, s.x, s.y, s.z, s.w));
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let g = (wid.z * nwg.y + wid.y) * nwg.x + wid.x;
    if (g >= P.dn.y) { return; }
    let len = P.dn.z;
    let base = g * len;
    if (ARGMAX) {
        // first maximum, by strict > from -inf (NaN never wins): index
        // 0xffffffff marks "none yet", which loses every tie below
        var best = bitcast<f32>(0xff800000u);
        var bi = 0xffffffffu;
        for (var k = lid; k < len; k += 256u) {
            let v = elem(base + k);
            if (v > best) { best = v; bi = k; }
        }
        sv[lid] = best;
        si[lid] = bi;
    } else {
        var acc = 0.0;
        for (var k = lid; k < len; k += 256u) { acc += elem(base + k); }
        sv[lid] = acc;
    }
    workgroupBarrier();
    for (var h = 128u; h > 0u; h >>= 1u) {
        if (lid < h) {
            if (ARGMAX) {
                let v = sv[lid + h];
                let j = si[lid + h];
                if (v > sv[lid] || (v == sv[lid] && j < si[lid])) {
                    sv[lid] = v;
                    si[lid] = j;
                }
            } else {
                sv[lid] += sv[lid + h];
            }
        }
        workgroupBarrier();
    }
    if (lid == 0u) {
        let c = coords(g, P.ne[4]);
        let o = addr(4u, c.x, c.y, c.z, c.w);
        if (ARGMAX) {
            st_u32(o, select(si[0], 0u, si[0] == 0xffffffffu));
        } else {
            PUTF(o, sv[0] * P.f.x);
        }
    }
}
