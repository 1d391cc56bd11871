/* Per-tensor statistics of a quantization (see exmy_tensor_stats). */
#include <math.h>
#include <stdlib.h>

#include "cpu/stats_acc.h"
#include "cpu/exmy_cpu.h"

/* Chunks of STATS_CHUNK elements, each summed into its own accumulator, merged
 * in chunk order: the same statistics for any number of threads. */
enum { STATS_CHUNK = 4096 };

void exmy_tensor_stats_f32(const exmy_format *f, const float *x,
                           const float *y, size_t n, exmy_tensor_stats *stats) {
  exmy_stats_acc total;
  exmy_stats_acc_init(&total, f);
  const size_t nchunks = (n + STATS_CHUNK - 1) / STATS_CHUNK;
  exmy_stats_acc *part = nchunks ? malloc(nchunks * sizeof *part) : NULL;
#pragma omp parallel for schedule(static) if (n > 65536 && part)
  for (size_t c = 0; c < nchunks; c++) {
    exmy_stats_acc one, *acc = part ? &part[c] : &one;
    exmy_stats_acc_init(acc, f);
    const size_t end = (c + 1) * STATS_CHUNK < n ? (c + 1) * STATS_CHUNK : n;
    for (size_t i = c * STATS_CHUNK; i < end; i++) exmy_stats_acc_add(acc, x[i], x[i], y[i], y[i]);
    if (!part) exmy_stats_sums_merge(&total.sums, &one.sums);
  }
  for (size_t c = 0; part && c < nchunks; c++) exmy_stats_sums_merge(&total.sums, &part[c].sums);
  free(part);
  exmy_stats_sums_finish(&total.sums, stats);
  stats->scale = 1.0;
  stats->delayed_over_current = NAN;
}
