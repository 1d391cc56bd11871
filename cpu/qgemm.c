/* Quantized GEMM: C = alpha · dequant(Q(op(A))) · dequant(Q(op(B))) + beta · C
 * through the float32 exmy_sgemm (cpu/gemm.c), then C optionally quantized —
 * an FP8 tensor-core GEMM with FP32 accumulation, emulated. */
#include <stdlib.h>
#include <string.h>

#include "cpu/exmy_cpu.h"

static exmy_sgemm_fn sgemm = exmy_sgemm;

void exmy_qgemm_set_sgemm(exmy_sgemm_fn f) { sgemm = f ? f : exmy_sgemm; }

static int active(const exmy_operand_quant *q) { return q && q->enabled; }

/* dst (rows x cols, dense) = src or its transpose (src stored with leading
 * dimension ld), so that the reduction dimension K is contiguous in dst. */
static void gather(const float *src, size_t ld, bool transpose, size_t rows,
                   size_t cols, float *dst) {
#pragma omp parallel for schedule(static) if (rows * cols > 65536)
  for (size_t r = 0; r < rows; r++)
    for (size_t c = 0; c < cols; c++)
      dst[r * cols + c] = transpose ? src[c * ld + r] : src[r * ld + c];
}

static int quantize_operand(const exmy_operand_quant *q, float *t, size_t rows,
                            size_t cols) {
  return exmy_quantize_scaled_f32(&q->format, &q->round, &q->scaling,
                                  q->delayed, t, t, rows, cols, q->stats);
}

int exmy_qgemm(bool trans_a, bool trans_b, size_t m, size_t n, size_t k,
               float alpha, const float *a, size_t lda,
               const exmy_operand_quant *qa, const float *b, size_t ldb,
               const exmy_operand_quant *qb, float beta, float *c, size_t ldc,
               const exmy_operand_quant *qc) {
  if (ldc < n) return -1;
  float *at = NULL, *bt = NULL;
  const float *ause = a, *buse = b;
  size_t lda_use = lda, ldb_use = ldb;
  bool ta = trans_a, tb = trans_b;
  int rc = -1;
  if (active(qa)) {
    /* op(A) as m x k, K contiguous */
    if (!(at = malloc(m * k * sizeof *at + 1))) goto out;
    gather(a, lda, trans_a, m, k, at);
    if (quantize_operand(qa, at, m, k)) goto out;
    ause = at, lda_use = k, ta = false;
  }
  if (active(qb)) {
    /* op(B)^T as n x k, K contiguous; sgemm then reads it transposed */
    if (!(bt = malloc(n * k * sizeof *bt + 1))) goto out;
    gather(b, ldb, !trans_b, n, k, bt);
    if (quantize_operand(qb, bt, n, k)) goto out;
    buse = bt, ldb_use = k, tb = true;
  }
  if (sgemm(ta, tb, m, n, k, alpha, ause, lda_use, buse, ldb_use, beta, c, ldc)) goto out;
  if (active(qc) && m && n) {
    if (ldc == n) {
      if (quantize_operand(qc, c, m, n)) goto out;
    } else {
      float *ct = malloc(m * n * sizeof *ct);
      if (!ct) goto out;
      gather(c, ldc, false, m, n, ct);
      int r = quantize_operand(qc, ct, m, n);
      for (size_t i = 0; i < m; i++) memcpy(c + i * ldc, ct + i * n, n * sizeof *ct);
      free(ct);
      if (r) goto out;
    }
  }
  rc = 0;
out:
  free(at);
  free(bt);
  return rc;
}
