/*
 * An independent exact reference for the exmy tests.
 *
 * It shares no code with lib/round_core.h and works the way one would by
 * hand: it lists every code of a format with its value, computed from the
 * sign, exponent and mantissa fields in double arithmetic (ldexp), sorts the
 * finite values, and rounds a float32 x (a double, exactly) by finding its two
 * neighbours in that list with a binary search and applying each mode's rule
 * to the exact distances.  The rules are those written in lib/exmy.h (overflow,
 * saturation, flushed subnormals, E8M0, NaN), transcribed independently.
 *
 * Only lib/exmy.h's enum exmy_rounding is borrowed, as a name for the modes.
 * Every double computed here is exact: every value of a format is a float32,
 * a float32 minus a neighbouring value fits in 53 bits, and gaps are powers of
 * two, so distances, midpoints and probabilities carry no rounding error.
 */
#ifndef EXMY_TESTS_LIB_ORACLE_H
#define EXMY_TESTS_LIB_ORACLE_H

#include <stddef.h>
#include <stdint.h>

#include "lib/exmy.h"

/* How a format spends its codes (same meanings as exmy_specials, own names). */
typedef enum {
  ORACLE_IEEE,   /* top exponent field: inf (mantissa 0), NaN (mantissa != 0) */
  ORACLE_FN,     /* no inf; only the all-ones magnitude is NaN */
  ORACLE_FNUZ,   /* no inf, no -0; the code 1000...0 is the only NaN */
  ORACLE_FINITE, /* every code is a number */
  ORACLE_E8M0,   /* unsigned powers of two 2^(c-bias); all-ones is NaN */
} oracle_kind;

typedef enum { ORACLE_NUMBER, ORACLE_INF, ORACLE_NAN } oracle_class;

typedef struct {
  char name[32];
  int exp_bits, man_bits, bias;
  oracle_kind kind;
  int is_signed, bits;
  uint32_t ncodes;   /* 2^bits */
  uint32_t sign_bit; /* 0 for unsigned formats */

  /* every code: its class and, for numbers and infinities, its value */
  oracle_class *code_class;
  double *code_value;

  /* the non-negative finite values in increasing order with their codes */
  size_t count;
  double *mag;
  uint32_t *mag_code;
  /* the same without the subnormal values (flush_subnormals) */
  size_t fcount;
  double *fmag;
  uint32_t *fmag_code;

  double max, min_normal, min_subnormal;
  uint32_t max_code;
  /* The value the code after max_code would have if the exponent field were
   * unbounded: the upper neighbour of max that IEEE 754's overflow rule
   * rounds to before it sees that it is out of range. */
  double beyond;
  uint32_t beyond_code;
  uint32_t inf_code;     /* +inf's code, where the format has inf */
  int has_inf, has_nan, has_negative_zero, has_subnormals, signed_nan;
  int has_normals;       /* false for IEEE-like E = 1: flushing is meaningless */
  size_t finite_codes;   /* codes that decode to numbers */
} oracle_format;

/* The result of a rounding: a number (value, with the sign of zero in `neg`),
 * an infinity or a NaN, and the code the oracle expects.  For NaN the code is
 * one NaN code of the right sign; oracle_code_matches accepts any NaN code
 * of that sign, since lib/exmy.h does not fix the NaN payload. */
typedef struct {
  oracle_class cls;
  int neg;
  double value;
  uint32_t code;
} oracle_result;

/* Builds the table of a format from its fields; NULL if it is not one the
 * oracle can list (more than 16 bits). */
oracle_format *oracle_format_new(const char *name, int exp_bits, int man_bits,
                                 int bias, oracle_kind kind);
void oracle_format_free(oracle_format *f);

/* Where x lies among the values of f (flushed or not). */
typedef struct {
  int special;       /* 1: the result is fixed already (NaN, inf, zero, E8M0) */
  oracle_result fixed;
  int neg;
  double a;          /* |x| */
  int exact;         /* a is a value of the format */
  double lo, hi;     /* neighbouring magnitudes lo < a < hi (hi may be beyond) */
  uint32_t lo_code, hi_code;
  int flush_gap;     /* lo = 0, hi = min_normal only because of flushing */
} oracle_loc;

void oracle_locate(const oracle_format *f, float x, int saturate, int flush,
                   oracle_loc *loc);
/* The result of a deterministic mode (not EXMY_SR) at a located input. */
oracle_result oracle_apply(const oracle_format *f, const oracle_loc *loc,
                           exmy_rounding mode, int saturate);
/* Stochastic rounding at a located input: the results of rounding down and up
 * (in magnitude) and the exact probability of up, (|x| - lo) / (hi - lo);
 * inputs with a fixed result give p_up = 0 and down = up = that result. */
double oracle_sr(const oracle_format *f, const oracle_loc *loc, int saturate,
                 oracle_result *down, oracle_result *up);
/* P(up) with an R-bit random integer added to the top R bits of the dropped
 * part, as lib/exmy.h documents: floor(2^R * p) / 2^R. */
double oracle_sr_prob(double p_up, int sr_bits);
/* Whether the documented sr rule rounds up for the 32-bit random word u. */
int oracle_sr_goes_up(double p_up, int sr_bits, uint32_t u);

/* One call: locate + apply (or + sr with the random word u). */
oracle_result oracle_round(const oracle_format *f, float x, exmy_rounding mode,
                           int saturate, int flush, int sr_bits, uint32_t u);

/* The float32 an oracle result stands for (NaN: a quiet NaN). */
float oracle_result_float(const oracle_format *f, oracle_result r);
/* Whether a code from the library is the oracle's result. */
int oracle_code_matches(const oracle_format *f, oracle_result want,
                        uint32_t got);
/* Whether a float32 from the library is the oracle's result. */
int oracle_float_matches(oracle_result want, float got);

#endif /* EXMY_TESTS_LIB_ORACLE_H */
