//! Chat templates (`tokenizer.chat_template`, Jinja) rendered with minijinja,
//! with the variables llama.cpp and Hugging Face pass: `messages`,
//! `add_generation_prompt`, `bos_token`, `eos_token`, and `raise_exception`.

use minijinja::{context, Environment, Error as JinjaError, ErrorKind};

use crate::{ModelError, Result};

/// One chat message.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Message {
    /// `system`, `user` or `assistant`.
    pub role: String,
    /// The text.
    pub content: String,
}

impl Message {
    /// A message with `role` and `content`.
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Message {
        Message {
            role: role.into(),
            content: content.into(),
        }
    }
}

/// Most template instructions one rendering may execute (minijinja fuel):
/// a chat of thousands of messages needs a small part of it, a runaway loop
/// stops within a fraction of a second.
pub const TEMPLATE_FUEL: u64 = 20_000_000;
/// Longest rendered prompt, in bytes.
pub const MAX_RENDERED: usize = 8 << 20;
/// Most numbers one `range()` may produce (minijinja's own limit is 100000,
/// which nested loops multiply).
pub const MAX_RANGE: usize = 10_000;
/// Longest template source accepted, in bytes.
pub const MAX_TEMPLATE: usize = 1 << 20;

/// A parsed chat template.
pub struct ChatTemplate {
    env: Environment<'static>,
    name: String,
    bos: String,
    eos: String,
}

fn tmpl_err(name: &str, e: JinjaError) -> ModelError {
    let mut msg = match e.kind() {
        ErrorKind::OutOfFuel => {
            format!("it ran past {TEMPLATE_FUEL} instructions without finishing (a runaway loop?)")
        }
        _ => e.to_string(),
    };
    let mut src = std::error::Error::source(&e);
    while let Some(s) = src {
        msg += &format!(": {s}");
        src = s.source();
    }
    ModelError::Template {
        name: name.to_string(),
        msg,
    }
}

/// `range()` as Python and minijinja have it, producing at most [`MAX_RANGE`] numbers.
fn capped_range(
    lower: i64,
    upper: Option<i64>,
    step: Option<i64>,
) -> std::result::Result<Vec<i64>, JinjaError> {
    let (start, end) = match upper {
        Some(u) => (lower, u),
        None => (0, lower),
    };
    let step = step.unwrap_or(1);
    if step == 0 {
        return Err(JinjaError::new(
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
        return Err(JinjaError::new(
            ErrorKind::InvalidOperation,
            format!("range() of {count} numbers: at most {MAX_RANGE} in a chat template"),
        ));
    }
    Ok((0..count as i64).map(|i| start + i * step).collect())
}

/// Collects rendered text up to [`MAX_RENDERED`] bytes, then fails.
struct Capped(Vec<u8>);

impl std::io::Write for Capped {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        if self.0.len() + b.len() > MAX_RENDERED {
            return Err(std::io::Error::other(format!(
                "the rendered prompt exceeds {MAX_RENDERED} bytes"
            )));
        }
        self.0.extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl ChatTemplate {
    /// Parses `source`; `bos` and `eos` are the texts of the model's BOS/EOS tokens.
    pub fn new(source: &str, bos: &str, eos: &str) -> Result<ChatTemplate> {
        ChatTemplate::named("chat template", source, bos, eos)
    }

    /// Like [`ChatTemplate::new`]; errors name the template `name` (e.g.
    /// the GGUF key it came from).
    pub fn named(name: &str, source: &str, bos: &str, eos: &str) -> Result<ChatTemplate> {
        if source.len() > MAX_TEMPLATE {
            return Err(ModelError::Template {
                name: name.to_string(),
                msg: format!(
                    "{} bytes of source, more than the {MAX_TEMPLATE} accepted",
                    source.len()
                ),
            });
        }
        let mut env = Environment::new();
        env.set_fuel(Some(TEMPLATE_FUEL));
        env.add_function("range", capped_range);
        env.add_function(
            "raise_exception",
            |msg: String| -> std::result::Result<String, JinjaError> {
                Err(JinjaError::new(ErrorKind::InvalidOperation, msg))
            },
        );
        env.add_template_owned("chat", source.to_string())
            .map_err(|e| tmpl_err(name, e))?;
        Ok(ChatTemplate {
            env,
            name: name.to_string(),
            bos: bos.to_string(),
            eos: eos.to_string(),
        })
    }

    /// Renders `messages`, ending with the assistant prefix when
    /// `add_generation_prompt`. Bounded: [`TEMPLATE_FUEL`] instructions,
    /// [`MAX_RENDERED`] bytes of output, [`MAX_RANGE`] numbers per `range()`.
    pub fn render(&self, messages: &[Message], add_generation_prompt: bool) -> Result<String> {
        let err = |e| tmpl_err(&self.name, e);
        let t = self.env.get_template("chat").map_err(err)?;
        let mut out = Capped(Vec::new());
        t.render_captured_to(
            context! {
                messages => messages,
                add_generation_prompt => add_generation_prompt,
                bos_token => self.bos,
                eos_token => self.eos,
            },
            &mut out,
        )
        .map_err(err)?;
        String::from_utf8(out.0).map_err(|_| ModelError::Template {
            name: self.name.clone(),
            msg: "rendered text is not UTF-8".into(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMOLLM2: &str = "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

    #[test]
    fn smollm2_template_renders_like_transformers() {
        let t = ChatTemplate::new(SMOLLM2, "<|im_start|>", "<|im_end|>").unwrap();
        let out = t.render(&[Message::new("user", "Hi!")], true).unwrap();
        assert_eq!(
            out,
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n"
        );
        let out = t
            .render(
                &[
                    Message::new("system", "Be brief."),
                    Message::new("user", "Hi"),
                ],
                false,
            )
            .unwrap();
        assert_eq!(
            out,
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
        );
    }

    #[test]
    fn bos_eos_and_raise_exception() {
        let t = ChatTemplate::new(
            "{{ bos_token }}{% for m in messages %}{% if m.role == 'tool' %}{{ raise_exception('no tools') }}{% endif %}{{ m.content }}{{ eos_token }}{% endfor %}",
            "<s>",
            "</s>",
        )
        .unwrap();
        assert_eq!(
            t.render(&[Message::new("user", "a")], false).unwrap(),
            "<s>a</s>"
        );
        let e = t.render(&[Message::new("tool", "x")], false).unwrap_err();
        assert!(e.to_string().contains("no tools"), "{e}");
        assert!(matches!(
            ChatTemplate::new("{% for %}", "", ""),
            Err(ModelError::Template { .. })
        ));
    }

    /// Issue 16 item 8: hostile templates stop with a typed error naming the
    /// template, quickly: nested range(100000) loops (a hang before), loops
    /// within the range cap (fuel), and output past the length cap.
    #[test]
    fn runaway_templates_are_bounded() {
        let hostile = [
            (
                "{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}",
                "range()",
            ),
            (
                "{% for i in range(10000) %}{% for j in range(10000) %}{% endfor %}{% endfor %}",
                "instructions",
            ),
            (
                "{% for i in range(10000) %}{{ 'x' * 100000 }}{% endfor %}",
                "exceeds",
            ),
            ("{{ range(1, 2, 0) }}", "step"),
        ];
        for (src, says) in hostile {
            let t = ChatTemplate::named("tokenizer.chat_template", src, "", "").unwrap();
            let t0 = std::time::Instant::now();
            let e = t.render(&[Message::new("user", "hi")], true).unwrap_err();
            let msg = e.to_string();
            assert!(
                matches!(&e, ModelError::Template { name, .. } if name == "tokenizer.chat_template")
                    && msg.contains(says),
                "{src}: {msg}"
            );
            assert!(
                t0.elapsed() < std::time::Duration::from_secs(10),
                "{src}: {:?}",
                t0.elapsed()
            );
        }
        let big = "x".repeat(MAX_TEMPLATE + 1);
        assert!(ChatTemplate::new(&big, "", "").is_err());
    }

    /// The caps leave real chats alone: range() keeps Python's meaning, and a
    /// long conversation renders within the fuel.
    #[test]
    fn limits_leave_real_chats_alone() {
        let t = ChatTemplate::new(
            "{{ range(5)|list }} {{ range(2, 10, 3)|list }} {{ range(10, 0, -3)|list }} {{ range(3, 1)|list }}",
            "",
            "",
        )
        .unwrap();
        assert_eq!(
            t.render(&[], false).unwrap(),
            "[0, 1, 2, 3, 4] [2, 5, 8] [10, 7, 4, 1] []"
        );
        let t = ChatTemplate::new(SMOLLM2, "<|im_start|>", "<|im_end|>").unwrap();
        let chat: Vec<Message> = (0..5000)
            .map(|i| {
                Message::new(
                    if i % 2 == 0 { "user" } else { "assistant" },
                    "a message of some length",
                )
            })
            .collect();
        let out = t.render(&chat, true).unwrap();
        assert!(out.len() > 5000 * 24, "{}", out.len());
    }
}
