/*
 * OCP MX on the GPU: element codes plus one E8M0 scale per block, the twin of
 * cpu/mx.c (exmy_mx_encode_f32 / exmy_mx_decode_f32 in cpu/exmy_cpu.h).
 *
 * Fast path (block a multiple of 8 that divides 256, cols a multiple of the
 * block, aligned pointers): each thread holds 8 consecutive elements, the
 * block / 8 threads of a block find its amax with warp shuffles, and every
 * thread scales and encodes its own 8 elements; one pass over memory.  Any
 * other shape runs one thread per block, element by element.  Both compute
 * X = floor(log2(amax)) - emax (finite |x| only, clamped to [-127, 127]),
 * x * 2^-X in float32, and the core with saturation on, as cpu/mx.c does.
 */
#include <stdint.h>

#include "cuda/elementwise.cuh"
#include "cuda/exmy_cuda.h"

namespace {
using namespace exmy_cuda;

__device__ __forceinline__ float finite_abs(float v) {
  const float a = fabsf(v);
  return a <= 3.40282347e38f ? a : 0.0f; /* inf and NaN do not count */
}

template <int ID, int MODE, int LANES>
__global__ void __launch_bounds__(kThreads)
    k_mx_encode(const __grid_constant__ exmy_format rt, const __grid_constant__ KOpts o, const float *__restrict__ x,
                uint8_t *__restrict__ codes, uint8_t *__restrict__ scales,
                size_t n) {
  const auto &f = kernel_format<ID>(rt);
  const size_t base = ((size_t)blockIdx.x * kThreads + threadIdx.x) * kPer;
  float v[kPer];
  const bool in = base < n; /* n is a multiple of 8 here */
  if (in) {
    load8(x, base, n, 1, v);
  } else {
#pragma unroll
    for (int k = 0; k < kPer; k++) v[k] = 0.0f;
  }
  float amax = 0.0f;
#pragma unroll
  for (int k = 0; k < kPer; k++) amax = fmaxf(amax, finite_abs(v[k]));
#pragma unroll
  for (int d = 1; d < LANES; d <<= 1)
    amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, d));
  if (!in) return;
  const int e = exmy_core_mx_exponent(f.emax, amax);
  if ((threadIdx.x & (LANES - 1)) == 0) scales[base / (kPer * LANES)] = (uint8_t)(e + 127);
  const float s = exmy_pow2f(-e);
#pragma unroll
  for (int k = 0; k < kPer; k++) v[k] = mul_keep_nan(v[k], s);
  uint32_t c[kPer];
  encode8<ID, MODE>(f, o, base, v, c);
  store8<uint8_t>(codes, base, n, true, c);
}

/* Any shape: one thread per (row, block). */
__global__ void k_mx_encode_any(const __grid_constant__ exmy_format f, const __grid_constant__ KOpts o, const float *x,
                                uint8_t *codes, uint8_t *scales, size_t rows,
                                size_t cols, size_t g) {
  const size_t per_row = (cols + g - 1) / g;
  const size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= rows * per_row) return;
  const size_t r = t / per_row, c0 = (t % per_row) * g;
  const size_t len = cols - c0 < g ? cols - c0 : g, start = r * cols + c0;
  float amax = 0.0f;
  for (size_t i = 0; i < len; i++) amax = fmaxf(amax, finite_abs(x[start + i]));
  const int e = exmy_core_mx_exponent(f.emax, amax);
  scales[t] = (uint8_t)(e + 127);
  const float s = exmy_pow2f(-e);
  for (size_t i = 0; i < len; i++) {
    const uint64_t j = o.offset + start + i;
    const uint32_t rnd = o.mode == EXMY_SR ? exmy_sr_word(o.seed, j) : 0u;
    codes[start + i] = (uint8_t)encode_runtime<SPEC_GENERIC>(
        f, o, mul_keep_nan(x[start + i], s), rnd);
  }
}

__global__ void k_mx_decode(exmy_format f, const uint8_t *codes,
                            const uint8_t *scales, float *y, size_t rows,
                            size_t cols, size_t g) {
  const size_t per_row = (cols + g - 1) / g;
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < rows * cols;
       i += stride) {
    const size_t r = i / cols, c = i % cols;
    const uint8_t sc = scales[r * per_row + c / g];
    const float q = decode_generic(f, codes[i]);
    y[i] = sc == 0xFF ? __uint_as_float(0x7FC00000u) : mul_keep_nan(q, exmy_pow2f((int)sc - 127));
  }
}

/* One-pass decode when blocks hold whole groups of 8 and rows whole blocks. */
template <int ID>
__global__ void __launch_bounds__(kThreads)
    k_mx_decode8(const __grid_constant__ exmy_format rt, const uint8_t *__restrict__ codes,
                 const uint8_t *__restrict__ scales, float *__restrict__ y,
                 size_t n, size_t g) {
  const auto &f = kernel_format<ID>(rt);
  const size_t base = ((size_t)blockIdx.x * kThreads + threadIdx.x) * kPer;
  if (base >= n) return;
  const uint2 p = *reinterpret_cast<const uint2 *>(codes + base);
  const uint8_t sc = scales[base / g];
  const float s = exmy_pow2f((int)sc - 127);
  float q[kPer];
#pragma unroll
  for (int k = 0; k < 4; k++) {
    q[k] = mul_keep_nan(decode_one<ID>(f, (p.x >> (8 * k)) & 0xFFu), s);
    q[k + 4] = mul_keep_nan(decode_one<ID>(f, (p.y >> (8 * k)) & 0xFFu), s);
  }
  if (sc == 0xFF) {
#pragma unroll
    for (int k = 0; k < kPer; k++) q[k] = __uint_as_float(0x7FC00000u);
  }
  *reinterpret_cast<float4 *>(y + base) = make_float4(q[0], q[1], q[2], q[3]);
  *reinterpret_cast<float4 *>(y + base + 4) = make_float4(q[4], q[5], q[6], q[7]);
}

template <int ID>
struct Decode8Op {
  static void run(const exmy_format &f, const uint8_t *codes, const uint8_t *scales, float *y,
                  size_t n, size_t g, cudaStream_t s) {
    k_mx_decode8<ID><<<blocks_for(n / kPer, kThreads), kThreads, 0, s>>>(f, codes, scales, y, n,
                                                                         g);
  }
};

template <int ID, int MODE>
cudaError_t launch_encode_lanes(const exmy_format &f, const KOpts &o, int lanes,
                                const float *x, uint8_t *codes, uint8_t *scales, size_t n,
                                cudaStream_t s) {
  const unsigned blocks = blocks_for((n + kPer - 1) / kPer, kThreads);
  switch (lanes) {
#define EXMY_LANES(L) \
  case L: k_mx_encode<ID, MODE, L><<<blocks, kThreads, 0, s>>>(f, o, x, codes, scales, n); break;
    EXMY_LANES(1)
    EXMY_LANES(2)
    EXMY_LANES(4)
    EXMY_LANES(8)
    EXMY_LANES(16)
    EXMY_LANES(32)
#undef EXMY_LANES
    default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

/* The one-pass encode: the compile-time formats get an rne kernel of their
 * own; everything else runs the run-time-mode kernel of its format. */
template <int ID>
struct Encode8Op {
  static cudaError_t run(const exmy_format &f, const KOpts &k, int lanes, const float *x,
                         uint8_t *codes, uint8_t *scales, size_t n, cudaStream_t s) {
    if constexpr (ID != SPEC_GENERIC) {
      if (k.mode == EXMY_RNE)
        return launch_encode_lanes<ID, EXMY_RNE>(f, k, lanes, x, codes, scales, n, s);
    }
    return launch_encode_lanes<ID, kRuntimeMode>(f, k, lanes, x, codes, scales, n, s);
  }
};

}  // namespace

extern "C" cudaError_t exmy_cuda_mx_encode_f32(
    const exmy_format *f, const exmy_rounding_opts *o, int block,
    const float *x, size_t rows, size_t cols, uint8_t *codes, uint8_t *scales,
    cudaStream_t stream) {
  if (exmy_code_bytes(f) != 1 || block < 0 || exmy_rounding_opts_check(o) != 0)
    return cudaErrorInvalidValue;
  const size_t g = block > 0 ? (size_t)block : 32, n = rows * cols;
  if (n == 0) return cudaSuccess;
  KOpts k = kopts_of(o);
  k.saturate = 1; /* as cpu/mx.c: a block's top values may pass fmax */
  const size_t lanes = g / kPer;
  const bool fast = g % kPer == 0 && lanes <= 32 && (lanes & (lanes - 1)) == 0 &&
                    cols % g == 0 && ((uintptr_t)x & 15u) == 0 &&
                    ((uintptr_t)codes & 7u) == 0;
  if (fast)
    return with_spec_format<EXMY_GPU_SCALED, Encode8Op>(f, *f, k, (int)lanes, x, codes, scales,
                                                        n, stream);
  const size_t tasks = rows * ((cols + g - 1) / g);
  k_mx_encode_any<<<blocks_for(tasks, 128), 128, 0, stream>>>(*f, k, x, codes, scales,
                                                             rows, cols, g);
  return cudaGetLastError();
}

extern "C" cudaError_t exmy_cuda_mx_decode_f32(const exmy_format *f, int block,
                                               const uint8_t *codes,
                                               const uint8_t *scales,
                                               size_t rows, size_t cols,
                                               float *y, cudaStream_t stream) {
  if (exmy_code_bytes(f) != 1 || block < 0) return cudaErrorInvalidValue;
  const size_t g = block > 0 ? (size_t)block : 32, n = rows * cols;
  if (n == 0) return cudaSuccess;
  if (g % kPer == 0 && cols % g == 0 && ((uintptr_t)codes & 7u) == 0 &&
      ((uintptr_t)y & 15u) == 0) {
    with_spec_format<EXMY_GPU_SCALED, Decode8Op>(f, *f, codes, scales, y, n, g, stream);
    return cudaGetLastError();
  }
  int sms = 132;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  const size_t want = blocks_for(n, 256);
  const unsigned blocks = (unsigned)(want < (size_t)sms * 32 ? want : (size_t)sms * 32);
  k_mx_decode<<<blocks, 256, 0, stream>>>(*f, codes, scales, y, rows, cols, g);
  return cudaGetLastError();
}
