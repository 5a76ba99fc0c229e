//! Conversion between typed ops and ggml's (op id, 64-byte op_params) pair,
//! as carried by ggml's RPC protocol.

use super::{GluOp, Op, RopeMode, RopeParams, SortOrder, UnaryOp};
use crate::{Error, Result};

/// Number of ggml ops at the protocol version strata speaks (first invalid id).
pub const GGML_OP_COUNT: u32 = 101;

/// ggml's op_params: 16 little-endian 32-bit slots.
pub type OpParams = [i32; 16];

fn f(x: f32) -> i32 {
    x.to_bits() as i32
}
fn fl(x: i32) -> f32 {
    f32::from_bits(x as u32)
}
fn nonneg(id: u32, op: &str, what: &str, x: i32) -> Result<usize> {
    usize::try_from(x).map_err(|_| Error::GgmlOp {
        id,
        msg: format!("{op} {what} {x} is negative"),
    })
}

impl Op {
    /// ggml's op id.
    pub fn ggml_id(&self) -> u32 {
        self.ggml_op().0
    }

    /// ggml's op_params for this op.
    pub fn to_ggml_params(&self) -> OpParams {
        let mut p = [0i32; 16];
        match *self {
            Op::Concat { dim } => p[0] = dim as i32,
            Op::Norm { eps } | Op::RmsNorm { eps } => p[0] = f(eps),
            Op::MulMat => {}
            Op::Scale { scale, bias } => {
                p[0] = f(scale);
                p[1] = f(bias);
            }
            Op::View { offset } => {
                let o = offset as u64;
                p[0] = o as u32 as i32;
                p[1] = (o >> 32) as u32 as i32;
            }
            Op::Permute { axes } => {
                for i in 0..4 {
                    p[i] = axes[i] as i32;
                }
            }
            Op::DiagMaskInf { n_past } => p[0] = n_past as i32,
            Op::SoftMax { scale, max_bias } => {
                p[0] = f(scale);
                p[1] = f(max_bias);
            }
            Op::Rope(r) => {
                p[1] = r.n_dims as i32;
                p[2] = match r.mode {
                    RopeMode::Normal => 0,
                    RopeMode::Neox => 2,
                };
                p[4] = r.n_ctx_orig as i32;
                p[5] = f(r.freq_base);
                p[6] = f(r.freq_scale);
                p[7] = f(r.ext_factor);
                p[8] = f(r.attn_factor);
                p[9] = f(r.beta_fast);
                p[10] = f(r.beta_slow);
            }
            Op::Clamp { min, max } => {
                p[0] = f(min);
                p[1] = f(max);
            }
            Op::Argsort { order } => p[0] = matches!(order, SortOrder::Desc) as i32,
            Op::FlashAttnExt {
                scale,
                max_bias,
                softcap,
            } => {
                p[0] = f(scale);
                p[1] = f(max_bias);
                p[2] = f(softcap);
                p[3] = 10; // GGML_PREC_F32: strata accumulates in f32
            }
            Op::Unary(u) => p[0] = u.ggml_id(),
            Op::Glu { op, swapped } => {
                p[0] = op.ggml_id();
                p[1] = swapped as i32;
            }
            _ => {}
        }
        p
    }

    /// The typed op for ggml's (op id, op_params); an error for ops strata
    /// does not implement or parameters it cannot accept.
    pub fn from_ggml(id: u32, p: &OpParams) -> Result<Op> {
        let bad = |msg: String| Error::GgmlOp { id, msg };
        Ok(match id {
            0 => Op::None,
            1 => Op::Dup,
            2 => Op::Add,
            6 => Op::Sub,
            7 => Op::Mul,
            8 => Op::Div,
            9 => Op::Sqr,
            10 => Op::Sqrt,
            11 => Op::Log,
            12 => Op::Sin,
            13 => Op::Cos,
            14 => Op::Sum,
            15 => Op::SumRows,
            17 => Op::Mean,
            18 => Op::Argmax,
            20 => Op::Repeat,
            22 => Op::Concat {
                dim: nonneg(id, "CONCAT", "dim", p[0])?,
            },
            24 => Op::Norm { eps: fl(p[0]) },
            25 => Op::RmsNorm { eps: fl(p[0]) },
            3 => Op::AddId,
            29 => Op::MulMat,
            30 => Op::MulMatId,
            32 => Op::Scale {
                scale: fl(p[0]),
                bias: fl(p[1]),
            },
            34 => Op::Cpy,
            35 => Op::Cont,
            36 => Op::Reshape,
            37 => {
                let o = (p[0] as u32 as u64) | ((p[1] as u32 as u64) << 32);
                Op::View {
                    offset: usize::try_from(o)
                        .map_err(|_| bad(format!("view offset {o} too large")))?,
                }
            }
            38 => {
                let mut axes = [0; 4];
                for i in 0..4 {
                    axes[i] = nonneg(id, "PERMUTE", "axis", p[i])?;
                }
                Op::Permute { axes }
            }
            39 => Op::Transpose,
            40 => Op::GetRows,
            42 => Op::SetRows,
            44 => Op::DiagMaskInf {
                n_past: nonneg(id, "DIAG_MASK_INF", "n_past", p[0])?,
            },
            46 => Op::SoftMax {
                scale: fl(p[0]),
                max_bias: fl(p[1]),
            },
            48 => {
                let mode = match p[2] {
                    0 => RopeMode::Normal,
                    2 => RopeMode::Neox,
                    m => {
                        return Err(bad(format!(
                            "rope mode {m} is not supported (0 normal, 2 neox)"
                        )))
                    }
                };
                if p[11..15].iter().any(|&s| s != 0) || p[15] != 0 {
                    return Err(bad("rope sections / offsets are not supported".into()));
                }
                Op::Rope(RopeParams {
                    n_dims: nonneg(id, "ROPE", "n_dims", p[1])?,
                    mode,
                    n_ctx_orig: nonneg(id, "ROPE", "n_ctx_orig", p[4])?,
                    freq_base: fl(p[5]),
                    freq_scale: fl(p[6]),
                    ext_factor: fl(p[7]),
                    attn_factor: fl(p[8]),
                    beta_fast: fl(p[9]),
                    beta_slow: fl(p[10]),
                })
            }
            50 => Op::Clamp {
                min: fl(p[0]),
                max: fl(p[1]),
            },
            69 => Op::Argsort {
                order: match p[0] {
                    0 => SortOrder::Asc,
                    1 => SortOrder::Desc,
                    o => return Err(bad(format!("sort order {o}"))),
                },
            },
            70 => Op::TopK,
            74 => {
                if p[4] != 0 {
                    return Err(bad("flash attention n_kv_max is not supported".into()));
                }
                Op::FlashAttnExt {
                    scale: fl(p[0]),
                    max_bias: fl(p[1]),
                    softcap: fl(p[2]),
                }
            }
            91 => Op::Unary(
                UnaryOp::from_ggml_id(p[0])
                    .ok_or_else(|| bad(format!("unary op {} is not supported", p[0])))?,
            ),
            100 => {
                let op = GluOp::from_ggml_id(p[0])
                    .ok_or_else(|| bad(format!("glu op {} is not supported", p[0])))?;
                let swapped = match p[1] {
                    0 => false,
                    1 => true,
                    s => return Err(bad(format!("glu swapped flag {s}"))),
                };
                Op::Glu { op, swapped }
            }
            _ if id >= GGML_OP_COUNT => return Err(bad("unknown op id".into())),
            _ => return Err(bad("op not supported by strata".into())),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_matches_documented_layouts() {
        let ops = [
            Op::Add,
            Op::Concat { dim: 2 },
            Op::RmsNorm { eps: 1e-5 },
            Op::Scale {
                scale: 0.5,
                bias: 2.0,
            },
            Op::View {
                offset: (5u64 << 32 | 4) as usize,
            },
            Op::Permute { axes: [0, 2, 1, 3] },
            Op::SoftMax {
                scale: 0.125,
                max_bias: 8.0,
            },
            Op::Rope(RopeParams::new(64, RopeMode::Neox, 100000.0)),
            Op::Argsort {
                order: SortOrder::Desc,
            },
            Op::FlashAttnExt {
                scale: 0.125,
                max_bias: 0.0,
                softcap: 30.0,
            },
            Op::Unary(UnaryOp::Silu),
            Op::Glu {
                op: GluOp::Swiglu,
                swapped: true,
            },
            Op::DiagMaskInf { n_past: 3 },
            Op::MulMatId,
            Op::AddId,
            Op::TopK,
            Op::Clamp {
                min: -1.0,
                max: 1.0,
            },
        ];
        for op in ops {
            let back = Op::from_ggml(op.ggml_id(), &op.to_ggml_params()).unwrap();
            assert_eq!(back, op);
        }
        // Facts from the protocol description: eps 1e-5 is 0x3727C5AC, SILU is 10, VIEW offset 4 -> [4, 0].
        assert_eq!(
            Op::RmsNorm { eps: 1e-5 }.to_ggml_params()[0] as u32,
            0x3727_C5AC
        );
        assert_eq!(Op::Unary(UnaryOp::Silu).to_ggml_params()[0], 10);
        // ids of b11312's `enum ggml_op` (counted in ggml.h).
        assert_eq!(
            [Op::AddId, Op::MulMatId, Op::TopK].map(|o| o.ggml_id()),
            [3, 30, 70]
        );
        assert_eq!(&Op::View { offset: 4 }.to_ggml_params()[..2], &[4, 0]);
        let refused = |id: u32, p: &OpParams, want: &str| match Op::from_ggml(id, p) {
            Err(Error::GgmlOp { id: got, msg }) => {
                assert_eq!(got, id);
                assert_eq!(msg, want);
            }
            r => panic!("ggml op {id}: {r:?}"),
        };
        // CUSTOM: host pointers, refused
        refused(95, &[0; 16], "op not supported by strata");
        refused(1000, &[0; 16], "unknown op id");
        refused(91, &[99; 16], "unary op 99 is not supported");
        let mut p = [0; 16];
        p[2] = -1;
        refused(38, &p, "PERMUTE axis -1 is negative");
    }
}
