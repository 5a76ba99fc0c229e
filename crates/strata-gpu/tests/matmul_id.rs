//! MUL_MAT_ID at prompt sizes: the tiled kernels (`shaders/matmul_id.wgsl`
//! over the f32 tiles, the f16 tiles and the int-dot tiles, each forced on
//! a private device of the first GPU) against the CPU on random shapes and
//! routings (ids with repeats within a token, experts no token picks, every
//! column on one expert, K off the 64-wide tile, M off the tile grid, b per
//! slot and broadcast), checking each time that the tiled kernel is the one
//! that ran; ids outside `0..n_expert` (zero columns, as the matrix-vector
//! kernel writes them); and a decode step staying on the matrix-vector
//! kernel.
//!
//! **Bounds.** F32 weights: both sides sum the same f32 products in another
//! order, NMSE far below [`EXACT`]. F16 weights: the CPU rounds the
//! activations to f16, as the f16 tiles do (only the sums differ) and the
//! f32 tiles do not (an f16 rounding, relative 2^-11: NMSE about 1e-7;
//! bound 1e-6). BF16: the CPU rounds them to bf16 (relative 2^-9, NMSE
//! about 1.3e-6; bound 1e-5). The legacy quants on int-dot: the GPU quantizes the
//! activations as the CPU's Q8_0 / Q8_1 do (`matmul_paths.rs`), so
//! [`EXACT`]. Every other quantized case (f32 tiles against the CPU's 8-bit
//! activations; Q4_K / Q6_K int-dot, one scale per 32 against Q8_K's per
//! 256): the rounding of the activations, NMSE a few 1e-5 at most, bound
//! the suite's 1e-4. A wrong expert, column, slot or store is off by an
//! NMSE of order 1.

use strata::backend::{alloc_graph, Backend};
use strata::conformance::{run_case, Fill, OpCase, Outcome, Rng};
use strata::{ops, DType, Graph, Result, Tensor};
use strata_gpu::{GpuDevice, MatmulPaths};

mod support;

/// Where both sides compute the same terms up to the order of f32 sums.
const EXACT: f64 = 1e-9;

const U: Fill = Fill::Uniform(-1.0, 1.0);

/// How the ids route the columns.
#[derive(Clone, Copy, Debug)]
enum Route {
    /// Uniform over every expert (repeats within a token included).
    All,
    /// Uniform over the first `n` experts only: the others get nothing.
    First(usize),
}

/// MUL_MAT_ID of `experts` weight matrices of type `t` [k, m] with `used`
/// slots per token over `tokens` tokens, b per slot (`n_b` = used) or
/// broadcast (1).
#[derive(Clone, Copy, Debug)]
struct Shape {
    t: DType,
    k: usize,
    m: usize,
    experts: usize,
    used: usize,
    n_b: usize,
    tokens: usize,
    route: Route,
}

impl Shape {
    fn name(&self) -> String {
        format!(
            "MUL_MAT_ID({},k={},m={},experts={},used={},n_b={},tokens={},{:?})",
            self.t, self.k, self.m, self.experts, self.used, self.n_b, self.tokens, self.route
        )
    }

    fn case(&self, max_nmse: f64) -> OpCase {
        let s = *self;
        OpCase {
            name: s.name(),
            max_nmse,
            build: Box::new(move || {
                let a = Tensor::new(s.t, &[s.k, s.m, s.experts])?;
                let b = Tensor::new(DType::F32, &[s.k, s.n_b, s.tokens])?;
                let ids = Tensor::new(DType::I32, &[s.used, s.tokens])?;
                let out = ops::mul_mat_id(&a, &b, &ids)?;
                let route = match s.route {
                    Route::All => s.experts,
                    Route::First(n) => n,
                };
                Ok((vec![(a, U), (b, U), (ids, Fill::Index(route))], out))
            }),
        }
    }

    /// The NMSE bound against the CPU on `paths` (see the module docs).
    fn bound(&self, paths: MatmulPaths) -> f64 {
        match self.t {
            DType::F32 => EXACT,
            DType::F16 => 1e-6,
            DType::BF16 => 1e-5,
            DType::Q4_0 | DType::Q4_1 | DType::Q5_0 | DType::Q5_1 | DType::Q8_0
                if paths.int_dot =>
            {
                EXACT
            }
            _ => 1e-4,
        }
    }

    /// The tiled kernel `paths` runs this on.
    fn kernel(&self, paths: MatmulPaths) -> &'static str {
        let int = matches!(
            self.t,
            DType::Q4_0
                | DType::Q4_1
                | DType::Q5_0
                | DType::Q5_1
                | DType::Q8_0
                | DType::Q4_K
                | DType::Q6_K
        );
        if paths.int_dot && int {
            "mul_mat_id_int/"
        } else {
            "mul_mat_id_tiled/"
        }
    }
}

/// Runs `shape` on `dev` (running `paths`) and the CPU; panics when it does
/// not pass its bound or ran on another kernel than the tiled one.
fn check(dev: &GpuDevice, paths: MatmulPaths, shape: &Shape) {
    let bound = shape.bound(paths);
    let case = shape.case(bound);
    let r = run_case(&case, &mut dev.backend(), 5);
    let name = shape.name();
    match r {
        Ok(Outcome::Pass { nmse }) => println!("{paths}: {name}: nmse {nmse:.2e}"),
        other => panic!("{paths}: {name}: {other:?} (bound {bound:e})"),
    }
    let kernel = shape.kernel(paths);
    let planned = dev.context().shaders_planned();
    assert!(
        planned.iter().any(|k| k.starts_with(kernel)),
        "{name}: no {kernel} among {planned:?}"
    );
}

/// Random prompt-sized shapes for `t`: K in whole blocks (and off the
/// 32-wide step for float types), M across tile edges, routes of every
/// kind; enough columns per expert that the tiled kernel runs.
fn shapes(t: DType, count: usize, rng: &mut Rng) -> Vec<Shape> {
    let mut pick = |lo: usize, hi: usize| lo + rng.below(hi - lo + 1);
    let mut v = Vec::new();
    for i in 0..count {
        let blk = t.block_size();
        let k = match blk {
            256 => 256 * pick(1, 2),
            32 => 32 * pick(1, 6),
            _ => pick(5, 150),
        };
        let experts = pick(2, 9);
        let used = pick(1, experts.min(4));
        // more than 8 columns per expert (tiles on any device), over more
        // than 4 tokens
        let tokens = (8 * experts / used + 1).max(5) + pick(0, 90);
        let route = match i % 3 {
            0 => Route::All,
            1 => Route::First(pick(1, experts.div_ceil(2))),
            _ => Route::First(1),
        };
        v.push(Shape {
            t,
            k,
            m: pick(1, 140),
            experts,
            used,
            n_b: if i % 2 == 0 { 1 } else { used },
            tokens,
            route,
        });
    }
    v
}

#[test]
fn tiled_mul_mat_id_matches_the_cpu_on_every_path() {
    let mut rng = Rng::new(453);
    for paths in MatmulPaths::EACH {
        let Some(dev) = support::device_with_paths(paths) else {
            continue;
        };
        let types: &[DType] = if paths == MatmulPaths::F16_TILES {
            &[DType::F16, DType::BF16]
        } else if paths == MatmulPaths::INT_DOT {
            &[
                DType::Q4_0,
                DType::Q4_1,
                DType::Q5_0,
                DType::Q5_1,
                DType::Q8_0,
                DType::Q4_K,
                DType::Q6_K,
            ]
        } else {
            &strata::conformance::WEIGHT_TYPES
        };
        for &t in types {
            for s in shapes(t, 2, &mut rng) {
                check(&dev, paths, &s);
            }
        }
    }
}

#[test]
fn one_expert_takes_every_column() {
    // 3 slots × 150 tokens on expert 0: 450 columns, 8 groups of 64 for
    // the 3 column groups of the grid (each workgroup takes several)
    let Some(dev) = support::device_with_paths(MatmulPaths::F32_TILES) else {
        return;
    };
    for (t, n_b) in [(DType::F32, 3), (DType::Q4_K, 1)] {
        let s = Shape {
            t,
            k: if t == DType::F32 { 77 } else { 256 },
            m: 65,
            experts: 4,
            used: 3,
            n_b,
            tokens: 150,
            route: Route::First(1),
        };
        check(&dev, MatmulPaths::F32_TILES, &s);
    }
}

/// `out[:, s, t]` computed on the host in f64 from the weights as the
/// device holds them (dequantized) and `b`: zero where the id is invalid.
fn expected(w: &[f32], b: &[f32], ids: &[i32], k: usize, m: usize, experts: usize) -> Vec<f32> {
    let tokens = b.len() / k;
    let used = ids.len() / tokens;
    let mut out = vec![0f32; m * ids.len()];
    for (c, &id) in ids.iter().enumerate() {
        let Ok(e) = usize::try_from(id) else { continue };
        if e >= experts {
            continue;
        }
        let x = &b[(c / used) * k..][..k];
        for r in 0..m {
            let row = &w[(e * m + r) * k..][..k];
            let dot: f64 = row.iter().zip(x).map(|(&p, &q)| p as f64 * q as f64).sum();
            out[c * m + r] = dot as f32;
        }
    }
    out
}

#[test]
fn ids_out_of_range_give_zero_columns() {
    // ids computed by the graph (CONT of an I32 input) are not checked
    // before compute: -1, n_expert and beyond match no expert, and their
    // columns are zero on the tiles as on the matrix-vector kernel
    for paths in [MatmulPaths::F32_TILES, MatmulPaths::INT_DOT] {
        let Some(dev) = support::device_with_paths(paths) else {
            continue;
        };
        for t in [DType::F32, DType::Q4_0] {
            let (k, m, experts, used, tokens) = (96, 70, 3, 2, 40);
            let run = || -> Result<(Vec<f32>, Vec<f32>, Vec<i32>)> {
                let a = Tensor::new(t, &[k, m, experts])?;
                let b = Tensor::new(DType::F32, &[k, 1, tokens])?;
                let raw = Tensor::new(DType::I32, &[used, tokens])?;
                let ids = ops::cont(&raw)?;
                let out = ops::mul_mat_id(&a, &b, &ids)?;
                let graph = Graph::build(&[out.clone()]);
                let mut backend = dev.backend();
                let _bufs = alloc_graph(&graph, &backend.default_buffer_type())?;
                let mut rng = Rng::new(7);
                a.write_f32(&rng.vec(k * m * experts, -1.0, 1.0))?;
                let bv = rng.vec(k * tokens, -1.0, 1.0);
                b.write_f32(&bv)?;
                let idv: Vec<i32> = (0..used * tokens)
                    .map(|i| [0, -1, 2, 3, 1, 1000, i32::MIN, 2][i % 8])
                    .collect();
                raw.write_i32(&idv)?;
                // what the kernel does not write stays NaN
                out.write_f32(&vec![f32::NAN; out.nelements()])?;
                backend.graph_compute(&graph)?;
                let want = expected(&a.to_f32_vec()?, &bv, &idv, k, m, experts);
                Ok((out.to_f32_vec()?, want, idv))
            };
            let (got, want, idv) = run().unwrap();
            for (c, &id) in idv.iter().enumerate() {
                if !(0..experts as i32).contains(&id) {
                    let col = &got[c * m..(c + 1) * m];
                    assert!(col.iter().all(|&v| v == 0.0), "{t} id {id}: {col:?}");
                }
            }
            let e = strata::conformance::nmse(&got, &want);
            let bound = if paths.int_dot && t == DType::Q4_0 {
                1e-4
            } else {
                EXACT
            };
            println!("{paths}: {t}: nmse {e:.2e}");
            assert!(e <= bound, "{paths}: {t}: nmse {e:e}");
            let planned = dev.context().shaders_planned();
            assert!(
                planned.iter().any(|k| k.starts_with("mul_mat_id_")),
                "{planned:?}"
            );
        }
    }
}

#[test]
fn a_decode_step_stays_on_the_matrix_vector_kernel() {
    let Some(dev) = support::device_with_paths(MatmulPaths::F32_TILES) else {
        return;
    };
    for (experts, used, tokens) in [(8, 2, 1), (4, 4, 1), (128, 8, 32)] {
        let s = Shape {
            t: DType::Q4_0,
            k: 64,
            m: 40,
            experts,
            used,
            n_b: 1,
            tokens,
            route: Route::All,
        };
        let case = s.case(1e-4);
        let r = run_case(&case, &mut dev.backend(), 5);
        assert!(matches!(r, Ok(Outcome::Pass { .. })), "{}: {r:?}", s.name());
    }
    let planned = dev.context().shaders_planned();
    assert!(
        planned.iter().all(|k| !k.starts_with("mul_mat_id_")),
        "{planned:?}"
    );
    assert!(
        planned.iter().any(|k| k.starts_with("mul_mat_vec")),
        "{planned:?}"
    );
}
