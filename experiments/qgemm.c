/* The trainer's GEMM: exmy_qgemm with the stochastic-rounding stream and
 * statistics switched per step. */
#include "experiments/qgemm.h"

#include <stdio.h>
#include <stdlib.h>

const char *const tq_use_names[USES_PER_SITE] = {"fwd_x", "fwd_w", "dx_dy", "dx_w", "dw_dy", "dw_x"};

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

void tq_gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha,
             const float *a, int lda, const exmy_operand_quant *qa,
             const float *b, int ldb, const exmy_operand_quant *qb,
             float beta, float *c, int ldc) {
  exmy_operand_quant ta, tb;
  const exmy_operand_quant *pa = prepare(qa, &ta, (size_t)m * k);
  const exmy_operand_quant *pb = prepare(qb, &tb, (size_t)k * n);
  if (exmy_qgemm(trans_a, trans_b, (size_t)m, (size_t)n, (size_t)k, alpha, a, (size_t)lda, pa,
                 b, (size_t)ldb, pb, beta, c, (size_t)ldc, NULL) != 0) {
    fprintf(stderr, "exmy_qgemm failed (m=%d n=%d k=%d)\n", m, n, k);
    exit(1);
  }
  if (tq_spy) tq_spy(trans_a, trans_b, m, n, k, a, lda, pa, b, ldb, pb, c, ldc);
}
