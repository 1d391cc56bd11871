/* Helpers of the GPU tests: checked CUDA calls, device buffers, and the
 * structured float32 input set every conversion test runs on. */
#ifndef EXMY_TESTS_CUDA_GPU_CHECK_H
#define EXMY_TESTS_CUDA_GPU_CHECK_H

#include <check.h>
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define CU(call)                                                         \
  do {                                                                   \
    cudaError_t err_ = (call);                                           \
    ck_assert_msg(err_ == cudaSuccess, "%s: %s", #call,                  \
                  cudaGetErrorString(err_));                             \
  } while (0)

static inline void *dev_alloc(size_t bytes) {
  void *p = NULL;
  CU(cudaMalloc(&p, bytes ? bytes : 1));
  return p;
}

static inline void *dev_from(const void *host, size_t bytes) {
  void *p = dev_alloc(bytes);
  CU(cudaMemcpy(p, host, bytes, cudaMemcpyHostToDevice));
  return p;
}

static inline void to_host(void *host, const void *dev, size_t bytes) {
  CU(cudaDeviceSynchronize());
  CU(cudaMemcpy(host, dev, bytes, cudaMemcpyDeviceToHost));
}

/* The finite max |x| as float bits: what an amax pass (cuda/reduce.cuh's
 * k_amax) leaves in a word that starts at 0. */
static inline unsigned finite_amax_bits(const float *x, size_t n) {
  float m = 0.0f;
  for (size_t i = 0; i < n; i++) {
    const float a = fabsf(x[i]);
    if (a > m && a <= 3.40282347e38f) m = a;
  }
  unsigned b;
  memcpy(&b, &m, sizeof b);
  return b;
}

/* to_host, then frees the device buffer: a result read back once. */
static inline void to_host_free(void *host, void *dev, size_t bytes) {
  to_host(host, dev, bytes);
  CU(cudaFree(dev));
}

static inline uint32_t splitmix32(uint64_t *s) {
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return (uint32_t)((z ^ (z >> 31)) >> 32);
}

/* Every sign and exponent (subnormals, inf and NaN included) with every top-7
 * mantissa pattern, each followed by low-bit patterns that make exact values,
 * midpoints of any format with M <= 22 and their float32 neighbours
 * (0, 1, all ones, 2^p, 2^p - 1, 2^p + 1 for p < 16), then `random` random
 * bit patterns.  Returns the count; *out is malloc'ed. */
static inline size_t structured_inputs(size_t random, uint32_t **out) {
  uint32_t low[3 + 3 * 16];
  size_t nl = 0;
  low[nl++] = 0;
  low[nl++] = 1;
  low[nl++] = 0xFFFF;
  for (int p = 0; p < 16; p++) {
    low[nl++] = 1u << p;
    low[nl++] = (1u << p) - 1;
    low[nl++] = ((1u << p) + 1) & 0xFFFF;
  }
  size_t n = 2 * 256 * 128 * nl + random;
  uint32_t *v = malloc(n * sizeof *v);
  size_t k = 0;
  for (uint32_t s = 0; s < 2; s++)
    for (uint32_t e = 0; e < 256; e++)
      for (uint32_t t = 0; t < 128; t++)
        for (size_t l = 0; l < nl; l++) {
          /* low patterns also spread over bits 16..22 through t's low bits */
          uint32_t m = (t << 16) | low[l];
          v[k++] = s << 31 | e << 23 | (m & 0x7FFFFF);
        }
  uint64_t seed = 12345;
  for (size_t i = 0; i < random; i++) v[k++] = splitmix32(&seed);
  *out = v;
  return n;
}

#endif
