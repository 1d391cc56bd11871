/*
 * exmy_qgemm_accum under the H100's model (hopper: fast accumulation, and
 * hopper-split) with the AVX-512 kernel and with the AVX2 one (cpu/accum_vector.c),
 * beside the same call on the scalar products and exmy_sgemm (float32
 * accumulation), same run, on shapes of the trainer's `tiny` model:
 *   bazel run -c opt //cpu:accum_bench -- [THREADS (2)] [REPEATS (3)]
 * Each figure is the best of REPEATS timings (the scalar products: of one);
 * GFLOP/s counts 2·m·n·k; "-": this CPU cannot run the kernel.
 */
#include <omp.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <time.h>

#include "cpu/accum_vector.h"
#include "cpu/exmy_cpu.h"

typedef struct {
  const char *what;
  bool ta, tb;
  size_t m, n, k;
} shape;

static const shape shapes[] = {
    {"tiny Y = X W^T (C->H)", false, true, 2048, 384, 128},
    {"tiny dX = dY W (H->C)", false, false, 2048, 128, 384},
    {"tiny dW = dY^T X", true, false, 384, 128, 2048},
};

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + 1e-9 * t.tv_nsec;
}

/* best of `repeats` timings of one call, in seconds */
static double best(int repeats, const shape *s, const exmy_accum_model *model, const float *a,
                   const float *b, float *c) {
  double t = 1e30;
  for (int r = 0; r < repeats; r++) {
    const double t0 = now();
    const size_t lda = s->ta ? s->m : s->k, ldb = s->tb ? s->k : s->n;
    int rc = model ? exmy_qgemm_accum(s->ta, s->tb, s->m, s->n, s->k, 1.0f, a, lda, NULL, b, ldb,
                                      NULL, 0.0f, c, s->n, NULL, model)
                   : exmy_sgemm(s->ta, s->tb, s->m, s->n, s->k, 1.0f, a, lda, b, ldb, 0.0f, c,
                                s->n);
    const double dt = now() - t0;
    if (rc) {
      fprintf(stderr, "accum_bench: the GEMM failed\n");
      exit(1);
    }
    if (dt < t) t = dt;
  }
  return t;
}

int main(int argc, char **argv) {
  const int threads = argc > 1 ? atoi(argv[1]) : 2, repeats = argc > 2 ? atoi(argv[2]) : 3;
  if (threads < 1 || repeats < 1) {
    fprintf(stderr, "usage: accum_bench [THREADS >= 1] [REPEATS >= 1]\n");
    return 2;
  }
  omp_set_num_threads(threads);
  const exmy_accum_model models[2] = {
      {32, 14, 14, EXMY_ACCUM_TRUNCATE, 0, 1, EXMY_ACCUM_ALIGN_INPUTS, -6, -6, 0},
      {32, 14, 14, EXMY_ACCUM_TRUNCATE, 128, 1, EXMY_ACCUM_ALIGN_INPUTS, -6, -6, 0}};
  const char *names[2] = {"hopper", "hopper-split"};
  printf("accum_bench: %d threads, best of %d; GFLOP/s (x float32 exmy_sgemm)\n", threads, repeats);
  printf("%-24s %-13s %8s %16s %16s %16s %9s\n", "shape", "model", "sgemm", "AVX-512 kernel",
         "AVX2 kernel", "scalar products", "speed-up");
  const char *kernels[] = {"avx512", "avx2"};
  for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
    const shape *s = &shapes[i];
    float *a = malloc(s->m * s->k * sizeof *a), *b = malloc(s->k * s->n * sizeof *b),
          *c = malloc(s->m * s->n * sizeof *c);
    for (size_t p = 0; p < s->m * s->k; p++) a[p] = (float)((p * 2654435761u) % 1000) / 256 - 2;
    for (size_t p = 0; p < s->k * s->n; p++) b[p] = (float)((p * 40503u) % 997) / 512 - 1;
    const double flop = 2.0 * s->m * s->n * s->k, ref = best(repeats, s, NULL, a, b, c);
    for (int mi = 0; mi < 2; mi++) {
      printf("%-24s %-13s %8.2f", s->what, names[mi], flop / ref / 1e9);
      double fastest = 0;
      for (int kn = 0; kn < 2; kn++) { /* only that kernel on, AVX2 with AVX-512 off */
        exmy_accum_avx512_enable(kn == 0);
        exmy_accum_avx2_enable(kn == 1);
        if (strcmp(exmy_accum_kernel_name(&models[mi]), kernels[kn])) {
          printf(" %16s", "-");
          continue;
        }
        const double t = best(repeats, s, &models[mi], a, b, c);
        if (fastest == 0 || t < fastest) fastest = t;
        printf(" %9.3f (%4.1fx)", flop / t / 1e9, t / ref);
      }
      exmy_accum_avx512_enable(false);
      exmy_accum_avx2_enable(false);
      const double slow = best(1, s, &models[mi], a, b, c);
      exmy_accum_avx512_enable(true);
      exmy_accum_avx2_enable(true);
      printf(" %9.3f (%4.0fx)", flop / slow / 1e9, slow / ref);
      if (fastest > 0)
        printf(" %8.1fx\n", slow / fastest);
      else
        printf(" %9s\n", "-");
    }
    free(a), free(b), free(c);
  }
  return 0;
}
