/* Per-tensor statistics of a quantization (see exmy_tensor_stats). */
#include <math.h>
#include <stdlib.h>

#include "cpu/stats_acc.h"
#include "lib/exmy.h"

void exmy_stats_acc_finish(const exmy_stats_acc *a, exmy_tensor_stats *s) {
  const double n = a->n ? (double)a->n : 1.0;
  s->n = a->n;
  s->amax = a->amax;
  s->min_nonzero = isinf(a->min_nonzero) ? 0.0 : a->min_nonzero;
  s->underflow_ratio = a->under / n;
  s->subnormal_ratio = a->sub / n;
  s->overflow_ratio = a->over / n;
  s->mse = a->finite_pairs ? a->see / a->finite_pairs : 0.0;
  s->rel_l2 = a->sxx > 0 ? sqrt(a->see / a->sxx) : (a->see > 0 ? INFINITY : 0.0);
  if (a->sxx > 0 && a->syy > 0)
    s->cosine = a->sxy / (sqrt(a->sxx) * sqrt(a->syy));
  else
    s->cosine = (a->sxx == 0 && a->syy == 0) ? 1.0 : 0.0;
  s->sqnr_db = a->see > 0 ? 10.0 * log10(a->sxx / a->see) : INFINITY;
}

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
    if (!part) exmy_stats_acc_merge(&total, &one);
  }
  for (size_t c = 0; part && c < nchunks; c++) exmy_stats_acc_merge(&total, &part[c]);
  free(part);
  exmy_stats_acc_finish(&total, stats);
  stats->scale = 1.0;
  stats->delayed_over_current = NAN;
}
