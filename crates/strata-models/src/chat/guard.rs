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

/// Most items the nesting checks of one rendering may look at (a list or
/// map already checked counts once).
const MAX_WALKED: usize = 2 * (MAX_BUILT / SLOT);
/// Most lists and maps [`Budget::depths`] keeps.
const MAX_KNOWN: usize = 1 << 16;

fn too_deep(what: &str) -> Error {
    Error::new(
        ErrorKind::InvalidOperation,
        format!(
            "{what} nested more than {MAX_DEPTH} lists and maps deep: a chat template may \
             build no deeper value (a runaway template?); fix the template or render without it"
        ),
    )
}

fn namespace_inside(what: &str) -> Error {
    Error::new(
        ErrorKind::InvalidOperation,
        format!(
            "{what} is or holds a namespace: a namespace may not be stored in a namespace, \
             directly or in a list or map (it could end up holding itself); fix the template \
             or render without it"
        ),
    )
}

fn over_walked() -> Error {
    Error::new(
        ErrorKind::InvalidOperation,
        format!(
            "checking how deep its values nest looked at more than {MAX_WALKED} items (a \
             runaway template?); fix the template or render without it"
        ),
    )
}

/// The type name of minijinja's namespace object (a private type).
fn namespace_type() -> &'static str {
    static NAME: OnceLock<&'static str> = OnceLock::new();
    NAME.get_or_init(|| {
        functions::namespace(None)
            .ok()
            .and_then(|ns| ns.as_object().map(|o| o.type_name()))
            .unwrap_or("minijinja::value::namespace_object::Namespace")
    })
}

fn is_namespace(v: &Value) -> bool {
    v.as_object()
        .is_some_and(|o| o.type_name() == namespace_type())
}

/// The address of a list or map of minijinja's own (immutable) types.
fn address(v: &Value) -> Option<usize> {
    let o = v.as_object()?;
    if let Some(l) = o.downcast_ref::<Vec<Value>>() {
        return Some(l as *const Vec<Value> as usize);
    }
    o.downcast_ref::<BTreeMap<Value, Value>>()
        .map(|m| m as *const BTreeMap<Value, Value> as usize)
}

/// The items of a list, the keys and values of a map or namespace; `None`
/// for anything else (a scalar, a string, a function...).
fn children(v: &Value) -> Option<Box<dyn Iterator<Item = Value> + Send + Sync>> {
    let o = v.as_object()?;
    match o.repr() {
        ObjectRepr::Map => Some(Box::new(o.try_iter_pairs()?.flat_map(|(k, v)| [k, v]))),
        ObjectRepr::Seq | ObjectRepr::Iterable => o.try_iter(),
        _ => None,
    }
}

/// A list or map [`nesting`] is inside of.
struct Frame {
    value: Value,
    items: Box<dyn Iterator<Item = Value> + Send + Sync>,
    /// The depth of its deepest item so far.
    below: usize,
    /// Whether it is or holds a namespace.
    namespace: bool,
    /// Items looked at below it.
    walked: usize,
}

/// How deep `v` nests (0 for a scalar, 1 + its deepest item for a list, map
/// or namespace) and whether it is or holds a namespace, walked with a
/// stack of its own. Fails past [`MAX_DEPTH`] and [`MAX_WALKED`]; a list
/// or map is walked once per call, and once per rendering when it holds no
/// namespace (it is then immutable: see [`Budget::depths`]).
fn nesting(state: &State, v: &Value, what: &str) -> Result<(usize, bool), Error> {
    let Some(items) = children(v) else {
        return Ok((0, is_namespace(v)));
    };
    let b = budget(state)?;
    let known = |v: &Value| address(v).and_then(|a| b.depths().get(&a).map(|(d, _)| *d));
    if let Some(d) = known(v) {
        return Ok((d, false));
    }
    let before = b.walked.load(Ordering::Relaxed);
    let mut walked = 0usize;
    // This walk's results for lists and maps that hold a namespace.
    let mut local: HashMap<usize, usize> = HashMap::new();
    let frame = |value: &Value, items| Frame {
        namespace: is_namespace(value),
        value: value.clone(),
        items,
        below: 0,
        walked: 0,
    };
    let mut stack = vec![frame(v, items)];
    let result = loop {
        let Some(top) = stack.last_mut() else {
            break Err(Error::from(ErrorKind::InvalidOperation));
        };
        if let Some(item) = top.items.next() {
            walked += 1;
            top.walked += 1;
            if before.saturating_add(walked) > MAX_WALKED {
                break Err(over_walked());
            }
            let cached = known(&item).map(|d| (d, false)).or_else(|| {
                let d = address(&item).and_then(|a| local.get(&a))?;
                Some((*d, true))
            });
            let (d, ns) = match cached {
                Some(c) => c,
                None => match children(&item) {
                    None => (0, is_namespace(&item)),
                    Some(items) => {
                        if stack.len() >= MAX_DEPTH {
                            break Err(too_deep(what));
                        }
                        stack.push(frame(&item, items));
                        continue;
                    }
                },
            };
            if stack.len() + d > MAX_DEPTH {
                break Err(too_deep(what));
            }
            let top = stack.last_mut().expect("the frame just used");
            top.below = top.below.max(d);
            top.namespace |= ns;
            continue;
        }
        let Some(done) = stack.pop() else {
            break Err(Error::from(ErrorKind::InvalidOperation));
        };
        let d = done.below + 1;
        if let Some(a) = address(&done.value) {
            if done.namespace {
                local.insert(a, d);
            } else if done.walked > 1 {
                let mut depths = b.depths();
                if depths.len() < MAX_KNOWN {
                    depths.insert(a, (d, done.value.clone()));
                }
            }
        }
        match stack.last_mut() {
            Some(up) => {
                up.below = up.below.max(d);
                up.namespace |= done.namespace;
                up.walked += done.walked;
            }
            None => break Ok((d, done.namespace)),
        }
    };
    b.walked.fetch_add(walked, Ordering::Relaxed);
    result
}

/// Checks the nesting of a value the template built (a list, map or
/// keyword arguments literal, `varargs`, `kwargs`, a filter's or a
/// function's result): see the module docs.
fn check_nesting(state: &State, args: &[Value]) -> Result<Value, Error> {
    let v = args.first().cloned().unwrap_or_default();
    nesting(state, &v, "a value")?;
    Ok(v)
}

/// Checks `ns.attr = value` before it runs: `value` holds no namespace.
fn check_set_attr(state: &State, args: &[Value]) -> Result<Value, Error> {
    let (value, _) = pair(args)?;
    let what = "a value assigned to a namespace";
    if nesting(state, value, what)?.1 {
        return Err(namespace_inside(what));
    }
    Ok(reversed(args))
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

/// How a wrapped builtin is checked before it runs.
#[derive(Clone, Copy)]
enum Pre {
    /// Its result is at most a small multiple of its inputs.
    Nothing,
    /// It converts its arguments to strings.
    Strings,
    /// It converts its arguments after the first (the input) to strings.
    Names,
    Replace,
    Join,
    Indent,
    Format,
    /// `slice` and `batch`: a count of lists.
    Count,
    Chain,
    List,
    Split,
    Lines,
    String,
    Pprint,
    Tojson,
}

impl Pre {
    fn check(self, state: &State, args: &[Value]) -> Result<(), Error> {
        let first = args.first().unwrap_or(&Value::UNDEFINED);
        let escapes = !matches!(state.auto_escape(), AutoEscape::None);
        let factor = if escapes { 6 } else { 1 };
        match self {
            Pre::Nothing => Ok(()),
            Pre::Strings => args.iter().try_for_each(|a| stringable(a).map(drop)),
            Pre::Names => args
                .iter()
                .skip(1)
                .try_for_each(|a| stringable(a).map(drop)),
            Pre::Replace => {
                let [v, from, to] = args else { return Ok(()) };
                let (v, from, to) = (as_text(v)?, as_text(from)?, as_text(to)?);
                let n = if from.is_empty() {
                    v.chars().count() + 1
                } else {
                    v.matches(&*from).count()
                };
                let est = v.len().saturating_add(n.saturating_mul(to.len()));
                fits("a `replace` result", est.saturating_mul(factor))
            }
            Pre::Join => {
                let joiner = match args.get(1) {
                    Some(j) => stringable(j)?,
                    None => 0,
                };
                let Ok(iter) = first.try_iter() else {
                    return Ok(());
                };
                let limit = MAX_VALUE / factor;
                let mut est = 0usize;
                for (i, item) in iter.enumerate() {
                    if i > 0 {
                        est = est.saturating_add(joiner);
                    }
                    let room = limit.saturating_sub(est);
                    let n = display_len(&item, room).ok_or_else(|| too_big("a `join` result"))?;
                    est += n;
                }
                fits("a `join` result", est)
            }
            Pre::Indent => {
                type Args<'a> = (&'a Value, Option<usize>, Option<bool>, Option<bool>, Kwargs);
                let Ok((v, width, _, _, kwargs)) = from_args::<Args>(args) else {
                    return Ok(());
                };
                let width = match width {
                    Some(w) => w,
                    None => kwargs
                        .get::<Option<usize>>("width")
                        .ok()
                        .flatten()
                        .unwrap_or(4),
                };
                let v = as_text(v)?;
                let lines = v.bytes().filter(|&b| b == b'\n').count() + 2;
                fits(
                    "an `indent` result",
                    v.len().saturating_add(lines.saturating_mul(width)),
                )
            }
            Pre::Format => {
                let Some(fmt) = first.as_str() else {
                    return Ok(());
                };
                let factor = if first.is_safe() { 6 } else { 1 };
                let mut est = fmt.len();
                for a in args.iter().skip(1) {
                    est = est.saturating_add(stringable(a)?.saturating_mul(factor));
                }
                // Widths and precisions: every number the format spells,
                // and with `*`, every integer argument.
                for digits in fmt.split(|c: char| !c.is_ascii_digit()) {
                    let n = digits.parse::<usize>().unwrap_or(if digits.is_empty() {
                        0
                    } else {
                        usize::MAX
                    });
                    est = est.saturating_add(n);
                }
                if fmt.contains('*') {
                    for a in args.iter().skip(1) {
                        if let Some(n) = a.as_i64() {
                            est = est.saturating_add(n.unsigned_abs() as usize);
                        }
                    }
                }
                let conversions = fmt.matches('%').count();
                fits(
                    "a `format` result",
                    est.saturating_add(conversions.saturating_mul(SMALL)),
                )
            }
            Pre::Count => {
                let Ok((v, count, _)) = from_args::<(&Value, usize, Option<Value>)>(args) else {
                    return Ok(());
                };
                let list = || too_big("a list of lists");
                let n = list_bytes(v).ok_or_else(list)?;
                fits(
                    "a list of lists",
                    n.saturating_add(count.saturating_mul(SLOT)),
                )
            }
            Pre::Chain => {
                let mut est = 0usize;
                for a in args.iter().filter(|a| !a.is_kwargs()) {
                    let n = list_bytes(a).ok_or_else(|| too_big("a `chain` result"))?;
                    est = est.saturating_add(n);
                }
                fits("a `chain` result", est)
            }
            Pre::List => {
                list_bytes(first).ok_or_else(|| too_big("a `list` result"))?;
                Ok(())
            }
            Pre::Split | Pre::Lines => {
                let Some(s) = first.as_str() else {
                    return Ok(());
                };
                let pieces = if matches!(self, Pre::Lines) {
                    s.lines().count()
                } else {
                    // The separator as a value: a non-string one is
                    // `split`'s error to report (and never converted here).
                    type Args<'a> = (&'a Value, Option<&'a Value>, Option<i64>);
                    let Ok((_, sep, max)) = from_args::<Args>(args) else {
                        return Ok(());
                    };
                    let sep = sep.filter(|s| !s.is_none());
                    let n = match sep.map(Value::as_str) {
                        None => s.split_whitespace().count(),
                        Some(None) => return Ok(()),
                        Some(Some("")) => s.chars().count() + 2,
                        Some(Some(sep)) => s.matches(sep).count() + 1,
                    };
                    match max.and_then(|m| usize::try_from(m).ok()) {
                        Some(m) => n.min(m.saturating_add(1)),
                        None => n,
                    }
                };
                // A slot and a string header a piece, and the text.
                let est = pieces.saturating_mul(SLOT + 16).saturating_add(s.len());
                fits("a list of pieces", est)
            }
            Pre::String => {
                if !is_string(first) {
                    stringable(first)?;
                }
                Ok(())
            }
            Pre::Pprint => {
                let mut c = Count {
                    n: 0,
                    limit: MAX_VALUE,
                };
                let _ = write!(c, "{first:#?}");
                fits("a `pprint` result", c.n)
            }
            Pre::Tojson => {
                let Ok((v, indent, kwargs)) = from_args::<(&Value, Option<Value>, Kwargs)>(args)
                else {
                    return Ok(());
                };
                let indent = match indent {
                    Some(i) => Some(i),
                    None => kwargs.get::<Option<Value>>("indent").ok().flatten(),
                };
                let indent = match indent {
                    None => None,
                    Some(i) => match bool::try_from(i.clone()) {
                        Ok(true) => Some(2),
                        Ok(false) => None,
                        Err(_) => usize::try_from(i).ok(),
                    },
                };
                fits("a `tojson` indent", indent.unwrap_or(0))?;
                let mut c = JsonCount(Count {
                    n: 0,
                    limit: MAX_VALUE,
                });
                let _ = match indent {
                    Some(i) => {
                        let ind = " ".repeat(i);
                        let f = serde_json::ser::PrettyFormatter::with_indent(ind.as_bytes());
                        let mut ser = serde_json::Serializer::with_formatter(&mut c, f);
                        serde::Serialize::serialize(v, &mut ser)
                    }
                    None => serde_json::to_writer(&mut c, v),
                };
                fits("a `tojson` result", c.0.n)
            }
        }
    }
}

/// Registers `inner` as filter `name`, checked by `pre` and charged for
/// what it returns when `charge`.
fn filter(env: &mut Environment<'_>, name: &'static str, inner: Value, pre: Pre, charge: bool) {
    env.add_filter(
        name,
        move |state: &State, args: &[Value]| -> Result<Value, Error> {
            pre.check(state, args)?;
            let rv = inner.call(state, args)?;
            if charge {
                build(state, "a filter result", shallow(&rv))?;
            }
            nesting(state, &rv, "a filter result")?;
            Ok(rv)
        },
    );
}

/// Registers `inner` as test `name`, its arguments checked as strings.
fn string_test(env: &mut Environment<'_>, name: &'static str, inner: Value) {
    env.add_test(
        name,
        move |state: &State, args: &[Value]| -> Result<bool, Error> {
            Pre::Strings.check(state, args)?;
            Ok(inner.call(state, args)?.is_true())
        },
    );
}

/// Registers the guard functions, the checked builtins and the formatter.
pub(super) fn install(env: &mut Environment<'_>) {
    env.add_function(CONCAT, concat);
    env.add_function(CHECK_ADD, check_add);
    env.add_function(CHECK_MUL, check_mul);
    env.add_function(CHECK_SLICE, check_slice);
    env.add_function(CHECK_IN, check_in);
    env.add_function(SLOTS, slots);
    env.add_function(CAPTURE_BEGIN, capture_begin);
    env.add_function(CAPTURE_END, capture_end);
    env.add_function(CHECK_NESTING, check_nesting);
    env.add_function(CHECK_SET_ATTR, check_set_attr);
    env.set_formatter(format);

    use Pre::*;
    for (name, inner, pre, charge) in [
        ("safe", Value::from_function(filters::safe), Strings, true),
        (
            "escape",
            Value::from_function(filters::escape),
            Strings,
            true,
        ),
        ("e", Value::from_function(filters::escape), Strings, true),
        ("lower", Value::from_function(filters::lower), Strings, true),
        ("upper", Value::from_function(filters::upper), Strings, true),
        ("title", Value::from_function(filters::title), Strings, true),
        (
            "capitalize",
            Value::from_function(filters::capitalize),
            Strings,
            true,
        ),
        ("trim", Value::from_function(filters::trim), Strings, true),
        (
            "replace",
            Value::from_function(filters::replace),
            Replace,
            true,
        ),
        ("join", Value::from_function(filters::join), Join, true),
        (
            "indent",
            Value::from_function(filters::indent),
            Indent,
            true,
        ),
        (
            "format",
            Value::from_function(filters::format),
            Format,
            true,
        ),
        ("slice", Value::from_function(filters::slice), Count, true),
        ("batch", Value::from_function(filters::batch), Count, true),
        ("chain", Value::from_function(filters::chain), Chain, true),
        ("list", Value::from_function(filters::list), List, true),
        ("split", Value::from_function(filters::split), Split, true),
        ("lines", Value::from_function(filters::lines), Lines, true),
        (
            "string",
            Value::from_function(filters::string),
            String,
            true,
        ),
        (
            "pprint",
            Value::from_function(filters::pprint),
            Pprint,
            true,
        ),
        (
            "tojson",
            Value::from_function(filters::tojson),
            Tojson,
            true,
        ),
        ("select", Value::from_function(filters::select), Names, true),
        ("reject", Value::from_function(filters::reject), Names, true),
        (
            "selectattr",
            Value::from_function(filters::selectattr),
            Names,
            true,
        ),
        (
            "rejectattr",
            Value::from_function(filters::rejectattr),
            Names,
            true,
        ),
        (
            "reverse",
            Value::from_function(filters::reverse),
            Nothing,
            true,
        ),
        ("sort", Value::from_function(filters::sort), Nothing, true),
        (
            "unique",
            Value::from_function(filters::unique),
            Nothing,
            true,
        ),
        (
            "groupby",
            Value::from_function(filters::groupby),
            Nothing,
            true,
        ),
        (
            "dictsort",
            Value::from_function(filters::dictsort),
            Nothing,
            true,
        ),
        ("items", Value::from_function(filters::items), Nothing, true),
        ("map", Value::from_function(filters::map), Nothing, true),
        ("zip", Value::from_function(filters::zip), Nothing, true),
    ] {
        filter(env, name, inner, pre, charge);
    }
    // The rest of the builtins return one of their inputs, a part of one,
    // or a number: `length`/`count`, `default`/`d`, `attr`, `first`,
    // `last`, `min`, `max`, `sum`, `round`, `abs`, `int`, `float`, `bool`.

    string_test(
        env,
        "startingwith",
        Value::from_function(tests::is_startingwith),
    );
    string_test(
        env,
        "endingwith",
        Value::from_function(tests::is_endingwith),
    );
    string_test(env, "in", Value::from_function(tests::is_in));

    for (name, inner) in [
        ("dict", Value::from_function(functions::dict)),
        ("namespace", Value::from_function(functions::namespace)),
    ] {
        env.add_function(
            name,
            move |state: &State, args: &[Value]| -> Result<Value, Error> {
                let rv = inner.call(state, args)?;
                build(state, "a map", shallow(&rv))?;
                nesting(state, &rv, "a map")?;
                Ok(rv)
            },
        );
    }
    env.add_function("range", range);
    env.add_function("raise_exception", raise_exception);
}

/// Longest `raise_exception()` message kept, in bytes.
const MAX_MESSAGE: usize = 4096;

/// `raise_exception(msg)` as Hugging Face's: fails with `msg` (cut to
/// [`MAX_MESSAGE`] bytes; converted to a string only once it is known to fit).
fn raise_exception(msg: &Value) -> Result<Value, Error> {
    let msg = match display_len(msg, MAX_VALUE) {
        Some(_) => {
            let mut s = msg.to_string();
            if s.len() > MAX_MESSAGE {
                let mut end = MAX_MESSAGE;
                while !s.is_char_boundary(end) {
                    end -= 1;
                }
                s.truncate(end);
                s.push_str("...");
            }
            s
        }
        None => format!("a message of more than {MAX_VALUE} bytes"),
    };
    Err(Error::new(ErrorKind::InvalidOperation, msg))
}

/// `range()` as Python and minijinja have it, producing at most [`MAX_RANGE`] numbers.
fn range(lower: i64, upper: Option<i64>, step: Option<i64>) -> Result<Value, Error> {
    let (start, end) = match upper {
        Some(u) => (lower, u),
        None => (0, lower),
    };
    let step = step.unwrap_or(1);
    if step == 0 {
        return Err(Error::new(
            ErrorKind::InvalidOperation,
            "range() step must not be zero",
        ));
    }
    let span = if step > 0 {
        end.saturating_sub(start)
    } else {
        start.saturating_sub(end)
    };
    let count = if span <= 0 {
        0
    } else {
        (span as u64).div_ceil(step.unsigned_abs())
    };
    if count > MAX_RANGE as u64 {
        return Err(Error::new(
            ErrorKind::InvalidOperation,
            format!("range() of {count} numbers: at most {MAX_RANGE} in a chat template"),
        ));
    }
    // Lazy, as minijinja's own: nothing is built.
    let numbers = (0..count as usize).map(move |i| start + i as i64 * step);
    Ok(Value::make_iterable(move || numbers.clone()))
}

/// Copies `old` with the guard calls in: see the module docs.
pub(super) fn rewrite<'s>(old: &Instructions<'s>) -> Instructions<'s> {
    use Instruction as I;
    let mut new = Instructions::new(old.name(), old.source());
    // Where each old instruction starts in `new`, and the jumps to renumber.
    let mut start = Vec::with_capacity(old.len() + 1);
    let mut jumps = Vec::new();
    for i in 0..old.len() as u32 {
        let Some(ins) = old.get(i) else { break };
        start.push(new.len() as u32);
        let line = old.get_line(i).and_then(|l| u16::try_from(l).ok());
        let mut add = |ins: Instruction<'s>| match line {
            Some(l) => new.add_with_line(ins, l),
            None => new.add(ins),
        };
        let check = |name: &'static str, n: u16| -> [Instruction<'s>; 2] {
            [I::CallFunction(name, Some(n)), I::UnpackList(n as usize)]
        };
        match ins {
            I::EmitRaw(s) => {
                add(I::LoadConst(Value::from_safe_string(s.to_string())));
                add(I::Emit);
            }
            I::StringConcat => {
                add(I::CallFunction(CONCAT, Some(2)));
            }
            I::Add | I::Mul | I::In | I::CompareAndPreserve(_) | I::Slice => {
                let [call, unpack] = match ins {
                    I::Add => check(CHECK_ADD, 2),
                    I::Mul => check(CHECK_MUL, 2),
                    I::Slice => check(CHECK_SLICE, 4),
                    _ => check(CHECK_IN, 2),
                };
                add(call);
                add(unpack);
                add(ins.clone());
            }
            I::BuildList(n) => {
                match n {
                    Some(n) => add(I::LoadConst(Value::from(*n))),
                    None => add(I::DupTop),
                };
                add(I::CallFunction(SLOTS, Some(1)));
                add(I::DiscardTop);
                add(ins.clone());
                add(I::CallFunction(CHECK_NESTING, Some(1)));
            }
            I::BuildMap(n) | I::BuildKwargs(n) => {
                add(I::LoadConst(Value::from(n.saturating_mul(2))));
                add(I::CallFunction(SLOTS, Some(1)));
                add(I::DiscardTop);
                add(ins.clone());
                add(I::CallFunction(CHECK_NESTING, Some(1)));
            }
            I::SetAttr(_) => {
                let [call, unpack] = check(CHECK_SET_ATTR, 2);
                add(call);
                add(unpack);
                add(ins.clone());
            }
            // Built by the engine for a macro call (macros are not enabled
            // in this crate's build; checked should they ever be).
            I::Lookup(name @ ("varargs" | "kwargs")) => {
                add(I::Lookup(name));
                add(I::CallFunction(CHECK_NESTING, Some(1)));
            }
            I::BeginCapture(_) => {
                add(I::CallFunction(CAPTURE_BEGIN, Some(0)));
                add(I::DiscardTop);
                add(ins.clone());
            }
            I::EndCapture => {
                add(I::EndCapture);
                add(I::CallFunction(CAPTURE_END, Some(1)));
            }
            I::Iterate(_)
            | I::Jump(_)
            | I::JumpIfFalse(_)
            | I::JumpIfFalseOrPop(_)
            | I::JumpIfTrueOrPop(_) => {
                jumps.push(add(ins.clone()));
            }
            I::StoreLocal(_)
            | I::Lookup(_)
            | I::GetAttr(_)
            | I::GetItem
            | I::LoadConst(_)
            | I::MergeKwargs(_)
            | I::UnpackList(_)
            | I::UnpackLists(_)
            | I::Sub
            | I::Div
            | I::IntDiv
            | I::Rem
            | I::Pow
            | I::Neg
            | I::Eq
            | I::Ne
            | I::Gt
            | I::Gte
            | I::Lt
            | I::Lte
            | I::Not
            | I::ApplyFilter(..)
            | I::PerformTest(..)
            | I::Emit
            | I::PushLoop(_)
            | I::PushWith
            | I::PushDidNotIterate
            | I::PopFrame
            | I::PopLoopFrame
            | I::PushAutoEscape
            | I::PopAutoEscape
            | I::CallFunction(..)
            | I::CallMethod(..)
            | I::CallObject(_)
            | I::DupTop
            | I::DiscardTop
            | I::FastSuper
            | I::FastRecurse
            | I::Swap => {
                add(ins.clone());
            }
        }
    }
    let end = new.len() as u32;
    start.push(end);
    for j in jumps {
        if let Some(
            I::Iterate(t)
            | I::Jump(t)
            | I::JumpIfFalse(t)
            | I::JumpIfFalseOrPop(t)
            | I::JumpIfTrueOrPop(t),
        ) = new.get_mut(j)
        {
            *t = start.get(*t as usize).copied().unwrap_or(end);
        }
    }
    new
}
