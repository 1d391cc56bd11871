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
#include <cuda_bf16.h>
#include <stdint.h>

#include "cuda/elementwise.cuh"
#include "cuda/exmy_cuda.h"
#include "lib/accum_core.h"

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

/* ---- MX operands of a GEMM: the image along K, and its FP32 fallback ---- */
namespace {

constexpr int kTile = 32; /* one MX block of 32 along K per tile row */

/* t[i][j] = X'[r0 + i][c0 + j], 0 outside, where X'[r][c] = x[r ld + c]
 * (trans: x[c ld + r]); coalesced either way.  blockDim (32, 8). */
__device__ __forceinline__ void load_tile(const float *__restrict__ x, size_t ld, bool trans,
                                          size_t rows, size_t cols, size_t r0, size_t c0,
                                          float (*t)[kTile + 1]) {
  const int tx = threadIdx.x;
  for (int i = threadIdx.y; i < kTile; i += blockDim.y) {
    if (!trans) {
      const size_t r = r0 + i, c = c0 + tx;
      t[i][tx] = r < rows && c < cols ? x[r * ld + c] : 0.0f;
    } else {
      const size_t c = c0 + i, r = r0 + tx;
      t[tx][i] = r < rows && c < cols ? x[c * ld + r] : 0.0f;
    }
  }
}

/* Row i of a loaded tile, one lane per element: the MX value of element
 * (r0 + i, c0 + lane) of X' exactly as exmy_cuda_mx_encode_f32 followed by
 * exmy_cuda_mx_decode_f32 compute it on the dense rows x cols image (the
 * block is the tile row: c0 a multiple of 32, a shorter tail at the end; sr
 * word index o.offset + r cols + c).  All 32 lanes call it. */
template <int ID>
__device__ __forceinline__ float mx_value(const exmy_format &rt, const KOpts &o, float v, bool in,
                                          size_t r, size_t c, size_t cols) {
  const auto &f = kernel_format<ID>(rt);
  float amax = in ? finite_abs(v) : 0.0f;
#pragma unroll
  for (int d = 1; d < 32; d <<= 1) amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, d));
  const int e = exmy_core_mx_exponent(f.emax, amax);
  const uint32_t rnd = o.mode == EXMY_SR ? exmy_sr_word(o.seed, o.offset + r * cols + c) : 0u;
  const float sv = mul_keep_nan(v, exmy_pow2f(-e));
  uint32_t code;
  bool done = false;
  if constexpr (ID != SPEC_GENERIC && Fast<ID>::enabled) {
    /* the table formats' fast path for the recipes' modes, as encode8; the
     * core where it declines (inf, NaN) and for flushed subnormals */
    if (!o.flush && o.mode == EXMY_RNE)
      done = fast_encode<ID, EXMY_RNE>(o.sr_bits, o.saturate, sv, rnd, code);
    else if (!o.flush && o.mode == EXMY_SR)
      done = fast_encode<ID, EXMY_SR>(o.sr_bits, o.saturate, sv, rnd, code);
  }
  if (!done) code = encode_runtime<ID>(rt, o, sv, rnd);
  const int sc = e + 127;
  return sc == 0xFF ? __uint_as_float(0x7FC00000u)
                    : mul_keep_nan(decode_one<ID>(f, code), exmy_pow2f(sc - 127));
}

/* The bf16 bits of an image value q: its rounding (exact where q is a bf16
 * value), and for NaN its sign and top payload bits, as the float32 image
 * holds it; *bad where q is not a bf16 value (a float32 subnormal with bits
 * below 2^-133). */
__device__ __forceinline__ uint16_t image_bits(float q, bool *bad) {
  const uint32_t u = __float_as_uint(q);
  *bad |= (u & 0xFFFFu) != 0 && q == q;
  return q == q ? __bfloat16_as_ushort(__float2bfloat16_rn(q)) : (uint16_t)((u >> 16) | 0x0040u);
}

template <int ID>
__global__ void __launch_bounds__(256)
    k_mx_image_bf16(const __grid_constant__ exmy_format rt, const __grid_constant__ KOpts o,
                    const float *__restrict__ x, size_t ld, bool trans, size_t rows, size_t cols,
                    uint16_t *__restrict__ y, unsigned *inexact, unsigned tag) {
  __shared__ float t[kTile][kTile + 1];
  const size_t r0 = (size_t)blockIdx.x * kTile, c0 = (size_t)blockIdx.y * kTile;
  load_tile(x, ld, trans, rows, cols, r0, c0, t);
  __syncthreads();
  const int lane = threadIdx.x;
  const size_t c = c0 + lane;
  bool bad = false;
  for (int i = threadIdx.y; i < kTile; i += blockDim.y) {
    const size_t r = r0 + i;
    const bool in = r < rows && c < cols;
    const float q = mx_value<ID>(rt, o, t[i][lane], in, r, c, cols);
    if (!in) continue;
    y[r * cols + c] = image_bits(q, &bad);
  }
  if (bad) *inexact = tag;
}

/* The image of 64 rows of X' by one MX block (32 columns, K) per block of
 * 256 threads, for the shapes image_rows_ok() accepts (every GEMM operand of
 * the trainer's shapes).  The tile comes through shared memory so that
 * either layout loads 16 bytes a lane, coalesced; image_piece rounds it.
 * Every reading of the tile is free of bank conflicts (rows padded by 4
 * floats).
 * k_mx_image_bf16 (one element a lane, the amax by shuffles) and a thread
 * per row of 32 both ran at about 0.4x the memory's speed. */
constexpr int kImageRows = 64, kImageThreads = 256;

static bool image_rows_ok(const float *x, size_t ld, bool trans, size_t rows, size_t cols,
                          const void *y) {
  return cols % kTile == 0 && ld % 4 == 0 && ((uintptr_t)x & 15u) == 0 &&
         ((uintptr_t)y & 15u) == 0 && (!trans || rows % 4 == 0);
}

/* The image of a 64 x 32 piece of X' (rows r0 .. r0 + 63 of rows, K
 * columns c0 .. c0 + 31 of cols) that the block holds in shared memory, read
 * through at(row of the piece, element of its block), into the dense rows x
 * cols image y; every thread of the block calls it.  Warp w takes 8 columns
 * (g = w % 4) of 32 consecutive rows, a lane a row: the four warps of a row
 * meet at their partial amaxes in shared memory, then each rounds its 8
 * elements as exmy_cuda_mx_encode_f32 does (encode8: the same codes, the same
 * sr words) into 16 bytes of bf16 bits, which go out a row at a time.
 * any_inexact: set where a value is not a bf16 value. */
template <int ID, int MODE, class At>
__device__ __forceinline__ void image_piece(const exmy_format &rt, const KOpts &o, At at,
                                            size_t r0, size_t c0, size_t rows, size_t cols,
                                            uint16_t *__restrict__ y,
                                            float (&part)[kTile / kPer][kImageRows],
                                            uint4 (&out)[kImageRows][kTile / kPer],
                                            bool &any_inexact) {
  const auto &f = kernel_format<ID>(rt);
  const int warp = threadIdx.x >> 5, g = warp & 3;
  const int rr = (warp >> 2) * 32 + (threadIdx.x & 31);
  float w[kPer];
  float amax = 0.0f;
  bool special = false; /* an infinity or NaN among the 8 */
#pragma unroll
  for (int k = 0; k < kPer; k++) {
    w[k] = at(rr, kPer * g + k);
    const float a = fabsf(w[k]);
    const bool finite = a <= 3.40282347e38f;
    special |= !finite;
    amax = fmaxf(amax, finite ? a : 0.0f);
  }
  part[g][rr] = amax;
  __syncthreads();
  amax = fmaxf(fmaxf(part[0][rr], part[1][rr]), fmaxf(part[2][rr], part[3][rr]));
  const size_t r = r0 + rr;
  const int e = exmy_core_mx_exponent(f.emax, amax);
  const float s = exmy_pow2f(-e), back = exmy_pow2f(e);
  uint32_t code[kPer], b[kPer];
  bool bad = false;
  if (!special) {
    /* finite values: plain products (no NaN to keep), finite codes, and
     * bf16 conversions two at a time; a value with bits below bf16's
     * (a float32 subnormal under 2^-133) shows in the low halves */
    float q[kPer];
    bool done = false;
#pragma unroll
    for (int k = 0; k < kPer; k++) w[k] = __fmul_rn(w[k], s);
    if constexpr (MODE == EXMY_RNE && HwPair<ID>::enabled) {
      /* the hardware's conversion where it is the core's rounding */
      if (!o.flush && o.saturate) {
        done = true;
#pragma unroll
        for (int k = 0; k < kPer; k += 2) hw_quantize_rne_sat2<ID>(w[k], w[k + 1], q[k], q[k + 1]);
      }
    }
    if constexpr (MODE == EXMY_RNE && Fast<ID>::enabled) {
      /* the value without its code (MX saturates: every finite value) */
      if (!done && !o.flush) {
        done = true;
#pragma unroll
        for (int k = 0; k < kPer; k++) done &= fast_quantize_rne<ID>(o.saturate, w[k], q[k]);
      }
    }
    if (!done) {
      encode8<ID, MODE>(f, o, r * cols + c0 + kPer * g, w, code);
#pragma unroll
      for (int k = 0; k < kPer; k++) q[k] = decode_one<ID>(f, code[k]);
    }
    uint32_t low = 0;
#pragma unroll
    for (int k = 0; k < kPer; k += 2) {
      const float q0 = __fmul_rn(q[k], back);
      const float q1 = __fmul_rn(q[k + 1], back);
      low |= (__float_as_uint(q0) | __float_as_uint(q1)) & 0xFFFFu;
      const __nv_bfloat162 h = __floats2bfloat162_rn(q0, q1);
      b[k] = __bfloat16_as_ushort(h.x);
      b[k + 1] = __bfloat16_as_ushort(h.y);
    }
    bad = low != 0 && r < rows;
  } else { /* an infinity or NaN: the products that keep a NaN, as mx_value */
#pragma unroll
    for (int k = 0; k < kPer; k++) w[k] = mul_keep_nan(w[k], s);
    encode8<ID, MODE>(f, o, r * cols + c0 + kPer * g, w, code);
#pragma unroll
    for (int k = 0; k < kPer; k++)
      b[k] = image_bits(mul_keep_nan(decode_one<ID>(f, code[k]), back), &bad);
    bad = bad && r < rows;
  }
  /* out through shared memory, so that 4 lanes store a row's 64 bytes
   * together (whole 32-byte sectors; a lane a row sent L2 a partial sector
   * per lane); the 16-byte slots swizzled by (row / 2) % 4 against bank
   * conflicts in both directions */
  out[rr][g ^ ((rr >> 1) & 3)] =
      make_uint4(b[0] | b[1] << 16, b[2] | b[3] << 16, b[4] | b[5] << 16, b[6] | b[7] << 16);
  __syncthreads();
  const int orow = threadIdx.x >> 2, piece = threadIdx.x & 3;
  if (r0 + orow < rows)
    *reinterpret_cast<uint4 *>(y + (r0 + orow) * cols + c0 + kPer * piece) =
        out[orow][piece ^ ((orow >> 1) & 3)];
  any_inexact |= bad;
  __syncthreads(); /* part and out free again */
}

template <int ID, int MODE, bool TRANS>
__global__ void __launch_bounds__(kImageThreads, 5)
    k_mx_image_bf16_rows(const __grid_constant__ exmy_format rt, const __grid_constant__ KOpts o,
                         const float *__restrict__ x, size_t ld, size_t rows, size_t cols,
                         uint16_t *__restrict__ y, unsigned *inexact, unsigned tag) {
  /* TRANS: t[c][r] (x's rows are X' columns); else t[r][c] */
  constexpr int kRows = TRANS ? kTile : kImageRows, kWidth = (TRANS ? kImageRows : kTile) + 4;
  __shared__ __align__(16) float t[kRows][kWidth];
  __shared__ float part[kTile / kPer][kImageRows];
  __shared__ uint4 out[kImageRows][kTile / kPer];
  const size_t r0 = (size_t)blockIdx.x * kImageRows, c0 = (size_t)blockIdx.y * kTile;
#pragma unroll
  for (int i = 0; i < kImageRows * kTile / 4 / kImageThreads; i++) {
    const int idx = threadIdx.x + i * kImageThreads;
    float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if constexpr (!TRANS) {
      const int rr = idx >> 3, q = idx & 7; /* 8 lanes a row of 32 */
      if (r0 + rr < rows) v = *reinterpret_cast<const float4 *>(x + (r0 + rr) * ld + c0 + 4 * q);
      *reinterpret_cast<float4 *>(&t[rr][4 * q]) = v;
    } else {
      const int cc = idx >> 4, q = idx & 15; /* 16 lanes a column of 64 rows */
      if (r0 + 4 * q < rows)
        v = *reinterpret_cast<const float4 *>(x + (c0 + cc) * ld + r0 + 4 * q);
      *reinterpret_cast<float4 *>(&t[cc][4 * q]) = v;
    }
  }
  __syncthreads();
  bool bad = false;
  if constexpr (TRANS)
    image_piece<ID, MODE>(rt, o, [&](int r, int k) { return t[k][r]; }, r0, c0, rows, cols, y,
                          part, out, bad);
  else
    image_piece<ID, MODE>(rt, o, [&](int r, int k) { return t[r][k]; }, r0, c0, rows, cols, y,
                          part, out, bad);
  if (bad) *inexact = tag;
}

/* Both images of X (rows x cols, ld) in one read: y, X's own (blocks of 32
 * along cols, as k_mx_image_bf16_rows<.., false>), and yt, X^T's (cols x rows,
 * blocks along rows, as k_mx_image_bf16_rows<.., true> of the same x), bit
 * for bit those two kernels' images, for 64 x 64 tiles (rows and cols
 * multiples of 64).  A GEMM and its weight gradient read dY so: dX = dY W
 * along OC, dW = dY^T X along the tokens. */
template <int ID, int MODE>
__global__ void __launch_bounds__(kImageThreads, 4)
    k_mx_image_bf16_pair(const __grid_constant__ exmy_format rt, const __grid_constant__ KOpts o,
                         const float *__restrict__ x, size_t ld, size_t rows, size_t cols,
                         uint16_t *__restrict__ y, unsigned *inexact, unsigned tag,
                         uint16_t *__restrict__ yt, unsigned *inexact_t, unsigned tag_t) {
  constexpr int kSide = kImageRows; /* 64 rows, 64 columns */
  __shared__ __align__(16) float t[kSide][kSide + 4];
  __shared__ float part[kTile / kPer][kImageRows];
  __shared__ uint4 out[kImageRows][kTile / kPer];
  const size_t r0 = (size_t)blockIdx.x * kSide, c0 = (size_t)blockIdx.y * kSide;
#pragma unroll
  for (int i = 0; i < kSide * kSide / 4 / kImageThreads; i++) {
    const int idx = threadIdx.x + i * kImageThreads;
    const int rr = idx >> 4, q = idx & 15; /* 16 lanes a row of 64 */
    *reinterpret_cast<float4 *>(&t[rr][4 * q]) =
        *reinterpret_cast<const float4 *>(x + (r0 + rr) * ld + c0 + 4 * q);
  }
  __syncthreads();
  bool bad = false, bad_t = false;
#pragma unroll
  for (int h = 0; h < 2; h++) /* X's rows, K columns c0 + 32 h .. */
    image_piece<ID, MODE>(rt, o, [&](int r, int k) { return t[r][kTile * h + k]; }, r0,
                          c0 + kTile * h, rows, cols, y, part, out, bad);
#pragma unroll
  for (int h = 0; h < 2; h++) /* X^T's rows (X's columns), K rows r0 + 32 h .. */
    image_piece<ID, MODE>(rt, o, [&](int r, int k) { return t[kTile * h + k][r]; }, c0,
                          r0 + kTile * h, cols, rows, yt, part, out, bad_t);
  if (bad) *inexact = tag;
  if (bad_t) *inexact_t = tag_t;
}

template <int ID>
struct ImageOp {
  static cudaError_t run(const exmy_format &f, const KOpts &o, const float *x, size_t ld,
                         bool trans, size_t rows, size_t cols, uint16_t *y, unsigned *inexact,
                         unsigned tag, cudaStream_t s) {
    if (image_rows_ok(x, ld, trans, rows, cols, y)) {
      const dim3 grid((unsigned)((rows + kImageRows - 1) / kImageRows), (unsigned)(cols / kTile));
      with_operand_mode<ID>(o.mode, [&](auto mode) {
        if (trans)
          k_mx_image_bf16_rows<ID, decltype(mode)::value, true>
              <<<grid, kImageThreads, 0, s>>>(f, o, x, ld, rows, cols, y, inexact, tag);
        else
          k_mx_image_bf16_rows<ID, decltype(mode)::value, false>
              <<<grid, kImageThreads, 0, s>>>(f, o, x, ld, rows, cols, y, inexact, tag);
      });
      return cudaGetLastError();
    }
    const dim3 grid((unsigned)((rows + kTile - 1) / kTile), (unsigned)((cols + kTile - 1) / kTile));
    k_mx_image_bf16<ID><<<grid, dim3(32, 8), 0, s>>>(f, o, x, ld, trans, rows, cols, y, inexact,
                                                     tag);
    return cudaGetLastError();
  }
};

/* X's image and X^T's (exmy_cuda_mx_quantize_bf16_pair): one pass where
 * k_mx_image_bf16_pair serves the shape, else the two images one by one. */
template <int ID>
struct ImagePairOp {
  static cudaError_t run(const exmy_format &f, const KOpts &o, const float *x, size_t ld,
                         size_t rows, size_t cols, uint16_t *y, unsigned *inexact, unsigned tag,
                         uint16_t *yt, unsigned *inexact_t, unsigned tag_t, cudaStream_t s) {
    if (rows % kImageRows || cols % kImageRows || !image_rows_ok(x, ld, false, rows, cols, y) ||
        ((uintptr_t)yt & 15u)) {
      const cudaError_t e = ImageOp<ID>::run(f, o, x, ld, false, rows, cols, y, inexact, tag, s);
      return e != cudaSuccess
                 ? e
                 : ImageOp<ID>::run(f, o, x, ld, true, cols, rows, yt, inexact_t, tag_t, s);
    }
    const dim3 grid((unsigned)(rows / kImageRows), (unsigned)(cols / kImageRows));
    with_operand_mode<ID>(o.mode, [&](auto mode) {
      k_mx_image_bf16_pair<ID, decltype(mode)::value><<<grid, kImageThreads, 0, s>>>(
          f, o, x, ld, rows, cols, y, inexact, tag, yt, inexact_t, tag_t);
    });
    return cudaGetLastError();
  }
};

/* The fallback GEMM: 32 x 32 tiles of C, each thread 4 of them; the operand
 * tiles MX-quantized as loaded (mx_value, the image kernel's arithmetic),
 * products summed with fmaf in k order.  Grid-stride over the tiles, so that
 * the early exit (not flagged, the common case) costs one small launch. */
__global__ void __launch_bounds__(256)
    k_mx_gemm_f32_if(const __grid_constant__ exmy_format fa, const __grid_constant__ KOpts oa,
                     const __grid_constant__ exmy_format fb, const __grid_constant__ KOpts ob,
                     bool trans_a, bool trans_b, size_t m, size_t n, size_t k, float alpha,
                     const float *a, size_t lda, const float *b, size_t ldb, float beta,
                     const float *c, size_t ldc, float *r, size_t ldr, unsigned *flag, unsigned tag,
                     const unsigned *carry_a, const unsigned *carry_b,
                     unsigned long long *count) {
  if (*flag != tag && !(carry_a && *carry_a) && !(carry_b && *carry_b)) return;
  if (blockIdx.x == 0 && threadIdx.x == 0 && threadIdx.y == 0) {
    if (count) atomicAdd(count, 1ull);
    *flag = tag; /* a block that reads it later decides alike */
  }
  __shared__ float ta[kTile][kTile + 1], tb[kTile][kTile + 1];
  const size_t tiles_n = (n + kTile - 1) / kTile, tiles = ((m + kTile - 1) / kTile) * tiles_n;
  const int lane = threadIdx.x;
  for (size_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const size_t i0 = tile / tiles_n * kTile, j0 = tile % tiles_n * kTile;
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (size_t k0 = 0; k0 < k; k0 += kTile) {
      /* op(A) as m x k, op(B)^T as n x k, K contiguous (as exmy_cuda_qgemm) */
      load_tile(a, lda, trans_a, m, k, i0, k0, ta);
      load_tile(b, ldb, !trans_b, n, k, j0, k0, tb);
      __syncthreads();
      for (int i = threadIdx.y; i < kTile; i += blockDim.y) {
        const size_t kk = k0 + lane;
        ta[i][lane] = mx_value<SPEC_GENERIC>(fa, oa, ta[i][lane], i0 + i < m && kk < k, i0 + i,
                                             kk, k);
        tb[i][lane] = mx_value<SPEC_GENERIC>(fb, ob, tb[i][lane], j0 + i < n && kk < k, j0 + i,
                                             kk, k);
      }
      __syncthreads();
      const int kmax = k - k0 < (size_t)kTile ? (int)(k - k0) : kTile;
      for (int kk = 0; kk < kmax; kk++)
#pragma unroll
        for (int q = 0; q < 4; q++) acc[q] = fmaf(ta[threadIdx.y + 8 * q][kk], tb[lane][kk], acc[q]);
      __syncthreads();
    }
#pragma unroll
    for (int q = 0; q < 4; q++) {
      const size_t i = i0 + threadIdx.y + 8 * q, j = j0 + lane;
      if (i < m && j < n) r[i * ldr + j] = exmy_gemm_epilogue(acc[q], alpha, beta, &c[i * ldc + j]);
    }
  }
}

}  // namespace

/* The kernels' options for an MX bf16 image of format f in blocks of
 * `block`: a format of one-byte codes, valid options, blocks of 32 (0: the
 * default), saturating as exmy_cuda_mx_encode_f32. */
static cudaError_t image_kopts(const exmy_format *f, const exmy_rounding_opts *o, int block,
                               KOpts *k) {
  if (exmy_code_bytes(f) != 1 || exmy_rounding_opts_check(o) != 0) return cudaErrorInvalidValue;
  if (block != 0 && block != kTile) return cudaErrorNotSupported;
  *k = kopts_of(o);
  k->saturate = 1;
  return cudaSuccess;
}

extern "C" cudaError_t exmy_cuda_mx_quantize_bf16(const exmy_format *f,
                                                  const exmy_rounding_opts *o, int block,
                                                  const float *x, size_t ld, bool trans,
                                                  size_t rows, size_t cols, void *y,
                                                  unsigned *inexact, unsigned tag,
                                                  cudaStream_t stream) {
  if (!inexact || ld < (trans ? rows : cols) || rows / kTile >= (1u << 31) ||
      cols / kTile >= 65535)
    return cudaErrorInvalidValue;
  KOpts k;
  if (const cudaError_t e = image_kopts(f, o, block, &k)) return e;
  if (rows == 0 || cols == 0) return cudaSuccess;
  return with_spec_format<EXMY_GPU_SCALED, ImageOp>(f, *f, k, x, ld, trans, rows, cols,
                                                     (uint16_t *)y, inexact, tag, stream);
}

extern "C" cudaError_t exmy_cuda_mx_quantize_bf16_pair(
    const exmy_format *f, const exmy_rounding_opts *o, int block, const float *x, size_t ld,
    size_t rows, size_t cols, void *y, unsigned *inexact, unsigned tag, void *yt,
    unsigned *inexact_t, unsigned tag_t, cudaStream_t stream) {
  /* rows bounded as the transposed image's columns, where two calls make it */
  if (!inexact || !inexact_t || ld < cols || rows / kTile >= 65535 || cols / kTile >= 65535)
    return cudaErrorInvalidValue;
  KOpts k;
  if (const cudaError_t e = image_kopts(f, o, block, &k)) return e;
  if (rows == 0 || cols == 0) return cudaSuccess;
  return with_spec_format<EXMY_GPU_SCALED, ImagePairOp>(f, *f, k, x, ld, rows, cols,
                                                         (uint16_t *)y, inexact, tag,
                                                         (uint16_t *)yt, inexact_t, tag_t, stream);
}

extern "C" cudaError_t exmy_cuda_mx_gemm_f32_if(
    unsigned *flag, unsigned tag, const unsigned *carry_a, const unsigned *carry_b, bool trans_a,
    bool trans_b, size_t m, size_t n, size_t k, float alpha, const float *a, size_t lda,
    const exmy_format *fa, const exmy_rounding_opts *oa, const float *b, size_t ldb,
    const exmy_format *fb, const exmy_rounding_opts *ob, float beta, const float *c, size_t ldc,
    float *r, size_t ldr, unsigned long long *count, cudaStream_t stream) {
  if (exmy_code_bytes(fa) != 1 || exmy_code_bytes(fb) != 1 || exmy_rounding_opts_check(oa) ||
      exmy_rounding_opts_check(ob) || !flag || !r || ldr < n)
    return cudaErrorInvalidValue;
  if (m == 0 || n == 0) return cudaSuccess;
  KOpts ka = kopts_of(oa), kb = kopts_of(ob);
  ka.saturate = kb.saturate = 1;
  const size_t tiles = ((m + kTile - 1) / kTile) * ((n + kTile - 1) / kTile);
  int sms = 132;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  const unsigned grid = (unsigned)(tiles < (size_t)sms * 2 ? tiles : (size_t)sms * 2);
  k_mx_gemm_f32_if<<<grid, dim3(32, 8), 0, stream>>>(*fa, ka, *fb, kb, trans_a, trans_b, m, n,
                                                     k, alpha, a, lda, b, ldb, beta, c, ldc, r,
                                                     ldr, flag, tag, carry_a, carry_b, count);
  return cudaGetLastError();
}
