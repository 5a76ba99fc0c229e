
// The item of the shaders with one invocation per destination element
// (CPY, REPEAT, CONCAT, ADD_ID, the binary and unary element-wise ops;
// entry point `item_main.wgsl`): `elem(c)` writes dst's element at
// coordinates c.
fn item_main(i: u32) {
    elem(coords(i, P.ne[4]));
}
