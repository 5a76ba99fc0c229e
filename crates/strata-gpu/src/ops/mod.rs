//! The ops the GPU runs: for each node, whether it is supported (exactly:
//! what is refused here the scheduler sends to the CPU) and the dispatches
//! that compute it.
//!
//! Every pipeline shares one layout: a uniform parameter block (`Params`,
//! 256 bytes at a dynamic offset) and five storage bindings, the buffers of
//! sources 0..3 and of the destination, each bound whole. Shaders address
//! tensors by byte offset and stride, so views, permutations and broadcasts
//! need no copies; loads and stores are typed by the tensor's `DType`.

mod attn;
mod elementwise;
pub(crate) mod fuse;
mod matmul;
mod misc;
mod norm;
mod rows;

use std::sync::Arc;

use strata::ops::Op;
use strata::{DType, Error, Result, Tensor};

use crate::context::{GpuContext, Shader, PARAMS_BYTES};

/// Invocations per workgroup of the one-item-per-invocation kernels.
pub(crate) const WG: u32 = 256;

/// One dispatch's parameter block, laid out as the prelude's `Params`.
#[derive(Clone, Copy)]
pub(crate) struct Params {
    pub(crate) w: [u32; (PARAMS_BYTES / 4) as usize],
}

#[allow(dead_code)] // `int` and `shape` serve the op families as they land
impl Params {
    /// Shapes, strides and offsets of `node`'s sources and of `node`.
    pub(crate) fn of(node: &Tensor) -> Params {
        let mut p = Params { w: [0; 64] };
        for (k, s) in node.src_slots().iter().take(4).enumerate() {
            if let Some(s) = s {
                p.set_tensor(k, s);
            }
        }
        p.set_tensor(4, node);
        p
    }

    fn set_tensor(&mut self, k: usize, t: &Tensor) {
        let ne = t.ne();
        let nb = t.nb();
        for d in 0..4 {
            self.w[k * 4 + d] = ne[d] as u32;
            self.w[20 + k * 4 + d] = nb[d] as u32;
        }
        let off = t.storage().map_or(0, |s| s.offset as u32);
        if k < 4 {
            self.w[40 + k] = off;
        } else {
            self.w[44] = off;
        }
    }

    /// Sets the number of work items (`P.dn.y`).
    pub(crate) fn items(mut self, n: u32) -> Params {
        self.w[45] = n;
        self
    }

    /// Sets op integer `k` (0, 1: `P.dn.zw`; 2..5: `P.i`; 6..9: `P.j`).
    pub(crate) fn int(mut self, k: usize, v: u32) -> Params {
        self.w[46 + k] = v;
        self
    }

    /// Sets op float `k` (0..3: `P.f`; 4..7: `P.g`).
    pub(crate) fn float(mut self, k: usize, v: f32) -> Params {
        self.w[56 + k] = v.to_bits();
        self
    }

    /// Overrides slot `k`'s shape (ne) and byte strides (nb).
    pub(crate) fn shape(mut self, k: usize, ne: [usize; 4], nb: [usize; 4]) -> Params {
        for d in 0..4 {
            self.w[k * 4 + d] = ne[d] as u32;
            self.w[20 + k * 4 + d] = nb[d] as u32;
        }
        self
    }
}

/// One compute dispatch: shader, parameters, the tensors whose buffers
/// are bound to the five storage slots, and the workgroup grid. The
/// pipeline is the shader's for the read-only mask of the buffers bound.
pub(crate) struct Dispatch {
    pub(crate) pipeline: Arc<Shader>,
    pub(crate) params: Params,
    pub(crate) slots: [Option<Tensor>; 5],
    pub(crate) groups: [u32; 3],
    /// A slot bound to the backend's scratch buffer instead.
    pub(crate) scratch: Option<Scratch>,
}

/// A slot of a dispatch bound to the backend's scratch buffer (from byte 0;
/// an intermediate between the dispatches of one node), which must hold
/// `bytes`. The slot's tensor, if any, only names the node in messages.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Scratch {
    pub(crate) slot: usize,
    pub(crate) bytes: u64,
}

impl Dispatch {
    /// Binds `t` to slot `k` (0..3: source k, 4: the destination): its
    /// buffer, and its shape, strides and offset in the parameters.
    pub(crate) fn bind(&mut self, k: usize, t: &Tensor) {
        self.params.set_tensor(k, t);
        self.slots[k] = Some(t.clone());
    }
}

/// A grid of `n` workgroups within the per-dimension limit (x first).
pub(crate) fn grid(n: u32, max: u32) -> [u32; 3] {
    let n = n.max(1);
    if n <= max {
        return [n, 1, 1];
    }
    let y = n.div_ceil(max);
    if y <= max {
        return [max, y, 1];
    }
    [max, max, n.div_ceil(max * max)]
}

/// A dispatch of one invocation per item over `node`'s sources and itself.
pub(crate) fn per_item(
    ctx: &GpuContext,
    kernel: Kernel,
    node: &Tensor,
    params: Params,
    items: usize,
) -> Result<Dispatch> {
    let pipeline = kernel.pipeline(ctx)?;
    let groups = grid(
        (items as u32).div_ceil(WG),
        ctx.limits.max_compute_workgroups_per_dimension,
    );
    Ok(Dispatch {
        pipeline,
        params: params.items(items as u32),
        slots: slots_of(node),
        groups,
        scratch: None,
    })
}

/// `node`'s sources in slots 0..3 and `node` in slot 4.
pub(crate) fn slots_of(node: &Tensor) -> [Option<Tensor>; 5] {
    let mut s: [Option<Tensor>; 5] = Default::default();
    for (k, src) in node.src_slots().iter().take(4).enumerate() {
        s[k] = src.clone();
    }
    s[4] = Some(node.clone());
    s
}

/// A shader: its cache key, its body (after the prelude) and the types the
/// `LD0..LD3(` / `ST(` placeholders load and store.
pub(crate) struct Kernel {
    pub(crate) key: String,
    pub(crate) body: &'static str,
    pub(crate) src_types: [Option<DType>; 4],
    pub(crate) dst_type: DType,
    /// Extra text substitutions (`from`, `to`), e.g. workgroup sizes.
    pub(crate) defs: Vec<(&'static str, String)>,
}

impl Kernel {
    /// A kernel named `name` over `node`'s source and destination types.
    pub(crate) fn new(name: &str, body: &'static str, node: &Tensor) -> Kernel {
        let mut src_types = [None; 4];
        for (k, s) in node.src_slots().iter().take(4).enumerate() {
            src_types[k] = s.as_ref().map(|s| s.dtype());
        }
        Kernel {
            key: name.to_string(),
            body,
            src_types,
            dst_type: node.dtype(),
            defs: Vec::new(),
        }
    }

    /// Adds a text substitution (`from` → `to`) to the body; part of the key.
    pub(crate) fn def(mut self, from: &'static str, to: impl ToString) -> Kernel {
        self.defs.push((from, to.to_string()));
        self
    }

    fn full_key(&self) -> String {
        let mut k = self.key.clone();
        for t in &self.src_types {
            k.push('/');
            k.push_str(t.map_or("-", |t| t.name()));
        }
        k.push_str("->");
        k.push_str(self.dst_type.name());
        for (f, t) in &self.defs {
            k.push_str(&format!(";{f}={t}"));
        }
        k
    }

    /// The shader (cached on the device; compiled per read-only mask when
    /// a graph binds it).
    pub(crate) fn pipeline(&self, ctx: &GpuContext) -> Result<Arc<Shader>> {
        Ok(ctx.shader(&self.full_key(), || self.source()))
    }

    /// The whole WGSL text.
    pub(crate) fn source(&self) -> String {
        let mut body = self.body.to_string();
        for (k, t) in self.src_types.iter().enumerate() {
            if let Some(t) = t {
                body = body.replace(&format!("LD{k}("), &format!("ld_{}_s{k}(", ty_name(*t)));
            }
        }
        body = body.replace("ST(", &format!("st_{}(", ty_name(self.dst_type)));
        body = body.replace("LDD(", &format!("ld_{}_d(", ty_name(self.dst_type)));
        for (f, t) in &self.defs {
            body = body.replace(f, t);
        }
        // directives (a line `enable f16;`) go before every declaration
        let (directives, rest): (Vec<&str>, Vec<&str>) = body
            .lines()
            .partition(|l| l.trim_start().starts_with("enable ") && l.trim_end().ends_with(';'));
        let mut s = directives.join("\n");
        s.push('\n');
        s.push_str(&prelude(self.dst_type));
        s.push_str(&rest.join("\n"));
        s
    }
}

/// The short type name the prelude's load/store functions use.
fn ty_name(t: DType) -> &'static str {
    match t {
        DType::F32 => "f32",
        DType::F16 => "f16",
        DType::BF16 => "bf16",
        DType::I32 => "i32",
        _ => "u8",
    }
}

/// Whether stores into `t` share words with other invocations' stores (and
/// so go through atomics).
fn atomic_dst(t: DType) -> bool {
    !matches!(t, DType::F32 | DType::I32)
}

/// The prelude for a destination of type `dst`.
fn prelude(dst: DType) -> String {
    let mut s = include_str!("../shaders/prelude.wgsl").replace(
        "DST_DECL",
        if atomic_dst(dst) {
            "@group(0) @binding(5) var<storage, read_write> d: array<atomic<u32>>;"
        } else {
            "@group(0) @binding(5) var<storage, read_write> d: array<u32>;"
        },
    );
    let mut slots = vec!["s0", "s1", "s2", "s3"];
    if !atomic_dst(dst) {
        slots.push("d");
    }
    for k in slots {
        s.push_str(&format!(
            "fn ld_f32_{k}(b: u32) -> f32 {{ return bitcast<f32>({k}[b >> 2u]); }}\n\
             fn ld_f16_{k}(b: u32) -> f32 {{ return f16_of({k}[b >> 2u], b); }}\n\
             fn ld_bf16_{k}(b: u32) -> f32 {{ return bf16_of({k}[b >> 2u], b); }}\n\
             fn ld_i32_{k}(b: u32) -> i32 {{ return bitcast<i32>({k}[b >> 2u]); }}\n\
             fn ld_u32_{k}(b: u32) -> u32 {{ return {k}[b >> 2u]; }}\n\
             fn ld_u16_{k}(b: u32) -> u32 {{ return ({k}[b >> 2u] >> ((b & 2u) * 8u)) & 0xffffu; }}\n\
             fn ld_u8_{k}(b: u32) -> u32 {{ return ({k}[b >> 2u] >> ((b & 3u) * 8u)) & 0xffu; }}\n"
        ));
    }
    if atomic_dst(dst) {
        s.push_str(ATOMIC_STORES);
    } else {
        s.push_str(
            "fn st_f32(b: u32, v: f32) { d[b >> 2u] = bitcast<u32>(v); }\n\
             fn st_i32(b: u32, v: i32) { d[b >> 2u] = bitcast<u32>(v); }\n\
             fn st_u32(b: u32, v: u32) { d[b >> 2u] = v; }\n",
        );
    }
    s
}

/// Stores into a destination whose words several invocations share.
const ATOMIC_STORES: &str = "
fn st_bits(b: u32, v: u32, bits: u32) {
    let sh = (b & 3u) * 8u;
    let mask = select((1u << bits) - 1u, 0xffffffffu, bits == 32u) << sh;
    let w = b >> 2u;
    atomicAnd(&d[w], ~mask);
    atomicOr(&d[w], (v << sh) & mask);
}
fn st_u8(b: u32, v: u32) { st_bits(b, v & 0xffu, 8u); }
fn st_u16(b: u32, v: u32) { st_bits(b, v & 0xffffu, 16u); }
fn st_u32(b: u32, v: u32) { atomicStore(&d[b >> 2u], v); }
fn st_f32(b: u32, v: f32) { atomicStore(&d[b >> 2u], bitcast<u32>(v)); }
fn f16_bits(v: f32) -> u32 { return pack2x16float(vec2<f32>(v, 0.0)) & 0xffffu; }
fn bf16_bits(v: f32) -> u32 {
    let u = bitcast<u32>(v);
    if ((u & 0x7fffffffu) > 0x7f800000u) { return (u >> 16u) | 64u; }
    return (u + 0x7fffu + ((u >> 16u) & 1u)) >> 16u;
}
fn st_f16(b: u32, v: f32) { st_u16(b, f16_bits(v)); }
fn st_bf16(b: u32, v: f32) { st_u16(b, bf16_bits(v)); }
";

/// What the GPU computes of `node`: `None` when it does not support it,
/// otherwise the dispatches (none for views and reshapes).
pub(crate) fn plan(ctx: &GpuContext, node: &Tensor) -> Result<Option<Vec<Dispatch>>> {
    if is_noop(node.op()) {
        return Ok(Some(Vec::new()));
    }
    if !supported(ctx, node) {
        return Ok(None);
    }
    let d = match node.op() {
        Op::MulMat | Op::MulMatId | Op::GetRows => matmul::plan(ctx, node)?,
        Op::RmsNorm { .. } | Op::Norm { .. } => norm::plan(ctx, node)?,
        Op::SoftMax { .. }
        | Op::Rope(_)
        | Op::FlashAttnExt { .. }
        | Op::DiagMaskInf { .. }
        | Op::Glu { .. } => attn::plan(ctx, node)?,
        Op::SetRows | Op::Cpy | Op::Cont | Op::Dup => rows::plan(ctx, node)?,
        op if elementwise::handles(op) => elementwise::plan(ctx, node)?,
        _ => misc::plan(ctx, node)?,
    };
    Ok(Some(d))
}

/// Ops that only reinterpret their source's memory.
pub(crate) fn is_noop(op: &Op) -> bool {
    matches!(
        op,
        Op::None | Op::View { .. } | Op::Reshape | Op::Permute { .. } | Op::Transpose
    )
}

/// Exactly the nodes [`plan`] computes: types, shapes and layouts the
/// shaders handle.
pub(crate) fn supported(ctx: &GpuContext, node: &Tensor) -> bool {
    if is_noop(node.op()) {
        return true;
    }
    // every tensor is addressed by u32 byte offsets within its buffer, which
    // fits the buffer type's max size; element counts index u32 items
    let max = ctx.max_buffer_size();
    if node.nbytes() > max || node.srcs().any(|s| s.nbytes() > max) {
        return false;
    }
    match node.op() {
        Op::MulMat | Op::MulMatId | Op::GetRows => matmul::supports(ctx, node),
        Op::RmsNorm { .. } | Op::Norm { .. } => norm::supports(node),
        Op::SoftMax { .. }
        | Op::Rope(_)
        | Op::FlashAttnExt { .. }
        | Op::DiagMaskInf { .. }
        | Op::Glu { .. } => attn::supports(node),
        Op::SetRows | Op::Cpy | Op::Cont | Op::Dup => rows::supports(ctx, node),
        op if elementwise::handles(op) => elementwise::supports(node),
        _ => misc::supports(node),
    }
}

/// True when `t`'s element type is one the typed loads read.
pub(crate) fn is_float(t: &Tensor) -> bool {
    matches!(t.dtype(), DType::F32 | DType::F16 | DType::BF16)
}

/// True when every byte offset and stride of `t` keeps its elements aligned
/// to their size (so word loads see whole elements).
pub(crate) fn aligned(t: &Tensor) -> bool {
    let es = match t.dtype() {
        DType::F32 | DType::I32 => 4,
        DType::F16 | DType::BF16 => 2,
        _ => 1,
    };
    aligned_to(t, es)
}

/// True when `t`'s byte offset and strides are multiples of `n` bytes.
/// Before allocation the offset is a view's offset in its base (bases are
/// aligned by the buffer type).
pub(crate) fn aligned_to(t: &Tensor, n: usize) -> bool {
    let off = t
        .storage()
        .map_or_else(|| t.view_of().map_or(0, |v| v.offset), |s| s.offset);
    off.is_multiple_of(n) && t.nb().iter().all(|b| b.is_multiple_of(n))
}

/// An error for a node the planner was asked for but cannot run.
pub(crate) fn unsupported(ctx: &GpuContext, node: &Tensor) -> Error {
    Error::Unsupported {
        backend: ctx.name.clone(),
        what: format!(
            "op {} of tensor '{}' ({} {:?}; sources {})",
            node.op().name(),
            node.name(),
            node.dtype(),
            node.ne(),
            node.srcs()
                .map(|s| format!("{} {:?}", s.dtype(), s.ne()))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}
