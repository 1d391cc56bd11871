/*
 * Which loop exmy_sgemm (cpu/gemm.c) runs, open to the tests and the
 * benchmarks.  All of them compute the same bits (see exmy_sgemm in
 * cpu/exmy_cpu.h); they differ in speed and in the instructions they need.
 *
 * The environment variable EXMY_SGEMM_KERNEL = avx512 | avx2 | scalar, read
 * at the first call, picks one for a whole process (the trainer's golden-loss
 * test runs each); a choice the CPU cannot run, or an unknown name, is
 * reported on stderr and the best kernel runs instead.
 */
#ifndef EXMY_CPU_GEMM_DISPATCH_H
#define EXMY_CPU_GEMM_DISPATCH_H

typedef enum {
  EXMY_SGEMM_SCALAR = 0, /* fmaf() element by element: any CPU */
  EXMY_SGEMM_AVX2 = 1,   /* 8 lanes: AVX2 + FMA (x86-64-v3) */
  EXMY_SGEMM_AVX512 = 2, /* 16 lanes: AVX-512 F */
  EXMY_SGEMM_KERNELS
} exmy_sgemm_kernel;

/* "scalar", "avx2", "avx512". */
const char *exmy_sgemm_kernel_name(exmy_sgemm_kernel k);

/* 1 if this CPU can run k. */
int exmy_sgemm_kernel_usable(exmy_sgemm_kernel k);

/* The kernel the next exmy_sgemm calls run. */
exmy_sgemm_kernel exmy_sgemm_current_kernel(void);

/* Makes k the kernel of the following calls (not while one runs); -1 and no
 * change if the CPU cannot run it. */
int exmy_sgemm_use_kernel(exmy_sgemm_kernel k);

#endif
