#!/usr/bin/env bash
# The GPU figures of PERFORMANCE.md on a machine with a real GPU and no Rust
# toolchain (the device tool's NVIDIA machines): everything it needs comes in
# BUNDLE (a directory), built on the development machine:
#   strata, sched_priority   release binaries (cargo build --release -p strata-cli;
#                            cargo build --release -p strata-gpu --example sched_priority)
#   model.gguf               SmolLM2-135M-Instruct Q4_1 (the default model)
#   llama-src.tar.xz         llama.cpp b11312's sources (llama-cpp-python 0.3.36's vendor tree)
# and writes its logs into OUT. Vulkan's loader must be installed (the device
# README's .gl packages). ggml is built with CUDA (this machine's nvcc) in the
# background while strata runs, then benchmarked on the same model.
set -u
BUNDLE=${1:?usage: gpu_device_run.sh BUNDLE OUT}
OUT=${2:?usage: gpu_device_run.sh BUNDLE OUT}
S="$BUNDLE/strata"
log() { echo "== $*" | tee -a "$OUT/summary.txt"; }

nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv | tee "$OUT/nvidia-smi.txt"
if [ ! -d /tmp/ll ]; then
    (mkdir -p /tmp/ll && cd /tmp/ll && tar xJf "$BUNDLE/llama-src.tar.xz" &&
        cmake -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
            -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF \
            >/tmp/ll/cmake.log 2>&1 &&
        cmake --build build -j 14 --target llama-bench >/tmp/ll/build.log 2>&1
     echo "$?" >/tmp/ll/status) &
fi

log "strata devices"
"$S" devices 2>&1 | grep -v XDG_RUNTIME | tee -a "$OUT/summary.txt"
log "conformance suite on GPU0"
timeout 240 "$S" test-ops --device GPU0 >"$OUT/test-ops.txt" 2>&1
tail -1 "$OUT/test-ops.txt" | tee -a "$OUT/summary.txt"
grep -E "FAIL" "$OUT/test-ops.txt" | head -20 | tee -a "$OUT/summary.txt"
log "the seeds' experiment on GPU0"
timeout 60 "$BUNDLE/sched_priority" >"$OUT/seeds.txt" 2>&1
grep -E "split|device" "$OUT/seeds.txt" | tee -a "$OUT/summary.txt"
"$S" quantize --allow-requantize "$BUNDLE/model.gguf" /tmp/q4km.gguf Q4_K_M >/dev/null 2>&1
for m in "$BUNDLE/model.gguf" /tmp/q4km.gguf; do
    log "strata bench -ngl 99 --device GPU0 $(basename "$m")"
    timeout 180 "$S" bench -m "$m" -ngl 99 --device GPU0 -p 512 -n 64 -r 3 -t 8 2>&1 | grep -v XDG_RUNTIME | tee -a "$OUT/summary.txt"
done
log "strata run -ngl 99 --device GPU0 --temp 0 (and the CPU)"
for dev in "-ngl 99 --device GPU0" ""; do
    timeout 60 "$S" run -m "$BUNDLE/model.gguf" $dev --temp 0 -n 24 -p "The capital of France is" 2>/dev/null | tee -a "$OUT/summary.txt"
    echo | tee -a "$OUT/summary.txt"
done

log "ggml (CUDA) build"
for _ in $(seq 1 150); do [ -f /tmp/ll/status ] && break; sleep 2; done
cat /tmp/ll/status 2>/dev/null | tee -a "$OUT/summary.txt"
tail -3 /tmp/ll/build.log 2>/dev/null | tee -a "$OUT/summary.txt"
B=/tmp/ll/build/bin/llama-bench
if [ -x "$B" ]; then
    for m in "$BUNDLE/model.gguf" /tmp/q4km.gguf; do
        log "llama-bench -ngl 99 $(basename "$m")"
        timeout 120 "$B" -m "$m" -ngl 99 -p 512 -n 64 -r 3 -t 8 2>&1 | tail -5 | tee -a "$OUT/summary.txt"
    done
fi
