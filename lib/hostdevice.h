/* Marks small helpers that compile for the host and, under nvcc, the device. */
#ifndef EXMY_HOSTDEVICE_H
#define EXMY_HOSTDEVICE_H

#ifdef __CUDACC__
#define EXMY_HD static __host__ __device__ __forceinline__
#else
#define EXMY_HD static inline
#endif

#endif /* EXMY_HOSTDEVICE_H */
