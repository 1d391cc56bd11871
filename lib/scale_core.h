/*
 * The arithmetic of the scaling recipes, written once for the host (cpu/) and
 * the GPU (cuda/), as lib/round_core.h is for rounding: the scale from an
 * amax (Transformer Engine's compute_scale_from_amax), the delayed-scaling
 * update of that scale, and the OCP MX shared exponent.  A recipe differs
 * from another in which amax it feeds these, never in the arithmetic.
 *
 * Float operations that nvcc could contract or approximate are written as
 * exmy_fdiv_rn (IEEE division on both sides); the rest is integer arithmetic
 * on float bits, or products of powers of two, which are exact.
 */
#ifndef EXMY_SCALE_CORE_H
#define EXMY_SCALE_CORE_H

#include <math.h>
#include <stdint.h>

#include "lib/hostdevice.h"
#include "lib/round_core.h"

/* a / b, a + b, a - b, a * b, sqrt(a), each rounded once to nearest even: on
 * the device the intrinsics that nvcc never contracts into a fused
 * multiply-add nor approximates, on the host C's operators (ISO C mode
 * contracts nothing; x86-64-v2 has no FMA). */
EXMY_HD_BINARY(float, exmy_fdiv_rn, __fdiv_rn(a, b), a / b)
EXMY_HD_BINARY(float, exmy_fadd_rn, __fadd_rn(a, b), a + b)
EXMY_HD_BINARY(float, exmy_fsub_rn, __fsub_rn(a, b), a - b)
EXMY_HD_BINARY(float, exmy_fmul_rn, __fmul_rn(a, b), a * b)
EXMY_HD float exmy_fsqrt_rn(float a) {
#ifdef __CUDA_ARCH__
  return __fsqrt_rn(a);
#else
  return sqrtf(a);
#endif
}

/* 2^p as float32 for p in [-149, 127], exactly. */
EXMY_HD float exmy_pow2f(int p) {
  return p >= -126 ? exmy_bits_f32((uint32_t)(p + 127) << 23)
                   : exmy_bits_f32(1u << (p + 149));
}

/* floor(log2 a) for finite a > 0 (float32 subnormals included). */
EXMY_HD int exmy_floor_log2f(float a) {
  const uint32_t b = exmy_f32_bits(a);
  if (b >= 0x00800000u) return (int)(b >> 23) - 127;
  return (31 - exmy_clz32(b)) - 149;
}

/* The largest power of two <= s, for finite s > 0. */
EXMY_HD float exmy_floor_pow2f(float s) {
  const uint32_t b = exmy_f32_bits(s);
  return b >= 0x00800000u ? exmy_bits_f32(b & 0xFF800000u)
                          : exmy_bits_f32(1u << (31 - exmy_clz32(b)));
}

/* Current scaling (EXMY_SCALING_TENSOR, per group for GROUP): s = (fmax /
 * amax) · 2^-margin in float32, fmax the format's largest finite value,
 * rounded down to a power of two if pow2; 1 where amax is 0 or not finite,
 * or where s would not be a positive finite float.  The division rounds once,
 * and so does the conversion of the double product (exact: a float times a
 * power of two), exactly as ldexpf(fmax / amax, -margin) would. */
EXMY_HD float exmy_core_scale_from_amax(float fmax, float amax, int margin,
                                        int pow2) {
  if (!(amax > 0.0f) || !isfinite(amax)) return 1.0f;
  float s = (float)((double)exmy_fdiv_rn(fmax, amax) * exp2((double)-margin));
  if (!isfinite(s) || !(s > 0.0f)) return 1.0f;
  if (pow2) s = exmy_floor_pow2f(s);
  return s;
}

/* Delayed scaling's update after a call (Transformer Engine's
 * DelayedScaling): amax goes into slot `latest` of the history (len slots);
 * the scale is recomputed from the history's max, or from amax itself if
 * most_recent; where that amax is 0 or not finite, *scale and *scale_inv keep
 * their values, as TE keeps the previous scale. */
EXMY_HD void exmy_core_delayed_update(float *history, int len, int latest,
                                      float amax, int most_recent, float fmax,
                                      int margin, int pow2, float *scale,
                                      float *scale_inv) {
  history[latest] = amax;
  float use = amax;
  if (!most_recent)
    for (int i = 0; i < len; i++)
      if (history[i] > use) use = history[i];
  if (!(use > 0.0f) || !isfinite(use)) return;
  const float s = exmy_core_scale_from_amax(fmax, use, margin, pow2);
  *scale = s;
  *scale_inv = exmy_fdiv_rn(1.0f, s);
}

/* The OCP MX v1.0 shared exponent (6.3) of a block whose largest finite |x|
 * is amax (finite, >= 0): X = floor(log2(amax)) - emax of the element
 * format, clamped to E8M0's [-127, 127]; -127 for an all-zero block.  The
 * block is scaled by 2^-X and its E8M0 scale code is X + 127. */
EXMY_HD int exmy_core_mx_exponent(int emax, float amax) {
  if (!(amax > 0.0f)) return -127;
  const int x = exmy_floor_log2f(amax) - emax;
  return x < -127 ? -127 : x > 127 ? 127 : x;
}

#endif /* EXMY_SCALE_CORE_H */
