/*
 * exmy_sgemm: a float32 GEMM whose every element of C is one fixed sequence
 * of roundings (cpu/exmy_cpu.h), so that it gives the same bits on any CPU, with
 * any vector width and any number of threads.  An optimised BLAS does not:
 * OpenBLAS picks its kernels by CPU model, and the kernels and the threading
 * decide how the sum over K is split into partial sums, so the trainer's
 * losses changed with the machine and with OMP_NUM_THREADS.
 *
 * The layout is GotoBLAS's: op(B) is packed into panels of NR columns
 * (bp[p * NR + j], zero-padded); op(A) is read in place, a panel of MR rows
 * of A or of A^T at a time (a last, partial panel, and for the scalar kernel
 * every panel of A, is packed as ap[p * MR + r], zero-padded); a micro-kernel
 * (cpu/gemm_tile.h) computes one MR x NR tile of C with its MR x NR
 * accumulators in registers, vectorised across the columns.  Each lane runs
 * acc = fma(a[i][p], b[p][j], acc) for p = 0 .. k-1 in order, which is the
 * scalar definition itself: lanes never interact, the chain is never split
 * (no blocking of K, no split of K between threads), and threads share out
 * whole tiles.  Vector width, MR, NR and threads change which lane or thread
 * computes an element, never how.  The epilogue alpha·acc (+ beta·C) is a
 * separate multiply and add in every path (cpu/BUILD compiles with
 * -ffp-contract=off, so the compiler fuses nothing either).
 */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/gemm_dispatch.h"
#include "cpu/exmy_cpu.h"
#include "lib/accum_core.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define EXMY_SGEMM_X86 1
#else
#define EXMY_SGEMM_X86 0
#endif

/* Computes the MR x NR tile c (leading dimension ldc) from k steps of op(A)
 * and a packed panel of op(B): c = alpha·acc, or alpha·acc + beta·c when
 * beta != 0.  kernel_info.tile reads element (r, p) of op(A) at
 * a[p * lda + r] (a packed panel, lda = MR, or A^T in place), .rows at
 * a[r * lda + p] (A in place). */
typedef void (*tile_fn)(size_t k, const float *a, size_t lda, const float *bp, float *c,
                        size_t ldc, float alpha, float beta);

/* ------------------------------------------------------------------ scalar */

enum { SCALAR_MR = 4, SCALAR_NR = 16 };

static void tile_scalar(size_t k, const float *ap, size_t lda, const float *bp, float *c,
                        size_t ldc, float alpha, float beta) {
  float acc[SCALAR_MR][SCALAR_NR] = {{0}};
  for (size_t p = 0; p < k; p++, ap += lda, bp += SCALAR_NR)
    for (int r = 0; r < SCALAR_MR; r++)
      for (int j = 0; j < SCALAR_NR; j++) acc[r][j] = fmaf(ap[r], bp[j], acc[r][j]);
  for (int r = 0; r < SCALAR_MR; r++)
    for (int j = 0; j < SCALAR_NR; j++)
      c[r * ldc + j] = exmy_gemm_epilogue(acc[r][j], alpha, beta, &c[r * ldc + j]);
}

#if EXMY_SGEMM_X86
/* --------------------------------------------------------- AVX2 + FMA: 6 x 16
 * 12 accumulators, 2 rows of B and a broadcast: 15 of the 16 ymm registers. */
enum { AVX2_MR = 6, AVX2_NR = 16 };
#define V __m256
#define LANES 8
#define ZERO _mm256_setzero_ps
#define BCAST _mm256_broadcast_ss
#define FMADD _mm256_fmadd_ps
#define MUL _mm256_mul_ps
#define ADD _mm256_add_ps
#define SET1 _mm256_set1_ps
#define LOAD _mm256_load_ps
#define LOADU _mm256_loadu_ps
#define STOREU _mm256_storeu_ps
#define MR 6
#define ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5)
#define TARGET "avx2,fma"
#define TILE_COLS tile_avx2
#define TILE_ROWS tile_avx2_rows
#include "cpu/gemm_tile.h"

/* ------------------------------------------------------------ AVX-512: 12 x 32
 * 24 accumulators, 2 rows of B and a broadcast: 27 of the 32 zmm registers;
 * 24 independent FMA chains cover the FMA latency of two pipes. */
enum { AVX512_MR = 12, AVX512_NR = 32 };
#define V __m512
#define LANES 16
#define ZERO _mm512_setzero_ps
#define BCAST(p) _mm512_set1_ps(*(p))
#define FMADD _mm512_fmadd_ps
#define MUL _mm512_mul_ps
#define ADD _mm512_add_ps
#define SET1 _mm512_set1_ps
#define LOAD _mm512_load_ps
#define LOADU _mm512_loadu_ps
#define STOREU _mm512_storeu_ps
#define MR 12
#define ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)
#define TARGET "avx512f"
#define TILE_COLS tile_avx512
#define TILE_ROWS tile_avx512_rows
#include "cpu/gemm_tile.h"
#endif

/* ---------------------------------------------------------------- dispatch */

typedef struct {
  const char *name;
  int mr, nr;  /* nr: a multiple of 16, so that every panel starts 64-byte aligned */
  tile_fn tile; /* op(A) packed, or A^T in place */
  tile_fn rows; /* A in place, whole rows; NULL: packed */
} kernel_info;

/* the largest tile, for the edges */
#define EDGE_TILE_FLOATS (16 * 32)
#if EXMY_SGEMM_X86
_Static_assert(AVX512_MR * AVX512_NR <= EDGE_TILE_FLOATS && AVX2_MR * AVX2_NR <= EDGE_TILE_FLOATS,
               "edge tile buffer too small");
#endif
_Static_assert(SCALAR_MR * SCALAR_NR <= EDGE_TILE_FLOATS, "edge tile buffer too small");

static const kernel_info kernels[EXMY_SGEMM_KERNELS] = {
    [EXMY_SGEMM_SCALAR] = {"scalar", SCALAR_MR, SCALAR_NR, tile_scalar, NULL},
#if EXMY_SGEMM_X86
    [EXMY_SGEMM_AVX2] = {"avx2", AVX2_MR, AVX2_NR, tile_avx2, tile_avx2_rows},
    [EXMY_SGEMM_AVX512] = {"avx512", AVX512_MR, AVX512_NR, tile_avx512, tile_avx512_rows},
#else
    [EXMY_SGEMM_AVX2] = {"avx2", 0, 0, NULL, NULL},
    [EXMY_SGEMM_AVX512] = {"avx512", 0, 0, NULL, NULL},
#endif
};

const char *exmy_sgemm_kernel_name(exmy_sgemm_kernel k) {
  return (unsigned)k < EXMY_SGEMM_KERNELS ? kernels[k].name : "?";
}

int exmy_sgemm_kernel_usable(exmy_sgemm_kernel k) {
  if ((unsigned)k >= EXMY_SGEMM_KERNELS || !kernels[k].tile) return 0;
#if EXMY_SGEMM_X86
  __builtin_cpu_init();
  if (k == EXMY_SGEMM_AVX2)
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if (k == EXMY_SGEMM_AVX512) return __builtin_cpu_supports("avx512f") != 0;
#endif
  return k == EXMY_SGEMM_SCALAR;
}

static int current = -1; /* exmy_sgemm_kernel, -1 until the first call */

static exmy_sgemm_kernel best_kernel(void) {
  for (int k = EXMY_SGEMM_KERNELS - 1; k > 0; k--)
    if (exmy_sgemm_kernel_usable((exmy_sgemm_kernel)k)) return (exmy_sgemm_kernel)k;
  return EXMY_SGEMM_SCALAR;
}

/* The best kernel, or the one EXMY_SGEMM_KERNEL names (said on stderr, as
 * it is a test's override). */
static exmy_sgemm_kernel initial_kernel(void) {
  const exmy_sgemm_kernel best = best_kernel();
  const char *want = getenv("EXMY_SGEMM_KERNEL");
  if (!want || !*want) return best;
  for (int k = 0; k < EXMY_SGEMM_KERNELS; k++)
    if (!strcmp(want, kernels[k].name)) {
      if (exmy_sgemm_kernel_usable((exmy_sgemm_kernel)k)) {
        fprintf(stderr, "exmy: sgemm kernel %s (EXMY_SGEMM_KERNEL)\n", want);
        return (exmy_sgemm_kernel)k;
      }
      fprintf(stderr, "exmy: EXMY_SGEMM_KERNEL=%s: this CPU cannot run it; using %s\n", want,
              kernels[best].name);
      return best;
    }
  fprintf(stderr, "exmy: EXMY_SGEMM_KERNEL=%s: not avx512, avx2 or scalar; using %s\n", want,
          kernels[best].name);
  return best;
}

exmy_sgemm_kernel exmy_sgemm_current_kernel(void) {
  int k = __atomic_load_n(&current, __ATOMIC_ACQUIRE);
  if (k < 0) {
    int chosen = (int)initial_kernel(), expected = -1;
    /* a racing first caller may have chosen already: keep its choice */
    if (__atomic_compare_exchange_n(&current, &expected, chosen, false, __ATOMIC_ACQ_REL,
                                    __ATOMIC_ACQUIRE))
      k = chosen;
    else
      k = expected;
  }
  return (exmy_sgemm_kernel)k;
}

int exmy_sgemm_use_kernel(exmy_sgemm_kernel k) {
  if (!exmy_sgemm_kernel_usable(k)) return -1;
  __atomic_store_n(&current, (int)k, __ATOMIC_RELEASE);
  return 0;
}

/* ----------------------------------------------------------------- packing */

/* Vectors first .. first + n - 1 (n <= width) of a matrix x, each k long, as
 * dst[p * width + r], vectors n .. width - 1 zero: a panel of rows of op(A)
 * or of columns of op(B).  rows: the vectors are rows of x (k consecutive
 * floats each); else columns (row p of x holds element p of each). */
static void pack_panel(const float *x, size_t ld, bool rows, size_t first, size_t n,
                       size_t width, size_t k, float *dst) {
  if (rows) {
    for (size_t r = 0; r < width; r++) {
      const float *src = x + (first + r) * ld;
      if (r < n)
        for (size_t p = 0; p < k; p++) dst[p * width + r] = src[p];
      else
        for (size_t p = 0; p < k; p++) dst[p * width + r] = 0.0f;
    }
  } else {
    for (size_t p = 0; p < k; p++) {
      const float *src = x + p * ld + first;
      if (n == width)
        for (size_t r = 0; r < width; r++) dst[p * width + r] = src[r];
      else
        for (size_t r = 0; r < width; r++) dst[p * width + r] = r < n ? src[r] : 0.0f;
    }
  }
}

/* Each thread's packing buffer, kept between calls (a trainer step makes
 * thousands of small GEMMs; a fresh allocation of a large buffer each time
 * would also fault in fresh pages). */
static _Thread_local float *scratch;
static _Thread_local size_t scratch_floats;

static float *scratch_for(size_t floats) {
  if (floats > scratch_floats) {
    const size_t bytes = (floats * sizeof(float) + 63) & ~(size_t)63;
    float *p = aligned_alloc(64, bytes);
    if (!p) return NULL;
    free(scratch);
    scratch = p;
    scratch_floats = bytes / sizeof(float);
  }
  return scratch;
}

/* Below this many multiply-adds one thread does the whole product: waking
 * the team (the trainer's OpenMP threads sleep between regions: passive
 * wait) costs about as much as the work itself, ~25 us per 2^20 at ~80
 * GFLOP/s on one core.  The attention products of `tiny` (128 x 128 x 32,
 * 2^19) stay on one thread.  Any value gives the same bits. */
#define SGEMM_PARALLEL_MIN ((size_t)1 << 20)

int exmy_sgemm(bool trans_a, bool trans_b, size_t m, size_t n, size_t k, float alpha,
               const float *a, size_t lda, const float *b, size_t ldb, float beta, float *c,
               size_t ldc) {
  if (ldc < n) return -1;
  if (k && m && lda < (trans_a ? m : k)) return -1;
  if (k && n && ldb < (trans_b ? k : n)) return -1;
  if (!m || !n) return 0;
  const kernel_info *K = &kernels[exmy_sgemm_current_kernel()];
  const size_t mr = (size_t)K->mr, nr = (size_t)K->nr;
  const size_t mp = (m + mr - 1) / mr, np = (n + nr - 1) / nr;
  if (k > (SIZE_MAX / sizeof(float) - 64) / (mp * mr + np * nr)) return -1;
  float *const bpack = scratch_for(k * (np * nr + mp * mr) + 1);
  if (!bpack) return -1;
  float *const apack = bpack + k * np * nr; /* 64-byte aligned: nr is a multiple of 16 */
  /* Whole panels of MR rows of op(A) are read in place: A^T's by .tile, A's
   * by .rows where the kernel has it; only the rest (a last, partial panel)
   * is packed.  (At n = 32, packing op(A) costs as much as the products.) */
  const bool in_place = trans_a || K->rows;
  const size_t tiles = mp * np;
  const int parallel = m * n * k >= SGEMM_PARALLEL_MIN && tiles > 1 && !omp_in_parallel();
#pragma omp parallel if (parallel)
  {
#pragma omp for schedule(static)
    for (size_t j = 0; j < np; j++) {
      const size_t w = n - j * nr < nr ? n - j * nr : nr;
      pack_panel(b, ldb, trans_b, j * nr, w, nr, k, bpack + j * k * nr); /* op(B)'s columns */
    }
#pragma omp for schedule(static)
    for (size_t i = 0; i < mp; i++) {
      const size_t h = m - i * mr < mr ? m - i * mr : mr;
      if (!in_place || h < mr) /* op(A)'s rows */
        pack_panel(a, lda, !trans_a, i * mr, h, mr, k, apack + i * k * mr);
    }
    /* tiles row by row: consecutive tiles of a thread share their A panel */
#pragma omp for schedule(static)
    for (size_t t = 0; t < tiles; t++) {
      const size_t i = t / np, j = t % np;
      const size_t h = m - i * mr < mr ? m - i * mr : mr, w = n - j * nr < nr ? n - j * nr : nr;
      const bool packed = !in_place || h < mr;
      const tile_fn tile = packed || trans_a ? K->tile : K->rows;
      const float *ap = packed ? apack + i * k * mr : trans_a ? a + i * mr : a + i * mr * lda;
      const size_t ld = packed ? mr : lda;
      const float *bp = bpack + j * k * nr;
      float *ct = c + i * mr * ldc + j * nr;
      if (h == mr && w == nr) {
        tile(k, ap, ld, bp, ct, ldc, alpha, beta);
      } else { /* an edge: the whole tile into a buffer, then its valid part */
        float acc[EDGE_TILE_FLOATS] __attribute__((aligned(64)));
        tile(k, ap, ld, bp, acc, nr, 1.0f, 0.0f); /* 1·acc = acc exactly */
        for (size_t r = 0; r < h; r++)
          for (size_t q = 0; q < w; q++)
            ct[r * ldc + q] = exmy_gemm_epilogue(acc[r * nr + q], alpha, beta, &ct[r * ldc + q]);
      }
    }
  }
  return 0;
}
