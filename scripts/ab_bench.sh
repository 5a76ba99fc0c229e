#!/usr/bin/env bash
# Two strata binaries alternated on one model, ROUNDS times, and the median
# of the per-round speed ratios B/A per test (a shared 2-core host drifts by
# ±10 % between runs; ratios of runs seconds apart cancel most of it). B runs
# first in every other round, so a drift or a periodic stall does not always
# land on the same side.
# Usage: scripts/ab_bench.sh MODEL ROUNDS BIN_A BIN_B [strata bench args, e.g. -p 0 -n 64]
set -euo pipefail
M=$1; R=$2; A=$3; B=$4; shift 4
speeds() { "$1" bench -m "$M" -t 2 -r 3 "${@:2}" 2>/dev/null |
    awk -F'|' '/\| (pp|tg)[0-9]/ {split($7, x, " "); printf "%s ", x[1]}'; }
for r in $(seq "$R"); do
    if [ $((r % 2)) = 1 ]; then
        a=$(speeds "$A" "$@"); b=$(speeds "$B" "$@")
    else
        b=$(speeds "$B" "$@"); a=$(speeds "$A" "$@")
    fi
    echo "$a| $b"
done | python3 -c '
import statistics, sys
rows = [l.split("|") for l in sys.stdin if "|" in l]
A = [list(map(float, r[0].split())) for r in rows]
B = [list(map(float, r[1].split())) for r in rows]
for t in range(len(A[0])):
    r = [b[t] / a[t] for a, b in zip(A, B)]
    print("test %d: A median %.1f t/s, B median %.1f t/s, B/A median %.3f (range %.3f-%.3f)"
          % (t, statistics.median(a[t] for a in A), statistics.median(b[t] for b in B),
             statistics.median(r), min(r), max(r)))
'
