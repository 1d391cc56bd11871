/*
 * The running sums behind exmy_tensor_stats, written once for the host
 * (cpu/stats.c and cpu/quantize_scaled.c: one accumulator per block of the
 * tensor, merged in block order) and the GPU (cuda/scaled.cu: one per
 * thread, merged in a fixed tree), so that a statistic costs no extra pass
 * over memory and both sides count the same things.  Their double sums
 * differ only by the order of the additions.
 *
 * The products are rounded before they are added on both sides: the host's C
 * is compiled without contraction (-std=c11 -ffp-contract=off), and the
 * device's through exmy_dmul_rn / exmy_dadd_rn, which nvcc never fuses.
 */
#ifndef EXMY_STATS_CORE_H
#define EXMY_STATS_CORE_H

#include <math.h>
#include <stdint.h>

#include "lib/exmy.h"
#include "lib/hostdevice.h"

typedef struct {
  uint64_t n, under, sub, over, finite_pairs;
  double amax, min_nonzero; /* min_nonzero = INFINITY until one is seen */
  double sxx, syy, sxy, see;
} exmy_stats_sums;

/* a + b, a * b rounded once to nearest even, never fused (see exmy_fadd_rn). */
EXMY_HD_BINARY(double, exmy_dadd_rn, __dadd_rn(a, b), a + b)
EXMY_HD_BINARY(double, exmy_dmul_rn, __dmul_rn(a, b), a * b)

/* The larger / smaller of two non-NaN doubles (one instruction on the GPU). */
EXMY_HD_BINARY(double, exmy_dmax, fmax(a, b), b > a ? b : a)
EXMY_HD_BINARY(double, exmy_dmin, fmin(a, b), b < a ? b : a)

EXMY_HD void exmy_stats_sums_init(exmy_stats_sums *a) {
  a->n = a->under = a->sub = a->over = a->finite_pairs = 0;
  a->amax = 0.0;
  a->min_nonzero = INFINITY;
  a->sxx = a->syy = a->sxy = a->see = 0.0;
}

/* One element: x the input, xs = x·s the scaled input, q = Q(xs) its rounded
 * image, y the dequantized output (without scaling xs = x and q = y); fmax
 * and fmin_normal are the format's largest finite and smallest normal
 * values. */
EXMY_HD void exmy_stats_sums_add(exmy_stats_sums *a, float fmax, float fmin_normal,
                                 float x, float xs, float q, float y) {
  a->n++;
  const float ax = fabsf(x), axs = fabsf(xs), aq = fabsf(q);
  if (isfinite(x)) {
    a->amax = exmy_dmax(a->amax, (double)ax);
    if (ax != 0.0f && ax < a->min_nonzero) a->min_nonzero = ax;
  }
  if (isfinite(xs)) {
    if (xs != 0.0f && q == 0.0f) a->under++;
    if (axs > fmax || !isfinite(q)) a->over++;
  }
  if (aq > 0.0f && aq < fmin_normal) a->sub++;
  if (isfinite(x) && isfinite(y)) {
    const double dx = x, dy = y, e = dx - dy;
    a->finite_pairs++;
    a->sxx = exmy_dadd_rn(a->sxx, exmy_dmul_rn(dx, dx));
    a->syy = exmy_dadd_rn(a->syy, exmy_dmul_rn(dy, dy));
    a->sxy = exmy_dadd_rn(a->sxy, exmy_dmul_rn(dx, dy));
    a->see = exmy_dadd_rn(a->see, exmy_dmul_rn(e, e));
  }
}

EXMY_HD void exmy_stats_sums_merge(exmy_stats_sums *a, const exmy_stats_sums *b) {
  a->n += b->n;
  a->under += b->under;
  a->sub += b->sub;
  a->over += b->over;
  a->finite_pairs += b->finite_pairs;
  a->amax = exmy_dmax(a->amax, b->amax);
  a->min_nonzero = exmy_dmin(a->min_nonzero, b->min_nonzero);
  a->sxx += b->sxx;
  a->syy += b->syy;
  a->sxy += b->sxy;
  a->see += b->see;
}

/* Fills every field of s but scale and delayed_over_current, which depend on
 * the recipe and are the caller's. */
EXMY_HD void exmy_stats_sums_finish(const exmy_stats_sums *a, exmy_tensor_stats *s) {
  const double n = a->n ? (double)a->n : 1.0;
  s->n = (size_t)a->n;
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

#endif /* EXMY_STATS_CORE_H */
