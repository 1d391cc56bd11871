/*
 * Gathering an operand K-contiguous (op(A) as m x k, op(B)^T as n x k), the
 * layout the recipe kernels quantize along: shared by exmy_cuda_qgemm and the
 * trainer's MX statistics (experiments/gpu/gemm.cu).  Grid-stride kernels of
 * 256 threads (transposes also tiled: launch_gather); grid_for caps the grid
 * for huge tensors.
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

/* k_gather's transpose through 32 x 32 tiles in shared memory, so that both
 * the reads of src and the writes of dst are coalesced: dst (rows x cols,
 * dense) = the transpose of src (cols x rows, leading dimension ld).  Grid
 * ((rows + 31) / 32, (cols + 31) / 32), blocks of 32 x 8. */
static __global__ void k_gather_transposed(const float *__restrict__ src, size_t ld, size_t rows,
                                           size_t cols, float *__restrict__ dst) {
  __shared__ float tile[32][33];
  const size_t r0 = (size_t)blockIdx.x * 32, c0 = (size_t)blockIdx.y * 32;
  for (unsigned j = threadIdx.y; j < 32; j += 8) {
    const size_t c = c0 + j, r = r0 + threadIdx.x;
    if (c < cols && r < rows) tile[j][threadIdx.x] = src[c * ld + r];
  }
  __syncthreads();
  for (unsigned j = threadIdx.y; j < 32; j += 8) {
    const size_t r = r0 + j, c = c0 + threadIdx.x;
    if (r < rows && c < cols) dst[r * cols + c] = tile[threadIdx.x][j];
  }
}

/* dst = src or its transpose, as k_gather computes it, transposes tiled. */
static inline void launch_gather(const float *src, size_t ld, bool transpose, size_t rows,
                                 size_t cols, float *dst, cudaStream_t stream) {
  const size_t col_tiles = (cols + 31) / 32;
  if (transpose && col_tiles <= 65535)
    k_gather_transposed<<<dim3((unsigned)((rows + 31) / 32), (unsigned)col_tiles), dim3(32, 8), 0,
                          stream>>>(src, ld, rows, cols, dst);
  else
    k_gather<<<grid_for(rows * cols), 256, 0, stream>>>(src, ld, transpose, rows, cols, dst);
}

}  // namespace exmy_cuda

#endif
