/*
 * Bulk quantize / encode / decode on the GPU: lib/round_core.h per element.
 *
 * Each thread takes 8 consecutive elements: two 16-byte loads of float32, one
 * 8-byte (uint8 codes), 16-byte (uint16) or two 16-byte stores; an exact grid
 * covers the array and the last, partial group goes element by element.  The
 * rounding mode is a template parameter: every mode has kernels of its own,
 * with the fast paths of fast_path.cuh (a mode read at run time would leave
 * only the out-of-line core, 0.7x copy speed on the H100).
 */
#include <stdint.h>

#include "cuda/exmy_cuda.h"
#include "cuda/elementwise.cuh"

namespace {
using namespace exmy_cuda;

/* quantize: float32 -> float32 (y may alias x: each thread reads its own
 * elements before it writes them). */
template <int ID, int MODE>
__global__ void __launch_bounds__(kThreads)
    k_quantize(const __grid_constant__ exmy_format rt, const __grid_constant__ KOpts o, const float *x, float *y, size_t n,
               int vec) {
  const auto &f = kernel_format<ID>(rt);
  const size_t base = ((size_t)blockIdx.x * kThreads + threadIdx.x) * kPer;
  if (base >= n) return;
  uint32_t c[kPer];
  const bool full = load_encode8<ID, MODE>(f, o, x, base, n, vec, c);
  float q[kPer];
#pragma unroll
  for (int k = 0; k < kPer; k++) q[k] = decode_one<ID>(f, c[k]);
  store8f(y, base, n, full, q);
}

template <int ID, int MODE, typename T>
__global__ void __launch_bounds__(kThreads)
    k_encode(const __grid_constant__ exmy_format rt, const __grid_constant__ KOpts o, const float *__restrict__ x,
             T *__restrict__ codes, size_t n, int vec) {
  const auto &f = kernel_format<ID>(rt);
  const size_t base = ((size_t)blockIdx.x * kThreads + threadIdx.x) * kPer;
  if (base >= n) return;
  uint32_t c[kPer];
  const bool full = load_encode8<ID, MODE>(f, o, x, base, n, vec, c);
  store8<T>(codes, base, n, full, c);
}

template <int ID, typename T>
__global__ void __launch_bounds__(kThreads)
    k_decode(const __grid_constant__ exmy_format rt, const T *__restrict__ codes, float *__restrict__ y,
             size_t n, int vec) {
  const auto &f = kernel_format<ID>(rt);
  const size_t base = ((size_t)blockIdx.x * kThreads + threadIdx.x) * kPer;
  if (base >= n) return;
  uint32_t c[kPer];
  const bool full = vec && base + kPer <= n;
  if (full && sizeof(T) == 1) {
    const uint2 p = *reinterpret_cast<const uint2 *>(codes + base);
#pragma unroll
    for (int k = 0; k < 4; k++) {
      c[k] = (p.x >> (8 * k)) & 0xFFu;
      c[k + 4] = (p.y >> (8 * k)) & 0xFFu;
    }
  } else if (full && sizeof(T) == 2) {
    const uint4 p = *reinterpret_cast<const uint4 *>(codes + base);
    c[0] = p.x & 0xFFFFu; c[1] = p.x >> 16; c[2] = p.y & 0xFFFFu; c[3] = p.y >> 16;
    c[4] = p.z & 0xFFFFu; c[5] = p.z >> 16; c[6] = p.w & 0xFFFFu; c[7] = p.w >> 16;
  } else {
#pragma unroll
    for (int k = 0; k < kPer; k++) c[k] = base + k < n ? (uint32_t)codes[base + k] : 0u;
  }
  float q[kPer];
#pragma unroll
  for (int k = 0; k < kPer; k++) q[k] = decode_one<ID>(f, c[k]);
  if (full) { /* spelled out: through store8f the uint32 kernels compile differently */
    *reinterpret_cast<float4 *>(y + base) = make_float4(q[0], q[1], q[2], q[3]);
    *reinterpret_cast<float4 *>(y + base + 4) = make_float4(q[4], q[5], q[6], q[7]);
  } else {
    for (int k = 0; k < kPer; k++)
      if (base + k < n) y[base + k] = q[k];
  }
}

int aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

/* ---- launchers: Op<ID, MODE>::run for a compile-time format and a mode ---- */

template <int ID, int MODE>
struct QuantizeOp {
  static cudaError_t run(const exmy_format &f, const KOpts &o, const float *x,
                         float *y, size_t n, cudaStream_t s) {
    const size_t groups = (n + kPer - 1) / kPer;
    k_quantize<ID, MODE><<<blocks_for(groups, kThreads), kThreads, 0, s>>>(
        f, o, x, y, n, aligned16(x) && aligned16(y));
    return cudaGetLastError();
  }
};

template <int ID, int MODE>
struct EncodeOp {
  static cudaError_t run(const exmy_format &f, const KOpts &o, const float *x,
                         void *codes, size_t n, cudaStream_t s) {
    const size_t groups = (n + kPer - 1) / kPer;
    const unsigned blocks = blocks_for(groups, kThreads);
    const int vec = aligned16(x) && aligned16(codes);
    switch (exmy_code_bytes(&f)) {
      case 1:
        k_encode<ID, MODE, uint8_t><<<blocks, kThreads, 0, s>>>(
            f, o, x, (uint8_t *)codes, n, vec);
        break;
      case 2:
        k_encode<ID, MODE, uint16_t><<<blocks, kThreads, 0, s>>>(
            f, o, x, (uint16_t *)codes, n, vec);
        break;
      default:
        k_encode<ID, MODE, uint32_t><<<blocks, kThreads, 0, s>>>(
            f, o, x, (uint32_t *)codes, n, vec);
        break;
    }
    return cudaGetLastError();
  }
};

template <int ID>
struct DecodeOp {
  static cudaError_t run(const exmy_format &f, const void *codes, float *y,
                         size_t n, cudaStream_t s) {
    const size_t groups = (n + kPer - 1) / kPer;
    const unsigned blocks = blocks_for(groups, kThreads);
    const int vec = aligned16(codes) && aligned16(y);
    switch (exmy_code_bytes(&f)) {
      case 1:
        k_decode<ID, uint8_t><<<blocks, kThreads, 0, s>>>(f, (const uint8_t *)codes, y, n, vec);
        break;
      case 2:
        k_decode<ID, uint16_t><<<blocks, kThreads, 0, s>>>(f, (const uint16_t *)codes, y, n, vec);
        break;
      default:
        k_decode<ID, uint32_t><<<blocks, kThreads, 0, s>>>(f, (const uint32_t *)codes, y, n, vec);
        break;
    }
    return cudaGetLastError();
  }
};

/* Each format (the compile-time ones and the generic kernels alike) gets a
 * kernel per rounding mode. */
template <template <int, int> class Op>
struct ByMode {
  template <int ID>
  struct At {
    template <typename... A>
    static cudaError_t run(const exmy_format &f, const KOpts &o, A... a) {
      switch (o.mode) {
        case EXMY_RNE: return Op<ID, EXMY_RNE>::run(f, o, a...);
        case EXMY_RNA: return Op<ID, EXMY_RNA>::run(f, o, a...);
        case EXMY_RZ: return Op<ID, EXMY_RZ>::run(f, o, a...);
        case EXMY_RU: return Op<ID, EXMY_RU>::run(f, o, a...);
        case EXMY_RD: return Op<ID, EXMY_RD>::run(f, o, a...);
        case EXMY_RO: return Op<ID, EXMY_RO>::run(f, o, a...);
        case EXMY_SR: return Op<ID, EXMY_SR>::run(f, o, a...);
        default: return cudaErrorInvalidValue; /* exmy_rounding_opts_check refused it */
      }
    }
  };
};

/* The checks and the dispatch of quantize and encode. */
template <template <int, int> class Op, typename Out>
cudaError_t convert(const exmy_format *f, const exmy_rounding_opts *o,
                    const float *x, Out out, size_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  if (exmy_rounding_opts_check(o) != 0) return cudaErrorInvalidValue;
  return with_spec_format<EXMY_GPU_CONVERT, ByMode<Op>::template At>(
      f, *f, kopts_of(o), x, out, n, stream);
}

}  // namespace

extern "C" cudaError_t exmy_cuda_quantize_f32(const exmy_format *f,
                                              const exmy_rounding_opts *o,
                                              const float *x, float *y,
                                              size_t n, cudaStream_t stream) {
  return convert<QuantizeOp>(f, o, x, y, n, stream);
}

extern "C" cudaError_t exmy_cuda_encode_f32(const exmy_format *f,
                                            const exmy_rounding_opts *o,
                                            const float *x, void *codes,
                                            size_t n, cudaStream_t stream) {
  return convert<EncodeOp>(f, o, x, codes, n, stream);
}

extern "C" cudaError_t exmy_cuda_decode_f32(const exmy_format *f,
                                            const void *codes, float *y,
                                            size_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  return with_spec_format<EXMY_GPU_CONVERT, DecodeOp>(f, *f, codes, y, n, stream);
}
