// strata-gpu shader prelude: the parameter block, the five storage bindings
// (sources s0..s3, only read, and the destination d, all bound whole as
// 32-bit words; `ACCESS_Sk` is `read` where source k's buffer is not d's,
// so it is bound read-only, else `read_write`)
// and typed loads/stores by byte address. Generated per pipeline: `DST_DECL`
// and the store functions depend on the destination's type (16-bit and byte
// stores into shared words go through atomics).

struct Params {
    // ne of s0, s1, s2, s3, d
    ne: array<vec4<u32>, 5>,
    // byte strides of s0, s1, s2, s3, d
    nb: array<vec4<u32>, 5>,
    // byte offsets of s0, s1, s2, s3 in their buffers
    off: vec4<u32>,
    // x: byte offset of d; y: number of work items; z, w: op integers
    dn: vec4<u32>,
    // op integers
    i: vec4<u32>,
    j: vec4<u32>,
    // op floats
    f: vec4<f32>,
    g: vec4<f32>,
}

@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, ACCESS_S0> s0: array<u32>;
@group(0) @binding(2) var<storage, ACCESS_S1> s1: array<u32>;
@group(0) @binding(3) var<storage, ACCESS_S2> s2: array<u32>;
@group(0) @binding(4) var<storage, ACCESS_S3> s3: array<u32>;
DST_DECL

// The work item of this invocation over a dispatch of (x, y, z) workgroups
// of `wg` invocations each.
fn item_id(wid: vec3<u32>, nwg: vec3<u32>, lid: u32, wg: u32) -> u32 {
    return ((wid.z * nwg.y + wid.y) * nwg.x + wid.x) * wg + lid;
}

// The byte address of element (i0, i1, i2, i3) of slot k.
fn addr(k: u32, i0: u32, i1: u32, i2: u32, i3: u32) -> u32 {
    let nb = P.nb[k];
    var base: u32;
    if (k < 4u) { base = P.off[k]; } else { base = P.dn.x; }
    return base + i0 * nb.x + i1 * nb.y + i2 * nb.z + i3 * nb.w;
}

// Coordinates of the linear index `i` in shape `ne`.
fn coords(i: u32, ne: vec4<u32>) -> vec4<u32> {
    let i0 = i % ne.x;
    let r = i / ne.x;
    let i1 = r % ne.y;
    let r2 = r / ne.y;
    return vec4<u32>(i0, i1, r2 % ne.z, r2 / ne.z);
}

fn f16_of(w: u32, b: u32) -> f32 {
    return unpack2x16float(w)[(b >> 1u) & 1u];
}

fn bf16_of(w: u32, b: u32) -> f32 {
    return bitcast<f32>(select(w << 16u, w & 0xffff0000u, (b & 2u) != 0u));
}

// erf(x), Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7; WGSL has no erf),
// for the exact GELU (GELU_ERF, GEGLU_ERF).
fn erf_approx(x: f32) -> f32 {
    let a = abs(x);
    let t = 1.0 / (1.0 + 0.3275911 * a);
    let poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741
        + t * (-1.453152027 + t * 1.061405429))));
    return sign(x) * (1.0 - poly * exp(-a * a));
}
