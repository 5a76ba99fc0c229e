
// SET_ROWS into a block-quantized destination with contiguous rows: one
// invocation per (block, row i, i2, i3) quantizes block b of s0's row i
// with `QUANT(` into the selected dst row, unless a later row of the same
// plane selects that row too (so the last one wins). Each invocation
// quantizes once: llvmpipe miscompiled a loop of 256-value quantizations.
fn item_main(t: u32) {
    let ne = P.ne[0];
    let c = coords(t, vec4<u32>(ne.x / BLOCK_Nu, ne.y, ne.z, ne.w));
    let r = row_id(c.y, c.z, c.w);
    if (r == 0xffffffffu) { return; }
    for (var j = c.y + 1u; j < ne.y; j++) {
        if (row_id(j, c.z, c.w) == r) { return; }
    }
    for (var k = 0u; k < BLOCK_Nu; k++) {
        xb[k] = LD0(addr(0u, c.x * BLOCK_Nu + k, c.y, c.z, c.w));
    }
    QUANT(addr(4u, 0u, r, c.z, c.w) + c.x * BLOCK_BYTESu);
}
