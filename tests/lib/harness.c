/* What the exmy library tests share: see harness.h. */
#include "tests/lib/harness.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The fields as the published tables (OCP, ml_dtypes) define them; generic eXmY is
 * IEEE-like with bias 2^(X-1)-1. */
const test_format kTestFormats[] = {
    {"float8_e4m3fn", 4, 3, 7, ORACLE_FN},
    {"float8_e5m2", 5, 2, 15, ORACLE_IEEE},
    {"float8_e4m3fnuz", 4, 3, 8, ORACLE_FNUZ},
    {"float8_e5m2fnuz", 5, 2, 16, ORACLE_FNUZ},
    {"float8_e3m4", 3, 4, 3, ORACLE_IEEE},
    {"float8_e4m3", 4, 3, 7, ORACLE_IEEE},
    {"float6_e2m3fn", 2, 3, 1, ORACLE_FINITE},
    {"float6_e3m2fn", 3, 2, 3, ORACLE_FINITE},
    {"float4_e2m1fn", 2, 1, 1, ORACLE_FINITE},
    {"float8_e8m0fnu", 8, 0, 127, ORACLE_E8M0},
    {"bfloat16", 8, 7, 127, ORACLE_IEEE},
    {"float16", 5, 10, 15, ORACLE_IEEE},
    {"e8m3", 8, 3, 127, ORACLE_IEEE},
    {"e8m4", 8, 4, 127, ORACLE_IEEE},
    {"e8m5", 8, 5, 127, ORACLE_IEEE},
    {"e8m6", 8, 6, 127, ORACLE_IEEE},
    {"e5m10", 5, 10, 15, ORACLE_IEEE},
    {"e2m5", 2, 5, 1, ORACLE_IEEE},
    {"e1m2", 1, 2, 0, ORACLE_IEEE},
    {"e3m0", 3, 0, 3, ORACLE_IEEE},
    {"e7m7", 7, 7, 63, ORACLE_IEEE},
    {"e6m7", 6, 7, 31, ORACLE_IEEE},
    {"e5m7", 5, 7, 15, ORACLE_IEEE},
    {"e4m0", 4, 0, 7, ORACLE_IEEE},
    {"e2m2", 2, 2, 1, ORACLE_IEEE},
};
const size_t kNumTestFormats = sizeof kTestFormats / sizeof kTestFormats[0];

const test_format *test_format_named(const char *name) {
  for (size_t i = 0; i < kNumTestFormats; i++)
    if (strcmp(kTestFormats[i].name, name) == 0) return &kTestFormats[i];
  fprintf(stderr, "harness: no test format %s\n", name);
  abort();
}

static exmy_specials specials_of(oracle_kind k) {
  switch (k) {
    case ORACLE_IEEE: return EXMY_SPECIALS_IEEE;
    case ORACLE_FN: return EXMY_SPECIALS_FN;
    case ORACLE_FNUZ: return EXMY_SPECIALS_FNUZ;
    case ORACLE_FINITE: return EXMY_SPECIALS_NONE;
    case ORACLE_E8M0: return EXMY_SPECIALS_E8M0;
  }
  return EXMY_SPECIALS_IEEE;
}

oracle_format *test_format_open(const test_format *t, exmy_format *lib) {
  ck_assert_msg(exmy_format_parse(t->name, lib) == 0,
                "exmy_format_parse(\"%s\") failed", t->name);
  ck_assert_msg(lib->exp_bits == t->exp_bits && lib->man_bits == t->man_bits &&
                    lib->bias == t->bias &&
                    lib->specials == specials_of(t->kind),
                "%s: library has E=%d M=%d bias=%d specials=%d, expected "
                "E=%d M=%d bias=%d specials=%d",
                t->name, lib->exp_bits, lib->man_bits, lib->bias,
                (int)lib->specials, t->exp_bits, t->man_bits, t->bias,
                (int)specials_of(t->kind));
  oracle_format *f =
      oracle_format_new(t->name, t->exp_bits, t->man_bits, t->bias, t->kind);
  ck_assert_msg(f != NULL, "oracle cannot list %s", t->name);
  ck_assert_msg(lib->bits == f->bits, "%s: library says %d bits, expected %d",
                t->name, lib->bits, f->bits);
  return f;
}

/* ------------------------------------------------------- structured inputs */

typedef struct {
  float *v;
  size_t n, cap;
} fvec;

static void push(fvec *a, float x) {
  if (a->n == a->cap) {
    a->cap = a->cap ? 2 * a->cap : 1024;
    a->v = realloc(a->v, a->cap * sizeof *a->v);
  }
  a->v[a->n++] = x;
}

/* x (if it is a finite float32) and its two float32 neighbours */
static void push_around(fvec *a, double x) {
  float fx = (float)x;
  if (!isfinite(fx)) return;
  push(a, fx);
  push(a, nextafterf(fx, 0.0f));
  push(a, nextafterf(fx, INFINITY));
}

/* the midpoint (and quarter points) of [lo, hi], each with its neighbours */
static void push_between(fvec *a, double lo, double hi, int quarters) {
  push_around(a, lo + (hi - lo) / 2);
  if (!quarters) return;
  push_around(a, lo + (hi - lo) / 4);
  push_around(a, lo + 3 * (hi - lo) / 4);
}

float *structured_inputs(const oracle_format *f, int quarters, size_t *n) {
  fvec a = {0};
  for (size_t i = 0; i < f->count; i++) {
    push_around(&a, f->mag[i]);
    if (i + 1 < f->count) push_between(&a, f->mag[i], f->mag[i + 1], quarters);
  }
  /* the flushed gap and the overflow boundary */
  push_between(&a, 0.0, f->min_normal, 1);
  push_between(&a, f->max, f->beyond, 1);
  push_around(&a, f->beyond);
  push_around(&a, f->beyond * 1.5);
  push_around(&a, f->beyond * 2);
  push_around(&a, f->beyond * 1024);
  push_around(&a, FLT_MAX);
  push(&a, INFINITY);
  /* float32 subnormals and the float32 normal boundary */
  static const uint32_t tiny[] = {0x1,      0x2,      0x3,      0x5,
                                  0x3FFFFF, 0x400000, 0x400001, 0x7FFFFF,
                                  0x800000, 0x800001, 0x0C00000, 0x1000000};
  for (size_t i = 0; i < sizeof tiny / sizeof tiny[0]; i++)
    push(&a, bits_f32(tiny[i]));
  uint32_t lcg = 12345;
  for (int i = 0; i < 64; i++) {
    lcg = lcg * 1664525u + 1013904223u;
    push(&a, bits_f32(lcg >> 9)); /* a random float32 subnormal */
  }
  push(&a, 0.0f);
  /* NaNs: quiet, signalling, all-ones payload */
  static const uint32_t nans[] = {0x7FC00000, 0x7F800001, 0x7FFFFFFF,
                                  0x7FA00000};
  for (size_t i = 0; i < sizeof nans / sizeof nans[0]; i++)
    push(&a, bits_f32(nans[i]));
  /* and all of it negated */
  size_t half = a.n;
  for (size_t i = 0; i < half; i++) push(&a, bits_f32(f32_bits(a.v[i]) ^ 0x80000000u));
  *n = a.n;
  return a.v;
}

/* ------------------------------------------------------------------ tally */

static const char *mode_name(exmy_rounding m) {
  static const char *const names[] = {"rne", "rna", "rz", "ru", "rd", "ro", "sr"};
  return (unsigned)m < 7 ? names[m] : "?";
}

static void describe_code(char *buf, size_t len, const oracle_format *f,
                          uint32_t c) {
  if (c >= f->ncodes) {
    snprintf(buf, len, "0x%x (not a code of %d bits)", c, f->bits);
    return;
  }
  const char *cls = f->code_class[c] == ORACLE_NAN ? "NaN"
                    : f->code_class[c] == ORACLE_INF ? "inf"
                                                      : NULL;
  const unsigned w = f->bits <= 8 ? 2 : 4; /* hex digits */
  if (cls)
    snprintf(buf, len, "0x%0*x (%s%s)", w, c, (c & f->sign_bit) ? "-" : "+",
             cls);
  else
    snprintf(buf, len, "0x%0*x (%.9g)", w, c, f->code_value[c]);
}

static void describe_want(char *buf, size_t len, const oracle_format *f,
                          oracle_result w) {
  char code[96];
  describe_code(code, sizeof code, f, w.code);
  if (w.cls == ORACLE_NAN)
    snprintf(buf, len, "a NaN code%s, e.g. %s",
             f->signed_nan ? (w.neg ? " with the sign set" : " with the sign clear")
                           : "",
             code);
  else
    snprintf(buf, len, "%s", code);
}

static int print_header(tally *t, const oracle_format *f, exmy_rounding mode,
                        int saturate, int flush, int sr_bits, float x) {
  t->failed++;
  if (t->printed >= 20) return 0;
  t->printed++;
  fprintf(stderr, "[%s] %s %s", t->what, f->name, mode_name(mode));
  if (mode == EXMY_SR) fprintf(stderr, " sr_bits=%d", sr_bits);
  if (t->show_word) fprintf(stderr, " random=0x%08x", t->word);
  fprintf(stderr, " saturate=%d flush=%d x=0x%08x (%.9g, %a): ", saturate,
          flush, f32_bits(x), (double)x, (double)x);
  return 1;
}

void tally_code(tally *t, const oracle_format *f, exmy_rounding mode,
                int saturate, int flush, int sr_bits, float x,
                oracle_result want, uint32_t got) {
  t->checked++;
  if (oracle_code_matches(f, want, got)) return;
  if (!print_header(t, f, mode, saturate, flush, sr_bits, x)) return;
  char w[160], g[96];
  describe_want(w, sizeof w, f, want);
  describe_code(g, sizeof g, f, got);
  fprintf(stderr, "expected code %s, got %s\n", w, g);
}

void tally_float(tally *t, const oracle_format *f, exmy_rounding mode,
                 int saturate, int flush, int sr_bits, float x,
                 oracle_result want, float got) {
  t->checked++;
  if (oracle_float_matches(want, got)) return;
  if (!print_header(t, f, mode, saturate, flush, sr_bits, x)) return;
  float w = oracle_result_float(f, want);
  fprintf(stderr, "expected %.9g (0x%08x), got %.9g (0x%08x)\n", (double)w,
          f32_bits(w), (double)got, f32_bits(got));
}

void tally_assert(const tally *t) {
  fprintf(stderr, "[%s] %ld checked, %ld differed\n", t->what, t->checked,
          t->failed);
  ck_assert_msg(t->failed == 0, "%s: %ld of %ld results differ from the oracle",
                t->what, t->failed, t->checked);
  ck_assert_msg(t->checked > 0, "%s: nothing was checked", t->what);
}

/* -------------------------------------------------------------- small bits */

uint32_t code_at(const exmy_format *f, const void *codes, size_t i) {
  switch (exmy_code_bytes(f)) {
    case 1: return ((const uint8_t *)codes)[i];
    case 2: return ((const uint16_t *)codes)[i];
    default: return ((const uint32_t *)codes)[i];
  }
}

void code_put(const exmy_format *f, void *codes, size_t i, uint32_t c) {
  switch (exmy_code_bytes(f)) {
    case 1: ((uint8_t *)codes)[i] = (uint8_t)c; break;
    case 2: ((uint16_t *)codes)[i] = (uint16_t)c; break;
    default: ((uint32_t *)codes)[i] = c; break;
  }
}

uint32_t f32_bits(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  return u;
}

float bits_f32(uint32_t u) {
  float x;
  memcpy(&x, &u, sizeof x);
  return x;
}
