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

#endif /* EXMY_HOSTDEVICE_H */
