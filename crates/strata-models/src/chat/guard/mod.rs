//! The size guard of chat templates.
//!
//! minijinja's fuel counts instructions, not bytes: `ns.s = ns.s ~ ns.s` in
//! a loop doubles a string with each instruction, and many builtins (`join`,
//! `replace`, `indent`, `format`, `tojson`...) build in one call a value
//! much larger than their inputs, or convert a small but deeply shared list
//! (`l = [l, l]`, 60 times) into an exponentially long string. No minijinja
//! hook sees the operators, so this module works on the compiled bytecode
//! (minijinja's `unstable_machinery`, hence the exact version pin):
//!
//! * [`rewrite`] copies a template's instructions, replacing `~` with a
//!   capped concatenation and putting a size check before `+`, `*`,
//!   slicing, `in`, list and map literals; literal text goes through the
//!   formatter like `{{ }}` output, and `{% set %}...{% endset %}` captures
//!   are tracked, so only text outside them counts toward the rendered
//!   prompt ([`MAX_RENDERED`]). Jumps are renumbered.
//! * [`install`] replaces the builtin filters, tests and functions that
//!   build strings or lists, or turn values into strings, with wrappers that
//!   estimate the result before the builtin runs and charge what it built;
//!   the formatter charges every emitted byte.
//!
//! Every byte built goes to a per-rendering budget ([`MAX_BUILT`], counted
//! whether or not the value is still alive: memory cannot be measured from
//! inside the engine), and no one string or list may exceed [`MAX_VALUE`]
//! (a list counts a [`Value`] slot per item; items are shared, not copied).
//! Estimates come first wherever a builtin could build more than a small
//! multiple of its inputs, so nothing large is allocated before the check.
//!
//! Nesting is bounded too: a value nested deeply enough (`ns.l = [ns.l]` a
//! million times), or a namespace holding itself (`ns.me = ns`), overflows
//! the stack when minijinja prints, serializes, compares or drops it, all
//! recursively. Two rules keep every value shallow and acyclic:
//!
//! * Every list, map or keyword arguments literal, `varargs`/`kwargs`
//!   lookup, and result of a checked filter or of `dict`/`namespace` is
//!   walked ([`nesting`], with an explicit stack) and refused past
//!   [`MAX_DEPTH`] levels. A list or map of minijinja's own types that holds
//!   no namespace is immutable, so its depth is remembered by address for
//!   the rest of the rendering (the value is kept, so the address is not
//!   reused) and later walks stop there; walks are bounded in all
//!   ([`MAX_WALKED`] items). `+`, `*`, slicing and the unchecked builtins
//!   only rearrange items of values already checked: no deeper result.
//! * Namespaces are the only mutable values, so the only way to a cycle
//!   or to deepen a value after its check: `{% set ns.attr = value %}` is
//!   refused when `value` is or holds a namespace (the walk again). A
//!   namespace's attributes are then namespace-free, so no namespace can
//!   reach itself, and a namespace deepens by at most [`MAX_DEPTH`] + 1
//!   after it was put in a list: no value nests more than about twice
//!   [`MAX_DEPTH`] deep, which stays well within a thread's stack.
//!
//! minijinja's namespace type is private: it is recognized by its type name.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::fmt::{self, Write as _};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use minijinja::machinery::{Instruction, Instructions};
use minijinja::value::{from_args, Kwargs, Object, ObjectRepr, Value, ValueKind};
use minijinja::{filters, functions, tests, AutoEscape, Environment, Error, ErrorKind, State};

use super::{MAX_BUILT, MAX_DEPTH, MAX_RANGE, MAX_RENDERED, MAX_VALUE};

/// Bytes one list item costs (the slot; the item itself is shared).
const SLOT: usize = std::mem::size_of::<Value>();
/// Bytes a string conversion may take beyond its operands (digits of a
/// float, a `%` conversion's padding that is not spelled in digits).
const SMALL: usize = 512;

// The names of the guard functions the rewritten bytecode calls. A colon is
// not valid in a template identifier, so no template can shadow them.
const CONCAT: &str = "strata:concat";
const CHECK_ADD: &str = "strata:check-add";
const CHECK_MUL: &str = "strata:check-mul";
const CHECK_SLICE: &str = "strata:check-slice";
const CHECK_IN: &str = "strata:check-in";
const SLOTS: &str = "strata:slots";
const CAPTURE_BEGIN: &str = "strata:capture-begin";
const CAPTURE_END: &str = "strata:capture-end";
const CHECK_NESTING: &str = "strata:check-nesting";
const CHECK_SET_ATTR: &str = "strata:check-set-attr";
/// The name of the per-rendering [`Budget`] among the state's temps.
const BUDGET: &str = "strata:budget";

/// What one rendering has built so far.
#[derive(Debug, Default)]
struct Budget {
    /// Bytes of strings and lists built.
    built: AtomicUsize,
    /// Bytes of text emitted outside any capture.
    output: AtomicUsize,
    /// Bytes emitted into each open capture, innermost last.
    captures: Mutex<Vec<usize>>,
    /// Items the nesting checks have looked at.
    walked: AtomicUsize,
    /// The depth of every list and map found free of namespaces (so
    /// immutable), by address; the value is held so the address is not reused.
    depths: Mutex<HashMap<usize, (usize, Value)>>,
}

impl Object for Budget {}

impl Budget {
    fn captures(&self) -> std::sync::MutexGuard<'_, Vec<usize>> {
        self.captures.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn depths(&self) -> std::sync::MutexGuard<'_, HashMap<usize, (usize, Value)>> {
        self.depths.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn budget(state: &State) -> Result<Arc<Budget>, Error> {
    if let Some(b) = state.get_temp(BUDGET) {
        return b
            .downcast_object::<Budget>()
            .ok_or_else(|| Error::new(ErrorKind::InvalidOperation, "size budget lost"));
    }
    let b = Value::from_object(Budget::default());
    state.set_temp(BUDGET, b.clone());
    b.downcast_object::<Budget>()
        .ok_or_else(|| Error::new(ErrorKind::InvalidOperation, "size budget lost"))
}

fn too_big(what: &str) -> Error {
    Error::new(
        ErrorKind::InvalidOperation,
        format!(
            "{what} of more than {MAX_VALUE} bytes: a chat template may build no larger \
             string or list (a runaway template?); fix the template or render without it"
        ),
    )
}

fn over_budget() -> Error {
    Error::new(
        ErrorKind::InvalidOperation,
        format!(
            "it built more than {MAX_BUILT} bytes of strings and lists (a runaway \
             template?); fix the template or render without it"
        ),
    )
}

/// Checks that a value of `bytes` may be built, and charges it.
fn build(state: &State, what: &str, bytes: usize) -> Result<(), Error> {
    if bytes > MAX_VALUE {
        return Err(too_big(what));
    }
    let b = budget(state)?;
    let before = b.built.fetch_add(bytes, Ordering::Relaxed);
    if before.saturating_add(bytes) > MAX_BUILT {
        return Err(over_budget());
    }
    Ok(())
}

/// Fails when an estimate is past [`MAX_VALUE`] (before anything is built).
fn fits(what: &str, bytes: usize) -> Result<(), Error> {
    if bytes > MAX_VALUE {
        Err(too_big(what))
    } else {
        Ok(())
    }
}

/// Counts formatted bytes, failing past `limit`.
struct Count {
    n: usize,
    limit: usize,
}

impl fmt::Write for Count {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.n = self.n.saturating_add(s.len());
        if self.n > self.limit {
            Err(fmt::Error)
        } else {
            Ok(())
        }
    }
}

/// Counts the bytes `tojson` produces (it escapes `<>&'` to six bytes).
struct JsonCount(Count);

impl std::io::Write for JsonCount {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        let escaped = b
            .iter()
            .filter(|c| matches!(c, b'<' | b'>' | b'&' | b'\''))
            .count();
        let n = b.len().saturating_add(escaped.saturating_mul(5));
        self.0.n = self.0.n.saturating_add(n);
        if self.0.n > self.0.limit {
            Err(std::io::Error::other("too large"))
        } else {
            Ok(b.len())
        }
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn is_string(v: &Value) -> bool {
    v.kind() == ValueKind::String
}

/// Bytes of `v` as a string (`{{ v }}`, `~`), or `None` past `limit`.
fn display_len(v: &Value, limit: usize) -> Option<usize> {
    if let (true, Some(s)) = (is_string(v), v.as_str()) {
        return (s.len() <= limit).then_some(s.len());
    }
    let mut c = Count { n: 0, limit };
    // A formatting error that is not ours is the builtin's to report.
    let _ = write!(c, "{v}");
    (c.n <= limit).then_some(c.n)
}

/// Checks that `v` converts to a string of at most [`MAX_VALUE`] bytes
/// (filters and tests that take strings convert whatever they are given).
fn stringable(v: &Value) -> Result<usize, Error> {
    if v.is_kwargs() {
        return Ok(0);
    }
    display_len(v, MAX_VALUE).ok_or_else(|| too_big("a string conversion"))
}

/// `v` as a string, converted only once it is known to fit.
fn as_text(v: &Value) -> Result<Cow<'_, str>, Error> {
    if let (true, Some(s)) = (is_string(v), v.as_str()) {
        return Ok(Cow::Borrowed(s));
    }
    stringable(v)?;
    Ok(Cow::Owned(v.to_string()))
}

/// Items `v` yields when iterated (characters of a string), or `None` past `limit`.
fn items(v: &Value, limit: usize) -> Option<usize> {
    let n = match v.kind() {
        ValueKind::String => v.as_str().map(|s| s.chars().count()),
        ValueKind::Seq | ValueKind::Map | ValueKind::Iterable => v.len(),
        _ => Some(0),
    };
    if let Some(n) = n {
        return (n <= limit).then_some(n);
    }
    let iter = v.try_iter().ok()?;
    let n = iter.take(limit.saturating_add(1)).count();
    (n <= limit).then_some(n)
}

/// The slots of a list of the items of `v`, or `None` past [`MAX_VALUE`].
fn list_bytes(v: &Value) -> Option<usize> {
    items(v, MAX_VALUE / SLOT).map(|n| n * SLOT)
}

/// Bytes `v` took to build, not counting what it shares.
fn shallow(v: &Value) -> usize {
    match v.kind() {
        ValueKind::String | ValueKind::Bytes => v.as_bytes().map_or(0, <[u8]>::len),
        ValueKind::Seq | ValueKind::Iterable => v.len().unwrap_or(0).saturating_mul(SLOT),
        ValueKind::Map => v.len().unwrap_or(0).saturating_mul(2 * SLOT),
        _ => 0,
    }
}

fn reversed(args: &[Value]) -> Value {
    Value::from(args.iter().rev().cloned().collect::<Vec<_>>())
}

fn pair(args: &[Value]) -> Result<(&Value, &Value), Error> {
    match args {
        [a, b] => Ok((a, b)),
        _ => Err(Error::from(ErrorKind::InvalidOperation)),
    }
}

/// `a ~ b`, built only when it fits.
fn concat(state: &State, args: &[Value]) -> Result<Value, Error> {
    let (a, b) = pair(args)?;
    let concat = || too_big("a `~` concatenation");
    let la = display_len(a, MAX_VALUE).ok_or_else(concat)?;
    let lb = display_len(b, MAX_VALUE - la).ok_or_else(concat)?;
    build(state, "a `~` concatenation", la + lb)?;
    let mut s = String::with_capacity(la + lb);
    write!(s, "{a}{b}").map_err(|_| Error::from(ErrorKind::InvalidOperation))?;
    Ok(Value::from(s))
}

fn is_seq(v: &Value) -> bool {
    matches!(v.kind(), ValueKind::Seq | ValueKind::Iterable)
}

/// Checks `a + b` before it runs: strings and lists.
fn check_add(state: &State, args: &[Value]) -> Result<Value, Error> {
    let (a, b) = pair(args)?;
    if is_string(a) && is_string(b) {
        let n = shallow(a).saturating_add(shallow(b));
        build(state, "a string built by `+`", n)?;
    } else if is_seq(a) && is_seq(b) {
        let list = || too_big("a list built by `+`");
        let n = list_bytes(a)
            .ok_or_else(list)?
            .saturating_add(list_bytes(b).ok_or_else(list)?);
        build(state, "a list built by `+`", n)?;
    }
    Ok(reversed(args))
}

/// Checks `a * b` before it runs: string and list repetition.
fn check_mul(state: &State, args: &[Value]) -> Result<Value, Error> {
    let (a, b) = pair(args)?;
    let (x, n) = if is_seq(b) || b.as_str().is_some() {
        (b, a)
    } else {
        (a, b)
    };
    if let Some(n) = n.as_usize() {
        if let Some(s) = x.as_str() {
            build(state, "a string built by `*`", s.len().saturating_mul(n))?;
        } else if is_seq(x) {
            let each = list_bytes(x).ok_or_else(|| too_big("a list built by `*`"))?;
            build(state, "a list built by `*`", each.saturating_mul(n))?;
        }
    }
    Ok(reversed(args))
}

/// Charges a string slice `s[a:b]` (a copy) before it runs.
fn check_slice(state: &State, args: &[Value]) -> Result<Value, Error> {
    if let Some(v) = args.first() {
        if matches!(v.kind(), ValueKind::String | ValueKind::Bytes) {
            build(state, "a slice", shallow(v))?;
        }
    }
    Ok(reversed(args))
}

/// Checks `a in b` before it runs: `b` a string converts `a` to one.
fn check_in(state: &State, args: &[Value]) -> Result<Value, Error> {
    let (needle, container) = pair(args)?;
    if container.as_str().is_some() && needle.as_str().is_none() {
        let n = stringable(needle)?;
        build(state, "a string conversion", n)?;
    }
    Ok(reversed(args))
}

/// Charges the slots of a list or map literal of `n` items.
fn slots(state: &State, n: usize) -> Result<Value, Error> {
    build(state, "a literal", n.saturating_mul(SLOT))?;
    Ok(Value::from(()))
}

fn capture_begin(state: &State) -> Result<Value, Error> {
    budget(state)?.captures().push(0);
    Ok(Value::from(()))
}

fn capture_end(state: &State, captured: Value) -> Result<Value, Error> {
    budget(state)?.captures().pop();
    Ok(captured)
}

/// The formatter: charges every emitted byte, then writes as minijinja does.
fn format(out: &mut minijinja::Output, state: &State, value: &Value) -> Result<(), Error> {
    let escapes = !value.is_safe() && !matches!(state.auto_escape(), AutoEscape::None);
    // HTML and JSON escaping stay within 6 bytes a byte, plus quotes.
    let factor = if escapes { 6 } else { 1 };
    let b = budget(state)?;
    let n = display_len(value, MAX_VALUE)
        .map(|n| n.saturating_mul(factor).saturating_add(2 * factor - 2))
        .ok_or_else(|| too_big("an emitted value"))?;
    let mut captures = b.captures();
    if let Some(open) = captures.last_mut() {
        *open = open.saturating_add(n);
        if *open > MAX_VALUE {
            return Err(too_big("a `{% set %}` capture"));
        }
        drop(captures);
        build(state, "emitted text", n)?;
    } else {
        drop(captures);
        let before = b.output.fetch_add(n, Ordering::Relaxed);
        if before.saturating_add(n) > MAX_RENDERED {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                format!("the rendered prompt exceeds {MAX_RENDERED} bytes"),
            ));
        }
    }
    minijinja::escape_formatter(out, state, value)
}

mod builtins;
mod nesting;
mod rewrite;

pub(super) use builtins::install;

mod methods;
use nesting::*;
pub(super) use rewrite::rewrite;
