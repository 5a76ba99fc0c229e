#!/usr/bin/env python3
"""Writes a `test-backend-ops --test-file` case list: MUL_MAT at SmolLM2-135M's
shapes for every weight type strata supports, n = 1 and 512, so ggml's
`test-backend-ops perf -b CPU --test-file FILE` measures the shapes strata's
`benches/matmul.rs` measures (`scripts/matmul_vs_ggml.py` joins the two).

Line format (tests/test-backend-ops.cpp, make_test_cases_from_file):
`op type ne0..ne3 n_params params.. n_src [type ne0..ne3 nb0..nb3].. name`.
"""
import sys

OP_MUL_MAT = 29
# ggml type id, block size, block bytes
TYPES = {"f32": (0, 1, 4), "f16": (1, 1, 2), "q4_0": (2, 32, 18), "q4_1": (3, 32, 20),
         "q5_0": (6, 32, 22), "q5_1": (7, 32, 24), "q8_0": (8, 32, 34), "bf16": (30, 1, 2)}
# (m, k): attention q/o, k/v, FFN up/gate, FFN down, output head
SHAPES = [(576, 576), (192, 576), (1536, 576), (576, 1536), (49152, 576)]


def main():
    out = []
    for _, (tid, bs, ts) in TYPES.items():
        for m, k in SHAPES:
            for n in (1, 512):
                rs = k // bs * ts
                a = f"{tid} {k} {m} 1 1 {ts} {rs} {rs * m} {rs * m}"
                b = f"0 {k} {n} 1 1 4 {4 * k} {4 * k * n} {4 * k * n}"
                out.append(f"{OP_MUL_MAT} 0 {m} {n} 1 1 0 2 {a} {b} -")
    sys.stdout.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
