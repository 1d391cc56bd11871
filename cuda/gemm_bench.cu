/* The GEMM lines of the benchmark (see cuda/bench.h). */
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/bench.h"
#include "cuda/exmy_cuda.h"
#include "lib/philox.h"

__global__ void k_fill_gemm(float *x, size_t n, uint64_t seed) {
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    uint32_t w[4];
    exmy_sr_block(seed, i, w);
    x[i] = ((float)(w[0] >> 8) * (1.0f / 16777216.0f) - 0.5f) * 4.0f;
  }
}

__global__ void k_to_bf16(const float *x, __nv_bfloat16 *y, size_t n) {
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
    y[i] = __float2bfloat16_rn(x[i]);
}

/* max |a - b| / max |b| over n */
__global__ void k_maxdiff(const float *a, const float *b, size_t n, unsigned *out) {
  float d = 0, m = 0;
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    d = fmaxf(d, fabsf(a[i] - b[i]));
    m = fmaxf(m, fabsf(b[i]));
  }
  atomicMax(out, __float_as_uint(d));
  atomicMax(out + 1, __float_as_uint(m));
}

static double rel_diff(const float *a, const float *b, size_t n) {
  unsigned *d, h[2];
  CK(cudaMalloc(&d, 8));
  CK(cudaMemset(d, 0, 8));
  k_maxdiff<<<1024, 256>>>(a, b, n, d);
  CK(cudaMemcpy(h, d, 8, cudaMemcpyDeviceToHost));
  CK(cudaFree(d));
  float x, y;
  memcpy(&x, &h[0], 4);
  memcpy(&y, &h[1], 4);
  return y > 0 ? x / y : x;
}

void gemm_bench(int reps) {
  const size_t S = 8192, m = S, n = S, k = S;
  const double flop = 2.0 * m * n * k;
  float *a, *bt, *c, *c2;
  __nv_bfloat16 *ab, *bb;
  CK(cudaMalloc(&a, m * k * 4));
  CK(cudaMalloc(&bt, n * k * 4));
  CK(cudaMalloc(&c, m * n * 4));
  CK(cudaMalloc(&c2, m * n * 4));
  CK(cudaMalloc(&ab, m * k * 2));
  CK(cudaMalloc(&bb, n * k * 2));
  k_fill_gemm<<<4096, 256>>>(a, m * k, 1);
  k_fill_gemm<<<4096, 256>>>(bt, n * k, 2);
  k_to_bf16<<<4096, 256>>>(a, ab, m * k);
  k_to_bf16<<<4096, 256>>>(bt, bb, n * k);
  CK(cudaDeviceSynchronize());
  cublasHandle_t h;
  cublasCreate(&h);
  const float one = 1.0f, zero = 0.0f;
  printf("\n%-34s %9s %9s %8s  %s\n", "gemm 8192^3 (C = A Bt^T)", "ms", "TFLOP/s", "x bf16", "note");
  const double ref = median_ms(reps, [&] {
    cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, (int)n, (int)m, (int)k, &one, bb, CUDA_R_16BF,
                 (int)k, ab, CUDA_R_16BF, (int)k, &zero, c, CUDA_R_32F, (int)n, CUBLAS_COMPUTE_32F,
                 CUBLAS_GEMM_DEFAULT);
  });
  const double ref_tf = flop / (ref * 1e9);
  printf("%-34s %9.3f %9.1f %8.3f  %s\n", "cuBLAS bf16 (reference)", ref, ref_tf, 1.0,
         "bf16 in, fp32 out and accumulate");
  exmy_cuda_gemm *g = exmy_cuda_gemm_new();
  if (!g) {
    printf("exmy_cuda_gemm_new failed\n");
    return;
  }
  exmy_format e4m3, e5m2, fp16;
  exmy_format_parse("float8_e4m3fn", &e4m3);
  exmy_format_parse("float8_e5m2", &e5m2);
  exmy_format_parse("float16", &fp16);
  struct Case { const char *name; const exmy_format *fa, *fb; exmy_cuda_gemm_path path; const char *note; };
  const Case cases[] = {
      {"emulated e4m3 x e4m3, bf16 path", &e4m3, &e4m3, EXMY_CUDA_GEMM_BF16, "quantization included; target >= 0.8"},
      {"hardware fp8 e4m3 x e4m3", &e4m3, &e4m3, EXMY_CUDA_GEMM_FP8, "our encode + cublasLt FP8"},
      {"hardware fp8 e4m3 x e5m2", &e4m3, &e5m2, EXMY_CUDA_GEMM_FP8, "our encode + cublasLt FP8"},
      {"emulated fp16 x fp16, fp32 path", &fp16, &fp16, EXMY_CUDA_GEMM_FP32, "M = 10 > 7: SGEMM, no TF32"},
  };
  for (const Case &cs : cases) {
    cudaError_t err = exmy_cuda_qgemm_nt(g, cs.path, m, n, k, a, cs.fa, NULL, bt, cs.fb, NULL, c,
                                         NULL, 0);
    if (err != cudaSuccess) {
      printf("%-34s failed: %s\n", cs.name, cudaGetErrorString(err));
      continue;
    }
    const double ms = median_ms(cs.path == EXMY_CUDA_GEMM_FP32 ? 3 : reps, [&] {
      exmy_cuda_qgemm_nt(g, cs.path, m, n, k, a, cs.fa, NULL, bt, cs.fb, NULL, c, NULL, 0);
    });
    printf("%-34s %9.3f %9.1f %8.3f  %s\n", cs.name, ms, flop / (ms * 1e9), ref / ms, cs.note);
  }
  /* emulated vs hardware on the same operands: accumulation order only */
  CK(exmy_cuda_qgemm_nt(g, EXMY_CUDA_GEMM_BF16, m, n, k, a, &e4m3, NULL, bt, &e4m3, NULL, c, NULL, 0));
  if (exmy_cuda_qgemm_nt(g, EXMY_CUDA_GEMM_FP8, m, n, k, a, &e4m3, NULL, bt, &e4m3, NULL, c2, NULL, 0) ==
      cudaSuccess)
    printf("e4m3: max |bf16 path - fp8 path| / max |C| = %.3g (accumulation order only)\n",
           rel_diff(c, c2, m * n));
  CK(exmy_cuda_qgemm_nt(g, EXMY_CUDA_GEMM_FP32, m, n, k, a, &e4m3, NULL, bt, &e4m3, NULL, c2, NULL, 0));
  printf("e4m3: max |bf16 path - fp32 path| / max |C| = %.3g (accumulation order only)\n",
         rel_diff(c, c2, m * n));
  exmy_cuda_gemm_free(g);
  cublasDestroy(h);
  cudaFree(a); cudaFree(bt); cudaFree(c); cudaFree(c2); cudaFree(ab); cudaFree(bb);
}
