#!/usr/bin/env python3
"""strata's matmul bench beside ggml's `test-backend-ops perf` in one table.

    python3 scripts/ggml_mulmat_cases.py > cases.txt
    test-backend-ops perf -b CPU --test-file cases.txt > ggml.txt   # 1 thread here (N_THREADS/2)
    cargo bench -p strata --bench matmul
    python3 scripts/matmul_vs_ggml.py ggml.txt [criterion group dirs; default matmul, matmul_float and matmul_k]

GFLOP/s = 2·m·k·n / time. ggml's figure is its CPU backend on plain
buffers (no repacking) with hardware_concurrency/2 threads; strata's columns
are its best level on plain buffers and in a CPU_PACKED buffer (where the
type has packed kernels), at 1 and 2 threads; the ratio compares the best
strata figure with ggml's at the same thread count.
"""
import json, pathlib, re, sys

ggml_txt = pathlib.Path(sys.argv[1]).read_text()
roots = [pathlib.Path(a) for a in sys.argv[2:]] or [
    pathlib.Path("target/criterion/matmul"), pathlib.Path("target/criterion/matmul_float"),
    pathlib.Path("target/criterion/matmul_k")]

TYPES = ["q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "f16", "bf16", "f32",
         "q2_K", "q3_K", "q4_K", "q5_K", "q6_K", "iq4_nl", "iq4_xs"]
ggml = {}
pat = re.compile(r"MUL_MAT\(type=f32,ne=\[(\d+),(\d+),1,1\].*?sources=(\w+)\[(\d+),(\d+),1,1\].*?\):\s+(\d+) runs -\s+([\d.]+) us/run")
for m in pat.finditer(ggml_txt):
    mm, n, t, k = int(m[1]), int(m[2]), m[3], int(m[4])
    us = float(m[7])
    ggml[(t, mm, k, n)] = 2 * mm * k * n / (us * 1e3)

strata = {}
for est in (e for r in roots for e in r.glob("*/*/new/estimates.json")):
    case = est.parent.parent.name
    m = re.fullmatch(r"m(\d+)_k(\d+)_n(\d+)_(\w+?)_t(\d+)(_new|_legacy)?", case)
    if not m or m[6] == "_legacy":
        continue
    t = est.parent.parent.parent.name
    key = (t, int(m[1]), int(m[2]), int(m[3]))
    ns = json.loads(est.read_text())["median"]["point_estimate"]
    variant = "packed" if m[4].startswith("packed") else ("scalar" if m[4] == "scalar" else "plain")
    g = 2 * key[1] * key[2] * key[3] / ns
    slot = strata.setdefault(key, {})
    th = int(m[5])
    slot[(variant, th)] = max(slot.get((variant, th), 0.0), g)

print("| type | m × k × n | ggml 1T | strata plain 1T | strata packed 1T | strata best 2T | strata / ggml (1T) |")
print("|---|---|---:|---:|---:|---:|---:|")
for key in sorted(set(ggml) | set(strata), key=lambda r: (TYPES.index(r[0]) if r[0] in TYPES else 99, r[3], r[1], r[2])):
    if key not in strata or key not in ggml:
        continue
    s, g = strata[key], ggml[key]
    f = lambda v: f"{v:.1f}" if v else "–"
    p1, k1 = s.get(("plain", 1)), s.get(("packed", 1))
    best1 = max(v for v in (p1, k1) if v) if (p1 or k1) else None
    best2 = max([v for (var, th), v in s.items() if th == 2 and var != "scalar"], default=None)
    ratio = f"{best1 / g:.2f}×" if best1 else "–"
    print(f"| {key[0]} | {key[1]} × {key[2]} × {key[3]} | {g:.1f} | {f(p1)} | {f(k1)} | {f(best2)} | {ratio} |")
