#!/bin/sh
# Regenerates crates/strata-models/tests/data/families/: llama.cpp's own
# last-position logits on the tiny random-weight models of every family
# (llama, qwen2, qwen3) that crates/strata-models/tests/support/tiny_models.rs
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

# the prompts of tests/families.rs: SHORT (one batch) and LONG (two batches of 8)
SHORT="72 105 33"
LONG="84 104 101 32 113 117 105 99 107 256 98 114 111"
N_BATCH=8

rm -rf "$OUT"
mkdir -p "$OUT"
{
    printf '{\n "description": "llama.cpp last-position logits (n_vocab little-endian f32 per file) on the tiny models of crates/strata-models/tests/support/tiny_models.rs",\n'
    printf ' "command": "scripts/llamacpp_family_goldens.sh",\n'
    printf ' "llama_cpp": "vendored llama-cpp-python 0.3.36 (llama.cpp b11312), CPU only, 1 thread",\n'
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
