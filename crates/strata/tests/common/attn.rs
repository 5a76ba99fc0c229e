//! FLASH_ATTN_EXT test cases shared by `ops_attn.rs` and
//! `ops_attn_invariant.rs`: shapes and types ([`Case`]), inputs, the CPU
//! run and the naive f64 reference.

use super::{compute_with, flash_attn, round_trip, tensor, Rng};
use strata::cpu::CpuBackend;
use strata::isa::Isa;
use strata::DType;

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum MaskKind {
    /// Random biases with -inf holes, the later keys of each row masked.
    Holes,
    /// llama.cpp's causal mask: key j visible to query i iff j ≤ i + n_kv − n_q.
    Causal,
    /// Holes, plus fully masked query rows and keys 64..128 masked for every row.
    Blocks,
}

#[derive(Clone, Debug)]
pub struct Case {
    pub d: usize,
    pub dv: usize,
    pub n_q: usize,
    pub n_kv: usize,
    pub h: usize,
    pub h_kv: usize,
    pub ne3: usize,
    pub kv_t: DType,
    /// V's type when it differs from K's (`kv_t`).
    pub v_t: Option<DType>,
    pub mask: Option<(DType, [usize; 4])>,
    pub mask_kind: MaskKind,
    pub scale: f32,
    pub max_bias: f32,
    pub softcap: f32,
    pub sinks: bool,
    /// Batch-invariant attention (`CpuBackend::set_batch_invariant`).
    pub invariant: bool,
}

/// Which algorithm ggml (and strata) runs for a case.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Path {
    SplitKv,
    Tiled,
    OneChunk,
}

impl Case {
    pub fn vt(&self) -> DType {
        self.v_t.unwrap_or(self.kv_t)
    }

    pub fn path(&self) -> Path {
        if self.vt() != self.kv_t {
            Path::OneChunk
        } else if self.n_q == 1 && self.ne3 == 1 && self.n_kv >= 512 {
            Path::SplitKv
        } else if self.n_q >= 64 {
            Path::Tiled
        } else {
            Path::OneChunk
        }
    }

    /// [`Case::path`] given the inputs: where the tiled path would compute
    /// mostly masked scores the kernel takes the one-chunk path instead
    /// (its own rule, [`strata::testkit::attn_mask_too_sparse_for_tiles`],
    /// on the first mask plane; only f16 masks are judged).
    pub fn path_for(&self, inp: &Inputs) -> Path {
        let path = self.path();
        let Some((DType::F16, ne)) = self.mask else {
            return path;
        };
        if path != Path::Tiled || ne[0] < self.n_kv {
            return path;
        }
        let plane: Vec<u8> = inp.mask[..ne[0] * self.n_q]
            .iter()
            .flat_map(|&m| half::f16::from_f32(m).to_le_bytes())
            .collect();
        let sparse =
            strata::testkit::attn_mask_too_sparse_for_tiles(&plane, ne[0], self.n_q, self.n_kv)
                .expect("a whole mask plane");
        if sparse {
            Path::OneChunk
        } else {
            path
        }
    }
}

/// The inputs of a case, as stored (f16 values rounded).
pub struct Inputs {
    pub q: Vec<f32>,
    pub k: Vec<f32>,
    pub v: Vec<f32>,
    pub mask: Vec<f32>,
    pub sinks: Vec<f32>,
}

pub fn inputs(c: &Case, seed: u64) -> Inputs {
    let mut rng = Rng::new(seed);
    let q = rng.vec(c.d * c.n_q * c.h * c.ne3, -1.0, 1.0);
    let k = round_trip(c.kv_t, &rng.vec(c.d * c.n_kv * c.h_kv, -1.0, 1.0));
    let v = round_trip(c.vt(), &rng.vec(c.dv * c.n_kv * c.h_kv, -2.0, 2.0));
    let mut mask = Vec::new();
    if let Some((mt, ne)) = c.mask {
        for i3 in 0..ne[3] {
            for i2 in 0..ne[2] {
                for i1 in 0..ne[1] {
                    for i0 in 0..ne[0] {
                        let masked = match c.mask_kind {
                            MaskKind::Causal => i0 + c.n_q > i1 + c.n_kv,
                            MaskKind::Holes | MaskKind::Blocks => {
                                let off = (i0 + i1 + i2 + i3) % 5;
                                let hole = i0 > i1 + c.n_kv / 2 || off == 4 && i0 > 0;
                                hole || c.mask_kind == MaskKind::Blocks
                                    && (i1 % 7 == 3 || (64..128).contains(&i0))
                            }
                        };
                        mask.push(if masked {
                            f32::NEG_INFINITY
                        } else if c.mask_kind == MaskKind::Causal {
                            0.0
                        } else {
                            rng.uniform(-1.0, 0.0)
                        });
                    }
                }
            }
        }
        mask = round_trip(mt, &mask);
    }
    let sinks = rng.vec(c.h, -1.0, 2.0);
    Inputs {
        q,
        k,
        v,
        mask,
        sinks,
    }
}

/// Random inputs; key j is seen by query i when `sees(i, j)`, with a
/// random bias in -1..0 (or 0 when `flat`).
pub fn inputs_where(
    a: &Case,
    seed: u64,
    flat: bool,
    sees: impl Fn(usize, usize) -> bool,
) -> Inputs {
    let mut rng = Rng::new(seed);
    let q = rng.vec(a.d * a.n_q * a.h, -1.0, 1.0);
    let k = round_trip(a.kv_t, &rng.vec(a.d * a.n_kv * a.h_kv, -1.0, 1.0));
    let v = round_trip(a.vt(), &rng.vec(a.dv * a.n_kv * a.h_kv, -2.0, 2.0));
    let mut mask = Vec::with_capacity(a.n_q * a.n_kv);
    for i in 0..a.n_q {
        for j in 0..a.n_kv {
            let b = if flat { 0.0 } else { rng.uniform(-1.0, 0.0) };
            mask.push(if sees(i, j) { b } else { f32::NEG_INFINITY });
        }
    }
    let mask = round_trip(a.mask.map_or(DType::F32, |m| m.0), &mask);
    let sinks = rng.vec(a.h, -1.0, 2.0);
    Inputs {
        q,
        k,
        v,
        mask,
        sinks,
    }
}

/// Runs the case on a CPU backend at level `isa` with `nth` threads.
pub fn compute(c: &Case, inp: &Inputs, nth: usize, isa: Isa) -> Vec<f32> {
    compute_on(c, inp, nth, None, isa)
}

/// [`compute`] for `nth` threads run on `active` OS threads (default: the
/// backend's choice, at most the available cores).
pub fn compute_on(c: &Case, inp: &Inputs, nth: usize, active: Option<usize>, isa: Isa) -> Vec<f32> {
    let q = tensor("q", DType::F32, &[c.d, c.n_q, c.h, c.ne3]);
    let k = tensor("k", c.kv_t, &[c.d, c.n_kv, c.h_kv, 1]);
    let v = tensor("v", c.vt(), &[c.dv, c.n_kv, c.h_kv, 1]);
    let mask = c.mask.map(|(t, ne)| tensor("mask", t, &ne));
    let sinks = c.sinks.then(|| tensor("sinks", DType::F32, &[c.h]));
    let params = (c.scale, c.max_bias, c.softcap);
    let out = flash_attn((&q, &k, &v), mask.as_ref(), sinks.as_ref(), params);
    assert_eq!(out.ne(), [c.dv, c.h, c.n_q, c.ne3]);
    let mut inputs = vec![(&q, &inp.q[..]), (&k, &inp.k[..]), (&v, &inp.v[..])];
    inputs.extend(mask.as_ref().map(|m| (m, &inp.mask[..])));
    inputs.extend(sinks.as_ref().map(|s| (s, &inp.sinks[..])));
    let mut cpu = CpuBackend::new(nth);
    if let Some(a) = active {
        cpu.set_pool_threads(a);
        assert_eq!((cpu.n_threads(), cpu.pool_threads()), (nth, a.min(nth)));
    }
    cpu.set_isa(isa).unwrap();
    cpu.set_batch_invariant(c.invariant);
    compute_with(&out, &inputs, &mut cpu)
}

pub fn slope64(max_bias: f32, h: usize, n_head: usize) -> f64 {
    if max_bias <= 0.0 {
        return 1.0;
    }
    let n_log2 = 1usize << (n_head as f64).log2().floor() as u32;
    let m0 = 2f64.powf(-(max_bias as f64) / n_log2 as f64);
    let m1 = 2f64.powf(-(max_bias as f64) / 2.0 / n_log2 as f64);
    if h < n_log2 {
        m0.powi(h as i32 + 1)
    } else {
        m1.powi(2 * (h - n_log2) as i32 + 1)
    }
}

pub fn mask_at(c: &Case, m: &[f32], j: usize, iq: usize, h: usize, i3: usize) -> f32 {
    let ne = c.mask.unwrap().1;
    m[(((i3 % ne[3]) * ne[2] + h % ne[2]) * ne[1] + iq) * ne[0] + j]
}

/// The naive f64 softmax(q·kᵀ)·v.
#[allow(clippy::needless_range_loop)] // index arithmetic mirrors the math
pub fn reference(c: &Case, inp: &Inputs) -> Vec<f64> {
    let mut want = vec![0f64; c.dv * c.h * c.n_q * c.ne3];
    for i3 in 0..c.ne3 {
        for iq in 0..c.n_q {
            for h in 0..c.h {
                let hk = h / (c.h / c.h_kv);
                let qo = ((i3 * c.h + h) * c.n_q + iq) * c.d;
                let mut scores = Vec::with_capacity(c.n_kv);
                for j in 0..c.n_kv {
                    let ko = (hk * c.n_kv + j) * c.d;
                    let dot: f64 = (0..c.d)
                        .map(|x| inp.q[qo + x] as f64 * inp.k[ko + x] as f64)
                        .sum();
                    let mut s = dot * c.scale as f64;
                    if c.softcap != 0.0 {
                        s = c.softcap as f64 * (s / c.softcap as f64).tanh();
                    }
                    if c.mask.is_some() {
                        s += slope64(c.max_bias, h, c.h)
                            * mask_at(c, &inp.mask, j, iq, h, i3) as f64;
                    }
                    scores.push(s);
                }
                let sink = c.sinks.then(|| inp.sinks[h] as f64);
                let max = scores
                    .iter()
                    .copied()
                    .chain(sink)
                    .fold(f64::NEG_INFINITY, f64::max);
                let o = ((i3 * c.n_q + iq) * c.h + h) * c.dv;
                if max == f64::NEG_INFINITY {
                    continue; // fully masked: zeros
                }
                let w: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
                let sum: f64 = w.iter().sum::<f64>() + sink.map_or(0.0, |s| (s - max).exp());
                for x in 0..c.dv {
                    let acc: f64 = (0..c.n_kv)
                        .map(|j| w[j] * inp.v[(hk * c.n_kv + j) * c.dv + x] as f64)
                        .sum();
                    want[o + x] = acc / sum;
                }
            }
        }
    }
    want
}

/// The levels this CPU runs, scalar first.
pub fn levels() -> Vec<Isa> {
    Isa::ALL.into_iter().filter(|i| i.is_supported()).collect()
}

/// Whether `a` and `b` hold the same bits.
pub fn same_bits(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}
