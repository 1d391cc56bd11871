/* The statistics' accumulator on the host: lib/stats_core.h's sums with the
 * limits of the format they judge by, one per block of the tensor, merged in
 * block order at the end (the same sums for any number of threads). */
#ifndef EXMY_CPU_STATS_ACC_H
#define EXMY_CPU_STATS_ACC_H

#include "lib/exmy.h"
#include "lib/stats_core.h"

typedef struct {
  exmy_stats_sums sums;
  float fmax, fmin_normal; /* of the format */
} exmy_stats_acc;

static inline void exmy_stats_acc_init(exmy_stats_acc *a, const exmy_format *f) {
  exmy_format_info info;
  exmy_format_get_info(f, &info);
  exmy_stats_sums_init(&a->sums);
  a->fmax = info.max;
  a->fmin_normal = info.min_normal;
}

/* x the input, xs = x·s, q = Q(xs), y the dequantized output. */
static inline void exmy_stats_acc_add(exmy_stats_acc *a, float x, float xs,
                                      float q, float y) {
  exmy_stats_sums_add(&a->sums, a->fmax, a->fmin_normal, x, xs, q, y);
}

#endif
