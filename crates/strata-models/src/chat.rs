//! Chat templates (`tokenizer.chat_template`, Jinja) rendered with minijinja,
//! with the variables llama.cpp and Hugging Face pass: `messages`,
//! `add_generation_prompt`, `bos_token`, `eos_token`, `tools` and
//! `documents` (none), and `raise_exception`; as transformers' jinja2
//! environment, with `trim_blocks` and `lstrip_blocks`, and with the Python
//! string and dict methods templates call (`chat/guard/methods.rs`).
//!
//! A template comes from the model file, so it is untrusted: a rendering is
//! bounded in instructions ([`TEMPLATE_FUEL`]), in the size of any value it
//! builds ([`MAX_VALUE`]), in all it builds ([`MAX_BUILT`]), in output
//! ([`MAX_RENDERED`]) and in how deep its lists and maps nest
//! ([`MAX_DEPTH`]; no namespace may hold a namespace, so none holds
//! itself); constants minijinja would fold while compiling are size-checked
//! first. The checks run inside minijinja's bytecode (`chat/guard.rs`,
//! `chat/fold.rs`): a template past a limit fails with
//! [`ModelError::Template`], never by exhausting memory or the stack.
//!
//! Besides Jinja templates, llama.cpp's built-in formats (`--chat-template
//! NAME`: [`Builtin`], rendered exactly as llama.cpp does), and the choice
//! between the model's template, a named or file one, and the chatml
//! fallback for a model without one ([`Template`], [`TemplateChoice`]).

use std::collections::BTreeMap;

use minijinja::machinery::{get_compiled_template, make_string_output, Vm};
use minijinja::{context, Environment, Error as JinjaError, ErrorKind};

use crate::{ModelError, Result};

mod builtin;
mod fold;
mod guard;
mod select;

pub use builtin::Builtin;
pub use select::{Template, TemplateChoice, TemplateOrigin, MODEL_TEMPLATE};

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

/// Most template instructions one rendering may execute (minijinja fuel,
/// counting the size checks the guard adds, about two instructions per
/// `+`, `~` or `*`): a chat of thousands of messages needs a small part of
/// it, a runaway loop stops within a fraction of a second.
pub const TEMPLATE_FUEL: u64 = 20_000_000;
/// Longest rendered prompt, in bytes.
pub const MAX_RENDERED: usize = 8 << 20;
/// Largest string or list a template may build, in bytes: `~`, `+`, `*`,
/// filters such as `join`, `replace` or `tojson`, and `{% set %}` captures
/// all stop here, checked before the value is built. A list counts the
/// size of a [`minijinja::Value`] slot an item: items are shared, not
/// copied.
pub const MAX_VALUE: usize = MAX_RENDERED;
/// Most bytes of strings and lists one rendering may build, all values
/// summed whether or not they are still in use (text emitted into `{% set %}`
/// captures included): what bounds memory when a template keeps many values
/// each under [`MAX_VALUE`]. Real templates build a few times the length of
/// the chat.
pub const MAX_BUILT: usize = 16 * MAX_RENDERED;
/// Deepest nesting of lists and maps a template may build (`[[[x]]]` is 3
/// deep): checked as each list, map or filter result is built, so no value
/// is deep enough to exhaust the stack when printed, compared or dropped.
/// (A list holding a namespace may deepen as the namespace is assigned to,
/// to at most twice this.) Real templates nest a few levels.
pub const MAX_DEPTH: usize = 100;
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
        // minijinja folds constant expressions as it compiles, before any
        // limit is in force: check what it would build first. (A syntax
        // error is left to minijinja's report below.)
        if let Ok(Err(msg)) = fold::check(source) {
            return Err(ModelError::Template {
                name: name.to_string(),
                msg,
            });
        }
        let mut env = Environment::new();
        // as transformers' environment: a block tag's line ends with it
        // and the indentation before it is dropped
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_fuel(Some(TEMPLATE_FUEL));
        guard::install(&mut env);
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
    /// [`MAX_RENDERED`] bytes of output, [`MAX_RANGE`] numbers per `range()`,
    /// [`MAX_VALUE`] bytes in any one value and [`MAX_BUILT`] bytes built in
    /// all (the bytecode runs with size checks in: see `guard`).
    pub fn render(&self, messages: &[Message], add_generation_prompt: bool) -> Result<String> {
        let err = |e| tmpl_err(&self.name, e);
        let t = self.env.get_template("chat").map_err(err)?;
        let compiled = get_compiled_template(&t);
        let instructions = guard::rewrite(&compiled.instructions);
        let blocks: BTreeMap<_, _> = compiled
            .blocks
            .iter()
            .map(|(name, b)| (*name, guard::rewrite(b)))
            .collect();
        let root = context! {
            messages => messages,
            add_generation_prompt => add_generation_prompt,
            bos_token => self.bos,
            eos_token => self.eos,
            tools => (),
            documents => (),
        };
        let mut text = String::new();
        let mut out = make_string_output(&mut text);
        Vm::new(&self.env)
            .eval(
                &instructions,
                root,
                &blocks,
                &mut out,
                compiled.initial_auto_escape,
            )
            .map_err(err)?;
        Ok(text)
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

    /// Block tags as transformers' jinja2 environment treats them
    /// (trim_blocks, lstrip_blocks), and the Python string methods Qwen 3's
    /// template calls; expected texts from jinja2 3.1.
    #[test]
    fn blocks_and_python_methods_as_jinja2() {
        let src = "{% for m in messages %}\n    {% if m.content %}\n  [{{ m.content }}]\n    {% endif %}\n{% endfor %}\nend\n";
        let t = ChatTemplate::new(src, "", "").unwrap();
        let msgs = [Message::new("user", "a"), Message::new("user", "b")];
        assert_eq!(t.render(&msgs, false).unwrap(), "  [a]\n  [b]\nend");
        let src = "{{ '  a b  '.split()|join('/') }}|{{ 'x'.split(',')|length }}|{{ 'a,b,c'.split(',', 1)|join('/') }}|{{ '\n\nhi\n'.lstrip('\n') }}|{% if 'abc'.startswith(('x', 'a')) %}yes{% endif %}|{{ 'a</think>b'.split('</think>')[-1].strip() }}";
        let t = ChatTemplate::new(src, "", "").unwrap();
        assert_eq!(t.render(&[], false).unwrap(), "a/b|1|a/b,c|hi\n|yes|b");
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

    /// The template rendered by plain minijinja (no guard), as the reference.
    fn plain(src: &str, messages: &[Message], agp: bool) -> std::result::Result<String, String> {
        let mut env = Environment::new();
        // the block handling ChatTemplate sets (transformers')
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.add_function(
            "raise_exception",
            |msg: String| -> std::result::Result<String, JinjaError> {
                Err(JinjaError::new(ErrorKind::InvalidOperation, msg))
            },
        );
        env.add_template("chat", src).map_err(|e| e.to_string())?;
        let t = env.get_template("chat").map_err(|e| e.to_string())?;
        t.render(context! {
            messages => messages,
            add_generation_prompt => agp,
            bos_token => "<s>",
            eos_token => "</s>",
        })
        .map_err(|e| e.to_string())
    }

    fn guarded(src: &str, messages: &[Message], agp: bool) -> std::result::Result<String, String> {
        ChatTemplate::new(src, "<s>", "</s>")
            .and_then(|t| t.render(messages, agp))
            .map_err(|e| e.to_string())
    }

    fn conversation(n: usize) -> Vec<Message> {
        let mut chat = vec![Message::new("system", "Be brief.")];
        chat.extend((0..n).map(|i| {
            Message::new(
                if i % 2 == 0 { "user" } else { "assistant" },
                format!("  message {i} <with> 'quotes' & \"more\"\n"),
            )
        }));
        chat
    }

    /// The rewritten bytecode renders what minijinja renders: every operator,
    /// filter, test and function the guard touches, kwargs, captures, loops.
    #[test]
    fn guarded_rendering_matches_minijinja() {
        let snippets = [
            "{{ 'a' ~ 1 ~ none ~ [1, 'x'] ~ {'k': 2} ~ undefined_thing }}",
            "{{ 1 + 2 }} {{ 1.5 + 2 }} {{ 'a' + 'b' }} {{ [1] + [2, 3] }} {{ (range(3)|list) + [9] }} {{ true + 1 }}",
            "{{ 'ab' * 3 }} {{ 3 * 'ab' }} {{ [1, 2] * 2 }} {{ 2 * 3 }} {{ 2.5 * 2 }} {{ 'x' * 0 }}|{{ [] * 3 }}",
            "{{ 'hello'[1:3] }} {{ [1, 2, 3, 4][::-1] }} {{ 'abc'[::-1] }} {{ messages[1:]|length }} {{ 'abc'[-1] }}",
            "{{ 'a' in 'cat' }} {{ 1 in [1, 2] }} {{ 'x' not in {'x': 1} }} {{ 1 < 2 < 3 }} {{ 1 < 3 < 2 }} {{ 'a' in 'b' in 'c' }}",
            "{% set x %}captured {{ 1 + 1 }}{% endset %}[{{ x }}]{% filter upper %}shout {{ 'it' }}{% endfilter %}{% set y | trim %}  t  {% endset %}{{ y }}",
            "{% for x in [3, 1, 2]|sort %}{{ loop.index }}:{{ x }}{{ loop.cycle('a', 'b') }}{% if not loop.last %},{% endif %}{% else %}none{% endfor %}",
            "{% set ns = namespace(s='', n=0) %}{% for i in range(5) %}{% set ns.s = ns.s ~ i %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.s }} {{ ns.n }}",
            "{{ [1, 2, 3]|join(', ') }} {{ 'abc'|join('-') }} {{ 'a-b-c'|replace('-', '+') }} {{ 'ab'|replace('', '.') }} {{ 'a\nb'|indent(2) }} {{ 'a\nb'|indent(width=3, first=true) }} {{ '%s=%d|%5.1f|%-3s'|format('x', 4, 2.25, 'y') }} {{ '%(k)s'|format({'k': 1}) }}",
            "{{ {'b': 1, 'a': [1, 'x']}|tojson }} {{ {'a': 1}|tojson(indent=2) }} {{ [1, 2]|tojson(true) }} {{ \"<&>'\"|tojson }}",
            "{{ [1, 2, 3, 4, 5]|batch(2)|list }} {{ [1, 2, 3, 4, 5]|batch(2, 0)|list }} {{ [1, 2, 3, 4, 5]|slice(2, 0)|list }} {{ [1]|chain([2], [3])|list }} {{ 'abc'|list }}",
            "{{ 'a b  c'|split }} {{ 'a,b'|split(',') }} {{ 'a,b,c'|split(',', 1) }} {{ 'ab'|split('') }} {{ 'a\nb'|lines }}",
            "{{ 42|string }} {{ [1]|string }} {{ {'a': 1}|pprint }} {{ '  x '|trim }} {{ 'xax'|trim('x') }} {{ 'x'|upper }}{{ 'X'|lower }}{{ 'ab cd'|title }}{{ 'ab'|capitalize }}{{ '<b>'|escape }}{{ '<b>'|e }}{{ '<b>'|safe }}",
            "{{ [1, 2, 3]|select('odd')|list }} {{ messages|selectattr('role', 'equalto', 'user')|map(attribute='content')|join('|') }} {{ messages|rejectattr('role', 'eq', 'user')|list|length }} {{ [1, 2, 3]|reject('even')|list }} {{ ['a', 'B']|map('upper')|list }}",
            "{{ [3, 1]|reverse|list }} {{ [1, 1, 2]|unique|list }} {{ {'b': 1, 'a': 2}|dictsort }} {{ {'a': 1}|items|list }} {{ [1, 2]|zip(['a', 'b'])|list }} {{ messages|groupby('role')|length }} {{ [3, 1]|sort(reverse=true) }}",
            "{{ 'abc' is startingwith('a') }} {{ 'abc' is endingwith('bc') }} {{ 1 is in([1]) }} {{ 'b' is in('abc') }} {{ dict(a=1, b=[2]) }} {{ namespace(a=1).a }} {{ dict({'x': 1}, y=2)|length }}",
            "{{ range(3)|list }} {{ range(1, 10, 4)|list }} {{ range(5, 0, -2)|list }} {% for i in range(2) %}{{ i }}{% endfor %}",
            "{% autoescape true %}{{ '<x>' }}{{ '<y>'|safe }}{{ ['<']|join(',') }}{{ '<'|replace('<', '>') }}{{ '%s'|format('<') }}{% set c %}<{{ '&' }}{% endset %}{{ c }}{% endautoescape %}",
            "{% for x in [1, [2, [3]]] recursive %}{% if x is sequence %}[{{ loop(x) }}]{% else %}{{ x }}{% endif %}{% endfor %}",
            "{% with a = 1, b = [2] %}{{ a }}{{ b + b }}{% endwith %}{% set xs = [1, 4] %}{{ range(*xs)|list }} {{ dict(**{'k': 1}) }}",
            "{{ (messages|last).content }} {{ messages[0]['content'] }} {{ undefined_thing is defined }} {{ (none or 'y') ~ (0 and 'z') }} {{ [messages|length, 'x'] }} {{ {'n': messages|length} }}",
            "{{ 7 // 2 }} {{ 7 % 3 }} {{ 2 ** 10 }} {{ -3 }} {{ 10 / 4 }} {{ 'a' if 1 else 'b' }} {{ not 1 }}",
        ];
        let chat = conversation(3);
        for src in snippets {
            let want = plain(src, &chat, true);
            assert!(want.is_ok(), "{src}: {want:?}");
            assert_eq!(guarded(src, &chat, true), want, "{src}");
        }
        for src in [
            "{{ 'a' + 1 }}",
            "{{ 'a' * 'b' }}",
            "{{ [1] + 'a' }}",
            "{{ 'a' - 1 }}",
        ] {
            let (want, got) = (plain(src, &chat, true), guarded(src, &chat, true));
            assert!(want.is_err() && got.is_err(), "{src}: {want:?} {got:?}");
        }
    }

    const LLAMA3: &str = "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}";
    const ZEPHYR: &str = "{% for message in messages %}\n{% if message['role'] == 'user' %}\n{{ '<|user|>\n' + message['content'] + eos_token }}\n{% elif message['role'] == 'system' %}\n{{ '<|system|>\n' + message['content'] + eos_token }}\n{% elif message['role'] == 'assistant' %}\n{{ '<|assistant|>\n'  + message['content'] + eos_token }}\n{% endif %}\n{% if loop.last and add_generation_prompt %}\n{{ '<|assistant|>' }}\n{% endif %}\n{% endfor %}";
    const PHI3: &str = "{% for message in messages %}{% if message['role'] == 'system' %}{{'<|system|>\n' + message['content'] + '<|end|>\n'}}{% elif message['role'] == 'user' %}{{'<|user|>\n' + message['content'] + '<|end|>\n'}}{% elif message['role'] == 'assistant' %}{{'<|assistant|>\n' + message['content'] + '<|end|>\n'}}{% endif %}{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% else %}{{ eos_token }}{% endif %}";
    /// Mistral-style: the system prompt folded into the first user turn, built
    /// up in a namespace and `{% set %}` blocks.
    const MISTRAL_LIKE: &str = "{%- set ns = namespace(system='', out=[]) %}{%- for m in messages if m.role == 'system' %}{%- set ns.system = ns.system ~ m.content|trim ~ '\n\n' %}{%- endfor %}{{ bos_token }}{%- for m in messages|rejectattr('role', 'equalto', 'system') %}{%- if (m.role == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('roles must alternate') }}{%- endif %}{%- if m.role == 'user' %}{%- set turn %}[INST] {% if loop.first %}{{ ns.system }}{% endif %}{{ m.content|trim }} [/INST]{% endset %}{{ turn }}{%- set ns.out = ns.out + [turn|length] %}{%- else %}{{ ' ' ~ m.content|trim ~ eos_token }}{%- endif %}{%- endfor %}{#- {{ ns.out|tojson }} #}";

    /// Real templates render as with plain minijinja, short and long chats
    /// (5000 messages stay well within the fuel and the budget).
    #[test]
    fn real_templates_render_like_minijinja() {
        for src in [SMOLLM2, LLAMA3, ZEPHYR, PHI3, MISTRAL_LIKE] {
            for n in [1, 2, 7, 5000] {
                let chat = conversation(n);
                for agp in [false, true] {
                    let want = plain(src, &chat, agp);
                    assert!(want.is_ok() || src == MISTRAL_LIKE, "{want:?}");
                    assert_eq!(guarded(src, &chat, agp), want, "{src} ({n} messages)");
                }
            }
            // A chat near the output cap: the budget leaves it room.
            let big: Vec<Message> = (0..70)
                .map(|i| {
                    let role = if i % 2 == 0 { "user" } else { "assistant" };
                    Message::new(role, format!("{i} {}", "word ".repeat(20_000)))
                })
                .collect();
            let want = plain(src, &big, true).unwrap();
            assert!(want.len() > 7_000_000 && want.len() < MAX_RENDERED);
            assert_eq!(guarded(src, &big, true), Ok(want), "{src} (7 MB)");
        }
    }

    /// minijinja folds constants as it compiles: a constant past [`MAX_VALUE`]
    /// is refused before it is built; small ones still fold.
    #[test]
    fn folded_constants_are_checked() {
        for src in [
            "{{ 'x' * 100000000 }}",
            "{{ ('x' * 5000000) ~ ('x' * 5000000) }}",
            "{{ ([1] * 1000000000000) == ([1] * 1000000000000) }}",
            "{{ ['xxxxxxxx'] * (1000 * 1000 * 1000) }}",
            "{{ 'x' * (2 ** 40) }}",
            "{{ 'x' * (10 / 0.000001) }}",
        ] {
            let e = ChatTemplate::named("tokenizer.chat_template", src, "", "")
                .err()
                .unwrap_or_else(|| panic!("{src}: accepted"));
            assert!(
                matches!(&e, ModelError::Template { name, msg } if name == "tokenizer.chat_template" && msg.contains("constant")),
                "{src}: {e}"
            );
        }
        let t = ChatTemplate::new("{{ '=' * 80 }}{{ 'a' ~ 'b' }}{{ [0] * 3 }}", "", "").unwrap();
        assert_eq!(
            t.render(&[], false).unwrap(),
            format!("{}ab[0, 0, 0]", "=".repeat(80))
        );
        let deep = format!("{{{{ 'a'{} }}}}", " ~ 'a'".repeat(fold::MAX_DEPTH));
        assert!(ChatTemplate::new(&deep, "", "").is_err());
    }

    /// Near misses of the nesting cases of `tests/chat_limits.rs`: values
    /// nested a few levels, up to the cap, and a list holding a namespace
    /// that is assigned to afterwards (at most twice the cap) render, print,
    /// serialize and compare.
    #[test]
    fn nested_values_within_the_cap_render() {
        let chat = [Message::new("user", "hi")];
        let render = |src: &str| {
            ChatTemplate::new(src, "", "")
                .and_then(|t| t.render(&chat, false))
                .unwrap_or_else(|e| panic!("{src}: {e}"))
        };
        assert_eq!(
            render("{% set ns = namespace(l=[]) %}{% for i in range(3) %}{% set ns.l = [ns.l, i] %}{% endfor %}{{ ns.l }} {{ {'a': {'b': [1, {'c': 2}]}}|tojson }}"),
            "[[[[], 0], 1], 2] {\"a\":{\"b\":[1,{\"c\":2}]}}"
        );
        let deep = format!(
            "{{% set ns = namespace(l=1) %}}{{% for i in range({MAX_DEPTH}) %}}{{% set ns.l = [ns.l] %}}{{% endfor %}}"
        );
        let at_cap = render(&format!("{deep}{{{{ ns.l }}}}"));
        let want = format!("{}1{}", "[".repeat(MAX_DEPTH), "]".repeat(MAX_DEPTH));
        assert_eq!(at_cap, want);
        // `a` at depth MAX_DEPTH, then given a value MAX_DEPTH deep.
        let n = MAX_DEPTH - 1;
        let twice = format!(
            "{deep}{{% set a = namespace() %}}{{% set l = a %}}{}{{% set a.x = ns.l %}}{{{{ l|tojson|length }}}} {{{{ l == l }}}} {{{{ (l ~ '')|length }}}} {{{{ l }}}}",
            "{% set l = [l] %}".repeat(n),
        );
        let out = render(&twice);
        let printed = format!("{}{{\"x\": {want}}}{}", "[".repeat(n), "]".repeat(n));
        assert!(out.contains(" True "), "{out}");
        assert!(out.ends_with(&printed), "{out}");
    }
}
