/*
 * Formats: the name parser, the per-format facts, decoding every code, and
 * the round trip code -> value -> code of every code of every <= 16-bit
 * format under test.
 *
 * References: the facts are hand-written from the published format tables
 * and definitions (e.g. e4m3 max 448); decoding is compared with the
 * oracle's table, built from the fields with ldexp (tests/lib/oracle.c).
 */
#include <check.h>
#include <ctype.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/exmy_cpu.h"
#include "tests/lib/harness.h"
#include "tests/lib/oracle.h"

/* ------------------------------------------------------------------ parser */

START_TEST(test_parse_names_and_aliases) {
  /* every name and alias, in several spellings; each
   * alias must give exactly the canonical name's descriptor */
  static const char *const pairs[][2] = {
      {"float8_e4m3fn", "e4m3"},      {"FLOAT8_E4M3FN", "E4M3"},
      {"Float8_E5M2", "e5m2"},        {"float8_e5m2", "E5m2"},
      {"float6_e2m3fn", "e2m3"},      {"float6_e3m2fn", "e3m2"},
      {"float4_e2m1fn", "e2m1"},      {"float8_e8m0fnu", "e8m0"},
      {"FLOAT8_E8M0FNU", "E8M0"},     {"bfloat16", "bf16"},
      {"BFloat16", "BF16"},           {"float16", "fp16"},
      {"Float16", "FP16"},            {"float32", "fp32"},
      {"float8_e4m3fnuz", "FLOAT8_E4M3FNUZ"},
      {"float8_e5m2fnuz", "Float8_E5M2FNUZ"},
      {"float8_e3m4", "FLOAT8_E3M4"}, {"float8_e4m3", "Float8_E4M3"},
      {"e8m3", "E8M3"},               {"e5m10", "E5M10"},
  };
  for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
    exmy_format a, b;
    memset(&a, 0x55, sizeof a);
    memset(&b, 0x55, sizeof b);
    ck_assert_msg(exmy_format_parse(pairs[i][0], &a) == 0, "rejected \"%s\"",
                  pairs[i][0]);
    ck_assert_msg(exmy_format_parse(pairs[i][1], &b) == 0, "rejected \"%s\"",
                  pairs[i][1]);
    ck_assert_msg(a.exp_bits == b.exp_bits && a.man_bits == b.man_bits &&
                      a.bias == b.bias && a.specials == b.specials &&
                      a.max_code == b.max_code && a.nan_code == b.nan_code &&
                      a.inf_code == b.inf_code && strcmp(a.name, b.name) == 0,
                  "\"%s\" (%s) and \"%s\" (%s) differ", pairs[i][0], a.name,
                  pairs[i][1], b.name);
  }
  /* the fields of every format under test (test_format_open checks them) */
  for (size_t i = 0; i < kNumTestFormats; i++) {
    exmy_format lib;
    oracle_format_free(test_format_open(&kTestFormats[i], &lib));
  }
  /* generic eXmY over the whole documented range */
  for (int e = 1; e <= 8; e++)
    for (int m = 0; m <= 23; m++) {
      char name[16];
      snprintf(name, sizeof name, "e%dm%d", e, m);
      exmy_format f;
      if (e == 8 && m == 0) continue; /* "e8m0" is the alias of E8M0 */
      if (e == 1 && m == 0) continue; /* only 0 and inf: rejected, see format.c */
      if ((e == 4 && m == 3) || (e == 5 && m == 2) || (e == 2 && m == 3) ||
          (e == 3 && m == 2) || (e == 2 && m == 1))
        continue; /* aliases of named formats */
      ck_assert_msg(exmy_format_parse(name, &f) == 0, "rejected \"%s\"", name);
      ck_assert_msg(f.exp_bits == e && f.man_bits == m &&
                        f.bias == (1 << (e - 1)) - 1 &&
                        f.specials == EXMY_SPECIALS_IEEE,
                    "\"%s\": E=%d M=%d bias=%d specials=%d", name, f.exp_bits,
                    f.man_bits, f.bias, (int)f.specials);
    }
}
END_TEST

START_TEST(test_parse_rejects_garbage) {
  static const char *const bad[] = {
      "e9m3",  "e4m24",  "e0m3",   "",       "float8", "e4m3x",   "e4m",
      "em3",   "e4m3 ",  " e4m3",  "e-1m3",  "e4m-1",  "e4m+3",   "m3",
      "e",     "bf",     "fp8",    "float",  "e4m3fnx", "float8_e4m3fnx",
      "e12m3", "e4m100", "e99999999999999999999m3",
      /* eXmY means digits: no sign, no blank inside */
      "e+4m3", "e 4m3",
  };
  int accepted = 0;
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    exmy_format f;
    memset(&f, 0x5A, sizeof f);
    exmy_format before = f;
    int rc = exmy_format_parse(bad[i], &f);
    if (rc != -1) {
      fprintf(stderr, "[parse] accepted \"%s\" (rc %d) as %.32s, E=%d M=%d bias=%d\n",
              bad[i], rc, f.name, f.exp_bits, f.man_bits, f.bias);
      accepted++;
    } else if (memcmp(&f, &before, sizeof f) != 0) {
      fprintf(stderr, "[parse] rejecting \"%s\" changed *out\n", bad[i]);
      accepted++;
    }
  }
  ck_assert_msg(accepted == 0, "%d malformed names accepted (or *out changed)",
                accepted);
}
END_TEST

START_TEST(test_rounding_names_and_options) {
  static const char *const names[] = {"rne", "rna", "rz", "ru", "rd", "ro", "sr"};
  for (int i = 0; i < 7; i++) {
    char upper[8] = {0};
    for (int k = 0; names[i][k]; k++) upper[k] = (char)toupper(names[i][k]);
    exmy_rounding m = (exmy_rounding)99, u = (exmy_rounding)99;
    ck_assert_msg(exmy_rounding_parse(names[i], &m) == 0 && (int)m == i,
                  "rounding \"%s\" parsed as %d", names[i], (int)m);
    ck_assert_msg(exmy_rounding_parse(upper, &u) == 0 && (int)u == i,
                  "rounding \"%s\" parsed as %d", upper, (int)u);
    ck_assert_str_eq(exmy_rounding_name((exmy_rounding)i), names[i]);
  }
  static const char *const bad[] = {"", "rn", "rnee", "nearest", "r", "s"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    exmy_rounding m;
    ck_assert_msg(exmy_rounding_parse(bad[i], &m) == -1, "accepted \"%s\"", bad[i]);
  }
  exmy_rounding_opts o;
  memset(&o, 0, sizeof o); /* zero-initialised: plain rne */
  ck_assert_int_eq(exmy_rounding_opts_check(&o), 0);
  ck_assert_int_eq((int)o.mode, (int)EXMY_RNE);
  o.sr_bits = 32;
  ck_assert_int_eq(exmy_rounding_opts_check(&o), 0);
  o.sr_bits = 33;
  ck_assert_int_eq(exmy_rounding_opts_check(&o), -1);
  o.sr_bits = -1;
  ck_assert_int_eq(exmy_rounding_opts_check(&o), -1);
  o.sr_bits = 0;
  o.mode = (exmy_rounding)7;
  ck_assert_int_eq(exmy_rounding_opts_check(&o), -1);
}
END_TEST

/* ------------------------------------------------------------------- facts */

typedef struct {
  const char *name;
  float max, min_normal, min_subnormal, epsilon;
  uint64_t finite_codes, finite_values;
  int has_inf, has_nan, has_negative_zero, has_subnormals;
} facts;

START_TEST(test_format_facts) {
  /* Hand-written from the definitions (sign + E + M, bias, specials). */
  const facts expected[] = {
      /* S.1111.110 = 1.75 * 2^8; 2^(1-7); 2^(1-7-3); 2^-3; 256 - 2 NaN */
      {"e4m3", 448.0f, 0x1p-6f, 0x1p-9f, 0.125f, 254, 253, 0, 1, 1, 1},
      /* 1.75 * 2^15; 2^-14; 2^-16; 256 - 2*(1 inf + 3 NaN) */
      {"e5m2", 57344.0f, 0x1p-14f, 0x1p-16f, 0.25f, 248, 247, 1, 1, 1, 1},
      /* bias 8: 1.875 * 2^7; 2^-7; 2^-10; 256 - 1 NaN, no -0 */
      {"float8_e4m3fnuz", 240.0f, 0x1p-7f, 0x1p-10f, 0.125f, 255, 255, 0, 1, 0, 1},
      /* bias 16: 1.75 * 2^15; 2^-15; 2^-17 */
      {"float8_e5m2fnuz", 57344.0f, 0x1p-15f, 0x1p-17f, 0.25f, 255, 255, 0, 1, 0, 1},
      /* bias 3: 1.9375 * 2^3; 2^-2; 2^-6; 256 - 2*16 */
      {"float8_e3m4", 15.5f, 0x1p-2f, 0x1p-6f, 0.0625f, 224, 223, 1, 1, 1, 1},
      /* IEEE-like bias 7: 1.875 * 2^7; 256 - 2*8 */
      {"float8_e4m3", 240.0f, 0x1p-6f, 0x1p-9f, 0.125f, 240, 239, 1, 1, 1, 1},
      /* bias 1: 1.875 * 2^2; 2^0; 2^-3; every code a number */
      {"e2m3", 7.5f, 1.0f, 0.125f, 0.125f, 64, 63, 0, 0, 1, 1},
      /* bias 3: 1.75 * 2^4; 2^-2; 2^-4 */
      {"e3m2", 28.0f, 0.25f, 0.0625f, 0.25f, 64, 63, 0, 0, 1, 1},
      /* bias 1: 1.5 * 2^2; 1; 0.5 */
      {"e2m1", 6.0f, 1.0f, 0.5f, 0.5f, 16, 15, 0, 0, 1, 1},
      /* 2^(254-127); 2^-127 (code 0); 0xFF NaN; no zero, no sign */
      {"e8m0", 0x1p127f, 0x1p-127f, 0x1p-127f, 1.0f, 255, 255, 0, 1, 0, 0},
      /* (2 - 2^-7) * 2^127; 2^-126; 2^-133; 65536 - 2*128 */
      {"bf16", 0x1.FEp127f, 0x1p-126f, 0x1p-133f, 0x1p-7f, 65280, 65279, 1, 1, 1, 1},
      /* 65504; 2^-14; 2^-24; 65536 - 2*1024 */
      {"fp16", 65504.0f, 0x1p-14f, 0x1p-24f, 0x1p-10f, 63488, 63487, 1, 1, 1, 1},
      {"fp32", FLT_MAX, FLT_MIN, 0x1p-149f, FLT_EPSILON, 4278190080u,
       4278190079u, 1, 1, 1, 1},
      /* the paper's E8M3: (2 - 2^-3) * 2^127; 2^-126; 2^-129; 4096 - 2*8 */
      {"e8m3", 0x1.Ep127f, 0x1p-126f, 0x1p-129f, 0.125f, 4080, 4079, 1, 1, 1, 1},
  };
  for (size_t i = 0; i < sizeof expected / sizeof expected[0]; i++) {
    const facts *e = &expected[i];
    exmy_format f;
    ck_assert_msg(exmy_format_parse(e->name, &f) == 0, "rejected %s", e->name);
    exmy_format_info info;
    exmy_format_get_info(&f, &info);
#define FACT_F(field)                                                        \
  ck_assert_msg(f32_bits(info.field) == f32_bits(e->field),                  \
                "%s: " #field " is %a, expected %a", e->name,                \
                (double)info.field, (double)e->field)
#define FACT_I(field)                                                        \
  ck_assert_msg((uint64_t)info.field == (uint64_t)e->field,                  \
                "%s: " #field " is %llu, expected %llu", e->name,            \
                (unsigned long long)info.field, (unsigned long long)e->field)
    FACT_F(max);
    FACT_F(min_normal);
    FACT_F(min_subnormal);
    FACT_F(epsilon);
    FACT_I(finite_codes);
    FACT_I(finite_values);
    FACT_I(has_inf);
    FACT_I(has_nan);
    FACT_I(has_negative_zero);
    FACT_I(has_subnormals);
    ck_assert_msg(exmy_code_bytes(&f) == (f.bits <= 8 ? 1u : f.bits <= 16 ? 2u : 4u),
                  "%s: %zu code bytes for %d bits", e->name, exmy_code_bytes(&f),
                  f.bits);
  }
}
END_TEST

START_TEST(test_facts_match_table) {
  /* every format under test: the facts against the oracle's table */
  for (size_t i = 0; i < kNumTestFormats; i++) {
    exmy_format lib;
    oracle_format *o = test_format_open(&kTestFormats[i], &lib);
    exmy_format_info info;
    exmy_format_get_info(&lib, &info);
    const char *n = o->name;
    ck_assert_msg((double)info.max == o->max, "%s: max %a, table %a", n,
                  (double)info.max, o->max);
    ck_assert_msg((double)info.min_subnormal == o->min_subnormal,
                  "%s: min_subnormal %a, table %a", n,
                  (double)info.min_subnormal, o->min_subnormal);
    if (o->has_normals)
      ck_assert_msg((double)info.min_normal == o->min_normal,
                    "%s: min_normal %a, table %a", n, (double)info.min_normal,
                    o->min_normal);
    ck_assert_msg((double)info.epsilon == ldexp(1.0, -o->man_bits),
                  "%s: epsilon %a", n, (double)info.epsilon);
    ck_assert_msg(info.finite_codes == o->finite_codes,
                  "%s: finite_codes %llu, table %zu", n,
                  (unsigned long long)info.finite_codes, o->finite_codes);
    uint64_t values = o->is_signed ? 2 * o->count - 1 : o->count;
    ck_assert_msg(info.finite_values == values,
                  "%s: finite_values %llu, table %llu", n,
                  (unsigned long long)info.finite_values,
                  (unsigned long long)values);
    ck_assert_msg(info.has_inf == o->has_inf && info.has_nan == o->has_nan &&
                      info.has_negative_zero == o->has_negative_zero &&
                      info.has_subnormals == o->has_subnormals,
                  "%s: has_inf/nan/-0/subnormals %d%d%d%d, table %d%d%d%d", n,
                  info.has_inf, info.has_nan, info.has_negative_zero,
                  info.has_subnormals, o->has_inf, o->has_nan,
                  o->has_negative_zero, o->has_subnormals);
    oracle_format_free(o);
  }
}
END_TEST

/* --------------------------------------------------------- decode, round trip */

START_TEST(test_decode_every_code) {
  tally scalar = {.what = "scalar decode"}, bulk = {.what = "bulk decode"};
  for (size_t i = 0; i < kNumTestFormats; i++) {
    exmy_format lib;
    oracle_format *o = test_format_open(&kTestFormats[i], &lib);
    void *codes = malloc(o->ncodes * exmy_code_bytes(&lib));
    float *y = malloc(o->ncodes * sizeof *y);
    for (uint32_t c = 0; c < o->ncodes; c++) code_put(&lib, codes, c, c);
    exmy_decode_f32(&lib, codes, y, o->ncodes);
    for (uint32_t c = 0; c < o->ncodes; c++) {
      const int neg = (c & o->sign_bit) != 0;
      oracle_result want = {o->code_class[c], neg, fabs(o->code_value[c]), c};
      float s = exmy_ref_decode(&lib, c);
      /* the input column shows the code itself */
      tally_float(&scalar, o, EXMY_RNE, 0, 0, 0, bits_f32(c), want, s);
      tally_float(&bulk, o, EXMY_RNE, 0, 0, 0, bits_f32(c), want, y[c]);
    }
    free(codes);
    free(y);
    oracle_format_free(o);
  }
  tally_assert(&scalar);
  tally_assert(&bulk);
}
END_TEST

static const exmy_rounding kDeterministic[] = {EXMY_RNE, EXMY_RNA, EXMY_RZ,
                                               EXMY_RU,  EXMY_RD,  EXMY_RO};

START_TEST(test_round_trip_every_code) {
  /* encode(decode(c)) == c for every code that is not NaN, in every mode:
   * without saturation every number and infinity; with saturation every
   * number (inf saturates to max by design); with flushing every number that
   * is not subnormal.  sr too, with the extreme random words.  NaN codes come
   * back as NaN codes of the same sign where NaNs are signed. */
  tally t = {.what = "round trip"};
  for (size_t i = 0; i < kNumTestFormats; i++) {
    exmy_format lib;
    oracle_format *o = test_format_open(&kTestFormats[i], &lib);
    const size_t nb = exmy_code_bytes(&lib);
    void *codes = malloc(o->ncodes * nb), *back = malloc(o->ncodes * nb);
    float *y = malloc(o->ncodes * sizeof *y);
    for (uint32_t c = 0; c < o->ncodes; c++) code_put(&lib, codes, c, c);
    exmy_decode_f32(&lib, codes, y, o->ncodes);
    for (int m = 0; m < 7; m++)
      for (int sat = 0; sat <= 1; sat++)
        for (int flush = 0; flush <= (o->has_normals ? 1 : 0); flush++) {
          exmy_rounding mode = m < 6 ? kDeterministic[m] : EXMY_SR;
          exmy_rounding_opts opts = {mode, sat, flush, 7, 0, 0};
          exmy_encode_f32(&lib, &opts, y, back, o->ncodes);
          for (uint32_t c = 0; c < o->ncodes; c++) {
            const int neg = (c & o->sign_bit) != 0;
            const double v = fabs(o->code_value[c]);
            oracle_result want = {o->code_class[c], neg, v, c};
            if (o->code_class[c] == ORACLE_INF && sat) continue;
            if (flush && o->code_class[c] == ORACLE_NUMBER && v != 0 &&
                v < o->min_normal)
              continue;
            tally_code(&t, o, mode, sat, flush, 32, y[c], want,
                       code_at(&lib, back, c));
            if (mode == EXMY_SR) {
              /* the scalar reference with the extreme random words */
              tally_code(&t, o, mode, sat, flush, 32, y[c], want,
                         exmy_ref_encode(&lib, &opts, y[c], 0u));
              tally_code(&t, o, mode, sat, flush, 32, y[c], want,
                         exmy_ref_encode(&lib, &opts, y[c], 0xFFFFFFFFu));
            }
          }
        }
    free(codes);
    free(back);
    free(y);
    oracle_format_free(o);
  }
  tally_assert(&t);
}
END_TEST

int main(void) {
  const TTest *const tests[] = {test_parse_names_and_aliases, test_parse_rejects_garbage,
                                test_rounding_names_and_options, test_format_facts,
                                test_facts_match_table, test_decode_every_code,
                                test_round_trip_every_code, NULL};
  return run_suite(suite_of("formats", 120, tests), true);
}
