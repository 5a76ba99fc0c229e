#!/usr/bin/env python3
"""`strata bench` beside llama.cpp's `llama-bench` in the same run, as ratios.

For each model, runs `strata bench --json` and then `llama-bench -o json` with
the same prompt/generation lengths, threads and repetitions, and prints one
markdown table (tokens/s, mean ± stddev, strata / llama.cpp).

    python3 scripts/bench_vs_llama.py --llama-bench PATH/llama-bench \
        -m MODEL [-m MODEL ...] [-p 128,512] [-n 64] [-t 1,2] [-r 3] [--rounds N] [-- extra strata args]

With `--rounds N` (N > 1) the two programs alternate N times per model and the
table gives, per test, the median of the N per-round ratios (the ratio column)
beside the medians of each side's mean speed: on a shared 2-core host single
alternations differ by up to 20 %, and a median of ratios measured seconds
apart cancels most of the drift. A last column gives the ratio of the two
sides' fastest repetitions over all rounds (`samples_ts`): on a host whose
speed swings by up to 2x within a minute, noise only ever slows a run down,
so the fastest runs compare both programs in the host's fast phases.
`STRATA_ISA` in the environment reaches
strata (e.g. `STRATA_ISA=avx2` against an AVX2-only llama.cpp build).

Both programs run the model on the CPU with flash attention (llama-bench's
default `auto` enables it on the CPU) and a 512-token batch.
"""
import argparse
import json
import os
import statistics
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
    ap.add_argument("--rounds", type=int, default=1,
                    help="alternate the two programs N times; report median ratios")
    ap.add_argument("extra", nargs="*", help="extra arguments for strata bench")
    a = ap.parse_args()
    if a.rounds < 1:
        ap.error("--rounds must be at least 1")
    rows = []
    for model in a.model:
        name = os.path.basename(model)
        per_key = {}
        for rnd in range(a.rounds):
            s = run_json([a.strata, "bench", "-m", model, "-p", a.p, "-n", a.n, "-t", a.t,
                          "-r", a.r, "--json", *a.extra])
            l = run_json([a.llama_bench, "-m", model, "-p", a.p, "-n", a.n, "-t", a.t,
                          "-r", a.r, "-o", "json"])
            lk = {}
            for e in l:
                test = f"pp{e['n_prompt']}" if e["n_gen"] == 0 else f"tg{e['n_gen']}"
                lk[(e["n_threads"], test)] = (e["avg_ts"], e["stddev_ts"],
                                              max(e.get("samples_ts") or [e["avg_ts"]]))
            for e in s:
                key = (e["threads"], e["test"])
                if key not in lk:
                    continue
                la, ls, lmax = lk[key]
                smax = max(e.get("samples_ts") or [e["avg_ts"]])
                per_key.setdefault(key, []).append((e["avg_ts"], e["stddev_ts"], la, ls, smax, lmax))
            sys.stderr.write(f"done {name} round {rnd + 1}/{a.rounds}\n")
        for (th, test), runs in per_key.items():
            best = max(r[4] for r in runs) / max(r[5] for r in runs)
            if len(runs) == 1:
                sa, ss, la, ls = runs[0][:4]
                rows.append((name, th, test, f"{sa:.2f} ± {ss:.2f}", f"{la:.2f} ± {ls:.2f}", sa / la,
                             best, ""))
            else:
                ratios = [r[0] / r[2] for r in runs]
                sa = statistics.median(r[0] for r in runs)
                la = statistics.median(r[2] for r in runs)
                spread = f" ({min(ratios):.2f}–{max(ratios):.2f})"
                rows.append((name, th, test, f"{sa:.2f}", f"{la:.2f}",
                             statistics.median(ratios), best, spread))
    ratio_head = "ratio" if a.rounds == 1 else f"median ratio of {a.rounds} rounds (range)"
    print(f"| model | threads | test | strata t/s | llama.cpp t/s | {ratio_head} | fastest / fastest |")
    print("|---|---:|---|---:|---:|---:|---:|")
    for name, th, test, sa, la, ratio, best, spread in rows:
        print(f"| {name} | {th} | {test} | {sa} | {la} | {ratio:.2f}×{spread} | {best:.2f}× |")


if __name__ == "__main__":
    main()
