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

/// The shared per-node preparation of the tiled path against the per-tile
/// path, run directly on one node with chosen work memory.
mod shared_tables {
    use super::tiled::SharedPlan;
    use super::*;
    use crate::cpu::{alloc_graph_host, CpuBackend, ThreadPool};
    use crate::isa::Isa;
    use crate::{Graph, Tensor};

    /// How the mask of a case is filled.
    #[derive(Clone, Copy, Debug)]
    enum Fill {
        /// llama.cpp's causal mask (keys past the query's position -inf).
        Causal,
        /// Random biases with -inf holes.
        Values,
        /// Values, with keys 64..128 and query rows 64..128 entirely -inf:
        /// whole dead key tiles and a dead query tile.
        DeadTiles,
        /// Causal, Values and DeadTiles in turn over the mask planes, so
        /// that the planes' classes differ.
        Mixed,
    }

    /// One case: shapes, types and the mask.
    #[derive(Clone, Copy, Debug)]
    struct Case {
        d: usize,
        dv: usize,
        n_q: usize,
        n_kv: usize,
        h: usize,
        h_kv: usize,
        ne3: usize,
        kv_t: DType,
        /// Mask type, planes over heads and batches, and fill.
        mask: Option<(DType, usize, usize, Fill)>,
        max_bias: f32,
        softcap: f32,
    }

    /// A deterministic generator (xorshift) of values in [lo, hi).
    struct Gen(u64);

    impl Gen {
        fn next(&mut self, lo: f32, hi: f32) -> f32 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            lo + (hi - lo) * ((self.0 >> 40) as f32 / (1u64 << 24) as f32)
        }

        fn vec(&mut self, n: usize, lo: f32, hi: f32) -> Vec<f32> {
            (0..n).map(|_| self.next(lo, hi)).collect()
        }
    }

    /// The case's graph, allocated and filled: the FLASH_ATTN_EXT node, and
    /// the buffers that hold it.
    fn build(
        c: &Case,
        seed: u64,
    ) -> (
        Graph,
        Tensor,
        Vec<std::sync::Arc<dyn crate::backend::Buffer>>,
    ) {
        let mut g = Gen(seed | 1);
        let t = |name: &str, dt: DType, ne: &[usize]| {
            let t = Tensor::new(dt, ne).unwrap().with_name(name);
            t.set_input();
            t
        };
        let q = t("q", DType::F32, &[c.d, c.n_q, c.h, c.ne3]);
        let k = t("k", c.kv_t, &[c.d, c.n_kv, c.h_kv, 1]);
        let v = t("v", c.kv_t, &[c.dv, c.n_kv, c.h_kv, 1]);
        // Mask rows: n_q rounded up as llama.cpp pads them.
        let mrows = c.n_q.next_multiple_of(8);
        let mask = c
            .mask
            .map(|(mt, m2, m3, _)| t("mask", mt, &[c.n_kv, mrows, m2, m3]));
        let sinks = t("sinks", DType::F32, &[c.h]);
        let out = crate::ops::make(
            Op::FlashAttnExt {
                scale: 1.0 / (c.d as f32).sqrt(),
                max_bias: c.max_bias,
                softcap: c.softcap,
            },
            vec![
                Some(q.clone()),
                Some(k.clone()),
                Some(v.clone()),
                mask.clone(),
                Some(sinks.clone()),
            ],
            None,
        )
        .unwrap();
        let graph = Graph::build(std::slice::from_ref(&out));
        let bufs = alloc_graph_host(&graph).unwrap();
        q.write_f32(&g.vec(q.nelements(), -1.0, 1.0)).unwrap();
        k.write_f32(&g.vec(k.nelements(), -1.0, 1.0)).unwrap();
        v.write_f32(&g.vec(v.nelements(), -2.0, 2.0)).unwrap();
        sinks.write_f32(&g.vec(c.h, -1.0, 2.0)).unwrap();
        if let (Some(m), Some((_, m2, m3, fill))) = (&mask, c.mask) {
            let mut vals = Vec::with_capacity(m.nelements());
            for plane in 0..m2 * m3 {
                let fill = match fill {
                    Fill::Mixed => [Fill::Causal, Fill::Values, Fill::DeadTiles][plane % 3],
                    f => f,
                };
                for i in 0..mrows {
                    for j in 0..c.n_kv {
                        let r = g.next(0.0, 1.0);
                        let dead = match fill {
                            Fill::Causal => j + c.n_q > i + c.n_kv,
                            Fill::Values => r < 0.2,
                            Fill::DeadTiles => {
                                r < 0.2 || (64..128).contains(&j) || (64..128).contains(&i)
                            }
                            Fill::Mixed => unreachable!("resolved per plane"),
                        };
                        vals.push(match (dead, fill) {
                            (true, _) => f32::NEG_INFINITY,
                            (false, Fill::Causal) => 0.0,
                            (false, _) => g.next(-2.0, 0.0),
                        });
                    }
                }
            }
            m.write_f32(&vals).unwrap();
        }
        (graph, out, bufs)
    }

    /// Runs the graph's node with `nth` threads at `isa` in `work` and
    /// returns its output.
    fn run_node(graph: &Graph, out: &Tensor, nth: usize, isa: Isa, work: WorkSize) -> Vec<f32> {
        let (plans, _) = CpuBackend::resolve(graph).unwrap();
        let node = &plans.last().unwrap().1;
        let mut mem = vec![0u64; work.total(nth).div_ceil(8)];
        let addr = mem.as_mut_ptr() as usize;
        let pool = ThreadPool::new(nth);
        assert_eq!(pool.n_threads(), nth);
        assert!(pool.run(&|w| forward(node, &Ctx::new(w, addr as *mut u8, work, isa))));
        out.to_f32_vec().unwrap()
    }

    /// The plan the kernels at `isa` make within `work`.
    // only x86-64 has a vector width that depends on the level
    #[cfg_attr(not(target_arch = "x86_64"), allow(unused_variables))]
    fn plan_for(graph: &Graph, isa: Isa, work: WorkSize) -> SharedPlan {
        let (plans, _) = CpuBackend::resolve(graph).unwrap();
        let node = &plans.last().unwrap().1;
        #[cfg(target_arch = "x86_64")]
        let width = super::x86::Simd::new(isa).map_or(1, |k| k.width());
        #[cfg(not(target_arch = "x86_64"))]
        let width = Scalar.width();
        SharedPlan::new(
            node.src(0),
            node.src(1),
            node.src(2),
            node.src[3].as_ref(),
            width,
            work.shared,
        )
    }

    fn same_bits(a: &[f32], b: &[f32]) -> bool {
        a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
    }

    /// Checks one case at every level this CPU runs: with the node's full
    /// work memory the shared tables are taken (asserted), with only the
    /// tile counter reserved they are not; the results of 1, 2 and 3
    /// threads with either are identical bit for bit.
    fn check(what: &str, c: &Case, seed: u64) {
        let (graph, out, _bufs) = build(c, seed);
        let (plans, _) = CpuBackend::resolve(&graph).unwrap();
        let full = work_size(&plans.last().unwrap().1);
        let bare = WorkSize { shared: 64, ..full };
        for isa in Isa::ALL.into_iter().filter(|i| i.is_supported()) {
            let tag = format!("{what} [{isa}] {c:?}");
            let plan = plan_for(&graph, isa, full);
            assert_eq!(
                plan.classes.is_some(),
                c.mask.is_some(),
                "{tag}: class table"
            );
            assert!(plan.kv.is_some(), "{tag}: K/V copy not taken");
            assert!(plan.bytes <= full.shared, "{tag}: {plan:?} over {full:?}");
            let none = plan_for(&graph, isa, bare);
            assert!(
                none.classes.is_none() && none.kv.is_none(),
                "{tag}: {none:?}"
            );
            let want = run_node(&graph, &out, 1, isa, bare);
            assert!(
                want.iter().any(|&x| x != 0.0) && want.iter().all(|x| x.is_finite()),
                "{tag}: degenerate reference"
            );
            for nth in 1..=3 {
                let got = run_node(&graph, &out, nth, isa, full);
                assert!(
                    same_bits(&got, &want),
                    "{tag}: shared, {nth} threads differ"
                );
                let per_tile = run_node(&graph, &out, nth, isa, bare);
                assert!(
                    same_bits(&per_tile, &want),
                    "{tag}: per tile, {nth} threads differ"
                );
            }
        }
    }

    fn base() -> Case {
        Case {
            d: 64,
            dv: 64,
            n_q: 130,
            n_kv: 200,
            h: 3,
            h_kv: 3,
            ne3: 1,
            kv_t: DType::F16,
            mask: Some((DType::F16, 1, 1, Fill::Causal)),
            max_bias: 0.0,
            softcap: 0.0,
        }
    }

    #[test]
    fn causal_mask_gqa_1_and_3_f16_and_f32_kv() {
        for kv_t in [DType::F16, DType::F32] {
            for (h, h_kv) in [(3, 3), (9, 3)] {
                let c = Case {
                    kv_t,
                    h,
                    h_kv,
                    ..base()
                };
                check("causal", &c, 1 + h as u64);
            }
        }
    }

    #[test]
    fn masks_with_values_and_dead_tiles() {
        let mut seed = 10;
        for fill in [Fill::Values, Fill::DeadTiles, Fill::Mixed] {
            for (mt, m2, m3) in [(DType::F16, 1, 1), (DType::F32, 3, 2), (DType::F16, 1, 2)] {
                for kv_t in [DType::F16, DType::F32] {
                    seed += 1;
                    let c = Case {
                        d: 40,
                        dv: 24,
                        n_q: 150,
                        n_kv: 193,
                        h: 6,
                        h_kv: 2,
                        ne3: 2,
                        kv_t,
                        mask: Some((mt, m2, m3, fill)),
                        max_bias: if m2 == 3 { 8.0 } else { 0.0 },
                        softcap: if kv_t == DType::F32 { 3.0 } else { 0.0 },
                    };
                    check(&format!("{fill:?}"), &c, seed);
                }
            }
        }
    }

    #[test]
    fn no_mask_and_short_key_runs() {
        // No mask: only the K/V copy; 1 and 70 keys: a partial key tile.
        for n_kv in [1, 70] {
            let c = Case {
                n_kv,
                h: 9,
                mask: None,
                ..base()
            };
            check("no mask", &c, 40 + n_kv as u64);
        }
        // One query tile, one head per kv head: nothing converted twice, no copy.
        let c = Case { n_q: 64, ..base() };
        let (graph, _, _bufs) = build(&c, 7);
        let (plans, _) = CpuBackend::resolve(&graph).unwrap();
        let plan = plan_for(&graph, Isa::Scalar, work_size(&plans[0].1));
        assert!(plan.kv.is_none() && plan.classes.is_some(), "{plan:?}");
    }
}
