//! One placement policy object: tensor-name rules → backend and per-backend
//! offload thresholds, applied by the scheduler's first pass.

use regex::Regex;

use super::BackendId;
use crate::tensor::Tensor;
use crate::{Error, Result};

/// Where ops go beyond ggml's rules: name rules and offload thresholds.
///
/// ```
/// use strata::sched::{BackendId, PlacementPolicy};
/// let p = PlacementPolicy::new()
///     .rule(r"^ffn_.*", BackendId(1))
///     .unwrap()
///     .offload_min_batch(BackendId(0), 32);
/// assert_eq!(p.rules().len(), 1);
/// assert!(PlacementPolicy::new().rule("(", BackendId(0)).is_err());
/// ```
#[derive(Clone, Debug, Default)]
pub struct PlacementPolicy {
    rules: Vec<(Regex, BackendId)>,
    offload_min_batch: Vec<(BackendId, usize)>,
}

impl PlacementPolicy {
    /// An empty policy (ggml's behaviour).
    pub fn new() -> PlacementPolicy {
        PlacementPolicy::default()
    }

    /// Ops whose result name matches `pattern` run on backend `backend`
    /// (unless their result is already allocated elsewhere). First match wins.
    pub fn rule(mut self, pattern: &str, backend: BackendId) -> Result<PlacementPolicy> {
        let re = Regex::new(pattern).map_err(|e| Error::BadValue {
            arg: "placement rule".into(),
            value: format!("'{pattern}'"),
            expected: format!("a regular expression ({e})"),
        })?;
        self.rules.push((re, backend));
        Ok(self)
    }

    /// Backend `backend` takes ops whose weights are on the CPU (offload) only
    /// when the op's batch (result ne1) is at least `n` — ggml's GPU backends
    /// hard-code 32.
    pub fn offload_min_batch(mut self, backend: BackendId, n: usize) -> PlacementPolicy {
        self.offload_min_batch.retain(|(b, _)| *b != backend);
        self.offload_min_batch.push((backend, n));
        self
    }

    /// The name rules.
    pub fn rules(&self) -> &[(Regex, BackendId)] {
        &self.rules
    }

    /// The backend a name rule sends `t` to.
    pub(crate) fn backend_for(&self, t: &Tensor) -> Option<usize> {
        if self.rules.is_empty() {
            return None;
        }
        let name = t.name();
        self.rules
            .iter()
            .find(|(re, _)| re.is_match(&name))
            .map(|(_, b)| b.index())
    }

    /// True when the threshold of `backend` (if any) lets it offload `t`.
    pub(crate) fn batch_allows(&self, backend: usize, t: &Tensor) -> bool {
        self.offload_min_batch
            .iter()
            .find(|(b, _)| b.index() == backend)
            .is_none_or(|(_, n)| batch_size(t) >= *n)
    }

    /// Checks every rule names an existing backend.
    pub(crate) fn check(&self, n_backends: usize) -> Result<()> {
        for (re, b) in &self.rules {
            if b.index() >= n_backends {
                return Err(Error::index(
                    format!("placement rule '{re}': backend"),
                    b.index(),
                    n_backends,
                ));
            }
        }
        Ok(())
    }
}

/// The batch an op works on, as ggml's offload rule counts it: the tokens
/// of a MUL_MAT_ID are its third dimension (experts used per token are the
/// second), of every other weight op the second.
fn batch_size(t: &Tensor) -> usize {
    match t.op() {
        crate::ops::Op::MulMatId => t.ne()[2],
        _ => t.ne()[1],
    }
}
