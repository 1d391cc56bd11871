/*
 * exmy_sgemm beside OpenBLAS's cblas_sgemm, same run, on the shapes of the
 * trainer's `tiny` model (batch 16 x 128 tokens, C = 128, hidden 384,
 * vocabulary 256, 4 heads of 32) and `small` (C 384, hidden 1152, T 256),
 * for each vector kernel this CPU runs (the scalar one, for CPUs without AVX2,
 * is left out: it is two orders of magnitude slower):
 *   bazel run -c opt //cpu:gemm_bench -- [THREADS (2)] [REPEATS (5)]
 * Each figure is the best of REPEATS timings of a loop of calls.
 */
#include <cblas.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "cpu/gemm_dispatch.h"
#include "cpu/exmy_cpu.h"

typedef struct {
  const char *what;
  bool ta, tb;
  size_t m, n, k;
  int calls; /* per timing: about the same work for every shape */
} shape;

static const shape shapes[] = {
    {"tiny  Y = X W^T (C->C)", false, true, 2048, 128, 128, 20},
    {"tiny  Y = X W^T (C->H)", false, true, 2048, 384, 128, 8},
    {"tiny  dX = dY W (H->C)", false, false, 2048, 128, 384, 8},
    {"tiny  dW = dY^T X", true, false, 384, 128, 2048, 8},
    {"tiny  S = Q K^T (head)", false, true, 128, 128, 32, 320},
    {"tiny  O = P V (head)", false, false, 128, 32, 128, 320},
    {"tiny  dK = dS^T Q", true, false, 128, 32, 128, 320},
    {"small Y = X W^T (C->H)", false, true, 4096, 1152, 384, 1},
    {"small dW = dY^T X", true, false, 1152, 384, 4096, 1},
};

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + 1e-9 * t.tv_nsec;
}

static int blas(bool ta, bool tb, size_t m, size_t n, size_t k, float alpha, const float *a,
                size_t lda, const float *b, size_t ldb, float beta, float *c, size_t ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              (int)m, (int)n, (int)k, alpha, a, (int)lda, b, (int)ldb, beta, c, (int)ldc);
  return 0;
}

/* GFLOP/s of `calls` products, best of `repeats` */
static double gflops(exmy_sgemm_fn f, const shape *s, const float *a, const float *b, float *c,
                     int repeats) {
  const size_t lda = s->ta ? s->m : s->k, ldb = s->tb ? s->k : s->n;
  double best = 1e30;
  for (int r = 0; r < repeats; r++) {
    double t0 = now();
    for (int i = 0; i < s->calls; i++) f(s->ta, s->tb, s->m, s->n, s->k, 1.0f, a, lda, b, ldb, 0.0f, c, s->n);
    double dt = now() - t0;
    if (dt < best) best = dt;
  }
  return 2.0 * s->m * s->n * s->k * s->calls / best * 1e-9;
}

int main(int argc, char **argv) {
  const int threads = argc > 1 ? atoi(argv[1]) : 2, repeats = argc > 2 ? atoi(argv[2]) : 5;
  if (threads < 1 || repeats < 1) {
    fprintf(stderr, "usage: gemm_bench [THREADS >= 1] [REPEATS >= 1]\n");
    return 2;
  }
  omp_set_num_threads(threads);
  openblas_set_num_threads(threads);
  printf("GFLOP/s, %d thread%s, best of %d; OpenBLAS %s\n", threads, threads > 1 ? "s" : "",
         repeats, openblas_get_config());
  printf("%-24s %6s %6s %6s %9s", "shape", "m", "n", "k", "OpenBLAS");
  for (int k = EXMY_SGEMM_KERNELS - 1; k > EXMY_SGEMM_SCALAR; k--)
    if (exmy_sgemm_kernel_usable((exmy_sgemm_kernel)k))
      printf(" %9s", exmy_sgemm_kernel_name((exmy_sgemm_kernel)k));
  printf("\n");
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
    const shape *s = &shapes[i];
    float *a = malloc(s->m * s->k * sizeof *a), *b = malloc(s->k * s->n * sizeof *b),
          *c = malloc(s->m * s->n * sizeof *c);
    if (!a || !b || !c) return 1;
    for (size_t j = 0; j < s->m * s->k; j++) a[j] = (float)((j * 7919) % 2001) * 1e-3f - 1.0f;
    for (size_t j = 0; j < s->k * s->n; j++) b[j] = (float)((j * 104729) % 1999) * 1e-3f - 1.0f;
    printf("%-24s %6zu %6zu %6zu %9.1f", s->what, s->m, s->n, s->k, gflops(blas, s, a, b, c, repeats));
    for (int k = EXMY_SGEMM_KERNELS - 1; k > EXMY_SGEMM_SCALAR; k--) {
      if (exmy_sgemm_use_kernel((exmy_sgemm_kernel)k)) continue;
      printf(" %9.1f", gflops(exmy_sgemm, s, a, b, c, repeats));
    }
    printf("\n");
    free(a), free(b), free(c);
  }
  return 0;
}
