#!/usr/bin/env python3
"""Writes a `test-backend-ops --test-file` case list: MUL_MAT at SmolLM2-135M's
shapes for every weight type strata supports, n = 1 and 512 (the K-quants and
IQ4 types at the 1024-wide shapes of `matmul_k`, since 576 does not divide into
256-element super-blocks), so ggml's
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
K_TYPES = {"q2_K": (10, 256, 84), "q3_K": (11, 256, 110), "q4_K": (12, 256, 144),
           "q5_K": (13, 256, 176), "q6_K": (14, 256, 210), "iq4_nl": (20, 32, 18),
           "iq4_xs": (23, 256, 136)}
# (m, k): benches/matmul.rs's K_MK (attention, FFN up/gate, FFN down at width 1024)
K_SHAPES = [(1024, 1024), (2816, 1024), (1024, 2816)]


def case_line(tid, bs, ts, m, k, n):
    """The test-file line of MUL_MAT of an m x k weight (ggml type `tid`,
    block size `bs`, block bytes `ts`) by k x n f32 activations."""
    rs = k // bs * ts
    a = f"{tid} {k} {m} 1 1 {ts} {rs} {rs * m} {rs * m}"
    b = f"0 {k} {n} 1 1 4 {4 * k} {4 * k * n} {4 * k * n}"
    return f"{OP_MUL_MAT} 0 {m} {n} 1 1 0 2 {a} {b} -"


def main():
    out = []
    cases = [(t, SHAPES) for t in TYPES.values()] + [(t, K_SHAPES) for t in K_TYPES.values()]
    for (tid, bs, ts), shapes in cases:
        for m, k in shapes:
            for n in (1, 512):
                out.append(case_line(tid, bs, ts, m, k, n))
    sys.stdout.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
