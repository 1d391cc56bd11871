/* The GEMM lines of cuda/bench: plain cuBLAS bf16 as the reference, the
 * emulated E4M3 GEMM on the bf16 path (operand quantization included), the
 * hardware FP8 path, and the FP32 path. */
#ifndef EXMY_CUDA_GEMM_BENCH_H
#define EXMY_CUDA_GEMM_BENCH_H

void gemm_bench(int reps);

#endif
