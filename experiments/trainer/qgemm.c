/* The trainer's GEMM: exmy_qgemm with the stochastic-rounding stream and
 * statistics switched per step. */
#include "experiments/trainer/qgemm.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/exmy_cpu.h"

const char *const tq_use_names[USES_PER_SITE] = {"fwd_x", "fwd_w", "dx_dy", "dx_w", "dw_dy", "dw_x"};
const int tq_use_slot[USES_PER_SITE] = {SLOT_X, SLOT_W, SLOT_DY, SLOT_W, SLOT_DY, SLOT_X};

bool tq_collect_stats = false;
uint64_t tq_sr_counter = 0;
tq_spy_fn tq_spy = NULL;

/* The operand as this call uses it: its own stretch of the sr stream, and
 * statistics only on statistics steps. */
static const exmy_operand_quant *prepare(const exmy_operand_quant *q, exmy_operand_quant *tmp,
                                         size_t elements) {
  if (!q || !q->enabled) return NULL;
  *tmp = *q;
  if (tmp->round.mode == EXMY_SR) {
    tmp->round.offset = tq_sr_counter;
    tq_sr_counter += elements;
  }
  if (!tq_collect_stats) tmp->stats = NULL;
  return tmp;
}

bool tq_along_k(const exmy_operand_quant *q) {
  return q->scaling.kind == EXMY_SCALING_MX || q->scaling.kind == EXMY_SCALING_GROUP ||
         q->scaling.kind == EXMY_SCALING_NVFP4;
}

const float *tq_operand_for_gemm(tq_site *site, int use, int slot, bool fill, const float *x,
                                 int *ld, int rows, int cols, const exmy_operand_quant **q) {
  *q = NULL;
  if (!site || !site->op[use].enabled) return x;
  const exmy_operand_quant *op = &site->op[use];
  if (tq_along_k(op)) {
    *q = op;
    return x;
  }
  tq_cache *c = &site->cache[slot];
  const size_t n = (size_t)rows * cols;
  if (fill) {
    if (c->cap < n) {
      free(c->data);
      c->data = malloc(n * sizeof(float));
      if (!c->data) {
        fprintf(stderr, "tq_operand_for_gemm: out of memory\n");
        exit(1);
      }
      c->cap = n;
    }
    const float *src = x;
    if (*ld != cols) { /* gather the rows first; dense tensors are read in place */
      for (int r = 0; r < rows; r++)
        memcpy(c->data + (size_t)r * cols, x + (size_t)r * *ld, (size_t)cols * sizeof(float));
      src = c->data;
    }
    exmy_operand_quant tmp;
    const exmy_operand_quant *p = prepare(op, &tmp, n);
    if (exmy_quantize_scaled_f32_used(&p->format, &p->round, &p->scaling, p->delayed, src,
                                      c->data, (size_t)rows, (size_t)cols, p->stats,
                                      &c->scale)) {
      fprintf(stderr, "exmy_quantize_scaled_f32 failed\n");
      exit(1);
    }
  }
  *ld = cols;
  return c->data;
}

void tq_site_free_caches(tq_site *site) {
  for (int i = 0; i < SLOTS_PER_SITE; i++) {
    free(site->cache[i].data);
    site->cache[i].data = NULL;
    site->cache[i].cap = 0;
    site->cache[i].scale = 0.0f;
  }
}

/* exmy_sgemm's contract through OpenBLAS: its order of operations, hence its
 * bits, depend on the CPU model and the thread count. */
static int openblas_sgemm(bool trans_a, bool trans_b, size_t m, size_t n, size_t k, float alpha,
                          const float *a, size_t lda, const float *b, size_t ldb, float beta,
                          float *c, size_t ldc) {
  if (ldc < n) return -1;
  if (!m || !n) return 0;
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, (int)m, (int)n, (int)k, alpha, a,
              (int)(lda ? lda : 1), b, (int)(ldb ? ldb : 1), beta, c, (int)ldc);
  return 0;
}

int tq_select_gemm(const char *name) {
  if (!strcmp(name, "exmy")) exmy_qgemm_set_sgemm(NULL);
  else if (!strcmp(name, "openblas")) exmy_qgemm_set_sgemm(openblas_sgemm);
  else return -1;
  return 0;
}

/* A cached operand's emin follows the scale of its slot. */
static int operand_emin(const tq_site *site, int use) {
  const exmy_operand_quant *q = &site->op[use];
  if (!exmy_accum_pow2_scaled(q)) return exmy_accum_operand_emin(q);
  return exmy_accum_operand_emin_scaled(q, site->cache[tq_use_slot[use]].scale);
}

exmy_accum_model tq_site_accum(const tq_site *site, int ua, int ub) {
  exmy_accum_model accum = site->accum;
  accum.emin_a = operand_emin(site, ua);
  accum.emin_b = operand_emin(site, ub);
  return accum;
}

void tq_gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha,
             const float *a, int lda, const exmy_operand_quant *qa,
             const float *b, int ldb, const exmy_operand_quant *qb,
             float beta, float *c, int ldc, const exmy_accum_model *accum) {
  exmy_operand_quant ta, tb;
  const exmy_operand_quant *pa = prepare(qa, &ta, (size_t)m * k);
  const exmy_operand_quant *pb = prepare(qb, &tb, (size_t)k * n);
  const bool model = accum && accum->group != EXMY_ACCUM_FP32;
  if ((model ? exmy_qgemm_accum(trans_a, trans_b, (size_t)m, (size_t)n, (size_t)k, alpha, a,
                                (size_t)lda, pa, b, (size_t)ldb, pb, beta, c, (size_t)ldc, NULL,
                                accum)
             : exmy_qgemm(trans_a, trans_b, (size_t)m, (size_t)n, (size_t)k, alpha, a,
                          (size_t)lda, pa, b, (size_t)ldb, pb, beta, c, (size_t)ldc, NULL)) != 0) {
    fprintf(stderr, "%s failed (m=%d n=%d k=%d)\n", model ? "exmy_qgemm_accum" : "exmy_qgemm",
            m, n, k);
    exit(1);
  }
  if (tq_spy) tq_spy(trans_a, trans_b, m, n, k, a, lda, pa, b, ldb, pb, c, ldc);
}
