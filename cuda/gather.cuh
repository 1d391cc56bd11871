/*
 * Gathering an operand K-contiguous (op(A) as m x k, op(B)^T as n x k), the
 * layout the recipe kernels quantize along: shared by exmy_cuda_qgemm and the
 * trainer's MX statistics (experiments/gpu/gemm.cu).  Grid-stride kernels of
 * 256 threads; grid_for caps the grid for huge tensors.
 */
#ifndef EXMY_CUDA_GATHER_CUH
#define EXMY_CUDA_GATHER_CUH

#include <stddef.h>

namespace exmy_cuda {

static inline unsigned grid_for(size_t n) {
  size_t b = (n + 255) / 256;
  if (b > 65535u * 8) b = 65535u * 8;
  return (unsigned)(b ? b : 1);
}

/* dst (rows x cols, dense) = src or its transpose (src with leading
 * dimension ld), as cpu/qgemm.c's gather. */
static __global__ void k_gather(const float *__restrict__ src, size_t ld, bool transpose,
                                size_t rows, size_t cols, float *__restrict__ dst) {
  const size_t total = rows * cols;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
       i += (size_t)gridDim.x * blockDim.x) {
    const size_t r = i / cols, c = i % cols;
    dst[i] = transpose ? src[c * ld + r] : src[r * ld + c];
  }
}

}  // namespace exmy_cuda

#endif
