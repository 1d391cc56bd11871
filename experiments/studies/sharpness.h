/*
 * Loss-landscape sharpness measured on the output logits (study 4).
 *
 * Lee et al. (2024, "To FP8 and Back Again") propose a sharpness metric for
 * autoregressive language models computed on the logits; we could not read
 * their definition, so this is our own, stated exactly (RESULTS.md says why).
 * (Their measure as described, Keskar's epsilon-sharpness on the logits, the
 * trainer computes at every validation: experiments/trainer/logit_sharpness.h.)
 *
 *   For K random directions d_k and both signs s = +-1, perturb the weights to
 *   theta + s rho d_k and measure, over the tokens t of a fixed set of
 *   validation batches, the KL divergence of the next-token distributions
 *       KL_t = KL( softmax z_t(theta) || softmax z_t(theta + s rho d_k) ).
 *   kl_k  = the mean of KL_t over the tokens and both signs,
 *   kl_mean, kl_max = the mean and the largest kl_k over the directions,
 *   sharpness = 2 kl_mean / rho^2.
 *
 * d_k is a Gaussian direction, filter-normalised as in Li et al. (2018,
 * "Visualizing the loss landscape of neural nets"): each row of each
 * perturbed weight matrix (one output neuron; one token of the embedding) is
 * rescaled to the norm of the same row of theta, so rho is a relative step and
 * the measure does not change when a layer's weights are rescaled in a way
 * the network cannot see.  The RMSNorm gains are not perturbed by default.
 *
 * KL is the change of the logits that the model can express (it ignores a
 * shift of all logits of a token).  For small rho, KL ~ (rho^2 / 2) d^T F d
 * with F the Gauss-Newton (= Fisher) matrix of the logits, so `sharpness` is
 * the mean curvature of the logit map along filter-normalised directions, a
 * trace-like sharpness; the two signs cancel the odd terms of the expansion.
 * kl_max is the worst direction drawn (an epsilon-sharpness in the spirit of
 * Keskar et al. 2017, over random rather than adversarial directions).  The
 * loss change is reported beside it, for the classical loss-based view.
 *
 * The forward passes run in float32 (m->sites is ignored): this measures the
 * landscape of the weights a recipe produced, not the noise of its rounding.
 */
#ifndef EXPERIMENTS_SHARPNESS_H
#define EXPERIMENTS_SHARPNESS_H

#include <stdint.h>

#include "experiments/trainer/model.h"

typedef struct {
  double rho;            /* relative step, > 0 (e.g. 0.05) */
  int directions;        /* K >= 1 */
  uint64_t seed;         /* of the directions */
  unsigned tensor_mask;  /* bit i: perturb parameter tensor i (param_tensor_names) */
} sharpness_opts;

/* The default mask: every weight matrix and the embedding, not the RMSNorm gains. */
unsigned sharpness_default_mask(void);
/* Parses "matrices", "all" or a comma-separated list of param_tensor_names;
 * 0 for an unknown name. */
unsigned sharpness_parse_mask(const char *spec);

typedef struct {
  double loss;           /* mean cross-entropy at theta */
  double loss_perturbed; /* mean over the directions and signs */
  double kl_mean, kl_max;
  double sharpness;      /* 2 kl_mean / rho^2 */
  int tokens;            /* tokens per evaluation (batches x B x T) */
} sharpness_result;

/* Direction k (num_params floats, zero outside the mask): Gaussian from
 * (seed, k), each row rescaled to the norm of theta's row. */
void sharpness_direction(const model *m, unsigned tensor_mask, uint64_t seed, int k, float *dir);

/* Evaluates the measure on `batches` micro-batches (tokens and targets:
 * batches x B x T each).  The parameters are restored bit for bit.  0, or -1
 * when out of memory (nothing changed). */
int logit_sharpness(model *m, const int *tokens, const int *targets, int batches, int B, int T,
                     const sharpness_opts *o, sharpness_result *r);

#endif /* EXPERIMENTS_SHARPNESS_H */
