/*
 * exmy_qgemm_accum's vector kernels (cpu/accum_vector.c): the accumulation
 * model for eight columns of C at once with AVX-512 or AVX2, bit-identical
 * to exmy_accum_dot.  exmy_qgemm_accum runs the AVX2 kernel where it covers
 * the model, else the scalar products; the AVX-512 kernel only with
 * EXMY_ACCUM_KERNEL = avx512, until its build of the loop text it shares
 * with AVX2 (cpu/accum_slice.h) has passed qgemm_accum_test on an AVX-512
 * CPU (it has been compiled, not yet run).
 *
 * The environment variable EXMY_ACCUM_KERNEL = avx512 | avx2 | scalar, read
 * at the first call, makes the kernels before the one it names (in that
 * order) cover nothing for the whole process (said on stderr): for
 * benchmarks and tests that compare the paths in one binary.
 */
#ifndef EXMY_CPU_ACCUM_VECTOR_H
#define EXMY_CPU_ACCUM_VECTOR_H

#include <stdbool.h>
#include <stddef.h>

#include "lib/accum_core.h"

/* Whether a kernel computes model m on this CPU: truncation, alignment by
 * the inputs' exponents (the H100's model), AVX-512 F or AVX2, the kernel
 * enabled. */
bool exmy_accum_avx512_covers(const exmy_accum_model *m);
bool exmy_accum_avx2_covers(const exmy_accum_model *m);

/* "avx512", "avx2" or "scalar": what exmy_qgemm_accum runs for m. */
const char *exmy_accum_kernel_name(const exmy_accum_model *m);

/* C = alpha op(A) op(B) + beta C (rows x cols, K = k; beta = 0: C is only
 * written) under model m, as exmy_qgemm_accum's scalar products give it, by
 * the kernel exmy_accum_kernel_name names; -1 and C unchanged if that is
 * "scalar" or memory ran out.  sa / sb (or NULL): block scales of op(A)'s
 * rows and op(B)'s columns, op(A) and op(B) then holding codes
 * (exmy_accum_dot_scaled). */
int exmy_accum_vector_gemm(const exmy_accum_model *m, bool ta, bool tb, size_t rows,
                           size_t cols, size_t k, float alpha, const float *a, size_t lda,
                           const exmy_accum_scales *sa, const float *b, size_t ldb,
                           const exmy_accum_scales *sb, float beta, float *c, size_t ldc);

/* The scalar products for every model (false) or the kernel where it covers
 * the model (true, the default): for tests and benchmarks.  With the AVX-512
 * kernel off, a CPU with AVX-512 runs the AVX2 one. */
void exmy_accum_avx512_enable(bool on);
void exmy_accum_avx2_enable(bool on);

#endif
