//! llama.cpp's built-in chat templates: the formats `--chat-template NAME`
//! selects (`llm_chat_apply_template`, `src/llama-chat.cpp`), rendered
//! byte for byte as llama.cpp renders them. They are code, not Jinja: each
//! writes its special tokens itself (the model's BOS/EOS texts play no
//! part), and some ignore the generation prompt flag as llama.cpp does
//! (the Mistral and Llama 2 formats end on `[/INST]` anyway; Orion, MiniCPM,
//! RWKV World, Hunyuan and DeepSeek-OCR have no assistant prefix).
//!
//! "Trim" below is llama.cpp's: the C `isspace` set (space, `\t`, `\n`,
//! `\v`, `\f`, `\r`) at both ends, not Unicode whitespace. Upper-casing (the
//! OpenChat role, the Bailing roles) is ASCII only, as C's `toupper` in the
//! "C" locale.
//!
//! The expected outputs are llama.cpp's: its test table
//! (`tests/data/chat/builtin/test_chat_template_cases.json`) and its
//! renderer compiled and run on every name (`renderings.json`), both made by
//! `scripts/builtin_chat_template_goldens.py`.
//!
//! The formats that are one loop over the messages with fixed strings are
//! tables (`tables.rs`); the `[INST]` formats of Llama 2 and Mistral v1/v3
//! (`inst.rs`) and the formats with logic of their own (`custom.rs`) are
//! functions.

use super::Message;

mod custom;
mod inst;
mod tables;

/// One of llama.cpp's built-in chat templates (the names of its
/// `LLM_CHAT_TEMPLATES` table, llama.cpp 0c1e57098).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Builtin {
    /// `bailing`: Ling: `<role>HUMAN</role>`, other roles upper-cased.
    Bailing,
    /// `bailing-think`: as `bailing`, the generation prompt opens `<think>`.
    BailingThink,
    /// `bailing2`: Ling 2.0: turns end `<|role_end|>`; a default system
    /// turn when the chat has none.
    Bailing2,
    /// `chatglm3`: ChatGLM3-6B (`[gMASK]sop`).
    Chatglm3,
    /// `chatglm4`: GLM-4 (`[gMASK]<sop>`).
    Chatglm4,
    /// `chatml`: `<|im_start|>role\n…<|im_end|>\n` (the fallback when a
    /// model has no template).
    Chatml,
    /// `command-r`: Cohere Command R (trimmed turns).
    CommandR,
    /// `deepseek`: DeepSeek Coder (`### Instruction:` / `### Response:`).
    Deepseek,
    /// `deepseek-ocr`: the contents only, no markup.
    DeepseekOcr,
    /// `deepseek2`: DeepSeek-V2 (`User:` / `Assistant:`).
    Deepseek2,
    /// `deepseek3`: DeepSeek-V3 (`<｜User｜>` / `<｜Assistant｜>`).
    Deepseek3,
    /// `exaone-moe`: EXAONE MoE (`<|role|>\n…<|endofturn|>`).
    ExaoneMoe,
    /// `exaone3`: EXAONE 3 (`[|role|]`).
    Exaone3,
    /// `exaone4`: EXAONE 4 (as `exaone3`, with tool turns).
    Exaone4,
    /// `falcon3`: Falcon 3 (`<|role|>\n…\n`).
    Falcon3,
    /// `gemma`: Gemma (`<start_of_turn>`; system text merged into the next
    /// user turn; `assistant` is `model`).
    Gemma,
    /// `gigachat`: GigaChat.
    Gigachat,
    /// `glmedge`: GLM-Edge (`<|role|>\n…`).
    Glmedge,
    /// `gpt-oss`: OpenAI gpt-oss (Harmony markup).
    GptOss,
    /// `granite`: IBM Granite 3.x.
    Granite,
    /// `granite-4.0`: IBM Granite 4.0.
    Granite40,
    /// `granite-4.1`: IBM Granite 4.1.
    Granite41,
    /// `grok-2`: Grok 2.
    Grok2,
    /// `hunyuan-dense`: Hunyuan dense models.
    HunyuanDense,
    /// `hunyuan-moe`: Hunyuan-A13B.
    HunyuanMoe,
    /// `hunyuan-vl`: HunyuanOCR / HunyuanVL.
    HunyuanVl,
    /// `kimi-k2`: Kimi K2.
    KimiK2,
    /// `llama2`: Llama 2 without `<<SYS>>` (the system text opens the first
    /// `[INST]`).
    Llama2,
    /// `llama2-sys`: Llama 2 with a `<<SYS>>` block.
    Llama2Sys,
    /// `llama2-sys-bos`: as `llama2-sys`, later turns open `<s>[INST]`.
    Llama2SysBos,
    /// `llama2-sys-strip`: as `llama2-sys`, contents trimmed.
    Llama2SysStrip,
    /// `llama3`: Llama 3 (`<|start_header_id|>`, trimmed contents).
    Llama3,
    /// `llama4`: Llama 4 (`<|header_start|>`, trimmed contents).
    Llama4,
    /// `megrez`: Megrez.
    Megrez,
    /// `minicpm`: MiniCPM (`<用户>…<AI>`).
    Minicpm,
    /// `mistral-v1`: Mistral v1 (` [INST] … [/INST]`).
    MistralV1,
    /// `mistral-v3`: Mistral v3 (`[INST] …[/INST]`, answers trimmed).
    MistralV3,
    /// `mistral-v3-tekken`: Mistral v3 Tekken (`[INST]…[/INST]`).
    MistralV3Tekken,
    /// `mistral-v7`: Mistral v7 (`[SYSTEM_PROMPT] …[/SYSTEM_PROMPT]`).
    MistralV7,
    /// `mistral-v7-tekken`: Mistral v7 Tekken (no spaces after the tags).
    MistralV7Tekken,
    /// `monarch`: AlphaMonarch (`<s>` before every turn but the first).
    Monarch,
    /// `openchat`: OpenChat 3.5 (`GPT4 Correct User:`).
    Openchat,
    /// `orion`: Orion (`Human:` / `Assistant: </s>`).
    Orion,
    /// `pangu-embedded`: openPangu Embedded (`[unused9]…[unused10]`).
    PanguEmbedded,
    /// `phi3`: Phi-3 (`<|role|>\n…<|end|>\n`).
    Phi3,
    /// `phi4`: Phi-4 (`<|im_start|>role<|im_sep|>`).
    Phi4,
    /// `rwkv-world`: RWKV World (`User:` / `Assistant:`, trimmed).
    RwkvWorld,
    /// `seed_oss`: Seed-OSS (`<seed:bos>` / `<seed:eos>`).
    SeedOss,
    /// `smolvlm`: SmolVLM (`User:` / `Assistant:` with `<end_of_utterance>`).
    Smolvlm,
    /// `solar-open`: Solar Open (`<|begin|>role<|content|>…<|end|>`).
    SolarOpen,
    /// `vicuna`: Vicuna 1.1 (`USER:` / `ASSISTANT:`).
    Vicuna,
    /// `vicuna-orca`: Orca-Vicuna (as `vicuna`, with `SYSTEM:`).
    VicunaOrca,
    /// `yandex`: YandexGPT.
    Yandex,
    /// `zephyr`: Zephyr (`<|role|>\n…<|endoftext|>\n`).
    Zephyr,
}

/// Every built-in template with its name, in name order (as llama.cpp lists them).
const TABLE: [(&str, Builtin); 54] = [
    ("bailing", Builtin::Bailing),
    ("bailing-think", Builtin::BailingThink),
    ("bailing2", Builtin::Bailing2),
    ("chatglm3", Builtin::Chatglm3),
    ("chatglm4", Builtin::Chatglm4),
    ("chatml", Builtin::Chatml),
    ("command-r", Builtin::CommandR),
    ("deepseek", Builtin::Deepseek),
    ("deepseek-ocr", Builtin::DeepseekOcr),
    ("deepseek2", Builtin::Deepseek2),
    ("deepseek3", Builtin::Deepseek3),
    ("exaone-moe", Builtin::ExaoneMoe),
    ("exaone3", Builtin::Exaone3),
    ("exaone4", Builtin::Exaone4),
    ("falcon3", Builtin::Falcon3),
    ("gemma", Builtin::Gemma),
    ("gigachat", Builtin::Gigachat),
    ("glmedge", Builtin::Glmedge),
    ("gpt-oss", Builtin::GptOss),
    ("granite", Builtin::Granite),
    ("granite-4.0", Builtin::Granite40),
    ("granite-4.1", Builtin::Granite41),
    ("grok-2", Builtin::Grok2),
    ("hunyuan-dense", Builtin::HunyuanDense),
    ("hunyuan-moe", Builtin::HunyuanMoe),
    ("hunyuan-vl", Builtin::HunyuanVl),
    ("kimi-k2", Builtin::KimiK2),
    ("llama2", Builtin::Llama2),
    ("llama2-sys", Builtin::Llama2Sys),
    ("llama2-sys-bos", Builtin::Llama2SysBos),
    ("llama2-sys-strip", Builtin::Llama2SysStrip),
    ("llama3", Builtin::Llama3),
    ("llama4", Builtin::Llama4),
    ("megrez", Builtin::Megrez),
    ("minicpm", Builtin::Minicpm),
    ("mistral-v1", Builtin::MistralV1),
    ("mistral-v3", Builtin::MistralV3),
    ("mistral-v3-tekken", Builtin::MistralV3Tekken),
    ("mistral-v7", Builtin::MistralV7),
    ("mistral-v7-tekken", Builtin::MistralV7Tekken),
    ("monarch", Builtin::Monarch),
    ("openchat", Builtin::Openchat),
    ("orion", Builtin::Orion),
    ("pangu-embedded", Builtin::PanguEmbedded),
    ("phi3", Builtin::Phi3),
    ("phi4", Builtin::Phi4),
    ("rwkv-world", Builtin::RwkvWorld),
    ("seed_oss", Builtin::SeedOss),
    ("smolvlm", Builtin::Smolvlm),
    ("solar-open", Builtin::SolarOpen),
    ("vicuna", Builtin::Vicuna),
    ("vicuna-orca", Builtin::VicunaOrca),
    ("yandex", Builtin::Yandex),
    ("zephyr", Builtin::Zephyr),
];

/// llama.cpp's `trim`: the C `isspace` characters off both ends.
fn trim(s: &str) -> &str {
    s.trim_matches(|c| matches!(c, ' ' | '\t' | '\n' | '\x0b' | '\x0c' | '\r'))
}

/// ASCII upper case, as C's `toupper` byte by byte in the "C" locale.
fn upper(s: &str) -> String {
    s.to_ascii_uppercase()
}

impl Builtin {
    /// Every built-in template, in name order.
    pub fn all() -> impl Iterator<Item = Builtin> {
        TABLE.iter().map(|&(_, b)| b)
    }

    /// The names, in order, comma-separated (for help and error texts).
    pub fn names() -> String {
        TABLE.iter().map(|&(n, _)| n).collect::<Vec<_>>().join(", ")
    }

    /// The template called `name` (llama.cpp's spelling, exactly), if any.
    pub fn from_name(name: &str) -> Option<Builtin> {
        TABLE.iter().find(|&&(n, _)| n == name).map(|&(_, b)| b)
    }

    /// The name `--chat-template` takes.
    pub fn name(self) -> &'static str {
        TABLE
            .iter()
            .find(|&&(_, b)| b == self)
            .map_or("", |&(n, _)| n)
    }

    /// `messages` in this format, ending with the assistant prefix when
    /// `add_generation_prompt` (where the format has one), exactly as
    /// llama.cpp's `llm_chat_apply_template`. Roles are free text as there:
    /// a format prints a role it does not know, or leaves its message out,
    /// as llama.cpp does.
    pub fn render(self, messages: &[Message], add_generation_prompt: bool) -> String {
        use Builtin as B;
        let (m, add) = (messages, add_generation_prompt);
        match self {
            // `{open}{role}{sep}{content}{close}` a message
            B::Chatml => tables::CHATML.render(m, add),
            B::Chatglm3 => tables::CHATGLM3.render(m, add),
            B::Chatglm4 => tables::CHATGLM4.render(m, add),
            B::Falcon3 => tables::FALCON3.render(m, add),
            B::Glmedge => tables::GLMEDGE.render(m, add),
            B::Llama3 => tables::LLAMA3.render(m, add),
            B::Llama4 => tables::LLAMA4.render(m, add),
            B::Megrez => tables::MEGREZ.render(m, add),
            B::Phi3 => tables::PHI3.render(m, add),
            B::Phi4 => tables::PHI4.render(m, add),
            B::SolarOpen => tables::SOLAR_OPEN.render(m, add),
            B::Zephyr => tables::ZEPHYR.render(m, add),
            // each role's own strings around the content
            B::CommandR => tables::COMMAND_R.render(m, add),
            B::Deepseek => tables::DEEPSEEK.render(m, add),
            B::Deepseek2 => tables::DEEPSEEK2.render(m, add),
            B::Deepseek3 => tables::DEEPSEEK3.render(m, add),
            B::Exaone3 => tables::EXAONE3.render(m, add),
            B::Exaone4 => tables::EXAONE4.render(m, add),
            B::ExaoneMoe => tables::EXAONE_MOE.render(m, add),
            B::HunyuanMoe => tables::HUNYUAN_MOE.render(m, add),
            B::KimiK2 => tables::KIMI_K2.render(m, add),
            B::MistralV7 => tables::MISTRAL_V7.render(m, add),
            B::MistralV7Tekken => tables::MISTRAL_V7_TEKKEN.render(m, add),
            B::Smolvlm => tables::SMOLVLM.render(m, add),
            B::Vicuna => tables::VICUNA.render(m, add),
            B::VicunaOrca => tables::VICUNA_ORCA.render(m, add),
            B::Yandex => tables::YANDEX.render(m, add),
            // `[INST]` blocks opened and closed across the messages
            B::Llama2 | B::Llama2Sys | B::Llama2SysBos | B::Llama2SysStrip => inst::llama2(self, m),
            B::MistralV1 | B::MistralV3 | B::MistralV3Tekken => inst::mistral(self, m),
            // the rest, each its own
            B::Bailing => custom::bailing(m, add, false),
            B::BailingThink => custom::bailing(m, add, true),
            B::Bailing2 => custom::bailing2(m, add),
            B::DeepseekOcr => m.iter().map(|m| m.content.as_str()).collect(),
            B::Gemma => custom::gemma(m, add),
            B::Gigachat => custom::gigachat(m, add),
            B::GptOss => custom::gpt_oss(m, add),
            B::Granite => custom::granite(m, add),
            B::Granite40 | B::Granite41 => custom::granite4(m, add),
            B::Grok2 => custom::grok2(m, add),
            B::HunyuanDense => custom::hunyuan_dense(m),
            B::HunyuanVl => custom::hunyuan_vl(m),
            B::Minicpm => custom::minicpm(m),
            B::Monarch => custom::monarch(m, add),
            B::Openchat => custom::openchat(m, add),
            B::Orion => custom::orion(m),
            B::PanguEmbedded => custom::pangu_embedded(m, add),
            B::RwkvWorld => custom::rwkv_world(m),
            B::SeedOss => custom::seed_oss(m, add),
        }
    }
}

impl std::fmt::Display for Builtin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_are_sorted() {
        let names: Vec<&str> = Builtin::all().map(Builtin::name).collect();
        assert_eq!(names.len(), 54);
        let mut sorted = names.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(names, sorted, "name order, no duplicates");
        for b in Builtin::all() {
            assert_eq!(Builtin::from_name(b.name()), Some(b));
        }
        assert_eq!(Builtin::from_name("ChatML"), None);
        assert_eq!(Builtin::from_name("mistral"), None);
        assert!(Builtin::names().starts_with("bailing, bailing-think, "));
    }

    #[test]
    fn trim_is_c_isspace() {
        assert_eq!(trim(" \t\x0b\x0c\r\n a \n"), "a");
        assert_eq!(trim("\u{a0}a\u{3000}"), "\u{a0}a\u{3000}");
    }
}
