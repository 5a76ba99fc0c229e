// ROPE's functions (the kernel: `rope_main.wgsl`; fused into SET_ROWS:
// `rope_set_rows.wgsl`). ROPE: one invocation per rotated pair (j < n_dims/2 = P.dn.z) or per
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

// cos and sin of pair j's angle at the position of row i2 (token), times
// mscale.
fn rope_cs(j: u32, i2: u32) -> vec2<f32> {
    var extrap = f32(ld_i32_s1(addr(1u, i2, 0u, 0u, 0u))) * base_freq(j);
    if (P.i.x != 0u) { extrap = extrap / ld_f32_s2(P.off[2] + 4u * j); }
    var theta = P.f.x * extrap;
    if (P.f.y != 0.0) {
        let y = (f32(j) - P.f.w) / max(P.g.x - P.f.w, 0.001);
        let mix = (1.0 - clamp(y, 0.0, 1.0)) * P.f.y;
        theta = theta * (1.0 - mix) + extrap * mix;
    }
    let t = reduce_angle(theta);
    return vec2<f32>(cos(t), sin(t)) * P.f.z;
}

// The elements pair j rotates: (2j, 2j+1), or (j, j + n_dims/2) for NEOX.
fn rope_pair(j: u32) -> vec2<u32> {
    if (P.dn.w != 0u) { return vec2<u32>(j, j + P.dn.z); }
    return vec2<u32>(2u * j, 2u * j + 1u);
}

// Item i's pair (or copied element) j and row r of s0: (j, r).
fn rope_split(i: u32) -> vec2<u32> {
    let per_row = P.ne[0].x - P.dn.z;
    return vec2<u32>(i % per_row, i / per_row);
}

// Pair j of row (i1, i2, i3) of s0 rotated (or, for j >= n_dims/2, element
// j + n_dims/2 copied) into the destination row whose element 0 is at byte
// `dst` (elements P.nb[4].x bytes apart).
fn rope_item(j: u32, i1: u32, i2: u32, i3: u32, dst: u32) {
    let h = P.dn.z;
    let nb = P.nb[4].x;
    if (j >= h) {
        let k = j + h;
        ST(dst + k * nb, LD0(addr(0u, k, i1, i2, i3)));
        return;
    }
    let cs = rope_cs(j, i2);
    let ab = rope_pair(j);
    let x0 = LD0(addr(0u, ab.x, i1, i2, i3));
    let x1 = LD0(addr(0u, ab.y, i1, i2, i3));
    ST(dst + ab.x * nb, x0 * cs.x - x1 * cs.y);
    ST(dst + ab.y * nb, x0 * cs.y + x1 * cs.x);
}
