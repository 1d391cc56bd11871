/*
 * epsilon-sharpness of the next-token loss in the space of the logits, the
 * measure Keskar et al. (2017, "On large-batch training for deep learning:
 * generalization gap and sharp minima", metric 2.1) define on a network's
 * inputs, here taken on the output logits z of one position, as Lee et al.
 * (2024, "To FP8 and Back Again") are described to do.  We could not read their
 * exact text; this is the reading we implement, every parameter stated:
 *
 *   f(z)   = cross-entropy of the logits z (V of them) against the next token y
 *          = log sum_j exp(z_j) - z_y
 *   C_eps  = { d : |d_j| <= eps (|z_j| + 1) for every j }      (Keskar's box)
 *   phi    = (max_{d in C_eps} f(z + d) - f(z)) / (1 + f(z)) x 100
 *
 *   eps         LOGIT_SHARPNESS_NUM_EPS values, logit_sharpness_eps(k):
 *               1e-3 and 5e-4, the two Keskar reports.
 *   directions  all V logits (Keskar's A = identity, no random subspace).
 *   optimiser   none: the maximum has the closed form below, so phi is exact
 *               (Keskar maximised with L-BFGS-B, approximately).
 *   positions   phi is computed for every position of a validation batch; the
 *               trainer reports its mean over the final position of each
 *               sequence (the "final token" of the measure) and over all
 *               positions (logit_sharpness_means).
 *   precision   f and its maximum are evaluated in double from the float32
 *               logits the model produced (after the LM head's rounding).
 *
 * The closed form.  For finite z, df/dz_j = p_j > 0 for j != y and
 * df/dz_y = p_y - 1 < 0 (p = softmax z, every p_j in (0, 1) when V >= 2): f
 * is strictly increasing in each logit but the target's and strictly
 * decreasing in the target's, whatever the others are.  C_eps is a product of
 * intervals, one per coordinate.  Take any point w = z + d of the box and move
 * its coordinates to the corner c one at a time: c_y = z_y - eps(|z_y| + 1),
 * c_j = z_j + eps(|z_j| + 1) for j != y.  Each move stays in the box and, by
 * the monotonicity in that one coordinate with the others held, does not
 * decrease f.  So f(w) <= f(c) for every w in the box, and c is in it: the
 * maximum is f(c), attained at that corner (logit_box_corner).
 *
 * The formulas live here once, for the CPU model (model.c) and the GPU
 * kernel (experiments/gpu/layers.cu).
 */
#ifndef EXPERIMENTS_LOGIT_SHARPNESS_H
#define EXPERIMENTS_LOGIT_SHARPNESS_H

#include <math.h>

#include "lib/hostdevice.h"

#define LOGIT_SHARPNESS_NUM_EPS 2

/* eps of index k (0 <= k < LOGIT_SHARPNESS_NUM_EPS). */
EXMY_HD double logit_sharpness_eps(int k) { return k == 0 ? 1e-3 : 5e-4; }

/* The maximising corner's coordinate for logit z (is_target: z is z_y). */
EXMY_HD double logit_box_corner(double z, int is_target, double eps) {
  const double r = eps * (fabs(z) + 1.0);
  return is_target ? z - r : z + r;
}

/* phi from the loss at z and the loss at the corner. */
EXMY_HD double logit_sharpness_phi(double loss, double loss_max) {
  return (loss_max - loss) / (1.0 + loss) * 100.0;
}

/* The names of the trainer's log fields for eps index k: final position and
 * all positions ("esharp_last_1e-3", ...). */
static inline const char *logit_sharpness_last_key(int k) {
  return k == 0 ? "esharp_last_1e-3" : "esharp_last_5e-4";
}
static inline const char *logit_sharpness_all_key(int k) {
  return k == 0 ? "esharp_all_1e-3" : "esharp_all_5e-4";
}

/* The means of phi (LOGIT_SHARPNESS_NUM_EPS x N, N = B x T rows, row
 * b * T + t) over the final positions t = T - 1 and over all positions,
 * summed in double in row order (the same on both devices). */
static inline void logit_sharpness_means(const float *phi, int B, int T,
                                         double last[LOGIT_SHARPNESS_NUM_EPS],
                                         double all[LOGIT_SHARPNESS_NUM_EPS]) {
  const long N = (long)B * T;
  for (int k = 0; k < LOGIT_SHARPNESS_NUM_EPS; k++) {
    double sum_last = 0, sum_all = 0;
    for (long i = 0; i < N; i++) {
      sum_all += phi[k * N + i];
      if (i % T == T - 1) sum_last += phi[k * N + i];
    }
    last[k] = sum_last / B;
    all[k] = sum_all / (double)N;
  }
}

#endif /* EXPERIMENTS_LOGIT_SHARPNESS_H */
