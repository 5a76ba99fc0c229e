#!/usr/bin/env python3
"""Writes the golden data of strata's built-in chat templates (llama.cpp's
`--chat-template NAME` formats, crates/strata-models/src/chat/builtin/)
from a llama.cpp source tree:

    python3 scripts/builtin_chat_template_goldens.py LLAMA_CPP_DIR   (needs g++)

The tree used for the committed data is the one vendored in the
llama-cpp-python 0.3.36 sdist (`vendor/llama.cpp`, ggml-org/llama.cpp at
0c1e57098), the copy the other chat goldens come from.

Two files under crates/strata-models/tests/data/chat/builtin/:

- test_chat_template_cases.json: llama.cpp's own expected outputs, the
  `test_cases` table of tests/test-chat-template.cpp (each model's template,
  its fixed six-message conversation plus the case's extra messages, with the
  generation prompt), with the built-in template llama.cpp picks for the
  case's template (`llm_chat_detect_template`). The table and the
  conversation are compiled from the test file as they stand, and every
  expected output is checked against llama.cpp's renderer before it is
  written.
- renderings.json: what llama.cpp's renderer (`llm_chat_apply_template`,
  src/llama-chat.cpp, compiled here) gives for every built-in name, on the
  conversations below and the test's conversation, with and without the
  generation prompt: the names the test table leaves out (zephyr, falcon3,
  llama2-sys, ...) get their expected output from llama.cpp's code itself.

The harness (written to a temporary directory) calls llama.cpp's functions the
way its public `llama_chat_apply_template` does: detect the template from the
string (a built-in name is found first), then render.
"""
import json
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
OUT = os.path.join(ROOT, "crates/strata-models/tests/data/chat/builtin")
SOURCE = "llama-cpp-python 0.3.36 sdist, vendor/llama.cpp (ggml-org/llama.cpp@0c1e57098)"

# Conversations that reach every branch of the renderers: roles they treat
# specially (system first or later, tool roles, unknown roles), contents their
# C `isspace` trim touches or not (\v, \f, NBSP, ideographic space), empty
# contents and an empty chat.
CONVERSATIONS = {
    "user": [
        {"role": "user", "content": "test"},
    ],
    "system_user": [
        {"role": "system", "content": "You are a helpful assistant"},
        {"role": "user", "content": "Hello"},
    ],
    "no_system": [
        {"role": "user", "content": "Hello"},
        {"role": "assistant", "content": "Hi there"},
        {"role": "user", "content": "How are you?"},
    ],
    "leading_assistant": [
        {"role": "assistant", "content": "Welcome back."},
        {"role": "user", "content": "Thanks"},
    ],
    "systems": [
        {"role": "system", "content": "Rule one."},
        {"role": "system", "content": "  Rule two.\n"},
        {"role": "user", "content": "Go"},
        {"role": "assistant", "content": "Done"},
        {"role": "system", "content": "Late rule."},
        {"role": "user", "content": "More"},
    ],
    "tools": [
        {"role": "system", "content": "Use tools."},
        {"role": "user", "content": "What is the weather?"},
        {"role": "assistant_tool_call", "content": "[{\"name\": \"get_weather\"}]"},
        {"role": "tool", "content": "{\"temperature\": 72}"},
        {"role": "tool_response", "content": "72F"},
        {"role": "function", "content": "f()"},
        {"role": "assistant", "content": "It is 72F."},
        {"role": "user", "content": "Thanks"},
    ],
    "whitespace_unicode": [
        {"role": "system", "content": " \t\x0b\x0c\r\n sys \n"},
        {"role": "user", "content": "  Ünïcödé 日本語 ✓ \u00a0\n"},
        {"role": "assistant", "content": "\u3000wide\u3000"},
        {"role": "user", "content": "end\n\n"},
    ],
    "odd_roles": [
        {"role": "user", "content": "Hi"},
        {"role": "narrator", "content": "Once upon a time"},
        {"role": "Über", "content": "x"},
        {"role": "user", "content": "Bye"},
    ],
    "empty_contents": [
        {"role": "system", "content": ""},
        {"role": "user", "content": ""},
        {"role": "assistant", "content": ""},
    ],
    "empty": [],
}


def block(src, start_pattern):
    """The text from `start_pattern` to the `};` closing its first brace,
    skipping string literals and comments."""
    m = re.search(start_pattern, src)
    if not m:
        sys.exit(f"not found in the test file: {start_pattern}")
    i = src.index("{", m.end() - 1)
    depth = 0
    while i < len(src):
        c = src[i]
        if c == '"':
            i += 1
            while src[i] != '"':
                i += 2 if src[i] == "\\" else 1
        elif c == "'":
            i += 1
            while src[i] != "'":
                i += 2 if src[i] == "\\" else 1
        elif src.startswith("//", i):
            i = src.index("\n", i)
        elif src.startswith("/*", i):
            i = src.index("*/", i) + 1
        elif c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                end = src.index(";", i) + 1
                return src[m.start():end]
        i += 1
    sys.exit(f"unbalanced braces after {start_pattern}")


def c_string(s):
    """`s` as a C++ string literal (UTF-8 bytes, octal escapes)."""
    out = []
    for b in s.encode("utf-8"):
        ch = chr(b)
        if b < 0x80 and (ch.isalnum() or ch in " .,:;!?()[]{}<>=+-*/_#@$%&|~^'"):
            out.append(ch)
        else:
            out.append("\\%03o" % b)
    return '"' + "".join(out) + '"'


HARNESS = r"""
#include <cstdio>
#include <cstdint>
#include <string>
#include <vector>

#include "llama.h"
#include "llama-chat.h"

#define U8C(x) (const char*)(u8##x)

static void put(const std::string & s) {
    std::putchar('"');
    for (unsigned char c : s) {
        if (c == '"') { std::fputs("\\\"", stdout); }
        else if (c == '\\') { std::fputs("\\\\", stdout); }
        else if (c < 0x20) { std::printf("\\u%04x", c); }
        else { std::putchar(c); }
    }
    std::putchar('"');
}

static void put_conv(const std::vector<llama_chat_message> & conv) {
    std::putchar('[');
    for (size_t i = 0; i < conv.size(); i++) {
        std::fputs(i ? ",{\"role\":" : "{\"role\":", stdout);
        put(conv[i].role);
        std::fputs(",\"content\":", stdout);
        put(conv[i].content);
        std::putchar('}');
    }
    std::putchar(']');
}

// as llama.cpp's public llama_chat_apply_template: detect, then render
static bool apply(const std::string & tmpl, const std::vector<llama_chat_message> & conv, bool add_ass,
                  std::string & out) {
    std::vector<const llama_chat_message *> chat_vec(conv.size());
    for (size_t i = 0; i < conv.size(); i++) {
        chat_vec[i] = &conv[i];
    }
    llm_chat_template t = llm_chat_detect_template(tmpl);
    if (t == LLM_CHAT_TEMPLATE_UNKNOWN) {
        return false;
    }
    return llm_chat_apply_template(t, chat_vec, out, add_ass) >= 0;
}

static std::vector<std::string> builtin_names() {
    int32_t n = llama_chat_builtin_templates(nullptr, 0);
    std::vector<const char *> names(n);
    llama_chat_builtin_templates(names.data(), names.size());
    return std::vector<std::string>(names.begin(), names.end());
}

static std::string name_of(llm_chat_template t) {
    for (const auto & name : builtin_names()) {
        if (llm_chat_template_from_str(name) == t) {
            return name;
        }
    }
    return "";
}

@CONVERSATIONS@

int main() {
    @CONVERSATION@
    @STRUCT@
    @CASES@

    std::fputs("{\"conversation\":", stdout);
    put_conv(conversation);
    std::fputs(",\"cases\":[", stdout);
    for (size_t i = 0; i < test_cases.size(); i++) {
        const auto & tc = test_cases[i];
        auto conv = conversation;
        conv.insert(conv.end(), tc.extra_conversation.begin(), tc.extra_conversation.end());
        std::string out;
        if (!apply(tc.template_str, conv, true, out) || out != tc.expected_output) {
            std::fprintf(stderr, "llama.cpp does not render its own test case %s as expected\n", tc.name.c_str());
            return 1;
        }
        std::fputs(i ? ",{\"name\":" : "{\"name\":", stdout);
        put(tc.name);
        std::fputs(",\"builtin\":", stdout);
        put(name_of(llm_chat_detect_template(tc.template_str)));
        std::fputs(",\"bos_token\":", stdout);
        put(tc.bos_token);
        std::fputs(",\"eos_token\":", stdout);
        put(tc.eos_token);
        std::fputs(",\"extra_conversation\":", stdout);
        put_conv(tc.extra_conversation);
        std::fputs(",\"expected_output\":", stdout);
        put(tc.expected_output);
        std::putchar('}');
    }
    std::fputs("],\"names\":[", stdout);
    auto names = builtin_names();
    for (size_t i = 0; i < names.size(); i++) {
        if (i) std::putchar(',');
        put(names[i]);
    }
    std::fputs("],\"renderings\":[", stdout);
    bool first = true;
    for (const auto & name : names) {
        for (const auto & conv : conversations) {
            for (bool add : {false, true}) {
                std::string out;
                if (!apply(name, conv.second, add, out)) {
                    std::fprintf(stderr, "llama.cpp cannot render %s\n", name.c_str());
                    return 1;
                }
                std::fputs(first ? "{\"template\":" : ",{\"template\":", stdout);
                first = false;
                put(name);
                std::fputs(",\"conversation\":", stdout);
                put(conv.first);
                std::fputs(add ? ",\"add_generation_prompt\":true,\"output\":" : ",\"add_generation_prompt\":false,\"output\":", stdout);
                put(out);
                std::putchar('}');
            }
        }
    }
    std::fputs("]}\n", stdout);
    return 0;
}
"""


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    llama = sys.argv[1]
    with open(os.path.join(llama, "tests/test-chat-template.cpp"), encoding="utf-8") as f:
        test = f.read()
    conversation = block(test, r"std::vector<llama_chat_message>\s+conversation\s*\{")
    struct = block(test, r"struct\s+TestCase\s*\{")
    cases = block(test, r"std::vector<TestCase>\s+test_cases\s*\{")

    convs = ["static const std::vector<std::pair<std::string, std::vector<llama_chat_message>>> conversations = {"]
    convs.append('    {"llamacpp_test", {')
    convs.append("        " + conversation[conversation.index("{") + 1:conversation.rindex("}")].strip())
    convs.append("    }},")
    for key, msgs in CONVERSATIONS.items():
        items = ", ".join("{%s, %s}" % (c_string(m["role"]), c_string(m["content"])) for m in msgs)
        convs.append('    {"%s", {%s}},' % (key, items))
    convs.append("};")

    harness = (HARNESS.replace("@CONVERSATIONS@", "\n".join(convs))
               .replace("@CONVERSATION@", conversation)
               .replace("@STRUCT@", struct)
               .replace("@CASES@", cases))
    with tempfile.TemporaryDirectory() as tmp:
        cpp = os.path.join(tmp, "harness.cpp")
        exe = os.path.join(tmp, "harness")
        with open(cpp, "w", encoding="utf-8") as f:
            f.write(harness)
        subprocess.run(["g++", "-std=c++17", "-O1", "-I", os.path.join(llama, "include"),
                        "-I", os.path.join(llama, "ggml/include"), "-I", os.path.join(llama, "src"),
                        cpp, os.path.join(llama, "src/llama-chat.cpp"), "-o", exe], check=True)
        result = json.loads(subprocess.run([exe], check=True, capture_output=True).stdout)

    conversations = {"llamacpp_test": result["conversation"], **CONVERSATIONS}
    os.makedirs(OUT, exist_ok=True)
    outputs = {
        "test_chat_template_cases.json": {
            "source": f"tests/test-chat-template.cpp of llama.cpp ({SOURCE}): the expected "
                      "outputs of its test_cases table, rendered with the generation prompt from "
                      "`conversation` followed by the case's `extra_conversation`; `builtin` is the "
                      "built-in template llama.cpp detects from the case's template "
                      "(scripts/builtin_chat_template_goldens.py)",
            "conversation": result["conversation"],
            "cases": result["cases"],
        },
        "renderings.json": {
            "source": f"llama.cpp's built-in chat templates ({SOURCE}): src/llama-chat.cpp compiled "
                      "and run on every name of its table for these conversations, with and without "
                      "the generation prompt (scripts/builtin_chat_template_goldens.py)",
            "names": result["names"],
            "conversations": conversations,
            "renderings": result["renderings"],
        },
    }
    for name, data in outputs.items():
        path = os.path.join(OUT, name)
        with open(path, "w", encoding="utf-8") as f:
            json.dump(data, f, ensure_ascii=False, indent=1)
            f.write("\n")
        print(f"wrote {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
