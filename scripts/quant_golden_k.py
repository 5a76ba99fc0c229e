#!/usr/bin/env python3
"""Golden vectors for the K-quant and IQ4 formats (crates/strata/tests/quant_golden.rs).

Quantized bytes come from ggml itself: scripts/quant_golden_k.c, linked
against a build of ggml (llama.cpp b11312 was used), calls
ggml_quantize_chunk(type, x, dst, 0, 8, 256, NULL) on the 8 x 256 rows of
tests/data/quant/input_f32_8x256.bin (quantize_row_q8_K_ref for Q8_K,
and quantize_row_iq4_nl_ref for the CPU backend's IQ4_NL variant); the gguf
python package does not quantize these formats. Dequantized values come from
gguf.quants.dequantize (Q8_K, which gguf does not know, from ggml's
dequantize_row_q8_K); both are checked to agree with ggml's to_float bit for
bit. The dot products are ggml's CPU vec_dot (native SIMD build), quantized
row r against row (r + 1) % 8 in the vec_dot_type.

A second, larger input (input_k_stress_f32_32x256.bin, 32 rows drawn from
numpy's default_rng(20251125): scales from 1e-6 to 1e3, outliers, all-positive
and all-negative rows, sparse rows with all-zero sub-blocks, heavy tails,
exact ties, per-32-block scale jumps) is quantized the same way; only its
quantized bytes are kept (<name>_stress_quantized.bin).

    pip install gguf==0.19.0 numpy
    python3 scripts/quant_golden_k.py --ggml-src /work/ggml-ref/src/vendor/llama.cpp \
        --ggml-lib /work/ggml-ref/build-native/bin

writes the files and tests/data/quant/manifest_k.json.
"""

import argparse
import importlib.metadata
import json
import shutil
import subprocess
import tempfile
from pathlib import Path

import gguf
import numpy as np
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType as Q

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "crates/strata/tests/data/quant"
ROWS, COLS = 8, 256
STRESS_ROWS = 32

TYPES = ["Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q8_K", "IQ4_NL", "IQ4_XS"]
# ggml_type_name spelling, used for the file names the C program writes.
GGML_NAME = {t: t.lower().replace("_k", "_K") for t in TYPES}
VEC_DOT_TYPE = {"IQ4_NL": "Q8_0", "Q8_K": None}


def stress_input() -> np.ndarray:
    rng = np.random.default_rng(20251125)
    n = COLS
    rows = []
    for s in (1e-6, 1e-2, 1.0, 1e3):
        rows.append(rng.normal(0, 1, n) * s)
    for _ in range(4):
        r = rng.uniform(-1, 1, n)
        r[rng.random(n) < 0.05] *= 30
        rows.append(r)
    rows += [rng.uniform(0.5, 2, n), rng.uniform(1, 1.001, n), np.exp(rng.normal(0, 1, n)), rng.normal(5, 1, n)]
    rows += [-r for r in rows[-4:]]
    for _ in range(4):
        r = rng.normal(0, 1, n)
        r[rng.random(n) < 0.9] = 0
        rows.append(r)
    for _ in range(4):
        rows.append(rng.normal(0, 1, n) / rng.uniform(0.05, 1, n))
    for _ in range(4):
        rows.append(rng.integers(-8, 9, n) * 0.25)
    for _ in range(4):
        rows.append(rng.normal(0, 1, n) * np.repeat(2.0 ** rng.uniform(-10, 10, n // 32), 32))
    x = np.array(rows, dtype="<f4")
    assert x.shape == (STRESS_ROWS, COLS)
    return x


def run_ggml(exe: Path, input_file: Path, nrows: int, out: Path) -> None:
    out.mkdir()
    subprocess.run([str(exe), str(input_file), str(nrows), str(out)], check=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ggml-src", required=True, type=Path, help="llama.cpp source tree")
    ap.add_argument("--ggml-lib", required=True, type=Path, help="folder with libggml-base.so and libggml-cpu.so")
    ap.add_argument("--cc", default="cc")
    args = ap.parse_args()

    x = np.fromfile(DATA / "input_f32_8x256.bin", dtype="<f4").reshape(ROWS, COLS)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        exe = tmp / "quant_golden_k"
        inc = args.ggml_src / "ggml/include"
        cmd = [args.cc, "-O2", "-std=c11", str(ROOT / "scripts/quant_golden_k.c"), f"-I{inc}",
               f"-L{args.ggml_lib}", "-lggml-base", "-lggml-cpu", f"-Wl,-rpath,{args.ggml_lib}", "-o", str(exe)]
        subprocess.run(cmd, check=True)
        out = tmp / "out"
        run_ggml(exe, DATA / "input_f32_8x256.bin", ROWS, out)
        stress_file = DATA / "input_k_stress_f32_32x256.bin"
        stress_input().tofile(stress_file)
        stress = tmp / "stress"
        run_ggml(exe, stress_file, STRESS_ROWS, stress)

        types = {}
        for t in TYPES + ["IQ4_NL_REF"]:
            base = "IQ4_NL" if t == "IQ4_NL_REF" else t
            qtype = Q[base]
            block, type_size = GGML_QUANT_SIZES[qtype]
            stem = "iq4_nl_ref" if t == "IQ4_NL_REF" else GGML_NAME[t]
            q = np.fromfile(out / f"{stem}_quantized.bin", dtype=np.uint8)
            row_bytes = COLS // block * type_size
            assert q.size == ROWS * row_bytes, (t, q.size)
            ggml_dq = np.fromfile(out / f"{GGML_NAME[base]}_dequantized_ggml_f32.bin", dtype="<f4")
            if t == "IQ4_NL_REF":
                ggml_dq = None  # ggml's to_float output is for the chunk variant
            if base == "Q8_K":
                dq = ggml_dq
                dq_by = "ggml dequantize_row_q8_K (the gguf package has no Q8_K)"
            else:
                dq = gguf.quants.dequantize(q.reshape(ROWS, row_bytes), qtype).astype("<f4").reshape(-1)
                dq_by = f"gguf {importlib.metadata.version('gguf')} quants.dequantize"
                if ggml_dq is not None:
                    assert np.array_equal(dq.view(np.uint32), ggml_dq.view(np.uint32)), f"{t}: gguf and ggml dequantize differ"
            name = t.lower()
            shutil.copy(out / f"{stem}_quantized.bin", DATA / f"{name}_quantized.bin")
            dq.tofile(DATA / f"{name}_dequantized_f32.bin")
            entry = {
                "ggml_type_id": int(qtype),
                "block_size": block,
                "type_size_bytes": type_size,
                "quantized": f"{name}_quantized.bin",
                "quantized_by": ("quantize_row_iq4_nl_ref" if t == "IQ4_NL_REF"
                                 else "quantize_row_q8_K_ref" if t == "Q8_K"
                                 else "ggml_quantize_chunk(imatrix = NULL)"),
                "quantized_bytes_per_row": row_bytes,
                "dequantized": f"{name}_dequantized_f32.bin",
                "dequantized_by": dq_by,
                "max_abs_err_vs_input": float(np.max(np.abs(dq.reshape(ROWS, COLS) - x))),
            }
            shutil.copy(stress / f"{stem}_quantized.bin", DATA / f"{name}_stress_quantized.bin")
            entry["stress_quantized"] = f"{name}_stress_quantized.bin"
            dot = out / f"{GGML_NAME[base]}_dot_ggml_f32.bin"
            if t != "IQ4_NL_REF" and dot.exists():
                shutil.copy(dot, DATA / f"{name}_dot_ggml_f32.bin")
                entry["dot"] = f"{name}_dot_ggml_f32.bin"
                entry["dot_partner"] = VEC_DOT_TYPE.get(t, "Q8_K")
            types[t] = entry

    manifest = {
        "input": {"file": "input_f32_8x256.bin", "note": "the same rows as manifest.json"},
        "stress_input": {"file": stress_file.name, "rows": STRESS_ROWS, "cols": COLS, "note": "see the script"},
        "generated_by": ("scripts/quant_golden_k.py: quantized by ggml (llama.cpp b11312, libggml-base built "
                         "-O3 -march=x86-64, no FMA), dequantized by the gguf python package; see the script"),
        "command": ("python3 scripts/quant_golden_k.py --ggml-src /work/ggml-ref/src/vendor/llama.cpp "
                    "--ggml-lib /work/ggml-ref/build-native/bin"),
        "dots": "dot[r] = vec_dot(quantized row r, row (r + 1) % 8 converted to dot_partner) by ggml's CPU backend",
        "types": types,
    }
    (DATA / "manifest_k.json").write_text(json.dumps(manifest, indent=1) + "\n")
    print("wrote", len(types), "types to", DATA)


if __name__ == "__main__":
    main()
