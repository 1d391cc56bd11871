/*
 * What every exmy kernel shares: the options as a plain struct, the Philox
 * words of 8 consecutive elements, formats known at compile time, and the
 * error check.
 *
 * Formats known at compile time: the reference core reads the format through
 * a pointer; when the struct is a compile-time constant, nvcc folds every
 * field and the core shrinks to the handful of shifts that format needs.  The
 * constants are the rows of lib/format_core.h's table, built by the same
 * exmy_format_fields() as exmy_format_make() uses, and one is used only when
 * the host has checked that it equals, field by field, the struct the caller
 * passed (spec_id()); anything else runs the same core on the run-time
 * struct.  Either way the code is lib/round_core.h.
 */
#ifndef EXMY_CUDA_KERNEL_COMMON_CUH
#define EXMY_CUDA_KERNEL_COMMON_CUH

#include <cuda_runtime.h>
#include <stdint.h>
#include <string.h>

#include "lib/exmy.h"
#include "lib/format_core.h"
#include "lib/philox.h"
#include "lib/round_core.h"
#include "lib/scale_core.h"
#include "lib/stats_core.h"

#define EXMY_CUDA_TRY(call)                   \
  do {                                        \
    cudaError_t err_ = (call);                \
    if (err_ != cudaSuccess) return err_;     \
  } while (0)

/* Options with the defaults resolved (sr_bits 0 -> 32). */
struct KOpts {
  int mode, saturate, flush, sr_bits;
  uint64_t seed, offset;
};

static inline KOpts kopts_of(const exmy_rounding_opts *o) {
  KOpts k;
  k.mode = (int)o->mode;
  k.saturate = o->saturate;
  k.flush = o->flush_subnormals;
  k.sr_bits = o->sr_bits == 0 ? 32 : o->sr_bits;
  k.seed = o->seed;
  k.offset = o->offset;
  return k;
}

/* rnd[k] = word R + k of rnd[0..7] followed by w[0..3]. */
template <int R>
__device__ __forceinline__ void sr_words_down(uint32_t rnd[8], const uint32_t w[4]) {
#pragma unroll
  for (int k = 0; k < 8; k++) rnd[k] = k + R < 8 ? rnd[(k + R) & 7] : w[(k + R - 8) & 3];
}

/* The random words of stream indices j0 .. j0+7.  j0 & 3 is the same in every
 * thread of a launch (each thread starts at a multiple of 8 past offset), so
 * the branch below is uniform.  When the offset is a multiple of 4 the 8
 * words are two whole Philox blocks, one call per 4 elements; otherwise a
 * third block is drawn and the words move down by j0 & 3 (constant register
 * indices in each case). */
__device__ __forceinline__ void sr_words8(uint64_t seed, uint64_t j0,
                                          uint32_t rnd[8]) {
  /* the next blocks from j0 + 4 and j0 + 8, not (j0 >> 2) + 1 and + 2: a
   * stream index wraps at 2^64, so its block index wraps at 2^62 */
  exmy_sr_block(seed, j0 >> 2, rnd);
  exmy_sr_block(seed, (j0 + 4) >> 2, rnd + 4);
  const unsigned r = (unsigned)(j0 & 3);
  if (r == 0) return;
  uint32_t w[4];
  exmy_sr_block(seed, (j0 + 8) >> 2, w);
  switch (r) {
    case 1: sr_words_down<1>(rnd, w); break;
    case 2: sr_words_down<2>(rnd, w); break;
    default: sr_words_down<3>(rnd, w); break;
  }
}

/* ---------------------------------------------- formats at compile time */

/* SPEC_<ID> for each row of EXMY_FORMAT_TABLE (lib/format_core.h). */
enum {
  SPEC_GENERIC = -1,
#define EXMY_SPEC_ENUM(id, ...) SPEC_##id,
  EXMY_FORMAT_TABLE(EXMY_SPEC_ENUM)
#undef EXMY_SPEC_ENUM
  SPEC_COUNT
};

/* The row's EXMY_GPU_* kernel sets; 0 for SPEC_GENERIC. */
__host__ __device__ constexpr int spec_kernels(int id) {
  switch (id) {
#define EXMY_SPEC_KERNELS(id, name, alias, E, M, bias, sp, gpu) \
  case SPEC_##id:                                               \
    return gpu;
    EXMY_FORMAT_TABLE(EXMY_SPEC_KERNELS)
#undef EXMY_SPEC_KERNELS
    default:
      return 0;
  }
}

template <int ID>
constexpr bool kNotARow = false;

/* The format of a row as a compile-time constant (exmy_format_fields). */
template <int ID>
__host__ __device__ constexpr exmy_format spec_format() {
#define EXMY_SPEC_FORMAT(id, name, alias, E, M, bias, sp, gpu) \
  if constexpr (ID == SPEC_##id)                               \
    return exmy_format_fields(E, M, bias, EXMY_SPECIALS_##sp); \
  else
  EXMY_FORMAT_TABLE(EXMY_SPEC_FORMAT)
#undef EXMY_SPEC_FORMAT
  {
    static_assert(kNotARow<ID>, "not a row of EXMY_FORMAT_TABLE");
    return exmy_format{};
  }
}

/* In a kernel: the compile-time format (a constant the compiler folds), or a
 * reference to the run-time one.  Kernels take the run-time format and the
 * options as __grid_constant__ parameters, so that the out-of-line fallback
 * calls can point at them in parameter space: a local copy would sit in
 * local memory and every field read would become a load (seen: the generic
 * kernels ran at 0.4x copy speed that way). */
template <int ID>
__device__ __forceinline__ decltype(auto) kernel_format(const exmy_format &rt) {
  if constexpr (ID == SPEC_GENERIC) {
    return (rt);
  } else {
    return spec_format<ID>();
  }
}

__host__ __device__ static inline int same_fields(const exmy_format &a,
                                                  const exmy_format &b) {
  return a.exp_bits == b.exp_bits && a.man_bits == b.man_bits &&
         a.bias == b.bias && a.specials == b.specials &&
         a.is_signed == b.is_signed && a.bits == b.bits && a.emin == b.emin &&
         a.emax == b.emax && a.max_code == b.max_code &&
         a.sign_mask == b.sign_mask && a.nan_code == b.nan_code &&
         a.inf_code == b.inf_code;
}

/* Which row with GPU kernels equals *f in every field, or SPEC_GENERIC. */
static inline int spec_id(const exmy_format *f) {
  static constexpr struct {
    int id;
    exmy_format f;
  } rows[] = {
#define EXMY_SPEC_ROW(id, name, alias, E, M, bias, sp, gpu) \
  {(gpu) ? SPEC_##id : SPEC_GENERIC, exmy_format_fields(E, M, bias, EXMY_SPECIALS_##sp)},
      EXMY_FORMAT_TABLE(EXMY_SPEC_ROW)
#undef EXMY_SPEC_ROW
  };
  for (const auto &r : rows)
    if (r.id != SPEC_GENERIC && same_fields(*f, r.f)) return r.id;
  return SPEC_GENERIC;
}

/* Op<ID>::run(a...) with ID = spec_id(f) where that row lists the kernel set
 * SET (EXMY_GPU_*), SPEC_GENERIC otherwise: the switch over the format table
 * that every launcher shares.  Only the rows in SET instantiate kernels. */
template <int SET, template <int> class Op, typename... A>
static inline auto with_spec_format(const exmy_format *f, A &&...a) {
  switch (spec_id(f)) {
#define EXMY_SPEC_CASE(id, name, alias, E, M, bias, sp, gpu) \
  case SPEC_##id:                                            \
    return Op<((gpu) & SET) ? SPEC_##id : SPEC_GENERIC>::run(a...);
    EXMY_FORMAT_TABLE(EXMY_SPEC_CASE)
#undef EXMY_SPEC_CASE
    default:
      return Op<SPEC_GENERIC>::run(a...);
  }
}

/* a * b in float32 as the CPU computes it: x86 returns a NaN operand itself
 * (sign and payload kept), the GPU a canonical NaN; keeping a NaN `a` makes
 * the two agree bit for bit (`b` is a finite scale wherever this is used). */
__device__ __forceinline__ float mul_keep_nan(float a, float b) {
  return a != a ? a : __fmul_rn(a, b);
}

/* m = max(m, |v|) where v is finite (NaN and infinities do not count): the
 * amax that per-tensor scaling takes, folded one value at a time (k_amax's
 * pass, and the kernels that fold it while they write the tensor). */
__device__ __forceinline__ void fold_finite_amax(float v, float &m) {
  const float a = fabsf(v);
  if (a > m && a <= 3.40282347e38f) m = a;
}

/* Every thread's m (finite, >= 0) folded into *amax_bits as float bits
 * (max is order-free: deterministic), THREADS = blockDim.x (a multiple of
 * 32, at most 1024).  One atomic per block, not per warp: tens of thousands
 * of atomics on one address would serialise in L2 and cost more than a
 * pass.  Every thread of the block must call it; on return its shared array
 * is free again, so a kernel may call it once per tensor.  A word that
 * starts at 0 and takes every element's fold_finite_amax ends as k_amax's
 * pass over the tensor would leave it. */
template <int THREADS>
__device__ __forceinline__ void block_amax_fold(float m, unsigned int *amax_bits) {
  static_assert(THREADS % 32 == 0 && THREADS <= 1024, "whole warps, one block");
  __shared__ float warp_max[THREADS / 32];
  for (int d = 16; d > 0; d >>= 1) m = fmaxf(m, __shfl_xor_sync(0xFFFFFFFFu, m, d));
  if ((threadIdx.x & 31) == 0) warp_max[threadIdx.x / 32] = m;
  __syncthreads();
  if (threadIdx.x < 32) {
    m = threadIdx.x < THREADS / 32 ? warp_max[threadIdx.x] : 0.0f;
    for (int d = 16; d > 0; d >>= 1) m = fmaxf(m, __shfl_xor_sync(0xFFFFFFFFu, m, d));
    if (threadIdx.x == 0 && m > 0.0f) atomicMax(amax_bits, __float_as_uint(m));
  }
  __syncthreads();
}

static inline unsigned blocks_for(size_t items, unsigned threads) {
  return (unsigned)((items + threads - 1) / threads);
}

/* A one-thread kernel (the scale and alpha kernels, several hundred a step
 * of a scaled recipe) launched as a programmatic dependent of the kernel
 * before it in the stream: on sm_90 its launch overlaps that kernel's end
 * instead of following it, and the kernel reads nothing before
 * wait_for_previous_kernel().  The kernel after it starts as usual, once it
 * has finished. */
template <typename... Params, typename... Args>
static inline cudaError_t launch_single_dependent(void (*kernel)(Params...), cudaStream_t stream,
                                                  Args... args) {
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(1);
  cfg.blockDim = dim3(1);
  cfg.stream = stream;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  return cudaLaunchKernelEx(&cfg, kernel, args...);
}

/* The previous kernel's results, complete and visible (a no-op where the
 * launch was not programmatic, and before sm_90). */
__device__ __forceinline__ void wait_for_previous_kernel() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  cudaGridDependencySynchronize();
#endif
}

#endif /* EXMY_CUDA_KERNEL_COMMON_CUH */
