/*
 * Per-group scaling (EXMY_SCALING_GROUP) and COAT's dynamic range expansion
 * on the GPU, the twin of cpu/quantize_scaled.c's quantize_grouped (non-MX).
 * One block of 128 threads per (row, group): a block reduction finds the
 * group's finite amax and smallest nonzero |x|, thread 0 turns them into the
 * scale and COAT's exponent k (group_scale, cuda/group_dre.cuh), and the
 * block rounds the group element by element (group_round).
 * exmy_cuda_quantize_blocks_f32: the same for blocks of several rows (GROUP)
 * and NVFP4's two-level scales, with its random Hadamard transform, and
 * optionally the statistics of that quantization, reduced on the device.
 * exmy_cuda_nvfp4_quantize_bf16: the same NVFP4 quantization of a GEMM
 * operand, written as the bf16 image of q · s_b (the element times its
 * block's E4M3 decode scale) for a bf16 GEMM that applies 1 / S_enc once.
 */
#include <cuda_bf16.h>
#include <math.h>
#include <stdint.h>

#include "cuda/elementwise.cuh"
#include "cuda/exmy_cuda.h"
#include "cuda/gather.cuh"
#include "cuda/group_dre.cuh"
#include "cuda/reduce.cuh"
#include "lib/scale_core.h"

namespace {
using namespace exmy_cuda;

constexpr int kGroupThreads = 128;

__global__ void __launch_bounds__(kGroupThreads)
    k_group(const __grid_constant__ exmy_format f, const __grid_constant__ KOpts o,
            const float *x, float *y, size_t rows, size_t cols, size_t g,
            float fmax, double log_range, int margin, int pow2, int dre) {
  const size_t per_row = (cols + g - 1) / g;
  const size_t t = blockIdx.x;
  if (t >= rows * per_row) return;
  const size_t r = t / per_row, c0 = (t % per_row) * g;
  const size_t len = cols - c0 < g ? cols - c0 : g, start = r * cols + c0;
  float amax = 0.0f, amin = INFINITY;
  for (size_t i = threadIdx.x; i < len; i += kGroupThreads)
    group_stats_add(x[start + i], amax, amin);
  __shared__ float s_max[kGroupThreads], s_min[kGroupThreads];
  __shared__ GroupScale s_scale;
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
  if (threadIdx.x == 0)
    s_scale = group_scale(fmax, log_range, s_max[0], s_min[0], margin, pow2, dre);
  __syncthreads();
  const GroupScale gs = s_scale;
  for (size_t i = threadIdx.x; i < len; i += kGroupThreads)
    y[start + i] = group_round(f, o, x[start + i], gs, o.offset + start + i);
}

/* One thread per run of 16 elements of a row; the tail of a row is copied. */
__global__ void k_rht16(const float *x, float *y, size_t rows, size_t cols, uint32_t signs) {
  const size_t runs = (cols + 15) / 16;
  const size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= rows * runs) return;
  const size_t r = t / runs, c0 = (t % runs) * 16, at = r * cols + c0;
  float in[16];
  if (c0 + 16 <= cols) {
    for (int i = 0; i < 16; i++) in[i] = x[at + i];
    exmy_core_rht16(in, y + at, signs);
  } else {
    for (size_t i = 0; i < cols - c0; i++) y[at + i] = x[at + i];
  }
}

/* Where exmy_cuda_quantize_blocks_f32's kernel writes a block's rounded
 * elements q: y (or NULL) the dequantized value q · inv, as the CPU; image
 * (NVFP4 only, or NULL) the bf16 image of q · s_b, s_b the block's E4M3
 * decode scale, with s_b itself in block_scales[t] (or NULL) and S_enc in
 * *s_enc (or NULL); codes (or NULL) q itself, and block_inv (or NULL) the
 * block's inv at [t] (exmy_cuda_quantize_group_codes_f32). */
struct BlockOutputs {
  float *y;
  __nv_bfloat16 *image;
  float *block_scales;
  float *s_enc;
  float *codes;
  float *block_inv;
};

/* The scales of a scaling block whose finite amax is block_amax: GROUP's
 * (exmy_core_scale_from_amax) or NVFP4's (amax_bits: the tensor's finite
 * amax), as factors before (scale) and after (inv) the rounding, and NVFP4's
 * E4M3 decode scale s_b; s_b and S_enc written where `out` asks (block t). */
struct BlockScale {
  float scale, inv, s_b;
};
__device__ BlockScale block_scale(int nvfp4, float block_amax, const unsigned int *amax_bits,
                                  float fmax, int margin, int pow2, const BlockOutputs &out,
                                  size_t t) {
  BlockScale b;
  if (nvfp4) {
    const float s_enc = exmy_core_nvfp4_tensor_scale(__uint_as_float(*amax_bits));
    b.s_b = exmy_core_nvfp4_block_scale(block_amax, s_enc);
    b.scale = exmy_core_nvfp4_encode_factor(b.s_b, s_enc);
    b.inv = exmy_core_nvfp4_decode_factor(b.s_b, s_enc);
    if (out.block_scales) out.block_scales[t] = b.s_b;
    if (out.s_enc && t == 0) *out.s_enc = s_enc;
  } else {
    b.scale = exmy_core_scale_from_amax(fmax, block_amax, margin, pow2);
    b.inv = __fdiv_rn(1.0f, b.scale);
    b.s_b = 1.0f;
  }
  if (out.block_inv) out.block_inv[t] = b.inv;
  return b;
}

/* One element x[at] of a scaling block rounded with its scales (sr index:
 * o.offset + at), written where `out` says; its x, x·s, Q(x·s) and
 * dequantized value returned for the statistics.  x is read before y is
 * written (y may alias x). */
struct Rounded {
  float x, xs, q, w;
};
__device__ __forceinline__ Rounded round_in_block(const exmy_format &f, const KOpts &o,
                                                  const float *x, size_t at,
                                                  const BlockScale &b, const BlockOutputs &out) {
  const uint64_t j = o.offset + at;
  const uint32_t rnd = o.mode == EXMY_SR ? exmy_sr_word(o.seed, j) : 0u;
  Rounded r;
  r.x = x[at];
  r.xs = mul_keep_nan(r.x, b.scale);
  r.q = decode_generic(f, encode_runtime<SPEC_GENERIC>(f, o, r.xs, rnd));
  r.w = mul_keep_nan(r.q, b.inv);
  if (out.y) out.y[at] = r.w;
  if (out.codes) out.codes[at] = r.q;
  /* exact where exmy_cuda_nvfp4_bf16_exact(f) holds */
  if (out.image) out.image[at] = __float2bfloat16_rn(mul_keep_nan(r.q, b.s_b));
  return r;
}

/* The scaling blocks of br rows x g columns, block t = blockIdx.x,
 * blockIdx.x + gridDim.x, ... (one each when the grid has one thread block per
 * scaling block): GROUP's scale or NVFP4's (amax_bits: the tensor's finite
 * amax, NVFP4 only), written where `out` says.  STATS: each thread adds its
 * elements to its own statistics, as cpu/quantize_scaled.c does (x, x·s,
 * Q(x·s), the dequantized value), reduced per thread block into
 * partial[blockIdx.x]. */
template <bool STATS>
__global__ void __launch_bounds__(kGroupThreads)
    k_blocks(const __grid_constant__ exmy_format f, const __grid_constant__ KOpts o,
             const float *x, BlockOutputs out, size_t rows, size_t cols, size_t g, size_t br,
             size_t tasks, int nvfp4, const unsigned int *amax_bits, float fmax,
             float fmin_normal, int margin, int pow2, exmy_stats_sums *partial) {
  const size_t per_row = (cols + g - 1) / g;
  __shared__ float s_max[kGroupThreads];
  __shared__ BlockScale s_scales;
  exmy_stats_sums acc;
  if constexpr (STATS) exmy_stats_sums_init(&acc);
  for (size_t t = blockIdx.x; t < tasks; t += gridDim.x) {
    const size_t r0 = (t / per_row) * br, c0 = (t % per_row) * g;
    const size_t len = cols - c0 < g ? cols - c0 : g, nr = rows - r0 < br ? rows - r0 : br;
    float amax = 0.0f;
    for (size_t i = threadIdx.x; i < len * nr; i += kGroupThreads) {
      const float a = fabsf(x[(r0 + i / len) * cols + c0 + i % len]);
      if (a <= 3.40282347e38f) amax = fmaxf(amax, a);
    }
    s_max[threadIdx.x] = amax;
    __syncthreads();
    for (int d = kGroupThreads / 2; d > 0; d >>= 1) {
      if ((int)threadIdx.x < d) s_max[threadIdx.x] = fmaxf(s_max[threadIdx.x], s_max[threadIdx.x + d]);
      __syncthreads();
    }
    if (threadIdx.x == 0)
      s_scales = block_scale(nvfp4, s_max[0], amax_bits, fmax, margin, pow2, out, t);
    __syncthreads();
    /* the next block's writes to s_max and s_scales come after its first
     * __syncthreads, which every thread reaches only after this loop */
    const BlockScale b = s_scales;
    for (size_t i = threadIdx.x; i < len * nr; i += kGroupThreads) {
      const Rounded r = round_in_block(f, o, x, (r0 + i / len) * cols + c0 + i % len, b, out);
      if constexpr (STATS) exmy_stats_sums_add(&acc, fmax, fmin_normal, r.x, r.xs, r.q, r.w);
    }
  }
  if constexpr (STATS) {
    stats_block_reduce<kGroupThreads>(acc);
    if (threadIdx.x == 0) partial[blockIdx.x] = acc;
  }
}

/* k_blocks<false> for small scaling blocks (g · br <= kSmallBlock): LANES
 * lanes of a warp per scaling block (32 / LANES blocks per warp), the amax
 * reduced by shuffles, every lane computing the block's scales itself; the
 * same values as k_blocks (the maximum does not depend on its order), with
 * every lane busy for NVFP4's blocks of 16 where k_blocks leaves 112 of its
 * 128 threads idle. */
constexpr size_t kSmallBlock = 1024;
constexpr int kSmallThreads = 256;
template <int LANES>
__global__ void __launch_bounds__(kSmallThreads)
    k_blocks_small(const __grid_constant__ exmy_format f, const __grid_constant__ KOpts o,
                   const float *x, BlockOutputs out, size_t rows, size_t cols, size_t g,
                   size_t br, size_t tasks, int nvfp4, const unsigned int *amax_bits, float fmax,
                   int margin, int pow2) {
  constexpr int kPerWarp = 32 / LANES;
  const size_t per_row = (cols + g - 1) / g;
  const size_t warp = ((size_t)blockIdx.x * kSmallThreads + threadIdx.x) / 32;
  const size_t warps = (size_t)gridDim.x * (kSmallThreads / 32);
  const unsigned lane = threadIdx.x % LANES;
  /* warp-uniform loop: every lane reaches every shuffle */
  for (size_t base = warp * kPerWarp; base < tasks; base += warps * kPerWarp) {
    const size_t t = base + (threadIdx.x % 32) / LANES;
    const bool active = t < tasks;
    size_t r0 = 0, c0 = 0, len = 0, nr = 0;
    if (active) {
      r0 = (t / per_row) * br, c0 = (t % per_row) * g;
      len = cols - c0 < g ? cols - c0 : g, nr = rows - r0 < br ? rows - r0 : br;
    }
    float amax = 0.0f;
    for (size_t i = lane; i < len * nr; i += LANES) {
      const float a = fabsf(x[(r0 + i / len) * cols + c0 + i % len]);
      if (a <= 3.40282347e38f) amax = fmaxf(amax, a);
    }
    for (int d = LANES / 2; d > 0; d >>= 1)
      amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, d, LANES));
    if (!active) continue; /* the warp's last round: its other blocks are done */
    const BlockOutputs written =
        lane == 0 ? out : BlockOutputs{out.y, out.image, nullptr, nullptr, out.codes, nullptr};
    const BlockScale b = block_scale(nvfp4, amax, amax_bits, fmax, margin, pow2, written, t);
    for (size_t i = lane; i < len * nr; i += LANES)
      round_in_block(f, o, x, (r0 + i / len) * cols + c0 + i % len, b, out);
  }
}

}  // namespace

namespace {

/* exmy_cuda_quantize_blocks_stats_f32 with its outputs spelled out: the
 * Hadamard transform (if any) of x goes to `transformed` (may be x, or
 * out.y), which is then quantized; see BlockOutputs. */
cudaError_t quantize_blocks(const exmy_format *f, const exmy_rounding_opts *o,
                            const exmy_scaling *sc, const float *x, float *transformed,
                            BlockOutputs out, size_t rows, size_t cols, exmy_tensor_stats *stats,
                            cudaStream_t stream) {
  const bool nvfp4 = sc->kind == EXMY_SCALING_NVFP4;
  if ((!nvfp4 && sc->kind != EXMY_SCALING_GROUP) || sc->group < 0 || sc->block_rows < 0 ||
      exmy_rounding_opts_check(o) != 0)
    return cudaErrorInvalidValue;
  if (sc->hadamard && (sc->hadamard != 16 || !nvfp4)) return cudaErrorInvalidValue;
  if (!nvfp4 && sc->dynamic_range_expansion) return cudaErrorNotSupported;
  size_t g = sc->group > 0 ? (size_t)sc->group : nvfp4 ? 16 : cols;
  if (g == 0) g = 1;
  const size_t br = sc->block_rows > 1 ? (size_t)sc->block_rows : 1;
  if (rows * cols == 0) { /* the statistics of nothing */
    if (!stats) return cudaSuccess;
    k_stats_finish<<<1, kStatThreads, 0, stream>>>(nullptr, 0, stats);
    k_stats_nan_scale<<<1, 1, 0, stream>>>(stats);
    return cudaGetLastError();
  }
  const size_t tasks = ((rows + br - 1) / br) * ((cols + g - 1) / g);
  if (tasks > 0x7FFFFFFFu) return cudaErrorInvalidValue;
  /* the stream's scratch: the tensor's amax bits (NVFP4), then the
   * statistics' block partials */
  const int nb = stats ? (int)(tasks < (size_t)stat_blocks() ? tasks : (size_t)stat_blocks()) : 0;
  constexpr size_t kPartialAt = 256;
  void *scratch = nullptr;
  if (nvfp4 || stats)
    EXMY_CUDA_TRY(stream_scratch(stream, kPartialAt + sizeof(exmy_stats_sums) * nb, &scratch));
  unsigned int *amax = nvfp4 ? (unsigned int *)scratch : nullptr;
  exmy_stats_sums *partial =
      stats ? reinterpret_cast<exmy_stats_sums *>((char *)scratch + kPartialAt) : nullptr;
  if (sc->hadamard) {
    const size_t runs = rows * ((cols + 15) / 16);
    k_rht16<<<(unsigned)((runs + 255) / 256), 256, 0, stream>>>(
        x, transformed, rows, cols, exmy_core_rht16_signs(sc->hadamard_seed));
    EXMY_CUDA_TRY(cudaGetLastError());
    x = transformed; /* the transformed tensor is the one quantized (and described) */
  }
  if (nvfp4) {
    EXMY_CUDA_TRY(cudaMemsetAsync(amax, 0, sizeof *amax, stream));
    launch_amax(x, rows * cols, amax, stream);
    EXMY_CUDA_TRY(cudaGetLastError());
  }
  exmy_format_info info;
  exmy_format_get_info(f, &info);
  exmy_rounding_opts oe = *o;
  if (nvfp4) oe.saturate = true; /* the conversion is satfinite, as on the CPU */
  if (!stats && g * br <= kSmallBlock) {
    const size_t per_cta = (kSmallThreads / 32) * (g * br <= 16 ? 2 : 1);
    const unsigned grid = (unsigned)((tasks + per_cta - 1) / per_cta);
    if (g * br <= 16)
      k_blocks_small<16><<<grid, kSmallThreads, 0, stream>>>(
          *f, kopts_of(&oe), x, out, rows, cols, g, br, tasks, nvfp4, amax, info.max,
          sc->margin, sc->pow2);
    else
      k_blocks_small<32><<<grid, kSmallThreads, 0, stream>>>(
          *f, kopts_of(&oe), x, out, rows, cols, g, br, tasks, nvfp4, amax, info.max,
          sc->margin, sc->pow2);
    return cudaGetLastError();
  }
  if (!stats) {
    k_blocks<false><<<(unsigned)tasks, kGroupThreads, 0, stream>>>(
        *f, kopts_of(&oe), x, out, rows, cols, g, br, tasks, nvfp4, amax, info.max,
        info.min_normal, sc->margin, sc->pow2, nullptr);
    return cudaGetLastError();
  }
  k_blocks<true><<<(unsigned)nb, kGroupThreads, 0, stream>>>(
      *f, kopts_of(&oe), x, out, rows, cols, g, br, tasks, nvfp4, amax, info.max,
      info.min_normal, sc->margin, sc->pow2, partial);
  k_stats_finish<<<1, kStatThreads, 0, stream>>>(partial, nb, stats);
  k_stats_nan_scale<<<1, 1, 0, stream>>>(stats);
  return cudaGetLastError();
}

}  // namespace

extern "C" cudaError_t exmy_cuda_quantize_blocks_stats_f32(
    const exmy_format *f, const exmy_rounding_opts *o, const exmy_scaling *sc, const float *x,
    float *y, size_t rows, size_t cols, exmy_tensor_stats *stats, cudaStream_t stream) {
  const BlockOutputs out = {y, nullptr, nullptr, nullptr, nullptr, nullptr};
  return quantize_blocks(f, o, sc, x, y, out, rows, cols, stats, stream);
}

extern "C" cudaError_t exmy_cuda_quantize_group_codes_f32(
    const exmy_format *f, const exmy_rounding_opts *o, const exmy_scaling *sc, const float *x,
    float *y, float *codes, float *block_inv, size_t rows, size_t cols, cudaStream_t stream) {
  if (sc->kind != EXMY_SCALING_GROUP) return cudaErrorInvalidValue;
  const BlockOutputs out = {y, nullptr, nullptr, nullptr, codes, block_inv};
  return quantize_blocks(f, o, sc, x, y, out, rows, cols, NULL, stream);
}

extern "C" cudaError_t exmy_cuda_quantize_blocks_f32(const exmy_format *f,
                                                     const exmy_rounding_opts *o,
                                                     const exmy_scaling *sc, const float *x,
                                                     float *y, size_t rows, size_t cols,
                                                     cudaStream_t stream) {
  return exmy_cuda_quantize_blocks_stats_f32(f, o, sc, x, y, rows, cols, NULL, stream);
}

/* q = m · 2^e with m < 2^(M+1) and q's last bit >= 2^(emin - M); s_b, an
 * E4M3 value, has 4 significant bits, its last bit >= 2^-9 and s_b < 2^9.
 * Their product has at most M + 5 significant bits, its last bit >=
 * 2^(emin - M - 9), and it lies below 2^(emax + 10): a bfloat16 value (8
 * significant bits, exponents up to 127, subnormals on the grid of 2^-133)
 * when M + 5 <= 8, emin - M - 9 >= -133 and emax + 9 <= 127.  E2M1: 3
 * significant bits, products from 2^-10 to 6 · 448. */
extern "C" bool exmy_cuda_nvfp4_bf16_exact(const exmy_format *f) {
  return f && f->man_bits <= 3 && f->emin - f->man_bits - 9 >= -133 && f->emax + 9 <= 127;
}

extern "C" cudaError_t exmy_cuda_nvfp4_quantize_bf16(
    const exmy_format *f, const exmy_rounding_opts *o, const exmy_scaling *sc, const float *x,
    size_t ldx, bool transpose, size_t rows, size_t cols, float *work, void *image,
    float *s_enc, float *block_scales, cudaStream_t stream) {
  if (sc->kind != EXMY_SCALING_NVFP4 || !exmy_cuda_nvfp4_bf16_exact(f) || !image ||
      ldx < (transpose ? rows : cols))
    return cudaErrorInvalidValue;
  if (rows * cols == 0) return cudaSuccess;
  /* the dense K-contiguous operand the reference quantizes; read in place
   * where it is one already and no transform is to be written */
  if (transpose || ldx != cols || sc->hadamard) {
    if (!work) return cudaErrorInvalidValue;
    launch_gather(x, ldx, transpose, rows, cols, work, stream);
    EXMY_CUDA_TRY(cudaGetLastError());
    x = work;
  }
  const BlockOutputs out = {nullptr, (__nv_bfloat16 *)image, block_scales, s_enc};
  return quantize_blocks(f, o, sc, x, work, out, rows, cols, NULL, stream);
}

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
  const double log_range = log((double)info.max / (double)info.min_subnormal);
  const size_t tasks = rows * ((cols + g - 1) / g);
  if (tasks > 0x7FFFFFFFu) return cudaErrorInvalidValue;
  k_group<<<(unsigned)tasks, kGroupThreads, 0, stream>>>(
      *f, kopts_of(o), x, y, rows, cols, g, info.max, log_range, margin, pow2,
      dynamic_range_expansion);
  return cudaGetLastError();
}
