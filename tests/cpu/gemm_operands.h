/* What the quantized-GEMM tests share: a seeded uniform value in [-4, 4) and
 * op(A) as a dense matrix. */
#ifndef EXMY_TESTS_CPU_GEMM_OPERANDS_H
#define EXMY_TESTS_CPU_GEMM_OPERANDS_H

#include <stdbool.h>
#include <stdlib.h>

/* The next value of a linear congruential stream, uniform in [-4, 4). */
static inline float urand(unsigned *s) {
  *s = *s * 1664525u + 1013904223u;
  return ((*s >> 8) / 16777216.0f) * 8.0f - 4.0f;
}

/* op(A) (rows x cols, A with leading dimension ld, transposed when t) as a
 * dense matrix with the columns contiguous; the caller frees it. */
static inline float *dense_op(const float *a, size_t ld, bool t, size_t rows, size_t cols) {
  float *d = malloc(rows * cols * sizeof *d);
  for (size_t r = 0; r < rows; r++)
    for (size_t c = 0; c < cols; c++) d[r * cols + c] = t ? a[c * ld + r] : a[r * ld + c];
  return d;
}

#endif /* EXMY_TESTS_CPU_GEMM_OPERANDS_H */
