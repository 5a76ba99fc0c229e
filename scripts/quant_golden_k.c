// Golden quantized bytes for the K-quant and IQ4 formats, made by ggml itself.
//
// Built and run by scripts/quant_golden_k.py (see there); links against a
// build of ggml (libggml-base for the quantizers, libggml-cpu for the dot
// products).
//
//   quant_golden_k INPUT_F32 NROWS OUT_DIR
//
// INPUT_F32 holds NROWS rows of 256 little-endian f32. For each type it writes
//   <name>_quantized.bin     ggml_quantize_chunk(type, x, dst, 0, 8, 256, NULL)
//                            (Q8_K: quantize_row_q8_K_ref, which
//                            ggml_quantize_chunk does not cover)
//   <name>_dequantized_ggml_f32.bin   ggml's to_float of those bytes
//                            (Q8_K: dequantize_row_q8_K)
//   <name>_dot_ggml_f32.bin  NROWS dot products: quantized row r with row (r + 1) % NROWS
//                            converted to the type's vec_dot_type by ggml's CPU
//                            from_float, computed by the CPU backend's vec_dot
//                            (weight types only)
// plus iq4_nl_ref_quantized.bin: quantize_row_iq4_nl_ref (the CPU backend's
// from_float for IQ4_NL, which differs from ggml_quantize_chunk's IQ4_NL).

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ggml.h"
#include "ggml-cpu.h"

// Exported by libggml-base (ggml-quants.h is not an installed header).
void quantize_row_q8_K_ref(const float * x, void * y, int64_t k);
void quantize_row_iq4_nl_ref(const float * x, void * y, int64_t k);
void dequantize_row_q8_K(const void * x, float * y, int64_t k);

#define COLS 256

static void write_file(const char * dir, const char * name, const char * suffix, const void * p, size_t n) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s%s", dir, name, suffix);
    FILE * f = fopen(path, "wb");
    if (!f || fwrite(p, 1, n, f) != n || fclose(f) != 0) {
        fprintf(stderr, "cannot write %s\n", path);
        exit(1);
    }
}

int main(int argc, char ** argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s INPUT_F32 NROWS OUT_DIR\n", argv[0]);
        return 2;
    }
    const int ROWS = atoi(argv[2]);
    const char * out_dir = argv[3];
    float * x = malloc(sizeof(float) * ROWS * COLS);
    float * dq = malloc(sizeof(float) * ROWS * COLS);
    float * dots = malloc(sizeof(float) * ROWS);
    FILE * f = fopen(argv[1], "rb");
    if (ROWS < 1 || !f || fread(x, sizeof(float), ROWS * COLS, f) != (size_t) ROWS * COLS) {
        fprintf(stderr, "cannot read %d rows of f32 from %s\n", ROWS, argv[1]);
        return 1;
    }
    fclose(f);
    ggml_cpu_init();

    const enum ggml_type types[] = {
        GGML_TYPE_Q2_K, GGML_TYPE_Q3_K, GGML_TYPE_Q4_K, GGML_TYPE_Q5_K, GGML_TYPE_Q6_K,
        GGML_TYPE_Q8_K, GGML_TYPE_IQ4_NL, GGML_TYPE_IQ4_XS,
    };
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        const enum ggml_type type = types[t];
        const char * name = ggml_type_name(type);
        const size_t row_size = ggml_row_size(type, COLS);
        uint8_t * q = calloc(ROWS, row_size);
        if (type == GGML_TYPE_Q8_K) {
            quantize_row_q8_K_ref(x, q, ROWS * COLS);
        } else {
            size_t got = ggml_quantize_chunk(type, x, q, 0, ROWS, COLS, NULL);
            if (got != ROWS * row_size) {
                fprintf(stderr, "%s: ggml_quantize_chunk wrote %zu bytes\n", name, got);
                return 1;
            }
        }
        write_file(out_dir, name, "_quantized.bin", q, ROWS * row_size);

        if (type == GGML_TYPE_Q8_K) {
            // Q8_K has no to_float in ggml's type traits.
            dequantize_row_q8_K(q, dq, ROWS * COLS);
        } else {
            ggml_get_type_traits(type)->to_float(q, dq, ROWS * COLS);
        }
        write_file(out_dir, name, "_dequantized_ggml_f32.bin", dq, sizeof(float) * ROWS * COLS);

        const struct ggml_type_traits_cpu * cpu = ggml_get_type_traits_cpu(type);
        if (cpu->vec_dot) {
            const enum ggml_type vt = cpu->vec_dot_type;
            const size_t vrow = ggml_row_size(vt, COLS);
            uint8_t * qy = calloc(ROWS, vrow);
            for (int r = 0; r < ROWS; r++) {
                ggml_get_type_traits_cpu(vt)->from_float(x + r * COLS, qy + r * vrow, COLS);
            }
            for (int r = 0; r < ROWS; r++) {
                cpu->vec_dot(COLS, &dots[r], 0, q + r * row_size, 0, qy + ((r + 1) % ROWS) * vrow, 0, 1);
            }
            write_file(out_dir, name, "_dot_ggml_f32.bin", dots, sizeof(float) * ROWS);
            free(qy);
        }
        free(q);
    }

    const size_t nl_row = ggml_row_size(GGML_TYPE_IQ4_NL, COLS);
    uint8_t * q = calloc(ROWS, nl_row);
    for (int r = 0; r < ROWS; r++) {
        quantize_row_iq4_nl_ref(x + r * COLS, q + r * nl_row, COLS);
    }
    write_file(out_dir, "iq4_nl_ref", "_quantized.bin", q, ROWS * nl_row);
    free(q);
    free(x);
    free(dq);
    free(dots);
    return 0;
}
