//! The formats that are one loop over the messages with fixed strings: a
//! [`Table`] a format. A [`Turn::Tagged`] format writes each message's role
//! between two strings (`<|im_start|>role\n…`); a [`Turn::Rows`] format
//! wraps each message's content in its role's own strings (`USER: …\n`).

use super::{trim, Message};

/// `(role, before, after)`: a message in `role` is written
/// `{before}{content}{after}`; `"*"` stands for every other role.
type Row = (&'static str, &'static str, &'static str);

/// How a [`Table`] writes one message.
#[derive(Clone, Copy)]
enum Turn {
    /// `{open}{role}{sep}{content}{close}`, the role as the message spells
    /// it.
    Tagged {
        open: &'static str,
        sep: &'static str,
        close: &'static str,
    },
    /// `{before}{content}{after}`, the strings of the first row naming the
    /// message's role (or `"*"`, last); a message in a role no row names is
    /// left out.
    Rows(&'static [Row]),
}

/// A format: `lead`, then each message as `turn` says, then `generation`
/// when the generation prompt is asked for.
pub(super) struct Table {
    lead: &'static str,
    turn: Turn,
    generation: &'static str,
    /// The contents trimmed (llama.cpp's `trim`).
    trim: bool,
}

impl Table {
    /// A [`Turn::Tagged`] format.
    const fn tagged(
        open: &'static str,
        sep: &'static str,
        close: &'static str,
        generation: &'static str,
    ) -> Table {
        Table::new(Turn::Tagged { open, sep, close }, generation)
    }

    /// A [`Turn::Rows`] format.
    const fn rows(rows: &'static [Row], generation: &'static str) -> Table {
        Table::new(Turn::Rows(rows), generation)
    }

    const fn new(turn: Turn, generation: &'static str) -> Table {
        Table {
            lead: "",
            turn,
            generation,
            trim: false,
        }
    }

    /// `lead` written once, before the messages.
    const fn lead(self, lead: &'static str) -> Table {
        Table { lead, ..self }
    }

    /// The contents trimmed.
    const fn trimmed(self) -> Table {
        Table { trim: true, ..self }
    }

    pub(super) fn render(&self, messages: &[Message], add: bool) -> String {
        let mut s = self.lead.to_string();
        for m in messages {
            let c = if self.trim {
                trim(&m.content)
            } else {
                &m.content
            };
            match self.turn {
                Turn::Tagged { open, sep, close } => {
                    s += &format!("{open}{}{sep}{c}{close}", m.role);
                }
                Turn::Rows(rows) => {
                    let row = rows.iter().find(|&&(r, ..)| r == m.role || r == "*");
                    if let Some((_, before, after)) = row {
                        s += &format!("{before}{c}{after}");
                    }
                }
            }
        }
        if add {
            s += self.generation;
        }
        s
    }
}

pub(super) const CHATML: Table = Table::tagged(
    "<|im_start|>",
    "\n",
    "<|im_end|>\n",
    "<|im_start|>assistant\n",
);
pub(super) const CHATGLM3: Table =
    Table::tagged("<|", "|>\n ", "", "<|assistant|>").lead("[gMASK]sop");
pub(super) const CHATGLM4: Table =
    Table::tagged("<|", "|>\n", "", "<|assistant|>\n").lead("[gMASK]<sop>");
pub(super) const FALCON3: Table = Table::tagged("<|", "|>\n", "\n", "<|assistant|>\n");
pub(super) const GLMEDGE: Table = Table::tagged("<|", "|>\n", "", "<|assistant|>");
pub(super) const LLAMA3: Table = Table::tagged(
    "<|start_header_id|>",
    "<|end_header_id|>\n\n",
    "<|eot_id|>",
    "<|start_header_id|>assistant<|end_header_id|>\n\n",
)
.trimmed();
pub(super) const LLAMA4: Table = Table::tagged(
    "<|header_start|>",
    "<|header_end|>\n\n",
    "<|eot|>",
    "<|header_start|>assistant<|header_end|>\n\n",
)
.trimmed();
pub(super) const MEGREZ: Table = Table::tagged(
    "<|role_start|>",
    "<|role_end|>",
    "<|turn_end|>",
    "<|role_start|>assistant<|role_end|>",
);
pub(super) const PHI3: Table = Table::tagged("<|", "|>\n", "<|end|>\n", "<|assistant|>\n");
pub(super) const PHI4: Table = Table::tagged(
    "<|im_start|>",
    "<|im_sep|>",
    "<|im_end|>",
    "<|im_start|>assistant<|im_sep|>",
);
pub(super) const SOLAR_OPEN: Table =
    Table::tagged("<|begin|>", "<|content|>", "<|end|>", "<|begin|>assistant");
pub(super) const ZEPHYR: Table = Table::tagged("<|", "|>\n", "<|endoftext|>\n", "<|assistant|>\n");

const DEEPSEEK_EOS: &str = "<｜end▁of▁sentence｜>";
const END_OF_TURN: &str = "<|END_OF_TURN_TOKEN|>";

pub(super) const COMMAND_R: Table = Table::rows(
    &[
        (
            "system",
            "<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|>",
            END_OF_TURN,
        ),
        ("user", "<|START_OF_TURN_TOKEN|><|USER_TOKEN|>", END_OF_TURN),
        (
            "assistant",
            "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>",
            END_OF_TURN,
        ),
    ],
    "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>",
)
.trimmed();
pub(super) const DEEPSEEK: Table = Table::rows(
    &[
        ("system", "", ""),
        ("user", "### Instruction:\n", "\n"),
        ("assistant", "### Response:\n", "\n<|EOT|>\n"),
    ],
    "### Response:\n",
);
pub(super) const DEEPSEEK2: Table = Table::rows(
    &[
        ("system", "", "\n\n"),
        ("user", "User: ", "\n\n"),
        ("assistant", "Assistant: ", DEEPSEEK_EOS),
    ],
    "Assistant:",
);
pub(super) const DEEPSEEK3: Table = Table::rows(
    &[
        ("system", "", "\n\n"),
        ("user", "<｜User｜>", ""),
        ("assistant", "<｜Assistant｜>", DEEPSEEK_EOS),
    ],
    "<｜Assistant｜>",
);
pub(super) const EXAONE3: Table = Table::rows(
    &[
        ("system", "[|system|]", "[|endofturn|]\n"),
        ("user", "[|user|]", "\n"),
        ("assistant", "[|assistant|]", "[|endofturn|]\n"),
    ],
    "[|assistant|]",
)
.trimmed();
pub(super) const EXAONE4: Table = Table::rows(
    &[
        ("system", "[|system|]", "[|endofturn|]\n"),
        ("user", "[|user|]", "\n"),
        ("assistant", "[|assistant|]", "[|endofturn|]\n"),
        ("tool", "[|tool|]", "[|endofturn|]\n"),
    ],
    "[|assistant|]",
)
.trimmed();
pub(super) const EXAONE_MOE: Table = Table::rows(
    &[
        ("system", "<|system|>\n", "<|endofturn|>\n"),
        ("user", "<|user|>\n", "<|endofturn|>\n"),
        ("assistant", "<|assistant|>\n", "<|endofturn|>\n"),
        ("tool", "<|tool|>\n", "<|endofturn|>\n"),
    ],
    "<|assistant|>\n",
)
.trimmed();
pub(super) const HUNYUAN_MOE: Table = Table::rows(
    &[
        ("system", "<|startoftext|>", "<|extra_4|>"),
        ("assistant", "", "<|eos|>"),
        ("*", "<|startoftext|>", "<|extra_0|>"),
    ],
    "",
);
pub(super) const KIMI_K2: Table = Table::rows(
    &[
        ("system", "<|im_system|>system<|im_middle|>", "<|im_end|>"),
        ("user", "<|im_user|>user<|im_middle|>", "<|im_end|>"),
        (
            "assistant",
            "<|im_assistant|>assistant<|im_middle|>",
            "<|im_end|>",
        ),
        ("tool", "<|im_system|>tool<|im_middle|>", "<|im_end|>"),
        ("*", "", "<|im_end|>"),
    ],
    "<|im_assistant|>assistant<|im_middle|>",
);
pub(super) const MISTRAL_V7: Table = Table::rows(
    &[
        ("system", "[SYSTEM_PROMPT] ", "[/SYSTEM_PROMPT]"),
        ("user", "[INST] ", "[/INST]"),
        ("*", " ", "</s>"),
    ],
    "",
);
pub(super) const MISTRAL_V7_TEKKEN: Table = Table::rows(
    &[
        ("system", "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]"),
        ("user", "[INST]", "[/INST]"),
        ("*", "", "</s>"),
    ],
    "",
);
pub(super) const SMOLVLM: Table = Table::rows(
    &[
        ("system", "", "\n\n"),
        ("user", "User: ", "<end_of_utterance>\n"),
        ("*", "Assistant: ", "<end_of_utterance>\n"),
    ],
    "Assistant:",
)
.lead("<|im_start|>");
pub(super) const VICUNA: Table = Table::rows(
    &[
        ("system", "", "\n\n"),
        ("user", "USER: ", "\n"),
        ("assistant", "ASSISTANT: ", "</s>\n"),
    ],
    "ASSISTANT:",
);
pub(super) const VICUNA_ORCA: Table = Table::rows(
    &[
        ("system", "SYSTEM: ", "\n"),
        ("user", "USER: ", "\n"),
        ("assistant", "ASSISTANT: ", "</s>\n"),
    ],
    "ASSISTANT:",
);
pub(super) const YANDEX: Table = Table::rows(
    &[
        ("user", " Пользователь: ", "\n\n"),
        ("assistant", " Ассистент: ", "\n\n"),
    ],
    " Ассистент:[SEP]",
);
