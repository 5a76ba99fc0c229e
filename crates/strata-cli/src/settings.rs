//! The environment variables the CLI reads, in one place. The libraries read
//! none of these: the CLI turns them into settings and passes them down
//! (the scheduler's [`SchedConfig`], the model's load options).
//!
//! - `STRATA_SCHED_DEBUG` (alias `GGML_SCHED_DEBUG`): the scheduler's debug
//!   level, [`SchedConfig::debug`] (0 off, 1 splits, 2 splits and nodes).
//! - `STRATA_NO_REPACK=1`: as `--no-repack` (`LoadOptions::no_repack`).
//! - `STRATA_LOG`: the log level (read by the logger, `log.rs`).
//!
//! `STRATA_ISA` is not read here: it is the process-wide default level that
//! [`strata::isa::active`] resolves once (validated, logged when refused) and
//! every CPU backend, the model loader's repack decision and the quantizers
//! follow, so the CLI and the library tests see the same level without the
//! CLI passing it to each user.

use strata::sched::SchedConfig;

/// The scheduler debug level from `value` (an integer; anything else is 0).
fn parse_debug(value: Option<&str>) -> u8 {
    value.and_then(|v| v.trim().parse().ok()).unwrap_or(0)
}

/// The scheduler's settings: defaults, with the debug level from
/// `STRATA_SCHED_DEBUG`, or `GGML_SCHED_DEBUG` when that is unset.
pub fn sched_config() -> SchedConfig {
    let var = std::env::var("STRATA_SCHED_DEBUG")
        .or_else(|_| std::env::var("GGML_SCHED_DEBUG"))
        .ok();
    SchedConfig {
        debug: parse_debug(var.as_deref()),
        ..SchedConfig::default()
    }
}

/// Whether `value` turns a flag on: set, non-empty and not `0`.
fn flag_on(value: Option<&str>) -> bool {
    value.is_some_and(|v| !v.is_empty() && v != "0")
}

/// `STRATA_NO_REPACK`: keep CPU weights mapped (as `--no-repack`).
pub fn no_repack_env() -> bool {
    flag_on(std::env::var("STRATA_NO_REPACK").ok().as_deref())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_levels_parse() {
        assert_eq!(parse_debug(None), 0);
        assert_eq!(parse_debug(Some("2")), 2);
        assert_eq!(parse_debug(Some(" 1 ")), 1);
        assert_eq!(parse_debug(Some("yes")), 0);
    }

    #[test]
    fn flags_follow_strata_no_repack_rules() {
        assert!(!flag_on(None));
        assert!(!flag_on(Some("")));
        assert!(!flag_on(Some("0")));
        assert!(flag_on(Some("1")));
        assert!(flag_on(Some("yes")));
    }
}
