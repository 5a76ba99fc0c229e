#!/usr/bin/env bash
# The GPU figures of PERFORMANCE.md on a machine with a real GPU and no Rust
# toolchain (the device tool's NVIDIA machines): everything it needs comes in
# BUNDLE (a directory), built on the development machine:
#   strata, sched_priority, write_tiny_models   release binaries, stripped
#       (cargo build --release -p strata-cli;
#        cargo build --release -p strata-gpu --example sched_priority;
#        cargo build --release -p strata-models --example write_tiny_models)
#   ggml/    llama.cpp b11312 built with -DGGML_VULKAN=ON (llama-bench and its
#            shared libraries, stripped, by their sonames; *.xz ones are
#            unpacked first), the reference on the same Vulkan device
# and writes its logs into OUT. The models are generated there (the benchmark
# models of tests/support/tiny_models.rs: 8 x 1024, Q4_K_M, and the tests'
# qwen3moe-8x2), so nothing large travels. Vulkan's loader must be installed
# (the device README's .gl packages).
set -u
BUNDLE=${1:?usage: gpu_device_run.sh BUNDLE OUT}
OUT=${2:?usage: gpu_device_run.sh BUNDLE OUT}
S="$BUNDLE/strata"
LB="$BUNDLE/ggml/llama-bench"
export LD_LIBRARY_PATH="/tmp/ggml-libs:$BUNDLE/ggml${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
T=${THREADS:-8}
# smaller runs for a smoke test on a software device: PP=8 NG=4 REPS=1 TESTOPS=0
PP=${PP:-512} NG=${NG:-64} REPS=${REPS:-3} TESTOPS=${TESTOPS:-1}
M=/tmp/models
log() { echo "== $*" | tee -a "$OUT/summary.txt"; }
quiet() { grep -v -E 'XDG_RUNTIME|^$'; }

nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv | tee -a "$OUT/summary.txt"
grep -m1 'model name' /proc/cpuinfo | tee -a "$OUT/summary.txt"
mkdir -p "$M"
# libraries may travel xz-compressed (the device tool's size limit)
mkdir -p /tmp/ggml-libs
for z in "$BUNDLE"/ggml/*.xz; do
    [ -f "$z" ] && python3 -c 'import lzma, sys; open(sys.argv[2], "wb").write(lzma.open(sys.argv[1]).read())' \
        "$z" "/tmp/ggml-libs/$(basename "${z%.xz}")"
done
# the models are generated on the CPU while the GPU runs the suite
(
    "$BUNDLE/write_tiny_models" "$M" --tests qwen3moe-8x2
    "$BUNDLE/write_tiny_models" "$M" --bench bench-llama bench-qwen3moe
    "$S" quantize --allow-requantize "$M/bench-llama.gguf" "$M/bench-llama-q4_1.gguf" Q4_1 >/dev/null 2>&1
) >"$OUT/models.txt" 2>&1 &
GEN=$!

log "strata devices"
"$S" devices 2>&1 | quiet | tee -a "$OUT/summary.txt"
if [ "$TESTOPS" = 1 ]; then
log "conformance suite on GPU0"
timeout 180 "$S" test-ops --device GPU0 >"$OUT/test-ops.txt" 2>&1
tail -1 "$OUT/test-ops.txt" | tee -a "$OUT/summary.txt"
grep -E "FAIL" "$OUT/test-ops.txt" | head -20 | tee -a "$OUT/summary.txt"
fi
log "the seeds' experiment on GPU0"
timeout 60 "$BUNDLE/sched_priority" >"$OUT/seeds.txt" 2>&1
grep -E "split|device" "$OUT/seeds.txt" | tee -a "$OUT/summary.txt"

wait "$GEN"
log "the models (generated meanwhile)"
cat "$OUT/models.txt" >>"$OUT/summary.txt"
ls -la "$M" | tee -a "$OUT/summary.txt"

# the same logits on the GPU as on the CPU: the dense model, and the MoE
# model with its experts on the CPU (-ot exps=CPU) and on the GPU
kl() { python3 - "$@" <<'EOF' | tee -a "$OUT/summary.txt"
import math, sys
from array import array
def read(path):
    a = array("f")
    with open(path, "rb") as f:
        a.frombytes(f.read())
    return list(a)
def log_softmax(x):
    m = max(x)
    z = math.log(sum(math.exp(v - m) for v in x))
    return [v - m - z for v in x]
p, q = read(sys.argv[1]), read(sys.argv[2])
lp, lq = log_softmax(p), log_softmax(q)
kl = sum(math.exp(a) * (a - b) for a, b in zip(lp, lq))
d = max(abs(a - b) for a, b in zip(p, q))
print(f"KL(cpu||{sys.argv[3]}) = {kl:.3e}, argmax {p.index(max(p))} / {q.index(max(q))}, max |dlogit| {d:.3e}")
EOF
}
P="The quick brown fox jumps over the lazy dog, and then it runs far away into the forest"
for m in bench-llama qwen3moe-8x2; do
    log "strata eval $m: CPU vs GPU0"
    "$S" eval -m "$M/$m.gguf" -p "$P" --logits-out "/tmp/$m.cpu" -t "$T" 2>&1 | quiet | tail -2
    "$S" eval -m "$M/$m.gguf" -p "$P" --logits-out "/tmp/$m.gpu" -t "$T" -ngl 99 --device GPU0 2>&1 | quiet | tail -2
    kl "/tmp/$m.cpu" "/tmp/$m.gpu" "GPU0 -ngl 99"
done
"$S" eval -m "$M/qwen3moe-8x2.gguf" -p "$P" --logits-out /tmp/moe.ot -t "$T" -ngl 99 --device GPU0 --ot exps=CPU 2>&1 | quiet | tail -2
kl /tmp/qwen3moe-8x2.cpu /tmp/moe.ot "GPU0 -ngl 99 --ot exps=CPU"
# every family's tests model (F32, and Q4_K_M where the goldens have one)
# on GPU0 against the CPU, whose logits the tests hold to llama.cpp's
if [ "${FAMILIES:-1}" = 1 ]; then
    log "every family on GPU0 against the CPU (strata eval, the tests' models)"
    FAM="llama3-untied-ropefreqs llama-tied-linear qwen2-untied-bias qwen2-yarn qwen3-headdim24
        gemma2-swa-softcap gemma3-swa-untied gemma3-tied-finalcap llama-moe-4x2 phi3-fused-longrope
        phi3-separate-shortrope llama3-untied-ropefreqs-q4km gemma2-swa-softcap-q4km
        gemma3-swa-untied-q4km qwen3moe-8x2-q4km phi3-fused-longrope-q4km"
    # shellcheck disable=SC2086
    "$BUNDLE/write_tiny_models" "$M" --tests $FAM >/dev/null
    for m in $FAM; do
        "$S" eval -m "$M/$m.gguf" -p "$P" --logits-out "/tmp/$m.cpu" -t "$T" >/dev/null 2>&1
        "$S" eval -m "$M/$m.gguf" -p "$P" --logits-out "/tmp/$m.gpu" -t "$T" -ngl 99 --device GPU0 >/dev/null 2>&1
        printf '%s: ' "$m" | tee -a "$OUT/summary.txt"
        kl "/tmp/$m.cpu" "/tmp/$m.gpu" "GPU0"
    done
fi
log "strata explain qwen3moe-8x2 -ngl 99 --device GPU0 --ot exps=CPU (batch 128 and 1)"
for b in 128 1; do
    timeout 60 "$S" explain -m "$M/qwen3moe-8x2.gguf" -ngl 99 --device GPU0 --ot exps=CPU -b "$b" \
        >"$OUT/explain-moe-b$b.txt" 2>&1
    grep -E 'splits,|^## SPLIT' "$OUT/explain-moe-b$b.txt" | tee -a "$OUT/summary.txt"
done
log "ggml's scheduler on the same placement (GGML_SCHED_DEBUG=2, Vulkan0)"
for p in 128 1; do
    GGML_SCHED_DEBUG=2 timeout 60 "$LB" -v -m "$M/qwen3moe-8x2.gguf" -ngl 99 -ot exps=CPU -p "$p" -n 0 -r 1 -t "$T" \
        >"$OUT/ggml-sched-$p.txt" 2>&1
    # the splits of the last graph ggml printed (one SPLIT #0 starts each graph)
    echo "batch $p:" | tee -a "$OUT/summary.txt"
    awk '/^## SPLIT #0:/{n=0; s=""} /^## SPLIT/{n++; s=s $0 "\n"} END{printf "%s  %d splits\n", s, n}' \
        "$OUT/ggml-sched-$p.txt" | tee -a "$OUT/summary.txt"
done

for m in bench-llama-q4_1 bench-llama; do
    log "strata bench -ngl 99 --device GPU0 $m"
    timeout 150 "$S" bench -m "$M/$m.gguf" -ngl 99 --device GPU0 -p "$PP" -n "$NG" -r "$REPS" -t "$T" 2>&1 | quiet | tee -a "$OUT/summary.txt"
    log "llama-bench (Vulkan) -ngl 99 $m"
    timeout 120 "$LB" -m "$M/$m.gguf" -ngl 99 -p "$PP" -n "$NG" -r "$REPS" -t "$T" 2>&1 | tail -5 | tee -a "$OUT/summary.txt"
done
log "MoE: bench-qwen3moe, experts on the CPU (--ot exps=CPU) and all on the GPU"
for ot in "--ot exps=CPU" ""; do
    timeout 150 "$S" bench -m "$M/bench-qwen3moe.gguf" -ngl 99 --device GPU0 $ot -p "$PP" -n "$NG" -r "$REPS" -t "$T" 2>&1 | quiet | tee -a "$OUT/summary.txt"
    timeout 120 "$LB" -m "$M/bench-qwen3moe.gguf" -ngl 99 ${ot/--ot/-ot} -p "$PP" -n "$NG" -r "$REPS" -t "$T" 2>&1 | tail -4 | tee -a "$OUT/summary.txt"
done
log "done"
