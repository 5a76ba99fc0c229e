//! The `[INST]` formats whose blocks span messages: Llama 2 (`llama2`,
//! `llama2-sys`, `llama2-sys-bos`, `llama2-sys-strip`) and Mistral v1/v3
//! (`mistral-v1`, `mistral-v3`, `mistral-v3-tekken`). An assistant answer
//! closes the block; the next message opens another. Both end on
//! `[/INST]` anyway, so neither writes a generation prompt.

use super::{trim, Builtin, Message};

/// `mistral-v1`, `mistral-v3` and `mistral-v3-tekken` (`b`).
pub(super) fn mistral(b: Builtin, messages: &[Message]) -> String {
    let lead = if b == Builtin::MistralV1 { " " } else { "" };
    let trail = if b == Builtin::MistralV3Tekken {
        ""
    } else {
        " "
    };
    let mut s = String::new();
    let mut inside = false;
    for m in messages {
        if !inside {
            s += &format!("{lead}[INST]{trail}");
            inside = true;
        }
        match m.role.as_str() {
            "system" => s += &format!("{}\n\n", m.content),
            "user" => s += &format!("{}{lead}[/INST]", m.content),
            _ => {
                let c = if b == Builtin::MistralV3 {
                    trim(&m.content)
                } else {
                    &m.content
                };
                s += &format!("{trail}{c}</s>");
                inside = false;
            }
        }
    }
    s
}

/// `llama2`, `llama2-sys`, `llama2-sys-bos` and `llama2-sys-strip` (`b`).
pub(super) fn llama2(b: Builtin, messages: &[Message]) -> String {
    let sys_block = b != Builtin::Llama2;
    let bos_inside = b == Builtin::Llama2SysBos;
    let strip = b == Builtin::Llama2SysStrip;
    let mut inside = true;
    let mut s = String::from("[INST] ");
    for m in messages {
        let c = if strip { trim(&m.content) } else { &m.content };
        if !inside {
            inside = true;
            s += if bos_inside { "<s>[INST] " } else { "[INST] " };
        }
        match m.role.as_str() {
            "system" if sys_block => s += &format!("<<SYS>>\n{c}\n<</SYS>>\n\n"),
            "system" => s += &format!("{c}\n"),
            "user" => s += &format!("{c} [/INST]"),
            _ => {
                s += &format!("{c}</s>");
                inside = false;
            }
        }
    }
    s
}
