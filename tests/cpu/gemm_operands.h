/* What the quantized-GEMM tests share: a seeded uniform value in [-4, 4),
 * random operands with padded leading dimensions, and op(A) as a dense
 * matrix. */
#ifndef EXMY_TESTS_CPU_GEMM_OPERANDS_H
#define EXMY_TESTS_CPU_GEMM_OPERANDS_H

#include <stdbool.h>
#include <stdlib.h>

/* The next value of a linear congruential stream, uniform in [-4, 4). */
static inline float urand(unsigned *s) {
  *s = *s * 1664525u + 1013904223u;
  return ((*s >> 8) / 16777216.0f) * 8.0f - 4.0f;
}

/* The operands of C = alpha op(A) op(B) + beta C, op(A) m x k, op(B) k x n,
 * every leading dimension `pad` more than it must be: A in [-4, 4), B in
 * [-0.04, 0.04), C and its copy c0 in [-4, 4), drawn in that order from seed. */
typedef struct {
  float *a, *b, *c, *c0;
  size_t lda, ldb, ldc;
} gemm_case;

static inline gemm_case gemm_case_new(bool ta, bool tb, size_t m, size_t n, size_t k, size_t pad,
                                      unsigned seed) {
  gemm_case g;
  g.lda = (ta ? m : k) + pad, g.ldb = (tb ? k : n) + pad, g.ldc = n + pad;
  const size_t arows = ta ? k : m, brows = tb ? n : k;
  g.a = malloc(arows * g.lda * sizeof *g.a), g.b = malloc(brows * g.ldb * sizeof *g.b);
  g.c = malloc(m * g.ldc * sizeof *g.c), g.c0 = malloc(m * g.ldc * sizeof *g.c0);
  for (size_t i = 0; i < arows * g.lda; i++) g.a[i] = urand(&seed);
  for (size_t i = 0; i < brows * g.ldb; i++) g.b[i] = urand(&seed) * 0.01f;
  for (size_t i = 0; i < m * g.ldc; i++) g.c[i] = g.c0[i] = urand(&seed);
  return g;
}

static inline void gemm_case_free(gemm_case *g) {
  free(g->a), free(g->b), free(g->c), free(g->c0);
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
