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

use super::Message;

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

const DEEPSEEK_EOS: &str = "<｜end▁of▁sentence｜>";
const HY_ASSISTANT: &str = "<｜hy_Assistant｜>";
const HY_USER: &str = "<｜hy_User｜>";
const HY_SYSTEM_END: &str = "<｜hy_place▁holder▁no▁3｜>";

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
        let add = add_generation_prompt;
        let mut s = String::new();
        match self {
            B::Chatml => {
                for m in messages {
                    s += &format!("<|im_start|>{}\n{}<|im_end|>\n", m.role, m.content);
                }
                if add {
                    s += "<|im_start|>assistant\n";
                }
            }
            B::MistralV7 | B::MistralV7Tekken => {
                let sp = if self == B::MistralV7 { " " } else { "" };
                for m in messages {
                    match m.role.as_str() {
                        "system" => {
                            s += &format!("[SYSTEM_PROMPT]{sp}{}[/SYSTEM_PROMPT]", m.content)
                        }
                        "user" => s += &format!("[INST]{sp}{}[/INST]", m.content),
                        _ => s += &format!("{sp}{}</s>", m.content),
                    }
                }
            }
            B::MistralV1 | B::MistralV3 | B::MistralV3Tekken => {
                let lead = if self == B::MistralV1 { " " } else { "" };
                let trail = if self == B::MistralV3Tekken { "" } else { " " };
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
                            let c = if self == B::MistralV3 {
                                trim(&m.content)
                            } else {
                                &m.content
                            };
                            s += &format!("{trail}{c}</s>");
                            inside = false;
                        }
                    }
                }
            }
            B::Llama2 | B::Llama2Sys | B::Llama2SysBos | B::Llama2SysStrip => {
                let sys_block = self != B::Llama2;
                let bos_inside = self == B::Llama2SysBos;
                let strip = self == B::Llama2SysStrip;
                let mut inside = true;
                s += "[INST] ";
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
            }
            B::Phi3 => {
                for m in messages {
                    s += &format!("<|{}|>\n{}<|end|>\n", m.role, m.content);
                }
                if add {
                    s += "<|assistant|>\n";
                }
            }
            B::Phi4 => {
                for m in messages {
                    s += &format!("<|im_start|>{}<|im_sep|>{}<|im_end|>", m.role, m.content);
                }
                if add {
                    s += "<|im_start|>assistant<|im_sep|>";
                }
            }
            B::Falcon3 => {
                for m in messages {
                    s += &format!("<|{}|>\n{}\n", m.role, m.content);
                }
                if add {
                    s += "<|assistant|>\n";
                }
            }
            B::Zephyr => {
                for m in messages {
                    s += &format!("<|{}|>\n{}<|endoftext|>\n", m.role, m.content);
                }
                if add {
                    s += "<|assistant|>\n";
                }
            }
            B::Monarch => {
                for (i, m) in messages.iter().enumerate() {
                    let bos = if i == 0 { "" } else { "<s>" };
                    s += &format!("{bos}{}\n{}</s>\n", m.role, m.content);
                }
                if add {
                    s += "<s>assistant\n";
                }
            }
            B::Gemma => {
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
            }
            B::Orion => {
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
            }
            B::Openchat => {
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
            }
            B::Vicuna | B::VicunaOrca => {
                for m in messages {
                    match m.role.as_str() {
                        "system" if self == B::VicunaOrca => {
                            s += &format!("SYSTEM: {}\n", m.content)
                        }
                        "system" => s += &format!("{}\n\n", m.content),
                        "user" => s += &format!("USER: {}\n", m.content),
                        "assistant" => s += &format!("ASSISTANT: {}</s>\n", m.content),
                        _ => {}
                    }
                }
                if add {
                    s += "ASSISTANT:";
                }
            }
            B::Deepseek => {
                for m in messages {
                    match m.role.as_str() {
                        "system" => s += &m.content,
                        "user" => s += &format!("### Instruction:\n{}\n", m.content),
                        "assistant" => s += &format!("### Response:\n{}\n<|EOT|>\n", m.content),
                        _ => {}
                    }
                }
                if add {
                    s += "### Response:\n";
                }
            }
            B::CommandR => {
                for m in messages {
                    let token = match m.role.as_str() {
                        "system" => "<|SYSTEM_TOKEN|>",
                        "user" => "<|USER_TOKEN|>",
                        "assistant" => "<|CHATBOT_TOKEN|>",
                        _ => continue,
                    };
                    s += &format!(
                        "<|START_OF_TURN_TOKEN|>{token}{}<|END_OF_TURN_TOKEN|>",
                        trim(&m.content)
                    );
                }
                if add {
                    s += "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>";
                }
            }
            B::Llama3 => {
                for m in messages {
                    s += &format!(
                        "<|start_header_id|>{}<|end_header_id|>\n\n{}<|eot_id|>",
                        m.role,
                        trim(&m.content)
                    );
                }
                if add {
                    s += "<|start_header_id|>assistant<|end_header_id|>\n\n";
                }
            }
            B::Chatglm3 => {
                s += "[gMASK]sop";
                for m in messages {
                    s += &format!("<|{}|>\n {}", m.role, m.content);
                }
                if add {
                    s += "<|assistant|>";
                }
            }
            B::Chatglm4 | B::Glmedge => {
                if self == B::Chatglm4 {
                    s += "[gMASK]<sop>";
                }
                for m in messages {
                    s += &format!("<|{}|>\n{}", m.role, m.content);
                }
                if add {
                    s += if self == B::Chatglm4 {
                        "<|assistant|>\n"
                    } else {
                        "<|assistant|>"
                    };
                }
            }
            B::Minicpm => {
                for m in messages {
                    if m.role == "user" {
                        s += &format!("<用户>{}<AI>", trim(&m.content));
                    } else {
                        s += trim(&m.content);
                    }
                }
            }
            B::Deepseek2 => {
                for m in messages {
                    match m.role.as_str() {
                        "system" => s += &format!("{}\n\n", m.content),
                        "user" => s += &format!("User: {}\n\n", m.content),
                        "assistant" => s += &format!("Assistant: {}{DEEPSEEK_EOS}", m.content),
                        _ => {}
                    }
                }
                if add {
                    s += "Assistant:";
                }
            }
            B::Deepseek3 => {
                for m in messages {
                    match m.role.as_str() {
                        "system" => s += &format!("{}\n\n", m.content),
                        "user" => s += &format!("<｜User｜>{}", m.content),
                        "assistant" => s += &format!("<｜Assistant｜>{}{DEEPSEEK_EOS}", m.content),
                        _ => {}
                    }
                }
                if add {
                    s += "<｜Assistant｜>";
                }
            }
            B::DeepseekOcr => {
                for m in messages {
                    s += &m.content;
                }
            }
            B::Exaone3 | B::Exaone4 => {
                for m in messages {
                    let c = trim(&m.content);
                    match m.role.as_str() {
                        "system" => s += &format!("[|system|]{c}[|endofturn|]\n"),
                        "user" => s += &format!("[|user|]{c}\n"),
                        "assistant" => s += &format!("[|assistant|]{c}[|endofturn|]\n"),
                        "tool" if self == B::Exaone4 => s += &format!("[|tool|]{c}[|endofturn|]\n"),
                        _ => {}
                    }
                }
                if add {
                    s += "[|assistant|]";
                }
            }
            B::ExaoneMoe => {
                for m in messages {
                    if matches!(m.role.as_str(), "system" | "user" | "assistant" | "tool") {
                        s += &format!("<|{}|>\n{}<|endofturn|>\n", m.role, trim(&m.content));
                    }
                }
                if add {
                    s += "<|assistant|>\n";
                }
            }
            B::RwkvWorld => {
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
            }
            B::Granite => {
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
            }
            B::Granite40 | B::Granite41 => {
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
            }
            B::Gigachat => {
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
                        "assistant" => {
                            s += &format!("assistant<|role_sep|>{}<|message_sep|>", m.content)
                        }
                        _ => {}
                    }
                }
                if add {
                    s += "assistant<|role_sep|>";
                }
            }
            B::Megrez => {
                for m in messages {
                    s += &format!(
                        "<|role_start|>{}<|role_end|>{}<|turn_end|>",
                        m.role, m.content
                    );
                }
                if add {
                    s += "<|role_start|>assistant<|role_end|>";
                }
            }
            B::Yandex => {
                for m in messages {
                    match m.role.as_str() {
                        "user" => s += &format!(" Пользователь: {}\n\n", m.content),
                        "assistant" => s += &format!(" Ассистент: {}\n\n", m.content),
                        _ => {}
                    }
                }
                if add {
                    s += " Ассистент:[SEP]";
                }
            }
            B::Bailing | B::BailingThink => {
                for m in messages {
                    let role = if m.role == "user" {
                        "HUMAN".to_string()
                    } else {
                        upper(&m.role)
                    };
                    s += &format!("<role>{role}</role>{}", m.content);
                }
                if add {
                    s += "<role>ASSISTANT</role>";
                    if self == B::BailingThink {
                        s += "<think>";
                    }
                }
            }
            B::Bailing2 => {
                if messages.first().is_none_or(|m| m.role != "system") {
                    s += "<role>SYSTEM</role>detailed thinking off<|role_end|>";
                }
                for m in messages {
                    let role = if m.role == "user" {
                        "HUMAN".to_string()
                    } else {
                        upper(&m.role)
                    };
                    s += &format!("<role>{role}</role>{}<|role_end|>", m.content);
                }
                if add {
                    s += "<role>ASSISTANT</role>";
                }
            }
            B::Llama4 => {
                for m in messages {
                    s += &format!(
                        "<|header_start|>{}<|header_end|>\n\n{}<|eot|>",
                        m.role,
                        trim(&m.content)
                    );
                }
                if add {
                    s += "<|header_start|>assistant<|header_end|>\n\n";
                }
            }
            B::Smolvlm => {
                s += "<|im_start|>";
                for m in messages {
                    match m.role.as_str() {
                        "system" => s += &format!("{}\n\n", m.content),
                        "user" => s += &format!("User: {}<end_of_utterance>\n", m.content),
                        _ => s += &format!("Assistant: {}<end_of_utterance>\n", m.content),
                    }
                }
                if add {
                    s += "Assistant:";
                }
            }
            B::HunyuanMoe => {
                for m in messages {
                    match m.role.as_str() {
                        "system" => s += &format!("<|startoftext|>{}<|extra_4|>", m.content),
                        "assistant" => s += &format!("{}<|eos|>", m.content),
                        _ => s += &format!("<|startoftext|>{}<|extra_0|>", m.content),
                    }
                }
            }
            B::GptOss => {
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
            }
            B::HunyuanDense => {
                for (i, m) in messages.iter().enumerate() {
                    if i == 0 && m.role == "system" {
                        s += &format!("{}{HY_SYSTEM_END}", m.content);
                    }
                    match m.role.as_str() {
                        "assistant" => {
                            s += &format!("{HY_ASSISTANT}{}<｜hy_place▁holder▁no▁2｜>", m.content)
                        }
                        "user" => s += &format!("{HY_USER}{}{HY_ASSISTANT}", m.content),
                        _ => {}
                    }
                }
            }
            B::HunyuanVl => {
                s += "<｜hy_begin▁of▁sentence｜>";
                for (i, m) in messages.iter().enumerate() {
                    match m.role.as_str() {
                        "system" if i == 0 => s += &format!("{}{HY_SYSTEM_END}", m.content),
                        "user" => s += &format!("{}{HY_USER}", m.content),
                        "assistant" => s += &format!("{}{HY_ASSISTANT}", m.content),
                        _ => {}
                    }
                }
            }
            B::KimiK2 => {
                for m in messages {
                    s += match m.role.as_str() {
                        "system" => "<|im_system|>system<|im_middle|>",
                        "user" => "<|im_user|>user<|im_middle|>",
                        "assistant" => "<|im_assistant|>assistant<|im_middle|>",
                        "tool" => "<|im_system|>tool<|im_middle|>",
                        _ => "",
                    };
                    s += &format!("{}<|im_end|>", m.content);
                }
                if add {
                    s += "<|im_assistant|>assistant<|im_middle|>";
                }
            }
            B::SeedOss => {
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
            }
            B::Grok2 => {
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
            }
            B::PanguEmbedded => {
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
            }
            B::SolarOpen => {
                for m in messages {
                    s += &format!("<|begin|>{}<|content|>{}<|end|>", m.role, m.content);
                }
                if add {
                    s += "<|begin|>assistant";
                }
            }
        }
        s
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
