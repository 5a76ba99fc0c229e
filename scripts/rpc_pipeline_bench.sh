#!/usr/bin/env bash
# Issue #15 item 8: pp512 through one RPC server and through two, strata's
# servers and client beside llama.cpp's, one thread per server, interleaved.
# Usage: scripts/rpc_pipeline_bench.sh LLAMA_CPP_BIN_DIR [MODEL]  (UBS="128 32" by default)
set -euo pipefail
B=${1:?give the llama.cpp build/bin directory (llama-bench, ggml-rpc-server)}
S=${STRATA:-target/release/strata}
M=${2:-$HOME/.cache/strata/SmolLM2-135M-Instruct.Q4_1.gguf}
export LD_LIBRARY_PATH=$B
"$S" rpc-server --port 50061 -t 1 >/dev/null 2>&1 &
"$S" rpc-server --port 50062 -t 1 >/dev/null 2>&1 &
"$B/ggml-rpc-server" -t 1 -p 50071 >/dev/null 2>&1 &
"$B/ggml-rpc-server" -t 1 -p 50072 >/dev/null 2>&1 &
trap 'kill $(jobs -p) 2>/dev/null' EXIT
sleep 2
for ub in ${UBS:-128 32}; do
    for round in 1 2; do
        for n in one two; do
            if [ "$n" = one ]; then R=127.0.0.1:50061; G=127.0.0.1:50071
            else R=127.0.0.1:50061,127.0.0.1:50062; G=127.0.0.1:50071,127.0.0.1:50072; fi
            s=$("$S" bench -m "$M" -t 1 -p 512 -n 0 -r 3 --ub "$ub" --ngl 99 --rpc "$R" 2>&1 | grep pp512 | awk -F'|' '{print $7}')
            l=$("$B/llama-bench" -m "$M" -rpc "$G" -ngl 99 -t 1 -p 512 -n 0 -r 3 -ub "$ub" 2>&1 | grep pp512 | awk -F'|' '{print $10}')
            echo "ub=$ub round=$round $n server(s): strata $s | llama.cpp $l"
        done
    done
done
