//! Test doubles for multi-backend code: a device whose memory the CPU
//! backend cannot address (like a GPU's), and a CPU backend that only
//! supports some ops. The scheduler's tests and examples use them; users can
//! too, to check their placement policies without a GPU.
//!
//! It also holds the few helpers that the tests and benches of several
//! crates share: where the default model is ([`require_model`]), a
//! deterministic number stream ([`xorshift`]), and the reference step of
//! flash attention's online softmax ([`online_softmax_step`]).
//!
//! ```
//! use strata::backend::Backend;
//! use strata::testkit::TestBackend;
//! let gpu = TestBackend::device("FAKE0", |_| true, 2);
//! assert!(!gpu.default_buffer_type().is_host());
//! let cpu_adds_only = TestBackend::host("CPU", |t| t.op().name() == "ADD", 1);
//! assert_eq!(cpu_adds_only.name(), "CPU");
//! ```

use std::path::PathBuf;
use std::ptr::NonNull;
use std::sync::Arc;

use crate::backend::{Backend, Buffer, BufferType, BufferUsage, Device, DeviceMemory, DeviceType};
use crate::cpu::{cpu_buffer_type, CpuBackend};
use crate::gguf::{GgufWriter, Value};
use crate::graph::Graph;
use crate::tensor::Tensor;
use crate::{Error, Result};

/// Which ops a test backend accepts.
pub type OpFilter = Arc<dyn Fn(&Tensor) -> bool + Send + Sync>;

/// Memory of a fake device: host memory underneath, but not host-accessible
/// as far as other backends can tell (`is_host` is false).
pub struct DeviceBufferType {
    name: String,
}

impl BufferType for DeviceBufferType {
    fn name(&self) -> String {
        self.name.clone()
    }
    fn alloc_buffer(self: Arc<Self>, size: usize) -> Result<Arc<dyn Buffer>> {
        let inner = cpu_buffer_type().alloc_buffer(size)?;
        Ok(Arc::new(DeviceBuffer { inner, buft: self }))
    }
    fn alignment(&self) -> usize {
        crate::cpu::HOST_ALIGNMENT
    }
}

struct DeviceBuffer {
    inner: Arc<dyn Buffer>,
    buft: Arc<DeviceBufferType>,
}

impl Buffer for DeviceBuffer {
    fn buffer_type(&self) -> Arc<dyn BufferType> {
        self.buft.clone()
    }
    fn size(&self) -> usize {
        self.inner.size()
    }
    fn base(&self) -> u64 {
        self.inner.base()
    }
    fn host_ptr(&self) -> Option<NonNull<u8>> {
        // The fake device's own kernels (the CPU's) address it directly.
        self.inner.host_ptr()
    }
    fn usage(&self) -> BufferUsage {
        self.inner.usage()
    }
    fn set_usage(&self, usage: BufferUsage) {
        self.inner.set_usage(usage)
    }
    fn write(&self, t: &Tensor, offset: usize, data: &[u8]) -> Result<()> {
        self.inner.write(t, offset, data)
    }
    fn read(&self, t: &Tensor, offset: usize, out: &mut [u8]) -> Result<()> {
        self.inner.read(t, offset, out)
    }
    fn fill(&self, t: &Tensor, offset: usize, len: usize, value: u8) -> Result<()> {
        self.inner.fill(t, offset, len, value)
    }
    fn clear(&self, value: u8) -> Result<()> {
        self.inner.clear(value)
    }
}

#[derive(Clone)]
struct TestDevice {
    name: String,
    host: bool,
    offload: bool,
    filter: OpFilter,
    buft: Arc<dyn BufferType>,
    threads: usize,
}

impl Device for TestDevice {
    fn name(&self) -> String {
        self.name.clone()
    }
    fn description(&self) -> String {
        format!("test device {}", self.name)
    }
    fn memory(&self) -> Result<DeviceMemory> {
        Ok(DeviceMemory {
            free: 1 << 30,
            total: 1 << 30,
        })
    }
    fn device_type(&self) -> DeviceType {
        if self.host {
            DeviceType::Cpu
        } else {
            DeviceType::Gpu
        }
    }
    fn init_backend(&self) -> Result<Box<dyn Backend>> {
        Ok(Box::new(TestBackend {
            dev: Arc::new(self.clone()),
            cpu: CpuBackend::new(self.threads),
        }))
    }
    fn default_buffer_type(&self) -> Arc<dyn BufferType> {
        self.buft.clone()
    }
    fn supports_op(&self, op: &Tensor) -> bool {
        crate::cpu::cpu_device().supports_op(op) && (op.op().is_view_op() || (self.filter)(op))
    }
    fn offload_op(&self, _op: &Tensor) -> bool {
        self.offload
    }
    fn supports_buft(&self, buft: &Arc<dyn BufferType>) -> bool {
        if self.host {
            buft.is_host()
        } else {
            crate::backend::same_buffer_type(buft, &self.buft)
        }
    }
}

/// A backend for tests: computes with the CPU's kernels, supports only the
/// ops its filter accepts, and either uses host memory (a CPU-like backend)
/// or memory of its own that other backends cannot read (a GPU-like one).
pub struct TestBackend {
    dev: Arc<TestDevice>,
    cpu: CpuBackend,
}

impl TestBackend {
    /// A GPU-like backend named `name` with its own buffer type.
    pub fn device(
        name: &str,
        filter: impl Fn(&Tensor) -> bool + Send + Sync + 'static,
        threads: usize,
    ) -> TestBackend {
        let buft: Arc<dyn BufferType> = Arc::new(DeviceBufferType {
            name: name.to_string(),
        });
        TestBackend {
            dev: Arc::new(TestDevice {
                name: name.into(),
                host: false,
                offload: false,
                filter: Arc::new(filter),
                buft,
                threads,
            }),
            cpu: CpuBackend::new(threads),
        }
    }

    /// A CPU-like backend (host memory, the CPU buffer type) limited to some ops.
    pub fn host(
        name: &str,
        filter: impl Fn(&Tensor) -> bool + Send + Sync + 'static,
        threads: usize,
    ) -> TestBackend {
        TestBackend {
            dev: Arc::new(TestDevice {
                name: name.into(),
                host: true,
                offload: false,
                filter: Arc::new(filter),
                buft: cpu_buffer_type(),
                threads,
            }),
            cpu: CpuBackend::new(threads),
        }
    }
}

impl TestBackend {
    /// The same backend, asking for ops whose weights are in host memory
    /// (`offload_op`), like ggml's GPU backends.
    pub fn offloading(self) -> TestBackend {
        self.with_device(|d| d.offload = true)
    }

    /// The same backend with `buft` as its default buffer type, e.g. a
    /// CPU-like backend whose tensors go to
    /// [`packed_buffer_type`](crate::cpu::packed_buffer_type) (weights
    /// stored in the repacked layout).
    pub fn with_buffer_type(self, buft: Arc<dyn BufferType>) -> TestBackend {
        self.with_device(|d| d.buft = buft)
    }

    /// The same backend with its device changed by `change`.
    fn with_device(self, change: impl FnOnce(&mut TestDevice)) -> TestBackend {
        let mut dev = (*self.dev).clone();
        change(&mut dev);
        TestBackend {
            dev: Arc::new(dev),
            cpu: self.cpu,
        }
    }
}

impl Backend for TestBackend {
    fn name(&self) -> String {
        self.dev.name.clone()
    }
    fn device(&self) -> Arc<dyn Device> {
        self.dev.clone()
    }
    fn graph_compute(&mut self, graph: &Graph) -> Result<()> {
        self.cpu.graph_compute(graph)
    }
}

/// The default model's path: `$STRATA_MODEL`, else
/// `~/.cache/strata/SmolLM2-135M-Instruct.Q4_1.gguf`.
pub fn default_model_path() -> PathBuf {
    if let Some(p) = std::env::var_os("STRATA_MODEL") {
        return PathBuf::from(p);
    }
    let home = std::env::var_os("HOME").unwrap_or_default();
    PathBuf::from(home).join(".cache/strata/SmolLM2-135M-Instruct.Q4_1.gguf")
}

/// The default model's path ([`default_model_path`]) when the file exists.
/// Otherwise prints `SKIPPED` naming `what` did not run and returns `None`,
/// or panics when `STRATA_REQUIRE_MODEL=1` (CI, where the model must be
/// there).
pub fn require_model(what: &str) -> Option<PathBuf> {
    let path = default_model_path();
    if path.exists() {
        return Some(path);
    }
    let msg = format!(
        "SKIPPED: model {} not found (set STRATA_MODEL, run .ci/fetch-models.sh, or \
         `strata run` once to fetch it); {what} did not run",
        path.display()
    );
    if std::env::var("STRATA_REQUIRE_MODEL").is_ok_and(|v| v == "1") {
        panic!("{msg} (STRATA_REQUIRE_MODEL=1)");
    }
    eprintln!("{msg}");
    None
}

/// Writes a vocabulary of `tokens`, every one a normal token (type 1), into
/// a GGUF file being made: `tokenizer.ggml.tokens` and
/// `tokenizer.ggml.token_type`.
pub fn add_normal_tokens(g: &mut GgufWriter, tokens: Vec<String>) -> Result<()> {
    let n = tokens.len();
    g.add_metadata("tokenizer.ggml.tokens", Value::Array(tokens.into()))?;
    g.add_metadata(
        "tokenizer.ggml.token_type",
        Value::Array(vec![1i32; n].into()),
    )
}

/// The states of a xorshift64 generator seeded from `seed` (never zero):
/// the same numbers every run, for test and bench inputs.
///
/// ```
/// let a: Vec<u64> = strata::testkit::xorshift(7).take(3).collect();
/// assert_eq!(a, strata::testkit::xorshift(7).take(3).collect::<Vec<_>>());
/// assert!(a.iter().all(|&x| x != 0));
/// ```
pub fn xorshift(seed: u64) -> impl Iterator<Item = u64> {
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    std::iter::repeat_with(move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    })
}

/// ggml's ALiBi slope of head `h` of `n_head` for `max_bias` (1 when
/// `max_bias` is 0), exactly as the CPU kernels compute it in f32: the
/// slope a test's reference scales the mask by to match them bit for bit.
pub fn alibi_slope(max_bias: f32, h: usize, n_head: usize) -> f32 {
    crate::cpu::ops::alibi_slope(max_bias, h, n_head)
}

/// Whether the CPU's flash attention, on a batch of 64 or more query rows
/// (its tiled path), takes the one-chunk path instead because the tiles
/// would compute mostly masked scores: the rule of the kernel itself, on
/// an f16 mask of `n_q` rows of `row_len` little-endian values (`mask`,
/// the first plane), of which the first `n_kv` are the keys. Tests use it
/// to know which path, and so which tolerance, a case gets.
///
/// # Errors
/// [`Error::InvalidArgument`] when `n_kv > row_len` or `mask` holds fewer
/// than `n_q` rows.
pub fn attn_mask_too_sparse_for_tiles(
    mask: &[u8],
    row_len: usize,
    n_q: usize,
    n_kv: usize,
) -> Result<bool> {
    let need = row_len.checked_mul(n_q).and_then(|v| v.checked_mul(2));
    if n_kv > row_len || need.is_none_or(|need| mask.len() < need) {
        return Err(Error::InvalidArgument(format!(
            "an f16 mask of {n_q} rows of {row_len} values for {n_kv} keys needs \
             n_kv <= row_len and {n_q} x {row_len} x 2 bytes; got {} bytes",
            mask.len()
        )));
    }
    Ok(crate::cpu::ops::attn::sparse_mask_f16(
        mask, row_len, n_q, n_kv,
    ))
}

/// One key of flash attention's online softmax, as ggml's CPU kernel does
/// it: with score `s` against the running `max` and `sum`, rescales `acc`
/// (each value through `round`, the V accumulator's precision) when `s` is
/// the new maximum, and returns the weight of this key's V row.
pub fn online_softmax_step(
    max: &mut f32,
    sum: &mut f32,
    acc: &mut [f32],
    s: f32,
    round: impl Fn(f32) -> f32,
) -> f32 {
    let w = if s > *max {
        let shrink = (*max - s).exp();
        *max = s;
        *sum *= shrink;
        acc.iter_mut().for_each(|a| *a = round(*a * shrink));
        1.0
    } else {
        (s - *max).exp()
    };
    *sum += w;
    w
}
