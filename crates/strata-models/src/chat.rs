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

/// A parsed chat template.
pub struct ChatTemplate {
    env: Environment<'static>,
    bos: String,
    eos: String,
}

fn tmpl_err(e: JinjaError) -> ModelError {
    let mut msg = e.to_string();
    let mut src = std::error::Error::source(&e);
    while let Some(s) = src {
        msg += &format!(": {s}");
        src = s.source();
    }
    ModelError::Template(msg)
}

impl ChatTemplate {
    /// Parses `source`; `bos` and `eos` are the texts of the model's BOS/EOS tokens.
    pub fn new(source: &str, bos: &str, eos: &str) -> Result<ChatTemplate> {
        let mut env = Environment::new();
        env.add_function(
            "raise_exception",
            |msg: String| -> std::result::Result<String, JinjaError> {
                Err(JinjaError::new(ErrorKind::InvalidOperation, msg))
            },
        );
        env.add_template_owned("chat", source.to_string())
            .map_err(tmpl_err)?;
        Ok(ChatTemplate {
            env,
            bos: bos.to_string(),
            eos: eos.to_string(),
        })
    }

    /// Renders `messages`, ending with the assistant prefix when `add_generation_prompt`.
    pub fn render(&self, messages: &[Message], add_generation_prompt: bool) -> Result<String> {
        let t = self.env.get_template("chat").map_err(tmpl_err)?;
        t.render(context! {
            messages => messages,
            add_generation_prompt => add_generation_prompt,
            bos_token => self.bos,
            eos_token => self.eos,
        })
        .map_err(tmpl_err)
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
            Err(ModelError::Template(_))
        ));
    }
}
