/*
 * Per-group scaling with COAT's dynamic range expansion on the GPU, the
 * pieces that cuda/group.cu's kernel and the trainer's fused AdamW
 * (experiments/gpu/layers.cu) share: the scales of a group from its
 * statistics, the rounding of one element, and a fast form of that rounding
 * with the same result.
 *
 * The rounding of one element under expansion takes two powers in double
 * (lib/scale_core.h's exmy_core_dre_expand and _contract), about 150 double
 * operations each.  group_round_try reaches the same float with far less:
 *  - expansion: only the code of Q(sign(x) |x|^k · s) is kept.  |x|^k s =
 *    2^(k log2 |x| + log2 s) with log2 of |x|'s mantissa m by __log2f (the
 *    MUFU instruction: absolute error below 2^-22 for m in [0.5, 2] by the
 *    CUDA documentation; log2f's polynomial cost 20 instructions more), the
 *    exponent in float (k and log2 s each split in two floats, the sums
 *    fused multiply-adds; the formats whose codes lie within 2^+-18, E4M3
 *    and E5M2 among them) or in double (the others, |x|^k first), its power
 *    by exp2f (2 ulp): a relative error below 2^-17.2 (float) or 2^-18.4
 *    (double).  The code is taken at both ends of the interval +-2^-17
 *    around it (for E4M3 and E5M2 by the hardware's cvt.rn.satfinite, both
 *    ends in one instruction); rounding is monotone, so equal codes are the
 *    code of the exact power.
 *  - contraction: |w| = |q| · inv (float) with |q| = sig · 2^p, sig in 8..15
 *    for every code of a format of up to 3 mantissa bits, so |w|^(1/k) =
 *    2^(log2(sig · inv) / k) · 2^(p / k): a per-group table of 8 for the
 *    first factor (lanes sig - 8 of the warp, or of its half) and, where the
 *    format's exponents fit a warp (E4M3, E5M2), one of 32 for the second
 *    (2^(p_min / k) · (2^(1 / k))^l in lane l: two exp2 a group, not 32),
 *    so one double product an element, with a relative error below 2^-38.6;
 *    elsewhere one double exp2 (1 ulp) of (p + log2(sig · inv)) / k, below
 *    2^-37.  The float it rounds to is taken at both ends of +-2^-36 around
 *    it (pow itself is within 2 ulp of double), equal floats being the float
 *    of the exact path.
 * Wherever a bound does not apply (sr and the other modes, flushing, formats
 * the fast path does not know, more than 3 mantissa bits, k above 16,
 * subnormal operands; in the float form fl(|x|^k) not a normal float unless
 * the product is far below every code; in the contraction q · inv not a
 * normal float) or the two ends differ (about one element in 7000 for
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

/* What the fast path needs of a format, the same for every group (found
 * once, on the host: format_fast): hw, the hardware's conversion that rounds
 * it (hw_pair_kind); p_min and whether its exponents p (below) fit a warp's
 * table (tabled); narrow: whether every value where its rounding changes
 * lies within 2^+-kNarrowLog2 (format_narrow), so that the expansion may run
 * in float. */
struct FormatFast {
  int hw, p_min;
  bool tabled, narrow;
};

/* What group_round_try needs of a group beyond its scales: whether the
 * fast path applies to it at all; its format's FormatFast; 1/k; and the
 * contraction's tables (group_tables): lanes table .. table + 7 of the warp
 * hold the entries sig = 8 .. 15, y = sig · inv, log2 y and
 * a = 2^(log2 y / k); where tabled, lane l holds b = 2^((p_min + l) / k), so
 * that |w|^(1/k) = a[sig] · b[p - p_min]: a double product instead of a
 * double exp2 an element. */
struct GroupFast {
  bool on;
  FormatFast fmt;
  double inv_k;
  int table;
  float y;
  double log2_y, a, b;
  /* the expansion's float form: k = k_hi + k_lo within 2^-32 (k_hi its
   * first 12 significant bits) and log2(scale) = ls_hi + ls_lo within
   * 2^-41, far below the float sums' roundings */
  float k_hi, k_lo, ls_hi, ls_lo;
};

/* The decoded values of f that are normal floats, sig · 2^(p + 3) with sig
 * in 8 .. 15, have p from format_p_min(f) to emax - 3; tabled where that is
 * at most 32 exponents (E4M3 18, E5M2 32). */
__host__ __device__ inline int format_p_min(const exmy_format &f) {
  return (f.emin - f.man_bits > -126 ? f.emin - f.man_bits : -126) - 3;
}
__host__ __device__ inline bool format_tabled(const exmy_format &f) {
  return f.emax - 3 - format_p_min(f) + 1 <= 32;
}

/* The expansion's float form (group_round_try) holds its error bound for
 * |log2 (|x|^k s)| <= kNarrowLog2.  A format's rounding is constant below
 * half its smallest subnormal, 2^(emin - man_bits - 1), and from 2^(emax + 1)
 * up (every value there saturates or overflows): narrow where both lie
 * inside (E4M3 -10 and 9, E5M2 -17 and 16). */
constexpr int kNarrowLog2 = 18;
__host__ __device__ inline bool format_narrow(const exmy_format &f) {
  return f.emin - f.man_bits - 1 >= -kNarrowLog2 && f.emax + 1 <= kNarrowLog2;
}

__host__ __device__ inline FormatFast format_fast(const exmy_format &f, int saturate) {
  return FormatFast{hw_pair_kind(f, saturate), format_p_min(f), format_tabled(f),
                    format_narrow(f)};
}

/* A quiet NaN: a table entry that no fast check passes. */
__device__ __forceinline__ double fails_every_check() {
  return __longlong_as_double(0x7FF8000000000000ll);
}

/* 2^e for |e| <= 1000, or NaN beyond. */
__device__ __forceinline__ double exp2_or_nan(double e) {
  return fabs(e) <= 1000.0 ? exp2(e) : fails_every_check();
}

/* The fast path's state of a group (f's FormatFast ff), without its tables. */
__device__ __forceinline__ GroupFast group_fast(const exmy_format &f, const FormatFast &ff,
                                                const KOpts &o, const GroupScale &g) {
  GroupFast t = {};
  t.on = g.k != 1.0 && g.k > 0.0 && g.k <= 16.0 && o.mode == EXMY_RNE && !o.flush &&
         fast_path_ok(f) && f.man_bits <= 3 && g.scale > 0.0f && g.scale <= 3.40282347e38f &&
         g.inv > 0.0f && g.inv <= 3.40282347e38f;
  t.fmt = ff;
  t.inv_k = 1.0 / g.k;
  t.k_hi = __uint_as_float(__float_as_uint(__double2float_rn(g.k)) & 0xFFFFF000u);
  t.k_lo = __double2float_rn(g.k - (double)t.k_hi);
  const double ls = t.on ? log2((double)g.scale) : 0.0;
  t.ls_hi = __double2float_rn(ls);
  t.ls_lo = __double2float_rn(ls - (double)t.ls_hi);
  return t;
}

/* The scales and fast-path state that lane `from` of the warp computed for a
 * group of format ff (every lane calls it at once). */
__device__ __forceinline__ void group_take(const GroupScale &g, const GroupFast &t, int from,
                                           const FormatFast &ff, GroupScale *g_out,
                                           GroupFast *t_out) {
  g_out->scale = __shfl_sync(0xFFFFFFFFu, g.scale, from);
  g_out->inv = __shfl_sync(0xFFFFFFFFu, g.inv, from);
  g_out->k = __shfl_sync(0xFFFFFFFFu, g.k, from);
  t_out->on = __shfl_sync(0xFFFFFFFFu, (int)t.on, from) != 0;
  t_out->fmt = ff;
  t_out->inv_k = __shfl_sync(0xFFFFFFFFu, t.inv_k, from);
  t_out->k_hi = __shfl_sync(0xFFFFFFFFu, t.k_hi, from);
  t_out->k_lo = __shfl_sync(0xFFFFFFFFu, t.k_lo, from);
  t_out->ls_hi = __shfl_sync(0xFFFFFFFFu, t.ls_hi, from);
  t_out->ls_lo = __shfl_sync(0xFFFFFFFFu, t.ls_lo, from);
}

/* Up to this 1/k the b table's factors stay far inside double's range: a
 * tabled format has -34 <= p_min < 0, so b0 = 2^(p_min / k) >= 2^-680 and
 * r^l = 2^(l / k) <= 2^620 for l < 32.  A group's k is at least
 * log_range / ln(FLT_MAX / FLT_TRUE_MIN), 0.064 for E4M3, so 1/k <= 16. */
constexpr double kTableMaxInvK = 20.0;

/* The tables of two groups side by side (every lane calls it at once):
 * group 0's entries y, log2 y, a in lanes 0-7, group 1's in lanes 16-23
 * (each half of the warp computes its group's), and both groups' b in every
 * lane.  One double exp2 a lane: lanes 0-7 of a half take a's, lanes 8 and 9
 * its group's b0 = 2^(p_min / k) and r = 2^(1 / k), and every lane l makes
 * b = b0 · r^l by squaring (nine products; r^l within 2^-46.4 of its
 * value, b0 within 2^-44 (|p_min / k| <= 680), so b within 2^-43.7: the
 * 2^-38.6 of a · b is a's). */
__device__ __forceinline__ void group_tables(const GroupScale g[2], GroupFast t[2]) {
  const int lane = threadIdx.x & 31, role = lane & 15;
  /* the half's own group, selected (an index would put the arrays in local
   * memory) */
  const bool upper = lane >= 16, on = upper ? t[1].on : t[0].on;
  const double inv_k = upper ? t[1].inv_k : t[0].inv_k;
  const int p_min = upper ? t[1].fmt.p_min : t[0].fmt.p_min;
  const float y = __fmul_rn((float)(8 + (lane & 7)), upper ? g[1].inv : g[0].inv);
  const double log2_y = on && role < 8 ? log2((double)y) : 0.0;
  const bool a_fine = on && fabs(log2_y) <= 160.0;
  const double arg = role < 8 ? __dmul_rn(log2_y, inv_k)
                              : role == 8 ? __dmul_rn((double)p_min, inv_k) : inv_k;
  const double e = exp2_or_nan(arg);
  const double a = a_fine ? e : fails_every_check();
  for (int k = 0; k < 2; k++) {
    t[k].table = 16 * k;
    t[k].y = y; /* only the lanes of t[k].table are read */
    t[k].log2_y = log2_y;
    t[k].a = a;
    const double b0 = __shfl_sync(0xFFFFFFFFu, e, 16 * k + 8);
    double sq = __shfl_sync(0xFFFFFFFFu, e, 16 * k + 9), rl = 1.0;
#pragma unroll
    for (int bit = 0; bit < 5; bit++) {
      if ((lane >> bit) & 1) rl = __dmul_rn(rl, sq);
      if (bit < 4) sq = __dmul_rn(sq, sq);
    }
    t[k].b = !(t[k].on && t[k].fmt.tabled) ? 0.0
             : t[k].inv_k <= kTableMaxInvK ? __dmul_rn(b0, rl)
                                           : fails_every_check();
  }
}

/* The two ends z0, z1 of the expansion's interval (x's sign, times the
 * scale) rounded to the format as floats: by the hardware's conversion
 * where hw names one (HW: always; finite inputs only: it saturates
 * infinities), by fast_encode_f and fast_decode_f otherwise; false where
 * either way does not apply or the two differ. */
template <bool HW>
__device__ __forceinline__ bool round_both_ends(const exmy_format &f, const KOpts &o, int hw,
                                                float z0, float z1, float &q) {
  if (HW || hw) {
    float q1;
    if (hw == 1)
      hw_quantize_rne_sat2<SPEC_E4M3FN>(z0, z1, q, q1);
    else
      hw_quantize_rne_sat2<SPEC_E5M2>(z0, z1, q, q1);
    return fabsf(z0) <= 3.40282347e38f && fabsf(z1) <= 3.40282347e38f &&
           __float_as_uint(q) == __float_as_uint(q1);
  }
  uint32_t c0 = 0, c1 = 1;
  const bool ok = fast_encode_f<EXMY_RNE>(f, 32, o.saturate, z0, 0u, c0) &&
                  fast_encode_f<EXMY_RNE>(f, 32, o.saturate, z1, 0u, c1) && c0 == c1;
  q = ok ? fast_decode_f(f, c0) : 0.0f;
  return ok;
}

/* group_round(f, o, x, g, j)'s value where *ok comes back true; where false
 * the caller takes group_round itself.  Every lane of the warp calls it at
 * once (the tables are shuffled), with or without an element.  Branch-free
 * for the formats the hardware rounds (FAST: every group's hw set and its
 * format tabled), so that two calls interleave. */
template <bool FAST>
__device__ __forceinline__ float group_round_try(const exmy_format &f, const KOpts &o, float x,
                                                 const GroupScale &g, const GroupFast &t,
                                                 bool *ok_out) {
  const float ax = fabsf(x);
  /* expansion: the code of x, from both ends of an interval around |x|^k s
   * (0^k = 0, the sign kept) */
  const bool zero = ax == 0.0f;
  bool ok = t.on && (zero || (ax >= 1.17549435e-38f && ax <= 3.40282347e38f));
  const uint32_t xb = __float_as_uint(ax);
  const float mant = __uint_as_float((xb & 0x007FFFFFu) | 0x3F800000u); /* [1, 2) */
  const float lg_mant = __log2f(mant);
  float q;
  if (FAST || t.fmt.narrow) {
    /* log2(|x|^k s) = k (E + log2 mant) + log2 s in float, by three fused
     * multiply-adds and an add in an order whose partial sums stay below
     * 2^6 wherever the code depends on it (the sum within 2^+-kNarrowLog2,
     * k <= 16): each of the four sums rounded once to within 2^-19 (the
     * first, below 2^6) or 2^-20 (below 2^5), log2 mant's 2^-22 times k,
     * E + log2 mant's rounding times k_lo and k's split below 2^-26 each:
     * the exponent within 2^-16.8, so its power (exp2f: 2 ulp) within
     * 2^-17.2 of |x|^k s, the exact path's two float roundings (2^-24)
     * included; the ends are rounded outward.  Outside that range every
     * value rounds to 0 or saturates (or overflows) alike, and the sum
     * (below 2^11.1) is off by less than 2^-10 there, too little to cross
     * into it.  The exact path rounds
     * fl(|x|^k) s, so fl(|x|^k) must be a normal float (tu about k log2 |x|
     * within 1/2 of its range), or the product too small for any subnormal
     * of fl(|x|^k) to reach a code: below 2^-20 with s below 2^120. */
    const float ex = (float)((int)(xb >> 23) - 127);
    const float t1 = __fmaf_rn(t.k_hi, ex, t.ls_hi);
    const float t2 = __fmaf_rn(t.k_hi, lg_mant, t1);
    const float t3 = __fmaf_rn(t.k_lo, __fadd_rn(ex, lg_mant), t2);
    const float e = __fadd_rn(t3, t.ls_lo), tu = __fsub_rn(t3, t.ls_hi);
    ok = ok && (zero || (tu <= 127.5f && (tu >= -125.5f || (e <= -20.0f && t.ls_hi <= 120.0f))));
    const float z = zero ? 0.0f : exp2f(e);
    ok = round_both_ends<FAST>(f, o, t.fmt.hw, copysignf(__fmul_rd(z, 1.0f - 0x1p-17f), x),
                               copysignf(__fmul_ru(z, 1.0f + 0x1p-17f), x), q) &&
         ok;
  } else {
    /* the same in double, |x|^k first, then its product with s in float
     * as the exact path rounds it */
    const double lg = __dadd_rn((double)((int)(xb >> 23) - 127), (double)lg_mant);
    double e = __dmul_rn(lg, g.k);
    ok = ok && (zero || fabs(e) <= 1000.0); /* a double, if not a float */
    e = ok ? e : 0.0;
    const int whole = __double2int_rd(e);
    /* exp2f(fraction) · 2^whole, 2^whole built from its bits (a normal double) */
    const double power =
        ok && !zero ? __dmul_rn((double)exp2f((float)__dsub_rn(e, (double)whole)),
                                __hiloint2double((whole + 1023) << 20, 0))
                    : 0.0;
    const float z_lo = __double2float_rn(__dmul_rn(power, 1.0 - 0x1p-17));
    const float z_hi = __double2float_rn(__dmul_rn(power, 1.0 + 0x1p-17));
    ok = round_both_ends<FAST>(f, o, t.fmt.hw, __fmul_rn(copysignf(z_lo, x), g.scale),
                               __fmul_rn(copysignf(z_hi, x), g.scale), q) &&
         ok;
  }
  q = ok ? q : 0.0f;
  /* contraction: w = q · inv, |q| = sig · 2^p, log2 |w| = p + log2(sig · inv) */
  const float w = mul_keep_nan(q, g.inv);
  const uint32_t qb = __float_as_uint(fabsf(q));
  const int sig = 8 + (int)((qb >> 20) & 7u), p = (int)(qb >> 23) - 127 - 3;
  const int entry = t.table + sig - 8;
  const float y = __shfl_sync(0xFFFFFFFFu, t.y, entry);
  double back;
  bool fine; /* the contraction's own conditions */
  if (FAST || t.fmt.tabled) {
    /* a[sig] · b[p - p_min]: |log2 y| <= 160 and both exponents within 1000
     * (else a or b is NaN), a within 2^-38.7 of its exact value and b within
     * 2^-43.7 (group_tables), so the product within 2^-38.6 (relative) of
     * |w|^(1/k) */
    const double a = __shfl_sync(0xFFFFFFFFu, t.a, entry);
    const double b = __shfl_sync(0xFFFFFFFFu, t.b, (p - t.fmt.p_min) & 31);
    fine = p >= t.fmt.p_min && p - t.fmt.p_min < 32;
    back = __dmul_rn(a, b);
  } else {
    const double log2_y = __shfl_sync(0xFFFFFFFFu, t.log2_y, entry);
    const double e2 = __dmul_rn(__dadd_rn((double)p, log2_y), t.inv_k);
    fine = fabs(log2_y) <= 160.0 && fabs(e2) <= 1000.0;
    back = exp2(ok && fine ? e2 : 0.0);
  }
  fine = fine && (qb & 0x000FFFFFu) == 0 && qb >= 0x00800000u && y >= 1.17549435e-38f &&
         p >= -126 && p <= 127 && fabsf(w) > 1.17549435e-38f && fabsf(w) <= 3.40282347e38f &&
         fabsf(w) == __fmul_rn(y, exmy_pow2f(p)) && t.inv_k <= 64.0;
  const float b_lo = __double2float_rn(__dmul_rn(back, 1.0 - 0x1p-36));
  const float b_hi = __double2float_rn(__dmul_rn(back, 1.0 + 0x1p-36));
  /* 0^(1/k) = 0, the sign kept */
  *ok_out = ok && (q == 0.0f || (fine && b_lo == b_hi));
  return q == 0.0f ? w : copysignf(b_lo, w);
}

}  // namespace exmy_cuda

#endif /* EXMY_CUDA_GROUP_DRE_CUH */
