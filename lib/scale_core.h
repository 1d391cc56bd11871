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

#include "lib/format_core.h"
#include "lib/hostdevice.h"
#include "lib/philox.h"
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

/* Whether s is a power of two, s = 2^*k: positive and finite, float32
 * subnormals included (*k from -149); *k = 0 where it is not.  From s's bits,
 * so host and device decide alike. */
EXMY_HD int exmy_pow2_exponent(float s, int *k) {
  const uint32_t b = exmy_f32_bits(s);
  *k = 0;
  if (b == 0 || b >= 0x7F800000u) return 0; /* +0; +Inf, NaN, or the sign bit set */
  /* the bits below the leading one: a normal's fraction, or a subnormal's */
  const uint32_t below_lead = b >= 0x00800000u ? b & 0x007FFFFFu : b & (b - 1);
  if (below_lead) return 0;
  *k = exmy_floor_log2f(s);
  return 1;
}

/* Current scaling (EXMY_SCALING_TENSOR, per group for GROUP): s = (fmax /
 * amax) · 2^-margin in float32, fmax the format's largest finite value,
 * rounded down to a power of two if pow2; 1 where amax is 0 or not finite,
 * or where s would not be a positive finite float.  The division rounds once,
 * and so does the conversion of the double product (exact: a float times a
 * power of two), exactly as ldexpf(fmax / amax, -margin) would. */
EXMY_HD float exmy_core_scale_from_amax_shrink(float fmax, float amax, double shrink,
                                               int pow2);
EXMY_HD float exmy_core_scale_from_amax(float fmax, float amax, int margin,
                                        int pow2) {
  return exmy_core_scale_from_amax_shrink(fmax, amax, exp2((double)-margin), pow2);
}
/* The same with 2^-margin given (shrink), for a GPU kernel whose every block
 * works the scale out: exp2 in double once on the host, not per block. */
EXMY_HD float exmy_core_scale_from_amax_shrink(float fmax, float amax, double shrink,
                                               int pow2) {
  if (!(amax > 0.0f) || !isfinite(amax)) return 1.0f;
  float s = (float)((double)exmy_fdiv_rn(fmax, amax) * shrink);
  if (!isfinite(s) || !(s > 0.0f)) return 1.0f;
  if (pow2) s = exmy_floor_pow2f(s);
  return s;
}

/* Smooth-SwiGLU's scale of one token row (Fishman et al. 2024, the reference
 * code's ScaledSwiglu: s = max |x[1]| over the row, x[1] the SwiGLU's linear
 * branch, h3 here): the row's amax itself, not a power of two; 1 where that
 * is 0 or not finite (the reference would divide by it). */
EXMY_HD float exmy_core_row_scale_from_amax(float amax) {
  return amax > 0.0f && isfinite(amax) ? amax : 1.0f;
}

/* Delayed scaling's history position after a call: the slot the new amax
 * goes into (one past the latest, cyclically) and how many slots hold one. */
EXMY_HD void exmy_core_delayed_advance(int len, int *count, int *latest) {
  *latest = (*latest + 1) % len;
  if (*count < len) (*count)++;
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

/* ---- NVFP4 (EXMY_SCALING_NVFP4), as Transformer Engine's NVFP4 cast
 * computes it (transformer_engine/common/cast/nvfp4/core_nvfp4.cuh:
 * compute_global_encode_scaling_factor_FP4, compute_decoding_scaling_factor,
 * compute_scaling_coefficient<float>).  fminf(v, FLT_MAX) there is written
 * here as the clamp of +inf to FLT_MAX. */

/* The tensor's encode scale S_enc = (448 · 6) / amax (E4M3's and E2M1's
 * largest values), FLT_MAX where that overflows, 1 where amax is 0 or not
 * finite (TE: 1 for amax 0 and where the quotient is 0). */
EXMY_HD float exmy_core_nvfp4_tensor_scale(float amax) {
  if (!(amax > 0.0f) || !isfinite(amax)) return 1.0f;
  const float s = exmy_fdiv_rn(448.0f * 6.0f, amax);
  if (s == 0.0f) return 1.0f;
  return s > 3.40282347e38f ? 3.40282347e38f : s;
}

/* A block's E4M3 decode scale s_b = E4M3(amax · (S_enc · (1/6))): the product
 * rounded in float32 (1/6 the float32 constant), then rne to E4M3 with
 * saturation (CUDA's satfinite conversion).  0 for a block whose amax is 0 or
 * too small for E4M3. */
EXMY_HD float exmy_core_nvfp4_block_scale(float block_amax, float s_enc) {
  const exmy_format e4m3 = exmy_format_fields(4, 3, 7, EXMY_SPECIALS_FN);
  const float s = exmy_fmul_rn(block_amax, exmy_fmul_rn(s_enc, 1.0f / 6.0f));
  return exmy_core_decode(&e4m3, exmy_core_encode(&e4m3, EXMY_RNE, 1, 0, 32, s, 0u));
}

/* The tensor's decode scale 1 / S_enc, rounded once: the factor that a
 * block's decode scale s_b is multiplied by, and that a GEMM of the exact
 * products (q · s_b) applies once per operand. */
EXMY_HD float exmy_core_nvfp4_tensor_decode(float s_enc) {
  return exmy_fdiv_rn(1.0f, s_enc);
}

/* The factor a block's rounded elements are multiplied by: s_b · (1 / S_enc),
 * the two decode scales' product rounded once. */
EXMY_HD float exmy_core_nvfp4_decode_factor(float s_b, float s_enc) {
  return exmy_fmul_rn(s_b, exmy_core_nvfp4_tensor_decode(s_enc));
}

/* The factor a block's elements are multiplied by before rounding:
 * 1 / (s_b · (1 / S_enc)), FLT_MAX where that overflows (s_b = 0: every
 * element then rounds to a value that its decode factor 0 sends to 0). */
EXMY_HD float exmy_core_nvfp4_encode_factor(float s_b, float s_enc) {
  const float r = exmy_fdiv_rn(1.0f, exmy_core_nvfp4_decode_factor(s_b, s_enc));
  return r > 3.40282347e38f ? 3.40282347e38f : r;
}

/* The 16-point random Hadamard transform of EXMY_SCALING_NVFP4's `hadamard`:
 * y_i = (1/4) sum_j H_ij d_j x_j, H_ij = (-1)^popcount(i & j), d_j = -1 where
 * bit j of `signs` is set; each term is exact, the sum runs j = 0..15 with
 * every addition rounded once, and the product by 1/4 is exact unless it
 * falls below 2^-126; a NaN result is the quiet NaN 0x7FC00000.  y must not
 * alias x. */
EXMY_HD void exmy_core_rht16(const float *x, float *y, uint32_t signs) {
  for (int i = 0; i < 16; i++) {
    float acc = 0.0f;
    for (int j = 0; j < 16; j++) {
      int neg = (int)((signs >> j) & 1u);
      for (int b = i & j; b; b &= b - 1) neg ^= 1;
      acc = exmy_fadd_rn(acc, neg ? -x[j] : x[j]);
    }
    const float v = exmy_fmul_rn(acc, 0.25f);
    /* one NaN for both devices (their NaN arithmetic gives different bits) */
    y[i] = v != v ? exmy_bits_f32(0x7FC00000u) : v;
  }
}

/* The sign bits of a Hadamard seed. */
EXMY_HD uint32_t exmy_core_rht16_signs(uint64_t seed) {
  return exmy_sr_word(seed, 0) & 0xFFFFu;
}

/* COAT's dynamic range expansion (EXMY_SCALING_GROUP with
 * dynamic_range_expansion): a group whose finite nonzero |x| span amin..amax
 * is rounded as sign(x) |x|^k, k = log_range / ln(amax / amin) with
 * log_range = ln(fmax / smallest subnormal) of the format, so that the
 * group's span fills the format's; the rounded value w comes back as
 * sign(w) |w|^(1/k).  k is 1 (no expansion) where the group has no span.
 * The powers are taken in double and rounded once to float; host and device
 * call these same lines, each with its own libm. */
EXMY_HD double exmy_core_dre_exponent(double log_range, float amax, float amin) {
  if (!(amax > 0) || !(amin > 0) || amax <= amin) return 1.0;
  return log_range / log((double)amax / (double)amin);
}

EXMY_HD float exmy_core_dre_expand(float x, double k) {
  return copysignf((float)pow(fabs((double)x), k), x);
}

EXMY_HD float exmy_core_dre_contract(float w, double k) {
  return copysignf((float)pow(fabs((double)w), 1.0 / k), w);
}

#endif /* EXMY_SCALE_CORE_H */
