// ROPE: each invocation rotates one pair of one row of s0 into d (or
// copies one element past n_dims).
fn item_main(i: u32) {
    let jr = rope_split(i);
    let ne = P.ne[0];
    let i1 = jr.y % ne.y;
    let i2 = (jr.y / ne.y) % ne.z;
    let i3 = jr.y / (ne.y * ne.z);
    rope_item(jr.x, i1, i2, i3, addr(4u, 0u, i1, i2, i3));
}
