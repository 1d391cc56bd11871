/*
 * The quantized GEMM on the GPU through cuBLAS (see exmy_cuda.h for the
 * paths).  Row-major C = A . Bt^T is, in cuBLAS's column-major terms,
 * C^T (n x m) = Bt (k x n stored, transposed) x A^T (k x m stored): a "TN"
 * GEMM, the layout the FP8 tensor-core path requires.
 */
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <stdio.h>
#include <stdlib.h>

#include "cuda/accum_gemm.cuh"
#include "cuda/elementwise.cuh"
#include "cuda/gather.cuh"
#include "cuda/exmy_cuda.h"
#include "lib/accum_core.h"

struct exmy_cuda_gemm {
  cublasHandle_t blas;
  cublasLtHandle_t lt;
  void *workspace;
  size_t workspace_bytes;
  void *buf_a, *buf_b; /* quantized operands */
  size_t cap_a, cap_b;
  float *one;          /* device 1.0f for the FP8 scales */
  /* exmy_cuda_qgemm: dense float32 images of op(A), op(B)^T, C; their bf16
   * copies; MX codes/scales; the bf16-exactness flag */
  void *ws[3], *bf[2], *codes, *scales;
  size_t cap_ws[3], cap_bf[2], cap_codes, cap_scales;
  int *flag;
  /* exmy_cuda_qgemm_accum: the per-tensor scales of op(A) and op(B), for
   * the emin of a power-of-two-scaled operand */
  void *qscales;
  size_t cap_qscales;
  /* exmy_cuda_qgemm_accum: the codes and block scales of block-scaled
   * operands (exmy_accum_block_scaled), A's [0] and B's [1] */
  void *bcodes[2], *bscales[2];
  size_t cap_bcodes[2], cap_bscales[2];
};

namespace {
using namespace exmy_cuda;

cudaError_t reserve(void **buf, size_t *cap, size_t bytes) {
  if (*cap >= bytes) return cudaSuccess;
  if (*buf) cudaFree(*buf);
  *buf = NULL;
  *cap = 0;
  EXMY_CUDA_TRY(cudaMalloc(buf, bytes));
  *cap = bytes;
  return cudaSuccess;
}

/* OCP E4M3 (FN) or E5M2: the formats of the H100's FP8 GEMMs (HwPair's). */
bool is_fp8(const exmy_format *f) { return f && hw_pair_kind(*f, 1) != 0; }

#define BLAS_TRY(call)                                                   \
  do {                                                                   \
    cublasStatus_t st_ = (call);                                         \
    if (st_ != CUBLAS_STATUS_SUCCESS) {                                  \
      fprintf(stderr, "exmy_cuda_qgemm: %s: %s\n", #call,                \
              cublasGetStatusString(st_));                               \
      return cudaErrorUnknown;                                           \
    }                                                                    \
  } while (0)

cudaError_t fp8_gemm(exmy_cuda_gemm *g, size_t m, size_t n, size_t k,
                     const exmy_format *fa, const exmy_format *fb, const void *qa,
                     const void *qb, float *c, cudaStream_t s) {
  const cudaDataType ta = spec_id(fa) == SPEC_E4M3FN ? CUDA_R_8F_E4M3 : CUDA_R_8F_E5M2;
  const cudaDataType tb = spec_id(fb) == SPEC_E4M3FN ? CUDA_R_8F_E4M3 : CUDA_R_8F_E5M2;
  cublasLtMatmulDesc_t op = NULL;
  cublasLtMatrixLayout_t la = NULL, lb = NULL, lc = NULL;
  cublasLtMatmulPreference_t pref = NULL;
  cudaError_t result = cudaErrorUnknown;
  const cublasOperation_t T = CUBLAS_OP_T, N = CUBLAS_OP_N;
  const float alpha = 1.0f, beta = 0.0f;
  cublasLtMatmulHeuristicResult_t heur = {};
  int found = 0;
  /* column-major: D (n x m) = op(Bt as k x n)^T . (A as k x m) */
  if (cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F) ||
      cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &T, sizeof T) ||
      cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &N, sizeof N) ||
      cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &g->one, sizeof g->one) ||
      cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &g->one, sizeof g->one) ||
      cublasLtMatrixLayoutCreate(&la, tb, k, n, k) ||
      cublasLtMatrixLayoutCreate(&lb, ta, k, m, k) ||
      cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, n, m, n) ||
      cublasLtMatmulPreferenceCreate(&pref) ||
      cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                           &g->workspace_bytes, sizeof g->workspace_bytes)) {
    fprintf(stderr, "exmy_cuda_qgemm: cublasLt descriptor setup failed\n");
    goto done;
  }
  if (cublasLtMatmulAlgoGetHeuristic(g->lt, op, la, lb, lc, lc, pref, 1, &heur, &found) ||
      found == 0) {
    fprintf(stderr, "exmy_cuda_qgemm: cublasLt has no FP8 algorithm for this shape\n");
    goto done;
  }
  {
    cublasStatus_t st = cublasLtMatmul(g->lt, op, &alpha, qb, la, qa, lb, &beta, c, lc, c, lc,
                                       &heur.algo, g->workspace, g->workspace_bytes, s);
    if (st != CUBLAS_STATUS_SUCCESS) {
      fprintf(stderr, "exmy_cuda_qgemm: cublasLtMatmul: %s\n", cublasGetStatusString(st));
      goto done;
    }
  }
  result = cudaSuccess;
done:
  if (pref) cublasLtMatmulPreferenceDestroy(pref);
  if (lc) cublasLtMatrixLayoutDestroy(lc);
  if (lb) cublasLtMatrixLayoutDestroy(lb);
  if (la) cublasLtMatrixLayoutDestroy(la);
  if (op) cublasLtMatmulDescDestroy(op);
  return result;
}

}  // namespace

extern "C" bool exmy_cuda_bf16_exact(const exmy_format *f) {
  if (!f || f->man_bits > 7) return false;
  /* smallest positive value 2^(emin - M) (E8M0: 2^emin) >= 2^-133 */
  const int lowest = f->specials == EXMY_SPECIALS_E8M0 ? f->emin : f->emin - f->man_bits;
  return lowest >= -133 && f->emax <= 127;
}

extern "C" exmy_cuda_gemm *exmy_cuda_gemm_new(void) {
  exmy_cuda_gemm *g = (exmy_cuda_gemm *)calloc(1, sizeof *g);
  if (!g) return NULL;
  const float one = 1.0f;
  g->workspace_bytes = 32u << 20;
  if (cublasCreate(&g->blas) != CUBLAS_STATUS_SUCCESS ||
      cublasLtCreate(&g->lt) != CUBLAS_STATUS_SUCCESS ||
      cublasSetMathMode(g->blas, CUBLAS_DEFAULT_MATH) != CUBLAS_STATUS_SUCCESS ||
      cudaMalloc(&g->workspace, g->workspace_bytes) != cudaSuccess ||
      cudaMalloc((void **)&g->one, sizeof(float)) != cudaSuccess ||
      cudaMemcpy(g->one, &one, sizeof one, cudaMemcpyHostToDevice) != cudaSuccess) {
    exmy_cuda_gemm_free(g);
    return NULL;
  }
  cublasSetWorkspace(g->blas, g->workspace, g->workspace_bytes);
  return g;
}

extern "C" void exmy_cuda_gemm_free(exmy_cuda_gemm *g) {
  if (!g) return;
  if (g->blas) cublasDestroy(g->blas);
  if (g->lt) cublasLtDestroy(g->lt);
  cudaFree(g->workspace);
  cudaFree(g->buf_a);
  cudaFree(g->buf_b);
  cudaFree(g->one);
  for (int i = 0; i < 3; i++) cudaFree(g->ws[i]);
  for (int i = 0; i < 2; i++) cudaFree(g->bf[i]);
  cudaFree(g->codes);
  cudaFree(g->qscales);
  for (int i = 0; i < 2; i++) cudaFree(g->bcodes[i]), cudaFree(g->bscales[i]);
  cudaFree(g->scales);
  cudaFree(g->flag);
  free(g);
}

extern "C" cudaError_t exmy_cuda_qgemm_nt(
    exmy_cuda_gemm *g, exmy_cuda_gemm_path path, size_t m, size_t n, size_t k,
    const float *a, const exmy_format *fa, const exmy_rounding_opts *oa,
    const float *bt, const exmy_format *fb, const exmy_rounding_opts *ob,
    float *c, exmy_cuda_gemm_path *used, cudaStream_t s) {
  const exmy_rounding_opts rne = {};
  if (!oa) oa = &rne;
  if (!ob) ob = &rne;
  const bool exact = exmy_cuda_bf16_exact(fa) && exmy_cuda_bf16_exact(fb);
  if (path == EXMY_CUDA_GEMM_AUTO) path = exact ? EXMY_CUDA_GEMM_BF16 : EXMY_CUDA_GEMM_FP32;
  if (used) *used = path;
  if (path == EXMY_CUDA_GEMM_BF16 && !exact) return cudaErrorInvalidValue;
  if (path == EXMY_CUDA_GEMM_FP8 &&
      (!is_fp8(fa) || !is_fp8(fb) || (spec_id(fa) == SPEC_E5M2 && spec_id(fb) == SPEC_E5M2)))
    return cudaErrorInvalidValue;
  BLAS_TRY(cublasSetStream(g->blas, s));
  const float alpha = 1.0f, beta = 0.0f;
  const int M = (int)n, N = (int)m, K = (int)k; /* column-major view */
  if (path == EXMY_CUDA_GEMM_BF16) {
    EXMY_CUDA_TRY(reserve(&g->buf_a, &g->cap_a, m * k * 2));
    EXMY_CUDA_TRY(reserve(&g->buf_b, &g->cap_b, n * k * 2));
    EXMY_CUDA_TRY(exmy_cuda_quantize_bf16(fa, oa, a, g->buf_a, m * k, s));
    EXMY_CUDA_TRY(exmy_cuda_quantize_bf16(fb, ob, bt, g->buf_b, n * k, s));
    BLAS_TRY(cublasGemmEx(g->blas, CUBLAS_OP_T, CUBLAS_OP_N, M, N, K, &alpha, g->buf_b,
                          CUDA_R_16BF, K, g->buf_a, CUDA_R_16BF, K, &beta, c, CUDA_R_32F, M,
                          CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return cudaSuccess;
  }
  if (path == EXMY_CUDA_GEMM_FP8) {
    EXMY_CUDA_TRY(reserve(&g->buf_a, &g->cap_a, m * k));
    EXMY_CUDA_TRY(reserve(&g->buf_b, &g->cap_b, n * k));
    EXMY_CUDA_TRY(exmy_cuda_encode_f32(fa, oa, a, g->buf_a, m * k, s));
    EXMY_CUDA_TRY(exmy_cuda_encode_f32(fb, ob, bt, g->buf_b, n * k, s));
    return fp8_gemm(g, m, n, k, fa, fb, g->buf_a, g->buf_b, c, s);
  }
  /* FP32 */
  const float *qa = a, *qb = bt;
  if (fa) {
    EXMY_CUDA_TRY(reserve(&g->buf_a, &g->cap_a, m * k * 4));
    EXMY_CUDA_TRY(exmy_cuda_quantize_f32(fa, oa, a, (float *)g->buf_a, m * k, s));
    qa = (const float *)g->buf_a;
  }
  if (fb) {
    EXMY_CUDA_TRY(reserve(&g->buf_b, &g->cap_b, n * k * 4));
    EXMY_CUDA_TRY(exmy_cuda_quantize_f32(fb, ob, bt, (float *)g->buf_b, n * k, s));
    qb = (const float *)g->buf_b;
  }
  BLAS_TRY(cublasGemmEx(g->blas, CUBLAS_OP_T, CUBLAS_OP_N, M, N, K, &alpha, qb, CUDA_R_32F, K,
                        qa, CUDA_R_32F, K, &beta, c, CUDA_R_32F, M,
                        CUBLAS_COMPUTE_32F_PEDANTIC, CUBLAS_GEMM_DEFAULT));
  return cudaSuccess;
}

/* ---- exmy_cuda_qgemm: the full exmy_qgemm on the GPU ---- */
namespace {


/* y = bf16(x); *flag = 1 if any non-NaN value changes. */
__global__ void k_to_bf16_checked(const float *__restrict__ x, __nv_bfloat16 *__restrict__ y,
                                  size_t n, int *flag) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    const float v = x[i];
    const __nv_bfloat16 b = __float2bfloat16_rn(v);
    if (__bfloat162float(b) != v && v == v) *flag = 1;
    y[i] = b;
  }
}


bool enabled(const exmy_cuda_operand_quant *q) { return q && q->enabled; }

/* Whether the dequantized values of q are exactly bf16 values by the format
 * rule: an exact format, and a recipe that multiplies by a power of two. */
bool bf16_candidate(const exmy_cuda_operand_quant *q) {
  if (!enabled(q) || !exmy_cuda_bf16_exact(&q->format)) return false;
  switch (q->scaling.kind) {
    case EXMY_SCALING_NONE:
    case EXMY_SCALING_MX:
      return true;
    case EXMY_SCALING_TENSOR:
    case EXMY_SCALING_DELAYED:
      return q->scaling.pow2;
    case EXMY_SCALING_GROUP:
      return q->scaling.pow2 && !q->scaling.dynamic_range_expansion;
    case EXMY_SCALING_NVFP4:
      return false; /* decode factors are products of E4M3 values and 1/S_enc */
  }
  return false;
}

/* t (rows x cols, dense, device) = dequant(Q(t)) per q, in place; scale
 * (device, or NULL): TENSOR / DELAYED's scale used stored there. */
cudaError_t quantize_operand(exmy_cuda_gemm *g, const exmy_cuda_operand_quant *q, float *t,
                             size_t rows, size_t cols, cudaStream_t s, float *scale = NULL) {
  const size_t n = rows * cols;
  if (!n) return cudaSuccess;
  const exmy_scaling &sc = q->scaling;
  switch (sc.kind) {
    case EXMY_SCALING_NONE:
      return exmy_cuda_quantize_f32(&q->format, &q->round, t, t, n, s);
    case EXMY_SCALING_TENSOR:
      return exmy_cuda_quantize_tensor_scaled_f32(&q->format, &q->round, sc.margin, sc.pow2, t,
                                                  t, n, scale, s);
    case EXMY_SCALING_DELAYED:
      if (!q->delayed) return cudaErrorInvalidValue;
      if (scale) /* the scale this call uses: the state moves on after */
        EXMY_CUDA_TRY(cudaMemcpyAsync(scale, exmy_cuda_delayed_scale(q->delayed), sizeof(float),
                                      cudaMemcpyDeviceToDevice, s));
      return exmy_cuda_quantize_delayed_scaled_f32(&q->format, &q->round, sc.margin, sc.pow2,
                                                   sc.history_most_recent, q->delayed, t, t, n,
                                                   s);
    case EXMY_SCALING_MX: {
      if (sc.group < 0 || exmy_code_bytes(&q->format) != 1) return cudaErrorNotSupported;
      const int block = sc.group ? sc.group : 32;
      const size_t nb = (cols + block - 1) / block;
      EXMY_CUDA_TRY(reserve(&g->codes, &g->cap_codes, n));
      EXMY_CUDA_TRY(reserve(&g->scales, &g->cap_scales, rows * nb));
      EXMY_CUDA_TRY(exmy_cuda_mx_encode_f32(&q->format, &q->round, block, t, rows, cols,
                                            (uint8_t *)g->codes, (uint8_t *)g->scales, s));
      return exmy_cuda_mx_decode_f32(&q->format, block, (const uint8_t *)g->codes,
                                     (const uint8_t *)g->scales, rows, cols, t, s);
    }
    case EXMY_SCALING_NVFP4:
      return exmy_cuda_quantize_blocks_f32(&q->format, &q->round, &sc, t, t, rows, cols, s);
    case EXMY_SCALING_GROUP:
      if (sc.group < 0) return cudaErrorInvalidValue;
      if (sc.block_rows > 1)
        return exmy_cuda_quantize_blocks_f32(&q->format, &q->round, &sc, t, t, rows, cols, s);
      return exmy_cuda_quantize_group_scaled_f32(&q->format, &q->round, sc.group, sc.margin,
                                                 sc.pow2, sc.dynamic_range_expansion, t, t,
                                                 rows, cols, s);
  }
  return cudaErrorInvalidValue;
}

}  // namespace

namespace {

/* op(A) as m x k and op(B)^T as n x k, K contiguous (cpu/qgemm.c), in the
 * workspaces ws[0] / ws[1] of g, quantized per qa / qb. */
cudaError_t prepare_operands(exmy_cuda_gemm *g, bool trans_a, bool trans_b, size_t m, size_t n,
                             size_t k, const float *a, size_t lda,
                             const exmy_cuda_operand_quant *qa, const float *b, size_t ldb,
                             const exmy_cuda_operand_quant *qb, float **ta, float **tb,
                             cudaStream_t s, float *scale_a = NULL, float *scale_b = NULL) {
  EXMY_CUDA_TRY(reserve(&g->ws[0], &g->cap_ws[0], m * k * 4));
  EXMY_CUDA_TRY(reserve(&g->ws[1], &g->cap_ws[1], n * k * 4));
  *ta = (float *)g->ws[0];
  *tb = (float *)g->ws[1];
  k_gather<<<grid_for(m * k), 256, 0, s>>>(a, lda, trans_a, m, k, *ta);
  k_gather<<<grid_for(n * k), 256, 0, s>>>(b, ldb, !trans_b, n, k, *tb);
  EXMY_CUDA_TRY(cudaGetLastError());
  if (enabled(qa)) EXMY_CUDA_TRY(quantize_operand(g, qa, *ta, m, k, s, scale_a));
  if (enabled(qb)) EXMY_CUDA_TRY(quantize_operand(g, qb, *tb, n, k, s, scale_b));
  return cudaSuccess;
}

/* C (m x n, leading dimension ldc) quantized per qc (as a dense image). */
cudaError_t quantize_result(exmy_cuda_gemm *g, const exmy_cuda_operand_quant *qc, float *c,
                            size_t m, size_t n, size_t ldc, cudaStream_t s) {
  if (!enabled(qc) || !m || !n) return cudaSuccess;
  if (ldc == n) return quantize_operand(g, qc, c, m, n, s);
  EXMY_CUDA_TRY(reserve(&g->ws[2], &g->cap_ws[2], m * n * 4));
  float *tc = (float *)g->ws[2];
  EXMY_CUDA_TRY(cudaMemcpy2DAsync(tc, n * 4, c, ldc * 4, n * 4, m, cudaMemcpyDeviceToDevice, s));
  EXMY_CUDA_TRY(quantize_operand(g, qc, tc, m, n, s));
  EXMY_CUDA_TRY(cudaMemcpy2DAsync(c, ldc * 4, tc, n * 4, n * 4, m, cudaMemcpyDeviceToDevice, s));
  return cudaSuccess;
}

}  // namespace

extern "C" cudaError_t exmy_cuda_qgemm(exmy_cuda_gemm *g, bool trans_a, bool trans_b, size_t m,
                                       size_t n, size_t k, float alpha, const float *a,
                                       size_t lda, const exmy_cuda_operand_quant *qa,
                                       const float *b, size_t ldb,
                                       const exmy_cuda_operand_quant *qb, float beta, float *c,
                                       size_t ldc, const exmy_cuda_operand_quant *qc,
                                       exmy_cuda_gemm_path *used, cudaStream_t s) {
  if (!g || ldc < n) return cudaErrorInvalidValue;
  if ((qa && qa->stats) || (qb && qb->stats) || (qc && qc->stats)) return cudaErrorNotSupported;
  if (m > INT32_MAX || n > INT32_MAX || k > INT32_MAX || ldc > INT32_MAX)
    return cudaErrorInvalidValue;
  float *ta = NULL, *tb = NULL;
  exmy_cuda_gemm_path path = EXMY_CUDA_GEMM_FP32;
  if (m && n && k) {
    EXMY_CUDA_TRY(prepare_operands(g, trans_a, trans_b, m, n, k, a, lda, qa, b, ldb, qb, &ta,
                                   &tb, s));
    if (bf16_candidate(qa) && bf16_candidate(qb)) {
      if (!g->flag) EXMY_CUDA_TRY(cudaMalloc((void **)&g->flag, sizeof(int)));
      EXMY_CUDA_TRY(reserve(&g->bf[0], &g->cap_bf[0], m * k * 2));
      EXMY_CUDA_TRY(reserve(&g->bf[1], &g->cap_bf[1], n * k * 2));
      EXMY_CUDA_TRY(cudaMemsetAsync(g->flag, 0, sizeof(int), s));
      k_to_bf16_checked<<<grid_for(m * k), 256, 0, s>>>(ta, (__nv_bfloat16 *)g->bf[0], m * k,
                                                         g->flag);
      k_to_bf16_checked<<<grid_for(n * k), 256, 0, s>>>(tb, (__nv_bfloat16 *)g->bf[1], n * k,
                                                         g->flag);
      EXMY_CUDA_TRY(cudaGetLastError());
      int inexact = 1;
      EXMY_CUDA_TRY(cudaMemcpyAsync(&inexact, g->flag, sizeof inexact, cudaMemcpyDeviceToHost, s));
      EXMY_CUDA_TRY(cudaStreamSynchronize(s));
      if (!inexact) path = EXMY_CUDA_GEMM_BF16;
    }
  }
  if (used) *used = path;
  if (m && n) {
    BLAS_TRY(cublasSetStream(g->blas, s));
    /* column-major: C^T (n x m, ld ldc) = (op(B)^T as k x n)^T . (op(A)^T as k x m) */
    const int M = (int)n, N = (int)m, K = (int)k, LDC = (int)ldc;
    if (k == 0) {
      /* C = beta . C (beta == 0: C = 0, not read), as the CPU */
      if (beta == 0.0f) {
        EXMY_CUDA_TRY(cudaMemset2DAsync(c, ldc * 4, 0, n * 4, m, s));
      } else {
        const float zero = 0.0f;
        BLAS_TRY(cublasSgeam(g->blas, CUBLAS_OP_N, CUBLAS_OP_N, M, N, &beta, c, LDC, &zero, c,
                             LDC, c, LDC));
      }
    } else if (path == EXMY_CUDA_GEMM_BF16) {
      BLAS_TRY(cublasGemmEx(g->blas, CUBLAS_OP_T, CUBLAS_OP_N, M, N, K, &alpha, g->bf[1],
                            CUDA_R_16BF, K, g->bf[0], CUDA_R_16BF, K, &beta, c, CUDA_R_32F, LDC,
                            CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    } else {
      BLAS_TRY(cublasGemmEx(g->blas, CUBLAS_OP_T, CUBLAS_OP_N, M, N, K, &alpha, tb, CUDA_R_32F,
                            K, ta, CUDA_R_32F, K, &beta, c, CUDA_R_32F, LDC,
                            CUBLAS_COMPUTE_32F_PEDANTIC, CUBLAS_GEMM_DEFAULT));
    }
  }
  return quantize_result(g, qc, c, m, n, ldc, s);
}

/* ---- exmy_cuda_qgemm_accum: exmy_qgemm_accum on the GPU ---- */
namespace {

/* One thread per element (i, j) of C (grid-stride, j fastest): the model's
 * dot product of row i of op(A) (ta, m x k) and row j of op(B)^T (tb, n x k),
 * then cpu/qgemm.c's epilogue with its roundings spelled out (the CPU is
 * built -ffp-contract=off: no fused multiply-add).  scale_a / scale_b
 * (device, or NULL): the operand's emin follows that power-of-two scale. */
__global__ void k_accum_gemm(exmy_accum_model model, size_t m, size_t n, int k, float alpha,
                             const float *__restrict__ ta, const float *__restrict__ tb,
                             float beta, float *__restrict__ c, size_t ldc,
                             const float *scale_a, const float *scale_b,
                             exmy_accum_scales blocks_a, exmy_accum_scales blocks_b) {
  /* ta: op(A) as m x k, tb: op(B)^T as n x k, both K-contiguous */
  accum_gemm_outputs(model, false, true, m, n, k, alpha, ta, k, tb, k, beta, c, ldc, scale_a,
                     scale_b, blocks_a, blocks_b);
}

/* A block-scaled operand (exmy_accum_block_scaled) of exmy_cuda_qgemm_accum:
 * t (rows x cols, K contiguous) quantized in place, its codes into *codes
 * (g->bcodes[i]) and its block scales described by *s (g->bscales[i]), as
 * cpu/qgemm.c lays them out. */
cudaError_t quantize_codes(exmy_cuda_gemm *g, int i, const exmy_cuda_operand_quant *q, float *t,
                           size_t rows, size_t cols, cudaStream_t st, float **codes,
                           exmy_accum_scales *s) {
  const size_t gk = (size_t)q->scaling.group;
  const size_t br = q->scaling.block_rows > 1 ? (size_t)q->scaling.block_rows : 1;
  const size_t per_row = (cols + gk - 1) / gk, blocks = ((rows + br - 1) / br) * per_row;
  EXMY_CUDA_TRY(reserve(&g->bcodes[i], &g->cap_bcodes[i], rows * cols * 4));
  EXMY_CUDA_TRY(reserve(&g->bscales[i], &g->cap_bscales[i], blocks * 4));
  *codes = (float *)g->bcodes[i];
  *s = exmy_accum_scales{(const float *)g->bscales[i], (long)per_row, (int)br};
  return exmy_cuda_quantize_group_codes_f32(&q->format, &q->round, &q->scaling, t, t, *codes,
                                            (float *)g->bscales[i], rows, cols, st);
}

/* As exmy_accum_pow2_scaled (lib/accum.c) for a device operand recipe. */
bool pow2_scaled(const exmy_cuda_operand_quant *q) {
  return enabled(q) && exmy_accum_pow2_scaling(&q->scaling);
}

}  // namespace

extern "C" cudaError_t exmy_cuda_qgemm_accum(
    exmy_cuda_gemm *g, bool trans_a, bool trans_b, size_t m, size_t n, size_t k, float alpha,
    const float *a, size_t lda, const exmy_cuda_operand_quant *qa, const float *b, size_t ldb,
    const exmy_cuda_operand_quant *qb, float beta, float *c, size_t ldc,
    const exmy_cuda_operand_quant *qc, const exmy_accum_model *model, cudaStream_t s) {
  return exmy_cuda_qgemm_accum_scaled(g, trans_a, trans_b, m, n, k, alpha, a, lda, qa, nullptr,
                                      b, ldb, qb, nullptr, beta, c, ldc, qc, model, s);
}

extern "C" cudaError_t exmy_cuda_qgemm_accum_scaled(
    exmy_cuda_gemm *g, bool trans_a, bool trans_b, size_t m, size_t n, size_t k, float alpha,
    const float *a, size_t lda, const exmy_cuda_operand_quant *qa, const float *scale_a,
    const float *b, size_t ldb, const exmy_cuda_operand_quant *qb, const float *scale_b,
    float beta, float *c, size_t ldc, const exmy_cuda_operand_quant *qc,
    const exmy_accum_model *model, cudaStream_t s) {
  if (!g || !model || exmy_accum_model_check(model) || ldc < n) return cudaErrorInvalidValue;
  if (lda < (trans_a ? m : k) || ldb < (trans_b ? k : n)) return cudaErrorInvalidValue;
  if ((qa && qa->stats) || (qb && qb->stats) || (qc && qc->stats)) return cudaErrorNotSupported;
  if (m > INT32_MAX || n > INT32_MAX || k > INT32_MAX || ldc > INT32_MAX)
    return cudaErrorInvalidValue;
  if (!m || !n) return cudaSuccess;
  exmy_accum_model local = *model;
  /* an operand quantized here with a pow2 per-tensor scale: its emin
   * follows the scale this call uses (as exmy_qgemm_accum on the CPU) */
  float *qs = NULL;
  if (k && (pow2_scaled(qa) || pow2_scaled(qb))) {
    EXMY_CUDA_TRY(reserve(&g->qscales, &g->cap_qscales, 2 * sizeof(float)));
    qs = (float *)g->qscales;
    if (pow2_scaled(qa)) scale_a = qs, local.emin_a = qa->format.emin;
    if (pow2_scaled(qb)) scale_b = qs + 1, local.emin_b = qb->format.emin;
  }
  /* a block-scaled operand: read as its codes, its emin its format's, its
   * block scales applied at each promotion (as exmy_qgemm_accum on the CPU) */
  const bool block_a = enabled(qa) && exmy_accum_block_scaling(&qa->scaling, model);
  const bool block_b = enabled(qb) && exmy_accum_block_scaling(&qb->scaling, model);
  exmy_accum_scales blocks_a = {}, blocks_b = {};
  const exmy_cuda_operand_quant *qa_rest = block_a ? nullptr : qa, *qb_rest = block_b ? nullptr : qb;
  float *ta = NULL, *tb = NULL;
  if (k) EXMY_CUDA_TRY(prepare_operands(g, trans_a, trans_b, m, n, k, a, lda, qa_rest, b, ldb,
                                        qb_rest, &ta, &tb, s, pow2_scaled(qa) ? qs : NULL,
                                        pow2_scaled(qb) ? qs + 1 : NULL));
  if (k && block_a) {
    EXMY_CUDA_TRY(quantize_codes(g, 0, qa, ta, m, k, s, &ta, &blocks_a));
    local.emin_a = qa->format.emin;
  }
  if (k && block_b) {
    EXMY_CUDA_TRY(quantize_codes(g, 1, qb, tb, n, k, s, &tb, &blocks_b));
    local.emin_b = qb->format.emin;
  }
  k_accum_gemm<<<grid_for(m * n), 256, 0, s>>>(local, m, n, (int)k, alpha, ta, tb, beta, c, ldc,
                                               scale_a, scale_b, blocks_a, blocks_b);
  EXMY_CUDA_TRY(cudaGetLastError());
  return quantize_result(g, qc, c, m, n, ldc, s);
}
