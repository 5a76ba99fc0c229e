
// The entry point of the shaders with one invocation per work item, P.dn.y
// items over workgroups of 256 invocations: the including shader defines
// `fn item_main(i: u32)`, which does item i.
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = item_id(wid, nwg, lid, 256u);
    if (i >= P.dn.y) { return; }
    item_main(i);
}
