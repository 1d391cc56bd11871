/*
 * What every exmy kernel shares: the options as a plain struct, the Philox
 * words of 8 consecutive elements, formats known at compile time, and the
 * error check.
 *
 * Formats known at compile time: the reference core reads the format through
 * a pointer; when the struct is a compile-time constant, nvcc folds every
 * field and the core shrinks to the handful of shifts that format needs.  The
 * constant is built by spec_format(), a mirror of exmy_format_make()'s derived
 * fields, and is used only when the host has checked that it equals, field by
 * field, the struct the caller passed (spec_id()); anything else runs the
 * same core on the run-time struct.  Either way the code is lib/round_core.h.
 */
#ifndef EXMY_CUDA_KERNEL_COMMON_CUH
#define EXMY_CUDA_KERNEL_COMMON_CUH

#include <cuda_runtime.h>
#include <stdint.h>
#include <string.h>

#include "lib/exmy.h"
#include "lib/philox.h"
#include "lib/round_core.h"

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

/* The random words of stream indices j0 .. j0+7.  j0 & 3 is the same in every
 * thread of a launch (each thread starts at a multiple of 8 past offset), so
 * the selection below is a uniform choice among constant register indices. */
__device__ __forceinline__ void sr_words8(uint64_t seed, uint64_t j0,
                                          uint32_t rnd[8]) {
  uint32_t w[12];
  const uint64_t b = j0 >> 2;
  const unsigned r = (unsigned)(j0 & 3);
  /* the next blocks from j0 + 4 and j0 + 8, not b + 1 and b + 2: a stream
   * index wraps at 2^64, so its block index wraps at 2^62 */
  exmy_sr_block(seed, b, w);
  exmy_sr_block(seed, (j0 + 4) >> 2, w + 4);
  if (r) exmy_sr_block(seed, (j0 + 8) >> 2, w + 8);
#pragma unroll
  for (int k = 0; k < 8; k++)
    rnd[k] = r == 0 ? w[k] : r == 1 ? w[k + 1] : r == 2 ? w[k + 2] : w[k + 3];
}

/* ---------------------------------------------- formats at compile time */

enum {
  SPEC_GENERIC = -1,
  SPEC_E4M3FN = 0,
  SPEC_E5M2,
  SPEC_E2M3,
  SPEC_E3M2,
  SPEC_E2M1,
  SPEC_E8M0,
  SPEC_BF16,
  SPEC_FP16,
  SPEC_E4M3FNUZ,
  SPEC_E5M2FNUZ,
  SPEC_E3M4,
  SPEC_E4M3,
  SPEC_E8M3, /* E8M3..E8M6: the paper's formats */
  SPEC_E8M4,
  SPEC_E8M5,
  SPEC_E8M6,
  SPEC_COUNT
};

/* exmy_format_make()'s derived fields, for the rows above. */
__host__ __device__ constexpr exmy_format spec_make(int E, int M, int bias,
                                                    exmy_specials sp) {
  exmy_format f{};
  f.exp_bits = E;
  f.man_bits = M;
  f.bias = bias;
  f.specials = sp;
  f.is_signed = sp != EXMY_SPECIALS_E8M0;
  f.bits = E + M + (f.is_signed ? 1 : 0);
  const uint32_t all = 1u << (E + M);
  f.sign_mask = f.is_signed ? all : 0;
  f.inf_code = EXMY_NO_CODE;
  f.nan_code = EXMY_NO_CODE;
  if (sp == EXMY_SPECIALS_IEEE) {
    f.inf_code = ((1u << E) - 1) << M;
    if (M > 0) f.nan_code = f.inf_code | (1u << (M - 1));
    f.max_code = f.inf_code - 1;
  } else if (sp == EXMY_SPECIALS_FN) {
    f.nan_code = all - 1;
    f.max_code = all - 2;
  } else if (sp == EXMY_SPECIALS_NONE) {
    f.max_code = all - 1;
  } else if (sp == EXMY_SPECIALS_FNUZ) {
    f.nan_code = f.sign_mask;
    f.max_code = all - 1;
  } else { /* E8M0 */
    f.nan_code = all - 1;
    f.max_code = all - 2;
  }
  f.emin = sp == EXMY_SPECIALS_E8M0 ? -bias : 1 - bias;
  f.emax = (int)(f.max_code >> M) - bias;
  return f;
}

template <int ID>
__host__ __device__ constexpr exmy_format spec_format() {
  return ID == SPEC_E4M3FN ? spec_make(4, 3, 7, EXMY_SPECIALS_FN)
         : ID == SPEC_E5M2 ? spec_make(5, 2, 15, EXMY_SPECIALS_IEEE)
         : ID == SPEC_E2M3 ? spec_make(2, 3, 1, EXMY_SPECIALS_NONE)
         : ID == SPEC_E3M2 ? spec_make(3, 2, 3, EXMY_SPECIALS_NONE)
         : ID == SPEC_E2M1 ? spec_make(2, 1, 1, EXMY_SPECIALS_NONE)
         : ID == SPEC_E8M0 ? spec_make(8, 0, 127, EXMY_SPECIALS_E8M0)
         : ID == SPEC_BF16 ? spec_make(8, 7, 127, EXMY_SPECIALS_IEEE)
         : ID == SPEC_FP16 ? spec_make(5, 10, 15, EXMY_SPECIALS_IEEE)
         : ID == SPEC_E4M3FNUZ ? spec_make(4, 3, 8, EXMY_SPECIALS_FNUZ)
         : ID == SPEC_E5M2FNUZ ? spec_make(5, 2, 16, EXMY_SPECIALS_FNUZ)
         : ID == SPEC_E3M4 ? spec_make(3, 4, 3, EXMY_SPECIALS_IEEE)
         : ID == SPEC_E4M3 ? spec_make(4, 3, 7, EXMY_SPECIALS_IEEE)
         : ID == SPEC_E8M3 ? spec_make(8, 3, 127, EXMY_SPECIALS_IEEE)
         : ID == SPEC_E8M4 ? spec_make(8, 4, 127, EXMY_SPECIALS_IEEE)
         : ID == SPEC_E8M5 ? spec_make(8, 5, 127, EXMY_SPECIALS_IEEE)
                           : spec_make(8, 6, 127, EXMY_SPECIALS_IEEE);
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

static inline int same_fields(const exmy_format &a, const exmy_format &b) {
  return a.exp_bits == b.exp_bits && a.man_bits == b.man_bits &&
         a.bias == b.bias && a.specials == b.specials &&
         a.is_signed == b.is_signed && a.bits == b.bits && a.emin == b.emin &&
         a.emax == b.emax && a.max_code == b.max_code &&
         a.sign_mask == b.sign_mask && a.nan_code == b.nan_code &&
         a.inf_code == b.inf_code;
}

/* Which compile-time format equals *f in every field, or SPEC_GENERIC. */
static inline int spec_id(const exmy_format *f) {
  const exmy_format table[SPEC_COUNT] = {
      spec_format<0>(),  spec_format<1>(),  spec_format<2>(),  spec_format<3>(),
      spec_format<4>(),  spec_format<5>(),  spec_format<6>(),  spec_format<7>(),
      spec_format<8>(),  spec_format<9>(),  spec_format<10>(), spec_format<11>(),
      spec_format<12>(), spec_format<13>(), spec_format<14>(), spec_format<15>()};
  for (int i = 0; i < SPEC_COUNT; i++)
    if (same_fields(*f, table[i])) return i;
  return SPEC_GENERIC;
}

/* a * b in float32 as the CPU computes it: x86 returns a NaN operand itself
 * (sign and payload kept), the GPU a canonical NaN; keeping a NaN `a` makes
 * the two agree bit for bit (`b` is a finite scale wherever this is used). */
__device__ __forceinline__ float mul_keep_nan(float a, float b) {
  return a != a ? a : __fmul_rn(a, b);
}

static inline unsigned blocks_for(size_t items, unsigned threads) {
  return (unsigned)((items + threads - 1) / threads);
}

#endif /* EXMY_CUDA_KERNEL_COMMON_CUH */
