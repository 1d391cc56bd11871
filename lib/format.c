/* The table of named formats, the name parser and the per-format facts. */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/exmy.h"
#include "lib/round_core.h"

/* One row per named format; adding a format is adding a row. */
typedef struct {
  const char *name;
  const char *alias;
  int exp_bits, man_bits, bias;
  exmy_specials specials;
} named_format;

static const named_format kNamedFormats[] = {
    {"float8_e4m3fn", "e4m3", 4, 3, 7, EXMY_SPECIALS_FN},
    {"float8_e5m2", "e5m2", 5, 2, 15, EXMY_SPECIALS_IEEE},
    {"float8_e4m3fnuz", NULL, 4, 3, 8, EXMY_SPECIALS_FNUZ},
    {"float8_e5m2fnuz", NULL, 5, 2, 16, EXMY_SPECIALS_FNUZ},
    {"float8_e3m4", NULL, 3, 4, 3, EXMY_SPECIALS_IEEE},
    {"float8_e4m3", NULL, 4, 3, 7, EXMY_SPECIALS_IEEE},
    {"float6_e2m3fn", "e2m3", 2, 3, 1, EXMY_SPECIALS_NONE},
    {"float6_e3m2fn", "e3m2", 3, 2, 3, EXMY_SPECIALS_NONE},
    {"float4_e2m1fn", "e2m1", 2, 1, 1, EXMY_SPECIALS_NONE},
    {"float8_e8m0fnu", "e8m0", 8, 0, 127, EXMY_SPECIALS_E8M0},
    {"bfloat16", "bf16", 8, 7, 127, EXMY_SPECIALS_IEEE},
    {"float16", "fp16", 5, 10, 15, EXMY_SPECIALS_IEEE},
    {"float32", "fp32", 8, 23, 127, EXMY_SPECIALS_IEEE},
};

static int name_equal(const char *a, const char *b) {
  for (; *a && *b; a++, b++)
    if (tolower((unsigned char)*a) != tolower((unsigned char)*b)) return 0;
  return *a == *b;
}

int exmy_format_make(const char *name, int exp_bits, int man_bits, int bias,
                     exmy_specials specials, exmy_format *out) {
  if (exp_bits < 1 || exp_bits > 8 || man_bits < 0 || man_bits > 23) return -1;
  exmy_format f;
  memset(&f, 0, sizeof f);
  snprintf(f.name, sizeof f.name, "%s", name ? name : "");
  f.exp_bits = exp_bits;
  f.man_bits = man_bits;
  f.bias = bias;
  f.specials = specials;
  f.is_signed = specials != EXMY_SPECIALS_E8M0;
  f.bits = exp_bits + man_bits + (f.is_signed ? 1 : 0);
  const uint32_t all = (uint32_t)1 << (exp_bits + man_bits); /* magnitude codes */
  f.sign_mask = f.is_signed ? all : 0;
  f.inf_code = EXMY_NO_CODE;
  f.nan_code = EXMY_NO_CODE;
  switch (specials) {
    case EXMY_SPECIALS_IEEE:
      f.inf_code = (((uint32_t)1 << exp_bits) - 1) << man_bits;
      if (man_bits > 0) f.nan_code = f.inf_code | ((uint32_t)1 << (man_bits - 1));
      f.max_code = f.inf_code - 1;
      break;
    case EXMY_SPECIALS_FN:
      if (exp_bits + man_bits < 2) return -1;
      f.nan_code = all - 1;
      f.max_code = all - 2;
      break;
    case EXMY_SPECIALS_FNUZ:
      f.nan_code = f.sign_mask;
      f.max_code = all - 1;
      break;
    case EXMY_SPECIALS_NONE:
      f.max_code = all - 1;
      break;
    case EXMY_SPECIALS_E8M0:
      if (man_bits != 0) return -1;
      f.nan_code = all - 1;
      f.max_code = all - 2;
      break;
    default:
      return -1;
  }
  /* E8M0 has no subnormal field: code 0 is the smallest normal 2^-bias. */
  f.emin = specials == EXMY_SPECIALS_E8M0 ? -bias : 1 - bias;
  f.emax = (int)(f.max_code >> man_bits) - bias;
  if (specials == EXMY_SPECIALS_IEEE && f.max_code >> man_bits == 0) {
    /* E = 1: only subnormals below the reserved exponent */
    f.emax = f.emin - 1;
  }
  /* a format must have a positive finite value (e1m0 IEEE-like has none) */
  if (f.max_code == 0 && specials != EXMY_SPECIALS_E8M0) return -1;
  /* every finite value must be a float32: no overflow, no underflow */
  if (f.emax > 127) return -1;
  if (f.emin - man_bits < -149) return -1;
  *out = f;
  return 0;
}

int exmy_format_parse(const char *name, exmy_format *out) {
  if (!name) return -1;
  for (size_t i = 0; i < sizeof kNamedFormats / sizeof kNamedFormats[0]; i++) {
    const named_format *r = &kNamedFormats[i];
    if (name_equal(name, r->name) || (r->alias && name_equal(name, r->alias)))
      return exmy_format_make(r->name, r->exp_bits, r->man_bits, r->bias,
                              r->specials, out);
  }
  /* generic IEEE-like eXmY */
  /* digits only: strtol alone would also take "e+4m3" or "e 4m3" */
  if (tolower((unsigned char)name[0]) != 'e' || !isdigit((unsigned char)name[1]))
    return -1;
  char *end;
  long e = strtol(name + 1, &end, 10);
  if (end == name + 1 || tolower((unsigned char)*end) != 'm') return -1;
  const char *mstart = end + 1;
  if (!isdigit((unsigned char)*mstart)) return -1;
  long m = strtol(mstart, &end, 10);
  if (*end != '\0' || e < 1 || e > 8 || m < 0 || m > 23) return -1;
  char canonical[32];
  snprintf(canonical, sizeof canonical, "e%ldm%ld", e, m);
  return exmy_format_make(canonical, (int)e, (int)m, (1 << (e - 1)) - 1,
                          EXMY_SPECIALS_IEEE, out);
}

size_t exmy_code_bytes(const exmy_format *f) {
  return f->bits <= 8 ? 1 : f->bits <= 16 ? 2 : 4;
}

void exmy_format_get_info(const exmy_format *f, exmy_format_info *info) {
  memset(info, 0, sizeof *info);
  const int M = f->man_bits;
  info->max = exmy_core_decode(f, f->max_code);
  info->has_inf = f->inf_code != EXMY_NO_CODE;
  info->has_nan = f->nan_code != EXMY_NO_CODE;
  info->has_negative_zero = f->is_signed && f->specials != EXMY_SPECIALS_FNUZ;
  info->has_subnormals = f->specials != EXMY_SPECIALS_E8M0 && M > 0;
  if (f->specials == EXMY_SPECIALS_E8M0) {
    info->min_normal = exmy_core_decode(f, 0);
    info->min_subnormal = info->min_normal;
  } else {
    info->min_normal = f->max_code >> M ? exmy_core_decode(f, 1u << M)
                                        : (float)ldexp(1.0, f->emin);
    info->min_subnormal = exmy_core_decode(f, M > 0 ? 1u : 1u << M);
  }
  info->epsilon = (float)ldexp(1.0, -M);
  /* magnitude codes 0..max_code are finite */
  uint64_t magnitudes = (uint64_t)f->max_code + 1;
  if (f->specials == EXMY_SPECIALS_E8M0) {
    info->finite_codes = magnitudes;
    info->finite_values = magnitudes;
  } else if (f->specials == EXMY_SPECIALS_FNUZ) {
    info->finite_codes = 2 * magnitudes - 1; /* no -0: that code is NaN */
    info->finite_values = 2 * magnitudes - 1;
  } else {
    info->finite_codes = 2 * magnitudes;
    info->finite_values = 2 * magnitudes - 1; /* +0 == -0 */
  }
}

int exmy_rounding_parse(const char *name, exmy_rounding *out) {
  static const char *const names[] = {"rne", "rna", "rz", "ru", "rd", "ro", "sr"};
  for (int i = 0; i < 7; i++)
    if (name && name_equal(name, names[i])) {
      *out = (exmy_rounding)i;
      return 0;
    }
  return -1;
}

const char *exmy_rounding_name(exmy_rounding mode) {
  static const char *const names[] = {"rne", "rna", "rz", "ru", "rd", "ro", "sr"};
  return (unsigned)mode < 7 ? names[mode] : "invalid";
}

int exmy_rounding_opts_check(const exmy_rounding_opts *o) {
  if ((unsigned)o->mode > EXMY_SR) return -1;
  if (o->sr_bits < 0 || o->sr_bits > 32) return -1;
  return 0;
}
