//! A second host backend, like ggml's BLAS backend: it uses the CPU's buffer
//! type and runs only large matrix products, through the `matrixmultiply`
//! GEMM (block-quantized and half-precision weights are converted to f32
//! first). With it listed before the CPU, the scheduler's pass 3 upgrades
//! large MUL_MATs from the CPU to it; both share one compute buffer.
//!
//! ```
//! use strata::backend::Backend;
//! use strata::blas::BlasBackend;
//! use strata::{ops, DType, Tensor};
//! let blas = BlasBackend::new(32);
//! let a = Tensor::new(DType::F32, &[64, 64]).unwrap();
//! let small = Tensor::new(DType::F32, &[64, 4]).unwrap();
//! let big = Tensor::new(DType::F32, &[64, 64]).unwrap();
//! assert!(!blas.supports_op(&ops::mul_mat(&a, &small).unwrap()), "too small to pay");
//! assert!(blas.supports_op(&ops::mul_mat(&a, &big).unwrap()));
//! ```

use std::sync::Arc;

use crate::backend::{Backend, BufferType, Device, DeviceMemory, DeviceType};
use crate::cpu::{cpu_buffer_type, TView};
use crate::error::ShapeProblem;
use crate::graph::Graph;
use crate::ops::Op;
use crate::tensor::{DType, Tensor};
use crate::{Error, Result};

/// The BLAS device: host memory, large matrix products only.
pub struct BlasDevice {
    min_batch: usize,
}

impl BlasDevice {
    fn wants(&self, t: &Tensor) -> bool {
        match t.op() {
            Op::None | Op::View { .. } | Op::Reshape | Op::Permute { .. } | Op::Transpose => true,
            Op::MulMat => {
                let (Some(a), Some(b)) = (t.src(0), t.src(1)) else {
                    return false;
                };
                let k = a.ne()[0];
                let ne = t.ne();
                b.dtype() == DType::F32
                    && a.is_contiguous()
                    && b.is_contiguous_rows()
                    && (a.dtype().is_float() || a.dtype().is_quantized())
                    && a.dtype() != DType::Q8_1
                    && ne[0] >= self.min_batch
                    && ne[1] >= self.min_batch
                    && k >= self.min_batch
            }
            _ => false,
        }
    }
}

impl Device for BlasDevice {
    fn name(&self) -> String {
        "BLAS".into()
    }
    fn description(&self) -> String {
        format!(
            "matrixmultiply sgemm for matrix products with all dims >= {}",
            self.min_batch
        )
    }
    fn memory(&self) -> Result<DeviceMemory> {
        crate::cpu::cpu_device().memory()
    }
    fn device_type(&self) -> DeviceType {
        DeviceType::Accel
    }
    fn init_backend(&self) -> Result<Box<dyn Backend>> {
        Ok(Box::new(BlasBackend::new(self.min_batch)))
    }
    fn default_buffer_type(&self) -> Arc<dyn BufferType> {
        cpu_buffer_type()
    }
    fn supports_op(&self, op: &Tensor) -> bool {
        self.wants(op)
    }
    fn supports_buft(&self, buft: &Arc<dyn BufferType>) -> bool {
        buft.is_host()
    }
}

/// The BLAS backend.
pub struct BlasBackend {
    dev: Arc<BlasDevice>,
    /// f32 copy of the current weight plane (reused between calls).
    plane: Vec<f32>,
}

impl BlasBackend {
    /// A BLAS backend that takes matrix products whose M, N and K are all at
    /// least `min_batch` (ggml uses 32).
    pub fn new(min_batch: usize) -> BlasBackend {
        BlasBackend {
            dev: Arc::new(BlasDevice {
                min_batch: min_batch.max(1),
            }),
            plane: Vec::new(),
        }
    }

    fn mul_mat(&mut self, dst: &TView, a: &TView, b: &TView) {
        let (k, m) = (a.ne[0], a.ne[1]);
        let n = b.ne[1];
        let (r2, r3) = (b.ne[2] / a.ne[2], b.ne[3] / a.ne[3]);
        self.plane.resize(m * k, 0.0);
        let mut row = vec![0.0f32; k];
        let mut cur: Option<(usize, usize)> = None;
        for i3 in 0..dst.ne[3] {
            for i2 in 0..dst.ne[2] {
                let (a2, a3) = (i2 / r2, i3 / r3);
                if cur != Some((a2, a3)) {
                    for i1 in 0..m {
                        a.load_row(i1, a2, a3, &mut row);
                        self.plane[i1 * k..(i1 + 1) * k].copy_from_slice(&row);
                    }
                    cur = Some((a2, a3));
                }
                // D (n × m, row stride nb1) = B (n × k) · Aᵀ (k × m)
                let bp = b.row_ptr(0, i2, i3).cast::<f32>();
                let dp = dst.row_ptr(0, i2, i3).cast::<f32>();
                // SAFETY: the views were resolved against their buffers for the whole
                // span; B has n rows of k f32 (contiguous rows, row stride nb1), D has
                // n rows of m f32, the plane holds m × k f32; no other thread runs.
                unsafe {
                    matrixmultiply::sgemm(
                        n,
                        k,
                        m,
                        1.0,
                        bp,
                        (b.nb[1] / 4) as isize,
                        1,
                        self.plane.as_ptr(),
                        1,
                        k as isize,
                        0.0,
                        dp,
                        (dst.nb[1] / 4) as isize,
                        1,
                    );
                }
            }
        }
    }
}

impl Backend for BlasBackend {
    fn name(&self) -> String {
        "BLAS".into()
    }
    fn device(&self) -> Arc<dyn Device> {
        self.dev.clone()
    }
    fn graph_compute(&mut self, graph: &Graph) -> Result<()> {
        for t in graph.nodes() {
            if t.op().is_view_op() {
                continue;
            }
            if !self.dev.wants(t) {
                return Err(Error::Unsupported {
                    backend: "BLAS".into(),
                    what: format!("op {} (tensor '{}')", t.op().name(), t.name()),
                });
            }
            let (a, b) = match (graph.src(t, 0), graph.src(t, 1)) {
                (Some(a), Some(b)) => (a, b),
                (a, _) => {
                    let index = usize::from(a.is_some());
                    return Err(
                        Error::shape("MUL_MAT", ShapeProblem::MissingSource { index })
                            .context(format!("node '{}'", t.name())),
                    );
                }
            };
            let dst = TView::resolve(t, "BLAS", true)?;
            let av = TView::resolve(a, "BLAS", false)?;
            let bv = TView::resolve(b, "BLAS", false)?;
            if dst.nb[0] != 4 {
                return Err(Error::Unsupported {
                    backend: "BLAS".into(),
                    what: "strided matmul results".into(),
                });
            }
            self.mul_mat(&dst, &av, &bv);
        }
        Ok(())
    }
}
