/*
 * Per-group scaling with COAT's dynamic range expansion on the GPU, the
 * pieces that cuda/group.cu's kernel and the trainer's fused AdamW
 * (experiments/gpu/layers.cu) share: the scales of a group from its
 * statistics, the rounding of one element, and a fast form of that rounding
 * with the same result.
 *
 * The rounding of one element under expansion takes two powers in double
 * (lib/scale_core.h's exmy_core_dre_expand and _contract), about 150 double
 * operations each.  group_round_fast reaches the same float with far less:
 *  - expansion: only the code of Q(sign(x) |x|^k · s) is kept.  |x|^k =
 *    2^(k log2 |x|) with log2 of |x|'s mantissa by log2f (1 ulp by the CUDA
 *    documentation), the product in double, 2^(its fraction) by exp2f
 *    (2 ulp): a relative error below 2^-19 for k <= 16.  The code is taken
 *    at both ends of the interval +-2^-17 around it; rounding is monotone, so
 *    equal codes are the code of the exact power.
 *  - contraction: |w| = |q| · inv (float) with |q| = sig · 2^e, sig in 8..15
 *    for every code of a format of up to 3 mantissa bits; log2(sig · inv) in
 *    double is one entry of a per-group table of 8 (lane sig - 8 of the
 *    warp, or of its half, computes it), so |w|^(1/k) = exp2((e + log2(sig · inv)) / k) costs one
 *    double exp2 (1 ulp) with a relative error below 2^-37; the float it
 *    rounds to is taken at both ends of +-2^-36 around it (pow itself is
 *    within 2 ulp of double), equal floats being the float of the exact path.
 * Wherever a bound does not apply (sr and the other modes, flushing, formats
 * the fast path does not know, more than 3 mantissa bits, k above 16,
 * subnormal operands) or the two ends differ (about one element in 7000 for
 * the expansion, one in 3000 for the contraction, on log-uniform groups), the
 * element takes the exact path, group_round itself.
 */
#ifndef EXMY_CUDA_GROUP_DRE_CUH
#define EXMY_CUDA_GROUP_DRE_CUH

#include <math.h>
#include <stdint.h>

#include "cuda/elementwise.cuh"
#include "cuda/fast_path.cuh"
#include "cuda/kernel_common.cuh"
#include "lib/scale_core.h"

namespace exmy_cuda {

/* A group's factor before the rounding (scale), after it (inv), and its
 * expansion exponent k (1: none). */
struct GroupScale {
  float scale, inv;
  double k;
};

/* The scales of a group whose finite |x| have maximum amax and nonzero
 * minimum amin (INFINITY where none), as cpu/quantize_scaled.c's
 * quantize_grouped.  log_range: ln(fmax / smallest subnormal). */
__device__ __forceinline__ GroupScale group_scale(float fmax, double log_range, float amax,
                                                  float amin, int margin, int pow2, int dre) {
  GroupScale g;
  g.k = dre ? exmy_core_dre_exponent(log_range, amax, amin) : 1.0;
  if (g.k != 1.0) amax = exmy_core_dre_expand(amax, g.k);
  g.scale = exmy_core_scale_from_amax(fmax, amax, margin, pow2);
  g.inv = __fdiv_rn(1.0f, g.scale);
  return g;
}

/* The finite |x| of a lane folded into its group's statistics. */
__device__ __forceinline__ void group_stats_add(float x, float &amax, float &amin) {
  const float a = fabsf(x);
  if (a <= 3.40282347e38f) {
    amax = fmaxf(amax, a);
    if (a > 0.0f) amin = fminf(amin, a);
  }
}

/* The statistics of the lanes of a warp combined (every lane gets them). */
__device__ __forceinline__ void group_stats_warp(float &amax, float &amin) {
  for (int d = 16; d > 0; d >>= 1) {
    amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, d));
    amin = fminf(amin, __shfl_xor_sync(0xFFFFFFFFu, amin, d));
  }
}

/* Element x of a group rounded with its scales, the exact path: j is its
 * index in the sr stream (o.offset + its position). */
__device__ __forceinline__ float group_round(const exmy_format &f, const KOpts &o, float x,
                                             const GroupScale &g, uint64_t j) {
  const float xs = mul_keep_nan(g.k != 1.0 ? exmy_core_dre_expand(x, g.k) : x, g.scale);
  const uint32_t rnd = o.mode == EXMY_SR ? exmy_sr_word(o.seed, j) : 0u;
  const uint32_t c = encode_runtime<SPEC_GENERIC>(f, o, xs, rnd);
  const float w = mul_keep_nan(decode_generic(f, c), g.inv);
  return g.k != 1.0 ? exmy_core_dre_contract(w, g.k) : w;
}

/* What group_round_fast needs of a group beyond its scales: whether the
 * fast path applies to it at all, 1/k, and the contraction's table: lanes
 * table .. table + 7 of the warp (table a multiple of 8) hold the entries
 * sig = 8 .. 15 (y = sig · inv, log2 y), every lane the entry of its own
 * lane % 8. */
struct GroupFast {
  bool on;
  double inv_k;
  int table;
  float y;
  double log2_y;
};

__device__ __forceinline__ GroupFast group_fast(const exmy_format &f, const KOpts &o,
                                                const GroupScale &g, int table) {
  GroupFast t;
  t.on = g.k != 1.0 && g.k > 0.0 && g.k <= 16.0 && o.mode == EXMY_RNE && !o.flush &&
         fast_path_ok(f) && f.man_bits <= 3 && g.scale > 0.0f && g.scale <= 3.40282347e38f &&
         g.inv > 0.0f && g.inv <= 3.40282347e38f;
  t.inv_k = 1.0 / g.k;
  t.table = table;
  t.y = __fmul_rn((float)(8 + (threadIdx.x & 7)), g.inv);
  t.log2_y = t.on ? log2((double)t.y) : 0.0;
  return t;
}

/* The scales and fast-path state of the group that lane `from` of the warp
 * computed (every lane calls it at once): lanes that set up two groups side
 * by side, each half of the warp one, take the other half's. */
__device__ __forceinline__ void group_from_lane(const GroupScale &g, const GroupFast &t, int from,
                                                GroupScale *g_out, GroupFast *t_out) {
  g_out->scale = __shfl_sync(0xFFFFFFFFu, g.scale, from);
  g_out->inv = __shfl_sync(0xFFFFFFFFu, g.inv, from);
  g_out->k = __shfl_sync(0xFFFFFFFFu, g.k, from);
  t_out->on = __shfl_sync(0xFFFFFFFFu, (int)t.on, from) != 0;
  t_out->inv_k = __shfl_sync(0xFFFFFFFFu, t.inv_k, from);
  t_out->table = __shfl_sync(0xFFFFFFFFu, t.table, from);
  t_out->y = t.y; /* the lane's own entry: the shuffles of the table read it */
  t_out->log2_y = t.log2_y;
}

/* group_round(f, o, x, g, j), fast.  Every lane of the warp calls it at once
 * (the table is shuffled); a lane without an element passes active = false
 * and gets an unspecified value. */
__device__ __forceinline__ float group_round_fast(const exmy_format &f, const KOpts &o, float x,
                                                  const GroupScale &g, const GroupFast &t,
                                                  uint64_t j, bool active) {
  const float ax = fabsf(x);
  /* expansion: the code of x, from both ends of an interval around |x|^k
   * (0^k = 0, the sign kept) */
  const bool zero = ax == 0.0f;
  bool ok = t.on && (zero || (ax >= 1.17549435e-38f && ax <= 3.40282347e38f));
  const uint32_t xb = __float_as_uint(ax);
  const float mant = __uint_as_float((xb & 0x007FFFFFu) | 0x3F800000u); /* [1, 2) */
  const double lg = __dadd_rn((double)((int)(xb >> 23) - 127), (double)log2f(mant));
  const double e = __dmul_rn(lg, g.k);
  ok = ok && (zero || fabs(e) <= 1000.0); /* a double, if not a float */
  const double whole = floor(e);
  const double power =
      ok && !zero ? ldexp((double)exp2f((float)(e - whole)), (int)whole) : 0.0;
  const float z_lo = __double2float_rn(__dmul_rn(power, 1.0 - 0x1p-17));
  const float z_hi = __double2float_rn(__dmul_rn(power, 1.0 + 0x1p-17));
  uint32_t c_lo = 0, c_hi = 1;
  ok = ok && fast_encode_f<EXMY_RNE>(f, 32, o.saturate, __fmul_rn(copysignf(z_lo, x), g.scale),
                                     0u, c_lo) &&
       fast_encode_f<EXMY_RNE>(f, 32, o.saturate, __fmul_rn(copysignf(z_hi, x), g.scale), 0u,
                               c_hi) &&
       c_lo == c_hi;
  /* contraction: w = q · inv, |q| = sig · 2^p, log2 |w| = p + log2(sig · inv) */
  const float q = ok ? fast_decode_f(f, c_lo) : 0.0f;
  const float w = mul_keep_nan(q, g.inv);
  const uint32_t qb = __float_as_uint(fabsf(q));
  const int sig = 8 + (int)((qb >> 20) & 7u), p = (int)(qb >> 23) - 127 - 3;
  const float y = __shfl_sync(0xFFFFFFFFu, t.y, t.table + sig - 8);
  const double log2_y = __shfl_sync(0xFFFFFFFFu, t.log2_y, t.table + sig - 8);
  if (ok && q == 0.0f) return w; /* 0^(1/k) = 0, the sign kept */
  ok = ok && (qb & 0x000FFFFFu) == 0 && qb >= 0x00800000u && y >= 1.17549435e-38f &&
       p >= -126 && p <= 127 && fabsf(w) > 1.17549435e-38f &&
       fabsf(w) == __fmul_rn(y, exmy_pow2f(p)) && fabs(log2_y) <= 160.0 && t.inv_k <= 64.0;
  const double e2 = __dmul_rn(__dadd_rn((double)p, log2_y), t.inv_k);
  ok = ok && fabs(e2) <= 1000.0;
  const double back = exp2(ok ? e2 : 0.0);
  const float b_lo = __double2float_rn(__dmul_rn(back, 1.0 - 0x1p-36));
  const float b_hi = __double2float_rn(__dmul_rn(back, 1.0 + 0x1p-36));
  if (ok && b_lo == b_hi) return copysignf(b_lo, w);
  return active ? group_round(f, o, x, g, j) : 0.0f;
}

}  // namespace exmy_cuda

#endif /* EXMY_CUDA_GROUP_DRE_CUH */
