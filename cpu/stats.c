/* Per-tensor statistics of a quantization (see exmy_tensor_stats). */
#include <math.h>

#include "cpu/stats_acc.h"
#include "lib/exmy.h"

void exmy_tensor_stats_f32(const exmy_format *f, const float *x,
                           const float *y, size_t n, exmy_tensor_stats *stats) {
  exmy_stats_acc total;
  exmy_stats_acc_init(&total, f);
#pragma omp parallel if (n > 65536)
  {
    exmy_stats_acc acc;
    exmy_stats_acc_init(&acc, f);
#pragma omp for schedule(static) nowait
    for (size_t i = 0; i < n; i++) exmy_stats_acc_add(&acc, x[i], x[i], y[i], y[i]);
#pragma omp critical
    exmy_stats_sums_merge(&total.sums, &acc.sums);
  }
  exmy_stats_sums_finish(&total.sums, stats);
  stats->scale = 1.0;
  stats->delayed_over_current = NAN;
}
