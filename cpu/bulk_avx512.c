/*
 * AVX-512 kernels of the bulk conversions, 16 lanes at a time: the twins of
 * exmy_k_round_fast (cpu/bulk_kernel.h) and of the Philox loop of cpu/bulk.c.
 *
 * Rounding, per lane, with a = |x| as bits and d = 23 - M dropped bits:
 *  - |x| >= 2^emin: integer arithmetic on a (add the mode's bias below the
 *    last kept bit, clear the dropped bits); a carry flows into the exponent.
 *  - |x| < 2^emin (formats whose emin > -126): the float32 sum a + C with
 *    C = 2^(emin - M + 23) lies in [C, 2C], where the float32 spacing is the
 *    format's subnormal quantum q = 2^(emin - M); so one float32 addition
 *    with the mode as embedded rounding control rounds |x| to a multiple of
 *    q, (a + C) - C is that multiple exactly, and bits(a + C) - bits(C) is
 *    its code.  ru / rd add with x's sign (C carries it) so that the
 *    direction applies to x, not |x|; rna is rz(rz(a + q/2) + C); ro is rz
 *    with the last bit set when inexact; sr is rz plus one quantum when the
 *    top R bits of the exact remainder a - rz(a) (scaled by 2^R / q, exact
 *    in float32) plus the random R bits carry.  Every float32 operation
 *    carries its rounding and suppresses exceptions (the other lanes hold
 *    inf, NaN, huge values): MXCSR's rounding mode and exception masks do
 *    not matter; its DAZ / FTZ must be off, as for the C loops.
 *  - formats with emin = -126 (E8: bf16, E8M3..) need no second path: their
 *    subnormals are float32 subnormals, whose bits are linear in the value
 *    with the same spacing 2^d, so the integer arithmetic covers them.
 *  - with flush, below 2^emin the result is 0 or 2^emin by a compare of |x|
 *    (sr: the top R bits of |x| / 2^emin by per-lane shifts).
 *  - E8M0: the exponent field plus the mode's carry from the fraction.
 * Then overflow (the result passed max), inf and NaN inputs take the
 * per-call results computed by cpu/bulk.c from the reference's own helpers,
 * by mask moves; no lane branches.
 *
 * Output: 64 elements per iteration, packed to one 64-byte line for 8-bit
 * codes; with p->stream (arrays larger than the cache) the lines go out by
 * non-temporal stores, which skip the read-for-ownership of the output:
 * memory traffic 8 instead of 12 bytes per float32 element.
 */
#include "cpu/bulk_avx512.h"

#if EXMY_HAVE_AVX512_KERNELS

#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "lib/exmy.h"
#include "lib/philox.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl")

int exmy_avx512_usable(void) {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
}

/* ------------------------------------------------------------------ Philox */

/* Philox4x32-10 on 8 counter blocks per register, one block per 64-bit lane
 * (its 32-bit words in the low halves): _mm512_mul_epu32 reads exactly those
 * halves and returns hi:lo of the product in the lane, so the new c1 / c3
 * are the products themselves and only the high halves need moving down.
 * G independent groups hide the multiplies' latency. */
#define PHILOX_G 4

typedef struct {
  uint32_t ka[10], kb[10]; /* round r's key: seed + r * (W0, W1) */
} philox_keys;

static inline __attribute__((always_inline)) void philox_groups(
    const philox_keys *k, uint64_t b0, __m512i c[][4], const int G) {
  const __m512i lane = _mm512_setr_epi64(0, 1, 2, 3, 4, 5, 6, 7);
  const __m512i m0 = _mm512_set1_epi32((int)EXMY_PHILOX_M0);
  const __m512i m1 = _mm512_set1_epi32((int)EXMY_PHILOX_M1);
  for (int g = 0; g < G; g++) {
    const __m512i blk = _mm512_and_si512(_mm512_add_epi64(_mm512_set1_epi64((long long)(b0 + 8u * (unsigned)g)), lane),
                                         _mm512_set1_epi64((long long)EXMY_SR_BLOCK_MASK));
    c[g][0] = blk;                         /* low half: lo32(block) */
    c[g][1] = _mm512_srli_epi64(blk, 32);  /* hi32(block) */
    c[g][2] = c[g][3] = _mm512_setzero_si512();
  }
  for (int r = 0; r < 10; r++) {
    const __m512i ka = _mm512_set1_epi32((int)k->ka[r]), kb = _mm512_set1_epi32((int)k->kb[r]);
    for (int g = 0; g < G; g++) {
      const __m512i p0 = _mm512_mul_epu32(c[g][0], m0);
      const __m512i p1 = _mm512_mul_epu32(c[g][2], m1);
      /* 0x96: a ^ b ^ c; the two high-half moves use different ports */
      c[g][0] = _mm512_ternarylogic_epi32(_mm512_srli_epi64(p1, 32), c[g][1], ka, 0x96);
      c[g][2] = _mm512_ternarylogic_epi32(_mm512_shuffle_epi32(p0, _MM_PERM_CDAB), c[g][3], kb, 0x96);
      c[g][1] = p1;
      c[g][3] = p0;
    }
  }
}

/* The 32 words of one group in stream order: word k of block b at 4b + k. */
static inline __attribute__((always_inline)) void philox_store(uint32_t *w, const __m512i c[4]) {
  const __m512i pair = _mm512_setr_epi32(0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30);
  const __m512i lo = _mm512_setr_epi64(0, 8, 1, 9, 2, 10, 3, 11);
  const __m512i hi = _mm512_setr_epi64(4, 12, 5, 13, 6, 14, 7, 15);
  const __m512i t01 = _mm512_permutex2var_epi32(c[0], pair, c[1]); /* (c0, c1) of block b in qword b */
  const __m512i t23 = _mm512_permutex2var_epi32(c[2], pair, c[3]);
  _mm512_storeu_si512(w, _mm512_permutex2var_epi64(t01, lo, t23));
  _mm512_storeu_si512(w + 16, _mm512_permutex2var_epi64(t01, hi, t23));
}

static void philox_keys_make(uint64_t seed, philox_keys *k) {
  uint32_t ka = (uint32_t)seed, kb = (uint32_t)(seed >> 32);
  for (int r = 0; r < 10; r++, ka += EXMY_PHILOX_W0, kb += EXMY_PHILOX_W1) k->ka[r] = ka, k->kb[r] = kb;
}

static inline __attribute__((always_inline)) void philox_words_k(const philox_keys *k, uint64_t b0,
                                                               size_t nb, uint32_t *w) {
  size_t i = 0;
  for (; i + 8 * PHILOX_G <= nb; i += 8 * PHILOX_G) {
    __m512i c[PHILOX_G][4];
    philox_groups(k, b0 + i, c, PHILOX_G);
    for (int g = 0; g < PHILOX_G; g++) philox_store(w + 4 * (i + 8 * g), c[g]);
  }
  for (; i < nb; i += 8) {
    __m512i c[1][4];
    philox_groups(k, b0 + i, c, 1);
    if (i + 8 <= nb) {
      philox_store(w + 4 * i, c[0]);
    } else {
      uint32_t tmp[32];
      philox_store(tmp, c[0]);
      memcpy(w + 4 * i, tmp, 4 * 4 * (nb - i));
    }
  }
}

void exmy_avx512_philox_words(uint64_t seed, uint64_t b0, size_t nb, uint32_t *w) {
  philox_keys k;
  philox_keys_make(seed, &k);
  philox_words_k(&k, b0, nb, w);
}

/* -------------------------------------------------------------- rounding */

/* The loop invariants as vectors. */
typedef struct {
  __m512i abs, keep, half_m1, half, drop_mask, rne_unit, unit, one;
  __m512i emin_bits, max_bits, max_code, inf, c_bits, drop, code_base;
  __m512i sign_shift, sign_mask, sign_bit;
  __m512i sr_keep, sr_rshift, sr_lshift, sr_add_mask, sr_mask, sr_lim_shift;
  __m512i ovf_pos, ovf_neg, inf_pos, inf_neg, nan_pos, nan_neg;
  __m512i e8_bad, e8_sr_r, e8_sr_l; /* E8M0: zero/negative result; sr shifts */
  __m512i flush_half, flush_xmin, flush_drop_r, frac, implicit; /* flush */
  __m512 c, qh, sr_sa, sr_sb;
  __mmask16 fnuz;
} vparams;

static inline __m512i bc(uint32_t u) { return _mm512_set1_epi32((int)u); }

static void vparams_make(const exmy_kparams *p, int quant, vparams *v) {
  const int M = (int)p->man_bits, emin = (int)p->emin_b - 127, R = (int)p->sr_bits;
  v->abs = bc(0x7FFFFFFFu);
  v->keep = bc(~p->drop_mask);
  v->half_m1 = bc(p->half_m1);
  v->half = bc(p->half);
  v->drop_mask = bc(p->drop_mask);
  v->rne_unit = bc(p->rne_odd ? p->unit : 0u);
  v->unit = bc(p->unit);
  v->one = bc(1u);
  v->emin_bits = bc(p->emin_bits);
  v->max_bits = bc(p->max_bits);
  v->max_code = bc(p->max_code);
  v->inf = bc(0x7F800000u);
  v->drop = bc(p->drop);
  v->code_base = bc(p->code_base);
  v->sign_shift = bc(p->sign_shift);
  v->sign_mask = bc(p->sign_mask);
  v->sign_bit = bc(0x80000000u);
  v->sr_keep = bc(p->sr_keep);
  v->sr_rshift = bc(p->sr_rshift);
  v->sr_lshift = bc(p->sr_lshift);
  v->sr_add_mask = bc(p->sr_add_mask);
  v->sr_mask = bc(p->sr_mask);
  v->sr_lim_shift = bc(32u - p->sr_bits);
  v->ovf_pos = bc(quant ? p->q_ovf_pos : p->c_ovf_pos);
  v->ovf_neg = bc(quant ? p->q_ovf_neg : p->c_ovf_neg);
  v->inf_pos = bc(quant ? p->q_inf_pos : p->c_inf_pos);
  v->inf_neg = bc(quant ? p->q_inf_neg : p->c_inf_neg);
  v->nan_pos = bc(quant ? p->q_nan_pos : p->c_nan_pos);
  v->nan_neg = bc(quant ? p->q_nan_neg : p->c_nan_neg);
  v->fnuz = p->fnuz ? 0xFFFF : 0;
  v->e8_bad = bc(quant ? p->q_e8m0_bad : p->c_e8m0_bad);
  v->e8_sr_r = bc(R < 23 ? (uint32_t)(23 - R) : 0u);
  v->e8_sr_l = bc(R > 23 ? (uint32_t)(R - 23) : 0u);
  /* flush: 2^(emin - 1) (a float32 subnormal when emin = -126); xmin as a
   * result; 23 + emin_b - R */
  const float flush_half = ldexpf(1.0f, emin - 1);
  uint32_t flush_half_bits;
  memcpy(&flush_half_bits, &flush_half, 4);
  v->flush_half = bc(flush_half_bits);
  v->flush_xmin = bc(quant ? p->emin_bits : 1u << M);
  v->flush_drop_r = bc((uint32_t)(23 + (int)p->emin_b - R));
  v->frac = bc(0x7FFFFFu);
  v->implicit = bc(0x800000u);
  /* below 2^emin (unused when emin = -126): C = 2^(emin - M + 23) is a
   * normal float32 (emin >= -125 and M >= emin here); q/2 may be subnormal */
  const float c = ldexpf(1.0f, emin - M + 23);
  v->c = _mm512_set1_ps(c);
  v->c_bits = _mm512_castps_si512(v->c);
  v->qh = _mm512_set1_ps(ldexpf(1.0f, emin - M - 1));
  /* the remainder (< q) times 2^R / q = 2^(R + M - emin) <= 2^180, in two
   * exact steps of at most 2^90 */
  const int up = R + M - emin;
  v->sr_sa = _mm512_set1_ps(ldexpf(1.0f, up / 2));
  v->sr_sb = _mm512_set1_ps(ldexpf(1.0f, up - up / 2));
}

#define RN_ (_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define RZ_ (_MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC)
#define RU_ (_MM_FROUND_TO_POS_INF | _MM_FROUND_NO_EXC)
#define RD_ (_MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC)

#define EXMY_AI static inline __attribute__((always_inline))

/* E8M0 (cpu/bulk_kernel.h's E8M0 branch): code = the float32 exponent field
 * plus the mode's carry from the 23 dropped fraction bits (of 2x for a float32
 * subnormal); 0 below 2^-127; zero and negative inputs are "bad". */
EXMY_AI __m512i round16_e8m0(const vparams *v, __m512i x, __m512i rnd, const int MODE,
                             const int OUT) {
  const __m512i a = _mm512_and_si512(x, v->abs);
  const __mmask16 neg = _mm512_movepi32_mask(x);
  const __m512i frac = _mm512_set1_epi32(0x7FFFFF), half = _mm512_set1_epi32(0x400000);
  const __mmask16 e0 = _mm512_testn_epi32_mask(a, v->inf);
  const __m512i rem = _mm512_and_si512(_mm512_mask_slli_epi32(a, e0, a, 1), frac);
  __m512i code = _mm512_srli_epi32(a, 23);
  __mmask16 up = 0;
  switch (MODE) {
    case EXMY_RNE: /* ties up: the kept bit is the implicit 1 */
    case EXMY_RNA: up = _mm512_cmpge_epu32_mask(rem, half); break;
    case EXMY_RU: up = _mm512_mask_test_epi32_mask((__mmask16)~neg, rem, rem); break;
    case EXMY_RD: up = _mm512_mask_test_epi32_mask(neg, rem, rem); break;
    case EXMY_RO:
      code = _mm512_mask_or_epi32(code, _mm512_test_epi32_mask(rem, rem), code, v->one);
      break;
    case EXMY_SR: {
      const __m512i top = _mm512_sllv_epi32(_mm512_srlv_epi32(rem, v->e8_sr_r), v->e8_sr_l);
      const __m512i lim = _mm512_sub_epi32(v->sr_mask, _mm512_srlv_epi32(rnd, v->sr_lim_shift));
      up = _mm512_cmpgt_epu32_mask(top, lim);
      break;
    }
    default: break;
  }
  code = _mm512_mask_add_epi32(code, up, code, v->one);
  code = _mm512_mask_mov_epi32(code, _mm512_cmplt_epu32_mask(a, half), _mm512_setzero_si512());
  const __mmask16 ovf = _mm512_cmpgt_epu32_mask(code, v->max_code);
  __m512i out = code;
  if (!OUT) /* 2^(code - 127); code 0 is the float32 subnormal 2^-127 */
    out = _mm512_mask_mov_epi32(_mm512_slli_epi32(code, 23), _mm512_testn_epi32_mask(code, code), half);
  /* negative lanes end "bad" unless NaN, so only the + results matter */
  out = _mm512_mask_mov_epi32(out, ovf, v->ovf_pos);
  out = _mm512_mask_mov_epi32(out, _mm512_cmpeq_epi32_mask(a, v->inf), v->inf_pos);
  out = _mm512_mask_mov_epi32(out, neg | _mm512_testn_epi32_mask(a, a), v->e8_bad);
  return _mm512_mask_mov_epi32(out, _mm512_cmpgt_epu32_mask(a, v->inf), v->nan_pos);
}

/* x (16 float32 lanes as bits) -> float32 bits of the result (OUT = 0) or
 * codes (OUT = 1, 2, 4); rnd: the sr words. */
EXMY_AI __m512i round16(const vparams *v, __m512i x, __m512i rnd, const int MODE,
                        const int OUT, const int KIND) {
  if (KIND == EXMY_K512_E8M0) return round16_e8m0(v, x, rnd, MODE, OUT);
  const __m512i a = _mm512_and_si512(x, v->abs);
  const __mmask16 neg = _mm512_movepi32_mask(x);
  __m512i r;
  switch (MODE) {
    case EXMY_RNE: {
      const __mmask16 odd = _mm512_test_epi32_mask(a, v->rne_unit);
      r = _mm512_add_epi32(a, v->half_m1);
      r = _mm512_and_si512(_mm512_mask_add_epi32(r, odd, r, v->one), v->keep);
      break;
    }
    case EXMY_RNA: r = _mm512_and_si512(_mm512_add_epi32(a, v->half), v->keep); break;
    case EXMY_RZ: r = _mm512_and_si512(a, v->keep); break;
    case EXMY_RU:
      r = _mm512_and_si512(_mm512_mask_add_epi32(a, (__mmask16)~neg, a, v->drop_mask), v->keep);
      break;
    case EXMY_RD: r = _mm512_and_si512(_mm512_mask_add_epi32(a, neg, a, v->drop_mask), v->keep); break;
    case EXMY_RO: {
      const __mmask16 inexact = _mm512_test_epi32_mask(a, v->drop_mask);
      r = _mm512_and_si512(a, v->keep);
      r = _mm512_mask_or_epi32(r, inexact, r, v->unit);
      break;
    }
    default: { /* sr */
      __m512i add = _mm512_sllv_epi32(_mm512_srlv_epi32(rnd, v->sr_rshift), v->sr_lshift);
      add = _mm512_and_si512(add, v->sr_add_mask);
      r = _mm512_and_si512(_mm512_add_epi32(_mm512_and_si512(a, v->sr_keep), add), v->keep);
      break;
    }
  }
  /* the normal-range result: float32 bits, or the code */
  __m512i m = OUT ? _mm512_sub_epi32(_mm512_srlv_epi32(r, v->drop), v->code_base) : r;
  if (KIND == EXMY_K512_SUB) {
    const __mmask16 sub = _mm512_cmplt_epu32_mask(a, v->emin_bits);
    const __m512 af = _mm512_castsi512_ps(a);
    __m512 s; /* in [C, 2C]: C plus the rounded |x| */
    switch (MODE) {
      case EXMY_RNE: s = _mm512_add_round_ps(af, v->c, RN_); break;
      case EXMY_RNA: s = _mm512_add_round_ps(_mm512_add_round_ps(af, v->qh, RZ_), v->c, RZ_); break;
      case EXMY_RZ: s = _mm512_add_round_ps(af, v->c, RZ_); break;
      case EXMY_RU:
      case EXMY_RD: {
        /* x + copysign(C, x), rounded toward +-inf, then its magnitude */
        const __m512 cs = _mm512_castsi512_ps(_mm512_ternarylogic_epi32(v->c_bits, x, v->sign_bit, 0xF8));
        const __m512 xs = _mm512_castsi512_ps(x);
        s = MODE == EXMY_RU ? _mm512_add_round_ps(xs, cs, RU_) : _mm512_add_round_ps(xs, cs, RD_);
        s = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(s), v->abs));
        break;
      }
      case EXMY_RO: {
        s = _mm512_add_round_ps(af, v->c, RZ_);
        const __m512 t = _mm512_sub_round_ps(s, v->c, RN_);
        const __mmask16 inexact = _mm512_cmpneq_epi32_mask(_mm512_castps_si512(t), a);
        s = _mm512_castsi512_ps(_mm512_mask_or_epi32(_mm512_castps_si512(s), inexact,
                                                     _mm512_castps_si512(s), v->one));
        break;
      }
      default: { /* sr */
        s = _mm512_add_round_ps(af, v->c, RZ_);
        const __m512 rem = _mm512_sub_round_ps(af, _mm512_sub_round_ps(s, v->c, RN_), RN_); /* exact, < q */
        const __m512 scaled = _mm512_mul_round_ps(_mm512_mul_round_ps(rem, v->sr_sa, RN_), v->sr_sb, RN_);
        const __m512i top = _mm512_cvtt_roundps_epu32(scaled, _MM_FROUND_NO_EXC);
        const __m512i lim = _mm512_sub_epi32(v->sr_mask, _mm512_srlv_epi32(rnd, v->sr_lim_shift));
        const __mmask16 up = _mm512_cmpgt_epu32_mask(top, lim);
        s = _mm512_castsi512_ps(_mm512_mask_add_epi32(_mm512_castps_si512(s), up,
                                                      _mm512_castps_si512(s), v->one));
        break;
      }
    }
    const __m512i ms = OUT ? _mm512_sub_epi32(_mm512_castps_si512(s), v->c_bits)
                           : _mm512_castps_si512(_mm512_sub_round_ps(s, v->c, RN_));
    m = _mm512_mask_mov_epi32(m, sub, ms);
  } else if (KIND == EXMY_K512_FLUSH) {
    /* below 2^emin the neighbours are 0 and xmin = 2^emin; the dropped
     * fraction is |x| / xmin */
    const __mmask16 sub = _mm512_cmplt_epu32_mask(a, v->emin_bits);
    __mmask16 up = 0;
    switch (MODE) {
      case EXMY_RNE: /* ties go to xmin */
      case EXMY_RNA: up = _mm512_cmpge_epu32_mask(a, v->flush_half); break;
      case EXMY_RU: up = _mm512_mask_test_epi32_mask((__mmask16)~neg, a, a); break;
      case EXMY_RD: up = _mm512_mask_test_epi32_mask(neg, a, a); break;
      case EXMY_RO: up = _mm512_test_epi32_mask(a, a); break;
      case EXMY_SR: {
        /* |x| = sig * 2^-drop * xmin with sig the 24-bit significand (the
         * fraction field of a float32 subnormal, with exponent -126) and
         * drop = 23 + emin_b - max(E, 1) >= 23: top = sig * 2^(R - drop),
         * below 2^32 (srlv by >= 32 gives 0) */
        const __m512i e = _mm512_srli_epi32(a, 23);
        const __m512i sig = _mm512_mask_or_epi32(_mm512_and_si512(a, v->frac), _mm512_test_epi32_mask(e, e),
                                                 _mm512_and_si512(a, v->frac), v->implicit);
        const __m512i drop_r = _mm512_sub_epi32(v->flush_drop_r, _mm512_max_epu32(e, v->one));
        const __m512i zero = _mm512_setzero_si512();
        const __m512i top = _mm512_sllv_epi32(_mm512_srlv_epi32(sig, _mm512_max_epi32(drop_r, zero)),
                                              _mm512_max_epi32(_mm512_sub_epi32(zero, drop_r), zero));
        const __m512i lim = _mm512_sub_epi32(v->sr_mask, _mm512_srlv_epi32(rnd, v->sr_lim_shift));
        up = _mm512_cmpgt_epu32_mask(top, lim);
        break;
      }
      default: break; /* rz */
    }
    m = _mm512_mask_mov_epi32(m, sub, _mm512_maskz_mov_epi32(up, v->flush_xmin));
  }
  /* sign (none on a fnuz zero), then overflow, inf, NaN */
  const __mmask16 ovf = _mm512_cmpgt_epu32_mask(m, OUT ? v->max_code : v->max_bits);
  const __mmask16 signed_ok = (__mmask16)~_mm512_mask_testn_epi32_mask(v->fnuz, m, m);
  __m512i out;
  if (OUT)
    out = _mm512_mask_ternarylogic_epi32(m, signed_ok, _mm512_srlv_epi32(x, v->sign_shift),
                                         v->sign_mask, 0xF8); /* m | (b & c) */
  else
    out = _mm512_mask_ternarylogic_epi32(m, signed_ok, x, v->sign_bit, 0xF8);
  out = _mm512_mask_mov_epi32(out, ovf, _mm512_mask_blend_epi32(neg, v->ovf_pos, v->ovf_neg));
  if (MODE != EXMY_RNE && MODE != EXMY_RNA && MODE != EXMY_SR) /* else inf overflows */
    out = _mm512_mask_mov_epi32(out, _mm512_cmpeq_epi32_mask(a, v->inf),
                                _mm512_mask_blend_epi32(neg, v->inf_pos, v->inf_neg));
  out = _mm512_mask_mov_epi32(out, _mm512_cmpgt_epu32_mask(a, v->inf),
                              _mm512_mask_blend_epi32(neg, v->nan_pos, v->nan_neg));
  return out;
}

/* ----------------------------------------------------------------- loops */

/* Software prefetch distance of the input.  The hardware prefetchers alone
 * leave the loops well short of the copy's bandwidth once there is work per
 * element; measured (cpu/bench arrays, 2 threads, x copy) for distances 0,
 * 1, 2, 4, 8, 16 KiB: E4M3 rne encode 1.07 1.16 1.26 1.28 1.26 1.26, sr
 * encode 0.60 0.66 0.67 0.75 0.74 0.73, sr quantize 0.57 0.68 0.68 0.67 0.66
 * 0.69, ru encode 0.92 1.21 1.24 1.22 1.23 1.20. */
enum { PREFETCH_BYTES = 4096 };

/* up to 16 elements (mask k) at element i */
EXMY_AI void part16(const vparams *v, const float *x, void *out, size_t i, __mmask16 k,
                    const uint32_t *w, const int MODE, const int OUT, const int KIND) {
  const __m512i xv = _mm512_maskz_loadu_epi32(k, x + i);
  const __m512i rv = MODE == EXMY_SR ? _mm512_maskz_loadu_epi32(k, w + i) : _mm512_setzero_si512();
  const __m512i r = round16(v, xv, rv, MODE, OUT, KIND);
  switch (OUT) {
    case 1: _mm512_mask_cvtepi32_storeu_epi8((uint8_t *)out + i, k, r); break;
    case 2: _mm512_mask_cvtepi32_storeu_epi16((uint16_t *)out + i, k, r); break;
    default: _mm512_mask_storeu_epi32((uint32_t *)out + i, k, r); break;
  }
}

EXMY_AI void put64(void *dst, __m512i v, const int STREAM) {
  if (STREAM) _mm512_stream_si512((__m512i *)dst, v);
  else _mm512_storeu_si512(dst, v);
}

/* 64 elements at element i */
EXMY_AI void full64(const vparams *v, const float *x, void *out, size_t i, const uint32_t *w,
                    const int MODE, const int OUT, const int KIND, const int STREAM) {
  __m512i r[4];
  for (int k = 0; k < 4; k++) _mm_prefetch((const char *)(x + i + 16 * k) + PREFETCH_BYTES, _MM_HINT_T0);
  for (int k = 0; k < 4; k++) {
    const __m512i xv = _mm512_loadu_si512(x + i + 16 * k);
    const __m512i rv = MODE == EXMY_SR ? _mm512_loadu_si512(w + i + 16 * k) : _mm512_setzero_si512();
    r[k] = round16(v, xv, rv, MODE, OUT, KIND);
  }
  if (OUT == 1) {
    /* packs work within 128-bit lanes: dword 4L + k of b holds codes
     * 4L .. 4L+3 of r[k]; a 4x4 dword transpose puts them in order */
    const __m512i b = _mm512_packus_epi16(_mm512_packus_epi32(r[0], r[1]),
                                          _mm512_packus_epi32(r[2], r[3]));
    const __m512i t = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    put64((uint8_t *)out + i, _mm512_permutexvar_epi32(t, b), STREAM);
  } else if (OUT == 2) {
    const __m512i t = _mm512_setr_epi64(0, 2, 4, 6, 1, 3, 5, 7);
    put64((uint16_t *)out + i, _mm512_permutexvar_epi64(t, _mm512_packus_epi32(r[0], r[1])), STREAM);
    put64((uint16_t *)out + i + 32, _mm512_permutexvar_epi64(t, _mm512_packus_epi32(r[2], r[3])), STREAM);
  } else {
    for (int k = 0; k < 4; k++) put64((uint32_t *)out + i + 16 * k, r[k], STREAM);
  }
}

/* elements before out + i * size reaches a 64-byte boundary, at most n */
static inline size_t stream_head(const void *out, size_t n, const int OUT) {
  const size_t esize = OUT ? (size_t)OUT : 4, mis = (uintptr_t)out & 63;
  const size_t head = mis ? (64 - mis) / esize : 0;
  return head < n ? head : n;
}

static inline __mmask16 first_lanes(size_t m) {
  return m >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << m) - 1u);
}

/* Elements [0, n) with words w (sr), stream order: full 64-element groups,
 * partial vectors at the ends; with STREAM, the groups start on 64-byte
 * boundaries of out (n: a multiple of 64 whenever more follows). */
EXMY_AI void range(const vparams *v, const float *x, void *out, size_t n, const uint32_t *w,
                   const int MODE, const int OUT, const int KIND, const int STREAM) {
  size_t i = 0;
  if (STREAM) {
    const size_t head = stream_head(out, n, OUT);
    while (i < head) {
      const size_t m = head - i < 16 ? head - i : 16;
      part16(v, x, out, i, first_lanes(m), w, MODE, OUT, KIND);
      i += m;
    }
  }
  for (; i + 64 <= n; i += 64) full64(v, x, out, i, w, MODE, OUT, KIND, STREAM);
  for (; i < n; i += 16) part16(v, x, out, i, first_lanes(n - i), w, MODE, OUT, KIND);
}

/* sr in the AVX-512 loops: elements per tile of random words (4 KiB, in L1;
 * the C loops of cpu/bulk.c tile by PORTABLE_SR_TILE) */
enum { AVX512_SR_TILE = 1024 };

EXMY_AI void kernel(const exmy_kparams *p, const float *x, void *out, size_t n, uint64_t seed,
                    uint64_t j0, const int MODE, const int OUT, const int KIND) {
  vparams v;
  vparams_make(p, OUT == 0, &v);
  const size_t esize = OUT ? (size_t)OUT : 4;
  const int stream = p->stream && (uintptr_t)out % esize == 0;
  if (MODE != EXMY_SR) {
    if (stream) range(&v, x, out, n, NULL, MODE, OUT, KIND, 1);
    else range(&v, x, out, n, NULL, MODE, OUT, KIND, 0);
  } else {
    philox_keys k;
    philox_keys_make(seed, &k);
    /* the first tile has up to 63 more elements; 4 words of slack for a
     * start inside a block */
    uint32_t words[AVX512_SR_TILE + 64 + 4];
    /* tiles of AVX512_SR_TILE elements after the first, which also covers
     * the unaligned head: then every later tile starts on a line of out */
    const size_t first = (stream ? stream_head(out, n, OUT) : 0) + AVX512_SR_TILE;
    for (size_t t0 = 0, len; t0 < n; t0 += len) {
      len = t0 == 0 ? first : AVX512_SR_TILE;
      if (len > n - t0) len = n - t0;
      const uint64_t j = j0 + t0; /* may wrap: then so does the block number */
      philox_words_k(&k, j >> 2, ((j & 3) + len + 3) >> 2, words);
      const float *xt = x + t0;
      void *ot = (char *)out + t0 * esize;
      if (stream) range(&v, xt, ot, len, words + (j & 3), MODE, OUT, KIND, 1);
      else range(&v, xt, ot, len, words + (j & 3), MODE, OUT, KIND, 0);
    }
  }
  if (stream) _mm_sfence(); /* order the non-temporal stores before the caller's next access */
}

#define K512(NAME, MODE, OUT, KIND)                                                        \
  static void NAME(const exmy_kparams *p, const float *x, void *out, size_t n, uint64_t seed, \
                   uint64_t j0) {                                                            \
    kernel(p, x, out, n, seed, j0, MODE, OUT, KIND);                                       \
  }
#define K512_MODES(SUF, OUT, KIND)                                                          \
  K512(k512_rne_##SUF, EXMY_RNE, OUT, KIND)                                                 \
  K512(k512_rna_##SUF, EXMY_RNA, OUT, KIND)                                                 \
  K512(k512_rz_##SUF, EXMY_RZ, OUT, KIND)                                                   \
  K512(k512_ru_##SUF, EXMY_RU, OUT, KIND)                                                   \
  K512(k512_rd_##SUF, EXMY_RD, OUT, KIND)                                                   \
  K512(k512_ro_##SUF, EXMY_RO, OUT, KIND)                                                   \
  K512(k512_sr_##SUF, EXMY_SR, OUT, KIND)                                                   \
  static const exmy_kernel_fn row512_##SUF[7] = {k512_rne_##SUF, k512_rna_##SUF, k512_rz_##SUF, \
                                                 k512_ru_##SUF,  k512_rd_##SUF,  k512_ro_##SUF, \
                                                 k512_sr_##SUF};

K512_MODES(q, 0, EXMY_K512_SUB)
K512_MODES(q_lin, 0, EXMY_K512_LINEAR)
K512_MODES(q_e8m0, 0, EXMY_K512_E8M0)
K512_MODES(c8, 1, EXMY_K512_SUB)
K512_MODES(c8_lin, 1, EXMY_K512_LINEAR)
K512_MODES(c8_e8m0, 1, EXMY_K512_E8M0)
K512_MODES(c16, 2, EXMY_K512_SUB)
K512_MODES(c16_lin, 2, EXMY_K512_LINEAR)
K512_MODES(c32, 4, EXMY_K512_SUB)
K512_MODES(c32_lin, 4, EXMY_K512_LINEAR)
K512_MODES(q_flush, 0, EXMY_K512_FLUSH)
K512_MODES(c8_flush, 1, EXMY_K512_FLUSH)
K512_MODES(c16_flush, 2, EXMY_K512_FLUSH)
K512_MODES(c32_flush, 4, EXMY_K512_FLUSH)

exmy_kernel_fn exmy_avx512_kernel(int mode, int out_bytes, exmy_k512_kind kind) {
  static const exmy_kernel_fn *const rows[4][4] = {
      {row512_q, row512_q_lin, row512_q_e8m0, row512_q_flush},
      {row512_c8, row512_c8_lin, row512_c8_e8m0, row512_c8_flush},
      {row512_c16, row512_c16_lin, NULL, row512_c16_flush},
      {row512_c32, row512_c32_lin, NULL, row512_c32_flush}};
  const int o = out_bytes == 0 ? 0 : out_bytes == 1 ? 1 : out_bytes == 2 ? 2 : 3;
  const exmy_kernel_fn *row = rows[o][kind];
  return row ? row[mode] : NULL;
}

#pragma GCC pop_options
#endif
