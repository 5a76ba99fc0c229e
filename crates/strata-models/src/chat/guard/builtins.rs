//! The wrapped builtins: filters, tests and functions that estimate their
//! result before the builtin runs, `range` and `raise_exception`.

use super::*;

/// How a wrapped builtin is checked before it runs.
#[derive(Clone, Copy)]
pub(super) enum Pre {
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
pub(super) fn filter(
    env: &mut Environment<'_>,
    name: &'static str,
    inner: Value,
    pre: Pre,
    charge: bool,
) {
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
pub(super) fn string_test(env: &mut Environment<'_>, name: &'static str, inner: Value) {
    env.add_test(
        name,
        move |state: &State, args: &[Value]| -> Result<bool, Error> {
            Pre::Strings.check(state, args)?;
            Ok(inner.call(state, args)?.is_true())
        },
    );
}

/// Registers the guard functions, the checked builtins and the formatter.
pub(crate) fn install(env: &mut Environment<'_>) {
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
    env.set_unknown_method_callback(super::methods::call);
}

/// Longest `raise_exception()` message kept, in bytes.
pub(super) const MAX_MESSAGE: usize = 4096;

/// `raise_exception(msg)` as Hugging Face's: fails with `msg` (cut to
/// [`MAX_MESSAGE`] bytes; converted to a string only once it is known to fit).
pub(super) fn raise_exception(msg: &Value) -> Result<Value, Error> {
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
pub(super) fn range(lower: i64, upper: Option<i64>, step: Option<i64>) -> Result<Value, Error> {
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
