// The machine's limits that bound strata's CPU kernels, for PERFORMANCE.md's
// "fraction of the peak" columns (issue #20): f32 FMA throughput, int8 dot
// throughput (vpmaddubsw + vpmaddwd, ggml's and strata's AVX2 inner step),
// and DRAM read bandwidth, each with T threads.
//
//   gcc -O2 -mavx2 -mfma -pthread scripts/peaks.c -o /tmp/peaks && /tmp/peaks 2
//
// Prints one line per limit. FLOP counts: an FMA is 2 FLOP per lane; an int8
// step is 32 multiply-adds (64 OP) per vpmaddubsw on 256 bits, measured with
// and without the vpmaddwd widening after each one. Run it on a quiet host.
#include <immintrin.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

#define ITERS 200000000L

static void *fma_loop(void *arg) {
    __m256 a = _mm256_set1_ps(1.0000001f), b = _mm256_set1_ps(0.9999999f);
    __m256 c0 = _mm256_set1_ps(0), c1 = _mm256_set1_ps(1), c2 = _mm256_set1_ps(2), c3 = _mm256_set1_ps(3);
    __m256 c4 = _mm256_set1_ps(4), c5 = _mm256_set1_ps(5), c6 = _mm256_set1_ps(6), c7 = _mm256_set1_ps(7);
    __m256 c8 = _mm256_set1_ps(8), c9 = _mm256_set1_ps(9);
#define FMA(c) c = _mm256_fmadd_ps(c, a, b)
    // Ten independent chains cover the FMA latency on two pipes.
    for (long it = 0; it < ITERS / 10; it++) {
        FMA(c0); FMA(c1); FMA(c2); FMA(c3); FMA(c4); FMA(c5); FMA(c6); FMA(c7); FMA(c8); FMA(c9);
    }
    c0 = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(c0, c1), _mm256_add_ps(c2, c3)),
                       _mm256_add_ps(_mm256_add_ps(c4, c5), _mm256_add_ps(c6, c7)));
    *(float *)arg = _mm256_cvtss_f32(_mm256_add_ps(c0, _mm256_add_ps(c8, c9)));
    return NULL;
}

// An int8 loop `name`: six independent chains of `step(acc, x)` over opaque
// inputs (the products cannot be hoisted out of the loop or shared between
// chains), the accumulators then summed with `add` (their lane width).
#define INT8_LOOP(name, step, add)                                                             \
    static void *name(void *arg) {                                                             \
        __m256i w = _mm256_set1_epi8(7), ones = _mm256_set1_epi16(1);                          \
        __m256i x0 = _mm256_set1_epi8(-3), x1 = _mm256_set1_epi8(-2), x2 = _mm256_set1_epi8(-1); \
        __m256i x3 = _mm256_set1_epi8(1), x4 = _mm256_set1_epi8(2), x5 = _mm256_set1_epi8(3);  \
        __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0;      \
        (void)ones;                                                                            \
        for (long it = 0; it < ITERS / 6; it++) {                                              \
            __asm__ volatile("" : "+x"(x0), "+x"(x1), "+x"(x2), "+x"(x3), "+x"(x4), "+x"(x5)); \
            step(a0, x0); step(a1, x1); step(a2, x2); step(a3, x3); step(a4, x4); step(a5, x5); \
        }                                                                                      \
        a0 = add(add(add(a0, a1), add(a2, a3)), add(a4, a5));                                  \
        *(int *)arg = _mm256_cvtsi256_si32(a0);                                                \
        return NULL;                                                                           \
    }

// vpmaddubsw, then vpmaddwd widening each result to i32 (ggml's AVX2 step).
#define STEP(a, x) a = _mm256_add_epi32(a, _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), ones))
INT8_LOOP(int8_loop, STEP, _mm256_add_epi32)

// vpmaddubsw alone, pair sums kept in i16 (strata's AVX2 packed kernels
// widen once per four or eight of them).
#define STEP16(a, x) a = _mm256_add_epi16(a, _mm256_maddubs_epi16(w, x))
INT8_LOOP(maddubs_loop, STEP16, _mm256_add_epi16)

#define BUF (1L << 30)
static uint8_t *mem;
static int nthreads;

struct span { long id; double sum; };

static void *read_loop(void *arg) {
    struct span *sp = arg;
    long part = BUF / nthreads;
    const __m256i *p = (const __m256i *)(mem + sp->id * part);
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    for (int rep = 0; rep < 4; rep++)
        for (long i = 0; i < part / 32; i += 4) {
            a0 = _mm256_add_epi64(a0, _mm256_load_si256(p + i));
            a1 = _mm256_add_epi64(a1, _mm256_load_si256(p + i + 1));
            a2 = _mm256_add_epi64(a2, _mm256_load_si256(p + i + 2));
            a3 = _mm256_add_epi64(a3, _mm256_load_si256(p + i + 3));
        }
    a0 = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
    sp->sum = (double)_mm256_extract_epi64(a0, 0);
    return NULL;
}

static double run(void *(*f)(void *), int t) {
    pthread_t th[64];
    struct span sp[64];
    double t0 = now();
    for (int i = 0; i < t; i++) {
        sp[i].id = i;
        pthread_create(&th[i], NULL, f, &sp[i]);
    }
    for (int i = 0; i < t; i++) pthread_join(th[i], NULL);
    return now() - t0;
}

int main(int argc, char **argv) {
    nthreads = argc > 1 ? atoi(argv[1]) : 2;
    if (nthreads < 1 || nthreads > 64) return 1;
    double s = run(fma_loop, nthreads);
    printf("f32 FMA (AVX2): %.0f GFLOP/s with %d threads\n", 16.0 * ITERS * nthreads / s / 1e9, nthreads);
    s = run(int8_loop, nthreads);
    printf("int8 vpmaddubsw+vpmaddwd (AVX2): %.0f GOP/s with %d threads\n", 64.0 * ITERS * nthreads / s / 1e9,
           nthreads);
    s = run(maddubs_loop, nthreads);
    printf("int8 vpmaddubsw alone (AVX2): %.0f GOP/s with %d threads\n", 64.0 * ITERS * nthreads / s / 1e9,
           nthreads);
    mem = aligned_alloc(64, BUF);
    memset(mem, 1, BUF);
    s = run(read_loop, nthreads);
    printf("DRAM read: %.1f GB/s with %d threads\n", 4.0 * BUF / s / 1e9, nthreads);
    return 0;
}
