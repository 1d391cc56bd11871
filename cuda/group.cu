/*
 * Per-group scaling (EXMY_SCALING_GROUP) and COAT's dynamic range expansion
 * on the GPU, the twin of cpu/quantize_scaled.c's quantize_grouped (non-MX).
 * One block of 128 threads per (row, group): a block reduction finds the
 * group's finite amax and smallest nonzero |x|, thread 0 turns them into the
 * scale (exmy_core_scale_from_amax, lib/scale_core.h) and COAT's exponent k,
 * and the block rounds the group element by element with the core.
 */
#include <math.h>
#include <stdint.h>

#include "cuda/elementwise.cuh"
#include "cuda/exmy_cuda.h"

namespace {
using namespace exmy_cuda;

constexpr int kGroupThreads = 128;

__global__ void __launch_bounds__(kGroupThreads)
    k_group(const __grid_constant__ exmy_format f, const __grid_constant__ KOpts o,
            const float *x, float *y, size_t rows, size_t cols, size_t g,
            float fmax, double log_rf, int margin, int pow2, int dre) {
  const size_t per_row = (cols + g - 1) / g;
  const size_t t = blockIdx.x;
  if (t >= rows * per_row) return;
  const size_t r = t / per_row, c0 = (t % per_row) * g;
  const size_t len = cols - c0 < g ? cols - c0 : g, start = r * cols + c0;
  float amax = 0.0f, amin = INFINITY;
  for (size_t i = threadIdx.x; i < len; i += kGroupThreads) {
    const float a = fabsf(x[start + i]);
    if (a <= 3.40282347e38f) {
      amax = fmaxf(amax, a);
      if (a > 0.0f) amin = fminf(amin, a);
    }
  }
  __shared__ float s_max[kGroupThreads], s_min[kGroupThreads];
  __shared__ float s_scale, s_inv;
  __shared__ double s_k;
  s_max[threadIdx.x] = amax;
  s_min[threadIdx.x] = amin;
  __syncthreads();
  for (int d = kGroupThreads / 2; d > 0; d >>= 1) {
    if ((int)threadIdx.x < d) {
      s_max[threadIdx.x] = fmaxf(s_max[threadIdx.x], s_max[threadIdx.x + d]);
      s_min[threadIdx.x] = fminf(s_min[threadIdx.x], s_min[threadIdx.x + d]);
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    float gmax = s_max[0];
    const float gmin = s_min[0];
    double k = 1.0;
    if (dre && gmax > 0.0f && gmin > 0.0f && gmax > gmin) {
      k = log_rf / log((double)gmax / (double)gmin);
      if (k != 1.0) gmax = (float)pow((double)gmax, k);
    }
    const float s = exmy_core_scale_from_amax(fmax, gmax, margin, pow2);
    s_scale = s;
    s_inv = __fdiv_rn(1.0f, s);
    s_k = k;
  }
  __syncthreads();
  const float s = s_scale, inv = s_inv;
  const double k = s_k;
  for (size_t i = threadIdx.x; i < len; i += kGroupThreads) {
    const float xi = x[start + i];
    float xs;
    if (k != 1.0)
      xs = mul_keep_nan(copysignf((float)pow(fabs((double)xi), k), xi), s);
    else
      xs = mul_keep_nan(xi, s);
    const uint64_t j = o.offset + start + i;
    const uint32_t rnd = o.mode == EXMY_SR ? exmy_sr_word(o.seed, j) : 0u;
    const uint32_t c = encode_runtime<SPEC_GENERIC>(f, o, xs, rnd);
    float w = mul_keep_nan(decode_generic(f, c), inv);
    if (k != 1.0) w = copysignf((float)pow(fabs((double)w), 1.0 / k), w);
    y[start + i] = w;
  }
}

}  // namespace

extern "C" cudaError_t exmy_cuda_quantize_group_scaled_f32(
    const exmy_format *f, const exmy_rounding_opts *o, int group, int margin,
    bool pow2, bool dynamic_range_expansion, const float *x, float *y,
    size_t rows, size_t cols, cudaStream_t stream) {
  if (group < 0 || exmy_rounding_opts_check(o) != 0) return cudaErrorInvalidValue;
  size_t g = group > 0 ? (size_t)group : cols;
  if (g == 0) g = 1;
  if (rows * cols == 0) return cudaSuccess;
  exmy_format_info info;
  exmy_format_get_info(f, &info);
  const double log_rf = log((double)info.max / (double)info.min_subnormal);
  const size_t tasks = rows * ((cols + g - 1) / g);
  if (tasks > 0x7FFFFFFFu) return cudaErrorInvalidValue;
  k_group<<<(unsigned)tasks, kGroupThreads, 0, stream>>>(
      *f, kopts_of(o), x, y, rows, cols, g, info.max, log_rf, margin, pow2,
      dynamic_range_expansion);
  return cudaGetLastError();
}
