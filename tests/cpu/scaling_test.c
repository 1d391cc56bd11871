/* The scaling recipes (cpu/scaling.c, cpu/quantize_scaled.c, cpu/mx.c): hand-
 * computed cases of their arithmetic, and round trips within the format's
 * error bound. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/exmy_cpu.h"
#include "tests/check_suite.h"
#include "tests/test_rng.h"

static exmy_format fmt(const char *name) {
  exmy_format f;
  ck_assert_int_eq(exmy_format_parse(name, &f), 0);
  return f;
}

START_TEST(current_scale_formula) {
  exmy_format f = fmt("e4m3"); /* fmax 448 */
  ck_assert_float_eq(exmy_scale_from_amax(&f, 4.0f, 0, false), 112.0f);
  ck_assert_float_eq(exmy_scale_from_amax(&f, 4.0f, 2, false), 28.0f);
  ck_assert_float_eq(exmy_scale_from_amax(&f, 4.0f, 0, true), 64.0f);
  ck_assert_float_eq(exmy_scale_from_amax(&f, 4.0f, 1, true), 32.0f);
  ck_assert_float_eq(exmy_scale_from_amax(&f, 448.0f, 0, false), 1.0f);
  ck_assert_float_eq(exmy_scale_from_amax(&f, 0.0f, 0, false), 1.0f);
  ck_assert_float_eq(exmy_scale_from_amax(&f, INFINITY, 0, false), 1.0f);
  exmy_format g = fmt("e5m2"); /* fmax 57344 */
  ck_assert_float_eq(exmy_scale_from_amax(&g, 57344.0f, 0, false), 1.0f);
  ck_assert_float_eq(exmy_scale_from_amax(&g, 100000.0f, 0, true), 0.5f);
}
END_TEST

START_TEST(tensor_scaling_hand_case) {
  exmy_format f = fmt("e4m3");
  exmy_rounding_opts o = {0};
  exmy_scaling sc = {.kind = EXMY_SCALING_TENSOR, .pow2 = true};
  float x[4] = {1.0f, -2.0f, 0.5f, 4.0f}, y[4];
  exmy_tensor_stats st;
  /* s = 64: x·s = 64, -128, 32, 256, all E4M3 values: exact round trip */
  ck_assert_int_eq(exmy_quantize_scaled_f32(&f, &o, &sc, NULL, x, y, 1, 4, &st), 0);
  for (int i = 0; i < 4; i++) ck_assert_float_eq(y[i], x[i]);
  ck_assert(st.scale == 64.0 && st.mse == 0.0 && isinf(st.sqnr_db));
  /* s = 112 without pow2: 112, -224, 56, 448 are E4M3 values; y = q · (1/112) */
  sc.pow2 = false;
  float x2[4] = {1.0f, -2.0f, 0.5f, 4.0f};
  exmy_quantize_scaled_f32(&f, &o, &sc, NULL, x2, x2, 1, 4, &st); /* in place */
  const float q[4] = {112.0f, -224.0f, 56.0f, 448.0f};
  for (int i = 0; i < 4; i++) ck_assert_float_eq(x2[i], q[i] * (1.0f / 112.0f));
  ck_assert(st.scale == 112.0);
  /* 3.3 with amax 4 and s = 112: 369.6 rounds to 384 (E4M3 step 32 there) */
  float x3[2] = {3.3f, 4.0f}, y3[2];
  exmy_quantize_scaled_f32(&f, &o, &sc, NULL, x3, y3, 1, 2, NULL);
  ck_assert_float_eq(y3[0], 384.0f * (1.0f / 112.0f));
}
END_TEST

START_TEST(delayed_scaling_history) {
  exmy_format f = fmt("e4m3");
  exmy_rounding_opts o = {0};
  exmy_scaling sc = {.kind = EXMY_SCALING_DELAYED};
  exmy_delayed_state *s = exmy_delayed_state_new(3);
  ck_assert_ptr_nonnull(s);
  ck_assert_ptr_null(exmy_delayed_state_new(0));
  float y[2];
  exmy_tensor_stats st;
  /* without a state: an error */
  float xa[2] = {4.0f, 1.0f};
  ck_assert_int_eq(exmy_quantize_scaled_f32(&f, &o, &sc, NULL, xa, y, 1, 2, NULL), -1);
  /* call 1: scale 1 is used; amax 4 recorded; next scale 448/4 = 112 */
  ck_assert_int_eq(exmy_quantize_scaled_f32(&f, &o, &sc, s, xa, y, 1, 2, &st), 0);
  ck_assert(st.scale == 1.0);
  ck_assert_double_eq_tol(st.delayed_over_current, 1.0 / 112.0, 1e-9);
  ck_assert_float_eq(s->scale, 112.0f);
  ck_assert_int_eq(s->count, 1);
  /* calls 2, 3 with amax 2, 1: used 112; the history max stays 4 */
  float xb[2] = {2.0f, 0.0f}, xc[2] = {1.0f, -1.0f};
  exmy_quantize_scaled_f32(&f, &o, &sc, s, xb, y, 1, 2, &st);
  ck_assert(st.scale == 112.0);
  ck_assert_double_eq_tol(st.delayed_over_current, 112.0 / 224.0, 1e-9);
  ck_assert_float_eq(s->scale, 112.0f);
  exmy_quantize_scaled_f32(&f, &o, &sc, s, xc, y, 1, 2, &st);
  ck_assert_float_eq(s->scale, 112.0f);
  ck_assert_int_eq(s->count, 3);
  /* call 4 (amax 1) pushes the 4 out of the 3-slot history: max = 2 -> 224 */
  exmy_quantize_scaled_f32(&f, &o, &sc, s, xc, y, 1, 2, &st);
  ck_assert_float_eq(s->scale, 224.0f);
  ck_assert_float_eq(s->scale_inv, 1.0f / 224.0f);
  ck_assert_float_eq(y[0], 224.0f * (1.0f / 112.0f) / 2.0f); /* 1 · 112 exact */
  /* most recent: the scale follows the last amax (1 -> 448) */
  sc.history_most_recent = true;
  exmy_quantize_scaled_f32(&f, &o, &sc, s, xc, y, 1, 2, &st);
  ck_assert_float_eq(s->scale, 448.0f);
  /* an all-zero tensor keeps the scale (TE: amax 0 is not used) */
  float xz[2] = {0.0f, 0.0f};
  exmy_quantize_scaled_f32(&f, &o, &sc, s, xz, y, 1, 2, &st);
  ck_assert_float_eq(s->scale, 448.0f);
  /* equality, bit for bit: a twin given the same calls, then one slot apart */
  exmy_delayed_state *t = exmy_delayed_state_new(3), *u = exmy_delayed_state_new(4);
  ck_assert(!exmy_delayed_state_equal(s, t));
  ck_assert(!exmy_delayed_state_equal(t, u)); /* lengths */
  sc.history_most_recent = false;
  exmy_delayed_state_update(t, &f, &sc, 4.0f);
  exmy_delayed_state *v = exmy_delayed_state_new(3);
  exmy_delayed_state_update(v, &f, &sc, 4.0f);
  ck_assert(exmy_delayed_state_equal(t, v));
  v->amax_history[2] = 1.0f; /* a slot the scale does not read yet */
  ck_assert(!exmy_delayed_state_equal(t, v));
  v->amax_history[2] = 0.0f;
  v->latest = 2;
  ck_assert(!exmy_delayed_state_equal(t, v));
  exmy_delayed_state_free(t), exmy_delayed_state_free(u), exmy_delayed_state_free(v);
  exmy_delayed_state_free(s);
}
END_TEST

START_TEST(mx_hand_case) {
  exmy_format f = fmt("e4m3"); /* emax 8 */
  exmy_rounding_opts o = {0};
  exmy_scaling sc = {.kind = EXMY_SCALING_MX};
  float x[70], y[70];
  for (int i = 0; i < 32; i++) x[i] = 0.25f * i; /* amax 7.75: X = 2 - 8 = -6 */
  for (int i = 32; i < 64; i++) x[i] = 0.0f;     /* all zero: X = -127 */
  for (int i = 64; i < 70; i++) x[i] = -0.001f * (i - 63); /* short last block */
  ck_assert_int_eq(exmy_quantize_scaled_f32(&f, &o, &sc, NULL, x, y, 1, 70, NULL), 0);
  ck_assert_float_eq(y[1], 0.25f);   /* 16 · 2^-6 */
  ck_assert_float_eq(y[17], 4.0f);   /* 272: a tie between 256 and 288, to even */
  ck_assert_float_eq(y[18], 4.5f);   /* 288 exact */
  ck_assert_float_eq(y[29], 7.0f);   /* 464 ties to 480 > fmax: saturates to 448 */
  ck_assert_float_eq(y[31], 7.0f);   /* 496 saturates to 448 */
  ck_assert_float_eq(y[40], 0.0f);
  /* the codes: scale 127 - 6 = 121; code of 16 = 2^4 is 0x58 */
  uint8_t codes[70], scales[3];
  ck_assert_int_eq(exmy_mx_encode_f32(&f, &o, 0, x, 1, 70, codes, scales), 0);
  ck_assert_int_eq(scales[0], 121);
  ck_assert_int_eq(scales[1], 0);
  ck_assert_int_eq(codes[1], 0x58);
  ck_assert_int_eq(codes[31], 0x7E); /* 448 */
  /* block 3: amax 0.006 -> floor(log2) = -8, X = -16 */
  ck_assert_int_eq(scales[2], 127 - 16);
  float z[70];
  exmy_mx_decode_f32(&f, 0, codes, scales, 1, 70, z);
  for (int i = 0; i < 70; i++) ck_assert_msg(z[i] == y[i], "element %d: %g vs %g", i, z[i], y[i]);
  /* FP4: amax 1 -> X = 0 - 2 = -2; 0.3 · 4 = 1.2 -> 1 -> 0.25 */
  exmy_format e2m1 = fmt("e2m1");
  float a[2] = {1.0f, 0.3f}, b[2];
  exmy_quantize_scaled_f32(&e2m1, &o, &sc, NULL, a, b, 1, 2, NULL);
  ck_assert_float_eq(b[0], 1.0f);
  ck_assert_float_eq(b[1], 0.25f);
  ck_assert_int_eq(exmy_mx_encode_f32(&e2m1, &o, 0, a, 1, 2, codes, scales), 0);
  ck_assert_int_eq(scales[0], 125);
  ck_assert_int_eq(codes[1], 0x2); /* 1.0 in E2M1 */
  /* wider than 8 bits: refused */
  exmy_format bf = fmt("bf16");
  ck_assert_int_eq(exmy_mx_encode_f32(&bf, &o, 0, a, 1, 2, codes, scales), -1);
}
END_TEST

START_TEST(group_hand_case) {
  exmy_format f = fmt("e4m3");
  exmy_rounding_opts o = {0};
  exmy_scaling sc = {.kind = EXMY_SCALING_GROUP, .group = 3, .pow2 = true};
  /* row 0: groups {1, 2, 4} (s = 64) and {0.5, .25, 3} (s = 128... amax 3:
   * 448/3 = 149.3 -> 128); row 1 (cols 5): {8, 1, 1} (s = 32), {0.1, 0} */
  float x[10] = {1, 2, 4, 0.5f, 0.25f, 3, 8, 1, 1, 0.1f};
  float y[10];
  exmy_tensor_stats st;
  ck_assert_int_eq(exmy_quantize_scaled_f32(&f, &o, &sc, NULL, x, y, 2, 5, &st), 0);
  /* cols = 5, groups of 3: row 0 = {1,2,4},{0.5,0.25}; row 1 = {3,8,1},{1,0.1} */
  for (int i = 0; i < 9; i++) ck_assert_float_eq(y[i], x[i]); /* powers of 2 and 3 */
  /* {1, 0.1}: s = 256; 25.6 -> 26 (step 2 in [16,32)) -> 26/256 */
  ck_assert_float_eq(y[9], 26.0f / 256.0f);
  ck_assert(isnan(st.scale));
  /* group = 0: one group per row */
  sc.group = 0;
  float r[6] = {1, 3, 1, 100, 1, 1}, ry[6];
  exmy_quantize_scaled_f32(&f, &o, &sc, NULL, r, ry, 2, 3, NULL);
  ck_assert_float_eq(ry[1], 3.0f);     /* row 0: s = 128, 384 exact */
  ck_assert_float_eq(ry[3], 96.0f);    /* row 1: s = 4; 400 ties 384/416 -> 384 */
  ck_assert_float_eq(ry[4], 1.0f);
}
END_TEST

START_TEST(dynamic_range_expansion) {
  exmy_format f = fmt("e4m3");
  exmy_format_info info;
  exmy_format_get_info(&f, &info);
  exmy_rounding_opts o = {0};
  exmy_scaling sc = {.kind = EXMY_SCALING_GROUP, .group = 4, .dynamic_range_expansion = true};
  float x[8] = {1.0f, 0.001f, -0.05f, 0.3f, 2, 2, -2, 2};
  float y[8];
  exmy_quantize_scaled_f32(&f, &o, &sc, NULL, x, y, 1, 8, NULL);
  /* the recipe recomputed in double: k = ln(448 / 2^-9) / ln(1 / 0.001) */
  double k = log(info.max / (double)info.min_subnormal) / log(1.0 / (double)0.001f);
  ck_assert_double_eq_tol(k, 1.7869, 1e-3);
  float amax_z = (float)pow(1.0, k);
  float s = exmy_scale_from_amax(&f, amax_z, 0, false);
  for (int i = 0; i < 4; i++) {
    float z = copysignf((float)pow(fabs((double)x[i]), k), x[i]) * s;
    float q = exmy_ref_quantize(&f, &o, z, 0);
    float w = q * (1.0f / s);
    float want = copysignf((float)pow(fabs((double)w), 1.0 / k), w);
    ck_assert_msg(y[i] == want, "x=%g: y=%.9g want %.9g", x[i], y[i], want);
  }
  /* the group's smallest value lands on the format's smallest value */
  float zmin = (float)pow((double)0.001f, k) * s;
  ck_assert_double_eq_tol(zmin, info.min_subnormal, 1e-6);
  /* one magnitude only: k = 1, plain group scaling, exact */
  for (int i = 4; i < 8; i++) ck_assert_float_eq(y[i], x[i]);
}
END_TEST

/* |y - x| within half a step of the format at x·s, unscaled */
static void check_bound(const char *name, exmy_scaling sc, double rel_slack) {
  exmy_format f = fmt(name);
  exmy_format_info info;
  exmy_format_get_info(&f, &info);
  const size_t rows = 16, cols = 300, n = rows * cols;
  float *x = malloc(n * 4), *y = malloc(n * 4);
  unsigned s = 99;
  for (size_t i = 0; i < n; i++) {
    s = s * 1664525u + 1013904223u;
    double u = (s >> 8) / 16777216.0;
    x[i] = (float)((s & 1 ? -1 : 1) * exp(20.0 * u - 12.0)); /* e^-12 .. e^8 */
  }
  exmy_rounding_opts o = {0};
  exmy_tensor_stats st;
  ck_assert_int_eq(exmy_quantize_scaled_f32(&f, &o, &sc, NULL, x, y, rows, cols, &st), 0);
  /* relative 2^-(M+1) in the normal range (MX: 2^-M, for the saturated top),
   * absolute half the smallest subnormal spacing / s below it; the group's s
   * is at least fmax / amax(row) · 2^-1 (pow2) and the MX one 2^(emax - ...)
   * — bounded by using the smallest possible s: fmax / max|x| / 2 */
  double amax = 0;
  for (size_t i = 0; i < n; i++) amax = fmax(amax, fabs(x[i]));
  double rel = ldexp(1.0, -f.man_bits - 1) * rel_slack;
  double smin = info.max / amax / 2.0;
  if (sc.kind == EXMY_SCALING_MX) smin = ldexp(1.0, -(int)ceil(log2(amax)) + f.emax);
  for (size_t i = 0; i < n; i++) {
    double err = fabs((double)y[i] - x[i]);
    double bound = fmax(rel * fabs(x[i]), 0.5 * info.min_subnormal / smin) * 1.0001;
    ck_assert_msg(err <= bound, "%s kind %d: x=%g y=%g err %g > %g", name, sc.kind, x[i], y[i],
                  err, bound);
  }
  ck_assert(st.n == n && st.overflow_ratio <= 1.0);
  free(x), free(y);
}

START_TEST(round_trip_bounds) {
  const char *names[] = {"e4m3", "e5m2", "e2m1", "e3m2", "e2m3", "e8m3"};
  for (int i = 0; i < 6; i++) {
    check_bound(names[i], (exmy_scaling){.kind = EXMY_SCALING_TENSOR}, 1.0);
    check_bound(names[i], (exmy_scaling){.kind = EXMY_SCALING_TENSOR, .pow2 = true}, 1.0);
    check_bound(names[i], (exmy_scaling){.kind = EXMY_SCALING_GROUP, .group = 128}, 1.0);
    check_bound(names[i], (exmy_scaling){.kind = EXMY_SCALING_GROUP}, 1.0);
    check_bound(names[i], (exmy_scaling){.kind = EXMY_SCALING_MX}, 2.0);
  }
}
END_TEST

START_TEST(sr_stream_follows_element_index) {
  /* scaled sr uses offset + r·cols + c, as the bulk call on x·s would */
  exmy_format f = fmt("e4m3");
  exmy_rounding_opts o = {.mode = EXMY_SR, .seed = 5, .offset = 1001};
  exmy_scaling sc = {.kind = EXMY_SCALING_TENSOR, .pow2 = true};
  float x[5000], y[5000], xs[5000], q[5000];
  for (int i = 0; i < 5000; i++) x[i] = sinf((float)i) * 3.0f;
  exmy_quantize_scaled_f32(&f, &o, &sc, NULL, x, y, 50, 100, NULL);
  float s = exmy_scale_from_amax(&f, 3.0f, 0, true);
  float amax = 0;
  for (int i = 0; i < 5000; i++) amax = fmaxf(amax, fabsf(x[i]));
  s = exmy_scale_from_amax(&f, amax, 0, true);
  for (int i = 0; i < 5000; i++) xs[i] = x[i] * s;
  exmy_quantize_f32(&f, &o, xs, q, 5000);
  for (int i = 0; i < 5000; i++) ck_assert_float_eq(y[i], q[i] * (1.0f / s));
}
END_TEST

/* NVFP4 by hand: tensor amax 6 gives S_enc = 2688 / 6 = 448; a block of
 * amax 0.06 gets the E4M3 decode scale E4M3(0.06 · 448 / 6 = 4.48) = 4.5, so
 * its elements are multiples of 4.5 / 448 (not of a power of two, as MX's);
 * an all-zero block and one too small for E4M3 (s_b = 0) come out 0. */
START_TEST(nvfp4_hand_case) {
  exmy_format f = fmt("e2m1");
  exmy_rounding_opts o = {0};
  exmy_scaling sc = {.kind = EXMY_SCALING_NVFP4};
  float x[64] = {0}, y[64];
  x[0] = 6.0f, x[1] = 2.6f, x[2] = -0.7f;      /* block 0: amax 6, s_b = 448 */
  x[16] = 0.06f, x[17] = 0.03f, x[18] = -0.004f; /* block 1: amax 0.06, s_b = 4.5;
                                                 * -0.004 · 448 / 4.5 = -0.398 -> -0.5 */
  x[48] = 1e-12f;                              /* block 3: s_b = 0 */
  ck_assert_int_eq(exmy_quantize_scaled_f32(&f, &o, &sc, NULL, x, y, 1, 64, NULL), 0);
  const double d0 = 448.0 / 448.0, d1 = 4.5 / 448.0;
  const double want[][2] = {{0, 6 * d0}, {1, 3 * d0}, {2, -0.5 * d0}, {16, 6 * d1},
                            {17, 3 * d1}, {18, -0.5 * d1}, {32, 0}, {48, 0}};
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
    const int at = (int)want[i][0];
    ck_assert_msg(fabs(y[at] - want[i][1]) <= 1e-6 * fabs(want[i][1]),
                  "element %d: %.9g, want %.9g", at, y[at], want[i][1]);
  }
  for (int i = 0; i < 64; i++) ck_assert(!isnan(y[i]));
}
END_TEST

/* Two-dimensional blocks (block_rows = group) give the same values whichever
 * way the tensor is read: quantizing W^T equals transposing quantized W, bit
 * for bit, for NVFP4 (16 x 16) and GROUP (128 x 128), shapes with partial
 * blocks included; with 1-D blocks they differ. */
START_TEST(blocks_2d_transpose) {
  const struct { const char *format; exmy_scaling_kind kind; int g; } cases[] = {
      {"e2m1", EXMY_SCALING_NVFP4, 16}, {"e4m3", EXMY_SCALING_GROUP, 128}};
  const int R = 150, C = 70;
  float *w = malloc(sizeof(float) * R * C), *wt = malloc(sizeof(float) * R * C);
  float *q = malloc(sizeof(float) * R * C), *qt = malloc(sizeof(float) * R * C);
  uint64_t st = 9;
  for (int i = 0; i < R * C; i++) {
    test_rng_next(&st);
    w[i] = ldexpf((float)(st >> 40) / 16777216.0f - 0.5f, (int)(st % 9) - 4);
  }
  for (int r = 0; r < R; r++)
    for (int c = 0; c < C; c++) wt[c * R + r] = w[r * C + c];
  exmy_rounding_opts o = {0};
  for (int k = 0; k < 2; k++)
    for (int two_d = 0; two_d < 2; two_d++) {
      exmy_format f = fmt(cases[k].format);
      exmy_scaling sc = {.kind = cases[k].kind, .group = cases[k].g,
                         .block_rows = two_d ? cases[k].g : 1};
      ck_assert_int_eq(exmy_quantize_scaled_f32(&f, &o, &sc, NULL, w, q, R, C, NULL), 0);
      ck_assert_int_eq(exmy_quantize_scaled_f32(&f, &o, &sc, NULL, wt, qt, C, R, NULL), 0);
      long differ = 0;
      for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++) differ += memcmp(&q[r * C + c], &qt[c * R + r], 4) != 0;
      printf("%s %s blocks: W^T quantized vs W quantized, transposed: %ld of %d differ\n",
             cases[k].format, two_d ? "2-D" : "1-D", differ, R * C);
      if (two_d) ck_assert_int_eq(differ, 0);
      else ck_assert(differ > 0);
    }
  free(w), free(wt), free(q), free(qt);
}
END_TEST

/* The 16-point random Hadamard transform keeps dot products: both operands of
 * a GEMM transformed alike along K give its products (up to float rounding);
 * a unit vector spreads to 16 values of magnitude 1/4 with the first sign. */
START_TEST(hadamard_keeps_products) {
  exmy_format f = fmt("e2m1");
  exmy_rounding_opts o = {0};
  const int K = 64;
  float a[64], b[64], ta[64], tb[64];
  for (int i = 0; i < K; i++) a[i] = sinf(0.7f * i), b[i] = cosf(1.3f * i) + 0.1f;
  exmy_scaling sc = {.kind = EXMY_SCALING_NVFP4, .hadamard = 16, .hadamard_seed = 3};
  /* the transform itself: float32 elements (the scales then change nothing
   * but rounding) */
  exmy_format f32 = fmt("fp32");
  ck_assert_int_eq(exmy_quantize_scaled_f32(&f32, &o, &sc, NULL, a, ta, 1, K, NULL), 0);
  ck_assert_int_eq(exmy_quantize_scaled_f32(&f32, &o, &sc, NULL, b, tb, 1, K, NULL), 0);
  double d = 0, dt = 0, moved = 0;
  for (int i = 0; i < K; i++) d += (double)a[i] * b[i], dt += (double)ta[i] * tb[i],
                              moved += fabs((double)ta[i] - a[i]);
  printf("hadamard: a.b %.9g, (Ha).(Hb) %.9g\n", d, dt);
  ck_assert_msg(fabs(d - dt) <= 1e-5 * fabs(d), "dot %g vs %g", d, dt);
  ck_assert(moved > 1.0);
  float e[16] = {1.0f}, te[16];
  ck_assert_int_eq(exmy_quantize_scaled_f32(&f32, &o, &sc, NULL, e, te, 1, 16, NULL), 0);
  for (int i = 0; i < 16; i++) ck_assert_float_eq(fabsf(te[i]), 0.25f);
  for (int i = 1; i < 16; i++) ck_assert_float_eq(te[i], te[0]);
  /* only NVFP4 takes it, and only of size 16 */
  exmy_scaling bad = {.kind = EXMY_SCALING_GROUP, .hadamard = 16};
  ck_assert_int_eq(exmy_quantize_scaled_f32(&f, &o, &bad, NULL, a, ta, 1, K, NULL), -1);
  bad.kind = EXMY_SCALING_NVFP4;
  bad.hadamard = 32;
  ck_assert_int_eq(exmy_quantize_scaled_f32(&f, &o, &bad, NULL, a, ta, 1, K, NULL), -1);
}
END_TEST

int main(void) {
  const TTest *const tests[] = {current_scale_formula, tensor_scaling_hand_case,
                                delayed_scaling_history, mx_hand_case, group_hand_case,
                                dynamic_range_expansion, round_trip_bounds,
                                sr_stream_follows_element_index, nvfp4_hand_case,
                                blocks_2d_transpose, hadamard_keeps_products, NULL};
  return run_suite(suite_of("scaling", 60, tests), true);
}
