/* Quantized GEMM: C = alpha · dequant(Q(op(A))) · dequant(Q(op(B))) + beta · C
 * through the float32 exmy_sgemm (cpu/gemm.c), then C optionally quantized —
 * an FP8 tensor-core GEMM with FP32 accumulation, emulated; and the same with
 * every dot product under an accumulation model (lib/accum_core.h). */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/accum_vector.h"
#include "cpu/exmy_cpu.h"
#include "lib/accum_core.h"

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
                            size_t cols, float *scale) {
  return exmy_quantize_scaled_f32_used(&q->format, &q->round, &q->scaling, q->delayed, t, t,
                                       rows, cols, q->stats, scale);
}

/* op(A) and op(B) as the GEMM reads them: the caller's, or a quantized copy
 * with K contiguous (then *at / *bt, to be freed), and the per-tensor scale
 * each copy was quantized with (NAN: none).  A block-scaled operand under
 * the accumulation model (exmy_accum_block_scaled) is read as its codes
 * (*ca / *cb, to be freed, in place of the dequantized copy) with its block
 * scales (ba / bb; .s NULL: none, to be freed). */
typedef struct {
  const float *a, *b;
  size_t lda, ldb;
  bool ta, tb;
  float *at, *bt;
  float sa, sb;
  float *ca, *cb;
  exmy_accum_scales ba, bb;
} operands;

/* t (rows x cols, K contiguous) quantized per q in place, its codes into a
 * new *codes and its block scales into s (exmy_accum_scales). */
static int quantize_codes(const exmy_operand_quant *q, float *t, size_t rows, size_t cols,
                          float **codes, exmy_accum_scales *s) {
  const size_t g = (size_t)q->scaling.group;
  const size_t br = q->scaling.block_rows > 1 ? (size_t)q->scaling.block_rows : 1;
  const size_t per_row = (cols + g - 1) / g;
  float *bs = malloc(((rows + br - 1) / br) * per_row * sizeof *bs + 1);
  *codes = malloc(rows * cols * sizeof **codes + 1);
  *s = (exmy_accum_scales){bs, (long)per_row, (int)br};
  if (!bs || !*codes) return -1;
  return exmy_quantize_group_codes_f32(&q->format, &q->round, &q->scaling, t, t, *codes, bs, rows,
                                       cols, q->stats);
}

/* One quantized operand: x (op(x) = x, or its transpose with trans) gathered
 * as rows x k with K contiguous into a new *t, then rounded per q: read as
 * its codes (*codes) with its block scales (*blocks) when it is block-scaled
 * under the accumulation model, else as *t with its per-tensor scale
 * (*scale); *out is what the GEMM reads. */
static int prepare_side(const float *x, size_t ld, bool trans, size_t rows, size_t k,
                        const exmy_operand_quant *q, const exmy_accum_model *model, float **t,
                        float **codes, exmy_accum_scales *blocks, float *scale,
                        const float **out) {
  if (!(*t = malloc(rows * k * sizeof **t + 1))) return -1;
  gather(x, ld, trans, rows, k, *t);
  if (model && exmy_accum_block_scaled(q, model)) {
    if (quantize_codes(q, *t, rows, k, codes, blocks)) return -1;
    *out = *codes;
  } else {
    if (quantize_operand(q, *t, rows, k, scale)) return -1;
    *out = *t;
  }
  return 0;
}

/* model (or NULL): the accumulation model, for the block-scaled operands. */
static int prepare_operands(bool trans_a, bool trans_b, size_t m, size_t n, size_t k,
                            const float *a, size_t lda, const exmy_operand_quant *qa,
                            const float *b, size_t ldb, const exmy_operand_quant *qb,
                            const exmy_accum_model *model, operands *o) {
  *o = (operands){a, b, lda, ldb, trans_a, trans_b, NULL, NULL, NAN, NAN, NULL, NULL, {0}, {0}};
  if (active(qa)) { /* op(A) as m x k, K contiguous */
    if (prepare_side(a, lda, trans_a, m, k, qa, model, &o->at, &o->ca, &o->ba, &o->sa, &o->a))
      return -1;
    o->lda = k, o->ta = false;
  }
  if (active(qb)) { /* op(B)^T as n x k, K contiguous; the GEMM then reads it transposed */
    if (prepare_side(b, ldb, !trans_b, n, k, qb, model, &o->bt, &o->cb, &o->bb, &o->sb, &o->b))
      return -1;
    o->ldb = k, o->tb = true;
  }
  return 0;
}

/* C (m x n, leading dimension ldc) quantized per qc, if enabled. */
static int quantize_result(const exmy_operand_quant *qc, float *c, size_t m, size_t n,
                           size_t ldc) {
  if (!active(qc) || !m || !n) return 0;
  if (ldc == n) return quantize_operand(qc, c, m, n, NULL);
  float *ct = malloc(m * n * sizeof *ct);
  if (!ct) return -1;
  gather(c, ldc, false, m, n, ct);
  int r = quantize_operand(qc, ct, m, n, NULL);
  for (size_t i = 0; i < m; i++) memcpy(c + i * ldc, ct + i * n, n * sizeof *ct);
  free(ct);
  return r;
}

/* The products C = alpha op(A) op(B) + beta C of prepared operands. */
typedef int (*products_fn)(const operands *o, size_t m, size_t n, size_t k, float alpha,
                           float beta, float *c, size_t ldc, const void *ctx);

/* exmy_qgemm's steps around a products function: the operands rounded, the
 * products, C rounded. */
static int qgemm_with(products_fn products, const void *ctx, const exmy_accum_model *model,
                      bool trans_a, bool trans_b, size_t m, size_t n, size_t k, float alpha,
                      const float *a, size_t lda, const exmy_operand_quant *qa, const float *b,
                      size_t ldb, const exmy_operand_quant *qb, float beta, float *c,
                      size_t ldc, const exmy_operand_quant *qc) {
  operands o;
  int rc = -1;
  if (prepare_operands(trans_a, trans_b, m, n, k, a, lda, qa, b, ldb, qb, model, &o)) goto out;
  if (products(&o, m, n, k, alpha, beta, c, ldc, ctx)) goto out;
  if (quantize_result(qc, c, m, n, ldc)) goto out;
  rc = 0;
out:
  free(o.at);
  free(o.bt);
  free(o.ca);
  free(o.cb);
  free((float *)o.ba.s);
  free((float *)o.bb.s);
  return rc;
}

static int sgemm_products(const operands *o, size_t m, size_t n, size_t k, float alpha,
                          float beta, float *c, size_t ldc, const void *ctx) {
  (void)ctx;
  return sgemm(o->ta, o->tb, m, n, k, alpha, o->a, o->lda, o->b, o->ldb, beta, c, ldc);
}

int exmy_qgemm(bool trans_a, bool trans_b, size_t m, size_t n, size_t k,
               float alpha, const float *a, size_t lda,
               const exmy_operand_quant *qa, const float *b, size_t ldb,
               const exmy_operand_quant *qb, float beta, float *c, size_t ldc,
               const exmy_operand_quant *qc) {
  if (ldc < n) return -1;
  return qgemm_with(sgemm_products, NULL, NULL, trans_a, trans_b, m, n, k, alpha, a, lda, qa, b,
                    ldb, qb, beta, c, ldc, qc);
}

/* The model of exmy_qgemm_accum and its operands' recipes. */
typedef struct {
  const exmy_accum_model *model;
  const exmy_operand_quant *qa, *qb;
} accum_ctx;

/* A vector kernel where one covers the model (cpu/accum_vector.c), else one
 * scalar exmy_accum_dot_scaled per element of C, rows of C shared out between
 * threads.  The epilogue is every GEMM's (exmy_gemm_epilogue).  An operand quantized
 * here with a power-of-two per-tensor scale s is clamped at its format's
 * emin - log2 s, where the tensor core clamps its codes; a block-scaled one
 * is read as its codes, clamped at its format's emin, with its block scales
 * applied at each promotion. */
static int accum_products(const operands *o, size_t m, size_t n, size_t k, float alpha,
                          float beta, float *c, size_t ldc, const void *ctx) {
  const accum_ctx *x = ctx;
  exmy_accum_model local = *x->model;
  if (exmy_accum_pow2_scaled(x->qa)) local.emin_a = exmy_accum_operand_emin_scaled(x->qa, o->sa);
  if (exmy_accum_pow2_scaled(x->qb)) local.emin_b = exmy_accum_operand_emin_scaled(x->qb, o->sb);
  if (o->ba.s) local.emin_a = x->qa->format.emin;
  if (o->bb.s) local.emin_b = x->qb->format.emin;
  const exmy_accum_model *model = &local;
  const exmy_accum_scales *ba = o->ba.s ? &o->ba : NULL, *bb = o->bb.s ? &o->bb : NULL;
  if (exmy_accum_vector_gemm(model, o->ta, o->tb, m, n, k, alpha, o->a, o->lda, ba, o->b,
                             o->ldb, bb, beta, c, ldc) == 0)
    return 0;
  /* element p of row i of op(A), of column j of op(B) */
  const long a_step = o->ta ? (long)o->lda : 1, b_step = o->tb ? 1 : (long)o->ldb;
#pragma omp parallel for schedule(dynamic) if (m * n * k > 65536)
  for (size_t i = 0; i < m; i++)
    for (size_t j = 0; j < n; j++) {
      const float *arow = o->ta ? o->a + i : o->a + i * o->lda;
      const float *bcol = o->tb ? o->b + j * o->ldb : o->b + j;
      const float acc = exmy_accum_dot_scaled(model, arow, a_step, exmy_accum_scales_row(ba, i),
                                              bcol, b_step, exmy_accum_scales_row(bb, j), (int)k);
      c[i * ldc + j] = exmy_gemm_epilogue(acc, alpha, beta, &c[i * ldc + j]);
    }
  return 0;
}

int exmy_qgemm_accum(bool trans_a, bool trans_b, size_t m, size_t n, size_t k,
                     float alpha, const float *a, size_t lda,
                     const exmy_operand_quant *qa, const float *b, size_t ldb,
                     const exmy_operand_quant *qb, float beta, float *c, size_t ldc,
                     const exmy_operand_quant *qc, const struct exmy_accum_model *model) {
  if (!model || exmy_accum_model_check(model) || ldc < n || k > INT_MAX) return -1;
  if (lda < (trans_a ? m : k) || ldb < (trans_b ? k : n)) return -1;
  const accum_ctx ctx = {model, qa, qb};
  return qgemm_with(accum_products, &ctx, model, trans_a, trans_b, m, n, k, alpha, a, lda, qa, b,
                    ldb, qb, beta, c, ldc, qc);
}
