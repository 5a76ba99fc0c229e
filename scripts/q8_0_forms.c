// Two exact AVX2 formulations of the Q8_0 × Q8_0 tile, timed in a register
// loop shaped like strata's (8 rows per 32-bit lane group, a pass of columns
// sharing each weight dword group, an f32 epilogue per block and column),
// for PERFORMANCE.md's "what bounds the Q8_0 products at AVX2" (issue #12):
//
// * sign: strata's AVX2 tile. Per 8 rows × 4 elements × column ("unit"):
//   vpsignb, vpmaddubsw, vpmaddwd (ones), vpaddd, plus one vpabsb per dword
//   group shared by the pass's eight columns.
// * wino: Winograd's inner-product identity on i16 lanes,
//   Σ w·a = Σ_pairs (w0 + a1)(w1 + a0) − Σ w0 w1 − Σ a0 a1, with the weights
//   widened once (as a decode-once kernel would) and the activations widened
//   and pair-swapped once per column: per unit two vpaddw, one vpmaddwd and
//   one vpaddd, the row and column terms starting each block's sum.
//
//   gcc -O3 -funroll-loops -mavx2 -mfma scripts/q8_0_forms.c -o /tmp/q8_0_forms
//   /tmp/q8_0_forms
//
// Checks both against a scalar sum first (exit 1 on a mismatch), then prints
// time-stamp ticks per unit, three rounds. A tick is not a core cycle: scale
// by the core/TSC ratio of the host (PERFORMANCE.md measures it with a
// dependent imul chain).
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <x86intrin.h>

#define NB 18    // blocks of 32: K = 576, SmolLM2's hidden size
#define NCOL 512 // columns: a pp512 batch
#define PASS_S 8 // columns per pass, sign trick (strata's)
#define PASS_W 6 // columns per pass, Winograd (as many as 16 ymm registers hold)

// Weights of one half group (8 rows): per block 8 dword groups of 32 bytes
// (lane r holds elements 4j .. 4j + 4 of row r), and the rows' scales.
static int8_t wq[NB][8][32] __attribute__((aligned(64)));
static float wd[NB][8] __attribute__((aligned(64)));
// The same weights widened: even (elements 0, 2 of each dword) and odd
// (1, 3) i16 lanes, and per block and row -Σ w0 w1 over its pairs.
static int16_t we[NB][8][16] __attribute__((aligned(64)));
static int16_t wo[NB][8][16] __attribute__((aligned(64)));
static int32_t wr[NB][8] __attribute__((aligned(64)));
// Activations: per column and block 32 i8, then the f32 scale.
static int8_t aq[NCOL][NB][32] __attribute__((aligned(64)));
static float ad[NCOL][NB];
// Widened: per dword group j the i16 pairs (a1, a3) and (a0, a2), then the
// column term Σ a0 a1 over the block's pairs.
static int16_t aw[NCOL][NB][8][4] __attribute__((aligned(64)));
static int32_t ac[NCOL][NB];

static float out_s[NCOL][8], out_w[NCOL][8];
static int32_t isum_s[NB][8], isum_w[NB][8]; // column 0's integer sums

// Block b's f32 step for columns c0 .. c0 + n (the same in both forms):
// acc += f32(s) · (d_w · d_a), keeping column 0's integer sums to check.
static inline __attribute__((always_inline)) void epilogue(__m256 *acc, const __m256i *s, int n,
                                                           int c0, int b, int32_t isum[NB][8]) {
    if (c0 == 0) _mm256_storeu_si256((__m256i *)isum[b], s[0]);
    __m256 dw = _mm256_load_ps(wd[b]);
    for (int i = 0; i < n; i++) {
        __m256 da = _mm256_set1_ps(ad[c0 + i][b]);
        acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[i]), _mm256_mul_ps(dw, da), acc[i]);
    }
}

__attribute__((noinline)) static void sign_trick(void) {
    const __m256i ones = _mm256_set1_epi16(1);
    for (int c0 = 0; c0 < NCOL; c0 += PASS_S) {
        __m256 acc[PASS_S];
        for (int i = 0; i < PASS_S; i++) acc[i] = _mm256_setzero_ps();
        for (int b = 0; b < NB; b++) {
            __m256i s[PASS_S];
            for (int i = 0; i < PASS_S; i++) s[i] = _mm256_setzero_si256();
            for (int j = 0; j < 8; j++) {
                __m256i q = _mm256_load_si256((const __m256i *)wq[b][j]);
                __m256i qa = _mm256_abs_epi8(q);
                for (int i = 0; i < PASS_S; i++) {
                    __m256i y = _mm256_sign_epi8(
                        _mm256_set1_epi32(*(const int32_t *)&aq[c0 + i][b][4 * j]), q);
                    s[i] = _mm256_add_epi32(
                        s[i], _mm256_madd_epi16(_mm256_maddubs_epi16(qa, y), ones));
                }
            }
            epilogue(acc, s, PASS_S, c0, b, isum_s);
        }
        for (int i = 0; i < PASS_S; i++) _mm256_storeu_ps(out_s[c0 + i], acc[i]);
    }
}

__attribute__((noinline)) static void winograd(void) {
    int c0 = 0;
    for (; c0 + PASS_W <= NCOL; c0 += PASS_W) {
        __m256 acc[PASS_W];
        for (int i = 0; i < PASS_W; i++) acc[i] = _mm256_setzero_ps();
        for (int b = 0; b < NB; b++) {
            __m256i s[PASS_W];
            __m256i r = _mm256_load_si256((const __m256i *)wr[b]);
            for (int i = 0; i < PASS_W; i++)
                s[i] = _mm256_sub_epi32(r, _mm256_set1_epi32(ac[c0 + i][b]));
            for (int j = 0; j < 8; j++) {
                __m256i e = _mm256_load_si256((const __m256i *)we[b][j]);
                __m256i o = _mm256_load_si256((const __m256i *)wo[b][j]);
                for (int i = 0; i < PASS_W; i++) {
                    const int32_t *p = (const int32_t *)aw[c0 + i][b][j];
                    __m256i u = _mm256_add_epi16(e, _mm256_set1_epi32(p[0]));
                    __m256i v = _mm256_add_epi16(o, _mm256_set1_epi32(p[1]));
                    s[i] = _mm256_add_epi32(s[i], _mm256_madd_epi16(u, v));
                }
            }
            epilogue(acc, s, PASS_W, c0, b, isum_w);
        }
        for (int i = 0; i < PASS_W; i++) _mm256_storeu_ps(out_w[c0 + i], acc[i]);
    }
}

int main(void) {
    srand(1);
    for (int b = 0; b < NB; b++)
        for (int r = 0; r < 8; r++) {
            wd[b][r] = 1.0f / (1 + rand() % 64);
            int32_t t = 0;
            for (int j = 0; j < 8; j++) {
                int8_t *w = &wq[b][j][4 * r];
                for (int k = 0; k < 4; k++) w[k] = (int8_t)(rand() % 255 - 127);
                we[b][j][2 * r] = w[0], we[b][j][2 * r + 1] = w[2];
                wo[b][j][2 * r] = w[1], wo[b][j][2 * r + 1] = w[3];
                t += w[0] * w[1] + w[2] * w[3];
            }
            wr[b][r] = -t;
        }
    for (int c = 0; c < NCOL; c++)
        for (int b = 0; b < NB; b++) {
            ad[c][b] = 1.0f / (1 + rand() % 64);
            int32_t t = 0;
            for (int j = 0; j < 8; j++) {
                int8_t *a = &aq[c][b][4 * j];
                for (int k = 0; k < 4; k++) a[k] = (int8_t)(rand() % 255 - 127);
                aw[c][b][j][0] = a[1], aw[c][b][j][1] = a[3];
                aw[c][b][j][2] = a[0], aw[c][b][j][3] = a[2];
                t += a[0] * a[1] + a[2] * a[3];
            }
            ac[c][b] = t;
        }
    sign_trick();
    winograd();
    for (int b = 0; b < NB; b++)
        for (int r = 0; r < 8; r++) {
            int32_t want = 0;
            for (int j = 0; j < 8; j++)
                for (int k = 0; k < 4; k++) want += wq[b][j][4 * r + k] * aq[0][b][4 * j + k];
            if (isum_s[b][r] != want || isum_w[b][r] != want) {
                printf("mismatch block %d row %d: sign %d wino %d scalar %d\n", b, r,
                       isum_s[b][r], isum_w[b][r], want);
                return 1;
            }
        }
    const int reps = 200;
    const int wcols = NCOL / PASS_W * PASS_W;
    for (int round = 0; round < 3; round++) {
        uint64_t t0 = __rdtsc();
        for (int k = 0; k < reps; k++) sign_trick();
        uint64_t t1 = __rdtsc();
        for (int k = 0; k < reps; k++) winograd();
        uint64_t t2 = __rdtsc();
        printf("ticks per unit: sign %.3f  winograd %.3f\n",
               (double)(t1 - t0) / ((double)reps * NCOL * NB * 8),
               (double)(t2 - t1) / ((double)reps * wcols * NB * 8));
    }
    return 0;
}
