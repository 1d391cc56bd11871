/*
 * Device-side reductions: per-tensor statistics (exmy_tensor_stats_f32's twin)
 * and per-tensor current scaling (EXMY_SCALING_TENSOR) with the amax, the
 * scale and the rounding all on the GPU, so that a training step needs no
 * host round trip per tensor.
 *
 * The statistics (lib/stats_core.h's sums, as on the CPU) reduce in a fixed
 * tree (per thread, per block, then one block over the block partials), so
 * they are deterministic; their double sums differ from the CPU's only by the
 * order of additions.
 */
#include <algorithm>
#include <cuda_bf16.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "cuda/elementwise.cuh"
#include "cuda/exmy_cuda.h"
#include "cuda/reduce.cuh"

namespace {
using namespace exmy_cuda;

__global__ void __launch_bounds__(kStatThreads)
    k_stats_partial(const float *x, const float *y, size_t n, float fmax_f,
                    float fmin_normal, int vec, exmy_stats_sums *partial) {
  exmy_stats_sums a;
  exmy_stats_sums_init(&a);
  const size_t groups = (n + 3) / 4;
  const size_t stride = (size_t)gridDim.x * kStatThreads;
  for (size_t g = (size_t)blockIdx.x * kStatThreads + threadIdx.x; g < groups;
       g += stride) {
    const size_t i = g * 4;
    if (vec && i + 4 <= n) {
      const float4 xv = *reinterpret_cast<const float4 *>(x + i);
      const float4 yv = *reinterpret_cast<const float4 *>(y + i);
      exmy_stats_sums_add(&a, fmax_f, fmin_normal, xv.x, xv.x, yv.x, yv.x);
      exmy_stats_sums_add(&a, fmax_f, fmin_normal, xv.y, xv.y, yv.y, yv.y);
      exmy_stats_sums_add(&a, fmax_f, fmin_normal, xv.z, xv.z, yv.z, yv.z);
      exmy_stats_sums_add(&a, fmax_f, fmin_normal, xv.w, xv.w, yv.w, yv.w);
    } else {
      for (size_t k = i; k < n && k < i + 4; k++)
        exmy_stats_sums_add(&a, fmax_f, fmin_normal, x[k], x[k], y[k], y[k]);
    }
  }
  stats_block_reduce<kStatThreads>(a);
  if (threadIdx.x == 0) partial[blockIdx.x] = a;
}

/* The same with a per-tensor scale {s, 1/s} (device): xs = x·s (float, as
 * the CPU), and q = Q(xs) recovered from y = fl(q·(1/s)) as the format's
 * nearest value of y·s: y·s lies within a few float ulps of q, far inside
 * half a step of any format of <= 23 mantissa bits, so the recovery is exact
 * (statistics steps only: the generic core is slow but runs once per tensor). */
__global__ void __launch_bounds__(kStatThreads)
    k_stats_partial_scaled(const __grid_constant__ exmy_format f, const float *x, const float *y,
                           size_t n, const float *scale_inv, float fmax_f, float fmin_normal,
                           exmy_stats_sums *partial) {
  exmy_stats_sums a;
  exmy_stats_sums_init(&a);
  const float s = scale_inv[0];
  const size_t stride = (size_t)gridDim.x * kStatThreads;
  for (size_t i = (size_t)blockIdx.x * kStatThreads + threadIdx.x; i < n; i += stride) {
    const float xi = x[i], yi = y[i], xs = xi * s;
    const float q = exmy_core_decode(&f, exmy_core_encode(&f, EXMY_RNE, false, false, 32,
                                                          yi * s, 0));
    exmy_stats_sums_add(&a, fmax_f, fmin_normal, xi, xs, q, yi);
  }
  stats_block_reduce<kStatThreads>(a);
  if (threadIdx.x == 0) partial[blockIdx.x] = a;
}

/* The same for OCP MX blocks: element (r, c) has the E8M0 scale code
 * scales[r * nblocks + c / block] = e + 127, so xs = x·2^-e and q = y·2^-e,
 * exact (powers of two), as cpu/quantize_scaled.c's quantize_grouped sees them. */
__global__ void __launch_bounds__(kStatThreads)
    k_stats_partial_mx(const float *x, const float *y, const uint8_t *scales, size_t rows,
                       size_t cols, int block, float fmax_f, float fmin_normal, exmy_stats_sums *partial) {
  exmy_stats_sums a;
  exmy_stats_sums_init(&a);
  const size_t n = rows * cols, nb = (cols + block - 1) / block;
  const size_t stride = (size_t)gridDim.x * kStatThreads;
  for (size_t i = (size_t)blockIdx.x * kStatThreads + threadIdx.x; i < n; i += stride) {
    const size_t r = i / cols, c = i % cols;
    const int e = (int)scales[r * nb + c / block] - 127;
    const float s = exmy_pow2f(-e);
    exmy_stats_sums_add(&a, fmax_f, fmin_normal, x[i], x[i] * s, y[i] * s, y[i]);
  }
  stats_block_reduce<kStatThreads>(a);
  if (threadIdx.x == 0) partial[blockIdx.x] = a;
}

/* stats->scale and, for delayed scaling, stats->delayed_over_current = the
 * scale used over exmy_scale_from_amax of this tensor's amax. */
__global__ void k_stats_scale(exmy_tensor_stats *st, const float *scale_inv, float fmax,
                              int margin, int pow2, int delayed) {
  st->scale = scale_inv[0];
  if (!delayed) return;
  const float cur = exmy_core_scale_from_amax(fmax, (float)st->amax, margin, pow2);
  st->delayed_over_current = exmy_fdiv_rn(scale_inv[0], cur); /* in float, as the CPU divides */
}

/* ---- per-tensor current scaling ---- */

/* exmy_scale_from_amax of the device amax; then inv = 1 / s. */
__global__ void k_scale(const unsigned int *amax_bits, float fmax, int margin,
                        int pow2, float *scale_inv) {
  wait_for_previous_kernel();
  const float2 si = scale_pair_from_amax(*amax_bits, fmax, margin, pow2);
  scale_inv[0] = si.x;
  scale_inv[1] = si.y;
}

template <int ID, int MODE>
__global__ void __launch_bounds__(kThreads)
    k_quantize_scaled(const __grid_constant__ exmy_format rt, const __grid_constant__ KOpts o, const float *x, float *y,
                      size_t n, int vec, const float *scale_inv) {
  const auto &f = kernel_format<ID>(rt);
  const size_t base = ((size_t)blockIdx.x * kThreads + threadIdx.x) * kPer;
  if (base >= n) return;
  quantize8_scaled<ID, MODE>(f, o, x, y, base, n, vec, scale_inv[0], scale_inv[1]);
}

/* The compile-time formats get an rne kernel of their own; everything else
 * runs the run-time-mode kernel of its format (the generic one included). */
template <int ID>
struct ScaledOp {
  static void run(const exmy_format &f, const KOpts &k, const float *x, float *y, size_t n,
                  const float *si, cudaStream_t s) {
    const int vec = (((uintptr_t)x | (uintptr_t)y) & 15u) == 0;
    const unsigned blocks = blocks_for((n + kPer - 1) / kPer, kThreads);
    if constexpr (ID != SPEC_GENERIC) {
      if (k.mode == EXMY_RNE) {
        k_quantize_scaled<ID, EXMY_RNE><<<blocks, kThreads, 0, s>>>(f, k, x, y, n, vec, si);
        return;
      }
    }
    k_quantize_scaled<ID, kRuntimeMode><<<blocks, kThreads, 0, s>>>(f, k, x, y, n, vec, si);
  }
};

void launch_scaled_any(const exmy_format &f, const KOpts &k, const float *x, float *y,
                       size_t n, const float *si, cudaStream_t stream) {
  with_spec_format<EXMY_GPU_SCALED, ScaledOp>(&f, f, k, x, y, n, si, stream);
}

/* The BF16 GEMM path's operand in one pass: q = Q(x·s) stored as bfloat16
 * (the scaled value: the GEMM applies 1/s through alpha; scale_inv NULL: no
 * scaling), and, if amax_bits, the finite max |x| folded in.  The codes are
 * those of the float32 kernels (same core, same Philox stream for sr), so the
 * values are bit-identical. */
template <int ID, int MODE>
__global__ void __launch_bounds__(kThreads)
    k_quantize_scaled_bf16(const __grid_constant__ exmy_format rt, const __grid_constant__ KOpts o,
                           const float *__restrict__ x, uint16_t *__restrict__ y, size_t n,
                           int vec, const float *scale_inv, const exmy_cuda_amax_scale cs,
                           unsigned int *amax_bits) {
  const auto &f = kernel_format<ID>(rt);
  const size_t base = ((size_t)blockIdx.x * kThreads + threadIdx.x) * kPer;
  float m = 0.0f, v[kPer];
  const bool full = base < n && load8(x, base, n, vec, v);
  __shared__ float pair[2];
  scale_inv = block_scale_pair(scale_inv, cs, pair);
  if (base < n) {
    uint32_t c[kPer];
    quantize8_bf16<ID, MODE>(f, o, base, n, v, scale_inv, m, c);
    store8<uint16_t>(y, base, n, full, c);
  }
  if (amax_bits) block_amax_fold<kThreads>(m, amax_bits);
}

/* The kernel for the format and mode: with_operand_mode (elementwise.cuh). */
template <int ID>
struct ScaledBf16Op {
  static void run(const exmy_format &f, const KOpts &k, const float *x, uint16_t *y, size_t n,
                  const float *si, const exmy_cuda_amax_scale &cs, unsigned int *amax,
                  cudaStream_t s) {
    const int vec = (((uintptr_t)x | (uintptr_t)y) & 15u) == 0;
    /* one block at least: block 0 writes a scale worked out (n may be 0) */
    const unsigned blocks = std::max(1u, blocks_for((n + kPer - 1) / kPer, kThreads));
    with_operand_mode<ID>(k.mode, [&](auto mode) {
      k_quantize_scaled_bf16<ID, decltype(mode)::value><<<blocks, kThreads, 0, s>>>(
          f, k, x, y, n, vec, si, cs, amax);
    });
  }
};

/* si: the scale given (or NULL: unscaled), unless cs names an amax word */
void launch_scaled_bf16_any(const exmy_format &f, const KOpts &k, const float *x, uint16_t *y,
                            size_t n, const float *si, unsigned int *amax, cudaStream_t s,
                            const exmy_cuda_amax_scale &cs = {}) {
  with_spec_format<EXMY_GPU_BF16, ScaledBf16Op>(&f, f, k, x, y, n, si, cs, amax, s);
}

/* exmy_delayed_state_update on the device, the history's position
 * {count, latest} included: it lives on the device, so that a step's
 * launches are the same every step (a CUDA graph may replay them). */
__global__ void k_delayed_update(float *history, int len, int *position,
                                 const unsigned int *amax_bits, int most_recent,
                                 float fmax, int margin, int pow2, float *scale_inv,
                                 float *scale_used) {
  wait_for_previous_kernel();
  if (scale_used) *scale_used = scale_inv[0]; /* the scale this call rounded with */
  exmy_core_delayed_advance(len, &position[0], &position[1]);
  exmy_core_delayed_update(history, len, position[1], __uint_as_float(*amax_bits), most_recent,
                           fmax, margin, pow2, &scale_inv[0], &scale_inv[1]);
}

}  // namespace

struct exmy_cuda_delayed_state {
  int history_len;
  int *position;           /* device: the CPU struct's count and latest */
  float *history;          /* device, history_len floats */
  float *scale_inv;        /* device: scale, 1/scale */
  unsigned int *amax_bits; /* device scratch */
};

extern "C" void exmy_cuda_delayed_state_free(exmy_cuda_delayed_state *s) {
  if (!s) return;
  cudaFree(s->position);
  cudaFree(s->history);
  cudaFree(s->scale_inv);
  cudaFree(s->amax_bits);
  free(s);
}

extern "C" exmy_cuda_delayed_state *exmy_cuda_delayed_state_new(int history_len) {
  if (history_len < 1) return NULL;
  exmy_cuda_delayed_state *s = (exmy_cuda_delayed_state *)calloc(1, sizeof *s);
  if (!s) return NULL;
  s->history_len = history_len;
  const float one[2] = {1.0f, 1.0f};
  const int position[2] = {0, history_len - 1}; /* exmy_delayed_state_new's */
  if (cudaMalloc((void **)&s->position, sizeof position) != cudaSuccess ||
      cudaMemcpy(s->position, position, sizeof position, cudaMemcpyHostToDevice) != cudaSuccess ||
      cudaMalloc((void **)&s->history, sizeof(float) * history_len) != cudaSuccess ||
      cudaMalloc((void **)&s->scale_inv, 2 * sizeof(float)) != cudaSuccess ||
      cudaMalloc((void **)&s->amax_bits, sizeof(unsigned int)) != cudaSuccess ||
      cudaMemset(s->history, 0, sizeof(float) * history_len) != cudaSuccess ||
      cudaMemcpy(s->scale_inv, one, sizeof one, cudaMemcpyHostToDevice) != cudaSuccess) {
    exmy_cuda_delayed_state_free(s);
    return NULL;
  }
  return s;
}

extern "C" const float *exmy_cuda_delayed_scale(const exmy_cuda_delayed_state *s) {
  return s->scale_inv;
}

extern "C" cudaError_t exmy_cuda_delayed_state_copy(exmy_cuda_delayed_state *dst,
                                                    const exmy_cuda_delayed_state *src,
                                                    cudaStream_t stream) {
  if (!dst || !src || dst->history_len != src->history_len) return cudaErrorInvalidValue;
  if (dst == src) return cudaSuccess;
  EXMY_CUDA_TRY(cudaMemcpyAsync(dst->position, src->position, 2 * sizeof(int),
                                cudaMemcpyDeviceToDevice, stream));
  EXMY_CUDA_TRY(cudaMemcpyAsync(dst->history, src->history, sizeof(float) * src->history_len,
                                cudaMemcpyDeviceToDevice, stream));
  return cudaMemcpyAsync(dst->scale_inv, src->scale_inv, 2 * sizeof(float),
                         cudaMemcpyDeviceToDevice, stream);
}

extern "C" cudaError_t exmy_cuda_delayed_begin(exmy_cuda_delayed_state *state,
                                               const float **scale_inv,
                                               unsigned int **amax_bits, cudaStream_t stream) {
  if (!state) return cudaErrorInvalidValue;
  EXMY_CUDA_TRY(cudaMemsetAsync(state->amax_bits, 0, sizeof(unsigned int), stream));
  if (scale_inv) *scale_inv = state->scale_inv;
  if (amax_bits) *amax_bits = state->amax_bits;
  return cudaSuccess;
}

extern "C" cudaError_t exmy_cuda_delayed_end(const exmy_format *f, int margin, bool pow2,
                                             bool history_most_recent,
                                             exmy_cuda_delayed_state *state, float *scale_used,
                                             cudaStream_t stream) {
  if (!state) return cudaErrorInvalidValue;
  exmy_format_info info;
  exmy_format_get_info(f, &info);
  return launch_single_dependent(k_delayed_update, stream, state->history, state->history_len,
                                 state->position, (const unsigned int *)state->amax_bits,
                                 (int)history_most_recent, info.max, margin, (int)pow2,
                                 state->scale_inv, scale_used);
}

extern "C" cudaError_t exmy_cuda_quantize_delayed_scaled_f32(
    const exmy_format *f, const exmy_rounding_opts *o, int margin, bool pow2,
    bool history_most_recent, exmy_cuda_delayed_state *state, const float *x,
    float *y, size_t n, cudaStream_t stream) {
  if (!state || exmy_rounding_opts_check(o) != 0) return cudaErrorInvalidValue;
  const float *si;
  unsigned int *amax;
  EXMY_CUDA_TRY(exmy_cuda_delayed_begin(state, &si, &amax, stream));
  if (n) launch_amax(x, n, amax, stream); /* before y (may alias x) */
  if (n) launch_scaled_any(*f, kopts_of(o), x, y, n, si, stream);
  return exmy_cuda_delayed_end(f, margin, pow2, history_most_recent, state, nullptr, stream);
}

extern "C" cudaError_t exmy_cuda_tensor_stats_f32(const exmy_format *f,
                                                  const float *x, const float *y,
                                                  size_t n,
                                                  exmy_tensor_stats *stats,
                                                  cudaStream_t stream) {
  exmy_format_info info;
  exmy_format_get_info(f, &info);
  const int nb = stat_blocks();
  exmy_stats_sums *partial;
  EXMY_CUDA_TRY(stream_scratch(stream, sizeof(exmy_stats_sums) * nb, (void **)&partial));
  const int vec = (((uintptr_t)x | (uintptr_t)y) & 15u) == 0;
  k_stats_partial<<<nb, kStatThreads, 0, stream>>>(x, y, n, info.max,
                                                   info.min_normal, vec, partial);
  k_stats_finish<<<1, kStatThreads, 0, stream>>>(partial, nb, stats);
  return cudaGetLastError();
}

extern "C" cudaError_t exmy_cuda_scale_from_amax(const exmy_format *f, int margin, bool pow2,
                                                 const unsigned int *amax_bits, float *scale_inv,
                                                 cudaStream_t stream) {
  exmy_format_info info;
  exmy_format_get_info(f, &info);
  return launch_single_dependent(k_scale, stream, amax_bits, info.max, margin, (int)pow2,
                                 scale_inv);
}

extern "C" cudaError_t exmy_cuda_amax_fold(const float *x, size_t n, unsigned int *amax_bits,
                                           cudaStream_t stream) {
  if (!amax_bits) return cudaErrorInvalidValue;
  if (n) launch_amax(x, n, amax_bits, stream);
  return cudaGetLastError();
}

/* Per-tensor current scaling's first pass: the stream's scratch holds {amax
 * bits, s, 1/s} with s = exmy_scale_from_amax of x's amax; *si -> {s, 1/s}. */
static cudaError_t current_scale(const exmy_format *f, int margin, bool pow2, const float *x,
                                 size_t n, unsigned int **scratch, float **si,
                                 cudaStream_t stream) {
  EXMY_CUDA_TRY(stream_scratch(stream, 3 * sizeof(unsigned int), (void **)scratch));
  EXMY_CUDA_TRY(cudaMemsetAsync(*scratch, 0, sizeof(unsigned int), stream));
  launch_amax(x, n, *scratch, stream);
  *si = reinterpret_cast<float *>(*scratch + 1);
  return exmy_cuda_scale_from_amax(f, margin, pow2, *scratch, *si, stream);
}

extern "C" cudaError_t exmy_cuda_quantize_tensor_scaled_f32(
    const exmy_format *f, const exmy_rounding_opts *o, int margin, bool pow2,
    const float *x, float *y, size_t n, float *scale_out, cudaStream_t stream) {
  if (exmy_rounding_opts_check(o) != 0) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  unsigned int *scratch;
  float *si;
  EXMY_CUDA_TRY(current_scale(f, margin, pow2, x, n, &scratch, &si, stream));
  launch_scaled_any(*f, kopts_of(o), x, y, n, si, stream);
  EXMY_CUDA_TRY(cudaGetLastError());
  if (scale_out)
    EXMY_CUDA_TRY(cudaMemcpyAsync(scale_out, si, sizeof(float),
                                  cudaMemcpyDeviceToDevice, stream));
  return cudaSuccess;
}

extern "C" cudaError_t exmy_cuda_tensor_stats_scaled_f32(
    const exmy_format *f, const float *x, const float *y, size_t n, const float *scale_inv,
    int margin, bool pow2, bool delayed, exmy_tensor_stats *stats, cudaStream_t stream) {
  if (!scale_inv) return exmy_cuda_tensor_stats_f32(f, x, y, n, stats, stream);
  exmy_format_info info;
  exmy_format_get_info(f, &info);
  const int nb = stat_blocks();
  exmy_stats_sums *partial;
  EXMY_CUDA_TRY(stream_scratch(stream, sizeof(exmy_stats_sums) * nb, (void **)&partial));
  k_stats_partial_scaled<<<nb, kStatThreads, 0, stream>>>(*f, x, y, n, scale_inv, info.max,
                                                          info.min_normal, partial);
  k_stats_finish<<<1, kStatThreads, 0, stream>>>(partial, nb, stats);
  k_stats_scale<<<1, 1, 0, stream>>>(stats, scale_inv, info.max, margin, pow2, delayed);
  return cudaGetLastError();
}

extern "C" cudaError_t exmy_cuda_delayed_state_download(const exmy_cuda_delayed_state *s,
                                                        exmy_delayed_state *host) {
  if (!s || !host || host->history_len != s->history_len) return cudaErrorInvalidValue;
  float si[2];
  int position[2];
  EXMY_CUDA_TRY(cudaMemcpy(si, s->scale_inv, sizeof si, cudaMemcpyDeviceToHost));
  EXMY_CUDA_TRY(cudaMemcpy(position, s->position, sizeof position, cudaMemcpyDeviceToHost));
  EXMY_CUDA_TRY(cudaMemcpy(host->amax_history, s->history, sizeof(float) * s->history_len,
                           cudaMemcpyDeviceToHost));
  host->count = position[0];
  host->latest = position[1];
  host->scale = si[0];
  host->scale_inv = si[1];
  return cudaSuccess;
}

extern "C" cudaError_t exmy_cuda_delayed_state_upload(exmy_cuda_delayed_state *s,
                                                      const exmy_delayed_state *host) {
  if (!s || !host || host->history_len != s->history_len) return cudaErrorInvalidValue;
  const float si[2] = {host->scale, host->scale_inv};
  const int position[2] = {host->count, host->latest};
  EXMY_CUDA_TRY(cudaMemcpy(s->scale_inv, si, sizeof si, cudaMemcpyHostToDevice));
  EXMY_CUDA_TRY(cudaMemcpy(s->position, position, sizeof position, cudaMemcpyHostToDevice));
  EXMY_CUDA_TRY(cudaMemcpy(s->history, host->amax_history, sizeof(float) * s->history_len,
                           cudaMemcpyHostToDevice));
  return cudaSuccess;
}

extern "C" cudaError_t exmy_cuda_tensor_stats_mx_f32(const exmy_format *f, int block,
                                                     const float *x, const float *y,
                                                     const uint8_t *scales, size_t rows,
                                                     size_t cols, exmy_tensor_stats *stats,
                                                     cudaStream_t stream) {
  if (block <= 0) block = 32;
  exmy_format_info info;
  exmy_format_get_info(f, &info);
  const int nb = stat_blocks();
  exmy_stats_sums *partial;
  EXMY_CUDA_TRY(stream_scratch(stream, sizeof(exmy_stats_sums) * nb, (void **)&partial));
  k_stats_partial_mx<<<nb, kStatThreads, 0, stream>>>(x, y, scales, rows, cols, block, info.max,
                                                      info.min_normal, partial);
  k_stats_finish<<<1, kStatThreads, 0, stream>>>(partial, nb, stats);
  k_stats_nan_scale<<<1, 1, 0, stream>>>(stats);
  return cudaGetLastError();
}

extern "C" cudaError_t exmy_cuda_quantize_delayed_bf16(
    const exmy_format *f, const exmy_rounding_opts *o, int margin, bool pow2,
    bool history_most_recent, exmy_cuda_delayed_state *state, const float *x, void *y,
    size_t n, float *scale_used, cudaStream_t stream) {
  if (!state || !exmy_cuda_bf16_exact(f) || exmy_rounding_opts_check(o) != 0)
    return cudaErrorInvalidValue;
  const float *si;
  unsigned int *amax;
  EXMY_CUDA_TRY(exmy_cuda_delayed_begin(state, &si, &amax, stream));
  if (n) launch_scaled_bf16_any(*f, kopts_of(o), x, (uint16_t *)y, n, si, amax, stream);
  return exmy_cuda_delayed_end(f, margin, pow2, history_most_recent, state, scale_used, stream);
}

extern "C" cudaError_t exmy_cuda_quantize_tensor_bf16(const exmy_format *f,
                                                      const exmy_rounding_opts *o, int margin,
                                                      bool pow2, const float *x, void *y,
                                                      size_t n, float *scale_out,
                                                      cudaStream_t stream) {
  if (!exmy_cuda_bf16_exact(f) || exmy_rounding_opts_check(o) != 0) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  unsigned int *scratch;
  float *si;
  EXMY_CUDA_TRY(current_scale(f, margin, pow2, x, n, &scratch, &si, stream));
  EXMY_CUDA_TRY(exmy_cuda_quantize_scaled_bf16(f, o, si, x, y, n, stream));
  if (scale_out)
    EXMY_CUDA_TRY(cudaMemcpyAsync(scale_out, si, sizeof(float), cudaMemcpyDeviceToDevice, stream));
  return cudaSuccess;
}

extern "C" cudaError_t exmy_cuda_quantize_scaled_bf16(const exmy_format *f,
                                                      const exmy_rounding_opts *o,
                                                      const float *scale_inv, const float *x,
                                                      void *y, size_t n, cudaStream_t stream) {
  if (!exmy_cuda_bf16_exact(f) || exmy_rounding_opts_check(o) != 0) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  launch_scaled_bf16_any(*f, kopts_of(o), x, (uint16_t *)y, n, scale_inv, nullptr, stream);
  return cudaGetLastError();
}

extern "C" exmy_cuda_amax_scale exmy_cuda_amax_scale_of(const exmy_format *f, int margin,
                                                        bool pow2, const unsigned int *amax_bits,
                                                        float *scale_out) {
  exmy_format_info info;
  exmy_format_get_info(f, &info);
  exmy_cuda_amax_scale c = {};
  c.amax_bits = amax_bits, c.fmax = info.max, c.shrink = ldexp(1.0, -margin), c.pow2 = (int)pow2;
  c.scale_out = scale_out;
  return c;
}

extern "C" cudaError_t exmy_cuda_quantize_amax_scaled_bf16(const exmy_format *f,
                                                           const exmy_rounding_opts *o,
                                                           const exmy_cuda_amax_scale *sc,
                                                           const float *x, void *y, size_t n,
                                                           cudaStream_t stream) {
  if (!exmy_cuda_bf16_exact(f) || exmy_rounding_opts_check(o) != 0 || !sc || !sc->amax_bits ||
      !sc->scale_out)
    return cudaErrorInvalidValue;
  launch_scaled_bf16_any(*f, kopts_of(o), x, (uint16_t *)y, n, nullptr, nullptr, stream, *sc);
  return cudaGetLastError();
}

extern "C" cudaError_t exmy_cuda_quantize_bf16(const exmy_format *f, const exmy_rounding_opts *o,
                                               const float *x, void *y, size_t n,
                                               cudaStream_t stream) {
  return exmy_cuda_quantize_scaled_bf16(f, o, nullptr, x, y, n, stream);
}
