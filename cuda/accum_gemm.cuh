/*
 * The accumulation model's GEMM on the device, one thread per output: shared
 * by exmy_cuda_qgemm_accum (cuda/qgemm.cu, operands gathered K-contiguous)
 * and the trainer's fallback from cuBLASLt's FP8 GEMM
 * (experiments/gpu/gemm.cu, operands as they lie).
 */
#ifndef EXMY_CUDA_ACCUM_GEMM_CUH
#define EXMY_CUDA_ACCUM_GEMM_CUH

#include <stddef.h>

#include "lib/accum_core.h"

namespace exmy_cuda {

/* C (m x n, leading dimension ldc) = alpha op(A) op(B) (+ beta C), every
 * dot product exmy_accum_dot_scaled under `model` and rounded by
 * exmy_gemm_epilogue, as the CPU's exmy_qgemm_accum: op(A) row i at a + i
 * lda (ta: a + i, stride lda), op(B) column j at b + j (tb: b + j ldb,
 * stride 1).  scale_a / scale_b (device, NULL: none): the power-of-two
 * scales the operands' emins follow (exmy_accum_scaled_emin).  blocks_a /
 * blocks_b (.s device or NULL): block scales of op(A)'s rows and op(B)'s
 * columns, a / b then holding codes.  A grid-stride loop over the
 * outputs. */
__device__ inline void accum_gemm_outputs(exmy_accum_model model, bool ta, bool tb, size_t m,
                                          size_t n, int k, float alpha,
                                          const float *__restrict__ a, long lda,
                                          const float *__restrict__ b, long ldb, float beta,
                                          float *__restrict__ c, size_t ldc,
                                          const float *scale_a, const float *scale_b,
                                          exmy_accum_scales blocks_a = exmy_accum_scales{},
                                          exmy_accum_scales blocks_b = exmy_accum_scales{}) {
  if (scale_a) model.emin_a = exmy_accum_scaled_emin(model.emin_a, *scale_a);
  if (scale_b) model.emin_b = exmy_accum_scaled_emin(model.emin_b, *scale_b);
  for (size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x; e < m * n;
       e += (size_t)gridDim.x * blockDim.x) {
    const size_t i = e / n, j = e % n;
    const float *ai = ta ? a + i : a + i * lda;
    const float *bj = tb ? b + j * ldb : b + j;
    const float dot = exmy_accum_dot_scaled(&model, ai, ta ? lda : 1,
                                            exmy_accum_scales_row(&blocks_a, i), bj,
                                            tb ? 1 : ldb, exmy_accum_scales_row(&blocks_b, j), k);
    float *cij = c + i * ldc + j;
    *cij = exmy_gemm_epilogue(dot, alpha, beta, cij);
  }
}

}  // namespace exmy_cuda

#endif
