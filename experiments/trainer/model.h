/*
 * A LLaMA-architecture language model, forward and backward, on the CPU.
 *
 * token embedding; L blocks of [RMSNorm -> causal multi-head attention with
 * RoPE (theta 10000, grouped-query heads) -> residual; RMSNorm -> SwiGLU MLP ->
 * residual]; final RMSNorm; untied LM head; next-token cross-entropy.
 *
 * Written in the llm.c way: one function per layer and direction, side by side;
 * all parameters in one allocation with a struct of named pointers into it,
 * likewise gradients and activations; sizes computed in one place
 * (model_sizes).  Every matrix product goes through ONE function, the
 * quantized GEMM of qgemm.h, with the operand recipe of its call site.
 *
 * `real` is float for training; the gradient-check test compiles this same
 * file with MODEL_DOUBLE (real = double, GEMMs unquantized) so that finite
 * differences are accurate.
 */
#ifndef EXPERIMENTS_MODEL_H
#define EXPERIMENTS_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "experiments/trainer/qgemm.h"

#ifdef MODEL_DOUBLE
typedef double real;
#else
typedef float real;
#endif

typedef struct {
  int vocab;      /* V */
  int dim;        /* C */
  int n_layers;   /* L */
  int n_heads;    /* NH; head size hs = C / NH (even, for RoPE) */
  int n_kv_heads; /* NKV, divides NH (grouped-query attention when < NH) */
  int hidden;     /* H, SwiGLU hidden size */
  int seq_len;    /* T, the context length */
} model_config;

/* Parameters, in storage order.  Per-layer tensors are stacked over layers. */
#define NUM_PARAM_TENSORS 12
typedef struct {
  real *wte;     /* (V, C) token embedding */
  real *rms1;    /* (L, C) attention RMSNorm weight */
  real *wq;      /* (L, C, C) rows = NH*hs outputs */
  real *wk;      /* (L, KVC, C) KVC = NKV*hs */
  real *wv;      /* (L, KVC, C) */
  real *wo;      /* (L, C, C) attention output projection */
  real *rms2;    /* (L, C) MLP RMSNorm weight */
  real *w1;      /* (L, H, C) gate */
  real *w3;      /* (L, H, C) up */
  real *w2;      /* (L, C, H) down (output projection) */
  real *rmsf;    /* (C) final RMSNorm weight */
  real *lm_head; /* (V, C) */
} param_tensors;

extern const char *const param_tensor_names[NUM_PARAM_TENSORS];
/* The tensors' indices in storage order (param_sizes[], param_tensor_names[]). */
enum {
  PARAM_WTE,
  PARAM_RMS1,
  PARAM_WQ,
  PARAM_WK,
  PARAM_WV,
  PARAM_WO,
  PARAM_RMS2,
  PARAM_W1,
  PARAM_W3,
  PARAM_W2,
  PARAM_RMSF,
  PARAM_LM_HEAD,
};
/* Whether tensor i is an RMSNorm weight (initialised to 1, no weight decay). */
static inline int param_is_norm(int i) { return i == PARAM_RMS1 || i == PARAM_RMS2 || i == PARAM_RMSF; }

/* Activations kept for the backward pass, for a batch of B sequences of T.
 * The CPU (model.c) and the GPU (experiments/gpu/model_gpu.cu) both lay them
 * out by model_act_sizes and model_point_acts, in one allocation. */
#define NUM_ACT_TENSORS 18
/* Indices of the tensors the GPU's fused attention sizes differently: att
 * (no scores kept), and q, k, v, ln1, ln2, hg (one layer kept, not L:
 * experiments/gpu/model_gpu.cu, lean_activations), atty, h1, h3, hg
 * (stored in bf16 there under bf16 activations). */
enum {
  ACT_LN1 = 1, ACT_Q = 3, ACT_K = 4, ACT_V = 5, ACT_ATT = 6, ACT_ATTY = 7, ACT_LN2 = 9,
  ACT_H1 = 11, ACT_H3 = 12, ACT_HG = 13
};
typedef struct {
  real *res;      /* (L+1, B, T, C) residual stream entering each block; res[L] leaves the last */
  real *ln1;      /* (L, B, T, C) */
  real *ln1_rstd; /* (L, B, T) */
  real *q;        /* (L, B, T, C) after RoPE */
  real *k;        /* (L, B, T, KVC) after RoPE */
  real *v;        /* (L, B, T, KVC) */
  real *att;      /* (L, B, NH, T, T) attention probabilities */
  real *atty;     /* (L, B, T, C) attention output before the projection */
  real *res_mid;  /* (L, B, T, C) residual after attention */
  real *ln2;      /* (L, B, T, C) */
  real *ln2_rstd; /* (L, B, T) */
  real *h1;       /* (L, B, T, H) gate pre-activation */
  real *h3;       /* (L, B, T, H) up */
  real *hg;       /* (L, B, T, H) silu(h1) * h3 */
  real *lnf;      /* (B, T, C) */
  real *lnf_rstd; /* (B, T) */
  real *probs;    /* (B, T, V) softmax of the logits */
  real *losses;   /* (B, T) */
} activation_tensors;

/* Scratch for the backward pass (one layer at a time). */
#define NUM_GRAD_ACT_TENSORS 10
enum { GRAD_ACT_DATT = 6, GRAD_ACT_DH1 = 7, GRAD_ACT_DH3 = 8, GRAD_ACT_DHG = 9 };
typedef struct {
  real *dres;  /* (B, T, C) gradient of the residual stream */
  real *dln;   /* (B, T, C) */
  real *datty; /* (B, T, C) */
  real *dq;    /* (B, T, C) */
  real *dk;    /* (B, T, KVC) */
  real *dv;    /* (B, T, KVC) */
  real *datt;  /* (B, NH, T, T) */
  real *dh1;   /* (B, T, H) */
  real *dh3;   /* (B, T, H) */
  real *dhg;   /* (B, T, H) */
} grad_act_tensors;

/* Where a GEMM sits in the model, for its operand recipe (qgemm.h). */
enum {
  SITE_Q, SITE_K, SITE_V, SITE_O, SITE_W1, SITE_W3, SITE_W2,
  SITE_ATT_QK, /* scores S = Q K^T: x = Q, w = K, dy = dS */
  SITE_ATT_PV, /* O = P V: x = P, w = V, dy = dO */
  SITES_PER_LAYER
};
/* site index = layer * SITES_PER_LAYER + kind; the LM head is site L * SITES_PER_LAYER. */
static inline int model_num_sites(const model_config *c) { return c->n_layers * SITES_PER_LAYER + 1; }
extern const char *const site_kind_names[SITES_PER_LAYER];

typedef struct {
  model_config cfg;
  size_t param_sizes[NUM_PARAM_TENSORS];
  size_t num_params;
  real *params_mem;
  param_tensors params;
  real *grads_mem;
  param_tensors grads;
  /* activations, allocated on the first forward for (B, T) */
  int B, T;
  size_t act_sizes[NUM_ACT_TENSORS];
  size_t grad_act_sizes[NUM_GRAD_ACT_TENSORS];
  void *acts_mem; /* both, one allocation (model_point_acts) */
  activation_tensors acts;
  grad_act_tensors grad_acts;
  real *rope_cos, *rope_sin; /* (T, hs/2) */
  /* the operand recipe of every site; NULL = every GEMM in float32 */
  tq_site *sites;
  /* Smooth-SwiGLU per token row (the recipe's swiglu_scale = row) */
  int swiglu_row_scale;
  /* The recipe's activations = bf16: the tensors that PyTorch autocast keeps
   * in bf16 rounded rne to bfloat16 where autocast rounds them, forward and
   * backward (experiments/README.md, "bf16 activations", lists the points);
   * 0: float32 between the GEMMs.  Set before the first forward; the double
   * build (gradient check) rounds nothing. */
  int bf16_activations;
  real *bf16_scratch; /* its backward's products before they are added (allocated on use) */
  real loss; /* mean loss of the last forward with targets */
  /* when set, a forward with targets also writes the epsilon-sharpness of
   * every position's logits (logit_sharpness.h) into logit_phi
   * (LOGIT_SHARPNESS_NUM_EPS x B*T, allocated with the activations) */
  int logit_sharpness;
  float *logit_phi;
} model;

/* The named sizes test, tiny, small, 120m; 0, or -1 for an unknown name. */
int model_named_size(const char *name, model_config *c);
/* Fills the sizes of the parameter tensors; returns the total. */
size_t model_param_sizes(const model_config *c, size_t sizes[NUM_PARAM_TENSORS]);
/* Points the named tensors of p into one block `mem` laid out by `sizes`. */
void model_point_params(param_tensors *p, real *mem, const size_t *sizes);
/* Tensors carved from one allocation start at multiples of ARENA_ALIGN bytes
 * (what cuBLAS and vector loads want). */
#define ARENA_ALIGN 256
static inline size_t arena_round_up(size_t bytes) {
  return (bytes + ARENA_ALIGN - 1) / ARENA_ALIGN * ARENA_ALIGN;
}
/* The element counts of the activations and of the backward scratch for
 * micro-batches of B x T, in the structs' order. */
void model_act_sizes(const model_config *c, int B, int T, size_t act[NUM_ACT_TENSORS],
                     size_t grad_act[NUM_GRAD_ACT_TENSORS]);
/* Lays out the activations, then the backward scratch, from byte 0 of mem,
 * each tensor at a multiple of ARENA_ALIGN; returns the bytes they take.  mem
 * NULL: only the bytes. */
size_t model_point_acts(activation_tensors *a, grad_act_tensors *d, void *mem,
                        const size_t act[NUM_ACT_TENSORS],
                        const size_t grad_act[NUM_GRAD_ACT_TENSORS]);
/* Checks a configuration; returns NULL or a message. */
const char *model_config_check(const model_config *c);
/* Allocates parameters and gradients; initialises the parameters from seed:
 * N(0, 0.02) for matrices and the embedding, the block output projections
 * (wo, w2) scaled by 1/sqrt(2L), RMSNorm weights 1.  0, or -1 when out of
 * memory (then m holds nothing to free). */
int model_init(model *m, const model_config *c, uint64_t seed);
/* Allocates the activations of micro-batches of B x T now (model_forward
 * would on its first call, and exit if out of memory).  0, or -1 when out of
 * memory. */
int model_reserve(model *m, int B, int T);
void model_free(model *m);

/* Forward over tokens (B, T); with targets (B, T) also the loss (m->loss). */
void model_forward(model *m, const int *tokens, const int *targets, int B, int T);
void model_zero_grad(model *m);
/* Accumulates into m->grads (cleared once per step by model_zero_grad) the gradient of loss_scale * mean loss of the last
 * forward (loss_scale = 1 / accumulation steps). */
void model_backward(model *m, const int *tokens, const int *targets, real loss_scale);

/* -------- the layers, one function per direction (exposed for the tests) -------- */
void encoder_forward(real *out, const int *tokens, const real *wte, int N, int C);
void encoder_backward(real *dwte, const real *dout, const int *tokens, int N, int C);
void rmsnorm_forward(real *out, real *rstd, const real *inp, const real *w, int N, int C);
void rmsnorm_backward(real *dinp, real *dw, const real *dout, const real *inp, const real *w,
                      const real *rstd, int N, int C);
/* out (N, OC) = inp (N, C) w (OC, C)^T */
void linear_forward(real *out, const real *inp, const real *w, int N, int C, int OC,
                    tq_site *site);
/* dinp = dinp_beta * dinp + dout w (dinp_beta 0: overwritten, which spares
 * clearing it first; 1: accumulated); dw += dout^T inp.  The GPU's
 * linear_backward (experiments/gpu/model_gpu.cu) keeps the same contract. */
void linear_backward(real *dinp, real *dw, const real *dout, const real *inp, const real *w,
                     int N, int C, int OC, tq_site *site, real dinp_beta);
void rope_tables(real *cos_t, real *sin_t, int T, int hs, double theta);
/* x (B, T, nh*hs) rotated in place, pairs (2i, 2i+1) of each head */
void rope_forward(real *x, const real *cos_t, const real *sin_t, int B, int T, int nh, int hs);
void rope_backward(real *dx, const real *cos_t, const real *sin_t, int B, int T, int nh, int hs);
/* The same under activations = bf16: each rotated value rounded to bf16 once
 * (act_bf16_core.h's rope_rotate_pair, the GPU's text too). */
void rope_forward_act_bf16(real *x, const real *cos_t, const real *sin_t, int B, int T, int nh,
                           int hs);
void rope_backward_act_bf16(real *dx, const real *cos_t, const real *sin_t, int B, int T, int nh,
                            int hs);
/* The causal softmax of attention on `rows` rows of T (row r is query r % T),
 * in place; backward: datt = scale P (dP - rowsum(dP P)) from dP = datt. */
void causal_softmax_forward(real *att, long rows, int T);
void causal_softmax_backward(real *datt, const real *att, long rows, int T, real scale);
void attention_forward(real *out, real *att, const real *q, const real *k, const real *v,
                       int B, int T, int NH, int NKV, int hs, tq_site *qk, tq_site *pv);
/* dq = ..., dk += ..., dv += ... (dq overwritten, dk and dv accumulated); datt_scratch: B*NH*T*T */
void attention_backward(real *dq, real *dk, real *dv, real *datt_scratch, const real *dout,
                        const real *att, const real *q, const real *k, const real *v,
                        int B, int T, int NH, int NKV, int hs,
                        tq_site *qk, tq_site *pv);
void swiglu_forward(real *out, const real *h1, const real *h3, size_t n);
void swiglu_backward(real *dh1, real *dh3, const real *dout, const real *h1, const real *h3, size_t n);
/* The same under activations = bf16: out = bf16(s h3), s = bf16(silu(h1));
 * dh3 = bf16(dout s), dh1 = bf16(bf16(dout h3) silu'(h1)) (act_bf16_core.h,
 * the GPU's text too). */
void swiglu_forward_act_bf16(real *out, const real *h1, const real *h3, size_t n);
void swiglu_backward_act_bf16(real *dh1, real *dh3, const real *dout, const real *h1,
                              const real *h3, size_t n);
/* Smooth-SwiGLU per token row (Fishman et al. 2024's reference code): the row
 * scale s_t = max_j |h3[t, j]| (lib/scale_core.h), out = silu(h1) (h3 / s_t)
 * into the W2 GEMM, whose output row is then multiplied by s_t
 * (smooth_swiglu_scale_rows).  s_t is recomputed from h3 wherever it is
 * needed (the max is exact: the same s_t every time) and held constant in the
 * backward: dh3 = dout silu(h1) / s_t, dh1 = dout (h3 / s_t) silu'(h1), and
 * the W2 GEMMs' output gradient is d(out) s_t.  h1, h3: (N, H). */
void smooth_swiglu_forward(real *out, const real *h1, const real *h3, int N, int H);
void smooth_swiglu_backward(real *dh1, real *dh3, const real *dout, const real *h1, const real *h3,
                            int N, int H);
/* dst[t, :] = src[t, :] s_t for the rows of x (N, C), s_t from h3 (N, H);
 * dst may be src. */
void smooth_swiglu_scale_rows(real *dst, const real *src, const real *h3, int N, int C, int H);
/* probs (N, V) = softmax(logits) in place; losses (N) */
void crossentropy_softmax_forward(real *probs, real *losses, const int *targets, int N, int V);
/* dlogits (N, V) = (probs - onehot) * scale */
/* phi (LOGIT_SHARPNESS_NUM_EPS, N): the epsilon-sharpness of each row of the
 * logits (N, V) against its target (logit_sharpness.h). */
void logit_sharpness_forward(float *phi, const real *logits, const int *targets, int N, int V);
void crossentropy_softmax_backward(real *dlogits, const real *probs, const int *targets, int N, int V,
                                   real scale);

#endif /* EXPERIMENTS_MODEL_H */
