/*
 * The per-thread pieces of the elementwise kernels (convert.cu, mx.cu): 8
 * consecutive elements per thread, 16-byte loads, the reference core per
 * element.
 */
#ifndef EXMY_CUDA_ELEMENTWISE_CUH
#define EXMY_CUDA_ELEMENTWISE_CUH

#include <cuda_bf16.h>

#include <type_traits>

#include "cuda/exmy_cuda.h"
#include "cuda/fast_path.cuh"
#include "cuda/kernel_common.cuh"

namespace exmy_cuda {


constexpr int kThreads = 256;
constexpr int kPer = 8;
constexpr int kRuntimeMode = -1;

/* Calls launch(std::integral_constant<int, MODE>{}) with the kernel mode that
 * serves rounding mode `mode` for format ID when a GEMM operand is rounded
 * into bf16 storage: the modes the recipes round operands with (rne; rz, the
 * bit masking of "To FP8 and Back Again"; sr) have kernels of their own for
 * the table formats, everything else the run-time-mode kernel. */
template <int ID, typename Launch>
inline void with_operand_mode(int mode, Launch &&launch) {
  if constexpr (ID != SPEC_GENERIC) {
    switch (mode) {
      case EXMY_RNE: return launch(std::integral_constant<int, EXMY_RNE>{});
      case EXMY_RZ: return launch(std::integral_constant<int, EXMY_RZ>{});
      case EXMY_SR: return launch(std::integral_constant<int, EXMY_SR>{});
      default: break;
    }
  }
  launch(std::integral_constant<int, kRuntimeMode>{});
}

template <int MODE>
__device__ __forceinline__ int mode_of(const KOpts &o) {
  return MODE == kRuntimeMode ? o.mode : MODE;
}

/* The run-time-mode path: one out-of-line copy of the core per format.
 * Inlining the fully general core 8 times makes cicc take minutes, and this
 * path serves the modes and formats we do not expect to be hot. */
template <int ID>
__device__ __noinline__ uint32_t encode_runtime(const exmy_format &rt,
                                                const KOpts &o, float x,
                                                uint32_t rnd) {
  const auto &f = kernel_format<ID>(rt);
  return exmy_core_encode(&f, (exmy_rounding)o.mode, o.saturate, o.flush,
                          o.mode == EXMY_SR ? o.sr_bits : 32, x, rnd);
}

template <int ID>
__device__ __forceinline__ float decode_one(const exmy_format &f, uint32_t c);

static __device__ __noinline__ float decode_generic(const exmy_format &f, uint32_t c) {
  return exmy_core_decode(&f, c);
}

template <int ID>
__device__ __forceinline__ float decode_one(const exmy_format &f, uint32_t c) {
  if constexpr (ID == SPEC_GENERIC)
    return fast_path_ok(f) ? fast_decode_f(f, c) : decode_generic(f, c);
  else if constexpr (Fast<ID>::enabled) return fast_decode<ID>(c);
  else return exmy_core_decode(&f, c);
}

/* fast_encode over the thread's 8 elements; bit k set where element k needs
 * the core. */
template <int ID, int MODE>
__device__ __forceinline__ uint32_t fast_encode8(int R, int saturate, const float v[kPer],
                                                 const uint32_t rnd[kPer], uint32_t c[kPer]) {
  uint32_t slow = 0;
#pragma unroll
  for (int k = 0; k < kPer; k++)
    if (!fast_encode<ID, MODE>(R, saturate, v[k], rnd[k], c[k])) slow |= 1u << k;
  return slow;
}

template <int ID, int MODE>
__device__ __forceinline__ void encode8(const exmy_format &f, const KOpts &o,
                                        size_t base, const float v[kPer],
                                        uint32_t c[kPer]) {
  const int mode = mode_of<MODE>(o);
  uint32_t rnd[kPer] = {0, 0, 0, 0, 0, 0, 0, 0};
  if (mode == EXMY_SR) sr_words8(o.seed, o.offset + base, rnd);
  if constexpr (MODE == kRuntimeMode) {
#pragma unroll
    for (int k = 0; k < kPer; k++) c[k] = encode_runtime<ID>(f, o, v[k], rnd[k]);
  } else if constexpr (ID == SPEC_GENERIC) { /* a compile-time mode, run-time format */
    const bool fast = !o.flush && fast_path_ok(f);
#pragma unroll
    for (int k = 0; k < kPer; k++)
      if (!fast || !fast_encode_f<MODE>(f, o.sr_bits, o.saturate, v[k], rnd[k], c[k]))
        c[k] = encode_runtime<ID>(f, o, v[k], rnd[k]);
  } else if constexpr (Fast<ID>::enabled) {
    /* the fast path, and the core where it declines (rare: NaN, inf, flushed
     * subnormals); one branch for the 8 elements keeps the fast loop free of
     * per-element branches.  sr with the whole word (sr_bits 32, the
     * default) gets a loop of its own, where the constant folds the masks of
     * the top sr_bits bits away: instructions are what bound sr */
    uint32_t slow = o.flush ? 0xFFu : 0u;
    if (MODE == EXMY_SR && o.sr_bits == 32)
      slow |= fast_encode8<ID, MODE>(32, o.saturate, v, rnd, c);
    else
      slow |= fast_encode8<ID, MODE>(o.sr_bits, o.saturate, v, rnd, c);
    if (slow) {
#pragma unroll
      for (int k = 0; k < kPer; k++)
        if (slow & (1u << k))
          c[k] = exmy_core_encode(&f, (exmy_rounding)MODE, o.saturate, o.flush,
                                  MODE == EXMY_SR ? o.sr_bits : 32, v[k], rnd[k]);
    }
  } else {
    const int sr_bits = mode == EXMY_SR ? o.sr_bits : 32;
#pragma unroll
    for (int k = 0; k < kPer; k++)
      c[k] = exmy_core_encode(&f, (exmy_rounding)mode, o.saturate, o.flush,
                              sr_bits, v[k], rnd[k]);
  }
}

__device__ __forceinline__ bool load8(const float *x, size_t base, size_t n,
                                      int vec, float v[kPer]) {
  if (vec && base + kPer <= n) {
    const float4 a = *reinterpret_cast<const float4 *>(x + base);
    const float4 b = *reinterpret_cast<const float4 *>(x + base + 4);
    v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w;
    v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
    return true;
  }
#pragma unroll
  for (int k = 0; k < kPer; k++) v[k] = base + k < n ? x[base + k] : 0.0f;
  return false;
}

/* The codes of the thread's 8 elements from base (load8, then encode8);
 * returns load8's `full`. */
template <int ID, int MODE>
__device__ __forceinline__ bool load_encode8(const exmy_format &f, const KOpts &o,
                                             const float *x, size_t base, size_t n, int vec,
                                             uint32_t c[kPer]) {
  float v[kPer];
  const bool full = load8(x, base, n, vec, v);
  encode8<ID, MODE>(f, o, base, v, c);
  return full;
}

/* Folds the finite max |v| of the thread's 8 values (elements base.. of n;
 * those at or past n are padding) into m. */
__device__ __forceinline__ void amax8(const float v[kPer], size_t base, size_t n, float &m) {
#pragma unroll
  for (int k = 0; k < kPer; k++)
    if (base + k < n) fold_finite_amax(v[k], m);
}

/* Whether the thread's 8 values are all finite: the values the bf16 image's
 * fast paths serve. */
__device__ __forceinline__ bool all_finite8(const float v[kPer]) {
  bool finite = true;
#pragma unroll
  for (int k = 0; k < kPer; k++) finite = finite && fabsf(v[k]) <= 3.40282347e38f;
  return finite;
}

/* A thread's 8 values v of the BF16 GEMM path's operand image (scaled.cu's
 * k_quantize_scaled_bf16, which loads them from memory): their finite max |v|
 * folded into m (amax8, before scaling), v multiplied by the scale s =
 * scale_inv[0] (device {s, 1/s}; NULL: unscaled), rounded (encode8), and the
 * bf16 bits of the format's values left in c.  A kernel that computes the
 * tensor in registers calls it in place of the pass: the same bits. */
template <int ID, int MODE>
__device__ __forceinline__ void quantize8_bf16(const exmy_format &f, const KOpts &o, size_t base,
                                               size_t n, float v[kPer], const float *scale_inv,
                                               float &m, uint32_t c[kPer]) {
  amax8(v, base, n, m);
  if (scale_inv) {
    const float s = scale_inv[0];
#pragma unroll
    for (int k = 0; k < kPer; k++) v[k] = mul_keep_nan(v[k], s);
  }
  if constexpr (HwPair<ID>::enabled && MODE == EXMY_RNE) {
    /* OCP E4M3 and E5M2 saturating, rne: the hardware's conversion pairs
     * (hw_quantize_rne_sat2, the core's values on every finite input) where
     * all 8 are finite; the encode below for infinities and NaN */
    if (o.saturate && !o.flush && all_finite8(v)) {
#pragma unroll
      for (int k = 0; k < kPer; k += 2) {
        float q0, q1;
        hw_quantize_rne_sat2<ID>(v[k], v[k + 1], q0, q1);
        c[k] = __bfloat16_as_ushort(__float2bfloat16_rn(q0));
        c[k + 1] = __bfloat16_as_ushort(__float2bfloat16_rn(q1));
      }
      return;
    }
  }
  if constexpr ((MODE == EXMY_RZ || MODE == EXMY_RNE) && by_mask_enabled<ID>()) {
    /* bf16 and E8Mx by rz or rne: float32 bit arithmetic with a mask where
     * all 8 are finite (and, for rne, none overflows without saturation); the
     * encode below for infinities, NaN, flushed subnormals and those
     * overflows */
    if (!o.flush && all_finite8(v)) {
      float q[kPer];
      bool ok = true;
#pragma unroll
      for (int k = 0; k < kPer; k++) {
        if constexpr (MODE == EXMY_RZ)
          q[k] = rz_by_mask<ID>(v[k]);
        else
          ok = rne_by_mask<ID>(o.saturate, v[k], q[k]) && ok;
      }
      if (ok) {
#pragma unroll
        for (int k = 0; k < kPer; k++) c[k] = __bfloat16_as_ushort(__float2bfloat16_rn(q[k]));
        return;
      }
    }
  }
  encode8<ID, MODE>(f, o, base, v, c);
#pragma unroll
  for (int k = 0; k < kPer; k++)
    c[k] = __bfloat16_as_ushort(__float2bfloat16_rn(decode_one<ID>(f, c[k])));
}

/* The 8 float32 results of a thread: two 16-byte stores when `full` (all 8
 * in range, y 16-byte aligned), else one by one below n. */
__device__ __forceinline__ void store8f(float *y, size_t base, size_t n, bool full,
                                        const float q[kPer]) {
  if (full) {
    *reinterpret_cast<float4 *>(y + base) = make_float4(q[0], q[1], q[2], q[3]);
    *reinterpret_cast<float4 *>(y + base + 4) = make_float4(q[4], q[5], q[6], q[7]);
  } else {
    for (int k = 0; k < kPer; k++)
      if (base + k < n) y[base + k] = q[k];
  }
}

/* Per-tensor current scaling's {s, 1/s} from the tensor's amax word (finite
 * max |x| as float bits): s = exmy_scale_from_amax, 1/s rounded once. */
__device__ __forceinline__ float2 scale_pair_from_amax(unsigned int amax_bits, float fmax,
                                                       int margin, int pow2) {
  const float s = exmy_core_scale_from_amax(fmax, __uint_as_float(amax_bits), margin, pow2);
  return make_float2(s, __fdiv_rn(1.0f, s));
}

/* The {s, 1/s} a block rounds with: `given` (device; NULL: unscaled), or
 * under exmy_cuda_amax_scale the pair of its amax word, worked out by one
 * thread into `shared` for the block (block 0 also leaves it in scale_out,
 * and the products' alphas).  Every thread of the block calls it; issue
 * the loads before it, so that they overlap the one thread's read of the
 * word.  (One thread a block: one lane a warp, without the block's barrier,
 * measured slower.) */
__device__ __forceinline__ const float *block_scale_pair(const float *given,
                                                         const exmy_cuda_amax_scale &c,
                                                         float *shared) {
  if (!c.amax_bits) return given;
  if (threadIdx.x == 0) {
    const float s = exmy_core_scale_from_amax_shrink(c.fmax, __uint_as_float(*c.amax_bits),
                                                     c.shrink, c.pow2);
    const float inv = __fdiv_rn(1.0f, s);
    shared[0] = s, shared[1] = inv;
    if (blockIdx.x == 0) {
      c.scale_out[0] = s, c.scale_out[1] = inv;
      for (int k = 0; k < 2; k++)
        if (c.product_alpha[k]) *c.product_alpha[k] = inv * __fdiv_rn(1.0f, c.partner[k][0]);
    }
  }
  __syncthreads();
  return shared;
}

/* A thread's 8 elements from base of x (n in all) under per-tensor scale s,
 * inv = 1/s: y = Q(x·s)·inv, NaN kept (mul_keep_nan); y may alias x.  The
 * float32 rounding of per-tensor scaling (scaled.cu's k_quantize_scaled). */
template <int ID, int MODE>
__device__ __forceinline__ void quantize8_scaled(const exmy_format &f, const KOpts &o,
                                                 const float *x, float *y, size_t base, size_t n,
                                                 int vec, float s, float inv) {
  float v[kPer];
  uint32_t c[kPer];
  const bool full = load8(x, base, n, vec, v);
#pragma unroll
  for (int k = 0; k < kPer; k++) v[k] = mul_keep_nan(v[k], s);
  encode8<ID, MODE>(f, o, base, v, c);
  float q[kPer];
#pragma unroll
  for (int k = 0; k < kPer; k++) q[k] = mul_keep_nan(decode_one<ID>(f, c[k]), inv);
  store8f(y, base, n, full, q);
}

/* The 8 codes of a thread, packed into 8, 16 or 32 bytes when `full`. */
template <typename T>
__device__ __forceinline__ void store8(T *out, size_t base, size_t n, bool full,
                                       const uint32_t c[kPer]) {
  if constexpr (sizeof(T) == 1) {
    if (full) {
      uint2 p;
      p.x = c[0] | c[1] << 8 | c[2] << 16 | c[3] << 24;
      p.y = c[4] | c[5] << 8 | c[6] << 16 | c[7] << 24;
      *reinterpret_cast<uint2 *>(out + base) = p;
      return;
    }
  } else if constexpr (sizeof(T) == 2) {
    if (full) {
      uint4 p;
      p.x = (c[0] & 0xFFFFu) | c[1] << 16;
      p.y = (c[2] & 0xFFFFu) | c[3] << 16;
      p.z = (c[4] & 0xFFFFu) | c[5] << 16;
      p.w = (c[6] & 0xFFFFu) | c[7] << 16;
      *reinterpret_cast<uint4 *>(out + base) = p;
      return;
    }
  } else {
    if (full) {
      *reinterpret_cast<uint4 *>(out + base) = make_uint4(c[0], c[1], c[2], c[3]);
      *reinterpret_cast<uint4 *>(out + base + 4) = make_uint4(c[4], c[5], c[6], c[7]);
      return;
    }
  }
  for (int k = 0; k < kPer; k++)
    if (base + k < n) out[base + k] = (T)c[k];
}


}  // namespace exmy_cuda

#endif /* EXMY_CUDA_ELEMENTWISE_CUH */
