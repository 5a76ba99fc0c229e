//! Element-by-element ops: ADD/SUB/MUL/DIV with broadcasting, SCALE, CLAMP,
//! SQR/SQRT/LOG/SIN/COS and the UNARY functions, over any float types.

use strata::ops::{Op, UnaryOp};
use strata::{Result, Tensor};

use super::rows::wgsl;
use super::{aligned, is_float, per_item, Dispatch, Kernel, Params};
use crate::context::GpuContext;

/// The binary kernel: `dst = OPER` of `a` (s0) and `b` (s1, broadcast),
/// one invocation per destination element (also GLU's).
pub(super) const BINARY: &str = wgsl!("binary.wgsl", "cpy_main.wgsl", "item_main.wgsl");
/// The unary kernel: `dst = EXPR` of `x` (s0) at coordinates `c`, one
/// invocation per destination element (also DIAG_MASK_INF's).
pub(super) const UNARY: &str = wgsl!("unary.wgsl", "cpy_main.wgsl", "item_main.wgsl");

/// Whether this module computes `op`.
pub(crate) fn handles(op: &Op) -> bool {
    binary(op).is_some() || unary(op).is_some()
}

fn binary(op: &Op) -> Option<&'static str> {
    Some(match op {
        Op::Add => "a + b",
        Op::Sub => "a - b",
        Op::Mul => "a * b",
        Op::Div => "a / b",
        _ => return None,
    })
}

fn unary(op: &Op) -> Option<&'static str> {
    Some(match op {
        Op::Sqr => "x * x",
        Op::Sqrt => "sqrt(x)",
        Op::Log => "log(x)",
        Op::Sin => "sin(x)",
        Op::Cos => "cos(x)",
        Op::Scale { .. } => "x * P.f.x + P.f.y",
        Op::Clamp { .. } => "clamp(x, P.f.x, P.f.y)",
        Op::Unary(u) => match u {
            UnaryOp::Abs => "abs(x)",
            UnaryOp::Neg => "-x",
            UnaryOp::Tanh => "tanh(clamp(x, -15.0, 15.0))",
            UnaryOp::Relu => "max(x, 0.0)",
            UnaryOp::Sigmoid => "sigmoid(x)",
            UnaryOp::Gelu => "gelu(x)",
            UnaryOp::GeluQuick => "x * sigmoid(1.702 * x)",
            UnaryOp::Silu => "x * sigmoid(x)",
            UnaryOp::Exp => "exp(x)",
            UnaryOp::GeluErf => "0.5 * x * (1.0 + erf_approx(x * 0.70710678118654752))",
        },
        _ => return None,
    })
}

/// Float tensors, element-aligned; a binary op's second source divides the
/// destination's shape, the first has it.
pub(crate) fn supports(node: &Tensor) -> bool {
    let Some(a) = node.src(0) else { return false };
    if !is_float(node) || !is_float(a) || !aligned(node) || !aligned(a) || a.ne() != node.ne() {
        return false;
    }
    if binary(node.op()).is_some() {
        let Some(b) = node.src(1) else { return false };
        let (nb, nd) = (b.ne(), node.ne());
        return is_float(b) && aligned(b) && (0..4).all(|d| nb[d] > 0 && nd[d] % nb[d] == 0);
    }
    true
}

/// One invocation per destination element.
pub(crate) fn plan(ctx: &GpuContext, node: &Tensor) -> Result<Vec<Dispatch>> {
    let n = node.nelements();
    let mut p = Params::of(node);
    let k = if let Some(e) = binary(node.op()) {
        Kernel::new("binary", BINARY, node).def("OPER", e)
    } else {
        match *node.op() {
            Op::Scale { scale, bias } => p = p.float(0, scale).float(1, bias),
            Op::Clamp { min, max } => p = p.float(0, min).float(1, max),
            _ => {}
        }
        let e = unary(node.op()).unwrap_or("x");
        Kernel::new("unary", UNARY, node).def("EXPR", e)
    };
    Ok(vec![per_item(ctx, k, node, p, n)?])
}
