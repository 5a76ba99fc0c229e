
// CPY from a float tensor into a block-quantized one with contiguous rows:
// one invocation per destination block, reading the source elements
// of the same logical indices, then `QUANT(` (a quantizer above).
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let b = item_id(wid, nwg, lid, 256u);
    if (b >= P.dn.y) { return; }
    let e = b * BLOCK_Nu;
    let c = coords(e, P.ne[4]);
    for (var k = 0u; k < BLOCK_Nu; k++) {
        let s = coords(e + k, P.ne[0]);
        xb[k] = LD0(addr(0u, s.x, s.y, s.z, s.w));
    }
    QUANT(addr(4u, 0u, c.y, c.z, c.w) + (c.x / BLOCK_Nu) * BLOCK_BYTESu);
}
