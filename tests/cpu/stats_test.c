/* exmy_tensor_stats on hand-computed cases, and the same bits on any number
 * of threads. */
#include <check.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/exmy_cpu.h"
#include "tests/check_suite.h"

/* x = {1, 2, 3, 1e-9, 1000, -0.5, 0, 0.01} in E4M3 (fmax 448, smallest
 * normal 2^-6, smallest subnormal 2^-9): 1e-9 underflows to 0, 1000
 * overflows, 0.01 rounds to the subnormal 5 · 2^-9. */
static const float kX[8] = {1, 2, 3, 1e-9f, 1000, -0.5f, 0, 0.01f};

START_TEST(hand_case_no_saturation) {
  exmy_format f;
  exmy_format_parse("e4m3", &f);
  exmy_rounding_opts o = {0};
  float y[8];
  exmy_tensor_stats st;
  exmy_quantize_scaled_f32(&f, &o, NULL, NULL, kX, y, 1, 8, &st);
  ck_assert(isnan(y[4])); /* e4m3fn has no inf */
  ck_assert_float_eq(y[7], 5.0f / 512.0f);
  ck_assert_uint_eq(st.n, 8);
  ck_assert_double_eq(st.amax, 1000.0);
  ck_assert_double_eq(st.min_nonzero, (double)1e-9f);
  ck_assert_double_eq(st.underflow_ratio, 1.0 / 8);
  ck_assert_double_eq(st.subnormal_ratio, 1.0 / 8);
  ck_assert_double_eq(st.overflow_ratio, 1.0 / 8);
  /* errors over the 7 finite pairs */
  double e1 = (double)1e-9f, e2 = (double)0.01f - 5.0 / 512;
  double see = e1 * e1 + e2 * e2;
  double sxx = 1 + 4 + 9 + e1 * e1 + 0.25 + (double)0.01f * 0.01f;
  double syy = 1 + 4 + 9 + 0.25 + (5.0 / 512) * (5.0 / 512);
  double sxy = 1 + 4 + 9 + 0.25 + (double)0.01f * (5.0 / 512);
  ck_assert_double_eq_tol(st.mse, see / 7, 1e-15 * see);
  ck_assert_double_eq_tol(st.rel_l2, sqrt(see / sxx), 1e-12);
  ck_assert_double_eq_tol(st.cosine, sxy / sqrt(sxx * syy), 1e-12);
  ck_assert_double_eq_tol(st.sqnr_db, 10 * log10(sxx / see), 1e-9);
  ck_assert_double_eq(st.scale, 1.0);
  ck_assert(isnan(st.delayed_over_current));
  /* the same from exmy_tensor_stats_f32 on (x, y) */
  exmy_tensor_stats s2;
  exmy_tensor_stats_f32(&f, kX, y, 8, &s2);
  ck_assert_double_eq(s2.underflow_ratio, st.underflow_ratio);
  ck_assert_double_eq(s2.overflow_ratio, st.overflow_ratio);
  ck_assert_double_eq(s2.subnormal_ratio, st.subnormal_ratio);
  ck_assert_double_eq_tol(s2.mse, st.mse, 1e-20);
}
END_TEST

START_TEST(hand_case_saturation) {
  exmy_format f;
  exmy_format_parse("e4m3", &f);
  exmy_rounding_opts o = {.saturate = true};
  float y[8];
  exmy_tensor_stats st;
  exmy_quantize_scaled_f32(&f, &o, NULL, NULL, kX, y, 1, 8, &st);
  ck_assert_float_eq(y[4], 448.0f);
  ck_assert_double_eq(st.overflow_ratio, 1.0 / 8); /* saturated still counts */
  double e1 = (double)1e-9f, e2 = (double)0.01f - 5.0 / 512;
  double see = e1 * e1 + e2 * e2 + 552.0 * 552.0;
  ck_assert_double_eq_tol(st.mse, see / 8, 1e-12 * see);
}
END_TEST

START_TEST(scaled_stats_judge_the_scaled_values) {
  /* TENSOR scaling of {1e-9, 1}: s = 448, 1e-9·448 still underflows; the
   * ratios are judged on x·s, the errors on x against y */
  exmy_format f;
  exmy_format_parse("e4m3", &f);
  exmy_rounding_opts o = {0};
  exmy_scaling sc = {.kind = EXMY_SCALING_TENSOR};
  const float x[4] = {1e-9f, 1.0f, 0.004f, -1.0f};
  float y[4];
  exmy_tensor_stats st;
  exmy_quantize_scaled_f32(&f, &o, &sc, NULL, x, y, 2, 2, &st);
  ck_assert_double_eq(st.scale, 448.0);
  ck_assert_double_eq(st.underflow_ratio, 0.25);
  /* 0.004 · 448 = 1.792 is normal: no subnormal, no overflow */
  ck_assert_double_eq(st.subnormal_ratio, 0.0);
  ck_assert_double_eq(st.overflow_ratio, 0.0);
  ck_assert_double_eq(st.cosine > 0.99999, 1);
  /* all zero: rel_l2 0, cosine 1, sqnr +inf, min_nonzero 0 */
  const float z[3] = {0, 0, 0};
  exmy_quantize_scaled_f32(&f, &o, &sc, NULL, z, y, 1, 3, &st);
  ck_assert(st.rel_l2 == 0 && st.cosine == 1 && isinf(st.sqnr_db) && st.min_nonzero == 0);
}
END_TEST

/* The sums behind the statistics are merged in a fixed order: 1, 2 and 3
 * threads give the same statistics bit for bit, for every scaling and for
 * exmy_tensor_stats_f32, on tensors large enough to be split. */
START_TEST(same_bits_on_any_thread_count) {
  enum { ROWS = 300, COLS = 1000 };
  float *x = malloc(sizeof(float) * ROWS * COLS), *y = malloc(sizeof(float) * ROWS * COLS);
  unsigned r = 1;
  for (int i = 0; i < ROWS * COLS; i++) {
    r = r * 1664525u + 1013904223u;
    x[i] = ldexpf((float)(r >> 8) / 16777216.0f - 0.5f, (int)(r % 40) - 30);
  }
  exmy_format f;
  exmy_format_parse("e4m3", &f);
  const exmy_scaling kinds[] = {{.kind = EXMY_SCALING_NONE}, {.kind = EXMY_SCALING_TENSOR},
                                {.kind = EXMY_SCALING_MX, .group = 32},
                                {.kind = EXMY_SCALING_GROUP, .group = 128}};
  for (int k = 0; k <= 4; k++) {
    exmy_tensor_stats st[3];
    for (int t = 1; t <= 3; t++) {
      omp_set_num_threads(t);
      exmy_rounding_opts o = {.mode = EXMY_SR, .seed = 5};
      if (k < 4)
        ck_assert_int_eq(exmy_quantize_scaled_f32(&f, &o, &kinds[k], NULL, x, y, ROWS, COLS, &st[t - 1]), 0);
      else
        exmy_tensor_stats_f32(&f, x, x, ROWS * COLS, &st[t - 1]);
    }
    ck_assert_msg(memcmp(&st[0], &st[1], sizeof st[0]) == 0 && memcmp(&st[0], &st[2], sizeof st[0]) == 0,
                  "scaling %d: statistics differ between 1, 2 and 3 threads (mse %a %a %a)", k,
                  st[0].mse, st[1].mse, st[2].mse);
  }
  free(x);
  free(y);
}
END_TEST

int main(void) {
  const TTest *const tests[] = {hand_case_no_saturation, hand_case_saturation,
                                scaled_stats_judge_the_scaled_values,
                                same_bits_on_any_thread_count, NULL};
  return run_suite(suite_of("stats", 0, tests), true);
}
