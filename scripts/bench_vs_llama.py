#!/usr/bin/env python3
"""`strata bench` beside llama.cpp's `llama-bench` in the same run, as ratios.

For each model, runs `strata bench --json` and then `llama-bench -o json` with
the same prompt/generation lengths, threads and repetitions, and prints one
markdown table (tokens/s, mean ± stddev, strata / llama.cpp).

    python3 scripts/bench_vs_llama.py --llama-bench PATH/llama-bench \
        -m MODEL [-m MODEL ...] [-p 128,512] [-n 64] [-t 1,2] [-r 3] [-- extra strata args]

Both programs run the model on the CPU with flash attention (llama-bench's
default `auto` enables it on the CPU) and a 512-token batch.
"""
import argparse
import json
import os
import subprocess
import sys


def run_json(cmd):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--strata", default="target/release/strata")
    ap.add_argument("--llama-bench", required=True)
    ap.add_argument("-m", "--model", action="append", required=True)
    ap.add_argument("-p", default="128,512")
    ap.add_argument("-n", default="64")
    ap.add_argument("-t", default="1,2")
    ap.add_argument("-r", default="3")
    ap.add_argument("extra", nargs="*", help="extra arguments for strata bench")
    a = ap.parse_args()
    rows = []
    for model in a.model:
        name = os.path.basename(model)
        s = run_json([a.strata, "bench", "-m", model, "-p", a.p, "-n", a.n, "-t", a.t,
                      "-r", a.r, "--json", *a.extra])
        l = run_json([a.llama_bench, "-m", model, "-p", a.p, "-n", a.n, "-t", a.t,
                      "-r", a.r, "-o", "json"])
        lk = {}
        for e in l:
            test = f"pp{e['n_prompt']}" if e["n_gen"] == 0 else f"tg{e['n_gen']}"
            lk[(e["n_threads"], test)] = (e["avg_ts"], e["stddev_ts"])
        for e in s:
            key = (e["threads"], e["test"])
            if key not in lk:
                continue
            la, ls = lk[key]
            rows.append((name, e["threads"], e["test"], e["avg_ts"], e["stddev_ts"], la, ls))
        sys.stderr.write(f"done {name}\n")
    print("| model | threads | test | strata t/s | llama.cpp t/s | ratio |")
    print("|---|---:|---|---:|---:|---:|")
    for name, th, test, sa, ss, la, ls in rows:
        print(f"| {name} | {th} | {test} | {sa:.2f} ± {ss:.2f} | {la:.2f} ± {ls:.2f} | {sa / la:.2f}× |")


if __name__ == "__main__":
    main()
