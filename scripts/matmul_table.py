#!/usr/bin/env python3
"""Prints the GFLOP/s table of the last `cargo bench -p strata --bench matmul`
run from criterion's JSON (target/criterion/matmul): median time per case,
flops = 2·m·k·n; speedup = best level / scalar, both at 1 thread."""
import json, pathlib, re, sys

root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "target/criterion/matmul")
rows = {}
for est in root.glob("*/*/new/estimates.json"):
    case = est.parent.parent.name
    m = re.fullmatch(r"m(\d+)_k(\d+)_n(\d+)_(\w+)_t(\d+)", case)
    if not m:
        continue
    mm, k, n, isa, t = int(m[1]), int(m[2]), int(m[3]), m[4], int(m[5])
    ns = json.loads(est.read_text())["median"]["point_estimate"]
    gflops = 2 * mm * k * n / ns
    rows.setdefault((est.parent.parent.parent.name, mm, k, n), {})[(isa, t)] = gflops

order = ["q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "f16", "bf16", "f32"]
cols = sorted({c for r in rows.values() for c in r}, key=lambda c: (c[0] != "scalar", c[0], c[1]))
print("| type | m × k × n | " + " | ".join(f"{i} {t}T" for i, t in cols) + " | SIMD/scalar (1T) |")
print("|---|---|" + "---|" * len(cols) + "---|")
for key in sorted(rows, key=lambda r: (order.index(r[0]) if r[0] in order else 99, r[3], -r[1] * 0 + r[1], r[2])):
    r = rows[key]
    cells = [f"{r[c]:.2f}" if c in r else "–" for c in cols]
    best = [v for (i, t), v in r.items() if i != "scalar" and t == 1]
    sp = f"{max(best) / r[('scalar', 1)]:.1f}×" if best and ("scalar", 1) in r else "–"
    print(f"| {key[0]} | {key[1]} × {key[2]} × {key[3]} | " + " | ".join(cells) + f" | {sp} |")
