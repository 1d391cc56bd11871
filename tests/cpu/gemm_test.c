/* exmy_sgemm against its definition (cpu/exmy_cpu.h), written here as a plain
 * triple loop of fmaf: bit for bit, with every kernel this CPU runs (AVX-512,
 * AVX2 + FMA, scalar), on 1 and 2 threads, over ragged shapes (0 and 1
 * included), all transposes, leading dimensions larger than the rows, alpha
 * and beta (beta = 0 with NaN in C, which must not be read); and close to a
 * double-precision product, as a sanity check of the definition itself. */
#include <check.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/gemm_dispatch.h"
#include "cpu/exmy_cpu.h"
#include "tests/check_suite.h"

static uint32_t rng_state = 12345;
static uint32_t rnd(void) {
  rng_state = rng_state * 1664525u + 1013904223u;
  return rng_state >> 8;
}

/* Values over several binades, some zeros and some pairs whose products are
 * subnormal, so that any other order of the sums shows in the last bits. */
static float value(void) {
  uint32_t r = rnd();
  if (r % 17 == 0) return 0.0f;
  float x = ((float)(r & 0xFFFF) / 65536.0f) * 2.0f - 1.0f;
  int e = (int)(rnd() % 17) - 8;
  if (r % 53 == 0) e = -70; /* tiny: products reach the subnormals */
  return ldexpf(x, e);
}

static float op_at(const float *x, size_t ld, bool trans, size_t i, size_t j) {
  return trans ? x[j * ld + i] : x[i * ld + j];
}

/* The definition: one fmaf chain per element along K, then alpha·acc + beta·c. */
static void reference(bool ta, bool tb, size_t m, size_t n, size_t k, float alpha,
                      const float *a, size_t lda, const float *b, size_t ldb, float beta,
                      float *c, size_t ldc) {
  for (size_t i = 0; i < m; i++)
    for (size_t j = 0; j < n; j++) {
      float acc = 0.0f;
      for (size_t p = 0; p < k; p++) acc = fmaf(op_at(a, lda, ta, i, p), op_at(b, ldb, tb, p, j), acc);
      float r = alpha * acc;
      if (beta != 0.0f) r = r + beta * c[i * ldc + j];
      c[i * ldc + j] = r;
    }
}

static int same(float x, float y) {
  return (isnan(x) && isnan(y)) || memcmp(&x, &y, sizeof x) == 0;
}

static long cases_run = 0;

/* One shape under every kernel and 1 and 2 threads, against the reference. */
static void check_shape(bool ta, bool tb, size_t m, size_t n, size_t k, float alpha, float beta) {
  const size_t pad = 1 + rnd() % 5;
  const size_t lda = (ta ? m : k) + pad, ldb = (tb ? k : n) + pad, ldc = n + pad;
  const size_t arows = ta ? k : m, brows = tb ? n : k;
  float *a = malloc((arows * lda + 1) * sizeof *a), *b = malloc((brows * ldb + 1) * sizeof *b);
  float *c0 = malloc((m * ldc + 1) * sizeof *c0), *want = malloc((m * ldc + 1) * sizeof *want),
        *c = malloc((m * ldc + 1) * sizeof *c);
  for (size_t i = 0; i < arows * lda; i++) a[i] = value();
  for (size_t i = 0; i < brows * ldb; i++) b[i] = value();
  /* beta = 0: C holds NaN, which must not reach the result */
  for (size_t i = 0; i < m * ldc; i++) c0[i] = beta == 0.0f ? NAN : value();
  memcpy(want, c0, m * ldc * sizeof *c0);
  reference(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, want, ldc);

  /* sanity: the definition is a float32 product (double reference, error bound
   * of k + 2 roundings of the largest partial magnitude) */
  for (size_t i = 0; i < m; i++)
    for (size_t j = 0; j < n; j++) {
      double s = 0, sabs = 0;
      for (size_t p = 0; p < k; p++) {
        double t = (double)op_at(a, lda, ta, i, p) * op_at(b, ldb, tb, p, j);
        s += t, sabs += fabs(t);
      }
      double cold = beta != 0.0f ? c0[i * ldc + j] : 0.0;
      double d = (double)alpha * s + (double)beta * cold;
      double bound = (k + 3) * (0x1p-24 * (fabs(alpha) * sabs + fabs(beta * cold)) + 0x1p-149);
      ck_assert_msg(fabs(want[i * ldc + j] - d) <= bound,
                    "reference %zux%zux%zu C[%zu][%zu] = %.9g, double %.9g", m, n, k, i, j,
                    want[i * ldc + j], d);
    }

  for (int kern = 0; kern < EXMY_SGEMM_KERNELS; kern++) {
    if (exmy_sgemm_use_kernel((exmy_sgemm_kernel)kern)) continue;
    for (int threads = 1; threads <= 2; threads++) {
      omp_set_num_threads(threads);
      memcpy(c, c0, m * ldc * sizeof *c);
      ck_assert_int_eq(exmy_sgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc), 0);
      for (size_t i = 0; i < m; i++)
        for (size_t j = 0; j < ldc; j++) {
          const float got = c[i * ldc + j], exp = j < n ? want[i * ldc + j] : c0[i * ldc + j];
          ck_assert_msg(same(got, exp),
                        "%s, %d thread(s), ta=%d tb=%d m=%zu n=%zu k=%zu alpha=%g beta=%g: "
                        "C[%zu][%zu] = %a, want %a%s",
                        exmy_sgemm_kernel_name((exmy_sgemm_kernel)kern), threads, ta, tb, m, n,
                        k, alpha, beta, i, j, got, exp, j < n ? "" : " (padding of C)");
        }
      cases_run++;
    }
  }
  free(a), free(b), free(c0), free(want), free(c);
}

static const float alphas[] = {1.0f, 0.7f, -3.0f};
static const float betas[] = {0.0f, 1.0f, 0.3f, -1.7f}; /* not powers of 2: beta·c rounds */

/* Every combination of ragged sizes around the kernels' tiles (4, 6, 12 rows;
 * 16, 32 columns), every transpose. */
START_TEST(ragged_shapes) {
  static const size_t dims[] = {0, 1, 2, 5, 6, 12, 13, 16, 17, 31, 33, 47};
  const size_t nd = sizeof dims / sizeof dims[0];
  int idx = 0;
  for (size_t im = 0; im < nd; im++)
    for (size_t in = 0; in < nd; in++)
      for (size_t ik = 0; ik < nd; ik++, idx++) {
        const int t = idx % 4;
        check_shape(t & 1, t >> 1, dims[im], dims[in], dims[ik], alphas[idx % 3], betas[idx % 4]);
      }
  printf("ragged shapes: %ld (shape, kernel, threads) cases bit-identical to the fmaf reference\n",
         cases_run);
}
END_TEST

/* Shapes large enough for the threads to share the tiles, and a long K. */
START_TEST(large_shapes) {
  static const size_t shapes[][3] = {{100, 70, 30}, {257, 129, 65}, {64, 96, 700}, {13, 300, 90}};
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
    for (int t = 0; t < 4; t++)
      check_shape(t & 1, t >> 1, shapes[s][0], shapes[s][1], shapes[s][2], alphas[(s + t) % 3],
                  betas[(s + t) % 4]);
  printf("large shapes: %ld cases bit-identical\n", cases_run);
}
END_TEST

/* inf and NaN operands: the same results (NaN as NaN) in every kernel. */
START_TEST(special_values) {
  enum { M = 13, N = 35, K = 9 };
  float a[M * K], b[K * N], want[M * N], c[M * N];
  for (int i = 0; i < M * K; i++) a[i] = value();
  for (int i = 0; i < K * N; i++) b[i] = value();
  a[3] = INFINITY, a[2 * K + 4] = -INFINITY, a[5 * K] = NAN, b[7] = INFINITY, b[N + 20] = NAN;
  a[8 * K + 1] = 3e38f, b[1 * N + 2] = 3e38f; /* an overflow to inf */
  reference(false, false, M, N, K, 1.0f, a, K, b, N, 0.0f, want, N);
  for (int kern = 0; kern < EXMY_SGEMM_KERNELS; kern++) {
    if (exmy_sgemm_use_kernel((exmy_sgemm_kernel)kern)) continue;
    ck_assert_int_eq(exmy_sgemm(false, false, M, N, K, 1.0f, a, K, b, N, 0.0f, c, N), 0);
    for (int i = 0; i < M * N; i++)
      ck_assert_msg(same(c[i], want[i]), "%s: C[%d] = %g, want %g",
                    exmy_sgemm_kernel_name((exmy_sgemm_kernel)kern), i, c[i], want[i]);
  }
}
END_TEST

START_TEST(bad_leading_dimensions) {
  float a[12] = {0}, b[12] = {0}, c[12];
  for (int i = 0; i < 12; i++) c[i] = (float)i;
  /* m = 2, n = 3, k = 4 */
  ck_assert_int_eq(exmy_sgemm(false, false, 2, 3, 4, 1, a, 4, b, 3, 0, c, 2), -1);  /* ldc < n */
  ck_assert_int_eq(exmy_sgemm(false, false, 2, 3, 4, 1, a, 3, b, 3, 0, c, 3), -1);  /* lda < k */
  ck_assert_int_eq(exmy_sgemm(true, false, 2, 3, 4, 1, a, 1, b, 3, 0, c, 3), -1);   /* lda < m */
  ck_assert_int_eq(exmy_sgemm(false, false, 2, 3, 4, 1, a, 4, b, 2, 0, c, 3), -1);  /* ldb < n */
  ck_assert_int_eq(exmy_sgemm(false, true, 2, 3, 4, 1, a, 4, b, 3, 0, c, 3), -1);   /* ldb < k */
  for (int i = 0; i < 12; i++) ck_assert(c[i] == (float)i); /* untouched */
}
END_TEST

/* The first call runs the best kernel the CPU has; a kernel it lacks is
 * refused.  On this machine: which ones the other tests covered. */
START_TEST(dispatch) {
  int best = EXMY_SGEMM_SCALAR;
  for (int k = 0; k < EXMY_SGEMM_KERNELS; k++)
    if (exmy_sgemm_kernel_usable((exmy_sgemm_kernel)k)) best = k;
  if (!getenv("EXMY_SGEMM_KERNEL")) ck_assert_int_eq(exmy_sgemm_current_kernel(), best);
  ck_assert(exmy_sgemm_kernel_usable(EXMY_SGEMM_SCALAR));
#if defined(__x86_64__)
  __builtin_cpu_init();
  ck_assert_int_eq(exmy_sgemm_kernel_usable(EXMY_SGEMM_AVX512), __builtin_cpu_supports("avx512f") != 0);
  if (!exmy_sgemm_kernel_usable(EXMY_SGEMM_AVX512))
    ck_assert_int_eq(exmy_sgemm_use_kernel(EXMY_SGEMM_AVX512), -1);
#endif
  printf("kernels tested on this CPU:");
  for (int k = 0; k < EXMY_SGEMM_KERNELS; k++)
    if (exmy_sgemm_kernel_usable((exmy_sgemm_kernel)k))
      printf(" %s", exmy_sgemm_kernel_name((exmy_sgemm_kernel)k));
  printf("\n");
}
END_TEST

int main(void) {
  const TTest *const tests[] = {dispatch, ragged_shapes, large_shapes, special_values,
                                bad_leading_dimensions, NULL};
  return run_suite(suite_of("gemm", 120, tests), true);
}
