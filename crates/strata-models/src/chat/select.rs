//! Which chat template a conversation uses: the model's own
//! (`tokenizer.chat_template`), one the user names
//! (`--chat-template NAME|FILE`, `--chat-template-file FILE`: a llama.cpp
//! built-in or a Jinja file), or chatml when the model has none, as
//! llama.cpp falls back. Everything that can fail is found before the first
//! message: an unknown name, an unreadable file and a Jinja syntax error
//! when the choice is read ([`TemplateChoice`], before the model loads), a
//! template that fails on a test conversation when it is checked
//! ([`Template::check`]).

use std::io::Read;
use std::path::{Path, PathBuf};

use super::{Builtin, ChatTemplate, Message, MAX_TEMPLATE};
use crate::model::Model;
use crate::{ModelError, Result};

/// How errors name the model's own template.
pub const MODEL_TEMPLATE: &str = "chat template (tokenizer.chat_template of the model)";

/// What to do about a template that fails, appended to its errors.
const CHOOSE: &str = "choose another with --chat-template NAME|FILE";

/// A template the user chose instead of the model's, read before the model
/// is loaded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TemplateChoice {
    /// One of llama.cpp's built-in formats.
    Builtin(Builtin),
    /// A Jinja template read from a file.
    File {
        /// The path as given.
        path: PathBuf,
        /// The template text.
        source: String,
    },
}

/// `e` (a template error) with `hint` (what to do) appended.
fn hinted(e: ModelError, hint: &str) -> ModelError {
    match e {
        ModelError::Template { name, msg } => ModelError::Template {
            name,
            msg: format!("{msg}; {hint}"),
        },
        other => other,
    }
}

/// How errors name the template file `path`.
fn file_name(path: &Path) -> String {
    format!("chat template file '{}'", path.display())
}

/// The text of `path`, at most [`MAX_TEMPLATE`] bytes of UTF-8.
fn read_template(path: &Path) -> std::result::Result<String, String> {
    let f = std::fs::File::open(path).map_err(|e| e.to_string())?;
    let mut bytes = Vec::new();
    f.take(MAX_TEMPLATE as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| e.to_string())?;
    if bytes.len() > MAX_TEMPLATE {
        return Err(format!("larger than the {MAX_TEMPLATE} bytes accepted"));
    }
    String::from_utf8(bytes).map_err(|_| "not UTF-8 text".to_string())
}

impl TemplateChoice {
    /// `--chat-template VALUE`: a built-in name (exactly as llama.cpp spells
    /// it: [`Builtin::names`]), or else the path of a Jinja template file
    /// (a file named like a built-in is reached as `./NAME`). An unknown name
    /// that is no readable file is an error listing the names.
    pub fn parse(value: &str) -> Result<TemplateChoice> {
        if let Some(b) = Builtin::from_name(value) {
            return Ok(TemplateChoice::Builtin(b));
        }
        let path = Path::new(value);
        if path.exists() {
            return TemplateChoice::from_file(path);
        }
        let what = if value.contains("{%") || value.contains("{{") {
            "looks like an inline template: put it in a file and give its path".to_string()
        } else {
            "is not a built-in template name and no such file exists".to_string()
        };
        Err(ModelError::Template {
            name: format!("--chat-template '{value}'"),
            msg: format!(
                "{what}; give one of llama.cpp's built-in names ({}) or the path of a Jinja \
                 chat template file",
                Builtin::names()
            ),
        })
    }

    /// `--chat-template-file PATH`: a Jinja template file, read and parsed
    /// (syntax errors are reported here, naming the file).
    pub fn from_file(path: &Path) -> Result<TemplateChoice> {
        let name = file_name(path);
        let source = read_template(path).map_err(|e| ModelError::Template {
            name: name.clone(),
            msg: format!("cannot be read: {e}; give the path of a Jinja chat template file"),
        })?;
        ChatTemplate::named(&name, &source, "", "")
            .map_err(|e| hinted(e, &format!("fix the file or {CHOOSE}")))?;
        Ok(TemplateChoice::File {
            path: path.to_path_buf(),
            source,
        })
    }

    /// The choice the two flags make: `chat_template` is read with
    /// [`TemplateChoice::parse`], `chat_template_file` with
    /// [`TemplateChoice::from_file`]; neither is `None`, both an error.
    pub fn from_flags(
        chat_template: Option<&str>,
        chat_template_file: Option<&Path>,
    ) -> Result<Option<TemplateChoice>> {
        match (chat_template, chat_template_file) {
            (Some(_), Some(_)) => Err(ModelError::TwoTemplates),
            (Some(v), None) => TemplateChoice::parse(v).map(Some),
            (None, Some(p)) => TemplateChoice::from_file(p).map(Some),
            (None, None) => Ok(None),
        }
    }
}

/// Where the template in use came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TemplateOrigin {
    /// The model's `tokenizer.chat_template`.
    Model,
    /// A built-in chosen by name.
    Builtin(Builtin),
    /// A Jinja template read from this file.
    File(PathBuf),
    /// The model has no template: chatml, as llama.cpp falls back to.
    Fallback,
}

enum Renderer {
    Jinja(Box<ChatTemplate>),
    Builtin(Builtin),
}

/// A chat template ready to render conversations: a Jinja template (the
/// model's or a file's, with the model's BOS/EOS texts) or a llama.cpp
/// built-in.
pub struct Template {
    renderer: Renderer,
    name: String,
    origin: TemplateOrigin,
}

impl Template {
    /// The template to use: `choice` when given, else the model's
    /// `model_template` (parsed with `bos`/`eos` as its BOS/EOS texts), else
    /// chatml ([`TemplateOrigin::Fallback`]; [`Template::notice`] says so).
    pub fn select(
        choice: Option<&TemplateChoice>,
        model_template: Option<&str>,
        bos: &str,
        eos: &str,
    ) -> Result<Template> {
        let (renderer, name, origin) = match (choice, model_template) {
            (Some(TemplateChoice::Builtin(b)), _) => (
                Renderer::Builtin(*b),
                format!("built-in chat template '{b}'"),
                TemplateOrigin::Builtin(*b),
            ),
            (Some(TemplateChoice::File { path, source }), _) => {
                let name = file_name(path);
                let t = ChatTemplate::named(&name, source, bos, eos)
                    .map_err(|e| hinted(e, &format!("fix the file or {CHOOSE}")))?;
                (
                    Renderer::Jinja(Box::new(t)),
                    name,
                    TemplateOrigin::File(path.clone()),
                )
            }
            (None, Some(src)) => {
                let t = ChatTemplate::named(MODEL_TEMPLATE, src, bos, eos)
                    .map_err(|e| hinted(e, &format!("{CHOOSE} to replace it")))?;
                (
                    Renderer::Jinja(Box::new(t)),
                    MODEL_TEMPLATE.to_string(),
                    TemplateOrigin::Model,
                )
            }
            (None, None) => (
                Renderer::Builtin(Builtin::Chatml),
                "built-in chat template 'chatml' (the model has none)".to_string(),
                TemplateOrigin::Fallback,
            ),
        };
        Ok(Template {
            renderer,
            name,
            origin,
        })
    }

    /// [`Template::select`] for `model`: its `tokenizer.chat_template`, and
    /// the texts of its BOS and EOS tokens (empty when it has none).
    pub fn for_model(model: &Model, choice: Option<&TemplateChoice>) -> Result<Template> {
        let text = |id: Option<u32>| {
            id.and_then(|i| model.tokenizer.token_text(i).ok())
                .unwrap_or("")
                .to_string()
        };
        Template::select(
            choice,
            model.chat_template.as_deref(),
            &text(model.tokenizer.bos()),
            &text(model.tokenizer.eos()),
        )
    }

    /// How errors name this template (the GGUF key, the file, the built-in).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Where it came from.
    pub fn origin(&self) -> &TemplateOrigin {
        &self.origin
    }

    /// `messages` rendered, ending with the assistant prefix when
    /// `add_generation_prompt`. A Jinja template may fail
    /// ([`ModelError::Template`], e.g. its `raise_exception`, or a limit of
    /// `chat`'s); a built-in never does.
    pub fn render(&self, messages: &[Message], add_generation_prompt: bool) -> Result<String> {
        match &self.renderer {
            Renderer::Jinja(t) => t.render(messages, add_generation_prompt),
            Renderer::Builtin(b) => Ok(b.render(messages, add_generation_prompt)),
        }
    }

    /// Renders a test conversation (the `system` prompt if any, then a user
    /// message, with the generation prompt, as llama.cpp checks a template at
    /// start): a template that fails on it, or renders nothing, is an error
    /// naming the template and what to do, before the first message.
    pub fn check(&self, system: Option<&str>) -> Result<()> {
        let mut probe: Vec<Message> = system
            .map(|s| Message::new("system", s))
            .into_iter()
            .collect();
        probe.push(Message::new("user", "test"));
        let hint = match self.origin {
            TemplateOrigin::Model => format!("{CHOOSE} to replace it"),
            TemplateOrigin::File(_) => format!("fix the file or {CHOOSE}"),
            TemplateOrigin::Builtin(_) | TemplateOrigin::Fallback => CHOOSE.to_string(),
        };
        let text = self.render(&probe, true).map_err(|e| match e {
            ModelError::Template { name, msg } => ModelError::Template {
                name,
                msg: format!("fails on a test conversation ({msg}); {hint}"),
            },
            other => other,
        })?;
        if text.is_empty() {
            return Err(ModelError::Template {
                name: self.name.clone(),
                msg: format!("renders nothing for a test conversation; {hint}"),
            });
        }
        Ok(())
    }

    /// The warning to print once, at start, when the model has no template
    /// and chatml stands in (`None` otherwise).
    pub fn notice(&self) -> Option<String> {
        (self.origin == TemplateOrigin::Fallback).then(|| {
            "warning: the model has no chat template (tokenizer.chat_template): using chatml, \
             as llama.cpp does; choose another with --chat-template NAME|FILE"
                .to_string()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_file(name: &str, text: &[u8]) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("strata-select-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    #[test]
    fn names_files_and_fallback() {
        let chat = [Message::new("user", "hi")];
        // a name
        let c = TemplateChoice::parse("llama3").unwrap();
        assert_eq!(c, TemplateChoice::Builtin(Builtin::Llama3));
        let t = Template::select(Some(&c), Some("{{ 'model' }}"), "", "").unwrap();
        assert_eq!(t.origin(), &TemplateOrigin::Builtin(Builtin::Llama3));
        assert_eq!(
            t.render(&chat, true).unwrap(),
            "<|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
        );
        assert!(t.notice().is_none());
        // the model's, with its BOS
        let t = Template::select(
            None,
            Some("{{ bos_token }}{{ messages[0].content }}"),
            "<s>",
            "",
        )
        .unwrap();
        assert_eq!(t.origin(), &TemplateOrigin::Model);
        assert_eq!(t.render(&chat, true).unwrap(), "<s>hi");
        assert!(t.name().contains("tokenizer.chat_template"));
        // none: chatml, with the notice
        let t = Template::select(None, None, "<s>", "</s>").unwrap();
        assert_eq!(t.origin(), &TemplateOrigin::Fallback);
        assert_eq!(
            t.render(&chat, true).unwrap(),
            "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
        );
        assert!(t.notice().unwrap().contains("chatml"));
        // a file, by --chat-template and by --chat-template-file
        let path = temp_file("t.jinja", b"{{ bos_token }}[{{ messages[-1].content }}]");
        for c in [
            TemplateChoice::parse(path.to_str().unwrap()).unwrap(),
            TemplateChoice::from_flags(None, Some(&path))
                .unwrap()
                .unwrap(),
        ] {
            let t = Template::select(Some(&c), None, "<b>", "").unwrap();
            assert_eq!(t.origin(), &TemplateOrigin::File(path.clone()));
            assert_eq!(t.render(&chat, false).unwrap(), "<b>[hi]");
            t.check(Some("sys")).unwrap();
        }
        assert!(TemplateChoice::from_flags(None, None).unwrap().is_none());
        assert!(TemplateChoice::from_flags(Some("chatml"), Some(&path)).is_err());
    }

    #[test]
    fn errors_name_the_template_and_what_to_do() {
        let msg = |r: Result<TemplateChoice>| match r {
            Err(ModelError::Template { name, msg }) => format!("{name}: {msg}"),
            other => panic!("{other:?}"),
        };
        let e = msg(TemplateChoice::parse("llama-9"));
        assert!(
            e.starts_with("--chat-template 'llama-9'") && e.contains("chatml, command-r"),
            "{e}"
        );
        let e = msg(TemplateChoice::parse("{{ messages }}"));
        assert!(e.contains("inline template"), "{e}");
        let e = msg(TemplateChoice::from_file(Path::new("/nonexistent/t.jinja")));
        assert!(
            e.contains("'/nonexistent/t.jinja'") && e.contains("cannot be read"),
            "{e}"
        );
        let bad = temp_file("bad.jinja", b"{% for m in messages %}");
        let e = msg(TemplateChoice::parse(bad.to_str().unwrap()));
        assert!(e.contains("bad.jinja") && e.contains("fix the file"), "{e}");
        let bin = temp_file("bin.jinja", b"\xff\xfe");
        assert!(msg(TemplateChoice::from_file(&bin)).contains("not UTF-8"));
        let dir = bin.parent().unwrap();
        assert!(msg(TemplateChoice::from_file(dir)).contains("cannot be read"));

        // the model's: a syntax error at selection, a render error at the check
        let e = Template::select(None, Some("{% if %}"), "", "")
            .err()
            .unwrap();
        assert!(
            e.to_string().contains("tokenizer.chat_template")
                && e.to_string().contains("--chat-template")
        );
        let t = Template::select(
            None,
            Some("{% if messages[0].role == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}x"),
            "",
            "",
        )
        .unwrap();
        t.check(None).unwrap();
        let e = t.check(Some("Be brief.")).unwrap_err().to_string();
        assert!(
            e.contains("tokenizer.chat_template")
                && e.contains("System role not supported")
                && e.contains("test conversation")
                && e.contains("--chat-template"),
            "{e}"
        );
        let t = Template::select(None, Some("{% if false %}x{% endif %}"), "", "").unwrap();
        assert!(t
            .check(None)
            .unwrap_err()
            .to_string()
            .contains("renders nothing"));
    }
}
