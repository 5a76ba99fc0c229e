//! The mixture-of-experts ops on the CPU: MUL_MAT_ID (every weight type,
//! plain and packed memory), ADD_ID, TOP_K and llama.cpp's ARGSORT routing,
//! against f64 references, on 1, 2 and 3 threads; bad input is a typed
//! error naming the op, never a panic or an out-of-bounds read.
//!
//! MUL_MAT_ID bounds are MUL_MAT's (`ops_matmul.rs`): against a reference
//! whose activations are rounded to the weight's dot type, the error
//! normalized by Σ|a·b| per output is at most 1e-12 (1e-7 for Q8_1
//! partners); against exact activations the NMSE is at most 1e-10 (F32),
//! 1e-5 (F16) or 1e-4 (the rest), checked where there are ≥ 16 outputs.

mod common;

use common::matmul::{assert_emulated, exact_tol, k_blocks};
use common::{assert_close, cpu_round_trip, run, tensor, write_input, Rng};
use proptest::prelude::*;
use strata::conformance::WEIGHT_TYPES;
use strata::{cpu, ops, DType, Graph, Tensor};

/// One MUL_MAT_ID: `at` experts [k, m, n_exp], activations [k, n_b, n_tok]
/// (n_b = n_used, or 1 when `per_slot` is false), ids [n_used, n_tok].
#[derive(Clone, Copy, Debug)]
struct Moe {
    at: DType,
    n_exp: usize,
    n_used: usize,
    n_tok: usize,
    per_slot: bool,
    m: usize,
    k: usize,
    /// `b` is every other row of a wider tensor, one element in.
    strided: bool,
}

impl Moe {
    fn n_b(&self) -> usize {
        if self.per_slot {
            self.n_used
        } else {
            1
        }
    }
}

/// The activations: (tensor to fill, its element count, the view used as `b`).
fn make_b(c: &Moe) -> (Tensor, usize, Tensor) {
    let (k, n_b, n_tok) = (c.k, c.n_b(), c.n_tok);
    if !c.strided {
        let b = tensor("b", DType::F32, &[k, n_b, n_tok]);
        return (b.clone(), k * n_b * n_tok, b);
    }
    let base = tensor("b_base", DType::F32, &[k + 3, 2 * n_b, n_tok]);
    let nb1 = (k + 3) * 4;
    let b = ops::view_4d(
        &base,
        [k, n_b, n_tok, 1],
        2 * nb1,
        2 * n_b * nb1,
        2 * n_b * n_tok * nb1,
        4,
    )
    .unwrap();
    (base, (k + 3) * 2 * n_b * n_tok, b)
}

/// out[i, s, t] = Σ_x f(a[x, i, ids[s, t]] · b[x, s % n_b, t]) in f64.
fn reference(c: &Moe, a: &[f32], b: &[f32], ids: &[i32], f: fn(f64) -> f64) -> Vec<f64> {
    let (k, m, n_b) = (c.k, c.m, c.n_b());
    let mut out = Vec::new();
    for t in 0..c.n_tok {
        for s in 0..c.n_used {
            let e = ids[t * c.n_used + s] as usize;
            for i in 0..m {
                let (ao, bo) = ((e * m + i) * k, (t * n_b + s % n_b) * k);
                out.push((0..k).map(|x| f(a[ao + x] as f64 * b[bo + x] as f64)).sum());
            }
        }
    }
    out
}

/// Random inputs from `seed`: weights, activations (base tensor), ids.
fn inputs(c: &Moe, nbase: usize, seed: u64) -> (Vec<f32>, Vec<f32>, Vec<i32>) {
    let mut rng = Rng::new(seed);
    let av = rng.vec(c.k * c.m * c.n_exp, -1.0, 1.0);
    let bv = rng.vec(nbase, -1.0, 1.0);
    let ids = (0..c.n_used * c.n_tok)
        .map(|_| rng.below(c.n_exp) as i32)
        .collect();
    (av, bv, ids)
}

/// Computes the case with `nth` threads and checks it against the
/// references; returns the result.
fn check(c: &Moe, nth: usize, seed: u64) -> Vec<f32> {
    let a = tensor("experts", c.at, &[c.k, c.m, c.n_exp]);
    let (base, nbase, b) = make_b(c);
    let ids_t = tensor("ids", DType::I32, &[c.n_used, c.n_tok]);
    let out = ops::mul_mat_id(&a, &b, &ids_t).unwrap();
    assert_eq!(out.ne(), [c.m, c.n_used, c.n_tok, 1]);
    let (av, bv, ids) = inputs(c, nbase, seed);
    let idsf: Vec<f32> = ids.iter().map(|&i| i as f32).collect();
    let got = run(&[out], &[(&a, &av), (&base, &bv), (&ids_t, &idsf)], nth).remove(0);

    let a_stored = a.to_f32_vec().unwrap();
    let b_logical = b.to_f32_vec().unwrap();
    let vdt = strata::quant::vec_dot_type(c.at);
    let b_rounded: Vec<f32> = b_logical
        .chunks(c.k)
        .flat_map(|r| cpu_round_trip(vdt, r))
        .collect();
    let emulated = reference(c, &a_stored, &b_rounded, &ids, |x| x);
    let magnitude = reference(c, &a_stored, &b_rounded, &ids, f64::abs);
    assert_emulated(&format!("{c:?}"), c.at, &got, &emulated, &magnitude);
    if got.len() >= 16 {
        let exact = reference(c, &a_stored, &b_logical, &ids, |x| x);
        let what = format!("{c:?} (vs exact activations)");
        assert_close(&what, &got, &exact, exact_tol(c.at));
    }
    got
}

#[test]
fn every_weight_type_matches_the_reference_on_any_thread_count() {
    let mut seed = 10;
    for at in WEIGHT_TYPES {
        for (per_slot, strided, n_tok) in [(false, false, 7), (true, true, 1), (false, true, 40)] {
            seed += 1;
            let c = Moe {
                at,
                n_exp: 5,
                n_used: 3,
                n_tok,
                per_slot,
                m: 37,
                k: k_blocks(at, 3),
                strided,
            };
            let one = check(&c, 1, seed);
            for nth in [2, 3] {
                assert_eq!(
                    check(&c, nth, seed),
                    one,
                    "{c:?}: {nth} threads differ from 1"
                );
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    #[test]
    fn random_shapes_match_the_reference(
        ti in 0..WEIGHT_TYPES.len(),
        n_exp in 1usize..7,
        n_used in 1usize..5,
        n_tok in 1usize..9,
        per_slot: bool,
        strided: bool,
        m in 1usize..40,
        blocks in 1usize..4,
        nth in 1usize..4,
        seed in 0u64..1000,
    ) {
        let at = WEIGHT_TYPES[ti];
        let c = Moe { at, n_exp, n_used, n_tok, per_slot, m, k: k_blocks(at, blocks), strided };
        check(&c, nth, seed);
    }
}

/// Every id of every token the same expert, twice per token (duplicates):
/// each output equals MUL_MAT of that expert's matrix.
#[test]
fn duplicate_ids_pick_the_same_expert() {
    let c = Moe {
        at: DType::Q4_K,
        n_exp: 3,
        n_used: 2,
        n_tok: 4,
        per_slot: false,
        m: 16,
        k: 256,
        strided: false,
    };
    let a = tensor("experts", c.at, &[c.k, c.m, c.n_exp]);
    let b = tensor("b", DType::F32, &[c.k, 1, c.n_tok]);
    let ids = tensor("ids", DType::I32, &[2, c.n_tok]);
    let out = ops::mul_mat_id(&a, &b, &ids).unwrap();
    let e1 = ops::view_2d(&a, c.k, c.m, a.nb()[1], a.nb()[2]).unwrap();
    let b2 = ops::reshape(&b, &[c.k, c.n_tok]).unwrap();
    let plain = ops::mul_mat(&e1, &b2).unwrap();
    let (av, bv, _) = inputs(&c, c.k * c.n_tok, 3);
    let r = run(&[out, plain], &[(&a, &av), (&b, &bv), (&ids, &[1.0; 8])], 2);
    for t in 0..c.n_tok {
        for s in 0..2 {
            let col = &r[0][(t * 2 + s) * c.m..][..c.m];
            assert_eq!(col, &r[1][t * c.m..][..c.m], "token {t} slot {s}");
        }
    }
}

/// Runs `outs` with the inputs on `buft` memory, `nth` threads.
fn run_on(
    buft: &std::sync::Arc<dyn strata::backend::BufferType>,
    outs: &[Tensor],
    inputs: &[(&Tensor, &[f32])],
    nth: usize,
) -> strata::Result<Vec<Vec<f32>>> {
    let g = Graph::build(outs);
    let _bufs = strata::backend::alloc_graph(&g, buft)?;
    for (t, v) in inputs {
        if t.dtype() == DType::I32 {
            t.write_i32(&v.iter().map(|&x| x as i32).collect::<Vec<_>>())?;
        } else {
            t.write_f32(v)?;
        }
    }
    cpu::compute(&g, nth)?;
    outs.iter().map(|t| t.to_f32_vec()).collect()
}

/// The shapes of [`on_buffer`]: experts [K, M, N_EXP], N_TOK tokens, two
/// experts each (K = 256 so that the K-quants pack too; 80 pairs, so that
/// experts get 16 columns and more: the many-column kernels).
const PK: (usize, usize, usize, usize) = (256, 32, 4, 40);

/// The inputs of [`on_buffer`]: experts, activations, ids.
fn packed_inputs() -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let (k, m, n_exp, n_tok) = PK;
    let mut rng = Rng::new(5);
    let av = rng.vec(k * m * n_exp, -1.0, 1.0);
    let bv = rng.vec(k * n_tok, -1.0, 1.0);
    let iv: Vec<f32> = (0..2 * n_tok).map(|_| rng.below(n_exp) as f32).collect();
    (av, bv, iv)
}

/// MUL_MAT_ID of `at` experts ([`PK`]) with its inputs on `buft`, on `nth`
/// threads: the result, and how the buffer holds the experts.
fn on_buffer(
    at: DType,
    buft: &std::sync::Arc<dyn strata::backend::BufferType>,
    nth: usize,
) -> (Vec<f32>, strata::backend::TensorLayout) {
    let (k, m, n_exp, n_tok) = PK;
    let a = tensor("experts", at, &[k, m, n_exp]);
    let b = tensor("b", DType::F32, &[k, 1, n_tok]);
    let ids = tensor("ids", DType::I32, &[2, n_tok]);
    let out = ops::mul_mat_id(&a, &b, &ids).unwrap();
    let (av, bv, iv) = packed_inputs();
    let ins = [(&a, &av[..]), (&b, &bv[..]), (&ids, &iv[..])];
    let g = Graph::build(&[out.clone()]);
    let _bufs = strata::backend::alloc_graph(&g, buft).unwrap();
    for (t, v) in ins {
        write_input(t, v);
    }
    cpu::compute(&g, nth).unwrap();
    let layout = a.buffer().unwrap().tensor_layout(&a);
    (out.to_f32_vec().unwrap(), layout)
}

/// MUL_MAT of expert `e` alone (a [K, M] weight on `buft`) with every
/// token's activations: [M, N_TOK].
fn one_expert(
    at: DType,
    e: usize,
    buft: &std::sync::Arc<dyn strata::backend::BufferType>,
) -> Vec<f32> {
    let (k, m, _, n_tok) = PK;
    let (av, bv, _) = packed_inputs();
    let a = tensor("expert", at, &[k, m]);
    let b = tensor("b", DType::F32, &[k, n_tok]);
    let out = ops::mul_mat(&a, &b).unwrap();
    let g = Graph::build(&[out.clone()]);
    let _bufs = strata::backend::alloc_graph(&g, buft).unwrap();
    write_input(&a, &av[e * k * m..(e + 1) * k * m]);
    write_input(&b, &bv);
    cpu::compute(&g, 2).unwrap();
    out.to_f32_vec().unwrap()
}

/// Packed experts (`CPU_PACKED`) give, for every (slot, token), a packed
/// MUL_MAT of the chosen expert bit for bit (the tile kernels where this
/// level has them; otherwise the plain dot products, so also the plain
/// result bit for bit), on any thread count; and stay within MUL_MAT's
/// bounds of plain memory (the K-quants: the plain result bit for bit,
/// every level's K kernels being the scalar reference's bits).
#[test]
fn packed_experts_match_a_packed_mul_mat() {
    use strata::backend::TensorLayout;
    let (_, m, n_exp, n_tok) = PK;
    let (_, _, iv) = packed_inputs();
    let packed_buft = cpu::packed_buffer_type();
    for at in [
        DType::Q4_0,
        DType::Q4_1,
        DType::Q5_0,
        DType::Q5_1,
        DType::Q8_0,
        DType::IQ4_NL,
    ]
    .into_iter()
    .chain(strata::quant::packed::K_TYPES)
    {
        let (plain, l0) = on_buffer(at, &cpu::cpu_buffer_type(), 2);
        let (packed, l1) = on_buffer(at, &packed_buft, 3);
        assert_eq!(
            (l0, l1),
            (TensorLayout::Plain, TensorLayout::Packed),
            "{at}"
        );
        assert_eq!(
            packed,
            on_buffer(at, &packed_buft, 1).0,
            "{at}: 1 vs 3 threads"
        );
        let per: Vec<Vec<f32>> = (0..n_exp)
            .map(|e| one_expert(at, e, &packed_buft))
            .collect();
        for t in 0..n_tok {
            for s in 0..2 {
                let e = iv[2 * t + s] as usize;
                let got = &packed[(2 * t + s) * m..(2 * t + s + 1) * m];
                assert_eq!(got, &per[e][t * m..(t + 1) * m], "{at}: slot {s} token {t}");
            }
        }
        // The K-quants' kernels (packed tiles or per-block dot products)
        // all give the scalar reference's bits.
        if at.block_size() == 256 {
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&packed), bits(&plain), "{at}: packed vs plain bits");
        }
        // the same products, summed in another order
        let plain: Vec<f64> = plain.iter().map(|&x| f64::from(x)).collect();
        assert_close(&format!("{at}: packed vs plain"), &packed, &plain, 1e-10);
    }
}

/// Experts routed as llama.cpp routes them (a view of a descending
/// ARGSORT: strided ids) match the reference with the same routing.
#[test]
fn argsort_routing_matches_explicit_ids() {
    let (k, m, n_exp, n_used, n_tok) = (64, 24, 8, 2, 5);
    let logits = tensor("logits", DType::F32, &[n_exp, n_tok]);
    let a = tensor("experts", DType::F16, &[k, m, n_exp]);
    let b = tensor("b", DType::F32, &[k, 1, n_tok]);
    let sel = ops::argsort_top_k(&logits, n_used).unwrap();
    assert_eq!(sel.ne(), [n_used, n_tok, 1, 1]);
    assert_eq!(sel.nb()[1], n_exp * 4);
    let out = ops::mul_mat_id(&a, &b, &sel).unwrap();
    let mut rng = Rng::new(9);
    let lv = rng.vec(n_exp * n_tok, -1.0, 1.0);
    let av = rng.vec(k * m * n_exp, -1.0, 1.0);
    let bv = rng.vec(k * n_tok, -1.0, 1.0);
    let r = run(&[out, sel], &[(&logits, &lv), (&a, &av), (&b, &bv)], 3);
    // The routing: the two largest logits per token, largest first.
    let mut ids = Vec::new();
    for t in 0..n_tok {
        let row = &lv[t * n_exp..(t + 1) * n_exp];
        let mut idx: Vec<usize> = (0..n_exp).collect();
        idx.sort_by(|&x, &y| row[y].total_cmp(&row[x]));
        ids.extend(idx[..n_used].iter().map(|&i| i as i32));
    }
    let got_ids: Vec<i32> = r[1].iter().map(|&x| x as i32).collect();
    assert_eq!(got_ids, ids);
    let c = Moe {
        at: DType::F16,
        n_exp,
        n_used,
        n_tok,
        per_slot: false,
        m,
        k,
        strided: false,
    };
    let a_stored = a.to_f32_vec().unwrap();
    let b_rounded: Vec<f32> = bv
        .chunks(k)
        .flat_map(|r| cpu_round_trip(DType::F16, r))
        .collect();
    assert_close(
        "argsort routing",
        &r[0],
        &reference(&c, &a_stored, &b_rounded, &ids, |x| x),
        1e-10,
    );
}

#[test]
fn add_id_adds_the_chosen_rows() {
    let (n, n_exp, n_used, n_tok, ne3) = (19, 4, 3, 5, 2);
    let a = tensor("a", DType::F32, &[n, n_used, n_tok, ne3]);
    let b = tensor("bias", DType::F32, &[n, n_exp]);
    let ids = tensor("ids", DType::I32, &[n_used, n_tok]);
    let out = ops::add_id(&a, &b, &ids).unwrap();
    assert_eq!(out.ne(), a.ne());
    let mut rng = Rng::new(4);
    let av = rng.vec(n * n_used * n_tok * ne3, -1.0, 1.0);
    let bv = rng.vec(n * n_exp, -1.0, 1.0);
    let iv: Vec<f32> = (0..n_used * n_tok)
        .map(|_| rng.below(n_exp) as f32)
        .collect();
    let mut want = Vec::new();
    for j in 0..ne3 {
        for t in 0..n_tok {
            for s in 0..n_used {
                let e = iv[t * n_used + s] as usize;
                for i in 0..n {
                    let x = av[((j * n_tok + t) * n_used + s) * n + i];
                    want.push(x as f64 + bv[e * n + i] as f64);
                }
            }
        }
    }
    for nth in 1..=3 {
        let got = run(&[out.clone()], &[(&a, &av), (&b, &bv), (&ids, &iv)], nth).remove(0);
        assert_close("ADD_ID", &got, &want, 1e-14);
    }
}

#[test]
fn top_k_is_the_descending_argsort_prefix() {
    let a = tensor("a", DType::F32, &[23, 4, 3]);
    let tk = ops::top_k(&a, 5).unwrap();
    assert_eq!(tk.ne(), [5, 4, 3, 1]);
    assert_eq!(tk.dtype(), DType::I32);
    let srt = ops::argsort(&a, ops::SortOrder::Desc).unwrap();
    let av = Rng::new(8).vec(23 * 12, -1.0, 1.0);
    for nth in 1..=3 {
        let r = run(&[tk.clone(), srt.clone()], &[(&a, &av)], nth);
        for row in 0..12 {
            assert_eq!(r[0][row * 5..][..5], r[1][row * 23..][..5], "row {row}");
        }
    }
    assert!(ops::top_k(&a, 24).is_err());
    assert!(ops::argsort_top_k(&a, 24).is_err());
    assert_eq!(ops::top_k(&a, 23).unwrap().ne(), [23, 4, 3, 1]);
}

/// The error of a build or compute names the op.
fn names(e: strata::Error, op: &str) {
    let s = e.to_string();
    assert!(s.contains(op), "{s}");
}

#[test]
fn bad_shapes_and_types_are_typed_errors() {
    let t = |dt, d: &[usize]| Tensor::new(dt, d).unwrap();
    let a = t(DType::Q8_0, &[64, 8, 4]);
    let b = t(DType::F32, &[64, 1, 3]);
    let ids = t(DType::I32, &[2, 3]);
    assert!(ops::mul_mat_id(&a, &b, &ids).is_ok());
    let bad = [
        ops::mul_mat_id(&a, &b, &t(DType::F32, &[2, 3])),
        ops::mul_mat_id(&a, &b, &t(DType::I64, &[2, 3])),
        ops::mul_mat_id(&a, &b, &t(DType::I32, &[2, 4])),
        ops::mul_mat_id(&a, &b, &t(DType::I32, &[2, 3, 2])),
        ops::mul_mat_id(&a, &t(DType::F32, &[32, 1, 3]), &ids),
        ops::mul_mat_id(&a, &t(DType::F32, &[64, 3, 3]), &ids),
        ops::mul_mat_id(&a, &t(DType::F32, &[64, 1, 3, 2]), &ids),
        ops::mul_mat_id(&t(DType::Q8_0, &[64, 8, 4, 2]), &b, &ids),
        ops::mul_mat_id(&t(DType::I32, &[64, 8, 4]), &b, &ids),
        ops::mul_mat_id(&a, &t(DType::Q8_0, &[64, 1, 3]), &ids),
        ops::mul_mat_id(
            &ops::transpose(&t(DType::F32, &[8, 64, 4])).unwrap(),
            &b,
            &ids,
        ),
    ];
    for r in bad {
        names(r.unwrap_err(), "MUL_MAT_ID");
    }
    let x = t(DType::F32, &[16, 2, 3]);
    let bias = t(DType::F32, &[16, 4]);
    assert!(ops::add_id(&x, &bias, &ids).is_ok());
    let bad = [
        ops::add_id(&x, &bias, &t(DType::F32, &[2, 3])),
        ops::add_id(&x, &t(DType::F32, &[8, 4]), &ids),
        ops::add_id(&x, &bias, &t(DType::I32, &[3, 3])),
        ops::add_id(&x, &bias, &t(DType::I32, &[2, 2])),
    ];
    for r in bad {
        names(r.unwrap_err(), "ADD_ID");
    }
    names(ops::top_k(&t(DType::I32, &[8, 2]), 2).unwrap_err(), "TOP_K");
    // A received op without k (no layout) is refused, not a panic.
    let no_k = ops::make(ops::Op::TopK, vec![Some(x.clone())], None);
    names(no_k.unwrap_err(), "TOP_K");
    let missing = ops::make(
        ops::Op::MulMatId,
        vec![Some(a.clone()), Some(b.clone())],
        None,
    );
    names(missing.unwrap_err(), "MUL_MAT_ID");
}

/// Ids outside `0..n_expert` in an input: refused before compute, with the
/// op, the tensor and the value named; the output is not written.
#[test]
fn out_of_range_input_ids_are_refused() {
    for bad_id in [4, -1, i32::MAX] {
        let a = tensor("experts", DType::Q4_0, &[32, 16, 4]);
        let b = tensor("b", DType::F32, &[32, 1, 2]);
        let ids = tensor("ids", DType::I32, &[2, 2]);
        let out = ops::mul_mat_id(&a, &b, &ids).unwrap();
        let bias = tensor("bias", DType::F32, &[16, 4]);
        let biased = ops::add_id(&out, &bias, &ids).unwrap();
        let ins_ids = [0.0, 1.0, bad_id as f32, 3.0];
        let (av, bv, biasv) = ([0.5f32; 32 * 16 * 4], [1.0f32; 64], [1.0f32; 64]);
        let base = [(&a, &av[..]), (&b, &bv[..]), (&ids, &ins_ids[..])];
        let with_bias = [base[0], base[1], base[2], (&bias, &biasv[..])];
        for (outs, ins) in [
            (vec![out.clone()], &base[..]),
            (vec![biased.clone()], &with_bias[..]),
        ] {
            let e = run_on(&cpu::cpu_buffer_type(), &outs, ins, 2).unwrap_err();
            let s = e.to_string();
            assert!(s.contains("MUL_MAT_ID") || s.contains("ADD_ID"), "{s}");
            assert!(s.contains("'ids'"), "{s}");
        }
    }
}

/// Ids computed by the graph that fall outside `0..n_expert` (a routing
/// over more logits than experts) read nothing out of bounds: those
/// columns are zero, the others are computed.
#[test]
fn out_of_range_computed_ids_give_zero_columns() {
    let (k, m, n_exp, n_tok) = (32, 16, 2, 6);
    let logits = tensor("logits", DType::F32, &[6, n_tok]);
    let ids = ops::argsort_top_k(&logits, 2).unwrap();
    let a = tensor("experts", DType::F32, &[k, m, n_exp]);
    let b = tensor("b", DType::F32, &[k, 1, n_tok]);
    let out = ops::mul_mat_id(&a, &b, &ids).unwrap();
    let bias = tensor("bias", DType::F32, &[m, n_exp]);
    let biased = ops::add_id(&out, &bias, &ids).unwrap();
    let mut rng = Rng::new(2);
    let lv = rng.vec(6 * n_tok, -1.0, 1.0);
    let av = rng.vec(k * m * n_exp, 0.5, 1.0);
    let bv = rng.vec(k * n_tok, 0.5, 1.0);
    let r = run(
        &[out, biased, ids],
        &[(&logits, &lv), (&a, &av), (&b, &bv), (&bias, &[2.0; 32])],
        3,
    );
    let mut zeros = 0;
    for (j, &id) in r[2].iter().enumerate() {
        let col = &r[0][j * m..(j + 1) * m];
        let col_b = &r[1][j * m..(j + 1) * m];
        if id as usize >= n_exp {
            zeros += 1;
            assert!(col.iter().all(|&x| x == 0.0), "column {j} (id {id})");
            assert!(
                col_b.iter().all(|&x| x == 0.0),
                "biased column {j} (id {id})"
            );
        } else {
            assert!(col.iter().all(|&x| x > 0.0), "column {j} (id {id})");
            assert!(
                col_b.iter().zip(col).all(|(&y, &x)| y == x + 2.0),
                "biased column {j}"
            );
        }
    }
    assert!(
        zeros > 0,
        "the routing should pick some ids past the experts"
    );
}

/// The conformance suite (run on every device, RPC included) has cases of
/// each of these ops.
#[test]
fn the_conformance_suite_covers_the_moe_ops() {
    let cases = strata::conformance::cases();
    for op in ["MUL_MAT_ID", "ADD_ID", "TOP_K"] {
        assert!(cases.iter().any(|c| c.op_name() == op), "{op}");
    }
    let per_type = |t: DType| {
        cases
            .iter()
            .filter(|c| c.name.starts_with(&format!("MUL_MAT_ID(type_a={t},")))
            .count()
    };
    assert!(WEIGHT_TYPES.into_iter().all(|t| per_type(t) >= 2));
}
