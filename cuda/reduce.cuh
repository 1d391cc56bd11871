/*
 * The reductions that scaled.cu and group.cu share: a tensor's finite amax,
 * the statistics' sums (lib/stats_core.h) reduced in a fixed tree, and the
 * per-stream scratch their intermediate results live in.
 */
#ifndef EXMY_CUDA_REDUCE_CUH
#define EXMY_CUDA_REDUCE_CUH

#include <math.h>

#include "cuda/kernel_common.cuh"

namespace exmy_cuda {

constexpr int kStatThreads = 256;

/* A device buffer of at least `bytes` for work enqueued on `stream`, owned by
 * the library: one per stream (by cudaStreamGetId) and device, kept between
 * calls and grown (stream-ordered) when a call needs more, so that the hot
 * path allocates nothing.  The next call on the same stream reuses it, which
 * is safe because it runs after this call's work in stream order; two host
 * threads that enqueue onto one stream at once must take turns, as for any
 * shared state.  While the stream is being captured into a CUDA graph the
 * buffer cannot grow (cudaErrorStreamCaptureUnsupported): run the call once
 * before capturing it.  Internal: not exported from libexmy_cuda.so. */
__attribute__((visibility("hidden"))) cudaError_t stream_scratch(cudaStream_t stream,
                                                                 size_t bytes, void **out);

/* Reduces the block's accumulators into thread 0's, in a fixed order
 * (THREADS = blockDim.x, a power of two). */
template <int THREADS>
__device__ void stats_block_reduce(exmy_stats_sums &a) {
  __shared__ exmy_stats_sums sh[THREADS];
  sh[threadIdx.x] = a;
  __syncthreads();
  for (int s = THREADS / 2; s > 0; s >>= 1) {
    if ((int)threadIdx.x < s) exmy_stats_sums_merge(&sh[threadIdx.x], &sh[threadIdx.x + s]);
    __syncthreads();
  }
  a = sh[0];
}

/* The merge of the block partials and exmy_stats_sums_finish. */
static __global__ void __launch_bounds__(kStatThreads)
    k_stats_finish(const exmy_stats_sums *partial, int nparts, exmy_tensor_stats *s) {
  exmy_stats_sums a;
  exmy_stats_sums_init(&a);
  for (int i = threadIdx.x; i < nparts; i += kStatThreads) exmy_stats_sums_merge(&a, &partial[i]);
  stats_block_reduce<kStatThreads>(a);
  if (threadIdx.x != 0) return;
  exmy_stats_sums_finish(&a, s);
  s->scale = 1.0;
  s->delayed_over_current = NAN;
}

static __global__ void k_stats_nan_scale(exmy_tensor_stats *st) {
  st->scale = NAN; /* one scale per block */
}

/* How many block partials a statistics pass reduces: a fixed number per
 * device, so that its sums are the same at every call. */
static inline int stat_blocks() {
  int sms = 132;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  return sms * 4;
}

/* Finite max |x| as float bits: non-negative floats order like their bits. */
static __global__ void __launch_bounds__(256)
    k_amax(const float *x, size_t n, unsigned int *amax_bits) {
  float m = 0.0f;
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
    fold_finite_amax(x[i], m);
  for (int d = 16; d > 0; d >>= 1) m = fmaxf(m, __shfl_xor_sync(0xFFFFFFFFu, m, d));
  if ((threadIdx.x & 31) == 0 && m > 0.0f) atomicMax(amax_bits, __float_as_uint(m));
}

/* *amax_bits = max(*amax_bits, finite |x| of x[0..n)). */
static inline void launch_amax(const float *x, size_t n, unsigned int *amax_bits,
                               cudaStream_t stream) {
  int sms = 132;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  const size_t want = blocks_for(n, 256);
  k_amax<<<(unsigned)(want < (size_t)sms * 8 ? want : (size_t)sms * 8), 256, 0, stream>>>(
      x, n, amax_bits);
}

}  // namespace exmy_cuda

#endif
