//! Mixture-of-experts hyperparameters (`{arch}.expert_*` keys) as
//! llama.cpp's loader reads and checks them for the families that have
//! expert FFNs: `qwen3moe` (always) and `llama` (Mixtral, when
//! `llama.expert_count` is above 0).

use strata::gguf::Metadata;

use super::hparams::get_uint;
use super::{Family, Need};
use crate::error::meta;
use crate::Result;

/// Most experts a layer may have (llama.cpp's `LLAMA_MAX_EXPERTS`).
pub const MAX_EXPERTS: usize = 1024;

/// The metadata key (without the `{arch}.` prefix) giving each expert's
/// hidden width: qwen3moe has its own, a Mixtral-style llama's experts are
/// `feed_forward_length` wide.
pub(super) fn ff_exp_key(family: Family) -> &'static str {
    match family {
        Family::Qwen3Moe => "expert_feed_forward_length",
        _ => "feed_forward_length",
    }
}

/// Expert counts and widths (all 0 for a dense model).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Experts {
    /// `expert_count`.
    pub n_expert: usize,
    /// `expert_used_count`.
    pub n_expert_used: usize,
    /// Each expert's hidden width.
    pub n_ff_exp: usize,
}

impl Experts {
    /// Reads and checks the expert keys of `family` (`n_ff`: the
    /// `feed_forward_length` already read, 0 when absent).
    ///
    /// As llama.cpp: at most [`MAX_EXPERTS`] experts; with experts, between
    /// 1 and `expert_count` of them used; without, none used. Grouped
    /// routing (`expert_group_count` > 1, DeepSeek V3's) is refused: these
    /// families' graphs do not have it.
    pub(super) fn read(m: &Metadata, family: Family, n_ff: usize) -> Result<Experts> {
        let arch = family.arch();
        let key = |k: &str| format!("{arch}.{k}");
        let need = family.spec().moe;
        let n_expert = match (get_uint(m, &key("expert_count"))?, need) {
            (None, Need::Required) => return Err(meta(&key("expert_count"), "missing")),
            (n, _) => n.unwrap_or(0),
        };
        let n_used = get_uint(m, &key("expert_used_count"))?;
        if n_expert == 0 {
            if need == Need::Required {
                return Err(meta(
                    &key("expert_count"),
                    format!("0 experts: a {arch} model needs at least one"),
                ));
            }
            if n_used.is_some_and(|n| n > 0) {
                return Err(meta(
                    &key("expert_used_count"),
                    "experts are used but expert_count is 0 (or absent)",
                ));
            }
            return Ok(Experts::default());
        }
        if need == Need::No {
            return Err(meta(
                &key("expert_count"),
                format!("{n_expert} experts: {arch} models have no mixture-of-experts FFN"),
            ));
        }
        if n_expert > MAX_EXPERTS {
            return Err(meta(
                &key("expert_count"),
                format!("{n_expert} experts: at most {MAX_EXPERTS} are supported"),
            ));
        }
        let n_expert_used = match n_used {
            None => return Err(meta(&key("expert_used_count"), "missing")),
            Some(0) => {
                return Err(meta(
                    &key("expert_used_count"),
                    "0: every token must be routed to at least one expert",
                ))
            }
            Some(n) if n > n_expert => {
                return Err(meta(
                    &key("expert_used_count"),
                    format!("{n} experts used per token, but the model has {n_expert}"),
                ))
            }
            Some(n) => n,
        };
        if get_uint(m, &key("expert_group_count"))?.is_some_and(|g| g > 1) {
            return Err(meta(
                &key("expert_group_count"),
                "grouped expert routing is not supported",
            ));
        }
        let n_ff_exp = match family {
            Family::Qwen3Moe => match get_uint(m, &key(ff_exp_key(family)))? {
                Some(n) if n > 0 => n,
                // llama.cpp: n_ff / n_expert_used when the key is absent or 0
                _ => n_ff / n_expert_used,
            },
            _ => n_ff,
        };
        if n_ff_exp == 0 {
            return Err(meta(
                &key(ff_exp_key(family)),
                "missing or 0: the experts' hidden width is needed",
            ));
        }
        Ok(Experts {
            n_expert,
            n_expert_used,
            n_ff_exp,
        })
    }
}
