#!/usr/bin/env bash
# Issue #15 item 9: strata's RPC server beside ggml's, each client against
# each server, interleaved rounds, servers restarted every round.
# Usage: scripts/rpc_server_bench.sh LLAMA_CPP_BIN_DIR [MODEL]
#   ROUNDS=3 TESTS="-p 128,512 -n 32,64" THREADS=2 by default.
set -euo pipefail
B=${1:?give the llama.cpp build/bin directory (llama-bench, ggml-rpc-server)}
S=${STRATA:-target/release/strata}
M=${2:-$HOME/.cache/strata/SmolLM2-135M-Instruct.Q4_1.gguf}
T=${THREADS:-2}
TESTS=${TESTS:--p 128,512 -n 32,64}
export LD_LIBRARY_PATH=$B
for round in $(seq "${ROUNDS:-3}"); do
    for server in strata ggml; do
        if [ "$server" = strata ]; then
            "$S" rpc-server --port 50081 -t "$T" >/dev/null 2>&1 &
        else
            "$B/ggml-rpc-server" -t "$T" -p 50081 >/dev/null 2>&1 &
        fi
        pid=$!
        sleep 1.5
        # shellcheck disable=SC2086
        "$S" bench -m "$M" -t "$T" $TESTS -r 3 --ngl 99 --rpc 127.0.0.1:50081 2>/dev/null |
            awk -F'|' -v r="$round" -v s="$server" '/(pp|tg)[0-9]/ {gsub(/ /,"",$6); print "round " r " server " s " client strata " $6 " " $7}'
        # shellcheck disable=SC2086
        "$B/llama-bench" -m "$M" -rpc 127.0.0.1:50081 -ngl 99 -t "$T" $TESTS -r 3 2>/dev/null |
            awk -F'|' -v r="$round" -v s="$server" '/(pp|tg)[0-9]/ {gsub(/ /,"",$(NF-2)); print "round " r " server " s " client llama.cpp " $(NF-2) " " $(NF-1)}'
        kill $pid 2>/dev/null; wait $pid 2>/dev/null || true
    done
done
