/* The table of named formats, the name parser and the per-format facts. */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/exmy.h"
#include "lib/format_core.h"
#include "lib/round_core.h"

/* The rows of EXMY_FORMAT_TABLE (lib/format_core.h) the parser reads. */
typedef struct {
  const char *name;
  const char *alias;
  int exp_bits, man_bits, bias;
  exmy_specials specials;
} named_format;

static const named_format kNamedFormats[] = {
#define EXMY_NAMED_FORMAT(id, name, alias, E, M, bias, specials, gpu) \
  {name, alias, E, M, bias, EXMY_SPECIALS_##specials},
    EXMY_FORMAT_TABLE(EXMY_NAMED_FORMAT)
#undef EXMY_NAMED_FORMAT
};

static int name_equal(const char *a, const char *b) {
  for (; *a && *b; a++, b++)
    if (tolower((unsigned char)*a) != tolower((unsigned char)*b)) return 0;
  return *a == *b;
}

int exmy_format_make(const char *name, int exp_bits, int man_bits, int bias,
                     exmy_specials specials, exmy_format *out) {
  if (exp_bits < 1 || exp_bits > 8 || man_bits < 0 || man_bits > 23) return -1;
  switch (specials) {
    case EXMY_SPECIALS_IEEE:
    case EXMY_SPECIALS_FNUZ:
    case EXMY_SPECIALS_NONE:
      break;
    case EXMY_SPECIALS_FN: /* the NaN code needs a code below it */
      if (exp_bits + man_bits < 2) return -1;
      break;
    case EXMY_SPECIALS_E8M0:
      if (man_bits != 0) return -1;
      break;
    default:
      return -1;
  }
  exmy_format f = exmy_format_fields(exp_bits, man_bits, bias, specials);
  snprintf(f.name, sizeof f.name, "%s", name ? name : "");
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
