/*
 * The FP8 codes of the GPU trainer's float32 slots, for cuBLASLt's FP8 GEMM
 * under the hopper accumulation models (gemm.cu): host and device, so that
 * tests/experiments/gpu/fp8_codes_test checks them on the host, without a GPU.
 */
#ifndef EXPERIMENTS_GPU_FP8_CODES_CUH
#define EXPERIMENTS_GPU_FP8_CODES_CUH

#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <math.h>

#include "lib/accum_core.h"

namespace exmy_gpu {

/* Why a GEMM leaves cuBLASLt's FP8 GEMM for the emulation, as bits of the
 * device flag the code kernels set. */
enum { kFp8ScalesOutOfRange = 1, kFp8NotCodes = 2 };

/* The bound on the GEMM's alpha: 2^-16 <= |alpha| <= 2^16 (fp8_alpha_ok). */
enum { kFp8AlphaExpMax = 16 };

/* The bounds on sa = 2^ka and sb = 2^kb, the two operands' scales (y = c /
 * s), under which the model on the slots' y is 2^-(ka+kb) times the model on
 * the codes c without a float32 rounding changing, whatever order cuBLASLt
 * multiplies its scale pointers and alpha (within kFp8AlphaExpMax, checked
 * by the caller) into the codes' sum: nonzero sums of FP8 products lie
 * between 2^-33 and 2^56, so every partial product of the sum, alpha,
 * 1/sa and 1/sb stays a float32 normal (>= 2^-126, < 2^128) when the scales
 * above 1 multiply to at most 2^77 and those below 1 to at least 2^-55.
 * Gradients' scales are the large ones (their values are small). */
enum { kFp8ScaleUpMax = 77, kFp8ScaleDownMin = -55 };

/* Whether alpha allows the FP8 GEMM: |alpha| between 2^-kFp8AlphaExpMax and
 * 2^kFp8AlphaExpMax. */
__host__ __device__ inline bool fp8_alpha_ok(float alpha) {
  const float a = fabsf(alpha);
  return a >= exmy_pow2f(-kFp8AlphaExpMax) && a <= exmy_pow2f(kFp8AlphaExpMax);
}

/* Whether the two operands' scales (1 for an unscaled one) allow the FP8
 * GEMM: both powers of two (exmy_pow2_exponent), within the bounds above. */
__host__ __device__ inline bool fp8_scales_ok(float sa, float sb) {
  int ka, kb;
  if (!exmy_pow2_exponent(sa, &ka) || !exmy_pow2_exponent(sb, &kb)) return false;
  const int up = (ka > 0 ? ka : 0) + (kb > 0 ? kb : 0);
  const int down = (ka < 0 ? ka : 0) + (kb < 0 ? kb : 0);
  return up <= kFp8ScaleUpMax && down >= kFp8ScaleDownMin;
}

/* The emin the model clamps a slot's values at: model_emin, or for a
 * pow2-scaled operand (scaled_emin) the format's emin model_emin shifted by
 * its scale s, exmy_accum_scaled_emin (as the emulation computes it). */
__host__ __device__ inline int fp8_model_emin(int model_emin, bool scaled_emin, float s) {
  return scaled_emin ? exmy_accum_scaled_emin(model_emin, s) : model_emin;
}

/* *code = the FP8 code of y s (E4M3 or E5M2), for a slot value y = Q(x s) / s
 * (s = 1, inv = 1: unscaled); true if the model on y is the model on the
 * codes shifted: y s is exactly a finite code, y = code / s exactly, and the
 * model's clamp of y's exponent at model_emin (fp8_model_emin) is the tensor
 * core's clamp of the code's at the format's emin: always for an unscaled
 * operand and for a pow2-scaled one (the format's emin - log2 s, s within
 * fp8_scales_ok's bounds), subnormal codes included; with float32's emin (a scale the model does
 * not follow) only where the code is not an FP8 subnormal. */
template <bool E4M3>
__host__ __device__ inline bool fp8_code_of(float y, float s, float inv, int fmt_emin,
                                            int model_emin, __nv_fp8_storage_t *code) {
  const __nv_fp8_interpretation_t kind = E4M3 ? __NV_E4M3 : __NV_E5M2;
  const float v = y * s;
  *code = __nv_cvt_float_to_fp8(v, __NV_NOSAT, kind);
  const float back = __half2float(__half(__nv_cvt_fp8_to_halfraw(*code, kind)));
  /* v / s back to y: y s was exact (one of the two scalings is up) */
  if (!isfinite(v) || back != v || v * inv != y) return false;
  if (y == 0.0f) return true;
  const int ey = ilogbf(y), ev = ilogbf(v);
  const int clamp_model = (ey > model_emin ? ey : model_emin) - ey;
  const int clamp_hw = (ev > fmt_emin ? ev : fmt_emin) - ev;
  return clamp_model == clamp_hw;
}

}  // namespace exmy_gpu

#endif
