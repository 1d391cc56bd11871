/*
 * The AdamW update of one element, written once for the host (optim.c) and
 * the GPU (experiments/gpu/layers.cu), as lib/round_core.h is for rounding:
 * the same float operations in the same order, each rounded once (the
 * exmy_*_rn helpers of lib/scale_core.h: nvcc would otherwise contract
 * a * b + c), so both devices produce the same bits.  The coefficients of a
 * step come from one host function, adamw_step_coefs (optim.h).
 */
#ifndef EXPERIMENTS_ADAMW_CORE_H
#define EXPERIMENTS_ADAMW_CORE_H

#include "lib/hostdevice.h"
#include "lib/scale_core.h"

/* The coefficients of step t for one parameter tensor. */
typedef struct {
  float beta1, beta2;
  float one_minus_beta1, one_minus_beta2; /* 1 - beta, rounded to float */
  float eps;
  float step_size; /* lr / (1 - beta1^t) */
  float bc2_sqrt;  /* sqrt(1 - beta2^t) */
  float decay;     /* 1 - lr * weight_decay, or 1 for a tensor without weight decay */
} adamw_coefs;

/* torch.optim.AdamW on one element with gradient g:
 *   m = b1 m + (1-b1) g,  v = b2 v + (1-b2) g g,
 *   p = p decay - step_size m / (sqrt(v) / bc2_sqrt + eps). */
EXMY_HD void adamw_element(const adamw_coefs *c, float g, float *p, float *m, float *v) {
  const float mi = exmy_fadd_rn(exmy_fmul_rn(c->beta1, *m), exmy_fmul_rn(c->one_minus_beta1, g));
  const float vi = exmy_fadd_rn(exmy_fmul_rn(c->beta2, *v),
                                exmy_fmul_rn(exmy_fmul_rn(c->one_minus_beta2, g), g));
  *m = mi;
  *v = vi;
  const float denom = exmy_fadd_rn(exmy_fdiv_rn(exmy_fsqrt_rn(vi), c->bc2_sqrt), c->eps);
  *p = exmy_fsub_rn(exmy_fmul_rn(*p, c->decay), exmy_fdiv_rn(exmy_fmul_rn(c->step_size, mi), denom));
}

#endif /* EXPERIMENTS_ADAMW_CORE_H */
