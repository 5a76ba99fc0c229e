//! The Python `str` and `dict` methods chat templates call (Qwen 3's
//! `content.split('</think>')[-1].lstrip('\n')`, `.startswith(...)`), which
//! Jinja2 has because its values are Python objects and minijinja does not:
//! `strip`, `lstrip`, `rstrip`, `split`, `startswith`, `endswith`, `upper`,
//! `lower`, `replace` on strings; `items`, `keys`, `values`, `get` on maps.
//! Each behaves as CPython's does for the arguments templates pass, and
//! charges what it builds to the rendering's budget like the builtins.

use minijinja::value::{Value, ValueKind};
use minijinja::{Error, ErrorKind, State};

use super::{build, fits, SLOT};

fn bad(msg: impl Into<String>) -> Error {
    Error::new(ErrorKind::InvalidOperation, msg.into())
}

/// The positional arguments, minijinja's trailing keyword arguments refused.
fn positional<'a>(method: &str, args: &'a [Value], max: usize) -> Result<&'a [Value], Error> {
    if args.iter().any(|a| a.is_kwargs()) {
        return Err(bad(format!(
            "{method}() takes positional arguments only here"
        )));
    }
    if args.len() > max {
        return Err(bad(format!(
            "{method}() takes at most {max} arguments ({} given)",
            args.len()
        )));
    }
    Ok(args)
}

/// An optional string argument (`None` / none / undefined: absent).
fn opt_str<'a>(method: &str, v: Option<&'a Value>) -> Result<Option<&'a str>, Error> {
    match v {
        None => Ok(None),
        Some(v) if v.is_none() || v.is_undefined() => Ok(None),
        Some(v) => v
            .as_str()
            .map(Some)
            .ok_or_else(|| bad(format!("{method}() expects a string argument, not {v:?}"))),
    }
}

/// Python's `str.isspace` for one character: Unicode White_Space plus the
/// four ASCII separators `\x1c`..`\x1f` Python counts too.
fn py_space(c: char) -> bool {
    c.is_whitespace() || ('\x1c'..='\x1f').contains(&c)
}

/// Python's `str.strip` family: `chars` absent strips whitespace.
fn strip<'a>(s: &'a str, chars: Option<&str>, left: bool, right: bool) -> &'a str {
    let hit = |c: char| match chars {
        None => py_space(c),
        Some(set) => set.contains(c),
    };
    let s = if left { s.trim_start_matches(hit) } else { s };
    if right {
        s.trim_end_matches(hit)
    } else {
        s
    }
}

/// Python's `str.split(sep=None, maxsplit=-1)`.
fn split(s: &str, sep: Option<&str>, maxsplit: Option<usize>) -> Result<Vec<String>, Error> {
    let max = maxsplit.unwrap_or(usize::MAX);
    let mut out = Vec::new();
    match sep {
        Some("") => return Err(bad("split(): empty separator")),
        Some(sep) => {
            let mut rest = s;
            while out.len() < max {
                match rest.find(sep) {
                    Some(i) => {
                        out.push(rest[..i].to_string());
                        rest = &rest[i + sep.len()..];
                    }
                    None => break,
                }
            }
            out.push(rest.to_string());
        }
        None => {
            // runs of whitespace separate; none at the ends
            let mut rest = s.trim_start_matches(py_space);
            while !rest.is_empty() {
                if out.len() == max {
                    out.push(rest.to_string());
                    break;
                }
                let end = rest.find(py_space).unwrap_or(rest.len());
                out.push(rest[..end].to_string());
                rest = rest[end..].trim_start_matches(py_space);
            }
        }
    }
    Ok(out)
}

/// `prefix` as Python's `startswith` takes it: a string or a tuple (list) of them.
fn affix_test(
    method: &str,
    arg: Option<&Value>,
    test: impl Fn(&str) -> bool,
) -> Result<Value, Error> {
    let arg = arg.ok_or_else(|| bad(format!("{method}() takes one argument")))?;
    if let Some(s) = arg.as_str() {
        return Ok(Value::from(test(s)));
    }
    if arg.kind() == ValueKind::Seq {
        for item in arg.try_iter()? {
            let s = item
                .as_str()
                .ok_or_else(|| bad(format!("{method}() expects strings, not {item:?}")))?;
            if test(s) {
                return Ok(Value::from(true));
            }
        }
        return Ok(Value::from(false));
    }
    Err(bad(format!(
        "{method}() expects a string or a tuple of strings, not {arg:?}"
    )))
}

fn string_method(state: &State, s: &str, method: &str, args: &[Value]) -> Result<Value, Error> {
    let text = |v: &str| -> Result<Value, Error> {
        build(state, "a string", v.len())?;
        Ok(Value::from(v))
    };
    match method {
        "strip" | "lstrip" | "rstrip" => {
            let args = positional(method, args, 1)?;
            let chars = opt_str(method, args.first())?;
            let (l, r) = (method != "rstrip", method != "lstrip");
            text(strip(s, chars, l, r))
        }
        "split" => {
            let args = positional(method, args, 2)?;
            let sep = opt_str(method, args.first())?;
            let maxsplit = match args.get(1) {
                None => None,
                Some(v) => {
                    let n = i64::try_from(v.clone()).map_err(|_| {
                        bad(format!("split(): maxsplit must be an integer, not {v:?}"))
                    })?;
                    usize::try_from(n).ok()
                }
            };
            // at most one piece per byte: check the list before building it
            fits("a list", s.len().saturating_add(1).saturating_mul(SLOT))?;
            let parts = split(s, sep, maxsplit)?;
            build(state, "a list", parts.len() * SLOT + s.len())?;
            Ok(Value::from(parts))
        }
        "startswith" => {
            let args = positional(method, args, 1)?;
            affix_test(method, args.first(), |p| s.starts_with(p))
        }
        "endswith" => {
            let args = positional(method, args, 1)?;
            affix_test(method, args.first(), |p| s.ends_with(p))
        }
        "upper" | "lower" => {
            positional(method, args, 0)?;
            // a case change at most triples a UTF-8 string
            fits("a string", s.len().saturating_mul(3))?;
            let v = if method == "upper" {
                s.to_uppercase()
            } else {
                s.to_lowercase()
            };
            text(&v)
        }
        "replace" => {
            let args = positional(method, args, 3)?;
            let (Some(old), Some(new)) = (
                opt_str(method, args.first())?,
                opt_str(method, args.get(1))?,
            ) else {
                return Err(bad("replace() takes two strings"));
            };
            let count = match args.get(2) {
                None => usize::MAX,
                Some(v) => i64::try_from(v.clone())
                    .ok()
                    .and_then(|n| usize::try_from(n).ok())
                    .unwrap_or(usize::MAX),
            };
            let hits = if old.is_empty() {
                s.chars().count() + 1
            } else {
                s.matches(old).count()
            }
            .min(count);
            let size = s.len().saturating_add(hits.saturating_mul(new.len()));
            fits("a string", size)?;
            let v = if count == usize::MAX {
                s.replace(old, new)
            } else {
                s.replacen(old, new, count)
            };
            text(&v)
        }
        _ => Err(Error::from(ErrorKind::UnknownMethod)),
    }
}

fn map_method(state: &State, map: &Value, method: &str, args: &[Value]) -> Result<Value, Error> {
    match method {
        "items" | "keys" | "values" => {
            positional(method, args, 0)?;
            let n = map.len().unwrap_or(0);
            build(state, "a list", n.saturating_mul(SLOT * 3))?;
            let mut out = Vec::with_capacity(n);
            for k in map.try_iter()? {
                let v = map.get_item(&k)?;
                out.push(match method {
                    "items" => Value::from(vec![k, v]),
                    "keys" => k,
                    _ => v,
                });
            }
            Ok(Value::from(out))
        }
        "get" => {
            let args = positional(method, args, 2)?;
            let key = args.first().ok_or_else(|| bad("get() takes a key"))?;
            let v = map.get_item(key)?;
            Ok(if v.is_undefined() {
                args.get(1).cloned().unwrap_or(Value::from(()))
            } else {
                v
            })
        }
        _ => Err(Error::from(ErrorKind::UnknownMethod)),
    }
}

/// minijinja's unknown-method callback: the Python methods above.
pub(crate) fn call(
    state: &State,
    value: &Value,
    method: &str,
    args: &[Value],
) -> Result<Value, Error> {
    if let Some(s) = value.as_str() {
        return string_method(state, s, method, args);
    }
    if value.kind() == ValueKind::Map {
        return map_method(state, value, method, args);
    }
    Err(Error::from(ErrorKind::UnknownMethod))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_and_strip_as_python() {
        let v = |x: &[&str]| x.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            split("a</think>b</think>c", Some("</think>"), None).unwrap(),
            v(&["a", "b", "c"])
        );
        assert_eq!(split("abc", Some("x"), None).unwrap(), v(&["abc"]));
        assert_eq!(split("", Some("x"), None).unwrap(), v(&[""]));
        assert_eq!(
            split("a,b,c", Some(","), Some(1)).unwrap(),
            v(&["a", "b,c"])
        );
        assert_eq!(
            split("  a  b \n c ", None, None).unwrap(),
            v(&["a", "b", "c"])
        );
        assert_eq!(
            split("  a  b c ", None, Some(1)).unwrap(),
            v(&["a", "b c "])
        );
        assert_eq!(split("   ", None, None).unwrap(), Vec::<String>::new());
        assert!(split("a", Some(""), None).is_err());
        assert_eq!(strip("\n\nx\n", Some("\n"), true, false), "x\n");
        assert_eq!(strip("\n\nx\n", Some("\n"), false, true), "\n\nx");
        assert_eq!(strip(" \tx y\u{3000}", None, true, true), "x y");
        assert_eq!(strip("xyabcyx", Some("xy"), true, true), "abc");
    }
}
