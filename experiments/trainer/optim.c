/* AdamW (Loshchilov & Hutter), as torch.optim.AdamW computes it. */
#include "experiments/trainer/optim.h"

#include <math.h>
#include <stdlib.h>

float lr_schedule(int step, int steps, int warmup, float lr, float min_frac) {
  if (step < warmup) return lr * (float)(step + 1) / (float)warmup;
  float min_lr = lr * min_frac;
  if (steps <= warmup) return lr;
  double progress = (double)(step - warmup) / (double)(steps - warmup);
  if (progress > 1) progress = 1;
  return (float)(min_lr + 0.5 * (lr - min_lr) * (1.0 + cos(M_PI * progress)));
}

/* The sum of squares in one fixed order, so that the norm (hence clipping)
 * is the same bits for any number of threads: blocks of NORM_BLOCK elements,
 * each summed into NORM_LANES interleaved partial sums (element i into lane
 * i % NORM_LANES; they vectorise) added lane by lane, and the block sums added
 * in block order.  Threads only share out the blocks. */
enum { NORM_BLOCK = 16384, NORM_LANES = 8 };

static double block_sum_squares(const float *g, size_t n) {
  double lane[NORM_LANES] = {0};
  size_t i = 0;
  for (; i + NORM_LANES <= n; i += NORM_LANES)
    for (int l = 0; l < NORM_LANES; l++) lane[l] += (double)g[i + l] * g[i + l];
  for (; i < n; i++) lane[i % NORM_LANES] += (double)g[i] * g[i];
  double s = 0;
  for (int l = 0; l < NORM_LANES; l++) s += lane[l];
  return s;
}

double grad_global_norm(const float *g, size_t n) {
  const size_t blocks = (n + NORM_BLOCK - 1) / NORM_BLOCK;
  double *part = malloc((blocks ? blocks : 1) * sizeof *part), s = 0;
  if (part) {
#pragma omp parallel for schedule(static) if (blocks > 1)
    for (size_t b = 0; b < blocks; b++) {
      const size_t lo = b * NORM_BLOCK, len = n - lo < NORM_BLOCK ? n - lo : NORM_BLOCK;
      part[b] = block_sum_squares(g + lo, len);
    }
    for (size_t b = 0; b < blocks; b++) s += part[b];
    free(part);
  } else { /* no memory for the block sums: the same sums, on one thread */
    for (size_t b = 0; b < blocks; b++) {
      const size_t lo = b * NORM_BLOCK, len = n - lo < NORM_BLOCK ? n - lo : NORM_BLOCK;
      s += block_sum_squares(g + lo, len);
    }
  }
  return sqrt(s);
}

void grad_clip(float *g, size_t n, double norm, double max_norm) {
  if (max_norm <= 0) return;
  float coef = (float)(max_norm / (norm + 1e-6));
  if (coef >= 1.0f) return;
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; i++) g[i] *= coef;
}

int adamw_decays(int tensor) {
  return !param_is_norm(tensor);
}

adamw_coefs adamw_step_coefs(const adamw_hparams *h, int t, int tensor) {
  const float bc1 = 1.0f - powf(h->beta1, (float)t), bc2 = 1.0f - powf(h->beta2, (float)t);
  const adamw_coefs c = {
      .beta1 = h->beta1,
      .beta2 = h->beta2,
      .one_minus_beta1 = 1.0f - h->beta1,
      .one_minus_beta2 = 1.0f - h->beta2,
      .eps = h->eps,
      .step_size = h->lr / bc1,
      .bc2_sqrt = sqrtf(bc2),
      .decay = adamw_decays(tensor) ? 1.0f - h->lr * h->weight_decay : 1.0f,
  };
  return c;
}

void adamw_update(model *m, float *mom1, float *mom2, const adamw_hparams *h, int t) {
  size_t off = 0;
  for (int ti = 0; ti < NUM_PARAM_TENSORS; ti++) {
    const size_t n = m->param_sizes[ti];
    float *p = m->params_mem + off, *g = m->grads_mem + off, *mm = mom1 + off, *vv = mom2 + off;
    const adamw_coefs c = adamw_step_coefs(h, t, ti);
    /* firstprivate: each thread's own copy, kept in registers (a shared one
     * could alias the arrays, and would be reloaded for every element) */
#pragma omp parallel for schedule(static) if (n > 16384) firstprivate(c)
    for (size_t i = 0; i < n; i++) adamw_element(&c, g[i], &p[i], &mm[i], &vv[i]);
    off += n;
  }
}
