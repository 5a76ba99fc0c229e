//! Remote memory: the buffer type and buffers of one remote device.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

use strata::backend::{Buffer, BufferType, BufferUsage};
use strata::error::TensorProblem;
use strata::ops::Op;
use strata::{Error, Result, Tensor};

use super::conn::Conn;
use super::record::record;
use crate::proto::{
    decode_flag, decode_pair, decode_u64, fnv1a, Command, Request, RpcTensor, SetTensorHeader,
    MAX_SRC,
};

/// Cache key of GET_ALLOC_SIZE answers: type, op, op_params, ne, nb.
type AllocKey = (u32, u32, Vec<i32>, [usize; 4], [usize; 4]);

/// The memory of one remote device (buffer type named like the device).
pub struct RpcBufferType {
    pub(crate) conn: Arc<Conn>,
    pub(crate) device: u32,
    pub(crate) name: String,
    pub(crate) alignment: usize,
    pub(crate) max_size: usize,
    alloc_sizes: Mutex<HashMap<AllocKey, usize>>,
}

impl RpcBufferType {
    pub(crate) fn new(conn: Arc<Conn>, device: u32, name: String) -> Result<RpcBufferType> {
        let a = conn.call(&Request::GetAlignment { device }, None)?;
        let alignment = decode_u64(Command::GetAlignment, &a).map_err(Error::from)?;
        let m = conn.call(&Request::GetMaxSize { device }, None)?;
        let max_size = decode_u64(Command::GetMaxSize, &m).map_err(Error::from)?;
        if !alignment.is_power_of_two() || alignment > super::MAX_ALIGNMENT {
            return Err(conn.error(format!(
                "GET_ALIGNMENT: device {device} answers alignment {alignment}, which is not a \
                 power of two up to {} (a broken or hostile server)",
                super::MAX_ALIGNMENT
            )));
        }
        Ok(RpcBufferType {
            conn,
            device,
            name,
            alignment: alignment as usize,
            max_size: usize::try_from(max_size).unwrap_or(usize::MAX),
            alloc_sizes: Mutex::new(HashMap::new()),
        })
    }

    /// Asks the server how many bytes `t` needs (GET_ALLOC_SIZE).
    pub fn remote_alloc_size(&self, t: &Tensor) -> Result<usize> {
        let mut srcs = Box::new([RpcTensor::default(); MAX_SRC]);
        for (k, s) in t.srcs().enumerate().take(MAX_SRC) {
            srcs[k] = record(&self.conn, s, false, None)?;
        }
        let r = self.conn.call(
            &Request::GetAllocSize {
                device: self.device,
                tensor: record(&self.conn, t, false, None)?,
                srcs,
            },
            None,
        )?;
        let n = decode_u64(Command::GetAllocSize, &r).map_err(Error::from)?;
        Ok(usize::try_from(n).unwrap_or(usize::MAX))
    }
}

impl BufferType for RpcBufferType {
    fn name(&self) -> String {
        self.name.clone()
    }
    fn alloc_buffer(self: Arc<Self>, size: usize) -> Result<Arc<dyn Buffer>> {
        let r = self.conn.call(
            &Request::AllocBuffer {
                device: self.device,
                size: size as u64,
            },
            None,
        )?;
        let (handle, rsize) = decode_pair(Command::AllocBuffer, &r).map_err(Error::from)?;
        if handle == 0 {
            return Err(Error::OutOfMemory {
                buffer_type: self.name.clone(),
                requested: size,
                msg: "the server could not allocate it (memory limit or device memory)".into(),
            });
        }
        let b = self
            .conn
            .call(&Request::BufferGetBase { remote_ptr: handle }, None)?;
        let base = decode_u64(Command::BufferGetBase, &b).map_err(Error::from)?;
        let bad = |msg: String| {
            // The server keeps the buffer until freed or disconnected.
            let _ = self
                .conn
                .call(&Request::FreeBuffer { remote_ptr: handle }, None);
            self.conn.error(format!(
                "ALLOC_BUFFER of {size} bytes: {msg} (a broken or hostile server)"
            ))
        };
        if rsize < size as u64 {
            return Err(bad(format!(
                "the server answers a buffer of only {rsize} bytes"
            )));
        }
        if base.checked_add(rsize).is_none() {
            return Err(bad(format!(
                "base {base:#x} + size {rsize} overflows the 64-bit address space"
            )));
        }
        let size = usize::try_from(rsize).map_err(|_| {
            bad(format!(
                "size {rsize} does not fit this machine's address space"
            ))
        })?;
        let buf = Arc::new(RpcBuffer {
            conn: self.conn.clone(),
            handle,
            base,
            size,
            usage: AtomicU8::new(0),
            buft: self.clone(),
        });
        self.conn
            .register_buffer(Arc::as_ptr(&buf) as *const () as usize, handle);
        Ok(buf)
    }
    fn alignment(&self) -> usize {
        self.alignment
    }
    fn max_size(&self) -> usize {
        self.max_size
    }
    /// Asks the server where its backend may pad (quantized rows not a
    /// multiple of 512, matrix products, attention, sorts: ggml's
    /// `ggml_op_alloc_size_may_expand`), as ggml's client does; answers are cached per layout. Falls back to `nbytes`.
    fn alloc_size(&self, t: &Tensor) -> usize {
        let ask = (t.dtype().is_quantized() && !t.ne()[0].is_multiple_of(512) && !t.is_view())
            || matches!(
                t.op(),
                Op::MulMat | Op::MulMatId | Op::FlashAttnExt { .. } | Op::Argsort { .. } | Op::TopK
            );
        if !ask {
            return t.nbytes();
        }
        let key = (
            t.dtype().ggml_id(),
            t.op().ggml_id(),
            t.op().to_ggml_params().to_vec(),
            t.ne(),
            t.nb(),
        );
        let mut cache = self.alloc_sizes.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(&n) = cache.get(&key) {
            return n;
        }
        match self.remote_alloc_size(t) {
            Ok(n) => {
                let n = n.max(t.nbytes());
                cache.insert(key, n);
                n
            }
            Err(_) => t.nbytes(),
        }
    }
}

/// A buffer on a remote device, freed on the server when dropped.
pub struct RpcBuffer {
    conn: Arc<Conn>,
    handle: u64,
    base: u64,
    size: usize,
    usage: AtomicU8,
    buft: Arc<RpcBufferType>,
}

impl RpcBuffer {
    /// The server's handle of this buffer.
    pub fn handle(&self) -> u64 {
        self.handle
    }

    /// The record of `tensor` in this buffer and the tensor-relative offset of `offset`.
    fn locate(&self, tensor: &Tensor, offset: usize) -> Result<(RpcTensor, u64)> {
        let rec = record(&self.conn, tensor, false, None)?;
        let st = tensor.storage_or_err()?;
        if rec.buffer != self.handle || offset < st.offset {
            return Err(Error::BadTensor {
                op: "RPC buffer access",
                tensor: tensor.name(),
                problem: TensorProblem::ForeignBuffer {
                    owner: format!("RPC buffer {:#x}", self.handle),
                },
            });
        }
        Ok((rec, (offset - st.offset) as u64))
    }
}

impl Buffer for RpcBuffer {
    fn buffer_type(&self) -> Arc<dyn BufferType> {
        self.buft.clone()
    }
    fn size(&self) -> usize {
        self.size
    }
    fn base(&self) -> u64 {
        self.base
    }
    fn usage(&self) -> BufferUsage {
        BufferUsage::from_u8(self.usage.load(Ordering::Relaxed))
    }
    fn set_usage(&self, usage: BufferUsage) {
        self.usage.store(usage.to_u8(), Ordering::Relaxed)
    }
    fn init_tensor(&self, tensor: &Tensor) -> Result<()> {
        if tensor.dtype().is_quantized() && !tensor.ne()[0].is_multiple_of(512) && !tensor.is_view()
        {
            let tensor = record(&self.conn, tensor, false, None)?;
            self.conn.call(&Request::InitTensor { tensor }, None)?;
        }
        Ok(())
    }
    fn write(&self, tensor: &Tensor, offset: usize, data: &[u8]) -> Result<()> {
        let (rec, toff) = self.locate(tensor, offset)?;
        let hashed =
            data.len() > self.conn.opts.hash_threshold && self.usage() == BufferUsage::Weights;
        if hashed {
            let r = self.conn.call(
                &Request::SetTensorHash {
                    tensor: rec,
                    offset: toff,
                    hash: fnv1a(data),
                },
                None,
            )?;
            if decode_flag(Command::SetTensorHash, &r).map_err(Error::from)? {
                return Ok(());
            }
        }
        self.conn.call(
            &Request::SetTensor {
                header: SetTensorHeader {
                    tensor: rec,
                    cache_flag: hashed as u8,
                    offset: toff,
                },
                data,
            },
            None,
        )?;
        Ok(())
    }
    fn read(&self, tensor: &Tensor, offset: usize, out: &mut [u8]) -> Result<()> {
        let (rec, toff) = self.locate(tensor, offset)?;
        self.conn.call_into(
            &Request::GetTensor {
                tensor: rec,
                offset: toff,
                size: out.len() as u64,
            },
            out,
        )?;
        Ok(())
    }
    fn fill(&self, tensor: &Tensor, offset: usize, len: usize, value: u8) -> Result<()> {
        let (rec, toff) = self.locate(tensor, offset)?;
        self.conn.call(
            &Request::MemsetTensor {
                tensor: rec,
                offset: toff,
                size: len as u64,
                value,
            },
            None,
        )?;
        Ok(())
    }
    fn copy_from(&self, src: &Tensor, dst: &Tensor) -> Result<bool> {
        let s = record(&self.conn, src, false, None)?;
        if s.buffer == 0 {
            return Ok(false); // not on this server
        }
        let d = record(&self.conn, dst, false, None)?;
        let r = self
            .conn
            .call(&Request::CopyTensor { src: s, dst: d }, None)?;
        decode_flag(Command::CopyTensor, &r).map_err(Error::from)
    }
    fn clear(&self, value: u8) -> Result<()> {
        self.conn.call(
            &Request::BufferClear {
                remote_ptr: self.handle,
                value,
            },
            None,
        )?;
        Ok(())
    }
}

impl Drop for RpcBuffer {
    fn drop(&mut self) {
        self.conn
            .unregister_buffer(self as *const RpcBuffer as *const () as usize);
        if self.conn.is_alive() {
            if let Err(e) = self.conn.call(
                &Request::FreeBuffer {
                    remote_ptr: self.handle,
                },
                None,
            ) {
                tracing::debug!("freeing RPC buffer {:#x}: {e}", self.handle);
            }
        }
    }
}
