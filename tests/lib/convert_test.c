/*
 * Conversions float32 -> format on the dense structured set of inputs, in
 * every deterministic mode, with saturation on and off, subnormals kept and
 * flushed, for every format under test, through the bulk and the scalar API.
 *
 * References: the oracle (tests/lib/oracle.c: neighbours by binary search in
 * a first-principles table, each mode's rule in exact double arithmetic); and
 * a short table of hand-written cases from the formats' definitions,
 * ml_dtypes' and CUDA's documented behaviour and lib/exmy.h's rules, which
 * the oracle itself must also pass.
 */
#include <check.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/exmy_cpu.h"
#include "tests/lib/harness.h"
#include "tests/lib/oracle.h"

static const exmy_rounding kDeterministic[] = {EXMY_RNE, EXMY_RNA, EXMY_RZ,
                                               EXMY_RU,  EXMY_RD,  EXMY_RO};

/* ------------------------------------------------------- hand-written cases */

typedef struct {
  const char *format;
  exmy_rounding mode;
  int saturate, flush;
  float x;
  float want; /* NAN: a NaN */
} hand_case;

#define NAN_ NAN
static const hand_case kHand[] = {
    /* float8_e4m3fn: max 448 = 1.110b * 2^8 (even); 480 would be next */
    {"e4m3", EXMY_RNE, 0, 0, 464.0f, 448.0f},       /* tie -> even 448 */
    {"e4m3", EXMY_RNE, 0, 0, 0x1.D00002p8f, NAN_},  /* just above the tie */
    {"e4m3", EXMY_RNE, 1, 0, 0x1.D00002p8f, 448.0f},
    {"e4m3", EXMY_RNA, 0, 0, 464.0f, NAN_},         /* tie away -> over */
    {"e4m3", EXMY_RZ, 0, 0, 1e9f, 448.0f},
    {"e4m3", EXMY_RU, 0, 0, 449.0f, NAN_},
    {"e4m3", EXMY_RD, 0, 0, 449.0f, 448.0f},
    {"e4m3", EXMY_RU, 0, 0, -449.0f, -448.0f},
    {"e4m3", EXMY_RD, 0, 0, -449.0f, NAN_},
    {"e4m3", EXMY_RO, 0, 0, 449.0f, 448.0f},
    {"e4m3", EXMY_RNE, 0, 0, INFINITY, NAN_},
    {"e4m3", EXMY_RZ, 0, 0, -INFINITY, NAN_},
    {"e4m3", EXMY_RNE, 1, 0, -INFINITY, -448.0f},
    {"e4m3", EXMY_RNE, 0, 0, 17.0f, 16.0f},         /* 16 even, 18 odd */
    {"e4m3", EXMY_RNE, 0, 0, 19.0f, 20.0f},
    {"e4m3", EXMY_RNA, 0, 0, 17.0f, 18.0f},
    {"e4m3", EXMY_RO, 0, 0, 16.5f, 18.0f},          /* the odd neighbour */
    {"e4m3", EXMY_RO, 0, 0, 18.5f, 18.0f},
    {"e4m3", EXMY_RNE, 0, 0, 0x1p-10f, 0.0f},       /* half the min subnormal */
    {"e4m3", EXMY_RNE, 0, 0, -0x1p-10f, -0.0f},
    {"e4m3", EXMY_RNE, 0, 0, 0x1.8p-9f, 0x1p-8f},   /* 1.5 quanta -> 2 */
    {"e4m3", EXMY_RU, 0, 0, 0x1p-149f, 0x1p-9f},
    {"e4m3", EXMY_RU, 0, 0, -0x1p-149f, -0.0f},
    {"e4m3", EXMY_RNE, 0, 1, 0x1p-7f, 0x1p-6f},     /* flushed: tie -> xmin */
    {"e4m3", EXMY_RNE, 0, 1, 0x1.FFFFFEp-8f, 0.0f},
    {"e4m3", EXMY_RNE, 0, 1, 0x1p-9f, 0.0f},        /* a subnormal, flushed */
    {"e4m3", EXMY_RZ, 0, 1, 0x1.8p-7f, 0.0f},
    {"e4m3", EXMY_RU, 0, 1, 0x1p-20f, 0x1p-6f},
    {"e4m3", EXMY_RO, 0, 1, 0x1p-20f, 0x1p-6f},
    {"e4m3", EXMY_RD, 0, 1, -0x1p-20f, -0x1p-6f},
    /* float8_e5m2: max 57344 = 1.11b * 2^15 (odd), next 65536 */
    {"e5m2", EXMY_RNE, 0, 0, 61440.0f, INFINITY},   /* tie -> even = inf */
    {"e5m2", EXMY_RNE, 0, 0, 0x1.DFFFFEp15f, 57344.0f},
    {"e5m2", EXMY_RNE, 1, 0, 61440.0f, 57344.0f},
    {"e5m2", EXMY_RZ, 0, 0, INFINITY, INFINITY},    /* inf is exact */
    {"e5m2", EXMY_RZ, 0, 0, 1e10f, 57344.0f},
    {"e5m2", EXMY_RU, 0, 0, -1e10f, -57344.0f},
    {"e5m2", EXMY_RD, 0, 0, -1e10f, -INFINITY},
    {"e5m2", EXMY_RNE, 0, 0, 0x1p-17f, 0.0f},       /* tie at half 2^-16 */
    {"e5m2", EXMY_RNE, 0, 0, 0x1.8p-16f, 0x1p-15f},
    /* float8_e4m3fnuz: max 240, next 256; no -0; 0x80 NaN */
    {"float8_e4m3fnuz", EXMY_RNE, 0, 0, 248.0f, NAN_},  /* max 0x7F odd */
    {"float8_e4m3fnuz", EXMY_RNE, 0, 0, 0x1.EFFFFEp7f, 240.0f},
    {"float8_e4m3fnuz", EXMY_RNE, 0, 0, -0.0f, 0.0f},
    {"float8_e4m3fnuz", EXMY_RNE, 0, 0, -1e-30f, 0.0f},
    {"float8_e4m3fnuz", EXMY_RD, 0, 0, -1e-30f, -0x1p-10f},
    /* float4_e2m1fn: 0 .5 1 1.5 2 3 4 6; no inf, no NaN */
    {"e2m1", EXMY_RNE, 0, 0, 5.0f, 4.0f},
    {"e2m1", EXMY_RNE, 0, 0, 7.0f, 6.0f},
    {"e2m1", EXMY_RNE, 0, 0, -100.0f, -6.0f},
    {"e2m1", EXMY_RU, 0, 0, 6.5f, 6.0f},
    {"e2m1", EXMY_RNE, 0, 0, INFINITY, 6.0f},
    {"e2m1", EXMY_RNE, 0, 0, NAN, 6.0f},             /* exmy.h: NaN -> max */
    {"e2m1", EXMY_RNE, 0, 0, 0.25f, 0.0f},
    {"e2m1", EXMY_RNE, 0, 0, 0.75f, 1.0f},
    {"e2m1", EXMY_RNE, 0, 0, 2.5f, 2.0f},
    {"e2m1", EXMY_RNE, 0, 0, 3.5f, 4.0f},
    {"e2m1", EXMY_RNE, 0, 1, 0.5f, 1.0f},            /* flushed: tie -> 1 */
    {"e2m1", EXMY_RNE, 0, 1, 0.4f, 0.0f},
    /* float6_e3m2fn: max 28 */
    {"e3m2", EXMY_RNE, 0, 0, 30.0f, 28.0f},
    {"e3m2", EXMY_RNE, 0, 0, 26.0f, 24.0f},          /* 24 even, 28 odd */
    /* float8_e8m0fnu: ml_dtypes rne ties up; CUDA rz/ru; exmy.h otherwise */
    {"e8m0", EXMY_RNE, 0, 0, 3.0f, 4.0f},
    {"e8m0", EXMY_RNE, 0, 0, 1.5f, 2.0f},
    {"e8m0", EXMY_RNE, 0, 0, 0x1.7FFFFEp0f, 1.0f},
    {"e8m0", EXMY_RNE, 0, 0, 0.75f, 1.0f},
    {"e8m0", EXMY_RZ, 0, 0, 3.9f, 2.0f},
    {"e8m0", EXMY_RU, 0, 0, 2.1f, 4.0f},
    {"e8m0", EXMY_RU, 0, 0, 2.0f, 2.0f},
    {"e8m0", EXMY_RO, 0, 0, 3.0f, 4.0f},             /* 4: code 129, odd */
    {"e8m0", EXMY_RO, 0, 0, 5.0f, 4.0f},             /* 8 is code 130 */
    {"e8m0", EXMY_RNE, 0, 0, 0.0f, NAN_},
    {"e8m0", EXMY_RNE, 1, 0, 0.0f, 0x1p-127f},
    {"e8m0", EXMY_RNE, 0, 0, -1.0f, NAN_},
    {"e8m0", EXMY_RNE, 1, 0, -1.0f, 0x1p-127f},
    {"e8m0", EXMY_RNE, 0, 0, 0x1p-149f, 0x1p-127f},
    {"e8m0", EXMY_RZ, 0, 0, 0x1p-149f, 0x1p-127f},
    {"e8m0", EXMY_RD, 0, 1, 0x1p-140f, 0x1p-127f},
    {"e8m0", EXMY_RNE, 0, 0, 0x1.8p-127f, 0x1p-126f},
    {"e8m0", EXMY_RNE, 0, 0, FLT_MAX, NAN_},
    {"e8m0", EXMY_RNE, 1, 0, FLT_MAX, 0x1p127f},
    {"e8m0", EXMY_RZ, 0, 0, FLT_MAX, 0x1p127f},
    {"e8m0", EXMY_RNE, 0, 0, 0x1.7FFFFEp127f, 0x1p127f},
    {"e8m0", EXMY_RNE, 0, 0, INFINITY, NAN_},
    {"e8m0", EXMY_RNE, 1, 0, INFINITY, 0x1p127f},
    {"e8m0", EXMY_RNE, 0, 0, NAN, NAN_},
    /* bfloat16 and float16 */
    {"bf16", EXMY_RNE, 0, 0, 0x1.01p0f, 1.0f},
    {"bf16", EXMY_RNE, 0, 0, 0x1.03p0f, 0x1.04p0f},
    {"bf16", EXMY_RNE, 0, 0, FLT_MAX, INFINITY},
    {"bf16", EXMY_RZ, 0, 0, FLT_MAX, 0x1.FEp127f},
    {"bf16", EXMY_RNE, 0, 0, 0x1p-134f, 0.0f},
    {"bf16", EXMY_RNE, 0, 0, 0x1.8p-133f, 0x1p-132f},
    {"fp16", EXMY_RNE, 0, 0, 65520.0f, INFINITY},
    {"fp16", EXMY_RNE, 0, 0, 0x1.FFDFFEp15f, 65504.0f},
    {"fp16", EXMY_RNE, 0, 0, 0x1p-25f, 0.0f},
    {"fp16", EXMY_RNE, 0, 0, 0x1.8p-24f, 0x1p-23f},
    {"fp16", EXMY_RU, 0, 0, 0x1p-149f, 0x1p-24f},
    {"fp16", EXMY_RNE, 0, 1, 0x1p-15f, 0x1p-14f},
    /* the paper's E8M3 */
    {"e8m3", EXMY_RNE, 0, 0, 0x1.1p0f, 1.0f},
    {"e8m3", EXMY_RNE, 0, 0, 0x1.3p0f, 0x1.4p0f},
    {"e8m3", EXMY_RNE, 0, 0, 0x1.Fp127f, INFINITY},   /* max 1.111b*2^127 odd */
    {"e8m3", EXMY_RNE, 0, 0, 0x1p-130f, 0.0f},
    {"e8m3", EXMY_RU, 0, 0, 0x1p-149f, 0x1p-129f},
};

static int same_float(float want, float got) {
  if (isnan(want)) return isnan(got);
  return f32_bits(want) == f32_bits(got);
}

START_TEST(test_hand_written_cases) {
  int failed = 0;
  for (size_t i = 0; i < sizeof kHand / sizeof kHand[0]; i++) {
    const hand_case *c = &kHand[i];
    exmy_format lib;
    ck_assert_msg(exmy_format_parse(c->format, &lib) == 0, "%s", c->format);
    const test_format *t = NULL;
    for (size_t k = 0; k < kNumTestFormats; k++) {
      exmy_format g;
      if (exmy_format_parse(kTestFormats[k].name, &g) == 0 &&
          strcmp(g.name, lib.name) == 0)
        t = &kTestFormats[k];
    }
    ck_assert_msg(t != NULL, "no test format for %s", c->format);
    oracle_format *o = oracle_format_new(t->name, t->exp_bits, t->man_bits,
                                         t->bias, t->kind);
    exmy_rounding_opts opts = {c->mode, c->saturate, c->flush, 0, 0, 0};
    float lib_scalar = exmy_ref_quantize(&lib, &opts, c->x, 0);
    float lib_bulk;
    exmy_quantize_f32(&lib, &opts, &c->x, &lib_bulk, 1);
    float orc = oracle_result_float(
        o, oracle_round(o, c->x, c->mode, c->saturate, c->flush, 32, 0));
    if (!same_float(c->want, lib_scalar) || !same_float(c->want, lib_bulk) ||
        !same_float(c->want, orc)) {
      fprintf(stderr,
              "[hand] %s %s saturate=%d flush=%d x=0x%08x (%a): expected %a, "
              "library %a (bulk %a), oracle %a\n",
              c->format, exmy_rounding_name(c->mode), c->saturate, c->flush,
              f32_bits(c->x), (double)c->x, (double)c->want,
              (double)lib_scalar, (double)lib_bulk, (double)orc);
      failed++;
    }
    oracle_format_free(o);
  }
  ck_assert_msg(failed == 0, "%d hand-written cases differ", failed);
}
END_TEST

START_TEST(test_special_codes) {
  /* codes the documentation pins: signs of zero and NaN, fnuz's NaN */
  static const struct {
    const char *format;
    int saturate;
    float x;
    uint32_t code;
  } cases[] = {
      {"float8_e4m3fnuz", 0, -0.0f, 0x00},  {"float8_e4m3fnuz", 0, NAN, 0x80},
      {"float8_e4m3fnuz", 0, -NAN, 0x80},   {"float8_e4m3fnuz", 0, 1e6f, 0x80},
      {"float8_e4m3fnuz", 0, -1e6f, 0x80},  {"float8_e4m3fnuz", 1, -1e6f, 0xFF},
      {"float8_e5m2fnuz", 0, -INFINITY, 0x80},
      {"e4m3", 0, -0.0f, 0x80},             {"e4m3", 0, -NAN, 0xFF},
      {"e4m3", 0, NAN, 0x7F},               {"e4m3", 1, NAN, 0x7F},
      {"e4m3", 1, 1e6f, 0x7E},              {"e4m3", 1, -1e6f, 0xFE},
      {"e5m2", 0, -INFINITY, 0xFC},         {"e5m2", 0, INFINITY, 0x7C},
      {"e5m2", 1, INFINITY, 0x7B},          {"e2m1", 0, -NAN, 0xF},
      {"e2m1", 0, -0.0f, 0x8},              {"e8m0", 0, NAN, 0xFF},
      {"e8m0", 0, 1.0f, 127},               {"e8m0", 1, -0.0f, 0x00},
      {"e3m0", 0, NAN, 0x7},                {"e3m0", 0, -NAN, 0xF},
      {"bf16", 0, -0.0f, 0x8000},           {"fp16", 0, -INFINITY, 0xFC00},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    exmy_format f;
    ck_assert(exmy_format_parse(cases[i].format, &f) == 0);
    exmy_rounding_opts o = {EXMY_RNE, cases[i].saturate, 0, 0, 0, 0};
    uint32_t got = exmy_ref_encode(&f, &o, cases[i].x, 0);
    ck_assert_msg(got == cases[i].code,
                  "%s saturate=%d x=0x%08x: code 0x%x, expected 0x%x",
                  cases[i].format, cases[i].saturate, f32_bits(cases[i].x),
                  got, cases[i].code);
  }
}
END_TEST

/* -------------------------------------------------------- structured inputs */

static void check_format(const test_format *t, tally *enc, tally *qua,
                         tally *senc, tally *squa) {
  exmy_format lib;
  oracle_format *o = test_format_open(t, &lib);
  size_t n;
  /* quarter points too where that is cheap (up to 12 bits) */
  float *x = structured_inputs(o, o->bits <= 12, &n);
  void *codes = malloc(n * exmy_code_bytes(&lib));
  float *y = malloc(n * sizeof *y), *inplace = malloc(n * sizeof *y);
  oracle_loc *loc = malloc(n * sizeof *loc);
  for (int flush = 0; flush <= (o->has_normals ? 1 : 0); flush++) {
    for (size_t i = 0; i < n; i++) oracle_locate(o, x[i], 0, flush, &loc[i]);
    for (int m = 0; m < 6; m++)
      for (int sat = 0; sat <= 1; sat++) {
        const exmy_rounding mode = kDeterministic[m];
        exmy_rounding_opts opts = {mode, sat, flush, 0, 0, 0};
        exmy_encode_f32(&lib, &opts, x, codes, n);
        exmy_quantize_f32(&lib, &opts, x, y, n);
        memcpy(inplace, x, n * sizeof *x);
        exmy_quantize_f32(&lib, &opts, inplace, inplace, n); /* y aliases x */
        for (size_t i = 0; i < n; i++) {
          oracle_loc sat_loc;
          const oracle_loc *li = &loc[i];
          if (li->special && sat) { /* the fixed results depend on it */
            oracle_locate(o, x[i], sat, flush, &sat_loc);
            li = &sat_loc;
          }
          oracle_result want = oracle_apply(o, li, mode, sat);
          tally_code(enc, o, mode, sat, flush, 0, x[i], want,
                     code_at(&lib, codes, i));
          tally_float(qua, o, mode, sat, flush, 0, x[i], want, y[i]);
          tally_float(qua, o, mode, sat, flush, 0, x[i], want, inplace[i]);
          tally_code(senc, o, mode, sat, flush, 0, x[i], want,
                     exmy_ref_encode(&lib, &opts, x[i], 0));
          tally_float(squa, o, mode, sat, flush, 0, x[i], want,
                      exmy_ref_quantize(&lib, &opts, x[i], 0));
        }
      }
  }
  free(x);
  free(codes);
  free(y);
  free(inplace);
  free(loc);
  oracle_format_free(o);
}

START_TEST(test_structured_inputs) {
  tally enc = {.what = "bulk encode"}, qua = {.what = "bulk quantize"};
  tally senc = {.what = "scalar encode"}, squa = {.what = "scalar quantize"};
  /* one format per test run (_i), so that a failure names it */
  check_format(&kTestFormats[_i], &enc, &qua, &senc, &squa);
  fprintf(stderr, "%s: ", kTestFormats[_i].name);
  tally_assert(&enc);
  tally_assert(&qua);
  tally_assert(&senc);
  tally_assert(&squa);
}
END_TEST

START_TEST(test_float32_is_identity) {
  /* float32 itself: every non-NaN float32 (strided) comes back unchanged */
  exmy_format f;
  ck_assert(exmy_format_parse("fp32", &f) == 0);
  enum { N = 1 << 16 };
  static float x[N], y[N];
  static uint32_t c[N];
  long bad = 0;
  for (int m = 0; m < 6; m++)
    for (int sat = 0; sat <= 1; sat++) {
      exmy_rounding_opts o = {kDeterministic[m], sat, 0, 0, 0, 0};
      for (uint64_t start = 0; start < (1ull << 32); start += (uint64_t)N * 65521) {
        for (int i = 0; i < N; i++)
          x[i] = bits_f32((uint32_t)(start + (uint64_t)i * 65521));
        exmy_quantize_f32(&f, &o, x, y, N);
        exmy_encode_f32(&f, &o, x, c, N);
        for (int i = 0; i < N; i++) {
          if (isnan(x[i])) {
            bad += !isnan(y[i]);
            continue;
          }
          if (isinf(x[i]) && sat) continue;
          if (f32_bits(y[i]) != f32_bits(x[i]) || c[i] != f32_bits(x[i])) {
            if (bad++ < 10)
              fprintf(stderr, "[fp32] %s sat=%d x=0x%08x: y=0x%08x code=0x%08x\n",
                      exmy_rounding_name(kDeterministic[m]), sat, f32_bits(x[i]),
                      f32_bits(y[i]), c[i]);
          }
        }
      }
    }
  ck_assert_msg(bad == 0, "%ld float32 values changed", bad);
}
END_TEST

int main(void) {
  const TTest *const tests[] = {test_hand_written_cases, test_special_codes,
                                test_float32_is_identity, NULL};
  const int nformats = (int)kNumTestFormats;
  return run_suite(suite_of_loop("convert", 120, test_structured_inputs, nformats, tests), true);
}
