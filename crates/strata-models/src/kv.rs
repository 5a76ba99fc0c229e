//! The KV cache: per layer an f16 K and V tensor `[n_embd_gqa, n_ctx]`
//! (one row per cell), allocated on the device of its layer and zeroed
//! (masked cells are multiplied by zero weights, so they must not hold NaNs).

use std::sync::Arc;

use strata::backend::{alloc_tensors, Buffer};
use strata::{DType, Tensor};

use crate::model::Model;
use crate::Result;

/// K and V caches of every layer.
pub struct KvCache {
    /// K per layer, f16 `[n_embd_k_gqa, n_ctx]`.
    pub k: Vec<Tensor>,
    /// V per layer, f16 `[n_embd_v_gqa, n_ctx]`.
    pub v: Vec<Tensor>,
    n_ctx: usize,
    buffers: Vec<Arc<dyn Buffer>>,
}

impl KvCache {
    /// Allocates a cache of `n_ctx` cells for `model`, each layer's on its device.
    pub fn new(model: &Model, n_ctx: usize) -> Result<KvCache> {
        let hp = &model.hparams;
        let mut k = Vec::with_capacity(hp.n_layer);
        let mut v = Vec::with_capacity(hp.n_layer);
        let n_dev = model.devices.list().len();
        let mut per_dev: Vec<Vec<Tensor>> = vec![Vec::new(); n_dev];
        for il in 0..hp.n_layer {
            let kt = Tensor::new(DType::F16, &[hp.n_embd_k_gqa(), n_ctx])?
                .with_name(format!("cache_k_l{il}"));
            let vt = Tensor::new(DType::F16, &[hp.n_embd_v_gqa(), n_ctx])?
                .with_name(format!("cache_v_l{il}"));
            let d = model.layer_map.layers[il];
            per_dev[d].push(kt.clone());
            per_dev[d].push(vt.clone());
            k.push(kt);
            v.push(vt);
        }
        let mut buffers = Vec::new();
        for (d, ts) in per_dev.iter().enumerate() {
            if ts.is_empty() {
                continue;
            }
            let bufs = alloc_tensors(ts, &model.devices.list()[d].default_buffer_type())?;
            for b in &bufs {
                b.clear(0)?;
            }
            buffers.extend(bufs);
        }
        Ok(KvCache {
            k,
            v,
            n_ctx,
            buffers,
        })
    }

    /// Number of cells.
    pub fn n_ctx(&self) -> usize {
        self.n_ctx
    }

    /// Bytes of all cache buffers.
    pub fn bytes(&self) -> usize {
        self.buffers.iter().map(|b| b.size()).sum()
    }

    /// Zeroes every cell.
    pub fn clear(&self) -> Result<()> {
        for b in &self.buffers {
            b.clear(0)?;
        }
        Ok(())
    }
}
