"""`strata serve` through the official `openai` package, Ollama's API over
plain HTTP, and the server's errors. See conftest.py for the environment.

Greedy requests (temperature 0) make the texts comparable: streamed against
not streamed, the server against `strata run`.
"""

import json
import os
import subprocess
from pathlib import Path

import openai
import pytest

from conftest import env_or_skip, http, ready

QUESTION = [{"role": "user", "content": "What is the capital of France? Answer in one sentence."}]
LONG = "hello " * 20000  # longer than any context the tests start


@pytest.fixture(scope="module")
def client(base_url):
    return openai.OpenAI(base_url=base_url + "/v1", api_key="unused", max_retries=0, timeout=120)


def greedy_chat(client, model, **kw):
    args = dict(model=model, messages=QUESTION, max_tokens=24, temperature=0)
    args.update(kw)
    return client.chat.completions.create(**args)


def test_models(client, model_id):
    models = client.models.list().data
    assert [m.id for m in models][0] == model_id
    assert model_id.strip()
    assert models[0].object == "model"


def test_chat(client, model_id):
    r = greedy_chat(client, model_id)
    assert r.object == "chat.completion"
    assert r.id and r.created > 0 and r.model
    assert len(r.choices) == 1
    c = r.choices[0]
    assert c.index == 0
    assert c.message.role == "assistant"
    assert isinstance(c.message.content, str) and c.message.content.strip()
    assert c.finish_reason in ("stop", "length")
    u = r.usage
    assert u.prompt_tokens > 10  # the template's tokens and the question's
    assert 0 < u.completion_tokens <= 24
    assert u.total_tokens == u.prompt_tokens + u.completion_tokens
    if c.finish_reason == "length":
        assert u.completion_tokens == 24


def test_chat_streamed_equals_not_streamed(client, model_id):
    whole = greedy_chat(client, model_id).choices[0]
    chunks = list(greedy_chat(client, model_id, stream=True))
    assert len(chunks) >= 3
    assert all(ch.object == "chat.completion.chunk" for ch in chunks)
    assert len({ch.id for ch in chunks}) == 1, "one id for the whole stream"
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert text == whole.message.content
    finishes = [ch.choices[0].finish_reason for ch in chunks if ch.choices]
    assert finishes[-1] == whole.finish_reason
    assert all(f is None for f in finishes[:-1])
    assert all(ch.usage is None for ch in chunks), "usage only when include_usage asks"


def test_stream_include_usage(client, model_id):
    chunks = list(
        greedy_chat(client, model_id, stream=True, stream_options={"include_usage": True})
    )
    last = chunks[-1]
    assert last.choices == []
    assert last.usage is not None
    n_content = sum(1 for ch in chunks if ch.choices and ch.choices[0].delta.content)
    assert last.usage.completion_tokens >= n_content > 0
    assert last.usage.prompt_tokens > 10
    assert last.usage.total_tokens == last.usage.prompt_tokens + last.usage.completion_tokens
    assert all(ch.usage is None for ch in chunks[:-1])


def test_completions(client, model_id):
    args = dict(model=model_id, prompt="The capital of France is", max_tokens=12, temperature=0)
    r = client.completions.create(**args)
    assert r.object == "text_completion"
    c = r.choices[0]
    assert c.index == 0 and c.text.strip()
    assert c.finish_reason in ("stop", "length")
    assert r.usage.prompt_tokens >= 5 and 0 < r.usage.completion_tokens <= 12
    chunks = list(client.completions.create(stream=True, **args))
    assert len(chunks) >= 3
    assert "".join(ch.choices[0].text for ch in chunks if ch.choices) == c.text
    assert [ch.choices[0].finish_reason for ch in chunks if ch.choices][-1] == c.finish_reason
    # a stop string (here one that spans tokens) ends the text before it;
    # streamed, no part of it leaks out before the match is known
    assert len(c.text) >= 9, c.text
    cut = c.text[3:9]
    before = c.text[: c.text.index(cut)]
    stopped = client.completions.create(stop=[cut], **args).choices[0]
    assert stopped.finish_reason == "stop"
    assert stopped.text == before
    chunks = list(client.completions.create(stop=[cut], stream=True, **args))
    assert "".join(ch.choices[0].text for ch in chunks if ch.choices) == before


def test_n_2(client, model_id):
    r = client.chat.completions.create(
        model=model_id, messages=QUESTION, max_tokens=8, temperature=1.0, seed=7, n=2
    )
    assert sorted(c.index for c in r.choices) == [0, 1]
    assert all(c.message.content for c in r.choices)
    assert r.usage.completion_tokens <= 16
    r = client.completions.create(
        model=model_id, prompt="Once upon a time", max_tokens=8, temperature=1.0, seed=7, n=2
    )
    assert sorted(c.index for c in r.choices) == [0, 1]
    assert all(c.text for c in r.choices)
    # streamed: the chunks of both choices, each ending with a finish reason
    chunks = list(
        client.chat.completions.create(
            model=model_id, messages=QUESTION, max_tokens=8, temperature=1.0, n=2, stream=True
        )
    )
    texts, finishes = {0: "", 1: ""}, {}
    for ch in chunks:
        for c in ch.choices:
            texts[c.index] += c.delta.content or ""
            if c.finish_reason:
                finishes[c.index] = c.finish_reason
    assert texts[0] and texts[1]
    assert sorted(finishes) == [0, 1]


def test_sampling_options(client, model_id):
    def text(**kw):
        args = dict(model=model_id, prompt="Once upon a time", max_tokens=12)
        args.update(kw)
        return client.completions.create(**args).choices[0]

    # a seed makes a sampled reply reproducible
    a, b = text(temperature=1.0, seed=42), text(temperature=1.0, seed=42)
    assert a.text == b.text
    # top_k 1 is greedy whatever the temperature
    top1 = text(temperature=1.5, seed=1, extra_body={"top_k": 1})
    assert top1.text == text(temperature=0).text
    # the penalties and min_p are taken
    assert text(temperature=0, presence_penalty=1.0, frequency_penalty=0.5,
                extra_body={"min_p": 0.1}).text
    # ignore_eos: exactly max_tokens tokens
    r = client.completions.create(
        model=model_id, prompt="Hi", max_tokens=40, temperature=0, extra_body={"ignore_eos": True}
    )
    assert r.usage.completion_tokens == 40 and r.choices[0].finish_reason == "length"


def test_concurrent_greedy_replies_equal_one_alone(client, model_id):
    """Four requests at once (the server's -np 4 slots, batched together)
    get the replies each gets alone."""
    from concurrent.futures import ThreadPoolExecutor

    prompts = ["The capital of France is", "def fibonacci(n):", "Water boils at",
               "The three primary colors are"]
    alone = [client.completions.create(model=model_id, prompt=p, max_tokens=24, temperature=0)
             .choices[0].text for p in prompts]
    with ThreadPoolExecutor(len(prompts)) as pool:
        together = list(pool.map(
            lambda p: client.completions.create(
                model=model_id, prompt=p, max_tokens=24, temperature=0).choices[0].text,
            prompts))
    assert together == alone


def n_visible(completion_tokens, finish_reason, n):
    """The tokens a reply shows: `completion_tokens`, less the end-of-generation
    token that stopped it if the count includes that (as llama-server's does)."""
    if finish_reason == "stop" and n == completion_tokens - 1:
        return n
    return completion_tokens


def test_chat_logprobs(client, model_id):
    r = greedy_chat(client, model_id, max_tokens=8, logprobs=True, top_logprobs=3)
    c = r.choices[0]
    items = c.logprobs.content
    assert len(items) == n_visible(r.usage.completion_tokens, c.finish_reason, len(items))
    # `bytes` are exact where a token is part of a character and `token` is not
    assert bytes(b for i in items for b in i.bytes).decode() == c.message.content
    for i in items:
        assert i.logprob <= 0.0
        assert len(i.top_logprobs) == 3
        lps = [t.logprob for t in i.top_logprobs]
        assert lps == sorted(lps, reverse=True) and lps[0] <= 0.0
        # greedy: the chosen token is the most likely one
        assert i.top_logprobs[0].token == i.token
        assert i.top_logprobs[0].logprob == pytest.approx(i.logprob, abs=1e-4)
    # streamed: the same tokens, one chunk's logprobs at a time
    chunks = greedy_chat(client, model_id, max_tokens=8, logprobs=True, top_logprobs=3, stream=True)
    streamed = [i for ch in chunks if ch.choices and ch.choices[0].logprobs
                for i in ch.choices[0].logprobs.content]
    assert [i.token for i in streamed] == [i.token for i in items]


def test_completions_logprobs(client, model_id):
    r = client.completions.create(
        model=model_id, prompt="The capital of France is", max_tokens=8, temperature=0, logprobs=3
    )
    c = r.choices[0]
    lp = c.logprobs
    n = n_visible(r.usage.completion_tokens, c.finish_reason, len(lp.tokens))
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == n
    assert len(lp.text_offset) == n
    assert "".join(lp.tokens) == c.text
    assert lp.text_offset == sorted(lp.text_offset)
    for tok, lpv, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs):
        assert lpv <= 0.0
        assert 1 <= len(top) <= 3  # a dict: two tokens may print alike
        assert tok in top and top[tok] == pytest.approx(lpv, abs=1e-4)
        assert max(top.values()) == pytest.approx(lpv, abs=1e-4)  # greedy


SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 20},
        "age": {"type": "integer"},
        "city": {"type": "string", "maxLength": 20},
    },
    "required": ["name", "age"],
    "additionalProperties": False,
}


def json_answer(client, model_id, prompt, max_tokens, response_format):
    """The parsed JSON of a greedy chat answer to `prompt` under
    `response_format`, which must have stopped on its own."""
    r = client.chat.completions.create(
        model=model_id,
        messages=[{"role": "user", "content": prompt}],
        max_tokens=max_tokens,
        temperature=0,
        response_format=response_format,
    )
    c = r.choices[0]
    assert c.finish_reason == "stop", c.message.content
    return json.loads(c.message.content)


def test_response_format_json_schema(client, model_id):
    obj = json_answer(
        client,
        model_id,
        "Describe Alice, 30, from Paris, as JSON.",
        120,
        {
            "type": "json_schema",
            "json_schema": {"name": "person", "schema": SCHEMA, "strict": True},
        },
    )
    assert set(obj) >= {"name", "age"} and set(obj) <= {"name", "age", "city"}
    assert isinstance(obj["name"], str) and isinstance(obj["age"], int)


def test_response_format_json_object(client, model_id):
    obj = json_answer(
        client, model_id, "List three colors as a JSON object.", 160, {"type": "json_object"}
    )
    assert isinstance(obj, dict)


def test_greedy_chat_equals_strata_run(client, base_url, model_id):
    strata = env_or_skip("STRATA_BIN")
    model = os.environ.get("STRATA_MODEL") or str(
        Path.home() / ".cache/strata/SmolLM2-135M-Instruct.Q4_1.gguf"
    )
    status, body = http("POST", base_url + "/apply-template", {"messages": QUESTION})
    assert status == 200, body
    prompt = body["prompt"]
    assert "France" in prompt and len(prompt) > len(QUESTION[0]["content"])
    r = greedy_chat(client, model_id, max_tokens=32)
    reply = r.choices[0].message.content
    # the server's prompt tokens are the templated prompt's, BOS included once
    status, tok = http("POST", base_url + "/tokenize", {"content": prompt, "add_special": True})
    assert status == 200, tok
    assert r.usage.prompt_tokens == len(tok["tokens"])
    # `strata run` without --chat takes the prompt as it is; it prints the
    # prompt, then the generation, then a newline
    out = subprocess.run(
        [strata, "run", "-m", model, "--temp", "0", "-n", str(r.usage.completion_tokens),
         "-t", "2", "-p", prompt],
        capture_output=True, text=True, timeout=300,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(prompt), out.stdout
    generated = out.stdout[len(prompt):]
    assert generated.endswith("\n")
    assert generated[:-1] == reply, (generated, reply)


# --- Ollama's API ---------------------------------------------------------


def ndjson(base_url, path, body):
    """A streamed Ollama answer: its lines, each parsed."""
    import urllib.request

    req = urllib.request.Request(
        base_url + path, data=json.dumps(body).encode(), method="POST",
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=120) as r:
        assert r.status == 200
        assert "ndjson" in r.headers.get("Content-Type", ""), r.headers
        return [json.loads(line) for line in r.read().decode().splitlines() if line.strip()]


OPTIONS = {"temperature": 0, "num_predict": 12}


def test_ollama_chat(base_url, model_id):
    body = {"model": model_id, "messages": QUESTION, "options": OPTIONS}
    status, whole = http("POST", base_url + "/api/chat", dict(body, stream=False))
    assert status == 200, whole
    assert whole["done"] is True
    assert whole["message"]["role"] == "assistant" and whole["message"]["content"].strip()
    assert whole["model"] and whole["created_at"]
    assert whole["done_reason"] in ("stop", "length")
    assert 0 < whole["eval_count"] <= 12 and whole["prompt_eval_count"] > 10
    assert whole["total_duration"] > 0
    lines = ndjson(base_url, "/api/chat", body)  # streams by default
    assert len(lines) >= 3
    assert all(line["done"] is False for line in lines[:-1]) and lines[-1]["done"] is True
    assert "".join(line["message"]["content"] for line in lines) == whole["message"]["content"]
    assert lines[-1]["eval_count"] == whole["eval_count"]


def test_ollama_generate(base_url, model_id):
    body = {"model": model_id, "prompt": "Why is the sky blue?", "options": OPTIONS}
    status, whole = http("POST", base_url + "/api/generate", dict(body, stream=False))
    assert status == 200, whole
    assert whole["done"] is True and whole["response"].strip()
    assert 0 < whole["eval_count"] <= 12
    lines = ndjson(base_url, "/api/generate", body)
    assert len(lines) >= 3
    assert all(line["done"] is False for line in lines[:-1]) and lines[-1]["done"] is True
    assert "".join(line["response"] for line in lines) == whole["response"]


# --- errors -----------------------------------------------------------------


def assert_openai_error(status, body, want):
    assert status == want, body
    assert isinstance(body, dict) and isinstance(body.get("error"), dict), body
    err = body["error"]
    assert isinstance(err["message"], str) and err["message"]
    assert isinstance(err["type"], str) and err["type"]


def test_malformed_json_is_400(base_url):
    for path in ["/v1/chat/completions", "/v1/completions"]:
        status, body = http("POST", base_url + path, raw=b'{"messages": [')
        assert_openai_error(status, body, 400)
    status, body = http("POST", base_url + "/v1/chat/completions", {"messages": "not a list"})
    assert_openai_error(status, body, 400)


@pytest.mark.parametrize("max_tokens", [0, -1])
def test_bad_max_tokens_is_400(client, base_url, model_id, max_tokens):
    status, body = http(
        "POST", base_url + "/v1/chat/completions",
        {"messages": QUESTION, "max_tokens": max_tokens},
    )
    assert_openai_error(status, body, 400)
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model=model_id, prompt="Hi", max_tokens=max_tokens)


def test_prompt_longer_than_context_is_400(client, base_url, model_id):
    status, body = http(
        "POST", base_url + "/v1/chat/completions",
        {"messages": [{"role": "user", "content": LONG}], "max_tokens": 4},
    )
    assert_openai_error(status, body, 400)
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=model_id, prompt=LONG, max_tokens=4)
    assert e.value.status_code == 400
    # the server still answers afterwards
    assert greedy_chat(client, model_id, max_tokens=4).choices[0].message.content


def test_api_key():
    url = ready(env_or_skip("STRATA_SERVE_AUTH_URL"))
    key = env_or_skip("STRATA_SERVE_API_KEY")
    req = {"messages": QUESTION, "max_tokens": 4, "temperature": 0}
    for headers in [{}, {"Authorization": "Bearer wrong-" + key}, {"Authorization": key}]:
        status, body = http("POST", url + "/v1/chat/completions", req, headers=headers)
        assert_openai_error(status, body, 401)
    status, body = http(
        "POST", url + "/v1/chat/completions", req, headers={"Authorization": "Bearer " + key}
    )
    assert status == 200, body
    assert body["choices"][0]["message"]["content"]
    # the openai package sends the key as a Bearer token
    # the openai package sends its key as a Bearer token
    good = openai.OpenAI(base_url=url + "/v1", api_key=key, max_retries=0)
    assert good.completions.create(model="m", prompt="Hi", max_tokens=2).choices[0].text
    bad = openai.OpenAI(base_url=url + "/v1", api_key="nope", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad.completions.create(model="m", prompt="Hi", max_tokens=2)
