/* exmy_qgemm against a naive triple loop in double on the quantized operands
 * (quantized separately through exmy_quantize_scaled_f32), every transpose. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "cpu/exmy_cpu.h"
#include "tests/check_suite.h"
#include "tests/cpu/gemm_operands.h"

static void check_case(bool ta, bool tb, const char *fmt, exmy_scaling_kind kind,
                       exmy_rounding mode, bool quant_c) {
  const size_t m = 13, n = 17, k = 70, pad = 3;
  gemm_case g = gemm_case_new(ta, tb, m, n, k, pad, 7);
  float *a = g.a, *b = g.b, *c = g.c, *c0 = g.c0;
  const size_t lda = g.lda, ldb = g.ldb, ldc = g.ldc;

  exmy_operand_quant qa = {.enabled = true}, qb = {.enabled = true}, qc = {.enabled = quant_c};
  ck_assert_int_eq(exmy_format_parse(fmt, &qa.format), 0);
  qb.format = qa.format;
  ck_assert_int_eq(exmy_format_parse("bf16", &qc.format), 0);
  qa.round.mode = qb.round.mode = mode;
  qa.round.seed = 1, qb.round.seed = 2, qb.round.offset = 5;
  qa.scaling.kind = qb.scaling.kind = kind;
  qa.scaling.group = qb.scaling.group = kind == EXMY_SCALING_GROUP ? 16 : 0;
  const float alpha = 0.75f, beta = 0.5f;
  ck_assert_int_eq(exmy_qgemm(ta, tb, m, n, k, alpha, a, lda, &qa, b, ldb, &qb, beta,
                              c, ldc, &qc), 0);

  /* the quantized operands, K contiguous, as the API documents */
  float *aq = dense_op(a, lda, ta, m, k), *bq = dense_op(b, ldb, !tb, n, k);
  exmy_quantize_scaled_f32(&qa.format, &qa.round, &qa.scaling, NULL, aq, aq, m, k, NULL);
  exmy_quantize_scaled_f32(&qb.format, &qb.round, &qb.scaling, NULL, bq, bq, n, k, NULL);
  for (size_t i = 0; i < m; i++)
    for (size_t j = 0; j < n; j++) {
      double s = 0, sabs = 0;
      for (size_t p = 0; p < k; p++) {
        s += (double)aq[i * k + p] * bq[j * k + p];
        sabs += fabs((double)aq[i * k + p] * bq[j * k + p]);
      }
      double want = alpha * s + beta * c0[i * ldc + j];
      double tol = 1e-5 * (alpha * sabs + fabs(beta * c0[i * ldc + j])) + 1e-30;
      if (quant_c) {
        /* C then rounded to bf16: within half a bf16 ulp plus the sum's error */
        tol += fabs(want) * (1.0 / 256) + 1e-30;
      }
      double got = c[i * ldc + j];
      if (fabs(got - want) > tol) {
        fprintf(stderr, "qgemm ta=%d tb=%d %s kind=%d: C[%zu][%zu] = %.9g, want %.9g (tol %.3g)\n",
                ta, tb, fmt, kind, i, j, got, want, tol);
        ck_abort();
      }
      if (quant_c) {
        exmy_rounding_opts rne = {0};
        ck_assert(exmy_ref_quantize(&qc.format, &rne, c[i * ldc + j], 0) == c[i * ldc + j]);
      }
    }
  /* padding of C untouched */
  for (size_t i = 0; i < m; i++)
    for (size_t j = n; j < ldc; j++) ck_assert(c[i * ldc + j] == c0[i * ldc + j]);
  gemm_case_free(&g), free(aq), free(bq);
}

START_TEST(every_transpose_and_recipe) {
  const exmy_scaling_kind kinds[] = {EXMY_SCALING_NONE, EXMY_SCALING_TENSOR,
                                     EXMY_SCALING_MX, EXMY_SCALING_GROUP};
  for (int ta = 0; ta < 2; ta++)
    for (int tb = 0; tb < 2; tb++)
      for (int kd = 0; kd < 4; kd++) {
        check_case(ta, tb, "e4m3", kinds[kd], EXMY_RNE, false);
        check_case(ta, tb, "e5m2", kinds[kd], EXMY_SR, kd == 1);
      }
}
END_TEST

START_TEST(unquantized_is_sgemm) {
  /* qa = qb = qc = NULL: plain sgemm, exact on small integers */
  float a[6] = {1, 2, 3, 4, 5, 6}, b[6] = {1, 0, -1, 2, 0, 1}, c[4] = {1, 1, 1, 1};
  ck_assert_int_eq(exmy_qgemm(false, false, 2, 2, 3, 1.0f, a, 3, NULL, b, 2, NULL, 1.0f, c, 2, NULL), 0);
  /* [1 2 3;4 5 6] x [1 0;-1 2;0 1] = [-1 7; -1 16] */
  ck_assert(c[0] == 0 && c[1] == 8 && c[2] == 0 && c[3] == 17);
}
END_TEST

START_TEST(quantized_operand_hand_case) {
  /* e2m1 values {0,.5,1,1.5,2,3,4,6}: A = [1.2 2.6], B = [2.9; 5.2] without
   * scaling rounds to [1 3] and [3; 6]: C = 3 + 18 = 21 */
  float a[2] = {1.2f, 2.6f}, b[2] = {2.9f, 5.2f}, c[1] = {0};
  exmy_operand_quant q = {.enabled = true};
  exmy_format_parse("e2m1", &q.format);
  ck_assert_int_eq(exmy_qgemm(false, false, 1, 1, 2, 1.0f, a, 2, &q, b, 1, &q, 0.0f, c, 1, NULL), 0);
  ck_assert_float_eq(c[0], 21.0f);
}
END_TEST

int main(void) {
  const TTest *const tests[] = {every_transpose_and_recipe, unquantized_is_sgemm,
                                quantized_operand_hand_case, NULL};
  return run_suite(suite_of("qgemm", 60, tests), true);
}
