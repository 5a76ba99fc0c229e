// ARGSORT / TOP_K: one workgroup per row of s0 (at most 1024 values),
// a bitonic sort in shared memory of (key, index) pairs padded to
// `P.dn.z` (a power of two) with pairs that sort last; the key's unsigned
// order is the float order (-0 = +0, every NaN equal, after +inf), inverted
// for descending (`P.dn.w` = 1), and ties keep index order. dst gets the
// first dst.ne0 indices.

var<workgroup> key: array<u32, 1024>;
var<workgroup> idx: array<u32, 1024>;

fn sort_key(x: f32) -> u32 {
    var b = bitcast<u32>(x);
    let m = b & 0x7fffffffu;
    if (m == 0u) { b = 0u; } else if (m > 0x7f800000u) { b = 0x7fc00000u; }
    if ((b & 0x80000000u) != 0u) { b = ~b; } else { b = b | 0x80000000u; }
    if (P.dn.w == 1u) { b = ~b; }
    return b;
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let r = (wid.z * nwg.y + wid.y) * nwg.x + wid.x;
    if (r >= P.dn.y) { return; }
    let n = P.ne[0].x;
    let np = P.dn.z;
    let rc = coords(r, vec4<u32>(P.ne[0].y, P.ne[0].z, P.ne[0].w, 1u));
    for (var k = lid; k < np; k += 256u) {
        if (k < n) {
            key[k] = sort_key(LD0(addr(0u, k, rc.x, rc.y, rc.z)));
        } else {
            key[k] = 0xffffffffu;
        }
        idx[k] = k;
    }
    workgroupBarrier();
    for (var size = 2u; size <= np; size <<= 1u) {
        for (var stride = size >> 1u; stride > 0u; stride >>= 1u) {
            for (var t = lid; t < np / 2u; t += 256u) {
                let lo = 2u * stride * (t / stride) + t % stride;
                let hi = lo + stride;
                let up = (lo & size) == 0u;
                let kl = key[lo];
                let kh = key[hi];
                let greater = kl > kh || (kl == kh && idx[lo] > idx[hi]);
                if (greater == up) {
                    key[lo] = kh;
                    key[hi] = kl;
                    let il = idx[lo];
                    idx[lo] = idx[hi];
                    idx[hi] = il;
                }
            }
            workgroupBarrier();
        }
    }
    for (var k = lid; k < P.ne[4].x; k += 256u) {
        st_i32(addr(4u, k, rc.x, rc.y, rc.z), bitcast<i32>(idx[k]));
    }
}
