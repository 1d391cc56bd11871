/*
 * A parametrised model of how a tensor core accumulates a dot product, written
 * once for the host (cpu/) and the GPU, like lib/round_core.h: every emulator
 * rounds a GEMM's operands and then accumulates in float32, but FP8 tensor
 * cores do not.  DeepSeek-V3 (arXiv 2412.19437, 3.3.2) reports that Hopper's
 * FP8 GEMM keeps about 14 bits while accumulating: the products of a group of
 * 32 along K are aligned to the group's largest exponent by right shifts,
 * the bits below the kept ones are dropped, and the group's sum goes into a
 * running sum of the same limited precision; their fix promotes that partial
 * sum to a float32 accumulator every N_C = 128 elements ("split accumulator").
 *
 * The model, for one dot product sum_{p<K} a[p]·b[p] of float32 values (the
 * operands as the GEMM rounded them):
 *
 *   - Products are exact: a float32 has a 24-bit significand, so a product
 *     is an integer of at most 48 bits times a power of two (exponents
 *     -298 .. 255), held exactly here as (uint64, int) for every pair of
 *     float32 inputs, subnormals included; a fortiori for operands rounded to
 *     E4M3 / E5M2 (4 / 3 bits), bf16 (8), fp16 (11) or tf32 (11).  A zero
 *     product (either operand ±0) adds nothing and takes no part in the
 *     alignment; its sign is lost (an exact zero sum is +0, as the float32
 *     accumulation from +0 gives).
 *   - K is cut into groups of `group` consecutive products (the last group
 *     may be shorter).  The alignment exponent E of a group is the largest
 *     exponent among its nonzero products, and, when align_sum is 1, the
 *     running sum's (floor(log2 |sum|)) as well.  A product's exponent is,
 *     with align_exp = EXMY_ACCUM_ALIGN_PRODUCT, its own (floor(log2 |a·b|));
 *     with EXMY_ACCUM_ALIGN_INPUTS, the sum ea + eb of its inputs' exponents,
 *     ea = max(floor(log2 |a|), emin_a) and eb likewise: the hardware holds
 *     each input as a significand in [1, 2) (in [0, 1) for a subnormal of
 *     its format, whose exponent is the format's emin) and aligns the
 *     products' significands in [1, 4) by ea + eb, so a product of
 *     2^(ea+eb+1) or more keeps a bit above E (Khattak and Mikaitis, "Accurate Models of
 *     NVIDIA Tensor Cores", arXiv 2512.07004: the H100's FP8 model).
 *   - Each product is reduced to a multiple of 2^(E - product_bits + 1), i.e.
 *     product_bits bits counted from E down, by `round` applied to its
 *     magnitude (truncation toward zero of a negative product is truncation
 *     of its magnitude), then the group's reduced products are summed
 *     exactly.  With align_sum = 1 the running sum is reduced the same way
 *     and is one more addend of that exact sum, which then replaces it.
 *     With align_sum = 0 the group's sum is added to the running sum exactly.
 *   - The new running sum is rounded to sum_bits significant bits by `round`
 *     (its exponent range is unbounded: nothing over- or underflows inside).
 *   - Every promote_every products (a multiple of group) and after the last,
 *     the running sum is added to a float32 accumulator (starting at +0),
 *     rounded once to nearest even, as a CUDA-core float32 add would do with
 *     the partial sum; the running sum restarts at 0.  promote_every = 0:
 *     never; the running sum is rounded to float32 (nearest even) at the end.
 *     The float32 roundings keep subnormals and overflow to ±Inf (then the
 *     accumulator stays ±Inf, as Inf + finite is in float32).
 *   - k_slice = 0: all of K is one slice.  Otherwise K is cut into slices of
 *     k_slice products (a multiple of group and of promote_every; the last
 *     may be shorter), each computed alone as above (its own running sum and
 *     float32 accumulator), and the slices' float32 results are added in
 *     order in float32 (the first, plus the second, ..., each addition
 *     rounded to nearest even): a split-K GEMM whose partial results are
 *     reduced in float32.  cuBLASLt chooses its split from the GEMM's shape.
 *   - If any a[p] or b[p] is Inf or NaN, the result is that of the float32
 *     accumulation below (so NaN and ±Inf propagate as float32 says).
 *
 * Block-scaled operands (exmy_accum_dot_scaled): a[p] = ca[p]·sa[p / N_C],
 * b[p] = cb[p]·sb[p / N_C], the codes ca, cb (an FP8 format's values) with a
 * float32 dequantization scale per block of N_C = promote_every elements of
 * K (DeepSeek-V3's 1 x 128 and 128 x 128 blocks).  The model above runs on
 * the codes (emin_a / emin_b: the codes' formats'), and the promotion of
 * block kb is instead
 *
 *   acc = fmaf(sa[kb] · sb[kb], partial, acc)
 *
 * partial the running sum rounded to float32 (exact for FP8 codes with
 * sum_bits <= 24: their sums lie far inside float32's range), sa·sb one
 * float32 product rounded to nearest even, and the multiply-add one
 * rounding.  This is DeepGEMM's promotion (deepseek-ai/DeepGEMM,
 * deep_gemm/include/deep_gemm/fp8_gemm.cuh, "Promote with scales":
 * scale_0_0 = scale_a_0 * scale_b_0, then final_accum += scale_0_0 *
 * accum, which nvcc contracts into one FFMA), accum being the WGMMAs'
 * float32 result over one 128-element slice of K.  For power-of-two scales
 * it equals exmy_accum_dot on the dequantized values a[p], b[p] with emin_a
 * = emin_b = -126 (how block-scaled values were accumulated before), bit for
 * bit, wherever no code is subnormal in its format and the dequantized
 * values stay float32 normals: then both align the same bits, and the
 * promotion's product by a power of two is exact.  If any code or scale is
 * Inf or NaN, each block's codes are accumulated in float32 (as group = 0)
 * and promoted as above.
 *
 * group = 0 (EXMY_ACCUM_FP32) is the float32 accumulation of exmy_sgemm
 * (cpu/exmy_cpu.h): acc = fmaf(a[p], b[p], acc) for p = 0 .. K-1 from +0,
 * which is what exmy_qgemm computes; the other fields are ignored.
 *
 * Calibrated against the H100's cuBLASLt FP8 GEMM (E4M3 and E5M2 operands,
 * float32 output, cuda/NOTES.md): group 32, product_bits 14, sum_bits 14,
 * truncation, align_sum 1, EXMY_ACCUM_ALIGN_INPUTS with the formats' emin,
 * promote_every 0 with fast accumulation and 128 without, and k_slice as
 * cuBLASLt splits K (no split up to K = 4096 at M = N = 64; 2816 at K =
 * 16384) agree with it bit for bit on every element measured.
 *
 * Apart from group = 0 and additions with ±Inf, the arithmetic is integer
 * (64-bit significands, a 128-bit exact sum of two), so host and device agree
 * bit for bit.
 */
#ifndef EXMY_ACCUM_CORE_H
#define EXMY_ACCUM_CORE_H

#include <math.h>
#include <stdint.h>

#include "lib/hostdevice.h"
#include "lib/round_core.h"
#include "lib/scale_core.h"

/* How a dot product is accumulated (see the model above). */
typedef struct exmy_accum_model {
  /* Products aligned together along K: 1 .. EXMY_ACCUM_MAX_GROUP; 0 is
   * float32 accumulation (EXMY_ACCUM_FP32) and ignores every other field. */
  int group;
  /* Bits kept of each aligned product, counted from the alignment exponent
   * down (the bit of weight 2^E is the first): 1 .. EXMY_ACCUM_MAX_PRODUCT_BITS. */
  int product_bits;
  /* Significant bits kept of the running partial sum:
   * 1 .. EXMY_ACCUM_MAX_SUM_BITS. */
  int sum_bits;
  /* EXMY_ACCUM_TRUNCATE (toward zero) or EXMY_ACCUM_NEAREST_EVEN, for both
   * the aligned products and the running sum. */
  int round;
  /* N_C: the running sum goes into a float32 accumulator every promote_every
   * products; 0 never.  A multiple of group otherwise. */
  int promote_every;
  /* 0: the alignment exponent is the group's products' only; 1: the running
   * sum is aligned with them (a tensor core whose adder takes the
   * accumulator as one more addend). */
  int align_sum;
  /* Zero in the fields below (as an initialiser that lists only the ones
   * above leaves them) aligns by each product's own exponent, unsplit.
   * EXMY_ACCUM_ALIGN_PRODUCT (0): a product's exponent is its own;
   * EXMY_ACCUM_ALIGN_INPUTS (1): the sum of its inputs' exponents. */
  int align_exp;
  /* With EXMY_ACCUM_ALIGN_INPUTS: the smallest normal exponent of the
   * format of A's values and of B's (E4M3 -6, E5M2 -14, float32 -126), the
   * exponent that a subnormal of that format counts with; -149 .. 127.
   * Ignored with EXMY_ACCUM_ALIGN_PRODUCT. */
  int emin_a, emin_b;
  /* Products per K slice of a split-K GEMM (see the model); 0: no split. */
  int k_slice;
} exmy_accum_model;

enum {
  EXMY_ACCUM_FP32 = 0,
  EXMY_ACCUM_TRUNCATE = 0,
  EXMY_ACCUM_NEAREST_EVEN = 1,
  EXMY_ACCUM_ALIGN_PRODUCT = 0,
  EXMY_ACCUM_ALIGN_INPUTS = 1,
  /* (group + 1) aligned addends of up to 2^product_bits fit in an int64;
   * with EXMY_ACCUM_ALIGN_INPUTS a product may reach 2^(product_bits + 1),
   * so one bit less */
  EXMY_ACCUM_MAX_GROUP = 256,
  EXMY_ACCUM_MAX_PRODUCT_BITS = 54,
  EXMY_ACCUM_MAX_SUM_BITS = 62,
};

/* 0 if m is a valid model, -1 otherwise. */
EXMY_HD int exmy_accum_model_check(const exmy_accum_model *m) {
  if (m->group == EXMY_ACCUM_FP32) return 0;
  if (m->group < 0 || m->group > EXMY_ACCUM_MAX_GROUP) return -1;
  if (m->align_exp != EXMY_ACCUM_ALIGN_PRODUCT && m->align_exp != EXMY_ACCUM_ALIGN_INPUTS)
    return -1;
  const int inputs = m->align_exp == EXMY_ACCUM_ALIGN_INPUTS;
  if (m->product_bits < 1 || m->product_bits > EXMY_ACCUM_MAX_PRODUCT_BITS - inputs) return -1;
  if (inputs && (m->emin_a < -149 || m->emin_a > 127 || m->emin_b < -149 || m->emin_b > 127))
    return -1;
  if (m->k_slice < 0 || m->k_slice % m->group) return -1;
  if (m->k_slice && m->promote_every && m->k_slice % m->promote_every) return -1;
  if (m->sum_bits < 1 || m->sum_bits > EXMY_ACCUM_MAX_SUM_BITS) return -1;
  if (m->round != EXMY_ACCUM_TRUNCATE && m->round != EXMY_ACCUM_NEAREST_EVEN) return -1;
  if (m->promote_every < 0 || m->promote_every % m->group) return -1;
  if (m->align_sum != 0 && m->align_sum != 1) return -1;
  return 0;
}

__extension__ typedef unsigned __int128 exmy_u128;

/* (-1)^neg · mag · 2^exp; mag = 0 is zero. */
typedef struct {
  int neg;
  uint64_t mag;
  int exp;
} exmy_accum_num;

EXMY_HD int exmy_clz64(uint64_t x) {
#ifdef __CUDA_ARCH__
  return __clzll((long long)x);
#else
  return x ? __builtin_clzll(x) : 64;
#endif
}

/* floor(log2 |x|) for x != 0. */
EXMY_HD int exmy_accum_lead(exmy_accum_num x) {
  return x.exp + 63 - exmy_clz64(x.mag);
}

/* mag / 2^shift (shift >= 0), its magnitude truncated or rounded to nearest
 * even. */
EXMY_HD exmy_u128 exmy_accum_shr(exmy_u128 mag, int shift, int round) {
  if (shift == 0) return mag;
  if (shift > 128) return 0; /* below half of one unit: 0 in both modes */
  if (shift == 128) /* mag / 2^128 < 1: 1 only if above one half */
    return round == EXMY_ACCUM_NEAREST_EVEN && mag > ((exmy_u128)1 << 127);
  const exmy_u128 kept = mag >> shift;
  if (round == EXMY_ACCUM_TRUNCATE) return kept;
  const exmy_u128 rest = mag - (kept << shift), half = (exmy_u128)1 << (shift - 1);
  return kept + (rest > half || (rest == half && (kept & 1)));
}

/* (-1)^neg · mag · 2^exp rounded to `bits` significant bits (<= 63), never
 * to a multiple of less than 2^qmin, by `round`. */
EXMY_HD exmy_accum_num exmy_accum_round(int neg, exmy_u128 mag, int exp, int bits,
                                        int qmin, int round) {
  exmy_accum_num r = {0, 0, 0}; /* an exact zero is +0 */
  if (!mag) return r;
  r.neg = neg;
  const uint64_t hi = (uint64_t)(mag >> 64);
  const int lead = exp + (hi ? 127 - exmy_clz64(hi) : 63 - exmy_clz64((uint64_t)mag));
  int q = lead - bits + 1;
  if (q < qmin) q = qmin;
  if (q <= exp) { /* exact already: then mag < 2^bits */
    r.mag = (uint64_t)mag, r.exp = exp;
    return r;
  }
  r.mag = (uint64_t)exmy_accum_shr(mag, q - exp, round);
  r.exp = q;
  return r;
}

/* x + y rounded to `bits` significant bits (<= 62), as exmy_accum_round. */
EXMY_HD exmy_accum_num exmy_accum_add_round(exmy_accum_num x, exmy_accum_num y, int bits,
                                            int qmin, int round) {
  if (!x.mag) return exmy_accum_round(y.neg, y.mag, y.exp, bits, qmin, round);
  if (!y.mag) return exmy_accum_round(x.neg, x.mag, x.exp, bits, qmin, round);
  if (exmy_accum_lead(x) < exmy_accum_lead(y)) {
    const exmy_accum_num t = x;
    x = y, y = t;
  }
  /* y far below x: |y| < 2^(lead(x) - 64).  x is a multiple of 2^(lead(x) -
   * 63), and the rounding points of a result of >= 2^(lead(x) - 1) to <= 62
   * bits are multiples of 2^(lead(x) - 63); x + y lies strictly between x and
   * the next multiple of 2^(lead(x) - 64) on y's side, as x + 2^(lead(x) -
   * 66) does: both round alike. */
  const int lx = exmy_accum_lead(x);
  if (lx - exmy_accum_lead(y) > 64) y.mag = 1, y.exp = lx - 66;
  const int e = x.exp < y.exp ? x.exp : y.exp; /* shifts <= 128 - 64 */
  const exmy_u128 mx = (exmy_u128)x.mag << (x.exp - e), my = (exmy_u128)y.mag << (y.exp - e);
  if (x.neg == y.neg) return exmy_accum_round(x.neg, mx + my, e, bits, qmin, round);
  return mx >= my ? exmy_accum_round(x.neg, mx - my, e, bits, qmin, round)
                  : exmy_accum_round(y.neg, my - mx, e, bits, qmin, round);
}

/* A finite float32 as (neg, mag, exp). */
EXMY_HD exmy_accum_num exmy_accum_from_f32(float f) {
  const uint32_t u = exmy_f32_bits(f);
  const int biased = (int)((u >> 23) & 0xFF);
  exmy_accum_num r;
  r.neg = (int)(u >> 31);
  r.mag = biased ? (u & 0x7FFFFFu) | 0x800000u : (u & 0x7FFFFFu);
  r.exp = (biased ? biased : 1) - 150;
  return r;
}

/* x rounded to float32, nearest even (subnormals kept, overflow to ±Inf);
 * -0 where a negative value rounds to zero, here or in the rounding that
 * made x (exmy_accum_round keeps the sign of a value it rounds to 0). */
EXMY_HD float exmy_accum_to_f32(exmy_accum_num x) {
  const exmy_accum_num r = exmy_accum_round(x.neg, x.mag, x.exp, 24, -149,
                                            EXMY_ACCUM_NEAREST_EVEN);
  /* a zero x is +0, unless a negative value underflowed to it */
  const uint32_t sign = (uint32_t)(x.mag ? r.neg : x.neg) << 31;
  if (!r.mag) return exmy_bits_f32(sign);
  const int lead = exmy_accum_lead(r);
  if (lead > 127) return exmy_bits_f32(sign | 0x7F800000u);
  if (lead < -126) /* subnormal: exp is -149 */
    return exmy_bits_f32(sign | (uint32_t)(r.mag << (r.exp + 149)));
  const int top = lead - r.exp; /* 24 where rounding carried to 2^24 */
  const uint64_t m24 = top <= 23 ? r.mag << (23 - top) : r.mag >> (top - 23);
  return exmy_bits_f32(sign | ((uint32_t)(lead + 127) << 23) | ((uint32_t)m24 & 0x7FFFFFu));
}

/* The float32 accumulation that group = 0 stands for. */
EXMY_HD float exmy_accum_dot_fp32(const float *a, long stride_a, const float *b,
                                  long stride_b, int k) {
  float acc = 0.0f;
  for (int p = 0; p < k; p++) acc = fmaf(a[p * stride_a], b[p * stride_b], acc);
  return acc;
}

/* The emin_a / emin_b for an operand whose values are y = c / s, c values of
 * a format whose smallest normal exponent is fmt_emin and s = 2^k: fmt_emin
 * - k, so that the model on y is the tensor core's on the codes c (clamped
 * at fmt_emin), scaled by 2^-k.  -126 (float32's) where s is not a positive
 * power of two (exmy_pow2_exponent) or fmt_emin - k lies outside -149 ..
 * 127.  Integer arithmetic: host and device choose alike. */
EXMY_HD int exmy_accum_scaled_emin(int fmt_emin, float s) {
  int k;
  if (!exmy_pow2_exponent(s, &k)) return -126;
  const int e = fmt_emin - k;
  return e >= -149 && e <= 127 ? e : -126;
}

/* The exponent that a product a·b (both nonzero) is aligned by. */
EXMY_HD int exmy_accum_product_exp(const exmy_accum_model *m, exmy_accum_num x, exmy_accum_num y) {
  if (m->align_exp == EXMY_ACCUM_ALIGN_PRODUCT)
    return x.exp + y.exp + 63 - exmy_clz64(x.mag * y.mag);
  const int ea = exmy_accum_lead(x), eb = exmy_accum_lead(y);
  return (ea > m->emin_a ? ea : m->emin_a) + (eb > m->emin_b ? eb : m->emin_b);
}

/* The promotion of a block-scaled partial sum (float32) into the float32
 * accumulator: acc + (sa · sb) · partial, the scales' product rounded to
 * float32, then one fused multiply-add (see the model above: DeepGEMM's
 * order).  The one text of it, host and device. */
EXMY_HD float exmy_accum_promote_scaled(float acc, float partial, float sa, float sb) {
  return fmaf(exmy_fmul_rn(sa, sb), partial, acc);
}

/* The alignment exponent a group starts from: the running sum's with
 * align_sum (when it is nonzero), else none (EXMY_ACCUM_NO_LEAD). */
#define EXMY_ACCUM_NO_LEAD (-(1 << 20))
EXMY_HD int exmy_accum_sum_lead(const exmy_accum_model *m, exmy_accum_num sum) {
  return m->align_sum && sum.mag ? exmy_accum_lead(sum) : EXMY_ACCUM_NO_LEAD;
}

/* The end of a group: when some product (or the running sum) was nonzero
 * (aligned), the group's aligned products, summed exactly as multiples of 2^q
 * into group_sum, go into the running sum; then, when `promote`, the running
 * sum into the float32 accumulator: added to it (scale NULL), or for
 * block-scaled codes promoted with the block's scales (scale[0], scale[1]:
 * exmy_accum_promote_scaled). */
EXMY_HD void exmy_accum_close_group(const exmy_accum_model *m, int aligned, int q,
                                    int64_t group_sum, int promote, const float *scale,
                                    exmy_accum_num *sum, float *acc) {
  const int qmin = -(1 << 20); /* no floor: far below any product */
  if (aligned) {
    if (m->align_sum) {
      if (sum->mag) {
        const int64_t v = sum->exp >= q ? (int64_t)(sum->mag << (sum->exp - q))
                                        : (int64_t)exmy_accum_shr(sum->mag, q - sum->exp, m->round);
        group_sum += sum->neg ? -v : v;
      }
      const int neg = group_sum < 0;
      *sum = exmy_accum_round(neg, (exmy_u128)(neg ? -(uint64_t)group_sum : (uint64_t)group_sum),
                              q, m->sum_bits, qmin, m->round);
    } else {
      const int neg = group_sum < 0;
      const exmy_accum_num s = {neg, neg ? -(uint64_t)group_sum : (uint64_t)group_sum, q};
      *sum = exmy_accum_add_round(*sum, s, m->sum_bits, qmin, m->round);
    }
  }
  if (promote) {
    /* one rounding: to 24 bits, and to a multiple of 2^-149; an
     * accumulator that overflowed stays ±Inf (the partial sums are finite) */
    if (scale)
      *acc = exmy_accum_promote_scaled(*acc, exmy_accum_to_f32(*sum), scale[0], scale[1]);
    else if (isfinite(*acc))
      *acc = exmy_accum_to_f32(exmy_accum_add_round(exmy_accum_from_f32(*acc), *sum, 24, -149,
                                                    EXMY_ACCUM_NEAREST_EVEN));
    /* the running sum restarts at +0: a block without a nonzero product
     * then promotes +0 (an exact zero sum), not a zero carrying the sign of
     * the block before, which fmaf would keep on an accumulator of -0 */
    const exmy_accum_num zero = {0, 0, 0};
    *sum = zero;
  }
}

/* Whether the group ending at product `end` of a slice of k closes with a
 * promotion. */
EXMY_HD int exmy_accum_promotes(const exmy_accum_model *m, int end, int k) {
  return m->promote_every && (end % m->promote_every == 0 || end == k);
}

/* The scales of the block of K that the group ending at product `end` (of
 * the slice whose first block is sa[0] / sb[0]) closes, into scale[0] and
 * scale[1] (1 for an operand without scales); NULL where neither operand
 * has any. */
EXMY_HD const float *exmy_accum_block_scales(const exmy_accum_model *m, const float *sa,
                                             const float *sb, int end, float scale[2]) {
  if (!sa && !sb) return 0;
  const int kb = (end - 1) / m->promote_every;
  scale[0] = sa ? sa[kb] : 1.0f;
  scale[1] = sb ? sb[kb] : 1.0f;
  return scale;
}

/* One slice of the model (all of K without k_slice): finite operands;
 * sa / sb (or NULL) the block scales of the slice's blocks of promote_every
 * products, from its first. */
EXMY_HD float exmy_accum_dot_slice(const exmy_accum_model *m, const float *a, long stride_a,
                                   const float *sa, const float *b, long stride_b,
                                   const float *sb, int k) {
  float scale[2] = {1.0f, 1.0f};
  exmy_accum_num sum = {0, 0, 0};
  float acc = 0.0f;
  for (int g = 0; g < k; g += m->group) {
    const int n = k - g < m->group ? k - g : m->group;
    /* the alignment exponent */
    int lead = exmy_accum_sum_lead(m, sum);
    for (int p = g; p < g + n; p++) {
      const exmy_accum_num x = exmy_accum_from_f32(a[p * stride_a]);
      const exmy_accum_num y = exmy_accum_from_f32(b[p * stride_b]);
      if (!x.mag || !y.mag) continue;
      const int l = exmy_accum_product_exp(m, x, y);
      if (l > lead) lead = l;
    }
    const int q = lead - m->product_bits + 1;
    int64_t group_sum = 0;
    if (lead > EXMY_ACCUM_NO_LEAD)
      for (int p = g; p < g + n; p++) {
        const exmy_accum_num x = exmy_accum_from_f32(a[p * stride_a]);
        const exmy_accum_num y = exmy_accum_from_f32(b[p * stride_b]);
        const uint64_t mag = x.mag * y.mag; /* < 2^48 */
        if (!mag) continue;
        const int e = x.exp + y.exp;
        const int64_t v = e >= q ? (int64_t)(mag << (e - q))
                                 : (int64_t)exmy_accum_shr(mag, q - e, m->round);
        group_sum += x.neg != y.neg ? -v : v;
      }
    const int promote = exmy_accum_promotes(m, g + n, k);
    exmy_accum_close_group(m, lead > EXMY_ACCUM_NO_LEAD, q, group_sum, promote,
                           promote ? exmy_accum_block_scales(m, sa, sb, g + n, scale) : 0, &sum,
                           &acc);
  }
  return m->promote_every ? acc : exmy_accum_to_f32(sum);
}

/* acc + part of two slices' results, a float32 addition rounded to nearest
 * even (±Inf as float32 has it). */
EXMY_HD float exmy_accum_add_slices(float acc, float part) {
  return isfinite(acc) && isfinite(part)
             ? exmy_accum_to_f32(exmy_accum_add_round(exmy_accum_from_f32(acc),
                                                      exmy_accum_from_f32(part), 24, -149,
                                                      EXMY_ACCUM_NEAREST_EVEN))
             : acc + part;
}

/* The block scales of a GEMM operand held K-contiguous (op(A) as m x k,
 * op(B)^T as n x k): row r's scales, one per block of promote_every along K,
 * at s + (r / rows) * ld (rows: the rows sharing a block, DeepSeek-V3's 1
 * for activations and 128 for weights).  s NULL: no scales. */
typedef struct exmy_accum_scales {
  const float *s;
  long ld;
  int rows;
} exmy_accum_scales;

/* Row r's block scales, or NULL where x (or x->s) is NULL. */
EXMY_HD const float *exmy_accum_scales_row(const exmy_accum_scales *x, size_t r) {
  return x && x->s ? x->s + (long)(r / (size_t)x->rows) * x->ld : 0;
}

/* sum_{p<k} (a[p * stride_a] · sa[p / promote_every]) · (b[p * stride_b] ·
 * sb[p / promote_every]) under model m (valid per exmy_accum_model_check),
 * as float32: a, b the codes and sa, sb their blocks' float32 scales (see
 * the model above).  sa or sb NULL: that operand's scales are 1; both NULL:
 * exmy_accum_dot.  With a scale, m->promote_every must be positive. */
EXMY_HD float exmy_accum_dot_scaled(const exmy_accum_model *m, const float *a, long stride_a,
                                    const float *sa, const float *b, long stride_b,
                                    const float *sb, int k) {
  const int scaled = sa || sb;
  if (m->group == EXMY_ACCUM_FP32 && !scaled)
    return exmy_accum_dot_fp32(a, stride_a, b, stride_b, k);
  int finite = 1;
  for (int p = 0; p < k; p++)
    finite &= isfinite(a[p * stride_a]) && isfinite(b[p * stride_b]);
  for (int kb = 0; scaled && kb * m->promote_every < k; kb++)
    finite &= (!sa || isfinite(sa[kb])) && (!sb || isfinite(sb[kb]));
  if (!finite && !scaled) return exmy_accum_dot_fp32(a, stride_a, b, stride_b, k);
  if (!finite || m->group == EXMY_ACCUM_FP32) {
    /* each block's codes in float32, promoted with its scales */
    float acc = 0.0f, scale[2] = {1.0f, 1.0f};
    for (int p = 0; p < k; p += m->promote_every) {
      const int n = k - p < m->promote_every ? k - p : m->promote_every;
      exmy_accum_block_scales(m, sa, sb, p + n, scale);
      acc = exmy_accum_promote_scaled(
          acc, exmy_accum_dot_fp32(a + p * stride_a, stride_a, b + p * stride_b, stride_b, n),
          scale[0], scale[1]);
    }
    return acc;
  }
  const int slice = m->k_slice && m->k_slice < k ? m->k_slice : k;
  float acc = exmy_accum_dot_slice(m, a, stride_a, sa, b, stride_b, sb, slice);
  for (int s = slice; s < k; s += slice) {
    const int kb = scaled ? s / m->promote_every : 0; /* slices hold whole blocks */
    const float part = exmy_accum_dot_slice(m, a + s * stride_a, stride_a, sa ? sa + kb : 0,
                                            b + s * stride_b, stride_b, sb ? sb + kb : 0,
                                            k - s < slice ? k - s : slice);
    acc = exmy_accum_add_slices(acc, part);
  }
  return acc;
}

/* sum_{p<k} a[p * stride_a] · b[p * stride_b] under model m (valid per
 * exmy_accum_model_check), as float32. */
EXMY_HD float exmy_accum_dot(const exmy_accum_model *m, const float *a, long stride_a,
                             const float *b, long stride_b, int k) {
  return exmy_accum_dot_scaled(m, a, stride_a, 0, b, stride_b, 0, k);
}

/* The epilogue of one GEMM output, as every exmy GEMM rounds it (CPU and
 * GPU, float32 or modelled accumulation): alpha·dot, then, where beta != 0,
 * that plus beta·c (c read only then), each product and the sum rounded
 * apart, never fused. */
EXMY_HD float exmy_gemm_epilogue(float dot, float alpha, float beta, const float *c) {
  const float r = exmy_fmul_rn(alpha, dot);
  return beta != 0.0f ? exmy_fadd_rn(r, exmy_fmul_rn(beta, *c)) : r;
}

#endif /* EXMY_ACCUM_CORE_H */
