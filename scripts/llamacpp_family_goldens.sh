#!/bin/sh
# Regenerates crates/strata-models/tests/data/families/: llama.cpp's own
# last-position logits on the tiny random-weight models of every family
# (and each again quantized) that crates/strata-models/tests/support/tiny_models.rs
# generates, for tests/families_llamacpp.rs (KL(llama.cpp || strata) <= 1e-3).
#
#   scripts/llamacpp_family_goldens.sh            (from the repository root)
#
# LLAMA_CPP: the llama.cpp tree with a build (default: the vendored
# llama-cpp-python 0.3.36 sources, release b11312). The models are written
# to a temporary directory, never committed; the manifest records each one's
# FNV-1a 64 hash, which the test checks against today's generator.
set -eu
R=${LLAMA_CPP:-/work/ggml-ref/llama_cpp_python-0.3.36/vendor/llama.cpp}
OUT=crates/strata-models/tests/data/families
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

gcc -O2 -Wall -Wextra -o "$TMP/llamacpp_logits" scripts/llamacpp_logits.c \
    -I"$R/include" -I"$R/ggml/include" -L"$R/build/bin" \
    -lllama -lggml -lggml-base -Wl,-rpath,"$R/build/bin"
cargo run -q -p strata-models --example write_tiny_models -- "$TMP/models" > "$TMP/hashes"

# SHORT: one batch; LONG: 600 tokens, two batches of 512 (the KV cache
# carries over), token i = (x_{i+1} >> 16) mod 256 for the LCG
# x_0 = 1, x_{i+1} = (1103515245 x_i + 12345) mod 2^31
SHORT="72 105 33"
LONG=$(python3 -c 'x = 1
for i in range(600):
    x = (1103515245 * x + 12345) % 2**31
    print((x >> 16) % 256, end=" ")')
N_BATCH=512

rm -rf "$OUT"
mkdir -p "$OUT"
{
    printf '{\n "description": "llama.cpp last-position logits (n_vocab little-endian f32 per file) on the tiny models of crates/strata-models/tests/support/tiny_models.rs",\n'
    printf ' "command": "scripts/llamacpp_family_goldens.sh",\n'
    printf ' "llama_cpp": "vendored llama-cpp-python 0.3.36 (llama.cpp b11312), CPU only, 1 thread, n_ctx 1024",\n'
    printf ' "n_batch": %s,\n "prompts": {"short": [%s], "long": [%s]},\n' \
        "$N_BATCH" "$(echo $SHORT | tr ' ' ',')" "$(echo $LONG | tr ' ' ',')"
    printf ' "files": "NAME.PROMPT.fa0.f32 (soft_max attention), NAME.PROMPT.fa1.f32 (flash attention)",\n'
    printf ' "models": {'
    sep=""
    while read -r name hash; do
        printf '%s\n  "%s": "%s"' "$sep" "$name" "$hash"
        sep=","
    done < "$TMP/hashes"
    printf '\n }\n}\n'
} > "$OUT/manifest.json"

while read -r name hash; do
    for fa in 0 1; do
        "$TMP/llamacpp_logits" "$TMP/models/$name.gguf" "$OUT/$name.short.fa$fa.f32" $N_BATCH $fa $SHORT
        "$TMP/llamacpp_logits" "$TMP/models/$name.gguf" "$OUT/$name.long.fa$fa.f32" $N_BATCH $fa $LONG
    done
done < "$TMP/hashes"
ls "$OUT"
