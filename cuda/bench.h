/* What the two files of the GPU benchmark share: the checked CUDA call, the
 * median timer, and the GEMM lines of cuda/gemm_bench.cu (plain cuBLAS bf16
 * as the reference, the emulated E4M3 GEMM on the bf16 path with operand
 * quantization included, the hardware FP8 path, and the FP32 path). */
#ifndef EXMY_CUDA_BENCH_H
#define EXMY_CUDA_BENCH_H

#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#include <algorithm>
#include <functional>
#include <vector>

#define CK(call)                                                                  \
  do {                                                                            \
    cudaError_t err_ = (call);                                                    \
    if (err_ != cudaSuccess) {                                                    \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #call,                \
              cudaGetErrorString(err_));                                          \
      exit(1);                                                                    \
    }                                                                             \
  } while (0)

/* Median milliseconds of op over `reps` runs, after two warm-ups. */
static inline double median_ms(int reps, const std::function<void()> &op) {
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  op();
  op();
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  std::vector<float> t;
  for (int r = 0; r < reps; r++) {
    CK(cudaEventRecord(a));
    op();
    CK(cudaEventRecord(b));
    CK(cudaEventSynchronize(b));
    float ms;
    CK(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms);
  }
  CK(cudaGetLastError());
  std::sort(t.begin(), t.end());
  CK(cudaEventDestroy(a));
  CK(cudaEventDestroy(b));
  return t[t.size() / 2];
}

void gemm_bench(int reps);

#endif /* EXMY_CUDA_BENCH_H */
