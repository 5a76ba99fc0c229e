//! The bytecode rewrite: copies a template's instructions with the guard
//! calls in, renumbering jumps.

use super::*;

/// Copies `old` with the guard calls in: see the module docs.
pub(crate) fn rewrite<'s>(old: &Instructions<'s>) -> Instructions<'s> {
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
