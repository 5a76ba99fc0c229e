//! The formats with logic of their own (a system text carried into the next
//! turn, a role renamed or upper-cased, the first message or the last one
//! treated apart, one role's content trimmed and not the others'): a
//! function each.

use super::{trim, upper, Message};

const HY_ASSISTANT: &str = "<｜hy_Assistant｜>";
const HY_USER: &str = "<｜hy_User｜>";
const HY_SYSTEM_END: &str = "<｜hy_place▁holder▁no▁3｜>";

/// The Bailing role: `HUMAN` for `user`, the others upper-cased.
fn bailing_role(role: &str) -> String {
    if role == "user" {
        "HUMAN".to_string()
    } else {
        upper(role)
    }
}

/// `bailing`, and `bailing-think` (`think`: the generation prompt opens
/// `<think>`).
pub(super) fn bailing(messages: &[Message], add: bool, think: bool) -> String {
    let mut s = String::new();
    for m in messages {
        s += &format!("<role>{}</role>{}", bailing_role(&m.role), m.content);
    }
    if add {
        s += "<role>ASSISTANT</role>";
        if think {
            s += "<think>";
        }
    }
    s
}

/// `bailing2`.
pub(super) fn bailing2(messages: &[Message], add: bool) -> String {
    let mut s = String::new();
    if messages.first().is_none_or(|m| m.role != "system") {
        s += "<role>SYSTEM</role>detailed thinking off<|role_end|>";
    }
    for m in messages {
        s += &format!(
            "<role>{}</role>{}<|role_end|>",
            bailing_role(&m.role),
            m.content
        );
    }
    if add {
        s += "<role>ASSISTANT</role>";
    }
    s
}

/// `gemma`.
pub(super) fn gemma(messages: &[Message], add: bool) -> String {
    let mut s = String::new();
    let mut system = String::new();
    for m in messages {
        if m.role == "system" {
            system += trim(&m.content);
            continue;
        }
        let role = if m.role == "assistant" {
            "model"
        } else {
            &m.role
        };
        s += &format!("<start_of_turn>{role}\n");
        if !system.is_empty() && role != "model" {
            s += &format!("{system}\n\n");
            system.clear();
        }
        s += &format!("{}<end_of_turn>\n", trim(&m.content));
    }
    if add {
        s += "<start_of_turn>model\n";
    }
    s
}

/// `gigachat`.
pub(super) fn gigachat(messages: &[Message], add: bool) -> String {
    let mut s = String::new();
    let rest = match messages.first() {
        Some(m) if m.role == "system" => {
            s += &format!("<s>{}<|message_sep|>", m.content);
            &messages[1..]
        }
        _ => {
            s += "<s>";
            messages
        }
    };
    for m in rest {
        match m.role.as_str() {
            "user" => {
                s += &format!(
                "user<|role_sep|>{}<|message_sep|>available functions<|role_sep|>[]<|message_sep|>",
                m.content
            )
            }
            "assistant" => s += &format!("assistant<|role_sep|>{}<|message_sep|>", m.content),
            _ => {}
        }
    }
    if add {
        s += "assistant<|role_sep|>";
    }
    s
}

/// `gpt-oss`.
pub(super) fn gpt_oss(messages: &[Message], add: bool) -> String {
    let mut s = String::new();
    for m in messages {
        let end = if m.role == "assistant" {
            "<|return|>"
        } else {
            "<|end|>"
        };
        s += &format!("<|start|>{}<|message|>{}{end}", m.role, m.content);
    }
    if add {
        s += "<|start|>assistant";
    }
    s
}

/// `granite`.
pub(super) fn granite(messages: &[Message], add: bool) -> String {
    let mut s = String::new();
    for m in messages {
        s += &format!("<|start_of_role|>{}<|end_of_role|>", m.role);
        if m.role == "assistant_tool_call" {
            s += "<|tool_call|>";
        }
        s += &format!("{}<|end_of_text|>\n", m.content);
    }
    if add {
        s += "<|start_of_role|>assistant<|end_of_role|>";
    }
    s
}

/// `granite-4.0` and `granite-4.1`.
pub(super) fn granite4(messages: &[Message], add: bool) -> String {
    let mut s = String::new();
    for m in messages {
        if m.role == "assistant_tool_call" {
            s += "<|start_of_role|>assistant<|end_of_role|><|tool_call|>";
        } else {
            s += &format!("<|start_of_role|>{}<|end_of_role|>", m.role);
        }
        s += &format!("{}<|end_of_text|>\n", m.content);
    }
    if add {
        s += "<|start_of_role|>assistant<|end_of_role|>";
    }
    s
}

/// `grok-2`: the system and user texts trimmed, the answers not.
pub(super) fn grok2(messages: &[Message], add: bool) -> String {
    let mut s = String::new();
    for m in messages {
        match m.role.as_str() {
            "system" => s += &format!("System: {}<|separator|>\n\n", trim(&m.content)),
            "user" => s += &format!("Human: {}<|separator|>\n\n", trim(&m.content)),
            "assistant" => s += &format!("Assistant: {}<|separator|>\n\n", m.content),
            _ => {}
        }
    }
    if add {
        s += "Assistant:";
    }
    s
}

/// `hunyuan-dense` (no generation prompt: each user turn ends with the
/// assistant prefix).
pub(super) fn hunyuan_dense(messages: &[Message]) -> String {
    let mut s = String::new();
    for (i, m) in messages.iter().enumerate() {
        if i == 0 && m.role == "system" {
            s += &format!("{}{HY_SYSTEM_END}", m.content);
        }
        match m.role.as_str() {
            "assistant" => s += &format!("{HY_ASSISTANT}{}<｜hy_place▁holder▁no▁2｜>", m.content),
            "user" => s += &format!("{HY_USER}{}{HY_ASSISTANT}", m.content),
            _ => {}
        }
    }
    s
}

/// `hunyuan-vl` (no generation prompt).
pub(super) fn hunyuan_vl(messages: &[Message]) -> String {
    let mut s = String::from("<｜hy_begin▁of▁sentence｜>");
    for (i, m) in messages.iter().enumerate() {
        match m.role.as_str() {
            "system" if i == 0 => s += &format!("{}{HY_SYSTEM_END}", m.content),
            "user" => s += &format!("{}{HY_USER}", m.content),
            "assistant" => s += &format!("{}{HY_ASSISTANT}", m.content),
            _ => {}
        }
    }
    s
}

/// `minicpm` (no generation prompt: each user turn ends `<AI>`).
pub(super) fn minicpm(messages: &[Message]) -> String {
    let mut s = String::new();
    for m in messages {
        if m.role == "user" {
            s += &format!("<用户>{}<AI>", trim(&m.content));
        } else {
            s += trim(&m.content);
        }
    }
    s
}

/// `monarch`: `<s>` before every turn but the first.
pub(super) fn monarch(messages: &[Message], add: bool) -> String {
    let mut s = String::new();
    for (i, m) in messages.iter().enumerate() {
        let bos = if i == 0 { "" } else { "<s>" };
        s += &format!("{bos}{}\n{}</s>\n", m.role, m.content);
    }
    if add {
        s += "<s>assistant\n";
    }
    s
}

/// `openchat`: the role's first letter upper-cased.
pub(super) fn openchat(messages: &[Message], add: bool) -> String {
    let mut s = String::new();
    for m in messages {
        if m.role == "system" {
            s += &format!("{}<|end_of_turn|>", m.content);
        } else {
            let mut role = m.role.clone();
            if let Some(first) = role.get_mut(..1) {
                first.make_ascii_uppercase();
            }
            s += &format!("GPT4 Correct {role}: {}<|end_of_turn|>", m.content);
        }
    }
    if add {
        s += "GPT4 Correct Assistant:";
    }
    s
}

/// `orion`: the system texts carried into the next user turn (no
/// generation prompt: each user turn ends with the assistant prefix).
pub(super) fn orion(messages: &[Message]) -> String {
    let mut s = String::new();
    let mut system = String::new();
    for m in messages {
        match m.role.as_str() {
            "system" => system += &m.content,
            "user" => {
                s += "Human: ";
                if !system.is_empty() {
                    s += &format!("{system}\n\n");
                    system.clear();
                }
                s += &format!("{}\n\nAssistant: </s>", m.content);
            }
            _ => s += &format!("{}</s>", m.content),
        }
    }
    s
}

/// `pangu-embedded`: an empty system turn when the chat opens without one.
pub(super) fn pangu_embedded(messages: &[Message], add: bool) -> String {
    let mut s = String::new();
    for (i, m) in messages.iter().enumerate() {
        if i == 0 && m.role != "system" {
            s += "[unused9]系统：[unused10]";
        }
        let who = match m.role.as_str() {
            "system" => "系统",
            "user" => "用户",
            "assistant" => "助手",
            "tool" => "工具",
            "function" => "方法",
            _ => continue,
        };
        s += &format!("[unused9]{who}：{}[unused10]", m.content);
    }
    if add {
        s += "[unused9]助手：";
    }
    s
}

/// `rwkv-world` (the assistant prefix follows a user turn that ends the
/// chat, whatever the generation prompt flag).
pub(super) fn rwkv_world(messages: &[Message]) -> String {
    let mut s = String::new();
    for (i, m) in messages.iter().enumerate() {
        let c = trim(&m.content);
        match m.role.as_str() {
            "system" => s += &format!("System: {c}\n\n"),
            "user" => {
                s += &format!("User: {c}\n\n");
                if i + 1 == messages.len() {
                    s += "Assistant:";
                }
            }
            "assistant" => s += &format!("Assistant: {c}\n\n"),
            _ => {}
        }
    }
    s
}

/// `seed_oss`: the answers trimmed, the other contents not.
pub(super) fn seed_oss(messages: &[Message], add: bool) -> String {
    let mut s = String::new();
    for m in messages {
        let c = if m.role == "assistant" {
            trim(&m.content)
        } else {
            &m.content
        };
        s += &format!("<seed:bos>{}\n{c}<seed:eos>", m.role);
    }
    if add {
        s += "<seed:bos>assistant\n";
    }
    s
}
