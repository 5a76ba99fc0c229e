//! Issue 46: shape errors are typed. For a representative op per
//! [`ShapeProblem`] variant, building it with bad shapes returns
//! `Error::Shape { op, problem }` with the values in fields, and the text
//! names the op and the values.

use strata::backend::tensor_copy;
use strata::error::{Operand, ShapeProblem};
use strata::ops::{self, GluOp, Op, RopeMode, RopeParams};
use strata::{DType, Error, Tensor};

fn t(name: &str, dtype: DType, dims: &[usize]) -> Tensor {
    Tensor::new(dtype, dims).unwrap().with_name(name)
}

/// The op and problem of a shape error (panics on any other result: this
/// is a test).
fn shape_err<T: std::fmt::Debug>(r: strata::Result<T>) -> (&'static str, ShapeProblem, String) {
    let e = r.unwrap_err();
    let text = e.to_string();
    match e {
        Error::Shape { op, problem } => (op, problem, text),
        other => panic!("not a shape error: {other:?}"),
    }
}

/// `text` holds every one of `parts`.
fn says(text: &str, parts: &[&str]) {
    for p in parts {
        assert!(text.contains(p), "{text:?} lacks {p:?}");
    }
}

fn operand(o: &Operand) -> (&'static str, &str, DType, [usize; 4]) {
    (o.role, &o.name, o.dtype, o.ne)
}

#[test]
fn mismatch_names_both_shapes_and_the_rule() {
    let w = t("w", DType::F32, &[4, 2]);
    let x = t("x", DType::F32, &[5, 3]);
    let (op, p, text) = shape_err(ops::mul_mat(&w, &x));
    assert_eq!(op, "MUL_MAT");
    let ShapeProblem::Mismatch { rule, a, b } = &p else {
        panic!("{p:?}")
    };
    assert_eq!(*rule, "ne0 (K) must match");
    assert_eq!(operand(a), ("a", "w", DType::F32, [4, 2, 1, 1]));
    assert_eq!(operand(b), ("b", "x", DType::F32, [5, 3, 1, 1]));
    assert_eq!(
        text,
        "MUL_MAT: a 'w' f32 [4, 2, 1, 1] and b 'x' f32 [5, 3, 1, 1]: ne0 (K) must match"
    );

    // broadcasting: b over a in ADD
    let (op, p, text) = shape_err(ops::add(&t("a", DType::F32, &[4, 3]), &x));
    assert_eq!(op, "ADD");
    assert!(matches!(&p, ShapeProblem::Mismatch { b, .. } if b.ne == [5, 3, 1, 1]));
    says(&text, &["ADD", "[4, 3, 1, 1]", "[5, 3, 1, 1]", "broadcast"]);
}

#[test]
fn layout_mismatch_names_the_strides() {
    let a = t("a", DType::F32, &[3, 3]);
    let at = ops::transpose(&a).unwrap().with_name("a_T");
    let b = t("b", DType::F32, &[3, 3]);
    let (op, p, text) = shape_err(tensor_copy(&at, &b));
    assert_eq!(op, "tensor_copy");
    assert_eq!(
        p,
        ShapeProblem::LayoutMismatch {
            src: Operand::of("src", &at),
            src_nb: [12, 4, 36, 36],
            dst: Operand::of("dst", &b),
            dst_nb: [4, 12, 36, 36],
        }
    );
    says(
        &text,
        &["tensor_copy", "'a_T'", "[12, 4, 36, 36]", "ops::cpy"],
    );
}

#[test]
fn too_many_dims_names_the_limit() {
    let a = t("logits", DType::F32, &[8, 2, 3]);
    let (op, p, text) = shape_err(ops::argmax(&a));
    assert_eq!(op, "ARGMAX");
    assert_eq!(
        p,
        ShapeProblem::TooManyDims {
            tensor: Operand::of("a", &a),
            max: 2
        }
    );
    says(
        &text,
        &["ARGMAX", "'logits'", "[8, 2, 3, 1]", "more than 2"],
    );
}

#[test]
fn contiguity_problems_name_the_tensor() {
    let a = t("a", DType::F32, &[4, 3]);
    let at = ops::transpose(&a).unwrap().with_name("a_T");
    let (op, p, text) = shape_err(ops::reshape(&at, &[12]));
    assert_eq!(op, "RESHAPE");
    assert_eq!(
        p,
        ShapeProblem::NotContiguous {
            tensor: "a_T".into()
        }
    );
    says(&text, &["RESHAPE", "'a_T'", "ops::cont"]);

    // dims 1 and 2 of the weight moved to 0 and 1: not transposed, but its
    // elements are a row apart
    let w = t("w", DType::F32, &[4, 3, 2]);
    let wp = ops::permute(&w, [2, 0, 1, 3]).unwrap().with_name("w_p");
    assert_eq!(wp.ne(), [3, 2, 4, 1]);
    let x = t("x", DType::F32, &[3, 5, 4]);
    let (op, p, text) = shape_err(ops::mul_mat(&wp, &x));
    assert_eq!(op, "MUL_MAT");
    assert_eq!(
        p,
        ShapeProblem::RowsNotContiguous {
            tensor: "w_p".into()
        }
    );
    says(&text, &["MUL_MAT", "'w_p'", "rows"]);
}

#[test]
fn block_stride_names_the_block_size() {
    let (op, p, text) = shape_err(Tensor::with_layout(
        DType::Q8_0,
        [32, 1, 1, 1],
        [2, 34, 34, 34],
    ));
    assert_eq!(op, "new_tensor");
    assert_eq!(
        p,
        ShapeProblem::BlockStride {
            nb0: 2,
            block_bytes: 34
        }
    );
    says(&text, &["new_tensor", "nb0 2", "34"]);
}

#[test]
fn missing_source_and_parameter_are_named() {
    let a = t("a", DType::F32, &[4, 3]);
    let (op, p, text) = shape_err(ops::make(Op::MulMat, vec![Some(a.clone())], None));
    assert_eq!(op, "MUL_MAT");
    assert_eq!(p, ShapeProblem::MissingSource { index: 1 });
    says(&text, &["MUL_MAT", "source 1"]);

    let (op, p, text) = shape_err(ops::make(Op::Reshape, vec![Some(a)], None));
    assert_eq!(op, "RESHAPE");
    assert_eq!(
        p,
        ShapeProblem::MissingParam {
            param: "the new shape"
        }
    );
    says(&text, &["RESHAPE", "the new shape"]);
}

#[test]
fn out_of_range_values_name_the_range() {
    let a = t("a", DType::F32, &[4, 3]);
    let (op, p, text) = shape_err(ops::concat(&a, &a, 4));
    assert_eq!(op, "CONCAT");
    assert_eq!(
        p,
        ShapeProblem::OutOfRange {
            what: "dim",
            value: 4,
            min: 0,
            max: 3
        }
    );
    says(&text, &["CONCAT", "dim 4", "0..=3"]);

    let (op, p, text) = shape_err(ops::top_k(&a, 5));
    assert_eq!(op, "TOP_K");
    assert!(
        matches!(
            p,
            ShapeProblem::OutOfRange {
                value: 5,
                min: 0,
                max: 4,
                ..
            }
        ),
        "{p:?}"
    );
    says(&text, &["TOP_K", "k", "5", "0..=4"]);
}

#[test]
fn not_multiple_names_the_factor() {
    let x = t("x", DType::F32, &[8, 2, 3]);
    let pos = t("pos", DType::I32, &[3]);
    let params = RopeParams::new(5, RopeMode::Normal, 10000.0);
    let (op, p, text) = shape_err(ops::rope(&x, &pos, params));
    assert_eq!(op, "ROPE");
    assert_eq!(
        p,
        ShapeProblem::NotMultiple {
            what: "n_dims",
            value: 5,
            multiple: 2
        }
    );
    says(&text, &["ROPE", "n_dims 5", "multiple of 2"]);

    let (op, p, _) = shape_err(ops::glu(
        &t("gu", DType::F32, &[5, 2]),
        GluOp::Swiglu,
        false,
    ));
    assert_eq!(op, "GLU");
    assert!(matches!(
        p,
        ShapeProblem::NotMultiple {
            value: 5,
            multiple: 2,
            ..
        }
    ));
}

#[test]
fn not_a_permutation_names_the_axes() {
    let a = t("a", DType::F32, &[4, 3]);
    let (op, p, text) = shape_err(ops::permute(&a, [0, 0, 1, 2]));
    assert_eq!(op, "PERMUTE");
    assert_eq!(p, ShapeProblem::NotPermutation { axes: [0, 0, 1, 2] });
    says(&text, &["PERMUTE", "[0, 0, 1, 2]"]);
}

#[test]
fn counts_name_both_counts() {
    // SOFT_MAX sinks: one per head (a.ne2 = 2)
    let a = t("kq", DType::F32, &[4, 3, 2]);
    let sinks = t("sinks", DType::F32, &[3]);
    let soft_max = Op::SoftMax {
        scale: 1.0,
        max_bias: 0.0,
    };
    let (op, p, text) = shape_err(ops::make(soft_max, vec![Some(a), None, Some(sinks)], None));
    assert_eq!(op, "SOFT_MAX");
    assert!(
        matches!(
            p,
            ShapeProblem::Count {
                expected: 2,
                got: 3,
                ..
            }
        ),
        "{p:?}"
    );
    says(&text, &["SOFT_MAX", "sinks", "got 3, needs 2"]);

    // ROPE frequency factors: at least n_dims / 2
    let x = t("x", DType::F32, &[8, 2, 3]);
    let pos = t("pos", DType::I32, &[3]);
    let ff = t("ff", DType::F32, &[3]);
    let params = RopeParams::new(8, RopeMode::Neox, 10000.0);
    let (op, p, _) = shape_err(ops::rope_ext(&x, &pos, Some(&ff), params));
    assert_eq!(op, "ROPE");
    assert!(matches!(
        p,
        ShapeProblem::Count {
            expected: 4,
            got: 3,
            ..
        }
    ));
}

#[test]
fn overflow_names_the_shape() {
    let (op, p, text) = shape_err(Tensor::new(DType::F32, &[usize::MAX / 2, 4]));
    assert_eq!(op, "new_tensor");
    assert_eq!(
        p,
        ShapeProblem::Overflow {
            ne: [usize::MAX / 2, 4, 1, 1],
            nb: None
        }
    );
    says(&text, &["new_tensor", &(usize::MAX / 2).to_string()]);

    let (_, p, text) = shape_err(Tensor::with_layout(
        DType::F32,
        [2, 3, 1, 1],
        [4, usize::MAX / 2, 0, 0],
    ));
    assert!(matches!(p, ShapeProblem::Overflow { nb: Some(_), .. }));
    says(&text, &["strides"]);

    // a view whose strides overflow
    let a = t("a", DType::F32, &[4, 3]);
    let (op, p, _) = shape_err(ops::view_2d(&a, 2, 3, usize::MAX / 2, 0));
    assert_eq!(op, "VIEW");
    assert!(matches!(p, ShapeProblem::Overflow { nb: Some(_), .. }));
}

#[test]
fn view_out_of_bounds_names_the_bytes() {
    let a = t("a", DType::F32, &[4]);
    let (op, p, text) = shape_err(ops::view_1d(&a, 3, 8));
    assert_eq!(op, "VIEW");
    assert_eq!(
        p,
        ShapeProblem::ViewOutOfBounds {
            base: "a".into(),
            ne: [3, 1, 1, 1],
            offset: 8,
            need: 20,
            size: 16
        }
    );
    says(&text, &["VIEW", "offset 8", "20 bytes of 'a'", "has 16"]);
}

#[test]
fn in_place_and_leaf_problems() {
    let a = t("a", DType::F32, &[4, 3]);
    let b = t("b", DType::F32, &[4, 5]);
    let (op, p, text) = shape_err(ops::make_inplace(Op::MulMat, vec![Some(a), Some(b)]));
    assert_eq!(op, "MUL_MAT");
    assert_eq!(p, ShapeProblem::NotInPlace);
    says(&text, &["MUL_MAT", "in place"]);

    let (op, p, text) = shape_err(ops::infer(&Op::None, &[], None));
    assert_eq!(op, "NONE");
    assert_eq!(p, ShapeProblem::Leaf);
    says(&text, &["NONE", "leaf"]);
}

/// The errors are `Error::Shape` under context layers too (the BLAS backend
/// names the node).
#[test]
fn shape_errors_are_matchable_through_context() {
    use strata::error::ResultExt;
    let a = t("a", DType::F32, &[4, 3]);
    let e = ops::reshape(&a, &[5]).context("building 'x'").unwrap_err();
    assert!(matches!(
        e.root(),
        Error::Shape {
            op: "RESHAPE",
            problem: ShapeProblem::Mismatch { .. }
        }
    ));
}
