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

#endif
