/*
 * Throughput of the bulk kernels against the memory-bandwidth reference: a
 * streaming copy of the same array by the same threads, measured in the same
 * run.  `bazel run //cpu:bench` (optionally: log2 of the element count).
 * Prints format, mode, op, Gelem/s, ratio to the copy, and the loop that ran
 * (cpu/bulk_dispatch.h); exits 0 whatever the figures.  Each figure is the best of REPS runs, the spread (worst/best) is
 * printed beside it: other processes on a small machine disturb timings.
 */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "cpu/bulk_dispatch.h"
#include "cpu/exmy_cpu.h"

enum { REPS = 5 };

typedef struct { double best, worst; } timing;

static void copy_threads(const float *x, float *y, size_t n) {
#pragma omp parallel
  {
    size_t T = (size_t)omp_get_num_threads(), t = (size_t)omp_get_thread_num();
    size_t lo = n / T * t, hi = t + 1 == T ? n : n / T * (t + 1);
    memcpy(y + lo, x + lo, (hi - lo) * sizeof *x);
  }
}

typedef enum { OP_COPY, OP_QUANTIZE, OP_ENCODE, OP_DECODE } op_kind;
static const char *kOpNames[] = {"copy", "quantize", "encode", "decode"};

static timing measure(op_kind op, const exmy_format *f, const exmy_rounding_opts *o,
                      const float *x, float *y, void *codes, size_t n) {
  timing t = {INFINITY, 0};
  for (int r = 0; r < REPS; r++) {
    double t0 = omp_get_wtime();
    switch (op) {
      case OP_COPY: copy_threads(x, y, n); break;
      case OP_QUANTIZE: exmy_quantize_f32(f, o, x, y, n); break;
      case OP_ENCODE: exmy_encode_f32(f, o, x, codes, n); break;
      case OP_DECODE: exmy_decode_f32(f, codes, y, n); break;
    }
    double dt = omp_get_wtime() - t0;
    if (dt < t.best) t.best = dt;
    if (dt > t.worst) t.worst = dt;
  }
  return t;
}

int main(int argc, char **argv) {
  const int log2n = argc > 1 ? atoi(argv[1]) : 26;
  const size_t n = (size_t)1 << log2n;
  float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
  void *codes = malloc(n * 4);
  if (!x || !y || !codes) return 0;
  /* magnitudes 2^-30 .. 2^30: subnormal, normal and overflowing inputs of the
   * 8-bit formats; first touch by both threads, like the kernels' slices */
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; i++) {
    uint64_t h = (i + 1) * 0x9E3779B97F4A7C15ull;
    h ^= h >> 29, h *= 0xBF58476D1CE4E5B9ull, h ^= h >> 32;
    int e = (int)(h % 61) - 30;
    float m = 1.0f + (float)((h >> 8) & 0xFFFFFF) / 16777216.0f;
    x[i] = ((h >> 40) & 1 ? -1.0f : 1.0f) * ldexpf(m, e);
    y[i] = 0.0f;
    ((uint32_t *)codes)[i] = 0;
  }
  printf("n = 2^%d float32 values, %d threads, best of %d runs (spread = worst/best)\n",
         log2n, omp_get_max_threads(), REPS);
  timing copy = measure(OP_COPY, NULL, NULL, x, y, codes, n);
  const double copy_rate = n / copy.best / 1e9;
  printf("%-14s %-4s %-9s %9s %7s %7s  %s\n", "format", "mode", "op", "Gelem/s", "x copy", "spread",
         "kernel");
  printf("%-14s %-4s %-9s %9.3f %7.2f %7.2f\n", "-", "-", "copy", copy_rate, 1.0,
         copy.worst / copy.best);

  struct { const char *fmt; op_kind op; int all_modes; } rows[] = {
      {"e4m3", OP_QUANTIZE, 1}, {"e8m3", OP_QUANTIZE, 1}, {"e5m2", OP_QUANTIZE, 0},
      {"bf16", OP_QUANTIZE, 0}, {"e2m1", OP_QUANTIZE, 0}, {"e4m3", OP_ENCODE, 1},
      {"e5m2", OP_ENCODE, 1},   {"e8m3", OP_ENCODE, 0},   {"bf16", OP_ENCODE, 0},
      {"e8m0", OP_ENCODE, 0},   {"e4m3", OP_DECODE, 0},   {"bf16", OP_DECODE, 0},
  };
  for (size_t r = 0; r < sizeof rows / sizeof *rows; r++) {
    exmy_format f;
    exmy_format_parse(rows[r].fmt, &f);
    int last = rows[r].op == OP_DECODE ? EXMY_RNE : rows[r].all_modes ? EXMY_SR : EXMY_RNE;
    for (int mode = EXMY_RNE; mode <= last; mode++) {
      exmy_rounding_opts o = {.mode = (exmy_rounding)mode, .seed = 42, .offset = 3};
      if (rows[r].op == OP_DECODE) exmy_encode_f32(&f, &o, x, codes, n);
      timing t = measure(rows[r].op, &f, &o, x, y, codes, n);
      double rate = n / t.best / 1e9;
      printf("%-14s %-4s %-9s %9.3f %7.2f %7.2f  %s\n", f.name,
             rows[r].op == OP_DECODE ? "-" : exmy_rounding_name(o.mode), kOpNames[rows[r].op],
             rate, rate / copy_rate, t.worst / t.best,
             rows[r].op == OP_DECODE ? "-" : exmy_bulk_kernel_path(&f, &o));
      fflush(stdout);
    }
    /* sr for the formats not swept over all modes */
    if (!rows[r].all_modes && rows[r].op != OP_DECODE) {
      exmy_rounding_opts o = {.mode = EXMY_SR, .seed = 42, .offset = 3};
      timing t = measure(rows[r].op, &f, &o, x, y, codes, n);
      double rate = n / t.best / 1e9;
      printf("%-14s %-4s %-9s %9.3f %7.2f %7.2f  %s\n", f.name, "sr", kOpNames[rows[r].op], rate,
             rate / copy_rate, t.worst / t.best, exmy_bulk_kernel_path(&f, &o));
    }
  }
  copy = measure(OP_COPY, NULL, NULL, x, y, codes, n);
  printf("%-14s %-4s %-9s %9.3f %7s %7.2f   (copy again, at the end)\n", "-", "-", "copy",
         n / copy.best / 1e9, "-", copy.worst / copy.best);
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  printf("peak RSS %.1f MiB; arrays x, y, codes: %.1f MiB\n", ru.ru_maxrss / 1024.0,
         3.0 * n * 4 / 1048576.0);
  free(x), free(y), free(codes);
  return 0;
}
