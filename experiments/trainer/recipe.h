/*
 * A precision recipe: the format, rounding and scaling of each operand role
 * (weights, activations, output gradients) of the GEMMs, which GEMMs it covers,
 * and how AdamW's moments are stored.  Read from the configuration (config.c
 * lists the keys); turned into the per-site operands of the model.
 */
#ifndef EXPERIMENTS_RECIPE_H
#define EXPERIMENTS_RECIPE_H

#include <stdbool.h>
#include <stdio.h>

#include "experiments/trainer/config.h"
#include "experiments/trainer/model.h"
#include "experiments/trainer/qgemm.h"

enum { ROLE_W, ROLE_A, ROLE_G, NUM_ROLES };

typedef struct {
  exmy_operand_quant role[NUM_ROLES]; /* templates: delayed and stats unset */
  exmy_operand_quant high[NUM_ROLES]; /* first and last blocks, if kept higher */
  int amax_history;
  bool quant_attention, quant_lm_head, high_first_last;
  /* AdamW moments (COAT; or bfloat16, as DeepSeek-V3 stores them; or FP8 with
   * one current scale per parameter matrix, as Fishman et al. 2024) */
  bool coat, moments_bf16, moments_fp8;
  exmy_format moment_format[2];
  int moment_group;
  bool moment_dre;
  /* weight gradients stored in a low-precision format (MS-AMP O1) */
  bool grad_quant;
  exmy_format grad_format;
  int grad_margin;
  /* NVFP4: the random Hadamard transform (size, 0 = off) on the inputs of
   * each linear layer's weight-gradient GEMM */
  int wgrad_hadamard;
  uint64_t hadamard_seed;
  /* the float32 GEMM under the products (the `gemm` key, tq_select_gemm) */
  char gemm[16];
  /* how the quantized sites' GEMMs accumulate (the `accumulate` key) */
  exmy_accum_model accum;
  /* Smooth-SwiGLU (the `swiglu_scale` key): the SwiGLU output divided per
   * token row by the row's max |h3| before the W2 GEMM, W2's output
   * multiplied back by it (model.h, smooth_swiglu_*) */
  bool swiglu_row_scale;
  /* `activations = bf16`: the tensors between the GEMMs rounded to bfloat16
   * where PyTorch autocast has them in bf16 (experiments/README.md, "bf16
   * activations"; model.h, bf16_activations); CPU only */
  bool bf16_activations;
} recipe;

/* 0, or -1 with a message. */
int recipe_from_config(recipe *r, const config *c, uint64_t seed, char *err, size_t errlen);
/* One site per GEMM site of the model (model_num_sites), operands filled,
 * delayed-scaling states allocated, and the recipe's float32 GEMM selected
 * (tq_select_gemm); NULL when out of memory. */
tq_site *recipe_make_sites(const recipe *r, const model_config *mc);
void recipe_free_sites(tq_site *sites, int n);
/* A name for site i, e.g. "l3.w1" or "lm_head". */
void site_name(const model_config *mc, int i, char *buf, size_t len);

/* The delayed-scaling states, written to a checkpoint. */
int sites_state_write(const tq_site *sites, int n, FILE *f);
/* Reads back len bytes of what sites_state_write wrote.  Every state is
 * checked first (history length that of the site, count and latest position
 * within it and consistent, amaxes finite and >= 0, scale finite and > 0 with
 * scale_inv = 1 / scale, the bytes consumed exactly); only then are they all
 * applied.  0, or -1 with a message (the sites unchanged). */
int sites_state_load(tq_site *sites, int n, const void *buf, size_t len, char *err,
                     size_t errlen);

/* COAT, bf16 or FP8 moments: m and v (n elements, the model's storage order)
 * rounded in place as they would be stored. */
void recipe_store_moments(const recipe *r, const model_config *c, const size_t *param_sizes,
                          float *m, float *v, size_t n);
/* moments = fp8: the stretches of the moments (offsets in the model's storage
 * order, lengths) that each take their own per-tensor scale: every parameter
 * matrix (the embedding, each layer's wq, wk, wv, wo, w1, w3, w2, the LM
 * head); the RMSNorm gains' moments stay float32 (the reference quantizes
 * only the weight-decayed parameter group).  The same list for the CPU and
 * the GPU.  Returns how many (7 L + 2); offset and length may be NULL. */
int recipe_moment_stretches(const model_config *c, const size_t *param_sizes, size_t *offset,
                            size_t *length);

/* MS-AMP O1: the weight gradient of every quantized linear layer (each
 * layer's wq, wk, wv, wo, w1, w3, w2; the LM head when quant_lm_head; not
 * the blocks kept in high_format, the embedding or the RMSNorm gains) rounded
 * in place, rne and saturating, with per-tensor current scaling, as MS-AMP
 * casts each FP8 linear layer's weight gradient before the all-reduce.  Call
 * between the backward and the clipping. */
void recipe_round_grads(const recipe *r, model *m);
/* The stretches of the gradient block (offsets in the model's storage order,
 * lengths) that recipe_round_grads rounds, one per tensor, each under its own
 * scale: the same list for the CPU and the GPU.  Returns how many (at most
 * 7 L + 1); offset and length may be NULL to count. */
int recipe_grad_stretches(const recipe *r, const model_config *c, const size_t *param_sizes,
                          size_t *offset, size_t *length);

#endif /* EXPERIMENTS_RECIPE_H */
