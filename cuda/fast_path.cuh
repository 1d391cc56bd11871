/*
 * Fast paths for every rounding mode in the formats that spec_format() knows
 * (E8M0 excepted, whose core is already short), and in run-time formats that
 * fast_path_ok() accepts.  The
 * reference core spends ~60 integer instructions per element on generality;
 * at copy speed an H100 has room for about 40.  These paths compute the same
 * code with float32 bit arithmetic:
 *
 *   normal range, rne: add (half ulp - 1 + the kept lsb) to the bits and
 *     truncate, the classic ties-to-even bit trick; sr: add the carry of the
 *     top sr_bits dropped bits plus the random word, as the core does;
 *     rna, rz, ru, rd, ro: truncate the bits to a code, then step up (or set
 *     the last bit) as the core's exmy_round_up decides from the dropped bits;
 *   subnormal range (|x| < 2^emin): the quantum 2^(emin-M) is fixed, so
 *     rne is |x| + C in float32 with C = 2^(emin-M+23) (the FPU's own
 *     ties-to-even, exact); the truncated code of the other modes is the same
 *     sum rounded toward zero (__fadd_rz), and the remainder |x| - code *
 *     quantum is exact in float32 (sr scales it by a power of two to a
 *     32-bit fraction of the quantum).
 *
 * Overflow resolves as in the core.  Anything else (NaN, inf, flushed
 * subnormals) returns false and
 * the caller runs the core, which stays the definition: tests/cuda checks
 * these paths against it on all 2^32 inputs.
 */
#ifndef EXMY_CUDA_FAST_PATH_CUH
#define EXMY_CUDA_FAST_PATH_CUH

#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "cuda/kernel_common.cuh"

namespace exmy_cuda {

/* Whether a format may take the fast paths (for a run-time format, checked
 * once per call). */
__host__ __device__ constexpr bool fast_path_ok(const exmy_format &f) {
  return f.specials != EXMY_SPECIALS_E8M0 && f.man_bits <= 22 &&
         f.emin - f.man_bits + 23 >= -126;
}

/* Whether the kernels of compile-time format ID use the fast paths: the rows
 * of the format table with GPU kernels that pass fast_path_ok (all but E8M0). */
template <int ID>
constexpr bool fast_path_enabled() {
  if constexpr (ID == SPEC_GENERIC)
    return false;
  else
    return spec_kernels(ID) != 0 && fast_path_ok(spec_format<ID>());
}

template <int ID>
struct Fast {
  static constexpr bool enabled = fast_path_enabled<ID>();
};

__host__ __device__ constexpr uint32_t pow2_bits(int p) { /* p in [-126, 127] */
  return (uint32_t)(p + 127) << 23;
}

/* Round to nearest even on a normal magnitude's bits a, keeping 23 - drop
 * mantissa bits: the sum whose bits above `drop` are the rounded magnitude
 * (add half an ulp less one, plus the kept last bit: ties go to even). */
__device__ __forceinline__ uint32_t rne_magnitude_sum(uint32_t a, int drop) {
  return a + ((1u << (drop - 1)) - 1u) + ((a >> drop) & 1u);
}

/* The code of x under MODE (sr: sr_bits R, random word rnd), or false.
 * f must pass fast_path_ok(); when f is a compile-time constant every field
 * folds. */
template <int MODE>
__device__ __forceinline__ bool fast_encode_f(const exmy_format &f, int R, int saturate,
                                              float x, uint32_t rnd, uint32_t &code) {
  const int M = f.man_bits, drop = 23 - M;
  const uint32_t min_normal = pow2_bits(f.emin);
  const uint32_t base = (uint32_t)(127 + f.emin - 1) << M;
  const uint32_t xb = __float_as_uint(x), a = xb & 0x7FFFFFFFu;
  const float ax = __uint_as_float(a);
  uint32_t c;
  if constexpr (MODE == EXMY_RNE) {
    const uint32_t cn = (rne_magnitude_sum(a, drop) >> drop) - base;
    const uint32_t cbits = pow2_bits(f.emin - M + 23);
    const float t = __fadd_rn(ax, __uint_as_float(cbits));
    const uint32_t cs = __float_as_uint(t) - cbits;
    c = a < min_normal ? cs : cn;
  } else { /* rna, rz, ru, rd, ro, sr: truncate, then step up or not */
    const uint32_t cn = (a >> drop) - base;
    /* subnormal: C + (truncated code) * quantum, and the remainder (exact: a
     * multiple of ulp(|x|) below |x|) */
    const uint32_t cbits = pow2_bits(f.emin - M + 23);
    const float tz = __fadd_rz(ax, __uint_as_float(cbits));
    const uint32_t cs = __float_as_uint(tz) - cbits;
    const float rs = __fsub_rn(ax, __fsub_rn(tz, __uint_as_float(cbits)));
    const bool sub = a < min_normal;
    c = sub ? cs : cn;
    if constexpr (MODE == EXMY_SR) {
      /* The dropped part as a 32-bit fraction of the gap, F (floor(rs / quantum
       * * 2^32): the product is exact, two steps keep each factor a float).
       * The core steps up when F's top R bits plus rnd's top R bits reach
       * 2^R, i.e. when the two, kept in place in 32 bits, carry out. */
      const uint32_t fn = a << (32 - drop);
      const int P = 32 + M - f.emin, P1 = P > 127 ? 127 : P, P2 = P - P1;
      const uint32_t fs = __float2uint_rz(__fmul_rn(
          __fmul_rn(rs, __uint_as_float(pow2_bits(P1))), __uint_as_float(pow2_bits(P2))));
      const uint32_t keep = ~0u << (32 - R), t = (sub ? fs : fn) & keep;
      c += t + (rnd & keep) < t ? 1u : 0u;
    } else {
      const uint32_t rem = a & ((1u << drop) - 1u);
      const bool negative = xb >> 31;
      const bool inexact = sub ? rs != 0.0f : rem != 0;
      /* twice the remainder (exact) against the quantum */
      const bool half = sub ? __fadd_rn(rs, rs) >= exmy_pow2f(f.emin - M)
                            : rem >= 1u << (drop - 1);
      if constexpr (MODE == EXMY_RNA) c += half ? 1u : 0u;
      else if constexpr (MODE == EXMY_RU) c += inexact && !negative ? 1u : 0u;
      else if constexpr (MODE == EXMY_RD) c += inexact && negative ? 1u : 0u;
      else if constexpr (MODE == EXMY_RO) c |= inexact ? 1u : 0u;
      else static_assert(MODE == EXMY_RZ, "a rounding mode of lib/exmy.h");
    }
  }
  /* selects, not branches: overflow, exactly as the core resolves it, and
   * FNUZ's zero without -0 */
  const uint32_t sign = (xb >> 31) ? f.sign_mask : 0u;
  const uint32_t over = exmy_overflow_code(&f, (exmy_rounding)MODE, saturate, sign);
  const uint32_t in_range = f.specials == EXMY_SPECIALS_FNUZ && c == 0 ? 0u : c | sign;
  code = c > f.max_code ? over : in_range;
  return a < 0x7F800000u; /* inf, NaN: the core */
}

template <int ID, int MODE>
__device__ __forceinline__ bool fast_encode(int R, int saturate, float x, uint32_t rnd,
                                            uint32_t &code) {
  constexpr exmy_format f = spec_format<ID>();
  return fast_encode_f<MODE>(f, R, saturate, x, rnd, code);
}

/* The value of x rounded to nearest even, decode(fast_encode_f<EXMY_RNE>(x)),
 * without the code: the rounded bits of a normal value are the sum of the
 * classic trick masked, a subnormal one is (|x| + C) - C (exact), and an
 * overflow saturates to the largest value.  False for inf and NaN and for
 * an overflow without saturation (the caller runs the core).  For the MX
 * images, which want the value: a third of encode-then-decode's integer
 * instructions.  tests/cuda checks it against the core on all 2^32 inputs. */
__device__ __forceinline__ bool fast_quantize_rne_f(const exmy_format &f, int saturate, float x,
                                                    float &q) {
  const int M = f.man_bits, drop = 23 - M;
  const uint32_t min_normal = pow2_bits(f.emin);
  const uint32_t base = (uint32_t)(127 + f.emin - 1) << M;
  const uint32_t max_bits = (f.max_code + base) << drop;
  const uint32_t xb = __float_as_uint(x), a = xb & 0x7FFFFFFFu;
  const uint32_t rn = rne_magnitude_sum(a, drop) & (~0u << drop);
  const float c = __uint_as_float(pow2_bits(f.emin - M + 23));
  const uint32_t rs = __float_as_uint(__fsub_rn(__fadd_rn(__uint_as_float(a), c), c));
  uint32_t v = a < min_normal ? rs : rn;
  const bool over = v > max_bits;
  v = over ? max_bits : v;
  const uint32_t sign = f.specials == EXMY_SPECIALS_FNUZ && v == 0 ? 0u : xb & 0x80000000u;
  q = __uint_as_float(v | sign);
  return a < 0x7F800000u && (saturate || !over);
}

template <int ID>
__device__ __forceinline__ bool fast_quantize_rne(int saturate, float x, float &q) {
  constexpr exmy_format f = spec_format<ID>();
  return fast_quantize_rne_f(f, saturate, x, q);
}

/* Whether compile-time format ID keeps float32's exponent field (8 bits,
 * bias 127, IEEE infinities and NaN) with at most 7 significand bits (bf16
 * and the E8Mx of "To FP8 and Back Again"): its finite values are the
 * float32 values whose low 23 - M mantissa bits are clear, normal and
 * subnormal alike, so its rounding is float32 bit arithmetic with a mask
 * (rz_by_mask, rne_by_mask). */
template <int ID>
__host__ __device__ constexpr bool by_mask_enabled() {
  if constexpr (ID == SPEC_GENERIC) {
    return false;
  } else {
    constexpr exmy_format f = spec_format<ID>();
    return f.exp_bits == 8 && f.bias == 127 && f.specials == EXMY_SPECIALS_IEEE &&
           f.man_bits <= 7;
  }
}

/* rz of a finite x (never past the largest value): x's bits with the low
 * mantissa bits cleared. */
template <int ID>
__device__ __forceinline__ float rz_by_mask(float x) {
  static_assert(by_mask_enabled<ID>(), "not a float32-exponent format");
  constexpr uint32_t keep = ~0u << (23 - spec_format<ID>().man_bits);
  return __uint_as_float(__float_as_uint(x) & keep);
}

/* rne of a finite x: the classic trick (rne_magnitude_sum) on the magnitude's
 * bits, masked.  Subnormals need no case of their own: float32's subnormal
 * bits count quanta of 2^-149 linearly, and a carry out of them lands on the
 * smallest normal, as it should.  A sum past the largest value saturates to
 * it; false when it overflows without saturation (the caller runs the core). */
template <int ID>
__device__ __forceinline__ bool rne_by_mask(int saturate, float x, float &q) {
  static_assert(by_mask_enabled<ID>(), "not a float32-exponent format");
  constexpr int drop = 23 - spec_format<ID>().man_bits;
  constexpr uint32_t keep = ~0u << drop, max_bits = 0x7F7FFFFFu & keep;
  const uint32_t xb = __float_as_uint(x);
  uint32_t r = rne_magnitude_sum(xb & 0x7FFFFFFFu, drop) & keep;
  const bool over = r > max_bits;
  r = over ? max_bits : r;
  q = __uint_as_float(r | (xb & 0x80000000u));
  return saturate || !over;
}

/* rz_by_mask and rne_by_mask on two bf16 values at once (the halves of p,
 * bf16 bits), for the formats of by_mask_enabled: on a value that is bf16
 * already the mask and the rounding addend reach only its top 16 bits, so
 * the arithmetic is 16-bit, two lanes a 32-bit word, and no carry crosses
 * into the other half (a magnitude of at most 0x7FFF plus an addend below
 * 2^(drop - 16)).  q: the two results' bf16 bits; false where a half is
 * inf or NaN, or rne overflows without saturation (the caller runs the
 * core). */
template <int ID, int MODE>
__device__ __forceinline__ bool by_mask_bf16x2(int saturate, uint32_t p, uint32_t &q) {
  static_assert(by_mask_enabled<ID>(), "not a float32-exponent format");
  static_assert(MODE == EXMY_RZ || MODE == EXMY_RNE, "rz or rne");
  constexpr int d = 7 - spec_format<ID>().man_bits; /* bits dropped of bf16's */
  constexpr uint32_t lanes = 0x00010001u, keep = (0xFFFFu << d & 0xFFFFu) * lanes;
  constexpr uint32_t max2 = (0x7F7Fu & (0xFFFFu << d)) * lanes;
  /* bit 15 of each half: set where that half's magnitude reaches inf's bits */
  auto at_inf = [](uint32_t m) { return (m + 0x00800080u) & 0x80008000u; };
  const uint32_t a = p & 0x7FFF7FFFu, sign = p & 0x80008000u;
  if (at_inf(a)) return false;
  if constexpr (MODE == EXMY_RZ || d == 0) {
    q = p & keep;
    return true;
  } else {
    uint32_t r = (a + ((1u << (d - 1)) - 1u) * lanes + ((a >> d) & lanes)) & keep;
    const uint32_t over = at_inf(r);
    if (over && !saturate) return false;
    const uint32_t sel = (over >> 15) * 0xFFFFu; /* all ones in each half that overflowed */
    q = ((r & ~sel) | (max2 & sel)) | sign;
    return true;
  }
}

/* Whether compile-time format ID has the hardware's own conversion (sm_89
 * and later: cvt.rn.satfinite.{e4m3,e5m2}x2.f32, and cvt back to f16x2),
 * which is round to nearest even with saturation to the largest finite
 * value: OCP E4M3 (FN) and E5M2. */
template <int ID>
struct HwPair {
  static constexpr bool enabled = ID == SPEC_E4M3FN || ID == SPEC_E5M2;
};

/* HwPair at run time: whether the hardware's conversion rounds f exactly
 * as the library does under rounding options that saturate (`saturate`
 * 0: never): 1 for OCP E4M3 (FN), 2 for E5M2, 0 otherwise. */
__host__ __device__ inline int hw_pair_kind(const exmy_format &f, int saturate) {
  if (!saturate) return 0;
  if (same_fields(f, spec_format<SPEC_E4M3FN>())) return 1;
  if (same_fields(f, spec_format<SPEC_E5M2>())) return 2;
  return 0;
}

/* fast_quantize_rne<ID>(1, x, q) for two finite x at once, by the hardware's
 * conversions: every E4M3 and E5M2 value is an fp16 value and every fp16
 * value a float32, so the way back is exact.  Finite inputs only (the
 * hardware gives NaN for NaN, the largest value for infinities).  About
 * 4 instructions a pair against fast_quantize_rne's ~15 an element: the MX
 * image kernel is bound by its arithmetic. */
template <int ID>
__device__ __forceinline__ void hw_quantize_rne_sat2(float x0, float x1, float &q0, float &q1) {
  static_assert(HwPair<ID>::enabled, "no hardware conversion for this format");
  constexpr __nv_fp8_interpretation_t kind = ID == SPEC_E4M3FN ? __NV_E4M3 : __NV_E5M2;
  const __nv_fp8x2_storage_t c = __nv_cvt_float2_to_fp8x2(make_float2(x0, x1), __NV_SATFINITE, kind);
  const float2 v = __half22float2(__half2(__nv_cvt_fp8x2_to_halfraw2(c, kind)));
  q0 = v.x;
  q1 = v.y;
}

/* code -> float32 for finite codes; the core for the special ones. */
__device__ __forceinline__ float fast_decode_f(const exmy_format &f, uint32_t code) {
  const int M = f.man_bits, drop = 23 - M;
  const uint32_t base = (uint32_t)(127 + f.emin - 1) << M;
  code &= f.bits >= 32 ? 0xFFFFFFFFu : (1u << f.bits) - 1u;
  const uint32_t mag = code & ~f.sign_mask;
  if (mag > f.max_code || (f.specials == EXMY_SPECIALS_FNUZ && code == f.nan_code))
    return exmy_core_decode(&f, code);
  float v;
  if (mag >= (1u << M))
    v = __uint_as_float((mag + base) << drop);
  else /* subnormal: mag quanta of 2^(emin - M), exact */
    v = __fmul_rn(__uint2float_rn(mag), exmy_pow2f(f.emin - M));
  return __uint_as_float(__float_as_uint(v) | ((code & f.sign_mask) ? 0x80000000u : 0u));
}

template <int ID>
__device__ __forceinline__ float fast_decode(uint32_t code) {
  constexpr exmy_format f = spec_format<ID>();
  return fast_decode_f(f, code);
}

}  // namespace exmy_cuda

#endif /* EXMY_CUDA_FAST_PATH_CUH */
