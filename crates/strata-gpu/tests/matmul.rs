//! MUL_MAT, MUL_MAT_ID and GET_ROWS on the GPU against the CPU at the edges
//! the conformance suite does not reach: views, broadcasts, sizes off the
//! tile and workgroup grids, grids past one dimension.

use proptest::prelude::*;
use strata::conformance::{run_case, Fill, OpCase, Outcome};
use strata::{ops, DType, Result, Tensor};

mod support;

const U: Fill = Fill::Uniform(-1.0, 1.0);

type Build = dyn Fn() -> Result<(Vec<(Tensor, Fill)>, Tensor)> + Send + Sync;

/// Runs one graph on the GPU and the CPU; it must be supported and match,
/// with the adapter's optional paths (subgroups, f16) and without.
fn check(name: &str, max_nmse: f64, build: Box<Build>) {
    let case = OpCase {
        name: name.into(),
        build,
        max_nmse,
    };
    for dev in support::gpu_and_fallback() {
        let mut gpu = dev.backend();
        let paths = dev.context().has_subgroups();
        match run_case(&case, &mut gpu, 11) {
            Ok(Outcome::Pass { .. }) => {}
            other => panic!("{name} (subgroups {paths}): {other:?}"),
        }
    }
}

fn tol(t: DType) -> f64 {
    if t.is_quantized() {
        1e-4
    } else {
        1e-5
    }
}

/// `a` [k, m, a2, a3] × `b` [k, n, b2, b3].
fn mul_mat(t: DType, k: usize, m: usize, n: usize, a23: [usize; 2], b23: [usize; 2]) {
    let name = format!("MUL_MAT({t},k={k},m={m},n={n},a={a23:?},b={b23:?})");
    check(
        &name,
        tol(t),
        Box::new(move || {
            let a = Tensor::new(t, &[k, m, a23[0], a23[1]])?;
            let b = Tensor::new(DType::F32, &[k, n, b23[0], b23[1]])?;
            Ok((vec![(a.clone(), U), (b.clone(), U)], ops::mul_mat(&a, &b)?))
        }),
    );
}

#[test]
fn matvec_and_tiles_off_the_grid_with_broadcast() {
    for t in [DType::F32, DType::F16, DType::BF16] {
        // K off the groups of 8 and the tile's 32; M, N off the tiles
        mul_mat(t, 100, 130, 1, [2, 1], [4, 3]);
        mul_mat(t, 37, 67, 70, [1, 3], [2, 3]);
    }
    for t in [
        DType::Q4_0,
        DType::Q8_0,
        DType::Q4_K,
        DType::Q6_K,
        DType::IQ4_XS,
    ] {
        let k = t.block_size() * 3;
        mul_mat(t, k, 129, 3, [2, 1], [4, 2]);
        mul_mat(t, k, 65, 131, [1, 1], [2, 1]);
    }
}

#[test]
fn non_contiguous_activations_and_weights() {
    // b is a permuted view: [k, n, 2] from a [n, k, 2] tensor's transpose
    for n in [1, 9] {
        check(
            &format!("MUL_MAT(q4_1, transposed b, n={n})"),
            1e-4,
            Box::new(move || {
                let a = Tensor::new(DType::Q4_1, &[64, 40, 2])?;
                let bt = Tensor::new(DType::F32, &[n, 64, 2])?;
                let b = ops::transpose(&bt)?;
                Ok((vec![(a.clone(), U), (bt, U)], ops::mul_mat(&a, &b)?))
            }),
        );
    }
    // permuted weights (attention's K with heads in dim 1), both kernels
    for n in [3, 7] {
        check(
            &format!("MUL_MAT(f16 permuted a, n={n})"),
            1e-5,
            Box::new(move || {
                let ap = Tensor::new(DType::F16, &[40, 2, 50])?;
                let a = ops::permute(&ap, [0, 2, 1, 3])?;
                let b = Tensor::new(DType::F32, &[40, n, 2])?;
                Ok((vec![(ap, U), (b.clone(), U)], ops::mul_mat(&a, &b)?))
            }),
        );
    }
}

#[test]
fn columns_past_one_grid_dimension() {
    // 70 000 columns of one token each: the matrix-vector grid wraps into z
    check(
        "MUL_MAT(q8_0, 70000 batches)",
        1e-4,
        Box::new(|| {
            let a = Tensor::new(DType::Q8_0, &[32, 3, 1])?;
            let b = Tensor::new(DType::F32, &[32, 1, 70_000])?;
            Ok((vec![(a.clone(), U), (b.clone(), U)], ops::mul_mat(&a, &b)?))
        }),
    );
}

#[test]
fn mul_mat_id_many_tokens() {
    for t in [DType::F16, DType::Q4_K, DType::Q5_0] {
        check(
            &format!("MUL_MAT_ID({t}, 37 tokens)"),
            tol(t),
            Box::new(move || {
                let k = t.block_size().max(64);
                let a = Tensor::new(t, &[k, 20, 5])?;
                let b = Tensor::new(DType::F32, &[k, 1, 37])?;
                let ids = Tensor::new(DType::I32, &[3, 37])?;
                let out = ops::mul_mat_id(&a, &b, &ids)?;
                Ok((vec![(a, U), (b, U), (ids, Fill::Index(5))], out))
            }),
        );
    }
}

#[test]
fn get_rows_of_every_weight_type_from_views() {
    for t in strata::conformance::WEIGHT_TYPES {
        let k = if t.is_quantized() { t.block_size() } else { 40 };
        check(
            &format!("GET_ROWS({t}, 3-d ids)"),
            1e-6,
            Box::new(move || {
                let a = Tensor::new(t, &[k, 9, 3, 2])?;
                let i = Tensor::new(DType::I32, &[5, 3, 2])?;
                Ok((
                    vec![(a.clone(), U), (i.clone(), Fill::Index(9))],
                    ops::get_rows(&a, &i)?,
                ))
            }),
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]
    #[test]
    fn mul_mat_matches_the_cpu(
        ti in 0usize..6, blocks in 1usize..4, m in 1usize..80, n in 1usize..80, b2 in 1usize..3,
    ) {
        let t = [DType::F32, DType::F16, DType::Q4_0, DType::Q4_1, DType::Q4_K, DType::Q6_K][ti];
        let k = t.block_size().max(32) * blocks;
        mul_mat(t, k, m, n, [1, 1], [b2, 1]);
    }
}
