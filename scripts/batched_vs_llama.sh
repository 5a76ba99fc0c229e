#!/bin/bash
# S_TG of `strata batched-bench` against `llama-batched-bench`, runs
# alternated (the host's speed drifts), one line per run and B:
#   scripts/batched_vs_llama.sh STRATA LLAMA_BATCHED_BENCH MODEL ROUNDS NPL [CTX]
# e.g. scripts/batched_vs_llama.sh target/release/strata \
#        ~/llama/build/bin/llama-batched-bench smol-Q4_1.gguf 2 1,2,4,8,16,32 16384
# STRATA_ISA applies to strata only (pair it with a matching llama.cpp build).
# Runs under `chrt -f 10` where permitted. Prints: who round B S_PP S_TG.
set -euo pipefail
strata=$1 llama=$2 model=$3 rounds=$4 npl=$5 ctx=${6:-8192}
rt=""
if chrt -f 10 true 2>/dev/null; then rt="chrt -f 10"; fi
common=(-npp 128 -ntg 128 -npl "$npl" -c "$ctx" -t 2)
table() { # who round: the table rows of stdin as "who round B S_PP S_TG"
    awk -F'|' -v who="$1" -v r="$2" '$2 ~ /^ *[0-9]+ *$/ {
        gsub(/ /, "", $4); gsub(/ /, "", $7); gsub(/ /, "", $9)
        print who, r, $4, $7, $9 }'
}
for r in $(seq 1 "$rounds"); do
    $rt "$strata" batched-bench -m "$model" "${common[@]}" 2>/dev/null | table strata "$r"
    $rt "$llama" -m "$model" "${common[@]}" -b 2048 -ub 512 2>/dev/null \
        | table llama "$r"
done
