#!/usr/bin/env python3
"""Run test binaries that `cargo test --workspace --no-run` already built.

Usage: built.py ARTIFACTS.jsonl TEST [TEST ...] [-- ARGS...]

ARTIFACTS.jsonl is that command's `--message-format=json-render-diagnostics`
output. Each TEST (an integration-test target name, e.g. `kld_llamacpp`) runs
from its package's directory, as `cargo test` runs it, with ARGS (a name
filter, `--nocapture`, ...). `cargo test -p PKG --test TEST` would rebuild the
workspace crates with the feature set of PKG alone, minutes per pass on two
cores; the binaries built for the whole workspace are the ones to rerun.
Exits non-zero when a test is missing or any run fails.
"""
import json
import os
import subprocess
import sys


def main() -> int:
    argv = sys.argv[1:]
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    artifacts, rest = argv[0], argv[1:]
    args = []
    if "--" in rest:
        cut = rest.index("--")
        rest, args = rest[:cut], rest[cut + 1:]
    found = {}
    with open(artifacts, encoding="utf-8") as f:
        for line in f:
            if not line.startswith("{"):
                continue
            msg = json.loads(line)
            if msg.get("reason") != "compiler-artifact" or not msg.get("executable"):
                continue
            target = msg["target"]
            if "test" in target["kind"] and msg["profile"]["test"]:
                found[target["name"]] = (msg["executable"], os.path.dirname(msg["manifest_path"]))
    missing = [name for name in rest if name not in found]
    if missing:
        print(f"built.py: no test target {missing} in {artifacts}", file=sys.stderr)
        return 1
    status = 0
    for name in rest:
        exe, cwd = found[name]
        print(f"     Running {name} ({exe}) {' '.join(args)}", flush=True)
        if subprocess.call([exe, *args], cwd=cwd) != 0:
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
