/* An independent reference for lib/accum_core.h's accumulation model: the
 * same model (documented there) computed in a wide fixed-point integer
 * (two's complement, weights 2^-512 .. 2^511) where every sum is exact and
 * every truncation or rounding is done bit by bit on the magnitude, and
 * split-K slices are added with float32 additions.  Shares
 * no code with the core but the model's struct. */
#ifndef EXMY_TESTS_ACCUM_ORACLE_H
#define EXMY_TESTS_ACCUM_ORACLE_H

#include "lib/accum_core.h"

/* The model's dot product (group >= 1; finite operands). */
float oracle_accum_dot(const exmy_accum_model *m, const float *a, long stride_a,
                       const float *b, long stride_b, int k);

/* The exact sum of each block of promote_every products (all of K if 0),
 * added to a float32 accumulator from +0 with one rounding to nearest even
 * per block. */
float oracle_exact_dot(int promote_every, const float *a, long stride_a, const float *b,
                       long stride_b, int k);

/* The block-scaled model (exmy_accum_dot_scaled: codes a, b, a scale per
 * block of promote_every products, sa or sb NULL for scales of 1), written
 * apart: each block's partial sum is the model above on that block alone
 * (promote_every 0, rounded to float32 at its end), and its promotion
 * rounds the exact product sa·sb to float32, then the exact acc + that ·
 * partial to float32 once.  K slices as above. */
float oracle_scaled_dot(const exmy_accum_model *m, const float *a, long stride_a,
                        const float *sa, const float *b, long stride_b, const float *sb, int k);

#endif
