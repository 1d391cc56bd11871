/* exmy_qgemm_accum against lib/accum_core.h's scalar exmy_accum_dot on the
 * operands quantized separately (exmy_quantize_scaled_f32), bit for bit, every
 * transpose, padded leading dimensions; and group = 0 against exmy_qgemm. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/exmy_cpu.h"
#include "lib/accum_core.h"
#include "tests/check_suite.h"
#include "tests/cpu/gemm_operands.h"

static int same(float x, float y) { return memcmp(&x, &y, sizeof x) == 0 || (isnan(x) && isnan(y)); }

static void check_case(bool ta, bool tb, const exmy_accum_model *model, bool quant_a, float beta) {
  const size_t m = 9, n = 11, k = 300, pad = 3;
  gemm_case g = gemm_case_new(ta, tb, m, n, k, pad, 11 + ta + 2 * tb);
  float *a = g.a, *b = g.b, *c = g.c, *c0 = g.c0;
  const size_t lda = g.lda, ldb = g.ldb, ldc = g.ldc;

  exmy_operand_quant qa = {.enabled = quant_a}, qb = {.enabled = true};
  ck_assert_int_eq(exmy_format_parse("e4m3", &qa.format), 0);
  ck_assert_int_eq(exmy_format_parse("e5m2", &qb.format), 0);
  qa.scaling.kind = qb.scaling.kind = EXMY_SCALING_TENSOR;
  const float alpha = 0.75f;
  ck_assert_int_eq(exmy_qgemm_accum(ta, tb, m, n, k, alpha, a, lda, &qa, b, ldb, &qb, beta,
                                    c, ldc, NULL, model), 0);

  float *aq = dense_op(a, lda, ta, m, k), *bq = dense_op(b, ldb, !tb, n, k);
  if (quant_a)
    exmy_quantize_scaled_f32(&qa.format, &qa.round, &qa.scaling, NULL, aq, aq, m, k, NULL);
  exmy_quantize_scaled_f32(&qb.format, &qb.round, &qb.scaling, NULL, bq, bq, n, k, NULL);
  for (size_t i = 0; i < m; i++)
    for (size_t j = 0; j < n; j++) {
      const float dot = exmy_accum_dot(model, aq + i * k, 1, bq + j * k, 1, (int)k);
      const float want = beta != 0 ? alpha * dot + beta * c0[i * ldc + j] : alpha * dot;
      if (!same(c[i * ldc + j], want)) {
        fprintf(stderr, "ta=%d tb=%d group %d: C[%zu][%zu] = %.9g, want %.9g\n", ta, tb,
                model->group, i, j, c[i * ldc + j], want);
        ck_abort();
      }
    }
  for (size_t i = 0; i < m; i++)
    for (size_t j = n; j < ldc; j++) ck_assert(c[i * ldc + j] == c0[i * ldc + j]);

  if (model->group == EXMY_ACCUM_FP32) { /* the same bits as exmy_qgemm */
    float *c2 = malloc(m * ldc * sizeof *c2);
    memcpy(c2, c0, m * ldc * sizeof *c2);
    ck_assert_int_eq(exmy_qgemm(ta, tb, m, n, k, alpha, a, lda, &qa, b, ldb, &qb, beta, c2,
                                ldc, NULL), 0);
    ck_assert_int_eq(memcmp(c, c2, m * ldc * sizeof *c2), 0);
    free(c2);
  }
  gemm_case_free(&g), free(aq), free(bq);
}

START_TEST(test_against_core) {
  const exmy_accum_model models[] = {
      {32, 14, 14, EXMY_ACCUM_TRUNCATE, 0, 0, 0},   /* DeepSeek-V3's description */
      {32, 14, 14, EXMY_ACCUM_TRUNCATE, 128, 0, 0}, /* with the split accumulator */
      {16, 10, 24, EXMY_ACCUM_NEAREST_EVEN, 64, 1, 0},
      {EXMY_ACCUM_FP32, 0, 0, 0, 0, 0, 0},
  };
  for (int t = 0; t < 4; t++)
    for (int mi = 0; mi < 4; mi++)
      check_case(t & 1, t & 2, &models[mi], mi != 2, mi == 0 ? 0.0f : 0.5f);
}
END_TEST

START_TEST(test_bad_arguments) {
  float a[4] = {1, 2, 3, 4}, b[4] = {1, 1, 1, 1}, c[4] = {7, 7, 7, 7};
  const exmy_accum_model bad = {32, 14, 14, EXMY_ACCUM_TRUNCATE, 100, 0, 0};
  ck_assert_int_eq(exmy_qgemm_accum(false, false, 2, 2, 2, 1, a, 2, NULL, b, 2, NULL, 0, c, 2,
                                    NULL, &bad), -1);
  ck_assert_int_eq(exmy_qgemm_accum(false, false, 2, 2, 2, 1, a, 2, NULL, b, 2, NULL, 0, c, 2,
                                    NULL, NULL), -1);
  for (int i = 0; i < 4; i++) ck_assert(c[i] == 7);
}
END_TEST

int main(void) {
  const TTest *tests[] = {test_against_core, test_bad_arguments, NULL};
  return run_suite(suite_of("qgemm_accum", 120, tests), true);
}
