/* cuBLASLt's own block-scaled FP8 GEMM (Hopper, CUDA >= 12.9): one float32
 * scale per 1 x 128 tile along K (CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F)
 * on one operand and one per 128 x 128 block (..._BLK128x128_32F) on the
 * other, fp8-deepseek's operands exactly; or per 1 x 128 tile on both (the
 * weight gradient's operands, both tiled along the tokens).  Its
 * descriptors and the scales' layouts as
 * tests/experiments/gpu/blockscaled_lt_calibrate.c calibrated them against
 * the hopper-split model (the tiled-and-blocked pairing, vec-blk, bit for
 * bit; the two tiled ones, vec-vec, not yet run) and as block_fp8_gemm
 * (experiments/gpu/gemm.cu) calls them (vec-blk only): one text for all.
 *
 * Both operands stored K-contiguous (column-major K x R, leading dimension
 * K); D = A^T B, float32, column-major rows_a x rows_b.  The scales:
 *   VEC128: tile (r, kb) at kb * R + r (R-contiguous, R the operand's rows;
 *   the same for A and for B);
 *   BLK128x128: block (rb, kb) at rb * ld + kb, ld = ceil(K / 128) rounded
 *   up to a multiple of 4 (the padding is never read; written as 0). */
#ifndef EXPERIMENTS_GPU_BLOCKSCALED_LT_H
#define EXPERIMENTS_GPU_BLOCKSCALED_LT_H

#include <cublasLt.h>
#include <stddef.h>
#include <stdint.h>

#include "lib/hostdevice.h"

/* Where cuBLASLt reads the VEC128 scale of tile (r, kb) of an operand of
 * `rows` rows. */
EXMY_HD size_t exmy_blockscaled_vec_at(size_t r, size_t kb, size_t rows) {
  return kb * rows + r;
}

/* The leading dimension of BLK128x128 scales along K = k. */
EXMY_HD size_t exmy_blockscaled_blk_ld(size_t k) { return ((k + 127) / 128 + 3) / 4 * 4; }

/* Where cuBLASLt reads the BLK128x128 scale of block (rb, kb), K = k. */
EXMY_HD size_t exmy_blockscaled_blk_at(size_t rb, size_t kb, size_t k) {
  return rb * exmy_blockscaled_blk_ld(k) + kb;
}

/* How many floats an operand's scales take: rows x k, per 128 x 128 block
 * (blk) or per 1 x 128 tile. */
EXMY_HD size_t exmy_blockscaled_count(int blk, size_t rows, size_t k) {
  return blk ? (rows + 127) / 128 * exmy_blockscaled_blk_ld(k) : rows * ((k + 127) / 128);
}

typedef struct {
  cublasLtMatmulDesc_t op;
  cublasLtMatrixLayout_t la, lb, ld;
} exmy_blockscaled_desc;

/* The scale pointers of d's operation (device, in the layouts above); they
 * may change between calls with the same descriptors. */
static inline cublasStatus_t exmy_blockscaled_set_scales(exmy_blockscaled_desc *d,
                                                         const void *scale_a,
                                                         const void *scale_b) {
  cublasStatus_t st;
  if ((st = cublasLtMatmulDescSetAttribute(d->op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &scale_a,
                                           sizeof scale_a)))
    return st;
  return cublasLtMatmulDescSetAttribute(d->op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &scale_b,
                                        sizeof scale_b);
}

/* *d for D (rows_a x rows_b, leading dimension ldd) = A^T B, A (ta: E4M3 or
 * E5M2) k x rows_a and B (tb) k x rows_b, each with leading dimension k;
 * blk_a: A's scales per 128 x 128 block, else per 1 x 128 tile, likewise
 * blk_b (neither: VEC128 on both); scale_a, scale_b their scales; fast:
 * cuBLASLt's fast accumulation (the calibration found it refused with one
 * operand of each mode).  Compute and
 * scale type float32.  On failure its status, what was made left in *d
 * (exmy_blockscaled_desc_free releases it either way). */
static inline cublasStatus_t exmy_blockscaled_desc_make(exmy_blockscaled_desc *d, cudaDataType ta,
                                                        int blk_a, cudaDataType tb, int blk_b,
                                                        uint64_t k, uint64_t rows_a,
                                                        uint64_t rows_b, int64_t ldd,
                                                        const void *scale_a, const void *scale_b,
                                                        int fast) {
  const cublasOperation_t T = CUBLAS_OP_T, N = CUBLAS_OP_N;
  const int8_t fast_accum = (int8_t)fast;
  const int32_t vec = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F,
                blk = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
  const int32_t mode_a = blk_a ? blk : vec, mode_b = blk_b ? blk : vec;
  cublasStatus_t st;
  d->op = NULL, d->la = d->lb = d->ld = NULL;
  if ((st = cublasLtMatmulDescCreate(&d->op, CUBLAS_COMPUTE_32F, CUDA_R_32F)) ||
      (st = cublasLtMatmulDescSetAttribute(d->op, CUBLASLT_MATMUL_DESC_TRANSA, &T, sizeof T)) ||
      (st = cublasLtMatmulDescSetAttribute(d->op, CUBLASLT_MATMUL_DESC_TRANSB, &N, sizeof N)) ||
      (st = cublasLtMatmulDescSetAttribute(d->op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode_a,
                                           sizeof mode_a)) ||
      (st = cublasLtMatmulDescSetAttribute(d->op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode_b,
                                           sizeof mode_b)) ||
      (st = exmy_blockscaled_set_scales(d, scale_a, scale_b)) ||
      (st = cublasLtMatmulDescSetAttribute(d->op, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast_accum,
                                           sizeof fast_accum)) ||
      (st = cublasLtMatrixLayoutCreate(&d->la, ta, k, rows_a, (int64_t)k)) ||
      (st = cublasLtMatrixLayoutCreate(&d->lb, tb, k, rows_b, (int64_t)k)) ||
      (st = cublasLtMatrixLayoutCreate(&d->ld, CUDA_R_32F, rows_a, rows_b, ldd)))
    return st;
  return CUBLAS_STATUS_SUCCESS;
}

static inline void exmy_blockscaled_desc_free(exmy_blockscaled_desc *d) {
  if (d->la) cublasLtMatrixLayoutDestroy(d->la);
  if (d->lb) cublasLtMatrixLayoutDestroy(d->lb);
  if (d->ld) cublasLtMatrixLayoutDestroy(d->ld);
  if (d->op) cublasLtMatmulDescDestroy(d->op);
  d->op = NULL, d->la = d->lb = d->ld = NULL;
}

#endif /* EXPERIMENTS_GPU_BLOCKSCALED_LT_H */
