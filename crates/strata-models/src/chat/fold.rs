//! The size check of constant expressions, before a template is compiled.
//!
//! minijinja folds constant expressions while it compiles: `'x' * 100000000`
//! becomes a 100 MB string, and `('x' * 99999999) ~ ('x' * 99999999) ~ ...`
//! as long as the source allows, with none of the rendering's limits in
//! force (no fuel, no [`guard`](super::guard)). [`check`] walks the parsed
//! template first and estimates, without building anything, every value the
//! compiler would fold, mirroring minijinja's `Expr::as_const`; a template
//! that would fold a value past [`MAX_VALUE`], or nests expressions past
//! [`MAX_DEPTH`] (the compiler recurses on them), is refused.

use minijinja::machinery::ast::{BinOpKind, CallArg, Expr, Stmt, UnaryOpKind};
use minijinja::machinery::{parse, WhitespaceConfig};
use minijinja::syntax::SyntaxConfig;
use minijinja::value::{Value, ValueKind};
use minijinja::Error;

use super::MAX_VALUE;

/// Deepest nesting of statements and expressions accepted.
pub(super) const MAX_DEPTH: usize = 500;

/// Bytes a folded number takes as text, at most.
const NUMBER_TEXT: f64 = 512.0;
/// Bytes a list item costs.
const SLOT: f64 = std::mem::size_of::<Value>() as f64;

/// What a folded expression would be, in sizes (upper bounds; `f64` so
/// that nothing overflows).
#[derive(Clone, Copy)]
enum Abs {
    /// Not folded: computed while rendering, where the guard applies.
    Runtime,
    /// A number, bool or none of at most this magnitude.
    Num(f64),
    /// A string of this many bytes.
    Str(f64),
    /// A list of `items` items, `text` bytes long as text.
    Seq { items: f64, text: f64 },
    /// A map, this many bytes long as text.
    Map(f64),
    /// Any of the above, none larger than this (`a or b` of two kinds).
    Any(f64),
}

impl Abs {
    fn of(v: &Value) -> Abs {
        let text = || {
            let t = v.to_string().len() as f64;
            t.max(2.0)
        };
        match v.kind() {
            ValueKind::Number => Abs::Num(f64::try_from(v.clone()).map_or(f64::INFINITY, f64::abs)),
            ValueKind::Bool | ValueKind::None | ValueKind::Undefined => Abs::Num(1.0),
            ValueKind::String => Abs::Str(v.as_str().map_or(0, str::len) as f64),
            ValueKind::Seq | ValueKind::Iterable => Abs::Seq {
                items: v.len().unwrap_or(0) as f64,
                text: text(),
            },
            _ => Abs::Map(text()),
        }
    }

    /// Bytes as text (`~`).
    fn text(self) -> f64 {
        match self {
            Abs::Runtime => 0.0,
            Abs::Num(_) => NUMBER_TEXT,
            Abs::Str(n) | Abs::Map(n) => n,
            Abs::Seq { text, .. } => text,
            Abs::Any(n) => n.max(NUMBER_TEXT),
        }
    }

    /// The largest size it stands for, a list counting its slots.
    fn size(self) -> f64 {
        match self {
            Abs::Runtime | Abs::Num(_) => 0.0,
            Abs::Str(n) | Abs::Map(n) => n,
            Abs::Seq { items, text } => text.max(items * SLOT),
            Abs::Any(n) => n * SLOT,
        }
    }

    fn magnitude(self) -> f64 {
        match self {
            Abs::Runtime => 0.0,
            Abs::Num(n) | Abs::Str(n) | Abs::Map(n) | Abs::Any(n) => n,
            Abs::Seq { items, text } => items.max(text),
        }
    }

    fn binop(op: BinOpKind, a: Abs, b: Abs) -> Abs {
        use Abs::*;
        if matches!(a, Runtime) || matches!(b, Runtime) {
            return Runtime;
        }
        match op {
            BinOpKind::Concat => Str(a.text() + b.text()),
            BinOpKind::Eq
            | BinOpKind::Ne
            | BinOpKind::Lt
            | BinOpKind::Lte
            | BinOpKind::Gt
            | BinOpKind::Gte
            | BinOpKind::In => Num(1.0),
            BinOpKind::ScAnd | BinOpKind::ScOr => match (a, b) {
                (Num(x), Num(y)) => Num(x.max(y)),
                (Str(x), Str(y)) => Str(x.max(y)),
                (Map(x), Map(y)) => Map(x.max(y)),
                (Seq { items: i, text: t }, Seq { items: j, text: u }) => Seq {
                    items: i.max(j),
                    text: t.max(u),
                },
                _ => Any(a.magnitude().max(b.magnitude()).max(a.text()).max(b.text())),
            },
            BinOpKind::Add => match (a, b) {
                (Num(x), Num(y)) => Num(x + y),
                (Str(x), Str(y)) => Str(x + y),
                (Seq { items: i, text: t }, Seq { items: j, text: u }) => Seq {
                    items: i + j,
                    text: t + u,
                },
                (Any(_), _) | (_, Any(_)) => Any(a.magnitude() + b.magnitude()),
                _ => Runtime,
            },
            BinOpKind::Mul => match (a, b) {
                (Num(x), Num(y)) => Num(x * y),
                (Str(n), Num(k)) | (Num(k), Str(n)) => Str(n * k),
                (Seq { items, text }, Num(k)) | (Num(k), Seq { items, text }) => Seq {
                    items: items * k,
                    text: text * k,
                },
                (Any(n), Num(k)) | (Num(k), Any(n)) => Any(n * k),
                (Any(_), _) | (_, Any(_)) => Any(a.magnitude() * b.magnitude()),
                _ => Runtime,
            },
            BinOpKind::Sub | BinOpKind::Div | BinOpKind::FloorDiv | BinOpKind::Rem => {
                match (a, b) {
                    (Num(x), Num(y)) => {
                        // Dividing by a small number grows the magnitude.
                        let quotient = if y > 0.0 {
                            x / y.min(1.0)
                        } else {
                            f64::INFINITY
                        };
                        Num((x + y).max(quotient))
                    }
                    (Any(_), _) | (_, Any(_)) => Any(f64::INFINITY),
                    _ => Runtime,
                }
            }
            BinOpKind::Pow => match (a, b) {
                (Num(x), Num(y)) => Num(x.max(2.0).powf(y)),
                (Any(_), _) | (_, Any(_)) => Any(f64::INFINITY),
                _ => Runtime,
            },
        }
    }
}

struct Walk {
    depth: usize,
}

fn too_deep() -> String {
    format!("its expressions or blocks nest more than {MAX_DEPTH} deep")
}

impl Walk {
    fn body(&mut self, stmts: &[Stmt<'_>]) -> Result<(), String> {
        stmts.iter().try_for_each(|s| self.stmt(s))
    }

    fn stmt(&mut self, s: &Stmt<'_>) -> Result<(), String> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(too_deep());
        }
        match s {
            Stmt::Template(t) => self.body(&t.children)?,
            Stmt::EmitExpr(e) => self.expr(&e.expr).map(drop)?,
            Stmt::EmitRaw(_) => {}
            Stmt::ForLoop(f) => {
                self.expr(&f.target)?;
                self.expr(&f.iter)?;
                if let Some(e) = &f.filter_expr {
                    self.expr(e)?;
                }
                self.body(&f.body)?;
                self.body(&f.else_body)?;
            }
            Stmt::IfCond(i) => {
                self.expr(&i.expr)?;
                self.body(&i.true_body)?;
                self.body(&i.false_body)?;
            }
            Stmt::WithBlock(w) => {
                for (target, e) in &w.assignments {
                    self.expr(target)?;
                    self.expr(e)?;
                }
                self.body(&w.body)?;
            }
            Stmt::Set(set) => {
                self.expr(&set.target)?;
                self.expr(&set.expr)?;
            }
            Stmt::SetBlock(set) => {
                self.expr(&set.target)?;
                if let Some(f) = &set.filter {
                    self.expr(f)?;
                }
                self.body(&set.body)?;
            }
            Stmt::AutoEscape(a) => {
                self.expr(&a.enabled)?;
                self.body(&a.body)?;
            }
            Stmt::FilterBlock(f) => {
                self.expr(&f.filter)?;
                self.body(&f.body)?;
            }
            Stmt::Do(d) => {
                self.expr(&d.call.expr)?;
                self.args(&d.call.args)?;
            }
        }
        self.depth -= 1;
        Ok(())
    }

    fn args(&mut self, args: &[CallArg<'_>]) -> Result<(), String> {
        for a in args {
            match a {
                CallArg::Pos(e)
                | CallArg::Kwarg(_, e)
                | CallArg::PosSplat(e)
                | CallArg::KwargSplat(e) => {
                    self.expr(e)?;
                }
            }
        }
        Ok(())
    }

    /// What `e` folds to; fails when that is past [`MAX_VALUE`].
    fn expr(&mut self, e: &Expr<'_>) -> Result<Abs, String> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(too_deep());
        }
        let abs = match e {
            Expr::Const(c) => Abs::of(&c.value),
            Expr::Var(_) => Abs::Runtime,
            Expr::UnaryOp(u) => match (&u.op, self.expr(&u.expr)?) {
                (_, Abs::Runtime) => Abs::Runtime,
                (UnaryOpKind::Not, _) => Abs::Num(1.0),
                (UnaryOpKind::Neg, Abs::Num(n)) => Abs::Num(n),
                (UnaryOpKind::Neg, Abs::Any(n)) => Abs::Num(n),
                (UnaryOpKind::Neg, _) => Abs::Runtime,
            },
            Expr::BinOp(b) => {
                let left = self.expr(&b.left)?;
                let right = self.expr(&b.right)?;
                Abs::binop(b.op, left, right)
            }
            Expr::Compare(c) => {
                let mut folded = !matches!(self.expr(&c.expr)?, Abs::Runtime);
                for op in &c.ops {
                    folded &= !matches!(self.expr(&op.expr)?, Abs::Runtime);
                }
                if folded {
                    Abs::Num(1.0)
                } else {
                    Abs::Runtime
                }
            }
            Expr::List(l) => {
                let mut text = 2.0;
                for item in &l.items {
                    text += self.expr(item)?.text() + 2.0;
                }
                if l.items.iter().all(|i| matches!(i, Expr::Const(_))) {
                    Abs::Seq {
                        items: l.items.len() as f64,
                        text,
                    }
                } else {
                    Abs::Runtime
                }
            }
            Expr::Map(m) => {
                let mut text = 2.0;
                for e in m.keys.iter().chain(&m.values) {
                    text += self.expr(e)?.text() + 2.0;
                }
                let all_const = m
                    .keys
                    .iter()
                    .chain(&m.values)
                    .all(|i| matches!(i, Expr::Const(_)));
                if all_const {
                    Abs::Map(text)
                } else {
                    Abs::Runtime
                }
            }
            Expr::Slice(s) => {
                self.expr(&s.expr)?;
                for e in [&s.start, &s.stop, &s.step].into_iter().flatten() {
                    self.expr(e)?;
                }
                Abs::Runtime
            }
            Expr::IfExpr(i) => {
                self.expr(&i.test_expr)?;
                self.expr(&i.true_expr)?;
                if let Some(e) = &i.false_expr {
                    self.expr(e)?;
                }
                Abs::Runtime
            }
            Expr::Filter(f) => {
                if let Some(e) = &f.expr {
                    self.expr(e)?;
                }
                self.args(&f.args)?;
                Abs::Runtime
            }
            Expr::Test(t) => {
                self.expr(&t.expr)?;
                self.args(&t.args)?;
                Abs::Runtime
            }
            Expr::GetAttr(g) => {
                self.expr(&g.expr)?;
                Abs::Runtime
            }
            Expr::GetItem(g) => {
                self.expr(&g.expr)?;
                self.expr(&g.subscript_expr)?;
                Abs::Runtime
            }
            Expr::Call(c) => {
                self.expr(&c.expr)?;
                self.args(&c.args)?;
                Abs::Runtime
            }
        };
        let size = abs.size();
        // NaN (`0 * inf`) counts as too large.
        if size.is_nan() || size > MAX_VALUE as f64 {
            return Err(format!(
                "a constant expression in it would build a value of more than {MAX_VALUE} \
                 bytes while it compiles (a hostile template?); fix the template or render \
                 without it"
            ));
        }
        self.depth -= 1;
        Ok(abs)
    }
}

/// Parses `source` and checks what its compilation would fold: `Ok(Err(_))`
/// says why the template is refused; `Err(_)` is a syntax error (left to
/// minijinja's own report).
pub(super) fn check(source: &str) -> Result<Result<(), String>, Error> {
    // A unit struct without minijinja's `custom_syntax` feature, a struct with it.
    #[allow(clippy::default_constructed_unit_structs)]
    let ast = parse(
        source,
        "chat",
        SyntaxConfig::default(),
        WhitespaceConfig::default(),
    )?;
    Ok(Walk { depth: 0 }.stmt(&ast))
}
