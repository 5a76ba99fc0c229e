#!/usr/bin/env python3
"""Renders the families' chat templates as Hugging Face transformers does and
writes the results to crates/strata-models/tests/data/chat/goldens.json, for
crates/strata-models/tests/chat_templates.rs (strata's minijinja rendering
must be byte-identical).

    python3 scripts/chat_template_goldens.py      (from the repository root; needs jinja2)

The templates (tests/data/chat/templates/) are llama.cpp's copies of the
models' own (vendored llama-cpp-python 0.3.36, models/templates/). The
environment is transformers' `_compile_jinja_template` (chat_template_utils.py):
an ImmutableSandboxedEnvironment with trim_blocks, lstrip_blocks and the
loopcontrols extension, `tojson` as json.dumps(ensure_ascii=False),
`raise_exception` raising TemplateError; `render` gets messages, tools=None,
documents=None, add_generation_prompt and the tokenizer's special tokens.
"""
import json
import os
import sys

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
DATA = os.path.join(ROOT, "crates/strata-models/tests/data/chat")

# template file stem -> the model's (bos_token, eos_token) from its tokenizer_config.json
TEMPLATES = {
    "meta-llama-Llama-3.1-8B-Instruct": ("<|begin_of_text|>", "<|eot_id|>"),
    "Qwen-Qwen2.5-7B-Instruct": ("", "<|im_end|>"),
    "Qwen-Qwen3-0.6B": ("", "<|im_end|>"),
    "google-gemma-2-2b-it": ("<bos>", "<eos>"),
    "microsoft-Phi-3.5-mini-instruct": ("<s>", "<|endoftext|>"),
}

CONVERSATIONS = {
    "system_user_assistant_user": [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "Hello! What is 2 + 2?"},
        {"role": "assistant", "content": "2 + 2 = 4."},
        {"role": "user", "content": "And times 3?"},
    ],
    "user": [
        {"role": "user", "content": "Hi there"},
    ],
    "user_assistant_user": [
        {"role": "user", "content": "  Spaces around, and a newline\n"},
        {"role": "assistant", "content": "Noted: \"quotes\", 'apostrophes', ünïcödé, 日本語 ✓"},
        {"role": "user", "content": "Line one\nLine two\n\n"},
    ],
    "reasoning_in_history": [
        {"role": "user", "content": "Think first."},
        {"role": "assistant", "content": "<think>\nLet me think.\n</think>\n\nThe answer."},
        {"role": "user", "content": "Again?"},
    ],
}


class TemplateError(Exception):
    pass


def environment():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent,
                          separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    return env


def main():
    env = environment()
    out = {
        "description": "chat templates rendered as transformers renders them "
                       "(scripts/chat_template_goldens.py)",
        "jinja2": jinja2.__version__,
        "conversations": CONVERSATIONS,
        "templates": {},
    }
    for stem, (bos, eos) in TEMPLATES.items():
        with open(os.path.join(DATA, "templates", stem + ".jinja"), encoding="utf-8") as f:
            source = f.read()
        tmpl = env.from_string(source)
        cases = {}
        for conv_name, messages in CONVERSATIONS.items():
            for agp in (False, True):
                key = f"{conv_name}.{'gen' if agp else 'nogen'}"
                try:
                    text = tmpl.render(messages=messages, tools=None, documents=None,
                                       add_generation_prompt=agp, bos_token=bos, eos_token=eos)
                    cases[key] = {"text": text}
                except jinja2.exceptions.TemplateError as e:
                    cases[key] = {"error": str(e)}
        out["templates"][stem] = {"bos_token": bos, "eos_token": eos, "cases": cases}
    path = os.path.join(DATA, "goldens.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=1, sort_keys=True)
        f.write("\n")
    print(f"wrote {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
