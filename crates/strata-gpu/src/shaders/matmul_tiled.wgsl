// Matrix × matrix: 64 × 64 tiles of dst (rows of s0 × columns of s1) per
// workgroup of 256, K in steps of 32 through workgroup memory (16 KiB),
// weights dequantized on load; 4 × 4 outputs per invocation. Grid: (row
// tiles, column tiles, ne2 ne3 of dst).
DEQUANT

var<workgroup> As: array<f32, 2048>;
var<workgroup> Bs: array<f32, 2048>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let n = P.ne[4];
    let m = P.ne[0].y;
    let i2 = wid.z % n.z;
    let i3 = wid.z / n.z;
    let a0 = addr(0u, 0u, 0u, i2 / (n.z / P.ne[0].z), i3 / (n.w / P.ne[0].w));
    let r0 = wid.x * 64u;
    let c0 = wid.y * 64u;
    // what this invocation loads: row / column lid / 4, group lid % 4
    let lr = lid >> 2u;
    let lg = lid & 3u;
    let arow = a0 + (r0 + lr) * P.nb[0].y;
    let bcol = addr(1u, 0u, c0 + lr, i2, i3);
    let aok = r0 + lr < m;
    let bok = c0 + lr < n.y;
    // what it computes: rows tr..tr+3, columns tc..tc+3 of the tile
    let tr = (lid & 15u) * 4u;
    let tc = (lid >> 4u) * 4u;
    var acc: array<vec4<f32>, 4>;
    let steps = (P.ne[0].x + 31u) / 32u;
    for (var s = 0u; s < steps; s++) {
        var w = V8(vec4<f32>(0.0), vec4<f32>(0.0));
        if (aok) { w = dq_s0(arow, s * 4u + lg); }
        var y = V8(vec4<f32>(0.0), vec4<f32>(0.0));
        if (bok) { y = dq_s1(bcol, s * 4u + lg); }
        let base = lg * 512u + lr;
        for (var i = 0u; i < 4u; i++) {
            As[base + i * 64u] = w.a[i];
            As[base + (i + 4u) * 64u] = w.b[i];
            Bs[base + i * 64u] = y.a[i];
            Bs[base + (i + 4u) * 64u] = y.b[i];
        }
        workgroupBarrier();
        for (var kk = 0u; kk < 32u; kk++) {
            let ka = kk * 64u + tr;
            let kb = kk * 64u + tc;
            let a = vec4<f32>(As[ka], As[ka + 1u], As[ka + 2u], As[ka + 3u]);
            acc[0] += a * Bs[kb];
            acc[1] += a * Bs[kb + 1u];
            acc[2] += a * Bs[kb + 2u];
            acc[3] += a * Bs[kb + 3u];
        }
        workgroupBarrier();
    }
    for (var j = 0u; j < 4u; j++) {
        let c = c0 + tc + j;
        if (c >= n.y) { continue; }
        for (var i = 0u; i < 4u; i++) {
            let r = r0 + tr + i;
            if (r < m) { ST(addr(4u, r, c, i2, i3), acc[j][i]); }
        }
    }
}
