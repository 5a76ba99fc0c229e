#!/usr/bin/env python3
"""Per-type MUL_MAT beside ggml's on a host whose speed swings between runs.

Alternates, ROUNDS times, ggml's `test-backend-ops perf -b CPU` (one thread at
b11312: hardware_concurrency / 2 on 2 cores) and strata's `mm_cycles` (one
thread, on-CPU time) on the same cases, and reports for each side the least
time over the rounds and their ratio. On the 2-vCPU hosts of this project the
same binary's time moves by up to 2x within a minute (a neighbour, the clock);
the least time of interleaved runs compares both sides in their fast phases,
where a single pair of runs may compare a slow phase with a fast one.

Usage: scripts/pertype_vs_ggml.py TEST_BACKEND_OPS MM_CYCLES [--rounds R]
       [--types q6_K,q5_K] [--n 1,512] [--m 1024 --k 1024]
(MM_CYCLES: `cargo build --release -p strata --example mm_cycles`, then
target/release/examples/mm_cycles.)
"""
import argparse
import re
import subprocess
import tempfile

import ggml_mulmat_cases

# The weight types and case lines of scripts/ggml_mulmat_cases.py.
TYPES = {**ggml_mulmat_cases.TYPES, **ggml_mulmat_cases.K_TYPES}


def case_line(t, m, k, n):
    return ggml_mulmat_cases.case_line(*TYPES[t], m, k, n)


def ggml_round(tbo, cases):
    with tempfile.NamedTemporaryFile("w", suffix=".txt") as f:
        f.write("\n".join(case_line(*c) for c in cases) + "\n")
        f.flush()
        out = subprocess.run([tbo, "perf", "-b", "CPU", "--test-file", f.name],
                             capture_output=True, text=True, check=True).stdout
    got = {}
    pat = re.compile(r"sources=(\w+)\[(\d+),(\d+),1,1\],f32\[\d+,(\d+),1,1\]\).*?([\d.]+) us/run")
    for line in out.splitlines():
        mt = pat.search(line)
        if mt:
            t, k, m, n, us = mt.groups()
            got[(t, int(m), int(k), int(n))] = float(us)
    return got


def strata_one(mm, t, m, k, n):
    # Samples of 6e10 multiply-adds (0.15-0.5 s at 1024 x 1024 x 512 on
    # the hosts so far): the on-CPU time of /proc/thread-self/schedstat
    # advances in scheduler ticks on some kernels (4 ms here), so short
    # samples come out as multiples of the tick.
    iters = max(1, int(6e10 // (m * k * n)))
    out = subprocess.run([mm, t, str(m), str(k), str(n), str(iters)],
                         capture_output=True, text=True, check=True).stdout
    mt = re.search(r"best ([\d.]+) ms/iter", out)
    return float(mt.group(1)) * 1000.0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("tbo")
    ap.add_argument("mm")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--types", default="q2_K,q3_K,q4_K,q5_K,q6_K,iq4_nl,iq4_xs")
    ap.add_argument("--n", default="1,512")
    ap.add_argument("--m", type=int, default=1024)
    ap.add_argument("--k", type=int, default=1024)
    a = ap.parse_args()
    cases = [(t, a.m, a.k, int(n)) for t in a.types.split(",") for n in a.n.split(",")]
    best_g, best_s = {}, {}
    for r in range(a.rounds):
        g = ggml_round(a.tbo, cases)
        for c in cases:
            if c in g:
                best_g[c] = min(best_g.get(c, float("inf")), g[c])
            s = strata_one(a.mm, *c)
            best_s[c] = min(best_s.get(c, float("inf")), s)
        print(f"# round {r + 1} of {a.rounds} done", flush=True)
    print("| type | m × k × n | ggml µs (least) | strata µs (least) | ratio |")
    print("|---|---|---:|---:|---:|")
    for c in cases:
        t, m, k, n = c
        gv, sv = best_g.get(c), best_s[c]
        ratio = f"{gv / sv:.2f}×" if gv else "n/a"
        gs = f"{gv:.1f}" if gv else "n/a"
        print(f"| {t} | {m} × {k} × {n} | {gs} | {sv:.1f} | {ratio} |")


if __name__ == "__main__":
    main()
