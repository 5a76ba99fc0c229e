// ROPE: one invocation per rotated pair (j < n_dims/2 = P.dn.z) or per
// element past n_dims (copied), for each row (i1, i2, i3) of s0. Pairs are
// (2j, 2j+1) (normal) or (j, j + n_dims/2) (NEOX, P.dn.w = 1). Each
// invocation reads and writes only its own elements, so dst may alias s0.
//
// theta_j = pos · base^(-2j/n_dims) [/ freq_factor_j (s2, P.i.x = 1)], with
// YaRN: freq_scale P.f.x, ext_factor P.f.y, mscale P.f.z, corr dims P.f.w,
// P.g.x. The exponent -2j/n_dims·log2(base) is split (P.g.y has 12
// significant bits, so j·P.g.y is exact; P.g.z is the rest) and the angle is
// reduced modulo 2π before cos/sin, which keep f32 accuracy at large
// positions.
fn base_freq(j: u32) -> f32 {
    let e = f32(j) * P.g.y;
    let n = floor(e);
    let fr = (e - n) + f32(j) * P.g.z;
    return ldexp(exp2(fr), i32(n));
}

fn reduce_angle(t: f32) -> f32 {
    let k = round(t * 0.15915494309189535);
    return ((t - k * 6.28125) - k * 0.0019353071693331003) - k * 1.0253131677018246e-11;
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = item_id(wid, nwg, lid, 256u);
    if (i >= P.dn.y) { return; }
    let ne = P.ne[0];
    let h = P.dn.z;
    let per_row = ne.x - h;
    let j = i % per_row;
    let r = i / per_row;
    let i1 = r % ne.y;
    let i2 = (r / ne.y) % ne.z;
    let i3 = r / (ne.y * ne.z);
    if (j >= h) {
        let k = j + h;
        ST(addr(4u, k, i1, i2, i3), LD0(addr(0u, k, i1, i2, i3)));
        return;
    }
    var extrap = f32(ld_i32_s1(addr(1u, i2, 0u, 0u, 0u))) * base_freq(j);
    if (P.i.x != 0u) { extrap = extrap / ld_f32_s2(P.off[2] + 4u * j); }
    var theta = P.f.x * extrap;
    if (P.f.y != 0.0) {
        let y = (f32(j) - P.f.w) / max(P.g.x - P.f.w, 0.001);
        let mix = (1.0 - clamp(y, 0.0, 1.0)) * P.f.y;
        theta = theta * (1.0 - mix) + extrap * mix;
    }
    let t = reduce_angle(theta);
    let c = cos(t) * P.f.z;
    let s = sin(t) * P.f.z;
    var a = 2u * j;
    var b = a + 1u;
    if (P.dn.w != 0u) {
        a = j;
        b = j + h;
    }
    let x0 = LD0(addr(0u, a, i1, i2, i3));
    let x1 = LD0(addr(0u, b, i1, i2, i3));
    ST(addr(4u, a, i1, i2, i3), x0 * c - x1 * s);
    ST(addr(4u, b, i1, i2, i3), x0 * s + x1 * c);
}
