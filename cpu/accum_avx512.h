/*
 * exmy_qgemm_accum's AVX-512 kernel (cpu/accum_avx512.c): the accumulation
 * model for eight columns of C at once, bit-identical to exmy_accum_dot.
 */
#ifndef EXMY_CPU_ACCUM_AVX512_H
#define EXMY_CPU_ACCUM_AVX512_H

#include <stdbool.h>
#include <stddef.h>

#include "lib/accum_core.h"

/* Whether the kernel computes model m on this CPU: truncation, alignment by
 * the inputs' exponents (the H100's model), AVX-512 F. */
bool exmy_accum_avx512_covers(const exmy_accum_model *m);

/* C = alpha op(A) op(B) + beta C (rows x cols, K = k; beta = 0: C is only
 * written) under model m, as exmy_qgemm_accum's scalar products give it;
 * -1 and C unchanged if the kernel does not cover m or memory ran out. */
int exmy_accum_avx512_gemm(const exmy_accum_model *m, bool ta, bool tb, size_t rows,
                           size_t cols, size_t k, float alpha, const float *a, size_t lda,
                           const float *b, size_t ldb, float beta, float *c, size_t ldc);

/* The scalar products for every model (false) or this kernel where it
 * covers the model (true, the default): for tests and benchmarks. */
void exmy_accum_avx512_enable(bool on);

#endif
