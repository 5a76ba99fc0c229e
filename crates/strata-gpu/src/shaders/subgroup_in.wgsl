
// The builtins of the subgroup entry points (only in their shaders: an
// adapter without subgroups has none of these).
struct SgIn {
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(subgroup_id) sg: u32,
    @builtin(num_subgroups) nsg: u32,
    @builtin(subgroup_invocation_id) lane: u32,
    @builtin(subgroup_size) width: u32,
}
