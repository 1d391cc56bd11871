/*
 * The per-element arithmetic of the fast bulk kernels: branch-free 32-bit
 * integer code (selects, variable shifts) that the compiler vectorises.  The
 * rounding mode and the flush / E8M0 variants are compile-time constants of
 * each instantiation (cpu/bulk.c), so the hot loop holds no mode switch.
 *
 * Differences from lib/round_core.h, which this must equal bit for bit:
 *  - float32 subnormal inputs are not normalised (no clz, which AVX2 lacks):
 *    |x| = sig · 2^(max(E,1) - 150) with sig = the fraction field, plus the
 *    implicit bit when E > 0.  For a format whose quanta are uniform below
 *    2^emin this is the same arithmetic; E8M0 (no subnormals, geometric
 *    spacing) gets its own branch.
 *  - the number of dropped bits d is clamped to 31 for the truncation (sig
 *    has 24 bits, so every d >= 24 drops everything), but stochastic
 *    rounding's fraction uses the true d.
 *  - requires emin >= -126 (bias <= 127) for signed formats and the standard
 *    E8M0; other exotic formats take the reference loop (cpu/bulk.c).
 */
#ifndef EXMY_CPU_BULK_KERNEL_H
#define EXMY_CPU_BULK_KERNEL_H

#include <stddef.h>
#include <stdint.h>

#include "lib/exmy.h"

/* Loop invariants of one call, computed once from (format, options). */
typedef struct {
  uint32_t man_bits;      /* M */
  uint32_t emin_b;        /* emin + 127: the float32 biased exponent of 2^emin */
  uint32_t max_code;      /* magnitude code of the largest finite value */
  uint32_t sign_mask;     /* the code's sign bit (0 for E8M0) */
  uint32_t sign_shift;    /* 32 - bits: moves the code's sign to bit 31 */
  uint32_t fnuz;          /* 1: a zero result is code 0, never -0 */
  uint32_t sr_bits;       /* R in 1..32 */
  uint32_t sr_mask;       /* 2^R - 1 */
  uint32_t bias_adj;      /* (127 - bias) << 23: field -> float32 exponent */
  float sub_quantum;      /* 2^(emin - M): the value of subnormal code 1, or 1
                           * when sub_linear (then never a float32 subnormal:
                           * arithmetic on those costs ~100 cycles on x86) */
  uint32_t sub_linear;    /* emin = -126: the format's subnormals are float32
                           * subnormals, whose bits are code << (23 - M) */
  /* results of special cases, [0] for +, [1] for -: codes and float32 bits */
  uint32_t c_ovf_pos, c_ovf_neg, c_inf_pos, c_inf_neg, c_nan_pos, c_nan_neg;
  uint32_t q_ovf_pos, q_ovf_neg, q_inf_pos, q_inf_neg, q_nan_pos, q_nan_neg;
  uint32_t c_e8m0_bad, q_e8m0_bad; /* E8M0: zero or negative input */
  /* exmy_k_round_fast only, which requires fast = 1: */
  uint32_t fast;          /* signed, no flush, M >= emin */
  uint32_t drop;          /* d = 23 - M: float32 bits dropped in the normal range */
  uint32_t drop_mask;     /* 2^d - 1 */
  uint32_t half_m1;       /* 2^(d-1) - 1 (0 when d = 0) */
  uint32_t half;          /* 2^(d-1) (0 when d = 0) */
  uint32_t rne_odd;       /* 1, or 0 when d = 0 (nothing is dropped) */
  uint32_t unit;          /* 2^d: the last kept bit */
  uint32_t emin_bits;     /* float32 bits of 2^emin */
  uint32_t max_bits;      /* float32 bits of the largest finite value */
  uint32_t code_base;     /* (emin_b - 1) << M: float32 bits >> d -> code */
  float sub_scale_a, sub_scale_b; /* product 2^(M - emin): |x| -> quanta */
  uint32_t sr_keep;       /* normal range: bits of |x| that sr looks at */
  uint32_t sr_rshift, sr_lshift, sr_add_mask; /* rnd -> addend (see below) */
  float sub_sr_scale;     /* 2^R */
  /* 1: store the output with non-temporal stores where the kernel can (the
   * call's arrays are larger than the cache, see cpu/bulk.c) */
  uint32_t stream;
} exmy_kparams;

/* Philox block numbers of stream indices j (j >> 2, j a uint64_t) live mod
 * 2^62: a stream that wraps past j = 2^64 - 1 restarts at block 0. */
#define EXMY_SR_BLOCK_MASK ((UINT64_C(1) << 62) - 1u)

/* One loop over n elements: x -> out (float32 values or codes), with the
 * stream index of x[0] at j0 under key `seed` (sr only). */
typedef void (*exmy_kernel_fn)(const exmy_kparams *p, const float *x,
                               void *out, size_t n, uint64_t seed,
                               uint64_t j0);

#define EXMY_ALWAYS_INLINE static inline __attribute__((always_inline))

/* c ? a : b for c in {0, 1}, as a mask blend: a chain of ?: collapses into a
 * many-way PHI node that GCC's if-conversion refuses, and then nothing
 * vectorises. */
EXMY_ALWAYS_INLINE uint32_t exmy_sel(uint32_t c, uint32_t a, uint32_t b) {
  const uint32_t m = 0u - c;
  return (a & m) | (b & ~m);
}

/* The float32 bits of the finite code `code` (sign included). */
EXMY_ALWAYS_INLINE uint32_t exmy_k_decode_finite(const exmy_kparams *p,
                                                uint32_t code, const int E8M0) {
  if (E8M0) return code ? code << 23 : 0x00400000u; /* 2^(code - 127) */
  const uint32_t M = p->man_bits;
  uint32_t s = (code & p->sign_mask) << p->sign_shift;
  uint32_t mag = code & (p->sign_mask - 1u);
  union { float f; uint32_t u; } sub;
  sub.f = (float)(int32_t)mag * p->sub_quantum; /* exact: mag < 2^M */
  sub.u = exmy_sel(p->sub_linear, mag << (23 - M), sub.u);
  uint32_t normal = (mag << (23 - M)) + p->bias_adj;
  return s | exmy_sel((mag >> M) != 0, normal, sub.u);
}

/* x (as bits) -> code (QUANT = 0) or the float32 bits of its value
 * (QUANT = 1); `rnd` is the 32-bit uniform word for sr. */
EXMY_ALWAYS_INLINE uint32_t exmy_k_round(const exmy_kparams *p, uint32_t xb,
                                        uint32_t rnd, const int MODE,
                                        const int FLUSH, const int E8M0,
                                        const int QUANT) {
  const uint32_t a = xb & 0x7FFFFFFFu, neg = xb >> 31, E = a >> 23;
  const uint32_t M = p->man_bits;
  uint32_t code, rem, half, d, step = 1, odd, sub = 0, tiny = 0;
  if (E8M0) {
    /* below 2^-127 the only candidate is code 0; otherwise code = E and
     * the whole fraction (23 bits) is dropped; ties go up (ml_dtypes) */
    tiny = a < 0x00400000u;
    uint32_t sig = E ? (a & 0x7FFFFFu) | 0x800000u : a << 1;
    code = E;
    d = 23;
    rem = sig & 0x7FFFFFu;
    half = 0x00400000u;
    odd = 1;
  } else {
    const uint32_t Ee = E ? E : 1u;
    const uint32_t sig = (a & 0x7FFFFFu) | (E ? 0x800000u : 0u);
    sub = E < p->emin_b;
    const uint32_t below = sub ? p->emin_b - Ee : 0u;
    /* flush: below 2^emin the neighbours are 0 and 2^emin (code 1 << M) */
    const uint32_t fsub = FLUSH ? sub : 0u;
    d = (fsub ? 23u : 23u - M) + below;
    const uint32_t dc = d < 31u ? d : 31u;
    const uint32_t sb = fsub ? M : 0u;
    const uint32_t hi = sub ? 0u : (E - p->emin_b) << M;
    code = hi + ((sig >> dc) << sb);
    rem = sig & ((1u << dc) - 1u);
    half = (1u << dc) >> 1;
    step = 1u << sb;
    odd = fsub ? 1u : (code & 1u);
  }
  const uint32_t inexact = rem != 0;
  uint32_t up = 0;
  switch (MODE) {
    case EXMY_RNE: up = (rem > half) | ((rem == half) & inexact & odd); break;
    case EXMY_RNA: up = (rem >= half) & inexact; break;
    case EXMY_RU: up = inexact & (neg ^ 1u); break;
    case EXMY_RD: up = inexact & neg; break;
    case EXMY_SR: {
      /* the top R bits of the dropped fraction rem / 2^d, with the true d */
      const uint32_t R = p->sr_bits;
      uint32_t top;
      if (d >= R) {
        uint32_t sh = d - R;
        top = rem >> (sh < 31u ? sh : 31u);
      } else {
        uint32_t sh = R - d;
        top = rem << (sh < 31u ? sh : 31u); /* sh == 32 only when rem == 0 */
      }
      up = top > (p->sr_mask - (rnd >> (32u - R)));
      break;
    }
    default: break; /* rz; ro below */
  }
  if (MODE == EXMY_RO) {
    uint32_t ro = (FLUSH && !E8M0 && sub) ? step : (code | 1u);
    code = inexact ? ro : code;
  } else {
    code += up ? step : 0u;
  }
  if (E8M0) code = tiny ? 0u : code;

  const uint32_t ovf = code > p->max_code;
  const uint32_t zero_unsigned = p->fnuz & (code == 0);
  const uint32_t fin = ((0u - (neg & (zero_unsigned ^ 1u))) & p->sign_mask) | code;
  const uint32_t is_nan = a > 0x7F800000u, is_inf = a == 0x7F800000u;
  uint32_t r;
  if (QUANT) {
    r = exmy_k_decode_finite(p, fin, E8M0);
    r = exmy_sel(ovf, exmy_sel(neg, p->q_ovf_neg, p->q_ovf_pos), r);
    r = exmy_sel(is_inf, exmy_sel(neg, p->q_inf_neg, p->q_inf_pos), r);
    if (E8M0) r = exmy_sel((a == 0) | neg, p->q_e8m0_bad, r);
    r = exmy_sel(is_nan, exmy_sel(neg, p->q_nan_neg, p->q_nan_pos), r);
  } else {
    r = exmy_sel(ovf, exmy_sel(neg, p->c_ovf_neg, p->c_ovf_pos), fin);
    r = exmy_sel(is_inf, exmy_sel(neg, p->c_inf_neg, p->c_inf_pos), r);
    if (E8M0) r = exmy_sel((a == 0) | neg, p->c_e8m0_bad, r);
    r = exmy_sel(is_nan, exmy_sel(neg, p->c_nan_neg, p->c_nan_pos), r);
  }
  return r;
}


/*
 * The fast kernel for signed formats without flush (the common case): the
 * same results as exmy_k_round, with fewer instructions.
 *  - normal range (|x| >= 2^emin): the quantum is 2^d float32 ulps with d
 *    fixed per call, so rounding is integer arithmetic on the float32 bits
 *    with uniform shifts and masks; a carry flows into the exponent.
 *  - below 2^emin the quantum is q = 2^(emin-M): t = |x| / q is exact in
 *    float32 (a power-of-two scaling that only grows |x|), k = trunc(t) and
 *    fr = t - k are exact, and fr is precisely the dropped fraction.
 *  - stochastic rounding, normal range: adding the top bits of the random word
 *    below the last kept bit carries exactly when the reference's
 *    "top + rnd >= 2^R" does: with R < d the bits of |x| below the top R
 *    dropped ones are cleared first (sr_keep) and rnd's R bits are shifted to
 *    sit just under the kept bits; with R >= d, rnd >> (32 - d) is added.
 */
EXMY_ALWAYS_INLINE uint32_t exmy_k_round_fast(const exmy_kparams *p, float x,
                                             uint32_t rnd, const int MODE,
                                             const int QUANT) {
  union { float f; uint32_t u; } v = {.f = x}, ax;
  const uint32_t xb = v.u, a = xb & 0x7FFFFFFFu, neg = xb >> 31;
  const uint32_t sub = a < p->emin_bits;
  const uint32_t keep = ~p->drop_mask;
  uint32_t r = 0;
  switch (MODE) {
    case EXMY_RNE: r = (a + p->half_m1 + ((a >> p->drop) & p->rne_odd)) & keep; break;
    case EXMY_RNA: r = (a + p->half) & keep; break;
    case EXMY_RZ: r = a & keep; break;
    case EXMY_RU: r = (a + (p->drop_mask & (neg - 1u))) & keep; break;
    case EXMY_RD: r = (a + (p->drop_mask & (0u - neg))) & keep; break;
    case EXMY_RO: r = (a & keep) | ((a & p->drop_mask) != 0 ? p->unit : 0u); break;
    case EXMY_SR:
      r = ((a & p->sr_keep) + (((rnd >> p->sr_rshift) << p->sr_lshift) & p->sr_add_mask)) & keep;
      break;
  }
  /* below 2^emin: quanta */
  ax.u = a < p->emin_bits ? a : p->emin_bits; /* keeps t <= 2^M (and NaN out) */
  const float t = (ax.f * p->sub_scale_a) * p->sub_scale_b;
  const int32_t k = (int32_t)t;
  const float fr = t - (float)k;
  uint32_t kk = (uint32_t)k, up = 0;
  switch (MODE) {
    case EXMY_RNE: up = (fr > 0.5f) | ((fr == 0.5f) & kk); break;
    case EXMY_RNA: up = fr >= 0.5f; break;
    case EXMY_RU: up = (fr != 0.0f) & (neg ^ 1u); break;
    case EXMY_RD: up = (fr != 0.0f) & neg; break;
    case EXMY_RO: kk |= fr != 0.0f; break;
    case EXMY_SR: {
      /* floor(fr · 2^R) as uint32 (R may be 32: convert below 2^31) */
      union { float f; uint32_t u; } h = {.f = fr * p->sub_sr_scale}, off;
      const uint32_t big = h.u >= 0x4F000000u; /* h >= 2^31 (h >= 0) */
      off.u = (0u - big) & 0x4F000000u;        /* float selects stop GCC */
      uint32_t top = (uint32_t)(int32_t)(h.f - off.f) + (big << 31);
      uint32_t lim = p->sr_mask - (rnd >> (32u - p->sr_bits));
      up = (int32_t)(top ^ 0x80000000u) > (int32_t)(lim ^ 0x80000000u);
      break;
    }
    default: break;
  }
  kk += up & 1u;
  uint32_t out;
  if (QUANT) {
    union { float f; uint32_t u; } ys = {.f = (float)(int32_t)kk * p->sub_quantum};
    ys.u = exmy_sel(p->sub_linear, kk << p->drop, ys.u);
    const uint32_t mag = exmy_sel(sub, ys.u, r);
    const uint32_t ovf = mag > p->max_bits;
    const uint32_t signed_zero_ok = (p->fnuz & (mag == 0)) ^ 1u;
    out = mag | ((0u - (neg & signed_zero_ok)) & 0x80000000u);
    out = exmy_sel(ovf, exmy_sel(neg, p->q_ovf_neg, p->q_ovf_pos), out);
    if (MODE != EXMY_RNE && MODE != EXMY_RNA && MODE != EXMY_SR) /* else inf overflows */
      out = exmy_sel(a == 0x7F800000u, exmy_sel(neg, p->q_inf_neg, p->q_inf_pos), out);
    out = exmy_sel(a > 0x7F800000u, exmy_sel(neg, p->q_nan_neg, p->q_nan_pos), out);
  } else {
    const uint32_t code = exmy_sel(sub, kk, (r >> p->drop) - p->code_base);
    const uint32_t ovf = code > p->max_code;
    const uint32_t signed_zero_ok = (p->fnuz & (code == 0)) ^ 1u;
    out = code | ((0u - (neg & signed_zero_ok)) & p->sign_mask);
    out = exmy_sel(ovf, exmy_sel(neg, p->c_ovf_neg, p->c_ovf_pos), out);
    if (MODE != EXMY_RNE && MODE != EXMY_RNA && MODE != EXMY_SR)
      out = exmy_sel(a == 0x7F800000u, exmy_sel(neg, p->c_inf_neg, p->c_inf_pos), out);
    out = exmy_sel(a > 0x7F800000u, exmy_sel(neg, p->c_nan_neg, p->c_nan_pos), out);
  }
  return out;
}

#endif
