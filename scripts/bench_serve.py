#!/usr/bin/env python3
"""Serving benchmark for OpenAI-compatible servers, in the style of vLLM's
`bench serve`: concurrent streaming clients, throughput and latencies.

Standard library only (threads + http.client). Works against `strata serve`
and llama.cpp's `llama-server` alike (both take `ignore_eos` and
`stream_options`), so one run compares them:

    strata serve -m MODEL.gguf --port 8080 -np 16 -c 16384 &
    llama-server -m MODEL.gguf --port 8081 -np 16 -c 16384 &
    python3 scripts/bench_serve.py --url http://127.0.0.1:8080 --label strata \\
        --url http://127.0.0.1:8081 --label llama-server --concurrency 1,4,8,16

or run it once per server with `--label` and paste the tables together.

What it does, for each URL and each concurrency level C:
  * makes --num-prompts prompts of --prompt-words (default 40-400) random
    words each from a fixed word list, deterministic in (--seed, C): the same
    prompts for every server, distinct across levels (so a prefix cache
    cannot reuse an earlier level's prompts) and across seeds;
  * sends them with C client threads, each one streaming request at a time,
    `max_tokens` --max-tokens with `ignore_eos: true`, to /v1/chat/completions
    (--endpoint chat, the default) or /v1/completions (--endpoint completions);
  * reports output tokens/s (all output tokens over the wall time of the
    level), requests/s, time to first token (TTFT) p50/p90, inter-token
    latency (ITL: the gaps between streamed chunks) p50, end-to-end latency
    p50 and the failed requests.

--shared-prefix-words N (e.g. 400) prepends the same N-word prefix (as the
system message for chat, before the prompt for completions) to every request
of a level (a fresh prefix per level), sends the level's first request alone,
then the rest at concurrency C; the table adds that first request's TTFT and
the median TTFT of the later ones: with a prefix cache the later ones skip
the prefix's prefill.

Output tokens come from the final usage chunk (`stream_options:
{include_usage: true}`) or, where a server sends none, from the count of
streamed chunks. One short request warms each server up first (not counted).
The model name is the first of GET /v1/models unless --model names one.
Only loopback or test servers are meant as targets: every loop is bounded by
--num-prompts and --timeout.
"""

import argparse
import http.client
import json
import queue
import random
import statistics
import sys
import threading
import time
import urllib.parse

WORDS = """
time year people way day man thing woman life child world school state family
student group country problem hand part place case week company system program
question work government number night point home water room mother area money
story fact month lot right study book eye job word business issue side kind head
house service friend father power hour game line end member law car city
community name president team minute idea kid body information back parent face
others level office door health person art war history party result change
morning reason research girl guy moment air teacher force education river garden
mountain window market paper music table light voice letter road bridge forest
island ocean winter summer spring autumn evening bread stone glass fire earth
cloud rain snow wind field village station train ship engine machine computer
language science number theory method answer picture color animal bird fish tree
flower leaf seed farm horse dog cat apple orange coffee tea dinner kitchen
quickly slowly carefully quietly always never often sometimes together alone
bright dark small large old young new ancient modern simple complex warm cold
happy quiet loud strong gentle careful curious brave clever honest famous
build carry find give hold keep learn move open play read run show speak start
think travel turn visit walk watch write listen remember explain discover
""".split()


def make_words(rng, n):
    return " ".join(rng.choice(WORDS) for _ in range(n))


def make_prompts(seed, level, count, words=(40, 400)):
    rng = random.Random(f"prompts/{seed}/{level}")
    return [
        f"Request {i}: continue this text. " + make_words(rng, rng.randint(*words))
        for i in range(count)
    ]


def word_range(text):
    """--prompt-words: "MIN-MAX" (or one number) as a (min, max) pair."""
    lo, _, hi = text.partition("-")
    lo, hi = int(lo), int(hi or lo)
    if not 1 <= lo <= hi <= 100_000:
        raise argparse.ArgumentTypeError(f"want MIN-MAX with 1 <= MIN <= MAX, got {text!r}")
    return lo, hi


def make_prefix(seed, level, words):
    rng = random.Random(f"prefix/{seed}/{level}")
    return "You are a helpful assistant. Background notes: " + make_words(rng, words)


class Server:
    def __init__(self, url, label, api_key, timeout):
        u = urllib.parse.urlsplit(url if "://" in url else "http://" + url)
        self.host, self.port = u.hostname, u.port or (443 if u.scheme == "https" else 80)
        self.https = u.scheme == "https"
        self.root = u.path.rstrip("/")
        if self.root.endswith("/v1"):
            self.root = self.root[: -len("/v1")]
        self.label = label or f"{self.host}:{self.port}"
        self.headers = {"Content-Type": "application/json"}
        if api_key:
            self.headers["Authorization"] = "Bearer " + api_key
        self.timeout = timeout

    def conn(self):
        cls = http.client.HTTPSConnection if self.https else http.client.HTTPConnection
        return cls(self.host, self.port, timeout=self.timeout)

    def get_json(self, path):
        c = self.conn()
        try:
            c.request("GET", self.root + path, headers=self.headers)
            r = c.getresponse()
            body = r.read()
            if r.status != 200:
                raise RuntimeError(f"GET {path}: HTTP {r.status}: {body[:300]!r}")
            return json.loads(body)
        finally:
            c.close()


class Result:
    __slots__ = ("ok", "error", "start", "ttft", "itl", "e2e", "tokens", "end")

    def __init__(self):
        self.ok, self.error = False, ""
        self.start = self.end = self.ttft = self.e2e = 0.0
        self.itl, self.tokens = [], 0


def stream_request(server, path, body):
    """One streaming request: its timings and output token count."""
    res = Result()
    res.start = time.perf_counter()
    chunk_times = []
    usage_tokens = None
    c = server.conn()
    try:
        c.request("POST", server.root + path, body=json.dumps(body), headers=server.headers)
        r = c.getresponse()
        if r.status != 200:
            res.error = f"HTTP {r.status}: {r.read()[:300]!r}"
            return res
        while True:
            line = r.readline()
            if not line:
                break
            line = line.strip()
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if data == b"[DONE]":
                break
            obj = json.loads(data)
            if obj.get("error"):
                res.error = f"error event: {obj['error']}"
                return res
            if obj.get("usage"):
                usage_tokens = obj["usage"].get("completion_tokens")
            for ch in obj.get("choices") or []:
                text = (ch.get("delta") or {}).get("content") if "delta" in ch else ch.get("text")
                if text:
                    chunk_times.append(time.perf_counter())
                    break
    except (OSError, http.client.HTTPException, ValueError) as e:
        res.error = f"{type(e).__name__}: {e}"
        return res
    finally:
        c.close()
    res.end = time.perf_counter()
    if not chunk_times:
        res.error = "no output streamed"
        return res
    res.ok = True
    res.ttft = chunk_times[0] - res.start
    res.itl = [b - a for a, b in zip(chunk_times, chunk_times[1:])]
    res.e2e = res.end - res.start
    res.tokens = usage_tokens if usage_tokens else len(chunk_times)
    return res


def request_body(args, model, prompt, prefix):
    body = {
        "model": model,
        "max_tokens": args.max_tokens,
        "temperature": args.temperature,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if args.endpoint == "chat":
        msgs = [{"role": "system", "content": prefix}] if prefix else []
        body["messages"] = msgs + [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = (prefix + "\n\n" if prefix else "") + prompt
    return body


def run_level(server, args, model, level):
    path = "/v1/chat/completions" if args.endpoint == "chat" else "/v1/completions"
    prompts = make_prompts(args.seed, level, args.num_prompts, args.prompt_words)
    prefix = make_prefix(args.seed, level, args.shared_prefix_words) if args.shared_prefix_words else ""
    bodies = [request_body(args, model, p, prefix) for p in prompts]
    results = []
    first = None
    t0 = time.perf_counter()
    if prefix:
        first = stream_request(server, path, bodies[0])
        results.append(first)
        bodies = bodies[1:]
    work = queue.Queue()
    for b in bodies:
        work.put(b)
    lock = threading.Lock()

    def client():
        while True:
            try:
                b = work.get_nowait()
            except queue.Empty:
                return
            r = stream_request(server, path, b)
            with lock:
                results.append(r)

    threads = [threading.Thread(target=client, daemon=True) for _ in range(level)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    return summarize(results, wall, first)


def pct(values, q):
    if not values:
        return float("nan")
    s = sorted(values)
    k = (len(s) - 1) * q / 100
    lo, hi = int(k), min(int(k) + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def summarize(results, wall, first):
    ok = [r for r in results if r.ok]
    failed = [r for r in results if not r.ok]
    for r in failed[:3]:
        print(f"  failed: {r.error}", file=sys.stderr)
    s = {
        "requests": len(results),
        "failed": len(failed),
        "out_tps": sum(r.tokens for r in ok) / wall if wall > 0 else 0.0,
        "req_s": len(ok) / wall if wall > 0 else 0.0,
        "ttft_p50": pct([r.ttft for r in ok], 50) * 1e3,
        "ttft_p90": pct([r.ttft for r in ok], 90) * 1e3,
        "itl_p50": pct([x for r in ok for x in r.itl], 50) * 1e3,
        "e2e_p50": pct([r.e2e for r in ok], 50),
        "tokens": sum(r.tokens for r in ok),
    }
    if first is not None:
        later = [r.ttft for r in ok if r is not first]
        s["first_ttft"] = first.ttft * 1e3 if first.ok else float("nan")
        s["later_ttft_p50"] = statistics.median(later) * 1e3 if later else float("nan")
    return s


def table(rows, shared):
    head = ["server", "endpoint", "conc", "reqs", "failed", "out tok/s", "req/s",
            "TTFT p50 ms", "TTFT p90 ms", "ITL p50 ms", "E2E p50 s"]
    if shared:
        head += ["first TTFT ms", "later TTFT p50 ms"]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for label, endpoint, level, s in rows:
        cells = [label, endpoint, str(level), str(s["requests"]), str(s["failed"]),
                 f"{s['out_tps']:.1f}", f"{s['req_s']:.2f}", f"{s['ttft_p50']:.0f}",
                 f"{s['ttft_p90']:.0f}", f"{s['itl_p50']:.1f}", f"{s['e2e_p50']:.2f}"]
        if shared:
            cells += [f"{s['first_ttft']:.0f}", f"{s['later_ttft_p50']:.0f}"]
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def main(argv=None):
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="See the module docstring (the top of this file) for what is measured.",
    )
    p.add_argument("--url", action="append", required=True,
                   help="a server's base URL (http://HOST:PORT); give it again for another server")
    p.add_argument("--label", action="append", default=[],
                   help="the table's name for each --url, in order (default HOST:PORT)")
    p.add_argument("--endpoint", choices=["chat", "completions"], default="chat")
    p.add_argument("--concurrency", default="1,4,8,16",
                   help="comma-separated client counts (default 1,4,8,16)")
    p.add_argument("--num-prompts", type=int, default=32)
    p.add_argument("--prompt-words", type=word_range, default=(40, 400), metavar="MIN-MAX",
                   help="each request's own prompt length in words (default 40-400)")
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=0, help="the prompts' seed")
    p.add_argument("--shared-prefix-words", type=int, default=0,
                   help="prepend one shared prefix of this many words (e.g. 400)")
    p.add_argument("--model", help="the model field (default: the first of /v1/models)")
    p.add_argument("--api-key", help="sent as Authorization: Bearer")
    p.add_argument("--timeout", type=float, default=600, help="seconds per request")
    args = p.parse_args(argv)
    if len(args.label) > len(args.url):
        p.error("more --label than --url")
    try:
        levels = [int(x) for x in args.concurrency.split(",") if x.strip()]
    except ValueError:
        p.error(f"bad --concurrency {args.concurrency!r}")
    if not levels or min(levels) < 1 or args.num_prompts < 1 or args.max_tokens < 1:
        p.error("concurrency levels, --num-prompts and --max-tokens must be at least 1")

    labels = args.label + [None] * (len(args.url) - len(args.label))
    servers = [Server(u, lab, args.api_key, args.timeout) for u, lab in zip(args.url, labels)]
    lo, hi = args.prompt_words
    print(f"# bench_serve: {args.endpoint}, {args.num_prompts} prompts of {lo}-{hi} words, "
          f"max_tokens {args.max_tokens} (ignore_eos), seed {args.seed}"
          + (f", shared prefix {args.shared_prefix_words} words" if args.shared_prefix_words else ""))
    rows = []
    for srv in servers:
        model = args.model or srv.get_json("/v1/models")["data"][0]["id"]
        print(f"# {srv.label}: {srv.host}:{srv.port}, model {model}", flush=True)
        warm = stream_request(srv, "/v1/completions", {
            "model": model, "prompt": "Hello", "max_tokens": 4, "stream": True})
        if not warm.ok:
            print(f"# {srv.label}: warm-up failed: {warm.error}", file=sys.stderr)
        for level in levels:
            s = run_level(srv, args, model, level)
            rows.append((srv.label, args.endpoint, level, s))
            print(f"#   concurrency {level}: {s['out_tps']:.1f} output tok/s, "
                  f"{s['failed']} failed", flush=True)
    print()
    print(table(rows, args.shared_prefix_words > 0))
    return 1 if any(s["failed"] for *_, s in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
