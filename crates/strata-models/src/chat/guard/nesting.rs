//! The nesting rules of the module docs: depth walks with an explicit
//! stack, and the namespace-assignment check.

use super::*;

/// Most items the nesting checks of one rendering may look at (a list or
/// map already checked counts once).
pub(super) const MAX_WALKED: usize = 2 * (MAX_BUILT / SLOT);
/// Most lists and maps [`Budget::depths`] keeps.
pub(super) const MAX_KNOWN: usize = 1 << 16;

pub(super) fn too_deep(what: &str) -> Error {
    Error::new(
        ErrorKind::InvalidOperation,
        format!(
            "{what} nested more than {MAX_DEPTH} lists and maps deep: a chat template may \
             build no deeper value (a runaway template?); fix the template or render without it"
        ),
    )
}

pub(super) fn namespace_inside(what: &str) -> Error {
    Error::new(
        ErrorKind::InvalidOperation,
        format!(
            "{what} is or holds a namespace: a namespace may not be stored in a namespace, \
             directly or in a list or map (it could end up holding itself); fix the template \
             or render without it"
        ),
    )
}

pub(super) fn over_walked() -> Error {
    Error::new(
        ErrorKind::InvalidOperation,
        format!(
            "checking how deep its values nest looked at more than {MAX_WALKED} items (a \
             runaway template?); fix the template or render without it"
        ),
    )
}

/// The type name of minijinja's namespace object (a private type).
pub(super) fn namespace_type() -> &'static str {
    static NAME: OnceLock<&'static str> = OnceLock::new();
    NAME.get_or_init(|| {
        functions::namespace(None)
            .ok()
            .and_then(|ns| ns.as_object().map(|o| o.type_name()))
            .unwrap_or("minijinja::value::namespace_object::Namespace")
    })
}

pub(super) fn is_namespace(v: &Value) -> bool {
    v.as_object()
        .is_some_and(|o| o.type_name() == namespace_type())
}

/// The address of a list or map of minijinja's own (immutable) types.
pub(super) fn address(v: &Value) -> Option<usize> {
    let o = v.as_object()?;
    if let Some(l) = o.downcast_ref::<Vec<Value>>() {
        return Some(l as *const Vec<Value> as usize);
    }
    o.downcast_ref::<BTreeMap<Value, Value>>()
        .map(|m| m as *const BTreeMap<Value, Value> as usize)
}

/// The items of a list, the keys and values of a map or namespace; `None`
/// for anything else (a scalar, a string, a function...).
pub(super) fn children(v: &Value) -> Option<Box<dyn Iterator<Item = Value> + Send + Sync>> {
    let o = v.as_object()?;
    match o.repr() {
        ObjectRepr::Map => Some(Box::new(o.try_iter_pairs()?.flat_map(|(k, v)| [k, v]))),
        ObjectRepr::Seq | ObjectRepr::Iterable => o.try_iter(),
        _ => None,
    }
}

/// A list or map [`nesting`] is inside of.
pub(super) struct Frame {
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
pub(super) fn nesting(state: &State, v: &Value, what: &str) -> Result<(usize, bool), Error> {
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
pub(super) fn check_nesting(state: &State, args: &[Value]) -> Result<Value, Error> {
    let v = args.first().cloned().unwrap_or_default();
    nesting(state, &v, "a value")?;
    Ok(v)
}

/// Checks `ns.attr = value` before it runs: `value` holds no namespace.
pub(super) fn check_set_attr(state: &State, args: &[Value]) -> Result<Value, Error> {
    let (value, _) = pair(args)?;
    let what = "a value assigned to a namespace";
    if nesting(state, value, what)?.1 {
        return Err(namespace_inside(what));
    }
    Ok(reversed(args))
}
