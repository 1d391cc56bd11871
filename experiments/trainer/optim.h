/* AdamW, the learning-rate schedule and global-norm clipping. */
#ifndef EXPERIMENTS_OPTIM_H
#define EXPERIMENTS_OPTIM_H

#include <stddef.h>

#include "experiments/trainer/adamw_core.h"
#include "experiments/trainer/model.h"

typedef struct {
  float lr, beta1, beta2, eps, weight_decay;
} adamw_hparams;

/* Warmup (linear from lr/warmup) then cosine decay to lr * min_frac at `steps`. */
float lr_schedule(int step, int steps, int warmup, float lr, float min_frac);

/* The global L2 norm of the gradients (double accumulation in a fixed order:
 * the same bits for any number of threads). */
double grad_global_norm(const float *g, size_t n);
/* Scales the gradients so that their norm is at most max_norm (PyTorch's
 * clip_grad_norm_: coef = max_norm / (norm + 1e-6), applied when < 1). */
void grad_clip(float *g, size_t n, double norm, double max_norm);

/* Whether parameter tensor i (model.h's order) takes weight decay: the
 * matrices (embedding, projections, LM head), not the RMSNorm weights. */
int adamw_decays(int tensor);

/* The coefficients of AdamW step t (1-based) for parameter tensor `tensor`:
 * bias corrections in float from the host's powf, and the tensor's decay.
 * The CPU and the GPU update both take them from here. */
adamw_coefs adamw_step_coefs(const adamw_hparams *h, int t, int tensor);

/* One AdamW step t (1-based) over all parameters; weight decay only on the
 * matrices (2-D tensors: embedding, projections, LM head), not the norms. */
void adamw_update(model *m, float *mom1, float *mom2, const adamw_hparams *h, int t);

#endif /* EXPERIMENTS_OPTIM_H */
