/* The independent exact reference: see oracle.h. */
#include "tests/lib/oracle.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The value of a magnitude code read as sign-less fields, with the exponent
 * field unbounded (so that the code after the largest also has a value). */
static double field_value(int man_bits, int bias, oracle_kind kind,
                          uint32_t mag) {
  if (kind == ORACLE_E8M0) return ldexp(1.0, (int)mag - bias);
  uint32_t e = mag >> man_bits;
  uint32_t m = mag & ((1u << man_bits) - 1u);
  if (e == 0) return ldexp((double)m, 1 - bias - man_bits); /* subnormal */
  return ldexp((double)((1u << man_bits) + m), (int)e - bias - man_bits);
}

static oracle_class classify(const oracle_format *f, uint32_t code) {
  const uint32_t mag_bits = (uint32_t)(f->exp_bits + f->man_bits);
  const uint32_t all_ones = (1u << mag_bits) - 1u;
  const uint32_t mag = code & all_ones;
  const uint32_t e = mag >> f->man_bits;
  const uint32_t m = mag & ((1u << f->man_bits) - 1u);
  switch (f->kind) {
    case ORACLE_IEEE:
      if (e == (1u << f->exp_bits) - 1u) return m == 0 ? ORACLE_INF : ORACLE_NAN;
      return ORACLE_NUMBER;
    case ORACLE_FN:
      return mag == all_ones ? ORACLE_NAN : ORACLE_NUMBER;
    case ORACLE_FNUZ:
      return code == f->sign_bit ? ORACLE_NAN : ORACLE_NUMBER;
    case ORACLE_FINITE:
      return ORACLE_NUMBER;
    case ORACLE_E8M0:
      return code == all_ones ? ORACLE_NAN : ORACLE_NUMBER;
  }
  return ORACLE_NAN;
}

typedef struct {
  double v;
  uint32_t code;
} value_code;

static int by_value(const void *a, const void *b) {
  double x = ((const value_code *)a)->v, y = ((const value_code *)b)->v;
  return x < y ? -1 : x > y;
}

oracle_format *oracle_format_new(const char *name, int exp_bits, int man_bits,
                                 int bias, oracle_kind kind) {
  const int is_signed = kind != ORACLE_E8M0;
  const int bits = exp_bits + man_bits + is_signed;
  if (exp_bits < 1 || man_bits < 0 || bits > 16) return NULL;
  if (kind == ORACLE_E8M0 && man_bits != 0) return NULL;

  oracle_format *f = calloc(1, sizeof *f);
  snprintf(f->name, sizeof f->name, "%s", name);
  f->exp_bits = exp_bits;
  f->man_bits = man_bits;
  f->bias = bias;
  f->kind = kind;
  f->is_signed = is_signed;
  f->bits = bits;
  f->ncodes = 1u << bits;
  const uint32_t nmag = 1u << (exp_bits + man_bits);
  f->sign_bit = is_signed ? nmag : 0;
  f->code_class = calloc(f->ncodes, sizeof *f->code_class);
  f->code_value = calloc(f->ncodes, sizeof *f->code_value);

  for (uint32_t c = 0; c < f->ncodes; c++) {
    const int negative = (c & f->sign_bit) != 0;
    const uint32_t mag = c & (nmag - 1u);
    f->code_class[c] = classify(f, c);
    double v = f->code_class[c] == ORACLE_NAN  ? NAN
               : f->code_class[c] == ORACLE_INF ? INFINITY
                   : field_value(man_bits, bias, kind, mag);
    f->code_value[c] = negative ? -v : v;
    if (f->code_class[c] == ORACLE_NUMBER) f->finite_codes++;
  }

  /* the sorted non-negative finite values */
  value_code *vc = calloc(nmag, sizeof *vc);
  size_t n = 0;
  for (uint32_t mag = 0; mag < nmag; mag++)
    if (f->code_class[mag] == ORACLE_NUMBER) {
      vc[n].v = f->code_value[mag];
      vc[n].code = mag;
      n++;
    }
  qsort(vc, n, sizeof *vc, by_value);
  for (size_t i = 1; i < n; i++)
    if (!(vc[i - 1].v < vc[i].v)) {
      fprintf(stderr, "oracle: %s has two codes of value %g\n", name, vc[i].v);
      abort();
    }
  f->count = n;
  f->mag = calloc(n, sizeof *f->mag);
  f->mag_code = calloc(n, sizeof *f->mag_code);
  for (size_t i = 0; i < n; i++) {
    f->mag[i] = vc[i].v;
    f->mag_code[i] = vc[i].code;
  }
  free(vc);

  f->max = f->mag[n - 1];
  f->max_code = f->mag_code[n - 1];
  f->beyond_code = f->max_code + 1u;
  f->beyond = field_value(man_bits, bias, kind, f->beyond_code);
  f->min_subnormal = f->mag[0] > 0 ? f->mag[0] : f->mag[1];
  f->min_normal = kind == ORACLE_E8M0 ? f->mag[0] : ldexp(1.0, 1 - bias);
  f->has_normals = f->min_normal <= f->max;
  f->has_subnormals = f->min_subnormal < f->min_normal;
  f->has_inf = kind == ORACLE_IEEE;
  f->inf_code = ((1u << exp_bits) - 1u) << man_bits;
  f->has_nan = kind != ORACLE_FINITE && !(kind == ORACLE_IEEE && man_bits == 0);
  f->signed_nan = kind == ORACLE_FN || (kind == ORACLE_IEEE && man_bits > 0);
  f->has_negative_zero = is_signed && kind != ORACLE_FNUZ;

  /* without subnormals: 0 and the normal values */
  f->fmag = calloc(n, sizeof *f->fmag);
  f->fmag_code = calloc(n, sizeof *f->fmag_code);
  for (size_t i = 0; i < n; i++)
    if (f->mag[i] == 0 || f->mag[i] >= f->min_normal) {
      f->fmag[f->fcount] = f->mag[i];
      f->fmag_code[f->fcount] = f->mag_code[i];
      f->fcount++;
    }
  return f;
}

void oracle_format_free(oracle_format *f) {
  if (!f) return;
  free(f->code_class);
  free(f->code_value);
  free(f->mag);
  free(f->mag_code);
  free(f->fmag);
  free(f->fmag_code);
  free(f);
}

/* ------------------------------------------------------------ results */

static oracle_result number(const oracle_format *f, int neg, double mag,
                            uint32_t mag_code) {
  oracle_result r = {ORACLE_NUMBER, neg, mag, mag_code};
  if (mag == 0 && !f->has_negative_zero) r.neg = 0;
  if (r.neg) r.code |= f->sign_bit;
  return r;
}

static oracle_result max_result(const oracle_format *f, int neg) {
  return number(f, neg, f->max, f->max_code);
}

static oracle_result nan_result(const oracle_format *f, int neg) {
  oracle_result r = {ORACLE_NAN, 0, NAN, 0};
  switch (f->kind) {
    case ORACLE_IEEE: /* a quiet NaN: top mantissa bit set */
      r.neg = neg;
      r.code = f->inf_code | (1u << (f->man_bits - 1));
      break;
    case ORACLE_FN:
      r.neg = neg;
      r.code = f->sign_bit - 1u;
      break;
    case ORACLE_FNUZ:
      r.code = f->sign_bit;
      break;
    default: /* E8M0 */
      r.code = f->ncodes - 1u;
      break;
  }
  if (r.neg) r.code |= f->sign_bit;
  return r;
}

static oracle_result inf_result(const oracle_format *f, int neg) {
  oracle_result r = {ORACLE_INF, neg, INFINITY,
                     f->inf_code | (neg ? f->sign_bit : 0)};
  return r;
}

/* exmy.h: beyond the largest finite value (or infinite), without saturation:
 * inf where the format has inf, NaN where it has only NaN, max otherwise. */
static oracle_result overflow(const oracle_format *f, int neg, int saturate) {
  if (saturate) return max_result(f, neg);
  if (f->has_inf) return inf_result(f, neg);
  if (f->has_nan) return nan_result(f, neg);
  return max_result(f, neg);
}

/* ------------------------------------------------------------ rounding */

void oracle_locate(const oracle_format *f, float x, int saturate, int flush,
                   oracle_loc *loc) {
  memset(loc, 0, sizeof *loc);
  loc->neg = signbit(x) != 0;
  loc->a = fabs((double)x);
  const int neg = loc->neg;
  const double a = loc->a;

  loc->special = 1;
  if (isnan(x)) {
    /* exmy.h: NaN where the format has one (sign kept where NaNs are signed);
     * IEEE-like with M = 0 has no NaN code: inf; finite-only formats: max. */
    if (f->has_nan) loc->fixed = nan_result(f, neg);
    else if (f->has_inf) loc->fixed = inf_result(f, neg);
    else loc->fixed = max_result(f, neg);
    return;
  }
  if (f->kind == ORACLE_E8M0) {
    /* no zero, no sign: zero and negatives are NaN, or the smallest value
     * when saturating; below the smallest value (2^-127) the only candidate
     * is that value. */
    if (neg || a == 0) {
      loc->fixed = saturate ? number(f, 0, f->mag[0], f->mag_code[0])
                            : nan_result(f, 0);
      return;
    }
    if (isinf(x)) {
      loc->fixed = overflow(f, 0, saturate);
      return;
    }
    if (a < f->mag[0]) {
      loc->fixed = number(f, 0, f->mag[0], f->mag_code[0]);
      return;
    }
  }
  if (isinf(x)) {
    loc->fixed = overflow(f, neg, saturate);
    return;
  }
  if (a == 0) {
    loc->fixed = number(f, neg, 0.0, 0);
    return;
  }
  loc->special = 0;

  if (a > f->max) {
    loc->lo = f->max;
    loc->lo_code = f->max_code;
    loc->hi = f->beyond;
    loc->hi_code = f->beyond_code;
    return;
  }
  const double *v = flush ? f->fmag : f->mag;
  const uint32_t *code = flush ? f->fmag_code : f->mag_code;
  size_t n = flush ? f->fcount : f->count;
  /* largest i with v[i] <= a; v[0] <= a <= v[n-1] here */
  size_t lo = 0, hi = n - 1;
  while (lo < hi) {
    size_t mid = lo + (hi - lo + 1) / 2;
    if (v[mid] <= a) lo = mid;
    else hi = mid - 1;
  }
  loc->lo = v[lo];
  loc->lo_code = code[lo];
  if (v[lo] == a) {
    loc->exact = 1;
    loc->hi = a;
    loc->hi_code = code[lo];
    return;
  }
  loc->hi = v[lo + 1];
  loc->hi_code = code[lo + 1];
  loc->flush_gap = flush && f->kind != ORACLE_E8M0 && a < f->min_normal;
}

/* The result of choosing the lower (up = 0) or upper neighbour in magnitude. */
static oracle_result choose(const oracle_format *f, const oracle_loc *loc,
                            int up, exmy_rounding mode, int saturate) {
  if (!up) return number(f, loc->neg, loc->lo, loc->lo_code);
  if (loc->a > f->max) {
    /* the upper neighbour is out of range: IEEE 754 overflow, except that
     * the modes rounding toward zero (and ro, per exmy.h) give max */
    int toward_zero = mode == EXMY_RZ || mode == EXMY_RO ||
                      (mode == EXMY_RU && loc->neg) ||
                      (mode == EXMY_RD && !loc->neg);
    return toward_zero ? max_result(f, loc->neg)
                       : overflow(f, loc->neg, saturate);
  }
  return number(f, loc->neg, loc->hi, loc->hi_code);
}

oracle_result oracle_apply(const oracle_format *f, const oracle_loc *loc,
                           exmy_rounding mode, int saturate) {
  if (loc->special) return loc->fixed;
  if (loc->exact) return number(f, loc->neg, loc->lo, loc->lo_code);
  const double below = loc->a - loc->lo, above = loc->hi - loc->a; /* exact */
  int up = 0;
  switch (mode) {
    case EXMY_RNE:
    case EXMY_RNA:
      if (below < above) up = 0;
      else if (above < below) up = 1;
      /* a tie: rna, E8M0 (ml_dtypes) and the flushed gap (exmy.h) go up;
       * rne goes to the neighbour whose code is even */
      else if (mode == EXMY_RNA || f->kind == ORACLE_E8M0 || loc->flush_gap)
        up = 1;
      else
        up = (loc->lo_code & 1u) != 0;
      break;
    case EXMY_RZ:
      up = 0;
      break;
    case EXMY_RU:
      up = !loc->neg;
      break;
    case EXMY_RD:
      up = loc->neg;
      break;
    case EXMY_RO:
      /* the neighbour with the odd code; in the flushed gap xmin (exmy.h) */
      up = loc->flush_gap ? 1 : (loc->lo_code & 1u) == 0;
      break;
    default:
      fprintf(stderr, "oracle_apply: mode %d is not deterministic\n", mode);
      abort();
  }
  return choose(f, loc, up, mode, saturate);
}

double oracle_sr(const oracle_format *f, const oracle_loc *loc, int saturate,
                 oracle_result *down, oracle_result *up) {
  if (loc->special || loc->exact) {
    *down = *up = oracle_apply(f, loc, EXMY_RZ, saturate);
    return 0.0;
  }
  *down = choose(f, loc, 0, EXMY_SR, saturate);
  *up = choose(f, loc, 1, EXMY_SR, saturate);
  if (loc->a >= loc->hi) { /* at or past the value after max: always over */
    *down = *up;
    return 1.0;
  }
  return (loc->a - loc->lo) / (loc->hi - loc->lo); /* exact: gap is 2^k */
}

double oracle_sr_prob(double p_up, int sr_bits) {
  if (sr_bits == 0) sr_bits = 32;
  return floor(ldexp(p_up, sr_bits)) / ldexp(1.0, sr_bits);
}

int oracle_sr_goes_up(double p_up, int sr_bits, uint32_t u) {
  if (sr_bits == 0) sr_bits = 32;
  if (p_up >= 1.0) return 1;
  double top = floor(ldexp(p_up, sr_bits));        /* R-bit integer, exact */
  double rnd = (double)(u >> (32 - sr_bits));      /* R-bit integer */
  return top + rnd >= ldexp(1.0, sr_bits);         /* the carry */
}

oracle_result oracle_round(const oracle_format *f, float x, exmy_rounding mode,
                           int saturate, int flush, int sr_bits, uint32_t u) {
  oracle_loc loc;
  oracle_locate(f, x, saturate, flush, &loc);
  if (mode != EXMY_SR) return oracle_apply(f, &loc, mode, saturate);
  oracle_result down, up;
  double p = oracle_sr(f, &loc, saturate, &down, &up);
  return oracle_sr_goes_up(p, sr_bits, u) ? up : down;
}

float oracle_result_float(const oracle_format *f, oracle_result r) {
  (void)f;
  if (r.cls == ORACLE_NAN) return NAN;
  if (r.cls == ORACLE_INF) return r.neg ? -INFINITY : INFINITY;
  float v = (float)r.value; /* exact: every value is a float32 */
  return r.neg ? -v : v;
}

int oracle_code_matches(const oracle_format *f, oracle_result want,
                        uint32_t got) {
  if (want.cls != ORACLE_NAN) return got == want.code;
  if (got >= f->ncodes || f->code_class[got] != ORACLE_NAN) return 0;
  return !f->signed_nan || ((got & f->sign_bit) != 0) == (want.neg != 0);
}

int oracle_float_matches(oracle_result want, float got) {
  if (want.cls == ORACLE_NAN) return isnan(got);
  float w = oracle_result_float(NULL, want);
  uint32_t a, b;
  memcpy(&a, &w, 4);
  memcpy(&b, &got, 4);
  return a == b;
}
