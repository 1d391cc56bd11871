/* Running sums behind exmy_tensor_stats: one accumulator per block of the
 * tensor, merged in block order at the end (the same sums for any number of
 * threads), so a statistic costs no extra pass over memory. */
#ifndef EXMY_CPU_STATS_ACC_H
#define EXMY_CPU_STATS_ACC_H

#include <math.h>
#include <stddef.h>

#include "lib/exmy.h"

typedef struct {
  size_t n, under, sub, over, finite_pairs;
  double amax, min_nonzero; /* min_nonzero = INFINITY until one is seen */
  double sxx, syy, sxy, see;
  float fmax, fmin_normal;  /* of the format */
} exmy_stats_acc;

static inline void exmy_stats_acc_init(exmy_stats_acc *a, const exmy_format *f) {
  exmy_format_info info;
  exmy_format_get_info(f, &info);
  *a = (exmy_stats_acc){0};
  a->min_nonzero = INFINITY;
  a->fmax = info.max;
  a->fmin_normal = info.min_normal;
}

/* One element: x the input, xs = x·s the scaled input, q = Q(xs) its rounded
 * image, y = the dequantized output. */
static inline void exmy_stats_acc_add(exmy_stats_acc *a, float x, float xs,
                                      float q, float y) {
  a->n++;
  float ax = fabsf(x), axs = fabsf(xs), aq = fabsf(q);
  if (isfinite(x)) {
    if (ax > a->amax) a->amax = ax;
    if (ax != 0 && ax < a->min_nonzero) a->min_nonzero = ax;
  }
  if (isfinite(xs)) {
    if (xs != 0 && q == 0) a->under++;
    if (axs > a->fmax || !isfinite(q)) a->over++;
  }
  if (aq > 0 && aq < a->fmin_normal) a->sub++;
  if (isfinite(x) && isfinite(y)) {
    double dx = x, dy = y, e = dx - dy;
    a->finite_pairs++;
    a->sxx += dx * dx;
    a->syy += dy * dy;
    a->sxy += dx * dy;
    a->see += e * e;
  }
}

static inline void exmy_stats_acc_merge(exmy_stats_acc *a, const exmy_stats_acc *b) {
  a->n += b->n;
  a->under += b->under;
  a->sub += b->sub;
  a->over += b->over;
  a->finite_pairs += b->finite_pairs;
  if (b->amax > a->amax) a->amax = b->amax;
  if (b->min_nonzero < a->min_nonzero) a->min_nonzero = b->min_nonzero;
  a->sxx += b->sxx;
  a->syy += b->syy;
  a->sxy += b->sxy;
  a->see += b->see;
}

/* Fills the derived numbers; scale and delayed_over_current are the caller's. */
void exmy_stats_acc_finish(const exmy_stats_acc *a, exmy_tensor_stats *s);

#endif
