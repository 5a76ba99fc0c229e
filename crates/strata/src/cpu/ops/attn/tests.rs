use super::*;

#[test]
fn paths_follow_ggml_conditions() {
    use DType::{F16, F32};
    let q = |n_q: usize, ne3: usize| [64, n_q, 9, ne3];
    // Split-KV: one row, one batch, same K/V type, ≥ 512 keys.
    assert_eq!(choose_path(q(1, 1), F16, F16, 512), Path::SplitKv);
    assert_eq!(choose_path(q(1, 1), F32, F32, 4096), Path::SplitKv);
    assert_eq!(choose_path(q(1, 1), F16, F16, 511), Path::OneChunk);
    assert_eq!(choose_path(q(1, 2), F16, F16, 512), Path::OneChunk);
    assert_eq!(choose_path(q(1, 1), F16, F32, 512), Path::OneChunk);
    // Tiled: ≥ 64 rows, same K/V type.
    assert_eq!(choose_path(q(64, 1), F16, F16, 1), Path::Tiled);
    assert_eq!(choose_path(q(512, 2), F32, F32, 700), Path::Tiled);
    assert_eq!(choose_path(q(63, 1), F16, F16, 700), Path::OneChunk);
    assert_eq!(choose_path(q(64, 1), F32, F16, 700), Path::OneChunk);
    assert_eq!(choose_path(q(2, 1), F16, F16, 4096), Path::OneChunk);
}
