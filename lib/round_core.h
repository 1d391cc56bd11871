/*
 * The reference conversion float32 -> code and code -> float32, as inline
 * functions of plain integer arithmetic so that the same text compiles for the
 * host (lib/reference.c) and the GPU (cuda/): the scalar reference and the GPU
 * kernels cannot drift apart.  The vectorised CPU kernels in cpu/ are written
 * separately and tested against this.
 *
 * The idea: in every format, codes of one sign are ordered like the values they
 * stand for, and consecutive codes are neighbouring values.  So rounding is
 * "truncate to a code, then maybe add one"; a mantissa carry flows into the
 * exponent by itself, and overflow is "the code went past max_code".
 */
#ifndef EXMY_ROUND_CORE_H
#define EXMY_ROUND_CORE_H

#include <stdint.h>

#include "lib/exmy.h"
#include "lib/hostdevice.h"

EXMY_HD uint32_t exmy_f32_bits(float x) {
  union { float f; uint32_t u; } v;
  v.f = x;
  return v.u;
}

EXMY_HD float exmy_bits_f32(uint32_t u) {
  union { float f; uint32_t u; } v;
  v.u = u;
  return v.f;
}

EXMY_HD int exmy_clz32(uint32_t x) {
#ifdef __CUDA_ARCH__
  return __clz(x);
#else
  return x ? __builtin_clz(x) : 32;
#endif
}

/* Should a value whose dropped part is the fraction F / 2^64 of the gap move
 * one step up (in magnitude)?  `odd`: the truncated code is odd (rne ties);
 * `negative`: the sign of x (directed modes); `random`: 32 uniform bits (sr). */
EXMY_HD int exmy_round_up(exmy_rounding mode, uint64_t frac, int inexact,
                          int odd, int negative, uint32_t random, int sr_bits) {
  const uint64_t half = (uint64_t)1 << 63;
  switch (mode) {
    case EXMY_RNE: return frac > half || (frac == half && odd);
    case EXMY_RNA: return frac >= half;
    case EXMY_RU: return inexact && !negative;
    case EXMY_RD: return inexact && negative;
    case EXMY_SR: {
      int r = sr_bits;
      uint64_t top = frac >> (64 - r);
      uint64_t rnd = (uint64_t)(random >> (32 - r));
      return (int)((top + rnd) >> r);
    }
    default: return 0; /* rz; ro is handled by the caller */
  }
}

/* The full code (sign included) for an out-of-range magnitude. */
EXMY_HD uint32_t exmy_overflow_code(const exmy_format *f, exmy_rounding mode,
                                    int saturate, uint32_t sign) {
  int negative = sign != 0;
  int toward_zero = mode == EXMY_RZ || mode == EXMY_RO ||
                    (mode == EXMY_RU && negative) ||
                    (mode == EXMY_RD && !negative);
  if (saturate || toward_zero) return sign | f->max_code;
  if (f->inf_code != EXMY_NO_CODE) return sign | f->inf_code;
  if (f->specials == EXMY_SPECIALS_FNUZ) return f->nan_code;
  if (f->nan_code != EXMY_NO_CODE) return sign | f->nan_code;
  return sign | f->max_code;
}

/* The code of a NaN input. */
EXMY_HD uint32_t exmy_nan_input_code(const exmy_format *f, uint32_t sign) {
  if (f->specials == EXMY_SPECIALS_FNUZ || f->specials == EXMY_SPECIALS_E8M0)
    return f->nan_code;
  if (f->nan_code != EXMY_NO_CODE) return sign | f->nan_code;
  /* no NaN code: IEEE-like with M = 0 gives inf, finite-only formats max */
  if (f->inf_code != EXMY_NO_CODE) return sign | f->inf_code;
  return sign | f->max_code;
}

/* float32 -> code under (mode, saturate, flush, sr_bits); `random` is used
 * only by sr.  sr_bits must be 1..32. */
EXMY_HD uint32_t exmy_core_encode(const exmy_format *f, exmy_rounding mode,
                                  int saturate, int flush, int sr_bits,
                                  float x, uint32_t random) {
  const uint32_t xb = exmy_f32_bits(x);
  const uint32_t abs_bits = xb & 0x7FFFFFFFu;
  const int negative = (int)(xb >> 31);
  const int is_e8m0 = f->specials == EXMY_SPECIALS_E8M0;
  const uint32_t sign = negative ? f->sign_mask : 0;
  const int M = f->man_bits;

  if (abs_bits > 0x7F800000u) return exmy_nan_input_code(f, sign);

  if (is_e8m0) {
    /* Unsigned and without zero: ml_dtypes gives NaN for zero and negatives,
     * and the smallest value 2^-127 when saturating. */
    if (abs_bits == 0 || negative) return saturate ? 0u : f->nan_code;
  }
  if (abs_bits == 0x7F800000u)
    return saturate ? (sign | f->max_code)
                    : exmy_overflow_code(f, EXMY_RNE, 0, sign);
  if (abs_bits == 0) {
    return f->specials == EXMY_SPECIALS_FNUZ ? 0u : sign;
  }

  /* |x| = sig * 2^(e - 23) with the leading bit of sig at bit 23. */
  uint32_t sig;
  int e;
  if (abs_bits >> 23) {
    sig = (abs_bits & 0x7FFFFFu) | 0x800000u;
    e = (int)(abs_bits >> 23) - 127;
  } else { /* float32 subnormal: normalise */
    int shift = exmy_clz32(abs_bits) - 8;
    sig = abs_bits << shift;
    e = -126 - shift;
  }

  /* Truncate to a code: `code` counts quanta, `drop` bits of sig fall off. */
  uint32_t code, step = 1;
  int drop;
  int odd_override = -1; /* forces the tie rule: 1 = ties go up */
  if (e >= f->emin) {
    drop = 23 - M;
    code = ((uint32_t)(e - f->emin) << M) + (sig >> drop);
    if (is_e8m0) {
      code -= 1u; /* no subnormal codes: code 0 is already 2^emin */
      odd_override = 1; /* ml_dtypes: the kept bit is the implicit 1 */
    }
  } else if (is_e8m0) {
    return 0u; /* below 2^-127 the nearest, and only, candidate is 2^-127 */
  } else if (flush) {
    /* no subnormals: the neighbours are 0 and xmin = 2^emin (code 1 << M) */
    drop = 23 + (f->emin - e);
    code = 0;
    step = (uint32_t)1 << M;
    odd_override = 1; /* ties to xmin, as chop and CPFloat do */
  } else {
    drop = 23 - M + (f->emin - e);
    code = drop < 32 ? sig >> drop : 0u;
  }

  uint32_t rem = drop == 0 ? 0u : drop < 32 ? sig & ((1u << drop) - 1u) : sig;
  int inexact = rem != 0;
  /* the dropped part as a 64-bit binary fraction of the gap */
  uint64_t frac = drop == 0   ? 0
                  : drop <= 64 ? (uint64_t)rem << (64 - drop)
                  : drop - 64 < 32 ? (uint64_t)(rem >> (drop - 64))
                                   : 0;

  if (mode == EXMY_RO) {
    if (inexact) code = step > 1 ? step : (code | 1u);
  } else {
    int odd = odd_override >= 0 ? odd_override : (int)(code & 1u);
    if (exmy_round_up(mode, frac, inexact, odd, negative, random, sr_bits))
      code += step;
  }

  if (code > f->max_code) return exmy_overflow_code(f, mode, saturate, sign);
  if (code == 0 && f->specials == EXMY_SPECIALS_FNUZ) return 0u;
  return sign | code;
}

/* code -> float32.  Bits above the format's width are ignored. */
EXMY_HD float exmy_core_decode(const exmy_format *f, uint32_t code) {
  const int M = f->man_bits;
  code &= f->bits >= 32 ? 0xFFFFFFFFu : ((1u << f->bits) - 1u);
  const uint32_t sign_bit = (code & f->sign_mask) ? 0x80000000u : 0u;
  const uint32_t mag = code & ~f->sign_mask;
  const uint32_t qnan = 0x7FC00000u;

  switch (f->specials) {
    case EXMY_SPECIALS_E8M0:
      if (code == f->nan_code) return exmy_bits_f32(qnan);
      break;
    case EXMY_SPECIALS_FNUZ:
      if (code == f->nan_code) return exmy_bits_f32(qnan);
      break;
    case EXMY_SPECIALS_FN:
      if (mag == f->nan_code) return exmy_bits_f32(sign_bit | qnan);
      break;
    case EXMY_SPECIALS_IEEE:
      if (mag == f->inf_code) return exmy_bits_f32(sign_bit | 0x7F800000u);
      if (mag > f->inf_code) return exmy_bits_f32(sign_bit | qnan);
      break;
    default:
      break;
  }

  /* value = mantissa * 2^(exponent - M), built directly as float32 bits. */
  uint32_t field = mag >> M, man = mag & ((1u << M) - 1u);
  uint32_t significand;
  int exponent; /* of the significand's unit bit */
  if (f->specials == EXMY_SPECIALS_E8M0) {
    significand = 1u;
    exponent = (int)field - f->bias;
  } else if (field == 0) {
    if (man == 0) return exmy_bits_f32(sign_bit);
    significand = man;
    exponent = f->emin - M;
  } else {
    significand = man | (1u << M);
    exponent = (int)field - f->bias - M;
  }
  /* normalise significand to 24 bits with the leading one at bit 23 */
  int lead = 31 - exmy_clz32(significand);
  int e = exponent + lead; /* exponent of the leading bit */
  uint32_t frac = (significand << (23 - lead)) & 0x7FFFFFu;
  if (e >= -126) return exmy_bits_f32(sign_bit | ((uint32_t)(e + 127) << 23) | frac);
  /* float32 subnormal: exact because every format is a subset of float32 */
  uint32_t full = (significand << (23 - lead)) >> (-126 - e);
  return exmy_bits_f32(sign_bit | full);
}

#endif /* EXMY_ROUND_CORE_H */
