/* lib/accum_core.h's accumulation model against the independent fixed-point
 * reference in accum_oracle.c, bit for bit, on random and adversarial dot
 * products under many models; and two properties against the exact sum:
 * wide enough, the model is the exact sum rounded once per promotion; with
 * truncation, it never exceeds the exact sum in magnitude for same-sign
 * products.  And the models' names (lib/accum.c). */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/accum_core.h"
#include "lib/exmy.h"
#include "tests/check_suite.h"
#include "tests/lib/accum_oracle.h"

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint32_t next(void) {
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return (uint32_t)(rng >> 16);
}

static uint32_t bits_of(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

static int same(float x, float y) { return bits_of(x) == bits_of(y) || (isnan(x) && isnan(y)); }

static float to_format(const char *name, float x) {
  exmy_format f;
  exmy_rounding_opts rne = {0};
  ck_assert_int_eq(exmy_format_parse(name, &f), 0);
  return exmy_ref_quantize(&f, &rne, x, 0);
}

enum { KMAX = 600 };

/* operands of kind `kind` into a[0..k), b[0..k) */
static void fill(int kind, float *a, float *b, int k) {
  for (int p = 0; p < k; p++) {
    float x, y;
    switch (kind) {
    case 0: /* e4m3 in about [-4, 4] */
      x = to_format("e4m3", ((int)(next() % 2001) - 1000) / 250.0f);
      y = to_format("e4m3", ((int)(next() % 2001) - 1000) / 250.0f);
      break;
    case 1: { /* any finite float32, subnormals included: wide spread, overflow */
      uint32_t u, v;
      do u = next() ^ (next() << 16); while (((u >> 23) & 0xFF) == 0xFF);
      do v = next() ^ (next() << 16); while (((v >> 23) & 0xFF) == 0xFF);
      memcpy(&x, &u, 4), memcpy(&y, &v, 4);
      break;
    }
    case 2: /* cancellation: pairs of opposite products, with small noise */
      x = to_format("bf16", ldexpf(1.0f + (next() % 256) / 256.0f, (int)(next() % 40) - 20));
      y = (p & 1) ? -b[p - 1] : to_format("bf16", 1.0f + (next() % 256) / 256.0f);
      if (p & 1) x = a[p - 1] * ((next() % 8) ? 1.0f : 1.0078125f);
      break;
    case 3: /* zeros (both signs) among bf16 values, some subnormal products */
      x = (next() % 3) ? 0.0f : to_format("bf16", ldexpf((next() % 2 ? -1.0f : 1.0f) * (1 + next() % 255), -(int)(next() % 140)));
      y = (next() % 4) ? -0.0f : to_format("bf16", ldexpf(1 + next() % 255, -(int)(next() % 60)));
      break;
    default: /* same sign, spread over 2^-30 .. 2^30 */
      x = to_format("e4m3", ldexpf(1 + next() % 15, (int)(next() % 5))) * ldexpf(1, -15 + (int)(next() % 16));
      y = to_format("e5m2", ldexpf(1 + next() % 7, (int)(next() % 16) - 8));
      break;
    }
    a[p] = x, b[p] = y;
  }
}

static void expect_same(const exmy_accum_model *m, const char *what, int kind, int k, float got,
                        float want) {
  if (!same(got, want)) {
    fprintf(stderr,
            "%s: kind %d K %d group %d product_bits %d sum_bits %d round %d promote %d "
            "align_sum %d align_exp %d emin %d/%d k_slice %d: got %.9g (0x%08x), want %.9g "
            "(0x%08x)\n",
            what, kind, k, m->group, m->product_bits, m->sum_bits, m->round, m->promote_every,
            m->align_sum, m->align_exp, m->emin_a, m->emin_b, m->k_slice, got, bits_of(got),
            want, bits_of(want));
    ck_abort();
  }
}

START_TEST(test_model_check) {
  exmy_accum_model m = {32, 14, 14, EXMY_ACCUM_TRUNCATE, 128, 0, 0, 0, 0, 0};
  ck_assert_int_eq(exmy_accum_model_check(&m), 0);
  m.promote_every = 100; /* not a multiple of group */
  ck_assert_int_eq(exmy_accum_model_check(&m), -1);
  m.promote_every = 0, m.product_bits = 55;
  ck_assert_int_eq(exmy_accum_model_check(&m), -1);
  m.product_bits = 0;
  ck_assert_int_eq(exmy_accum_model_check(&m), -1);
  m.product_bits = 14, m.sum_bits = 63;
  ck_assert_int_eq(exmy_accum_model_check(&m), -1);
  m.sum_bits = 14, m.round = 2;
  ck_assert_int_eq(exmy_accum_model_check(&m), -1);
  m.round = 0, m.group = 257;
  ck_assert_int_eq(exmy_accum_model_check(&m), -1);
  m.group = -1;
  ck_assert_int_eq(exmy_accum_model_check(&m), -1);
  m.group = 0, m.sum_bits = 99; /* FP32: other fields ignored */
  ck_assert_int_eq(exmy_accum_model_check(&m), 0);
  /* the fields added later */
  m = (exmy_accum_model){32, 54, 14, EXMY_ACCUM_TRUNCATE, 128, 1, 0, 0, 0, 0};
  m.emin_a = 1000; /* ignored while aligning by the product's own exponent */
  ck_assert_int_eq(exmy_accum_model_check(&m), 0);
  m.align_exp = 2;
  ck_assert_int_eq(exmy_accum_model_check(&m), -1);
  m.align_exp = EXMY_ACCUM_ALIGN_INPUTS, m.emin_a = -6, m.emin_b = -14;
  ck_assert_int_eq(exmy_accum_model_check(&m), -1); /* 54 product bits: one too many */
  m.product_bits = 53;
  ck_assert_int_eq(exmy_accum_model_check(&m), 0);
  m.emin_a = -150;
  ck_assert_int_eq(exmy_accum_model_check(&m), -1);
  m.emin_a = -149, m.emin_b = 128;
  ck_assert_int_eq(exmy_accum_model_check(&m), -1);
  m.emin_b = 127, m.k_slice = 2816;
  ck_assert_int_eq(exmy_accum_model_check(&m), 0);
  m.k_slice = 2816 + 32; /* a multiple of group, not of promote_every */
  ck_assert_int_eq(exmy_accum_model_check(&m), -1);
  m.promote_every = 0;
  ck_assert_int_eq(exmy_accum_model_check(&m), 0);
  m.k_slice = 48;
  ck_assert_int_eq(exmy_accum_model_check(&m), -1);
  m.k_slice = -32;
  ck_assert_int_eq(exmy_accum_model_check(&m), -1);
}
END_TEST

/* the core against the oracle: every kind of input, many models and K */
START_TEST(test_core_matches_oracle) {
  static const int groups[] = {1, 3, 8, 32, 64, 256};
  static const int pbits[] = {1, 2, 5, 14, 24, 40, 54};
  static const int sbits[] = {1, 3, 14, 24, 40, 62};
  static const int ks[] = {1, 5, 31, 32, 33, 100, 257, 600};
  static float a[KMAX], b[KMAX];
  int cases = 0;
  for (int kind = 0; kind < 5; kind++)
    for (int t = 0; t < 160; t++) {
      exmy_accum_model m = {groups[next() % 6], pbits[next() % 7], sbits[next() % 6],
                            (int)(next() % 2), 0, (int)(next() % 2), 0, 0, 0, 0};
      const int mult = (int)(next() % 3);
      m.promote_every = mult == 2 ? 4 * m.group : mult * m.group;
      if (next() % 2) { /* aligned by the inputs' exponents, subnormals at emin */
        static const int emins[] = {-149, -126, -14, -6, 0, 3};
        m.align_exp = EXMY_ACCUM_ALIGN_INPUTS;
        m.emin_a = emins[next() % 6], m.emin_b = emins[next() % 6];
        if (m.product_bits > 53) m.product_bits = 53;
      }
      if (next() % 3 == 0) /* split K into slices of 1 .. 3 promotion blocks or groups */
        m.k_slice = (int)(1 + next() % 3) * (m.promote_every ? m.promote_every : m.group);
      const int k = ks[next() % 8];
      fill(kind, a, b, k);
      ck_assert_int_eq(exmy_accum_model_check(&m), 0);
      /* strides: B read backwards from its end, A every element */
      static float br[KMAX];
      for (int p = 0; p < k; p++) br[KMAX - 1 - p] = b[p];
      const float got = exmy_accum_dot(&m, a, 1, br + KMAX - 1, -1, k);
      expect_same(&m, "core vs oracle", kind, k, got, oracle_accum_dot(&m, a, 1, b, 1, k));
      cases++;
    }
  ck_assert_int_eq(cases, 800);
}
END_TEST

/* Inf / NaN operands, and group = 0: the float32 accumulation */
START_TEST(test_fp32_and_nonfinite) {
  static float a[KMAX], b[KMAX];
  const exmy_accum_model fp32 = {EXMY_ACCUM_FP32, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  const exmy_accum_model hopper = {32, 14, 14, EXMY_ACCUM_TRUNCATE, 128, 0, 0, 0, 0, 0};
  for (int t = 0; t < 200; t++) {
    const int k = 1 + (int)(next() % KMAX);
    fill(t % 5, a, b, k);
    float acc = 0.0f;
    for (int p = 0; p < k; p++) acc = fmaf(a[p], b[p], acc);
    expect_same(&fp32, "fp32", t % 5, k, exmy_accum_dot(&fp32, a, 1, b, 1, k), acc);
    const float special[] = {INFINITY, -INFINITY, NAN};
    a[next() % k] = special[t % 3];
    if (t % 7 == 0) b[next() % k] = special[(t + 1) % 3];
    acc = 0.0f;
    for (int p = 0; p < k; p++) acc = fmaf(a[p], b[p], acc);
    ck_assert(!isfinite(acc));
    expect_same(&hopper, "non-finite", t % 5, k, exmy_accum_dot(&hopper, a, 1, b, 1, k), acc);
  }
}
END_TEST

/* Wide enough (every aligned product and partial sum fits its bits), either
 * rounding: the exact sum of each promotion block, rounded once into the
 * float32 accumulator. */
START_TEST(test_wide_model_is_exact) {
  static float a[256], b[256];
  int cases = 0;
  for (int t = 0; t < 400; t++) {
    const int k = 1 + (int)(next() % 256);
    /* bf16 with |x| in [2^-6, 2^6]: products of <= 16 bits in [2^-12, 2^13),
     * sums below 2^21 and multiples of 2^-26: 47 bits */
    for (int p = 0; p < k; p++) {
      a[p] = to_format("bf16", ldexpf((next() % 2 ? -1.0f : 1.0f) * (1.0f + (next() % 256) / 256.0f),
                                      (int)(next() % 12) - 6));
      b[p] = (next() % 9) ? to_format("bf16", ldexpf(1.0f + (next() % 256) / 256.0f,
                                                     (int)(next() % 12) - 6))
                          : 0.0f;
    }
    exmy_accum_model m = {(int)(1 + next() % 64), 54, 62, (int)(next() % 2), 0, (int)(next() % 2), 0, 0, 0, 0};
    m.promote_every = (int)(next() % 3) * m.group;
    expect_same(&m, "wide model vs exact", 0, k, exmy_accum_dot(&m, a, 1, b, 1, k),
                oracle_exact_dot(m.promote_every, a, 1, b, 1, k));
    cases++;
  }
  ck_assert_int_eq(cases, 400);
}
END_TEST

/* Truncation drops magnitude: for products of one sign the model's result is
 * never larger in magnitude than the exact sum rounded the same way, and at
 * the Hopper setting it is strictly smaller on long sums. */
START_TEST(test_truncation_never_exceeds_exact) {
  static float a[KMAX], b[KMAX];
  int below = 0, total = 0;
  for (int t = 0; t < 300; t++) {
    const int k = 1 + (int)(next() % KMAX);
    fill(4, a, b, k); /* a, b > 0 */
    const float sign = t % 2 ? -1.0f : 1.0f;
    for (int p = 0; p < k; p++) a[p] *= sign;
    exmy_accum_model m = {(int)(1 + next() % 64), (int)(1 + next() % 30), (int)(1 + next() % 30),
                          EXMY_ACCUM_TRUNCATE, 0, (int)(next() % 2), 0, 0, 0, 0};
    if (t % 3 == 0) m = (exmy_accum_model){32, 14, 14, EXMY_ACCUM_TRUNCATE, 0, 0, 0, 0, 0, 0};
    m.promote_every = (int)(next() % 3) * m.group;
    const float got = exmy_accum_dot(&m, a, 1, b, 1, k);
    const float exact = oracle_exact_dot(m.promote_every, a, 1, b, 1, k);
    if (!(fabsf(got) <= fabsf(exact)) || (got != 0 && signbit(got) != signbit(exact))) {
      fprintf(stderr, "truncation: K %d group %d bits %d/%d promote %d align %d: %.9g vs exact %.9g\n",
              k, m.group, m.product_bits, m.sum_bits, m.promote_every, m.align_sum, got, exact);
      ck_abort();
    }
    if (t % 3 == 0 && k > 256) below += fabsf(got) < fabsf(exact), total++;
  }
  ck_assert_int_gt(total, 20);
  ck_assert_int_eq(below, total);
}
END_TEST

/* The names of lib/accum.c: the named models' fields (the calibrated H100
 * model), explicit keys over hopper's defaults, every malformed text refused
 * without touching *out, and format -> parse giving the same model back;
 * exmy_accum_operand_emin. */
START_TEST(test_model_names) {
  enum { IN = EXMY_ACCUM_ALIGN_INPUTS, TR = EXMY_ACCUM_TRUNCATE };
  static const struct {
    const char *text;
    exmy_accum_model want;
  } good[] = {
      {"fp32", {EXMY_ACCUM_FP32, 0, 0, 0, 0, 0, 0, 0, 0, 0}},
      {"hopper", {32, 14, 14, TR, 0, 1, IN, 0, 0, 0}},
      {"hopper-split", {32, 14, 14, TR, 128, 1, IN, 0, 0, 0}},
      {"group:32,bits:14,sum:14,round:trunc,promote:128", {32, 14, 14, TR, 128, 1, IN, 0, 0, 0}},
      {"sum:22,round:nearest", {32, 14, 22, EXMY_ACCUM_NEAREST_EVEN, 0, 1, IN, 0, 0, 0}},
      {"align:0,group:16,promote:64,bits:25", {16, 25, 14, TR, 64, 0, IN, 0, 0, 0}},
      {"align_to:product", {32, 14, 14, TR, 0, 1, EXMY_ACCUM_ALIGN_PRODUCT, 0, 0, 0}},
      {"align_to:product,bits:54", {32, 54, 14, TR, 0, 1, EXMY_ACCUM_ALIGN_PRODUCT, 0, 0, 0}},
      {"kslice:2816,promote:128", {32, 14, 14, TR, 128, 1, IN, 0, 0, 2816}},
      {"kslice:0", {32, 14, 14, TR, 0, 1, IN, 0, 0, 0}},
  };
  for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
    exmy_accum_model m;
    memset(&m, 0x55, sizeof m);
    ck_assert_msg(exmy_accum_model_parse(good[i].text, &m) == 0, "%s refused", good[i].text);
    ck_assert_msg(!memcmp(&m, &good[i].want, sizeof m), "%s: wrong model", good[i].text);
    char buf[128];
    exmy_accum_model back;
    ck_assert_int_eq(exmy_accum_model_format(&m, buf, sizeof buf), 0);
    ck_assert_msg(exmy_accum_model_parse(buf, &back) == 0 && !memcmp(&m, &back, sizeof m),
                  "%s formats as %s, which does not parse back", good[i].text, buf);
  }
  static const char *bad[] = {
      "", "fp16", "Hopper", "group", "group:", "group:-1", "group:0", "group:300", "bits:0",
      "bits:54", "sum:63", "round:up", "promote:100", "promote:48,group:32", "align:2",
      "group:32,", ",group:32", "group:32,group:16", "group:32;bits:14", "group: 32", "bits:1x",
      "size:4", "group:9999999", "align_to:sum", "align_to:1", "align_to:operands",
      "align:inputs", "kslice:48", "kslice:-32", "kslice:64,promote:128", "kslice:", "emin:-6",
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    exmy_accum_model m = {7, 7, 7, 7, 7, 7, 7, 7, 7, 7};
    ck_assert_msg(exmy_accum_model_parse(bad[i], &m) == -1, "'%s' accepted", bad[i]);
    ck_assert_int_eq(m.group, 7);
  }
  ck_assert_int_eq(exmy_accum_model_parse(NULL, &(exmy_accum_model){0}), -1);
  char tiny[8];
  const exmy_accum_model hopper = {32, 14, 14, TR, 0, 1, IN, 0, 0, 0};
  ck_assert_int_eq(exmy_accum_model_format(&hopper, tiny, sizeof tiny), -1);

  /* a format's emin where the operand is rounded into it unscaled, float32's otherwise */
  exmy_operand_quant q = {0};
  ck_assert_int_eq(exmy_accum_operand_emin(NULL), -126);
  ck_assert_int_eq(exmy_format_parse("float8_e4m3fn", &q.format), 0);
  ck_assert_int_eq(exmy_accum_operand_emin(&q), -126); /* not enabled */
  q.enabled = true;
  ck_assert_int_eq(exmy_accum_operand_emin(&q), -6);
  ck_assert_int_eq(exmy_format_parse("float8_e5m2", &q.format), 0);
  ck_assert_int_eq(exmy_accum_operand_emin(&q), -14);
  q.scaling.kind = EXMY_SCALING_TENSOR;
  ck_assert_int_eq(exmy_accum_operand_emin(&q), -126);
  /* with its scale s = 2^k: the format's emin - k for pow2 TENSOR / DELAYED */
  ck_assert(!exmy_accum_pow2_scaled(&q));
  ck_assert_int_eq(exmy_accum_operand_emin_scaled(&q, 8.0f), -126); /* not pow2 */
  q.scaling.pow2 = true;
  ck_assert(exmy_accum_pow2_scaled(&q));
  ck_assert_int_eq(exmy_accum_operand_emin(&q), -126); /* s unknown */
  ck_assert_int_eq(exmy_accum_operand_emin_scaled(&q, 8.0f), -17);
  ck_assert_int_eq(exmy_accum_operand_emin_scaled(&q, 0x1p-20f), 6);
  q.scaling.kind = EXMY_SCALING_DELAYED;
  ck_assert_int_eq(exmy_accum_operand_emin_scaled(&q, 1.0f), -14);
  q.scaling.kind = EXMY_SCALING_GROUP; /* a scale per group: not placed */
  ck_assert(!exmy_accum_pow2_scaled(&q));
  ck_assert_int_eq(exmy_accum_operand_emin_scaled(&q, 8.0f), -126);
  q.scaling.kind = EXMY_SCALING_NONE;
  ck_assert_int_eq(exmy_accum_operand_emin_scaled(&q, 8.0f), -14); /* s ignored */
  q.enabled = false;
  ck_assert_int_eq(exmy_accum_operand_emin_scaled(&q, 8.0f), -126);
  ck_assert_int_eq(exmy_accum_operand_emin_scaled(NULL, 8.0f), -126);
  /* exmy_accum_scaled_emin: a positive finite power of two, the result in range */
  ck_assert_int_eq(exmy_accum_scaled_emin(-6, 1.0f), -6);
  ck_assert_int_eq(exmy_accum_scaled_emin(-6, 0x1p127f), -133);
  ck_assert_int_eq(exmy_accum_scaled_emin(-14, 0x1p127f), -141);
  ck_assert_int_eq(exmy_accum_scaled_emin(-6, 0x1p-133f), 127);
  ck_assert_int_eq(exmy_accum_scaled_emin(-6, 0x1p-134f), -126); /* 128: out of range */
  ck_assert_int_eq(exmy_accum_scaled_emin(-14, 0x1p-149f), -126); /* 135 */
  ck_assert_int_eq(exmy_accum_scaled_emin(-149, 0x1p-2f), -147);
  ck_assert_int_eq(exmy_accum_scaled_emin(-149, 2.0f), -126); /* -150 */
  const float odd[] = {0.0f, -0.0f, -8.0f, 3.0f, 0x1.000002p3f, INFINITY, -INFINITY, NAN,
                       0x1.8p-140f};
  for (size_t i = 0; i < sizeof odd / sizeof *odd; i++)
    ck_assert_int_eq(exmy_accum_scaled_emin(-6, odd[i]), -126);
}
END_TEST

/* What the GPU trainer's FP8 fast path (experiments/gpu/gemm.cu) relies on:
 * the hopper presets on codes c (the formats' emin, as the tensor core
 * aligns) scaled by 2^-(ka+kb) are, bit for bit, the presets on y = c 2^-k
 * with the emin that a pow2-scaled operand gets from its scale s = 2^k
 * (exmy_accum_operand_emin_scaled: the format's emin - k), for |k| <= 32,
 * subnormal codes included; with float32's emin (a scale not known, or not
 * a power of two) only where no code is subnormal: a subnormal input that
 * sets its group's alignment exponent is clamped up by the tensor core and
 * not by that model. */
static float fp8_code(int e4m3, int subnormals) {
  const int M = e4m3 ? 3 : 2, emin = e4m3 ? -6 : -14, emax = e4m3 ? 8 : 15;
  for (;;) {
    const int lo = emin - (subnormals ? 1 : 0);
    const int e = lo + (int)(next() % (uint32_t)(emax - lo + 1));
    const int m = (int)(next() % (1u << M));
    const double v = e < emin ? ldexp(m, emin - M) : ldexp((1 << M) + m, e - M);
    if (v == 0 || (e4m3 && v > 448)) continue;
    return (float)(next() & 1 ? -v : v);
  }
}

START_TEST(test_hopper_scale_invariance) {
  static float a[KMAX], b[KMAX], ya[KMAX], yb[KMAX];
  exmy_accum_model presets[2];
  ck_assert_int_eq(exmy_accum_model_parse("hopper", &presets[0]), 0);
  ck_assert_int_eq(exmy_accum_model_parse("hopper-split", &presets[1]), 0);
  int cases = 0;
  for (int pi = 0; pi < 2; pi++)
    for (int sub = 0; sub < 2; sub++)
      for (int t = 0; t < 150; t++) {
        const int ka = (int)(next() % 65) - 32, kb = (int)(next() % 65) - 32;
        const int e4m3_b = t % 2, k = 32 * (1 + (int)(next() % (KMAX / 32)));
        for (int p = 0; p < k; p++) {
          a[p] = fp8_code(1, sub), b[p] = fp8_code(e4m3_b, sub);
          if (p % 2 && next() % 2) a[p] = -a[p - 1], b[p] = b[p - 1]; /* cancelling pairs */
          if (next() % 50 == 0) a[p] = 0.0f;
          ya[p] = ldexpf(a[p], -ka), yb[p] = ldexpf(b[p], -kb);
        }
        exmy_accum_model hw = presets[pi], shifted, f32;
        hw.emin_a = -6, hw.emin_b = e4m3_b ? -6 : -14;
        exmy_operand_quant qa = {0}, qb = {0};
        qa.enabled = qb.enabled = true;
        qa.scaling.kind = EXMY_SCALING_DELAYED, qb.scaling.kind = EXMY_SCALING_TENSOR;
        qa.scaling.pow2 = qb.scaling.pow2 = true;
        ck_assert_int_eq(exmy_format_parse("float8_e4m3fn", &qa.format), 0);
        ck_assert_int_eq(exmy_format_parse(e4m3_b ? "float8_e4m3fn" : "float8_e5m2", &qb.format),
                         0);
        shifted = hw;
        shifted.emin_a = exmy_accum_operand_emin_scaled(&qa, ldexpf(1.0f, ka));
        shifted.emin_b = exmy_accum_operand_emin_scaled(&qb, ldexpf(1.0f, kb));
        ck_assert_int_eq(shifted.emin_a, hw.emin_a - ka);
        ck_assert_int_eq(shifted.emin_b, hw.emin_b - kb);
        f32 = hw, f32.emin_a = f32.emin_b = -126;
        const float want = ldexpf(exmy_accum_dot(&hw, a, 1, b, 1, k), -(ka + kb));
        ck_assert_msg(same(exmy_accum_dot(&shifted, ya, 1, yb, 1, k), want),
                      "preset %d, ka %d kb %d, k %d", pi, ka, kb, k);
        if (!sub) ck_assert(same(exmy_accum_dot(&f32, ya, 1, yb, 1, k), want));
        cases++;
      }
  /* 2^-9 (an E4M3 subnormal) x 2^15 sets the group's exponent: 2^-6 + 15 = 9
   * for the tensor core, 6 for float32's emin; 1.5 2^-6 then falls below
   * the 14 bits kept in one and not in the other */
  const float sa[2] = {0x1p-9f, 0x1.8p-3f}, sb[2] = {0x1p15f, 0x1p-3f};
  exmy_accum_model hw = presets[0], f32 = presets[0];
  hw.emin_a = -6, hw.emin_b = -14, f32.emin_a = f32.emin_b = -126;
  ck_assert_float_eq(exmy_accum_dot(&hw, sa, 1, sb, 1, 2), 64.0f);
  ck_assert_float_eq(exmy_accum_dot(&f32, sa, 1, sb, 1, 2), 64.0234375f);
  /* the same codes as y = c / 2^3 (A) and c / 2^-2 (B): the emin that
   * follows the scales gives the hardware's 64 · 2^-(3-2) */
  const float ya2[2] = {sa[0] / 8, sa[1] / 8}, yb2[2] = {sb[0] * 4, sb[1] * 4};
  exmy_operand_quant qa = {0}, qb = {0};
  qa.enabled = qb.enabled = true;
  qa.scaling.kind = qb.scaling.kind = EXMY_SCALING_DELAYED;
  qa.scaling.pow2 = qb.scaling.pow2 = true;
  ck_assert_int_eq(exmy_format_parse("float8_e4m3fn", &qa.format), 0);
  ck_assert_int_eq(exmy_format_parse("float8_e5m2", &qb.format), 0);
  exmy_accum_model scaled = presets[0];
  scaled.emin_a = exmy_accum_operand_emin_scaled(&qa, 8.0f);
  scaled.emin_b = exmy_accum_operand_emin_scaled(&qb, 0.25f);
  ck_assert_float_eq(exmy_accum_dot(&scaled, ya2, 1, yb2, 1, 2), 32.0f);
  printf("hopper presets: %d dot products scale by 2^-(ka+kb) with emin shifted by -k\n", cases);
}
END_TEST

/* A GROUP recipe's dequantization factor 1/s, s = 448 / amax in float32,
 * for a random amax over 2^-24 .. 2^24: almost never a power of two. */
static float block_scale(void) {
  const float amax = ldexpf(1.0f + (float)(next() % (1u << 23)) / (float)(1u << 23),
                            (int)(next() % 49) - 24);
  return 1.0f / (448.0f / amax);
}

/* Block-scaled operands (exmy_accum_dot_scaled: FP8 codes, a float32 scale
 * per block of promote_every) against the oracle's own text of them, bit for
 * bit: the hopper-split preset on E4M3 (and E5M2) codes with non-power-of-two
 * scales, subnormal codes, zeros, cancelling pairs and K not a multiple of
 * 128; one operand unscaled; other models (nearest, unaligned sums, other
 * groups and intervals, split K). */
START_TEST(test_block_scaled_matches_oracle) {
  static float a[KMAX], b[KMAX], sa[KMAX], sb[KMAX];
  exmy_accum_model split;
  ck_assert_int_eq(exmy_accum_model_parse("hopper-split", &split), 0);
  const exmy_accum_model others[] = {
      {16, 10, 24, EXMY_ACCUM_NEAREST_EVEN, 64, 1, EXMY_ACCUM_ALIGN_INPUTS, -6, -6, 0},
      {32, 14, 14, EXMY_ACCUM_TRUNCATE, 128, 0, EXMY_ACCUM_ALIGN_PRODUCT, 0, 0, 0},
      {32, 14, 14, EXMY_ACCUM_TRUNCATE, 128, 1, EXMY_ACCUM_ALIGN_INPUTS, -6, -14, 256},
      {8, 20, 20, EXMY_ACCUM_TRUNCATE, 32, 1, EXMY_ACCUM_ALIGN_INPUTS, -6, -6, 0},
  };
  int cases = 0;
  for (int t = 0; t < 600; t++) {
    exmy_accum_model m = split;
    const int e4m3_b = t % 3 != 2;
    m.emin_a = -6, m.emin_b = e4m3_b ? -6 : -14;
    if (t % 4 == 3) m = others[(t / 4) % 4];
    if (m.align_exp == EXMY_ACCUM_ALIGN_INPUTS && m.emin_b == -14 && e4m3_b) m.emin_b = -6;
    const int k = 1 + (int)(next() % KMAX);
    for (int p = 0; p < k; p++) {
      a[p] = fp8_code(1, t % 2), b[p] = fp8_code(e4m3_b, t % 2);
      if (p % 2 && next() % 2) a[p] = -a[p - 1], b[p] = b[p - 1]; /* cancelling pairs */
      if (next() % 40 == 0) a[p] = 0.0f;
    }
    for (int kb = 0; kb * m.promote_every < k; kb++) sa[kb] = block_scale(), sb[kb] = block_scale();
    const float *pa = t % 7 == 6 ? NULL : sa, *pb = t % 11 == 10 ? NULL : sb;
    const float got = exmy_accum_dot_scaled(&m, a, 1, pa, b, 1, pb, k);
    expect_same(&m, "block-scaled", t % 2, k, got, oracle_scaled_dot(&m, a, 1, pa, b, 1, pb, k));
    /* strided operands, as a GEMM's transposed ones are read */
    static float a2[2 * KMAX];
    for (int p = 0; p < k; p++) a2[2 * p] = a[p], a2[2 * p + 1] = NAN;
    expect_same(&m, "block-scaled, stride 2", t % 2, k,
                exmy_accum_dot_scaled(&m, a2, 2, pa, b, 1, pb, k), got);
    cases++;
  }
  /* the promotion's order, worked out exactly: fl(sa · sb) = s, then
   * acc + s · partial rounded once (-0x1.6409480p-8); rounding s · partial
   * first would give -0x1.64098p-8, and (partial · sa) · sb -0x1.6409p-8 */
  ck_assert_float_eq(exmy_accum_promote_scaled(-0x1.1d02c2p-2f, 0x1.2c6p+13f, 0x1.10bc2ap-8f,
                                               0x1.bf19e6p-8f),
                     -0x1.640948p-8f);
  /* the scale applies once per block: two blocks of one product each */
  const exmy_accum_model m8 = {1, 14, 14, EXMY_ACCUM_TRUNCATE, 1, 1, EXMY_ACCUM_ALIGN_INPUTS,
                               -6, -6, 0};
  const float ca[2] = {3.0f, 5.0f}, cb[2] = {1.0f, 2.0f}, s2a[2] = {0.5f, 3.0f},
              s2b[2] = {0.25f, 1.0f};
  ck_assert_float_eq(exmy_accum_dot_scaled(&m8, ca, 1, s2a, cb, 1, s2b, 2),
                     3.0f * 0.125f + 10.0f * 3.0f);
  /* Inf in a scale or a code: each block's float32 dot promoted alike */
  const float inf_s[2] = {INFINITY, 1.0f};
  ck_assert(isinf(exmy_accum_dot_scaled(&m8, ca, 1, inf_s, cb, 1, s2b, 2)));
  printf("block-scaled: %d dot products match the oracle\n", cases);
}
END_TEST

/* For power-of-two block scales, the block-scaled model on the codes is the
 * model on the dequantized values as block-scaled operands were accumulated
 * before (emin -126), bit for bit, wherever no code is subnormal. */
START_TEST(test_block_scaled_pow2_is_dequantized) {
  static float a[KMAX], b[KMAX], ya[KMAX], yb[KMAX], sa[KMAX], sb[KMAX];
  exmy_accum_model hw;
  ck_assert_int_eq(exmy_accum_model_parse("hopper-split", &hw), 0);
  int cases = 0;
  for (int t = 0; t < 400; t++) {
    const int e4m3_b = t % 2;
    hw.emin_a = -6, hw.emin_b = e4m3_b ? -6 : -14;
    hw.k_slice = t % 5 == 4 ? 256 : 0;
    exmy_accum_model f32 = hw;
    f32.emin_a = f32.emin_b = -126;
    const int k = 1 + (int)(next() % KMAX);
    for (int kb = 0; kb * hw.promote_every < k; kb++)
      sa[kb] = ldexpf(1.0f, (int)(next() % 41) - 20), sb[kb] = ldexpf(1.0f, (int)(next() % 41) - 20);
    for (int p = 0; p < k; p++) {
      a[p] = fp8_code(1, 0), b[p] = fp8_code(e4m3_b, 0);
      if (p % 2 && next() % 2) a[p] = -a[p - 1], b[p] = b[p - 1];
      if (next() % 40 == 0) b[p] = 0.0f;
      ya[p] = a[p] * sa[p / hw.promote_every], yb[p] = b[p] * sb[p / hw.promote_every];
    }
    const float want = exmy_accum_dot(&f32, ya, 1, yb, 1, k);
    expect_same(&hw, "pow2 block scales", e4m3_b, k,
                exmy_accum_dot_scaled(&hw, a, 1, sa, b, 1, sb, k), want);
    cases++;
  }
  printf("block-scaled, pow2 scales: %d dot products equal the dequantized model\n", cases);
}
END_TEST

/* What the GPU trainer's block-scaled FP8 path (experiments/gpu/gemm.cu,
 * block_fp8_gemm) relies on: with blocks of the promotion interval, the
 * hopper-split model on block-scaled codes is, bit for bit, the hopper model
 * (never promoted: cuBLASLt's fast accumulation) on each 128-element slice
 * alone, promoted in order from +0 by exmy_accum_promote_scaled, a zero
 * partial taken as +0 (the model's partial of a zero sum is +0, never -0,
 * also after a block whose sum was negative: the running sum restarts at +0,
 * as the oracle's blocks do).  Zero blocks, blocks that cancel exactly, subnormal codes, scales small
 * enough that a promotion underflows (acc -0 then, where the sign of the
 * next zero partial would show). */
START_TEST(test_block_scaled_is_sliced_hopper) {
  static float a[KMAX], b[KMAX], sa[KMAX], sb[KMAX];
  exmy_accum_model split, fast;
  ck_assert_int_eq(exmy_accum_model_parse("hopper-split", &split), 0);
  ck_assert_int_eq(exmy_accum_model_parse("hopper", &fast), 0);
  int cases = 0, zero_partials = 0, negative_zero_acc = 0;
  for (int t = 0; t < 800; t++) {
    const int e4m3_b = t % 3 != 2;
    split.emin_a = fast.emin_a = -6;
    split.emin_b = fast.emin_b = e4m3_b ? -6 : -14;
    const int slices = 1 + (int)(next() % (KMAX / 128)), k = 128 * slices;
    for (int kb = 0; kb < slices; kb++) {
      const int kind = (int)(next() % 4); /* 0 any, 1 zero, 2 cancelling, 3 one product */
      for (int p = 128 * kb; p < 128 * (kb + 1); p++) {
        a[p] = fp8_code(1, t % 2), b[p] = fp8_code(e4m3_b, t % 2);
        if (kind == 1) a[p] = 0.0f;
        if (kind == 2 && p % 2) a[p] = -a[p - 1], b[p] = b[p - 1];
        if (kind == 3 && p % 128) b[p] = 0.0f;
      }
      sa[kb] = block_scale(), sb[kb] = block_scale();
      if (next() % 4 == 0) /* products of scales near and below float32's smallest */
        sa[kb] = ldexpf(sa[kb], -100), sb[kb] = ldexpf(sb[kb], -(int)(next() % 40));
    }
    const float want = exmy_accum_dot_scaled(&split, a, 1, sa, b, 1, sb, k);
    float acc = 0.0f;
    for (int kb = 0; kb < slices; kb++) {
      const float partial = exmy_accum_dot(&fast, a + 128 * kb, 1, b + 128 * kb, 1, 128);
      if (partial == 0.0f) {
        ck_assert_uint_eq(bits_of(partial), 0); /* +0 */
        zero_partials++;
        negative_zero_acc += bits_of(acc) == 0x80000000u;
      }
      acc = exmy_accum_promote_scaled(acc, partial == 0.0f ? 0.0f : partial, sa[kb], sb[kb]);
    }
    ck_assert_msg(same(acc, want), "case %d, k %d: sliced %a, model %a", t, k, acc, want);
    cases++;
  }
  /* where the sign of a zero partial shows: block 0 one product, -2^-9
   * (an E4M3 subnormal) times 1, promoted with sa sb = 2^-149, rounds to
   * -0; block 1 all zeros: +0 (the model's partial) keeps acc at +0, -0
   * would leave it -0 */
  memset(a, 0, sizeof(float) * 256), memset(b, 0, sizeof(float) * 256);
  a[0] = -0x1p-9f, b[0] = 1.0f;
  const float tiny_a[2] = {0x1p-75f, 1.0f}, tiny_b[2] = {0x1p-74f, 1.0f};
  split.emin_a = split.emin_b = fast.emin_a = fast.emin_b = -6;
  const float p0 = exmy_accum_dot(&fast, a, 1, b, 1, 128);
  ck_assert_float_eq(p0, -0x1p-9f);
  const float acc0 = exmy_accum_promote_scaled(0.0f, p0, tiny_a[0], tiny_b[0]);
  ck_assert_uint_eq(bits_of(acc0), 0x80000000u);
  ck_assert_uint_eq(bits_of(exmy_accum_dot(&fast, a + 128, 1, b + 128, 1, 128)), 0);
  ck_assert_uint_eq(bits_of(exmy_accum_dot_scaled(&split, a, 1, tiny_a, b, 1, tiny_b, 256)), 0);
  ck_assert_uint_eq(bits_of(oracle_scaled_dot(&split, a, 1, tiny_a, b, 1, tiny_b, 256)), 0);
  ck_assert_uint_eq(bits_of(exmy_accum_promote_scaled(acc0, 0.0f, 1.0f, 1.0f)), 0);
  ck_assert_uint_eq(bits_of(exmy_accum_promote_scaled(acc0, -0.0f, 1.0f, 1.0f)), 0x80000000u);
  printf("block-scaled: %d dot products are the hopper model per slice promoted with the "
         "scales (%d zero partials, %d of them onto -0)\n", cases, zero_partials,
         negative_zero_acc);
}
END_TEST

int main(void) {
  const TTest *tests[] = {test_model_names, test_model_check, test_core_matches_oracle,
                          test_fp32_and_nonfinite, test_wide_model_is_exact,
                          test_truncation_never_exceeds_exact, test_hopper_scale_invariance,
                          test_block_scaled_matches_oracle, test_block_scaled_pow2_is_dequantized,
                          test_block_scaled_is_sliced_hopper, NULL};
  return run_suite(suite_of("accum", 300, tests), true);
}
