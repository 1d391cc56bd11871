/* Marks small helpers that compile for the host and, under nvcc, the device.
 * EXMY_HD_CONSTEXPR: the same, and under nvcc also usable in constant
 * expressions (formats known at compile time, cuda/kernel_common.cuh). */
#ifndef EXMY_HOSTDEVICE_H
#define EXMY_HOSTDEVICE_H

#ifdef __CUDACC__
#define EXMY_HD static __host__ __device__ __forceinline__
#define EXMY_HD_CONSTEXPR __host__ __device__ constexpr
#else
#define EXMY_HD static inline
#define EXMY_HD_CONSTEXPR static inline
#endif

/* EXMY_HD_BINARY(T, name, device, host): the helper T name(T a, T b) that
 * returns the expression `device` in nvcc's device code and `host` elsewhere
 * (an intrinsic on the GPU, C's operator on the CPU: see lib/scale_core.h). */
#ifdef __CUDA_ARCH__
#define EXMY_HD_BINARY(T, name, device, host) \
  EXMY_HD T name(T a, T b) { return device; }
#else
#define EXMY_HD_BINARY(T, name, device, host) \
  EXMY_HD T name(T a, T b) { return host; }
#endif

#endif /* EXMY_HOSTDEVICE_H */
