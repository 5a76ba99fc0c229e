#!/bin/bash
# S_TG of `strata batched-bench` against `llama-batched-bench`, one B at a
# time, the two programs alternated within each (B, round) pair and which
# goes first swapped every round (the host's speed drifts; a slow spell
# then hits one B of both programs rather than every B of one run):
#   scripts/batched_vs_llama.sh STRATA LLAMA_BATCHED_BENCH MODEL ROUNDS NPL [CTX]
# e.g. scripts/batched_vs_llama.sh target/release/strata \
#        ~/llama/build/bin/llama-batched-bench smol-Q4_1.gguf 3 1,2,4,8,16,32 16384
# STRATA_ISA applies to strata only (pair it with a matching llama.cpp build).
# Runs under `chrt -f 10` where permitted. Prints one line per run,
# "who round B S_PP S_TG", then per B the median over rounds of the
# same-round ratio strata / llama.cpp of S_TG, and its range.
set -euo pipefail
strata=$1 llama=$2 model=$3 rounds=$4 npl=$5 ctx=${6:-8192}
rt=""
if chrt -f 10 true 2>/dev/null; then rt="chrt -f 10"; fi
table() { # who round: the table rows of stdin as "who round B S_PP S_TG"
    awk -F'|' -v who="$1" -v r="$2" '$2 ~ /^ *[0-9]+ *$/ {
        gsub(/ /, "", $4); gsub(/ /, "", $7); gsub(/ /, "", $9)
        print who, r, $4, $7, $9 }'
}
run() { # who round B
    local common=(-npp 128 -ntg 128 -npl "$3" -c "$ctx" -t 2)
    if [ "$1" = strata ]; then
        $rt "$strata" batched-bench -m "$model" "${common[@]}" 2>/dev/null | table strata "$2"
    else
        $rt "$llama" -m "$model" "${common[@]}" -b 2048 -ub 512 2>/dev/null | table llama "$2"
    fi
}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for r in $(seq 1 "$rounds"); do
    for b in ${npl//,/ }; do
        if [ $((r % 2)) = 1 ]; then order="strata llama"; else order="llama strata"; fi
        for who in $order; do
            run "$who" "$r" "$b" | tee -a "$out"
        done
    done
done
echo "B  median S_TG ratio (range) over $rounds rounds"
awk 'function summary(v, n,   i, j, t) { # "median (min-max)" of v[1..n]
        for (i = 2; i <= n; i++) for (j = i; j > 1 && v[j - 1] > v[j]; j--) {
            t = v[j]; v[j] = v[j - 1]; v[j - 1] = t }
        return sprintf("%.2f (%.2f-%.2f)",
            n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2, v[1], v[n])
    }
    { s[$1, $2, $3] = $5; bs[$3] = 1; rs[$2] = 1 }
    END {
        # B from 1 to the largest run, so that the lines come out in order
        for (b = 1; b <= 4096; b++) if (b in bs) {
            n = 0; delete v
            for (r in rs) if ((("strata", r, b) in s) && (("llama", r, b) in s))
                v[++n] = s["strata", r, b] / s["llama", r, b]
            if (n) print b, summary(v, n)
        }
        n = 0; delete v
        for (r in rs) if ((("strata", r, 16) in s) && (("strata", r, 1) in s))
            v[++n] = s["strata", r, 16] / s["strata", r, 1]
        if (n) print "strata S_TG(16)/S_TG(1): median", summary(v, n)
    }' "$out"
