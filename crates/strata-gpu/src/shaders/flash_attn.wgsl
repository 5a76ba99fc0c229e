// FLASH_ATTN_EXT: one workgroup of WGS invocations per (head h, query iq,
// iq3); keys in tiles of WGS, one key per invocation for the scores, then
// the tile's probabilities in shared memory and each invocation
// accumulating its own output dims (at most DV_PER · WGS) over the tile, with
// an online softmax (running max and sum, rescaled tile by tile).
//
// q s0 f32 [D, n_q, H, ne3]; k s1, v s2 [D | Dv, n_kv, H_kv, ne3_kv] (GQA:
// kv head h / (H / H_kv), iq3 / (ne3 / ne3_kv)); mask s3 [n_kv, >= n_q, m2,
// m3] (h % m2, iq3 % m3); dst f32 [Dv, H, n_q, ne3]. P.f: scale, max_bias,
// m0, m1; P.g.x: softcap; P.i.x: ALiBi's n. Keys whose mask is -inf do not
// count; a row with none left is zeros.
const WGS: u32 = 64u;
const DV_PER: u32 = 8u;

var<workgroup> qs: array<f32, 512>;
var<workgroup> ps: array<f32, WGS>;

// dst rows are (h, iq, iq3)
fn row_main(h: u32, iq: u32, iq3: u32, lid: u32) {
    let nq = P.ne[0];
    let nk = P.ne[1];
    let n_head = nq.z;
    let d = nq.x;
    let dv = P.ne[2].x;
    let n_kv = nk.y;
    let ik2 = h / (n_head / nk.z);
    let ik3 = iq3 / (nq.w / nk.w);
    for (var i = lid; i < d; i += WGS) { qs[i] = LD0(addr(0u, i, iq, h, iq3)); }
    workgroupBarrier();
    let slope = alibi_slope(h);
    var m = -3.4028234663852886e38;
    var s = 0.0;
    var acc: array<f32, DV_PER>;
    for (var t0 = 0u; t0 < n_kv; t0 += WGS) {
        let j = t0 + lid;
        var x = -3.4028234663852886e38;
        var live = false;
        if (j < n_kv) {
            var mv = 0.0;
            if (HAS_MASK) {
                let mn = P.ne[3];
                mv = MASK_LD(addr(3u, j, iq, h % mn.z, iq3 % mn.w));
            }
            if (!is_masked(mv)) {
                let kb = addr(1u, 0u, j, ik2, ik3);
                var dot = 0.0;
                for (var i = 0u; i < d; i++) { dot += qs[i] * LD1(kb + i * K_ES); }
                x = dot * P.f.x;
                if (P.g.x != 0.0) { x = P.g.x * tanh(clamp(x / P.g.x, -15.0, 15.0)); }
                x += slope * mv;
                live = true;
            }
        }
        let tmax = wg_max(lid, x);
        if (tmax > -3.4028234663852886e38) {
            let mn = max(m, tmax);
            let p = select(0.0, exp(x - mn), live);
            ps[lid] = p;
            let ms = exp(m - mn);
            s = s * ms + wg_sum(lid, p);
            m = mn;
            let cnt = min(WGS, n_kv - t0);
            for (var c = 0u; c < DV_PER; c++) {
                let o = lid + c * WGS;
                if (o < dv) {
                    var a = acc[c] * ms;
                    for (var jj = 0u; jj < cnt; jj++) {
                        a += ps[jj] * LD2(addr(2u, o, t0 + jj, ik2, ik3));
                    }
                    acc[c] = a;
                }
            }
            workgroupBarrier();
        }
    }
    let inv = select(0.0, 1.0 / s, s > 0.0);
    for (var c = 0u; c < DV_PER; c++) {
        let o = lid + c * WGS;
        if (o < dv) { ST(addr(4u, o, h, iq, iq3), acc[c] * inv); }
    }
}
