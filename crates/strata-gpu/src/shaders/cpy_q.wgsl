
// CPY from a float tensor into a block-quantized one with contiguous rows:
// one invocation per destination block, reading the source elements
// of the same logical indices, then `QUANT(` (a quantizer above); entry
// point `item_main.wgsl`.
fn item_main(b: u32) {
    let e = b * BLOCK_Nu;
    let c = coords(e, P.ne[4]);
    for (var k = 0u; k < BLOCK_Nu; k++) {
        let s = coords(e + k, P.ne[0]);
        xb[k] = LD0(addr(0u, s.x, s.y, s.z, s.w));
    }
    QUANT(addr(4u, 0u, c.y, c.z, c.w) + (c.x / BLOCK_Nu) * BLOCK_BYTESu);
}
