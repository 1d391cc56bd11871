/* LLaMA forward and backward on the GPU (see model_gpu.h and model.c). */
#include "experiments/gpu/model_gpu.h"

#include <cuda_bf16.h>
#include <cuda_profiler_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <initializer_list>
#include <utility>
#include <vector>

#include "experiments/gpu/flash_attention.h"
#include "experiments/gpu/gemm.h"
#include "experiments/gpu/layers.h"
#include "experiments/trainer/logit_sharpness.h"

namespace {
enum { REUSE = 0, FILL = 1 };

/* The GEMM operands whose producers fold their amax as they write them
 * (layers.h's `amax`), for per-tensor current scaling's fills: one device
 * word per tensor and layer (gpu_model.amax_words).  The LM head's X, lnf,
 * has one word after the last layer's. */
enum {
  AMAX_LN1,     /* RMSNorm 1's output: X of Q, K, V */
  AMAX_LN2,     /* RMSNorm 2's output: X of W1, W3 */
  AMAX_HG,      /* SwiGLU's output: X of W2 */
  AMAX_DRES_W2, /* the residual gradient entering the layer's backward: dY of W2 */
  AMAX_DRES_WO, /* the residual gradient after RMSNorm 2's backward: dY of WO */
  AMAX_DQ,      /* dq after RoPE's backward: dY of Q */
  AMAX_DK,      /* dk after RoPE's backward: dY of K */
  AMAX_ATTY,    /* the fused attention's output: X of WO */
  AMAX_DV,      /* dv from the fused attention's backward: dY of V */
  AMAX_DH1,     /* SwiGLU's gradients on bf16 storage: dY of W1 */
  AMAX_DH3,     /* and of W3 */
  AMAX_PER_LAYER
};

/* How recipe_round_grads rounds the weight gradients (grad_format). */
const exmy_rounding_opts grad_rounding = {EXMY_RNE, true};

template <typename T>
T *dalloc(size_t n) {
  void *p = nullptr;
  gtq_check(cudaMalloc(&p, (n ? n : 1) * sizeof(T)), "cudaMalloc (model)");
  gtq_check(cudaMemset(p, 0, (n ? n : 1) * sizeof(T)), "cudaMemset (model)");
  return (T *)p;
}

/* A part of the step (forward body, backward) captured as a CUDA graph and
 * replayed.  Captured on the second eager-capable call (the first, eager,
 * makes every allocation), discarded when it is stale (graph_epoch: a
 * buffer it reads reallocated, delayed states uploaded) or its one argument
 * changed. */
struct step_graph {
  cudaGraphExec_t exec = nullptr;
  bool warm = false;    /* one eager run of this part since the last discard */
  uint64_t epoch = 0;   /* graph_epoch() at capture */
  /* at the eager run, then at capture: the part's argument (the backward's
   * loss_scale, the forward's sharpness) and gpu_model.weight_amax_valid */
  float arg = 0;
  bool weights_folded = false;
};

}  // namespace

struct gpu_model {
  model_config cfg;
  int B, T;
  size_t num_params, param_sizes[NUM_PARAM_TENSORS];
  float *params_mem, *grads_mem, *mom1, *mom2;
  param_tensors p, gr;
  /* One device allocation, `arena`: the activations and the backward scratch
   * laid out as model.c lays out its own (model_act_sizes, model_point_acts;
   * att and datt empty under the fused attention), then the buffers the host
   * model has no use for. */
  void *arena;
  size_t arena_bytes;
  /* lean_activations under the fused attention: q, k, v, ln1, ln2 and hg
   * hold one layer (the layer being computed), not L.  The flash backward
   * reads Q, K, V from their bf16 copies (and RoPE's backward needs no saved
   * values), so q, k, v are never read again; ln1, ln2 and hg are kept for
   * every layer where a backward GEMM reads them in float32 (keep_*), or, at
   * lean_activations = 2, recomputed there by the forward's kernels from res,
   * res_mid, h1 and h3 (the same float32 values; recompute_*), and not read
   * at all where the GEMM reads the slot the forward filled.  The GEMM
   * sites' dY slots share one buffer (gtq_share_dy_slots). */
  bool lean;
  bool recompute_ln1, recompute_ln2, recompute_hg;
  bool keep_ln1, keep_ln2, keep_hg; /* lean, but every layer's: a GEMM reads them */
  activation_tensors acts;
  grad_act_tensors grad_acts;
  float *lse; /* (L, B, NH, T) the fused attention's log-sum-exp per row */
  __nv_bfloat16 *fq, *fk, *fv; /* (L, B, T, C|KVC) plain bf16 copies for the fused backward */
  __nv_bfloat16 *fdo;          /* (B, T, C) */
  void *flash_scratch;
  float *rope_cos, *rope_sin;
  int *tokens, *targets, *bucket_start, *bucket_pos;
  double *loss_dev, *sumsq, *sumsq_scratch;
  float *logit_phi;     /* (LOGIT_SHARPNESS_NUM_EPS, B*T), written when logit_sharpness */
  /* activations = bf16 (model.c's bf16_activations): the tensors between the
   * GEMMs rounded to bf16 where autocast rounds them, stored in float32; the
   * backward's products rounded in act_scratch before they are added */
  bool act_bf16;
  float *act_scratch;
  size_t act_scratch_n; /* floats */
  /* bf16 activations: a sum of linear products pending in act_scratch
   * (act_sum_begin): its float32 destination, the products (bf16, mn
   * values each, at the start of act_scratch), how many */
  struct {
    float *dst;
    size_t mn;
    int n;
  } act_sum;
  /* bf16 activations: a residual add dst = base + bf16 product left to the
   * RMSNorm that reads dst next (gemm_act_residual; the product in
   * act_scratch), or p NULL */
  struct {
    const uint16_t *p;
    const float *base;
    float *dst;
  } add_pending;
  /* and SwiGLU's tensors stored in bf16 (mlp_bf16): h1, h3 and hg for every
   * layer, dh1, dh3 and dhg, in their arena pieces (half of each unused).
   * h1, h3 and dhg are written by their GEMMs in bf16 (gtq_gemm_bf16_out),
   * hg, dh1 and dh3 by SwiGLU's kernels, and hg, dh1 and dh3 are their
   * GEMMs' operands as they are (gtq_use_bf16_identity).  Where a recipe
   * does not allow that, float32 storage as above.  `wide`: statistics
   * steps' float32 copy of one such tensor for its fill (made there). */
  bool mlp_bf16;
  bool hg_recomputed; /* mlp_bf16 (lean_activations >= 1): hg for one layer,
                       * made again from h1 and h3 by SwiGLU's backward for
                       * W2's dW */
  float *wide;
  /* and the attention's output O stored in bf16 for every layer (o_bf16, in
   * atty's arena piece), rounded from the fused kernel's float32 output in
   * o_f32 (one layer), where W_O's GEMMs take it as it is; the backward
   * reads it for D = rowsum(dO O) */
  bool o_bf16;
  float *o_f32;
  bool logit_sharpness; /* gpu_model_set_logit_sharpness */
  int *h_bucket_start, *h_bucket_pos;
  gpu_attention_kind attention;
  int p_bits;
  uint64_t *p_offsets; /* per layer: the sr stream index of P's element 0 */
  exmy_format bf16; /* the plain bf16 inputs of unquantized attention */
  const recipe *rc;
  tq_site *sites;
  int n_sites;
  gtq_ctx *gq;
  cudaStream_t s;
  bool swiglu_unfused;  /* gpu_model_set_swiglu_unfused */
  bool coat_unfused;    /* gpu_model_set_coat_unfused */
  unsigned long long swiglu_fused; /* layers whose backward took swiglu_backward_fused */
  bool rope_unfused;                   /* gpu_model_set_rope_unfused */
  unsigned long long rope_fused;       /* tensors RoPE rotated into a bf16 operand */
  bool swiglu_fwd_unfused;             /* gpu_model_set_swiglu_forward_unfused */
  unsigned long long swiglu_fwd_fused; /* layers whose forward took swiglu_forward_fused */
  bool rmsnorm_fwd_unfused;             /* gpu_model_set_rmsnorm_forward_unfused */
  unsigned long long rmsnorm_fwd_fused; /* RMSNorms that took rmsnorm_into_operand */
  bool dres_unfused;                    /* gpu_model_set_dres_unfused */
  unsigned long long dres_fused;        /* images dres_into_dy gave */
  /* bf16 activations, the fused attention on inputs of bf16 values: q, k
   * and v written in bf16 by their GEMMs, q and k rotated in bf16 into the
   * kernel's inputs (qkv_into_flash_inputs), and dq, dk rotated in bf16
   * into Q's and K's dY (dqkv_into_operands) */
  bool qkv_bf16;
  /* bf16 activations: operands made by their producers where the fills
   * would leave them as they are (act_direct); its test switch, and the
   * tensors so made */
  bool act_unfused;
  unsigned long long act_fused;
  /* (L * AMAX_PER_LAYER + 1) device words, zeroed at the start of the
   * forward and of the backward; NULL where no fill takes a folded amax */
  unsigned int *amax_words;
  bool amax_unfolded;   /* gpu_model_set_amax_unfolded */
  bool scale_nodes;     /* gpu_model_set_scale_nodes */
  /* The weights' words: one per site (n_sites), for the W of the linear
   * sites (the attention sites' and the unquantized ones' unused), folded
   * by AdamW as it writes the parameters (gpu_model_update); NULL where no
   * weight fill is current-scaled.  weight_amax_valid: they hold the amaxes
   * of the parameters on the device now (an update folded them and nothing
   * has written the parameters since); false: the fills run their passes. */
  unsigned int *weight_amax;
  bool weight_amax_valid;
  /* grad_format's matrices (recipe_grad_stretches) as device descriptors,
   * set once (the gradients do not move), for gpu_model_update's one amax
   * launch and one rounding launch over all of them, and their amax words;
   * NULL without grad_format or where gpu_quantize_matrices_serves refuses
   * its format (the update then rounds matrix by matrix) */
  gpu_matrix *grad_matrices;
  unsigned int *grad_amax;
  int n_grad_matrices;
  size_t grad_matrix_max; /* the largest one's elements */
  unsigned long long amax_folded; /* fills that took a producer's amax */
  bool graphs;          /* cuda_graph = 1 and the recipe lets the step be replayed */
  step_graph fwd, bwd;
  unsigned long long graph_launches = 0; /* step parts replayed from a graph */
};

/* Everything that makes a captured step stale: every reallocation a
 * captured launch could have read from, and the GEMMs' own (gtq_graph_epoch;
 * which recipes may be replayed at all: gtq_replayable). */
static uint64_t graph_epoch(const gpu_model *g) {
  return gtq_graph_epoch(g->gq) + gpu_layers_scratch_epoch() + exmy_cuda_scratch_epoch();
}

static void graph_drop(step_graph &sg) {
  if (sg.exec) cudaGraphExecDestroy(sg.exec);
  sg.exec = nullptr;
  sg.warm = false;
}

/* Runs body's launches on g->s: replayed from sg's graph when one is valid,
 * else eagerly, or captured and then replayed (the graph replays exactly the
 * launches an eager run enqueues: same kernels, arguments, buffers, order).
 * Statistics steps always run eagerly (they fill host bookkeeping). */
template <typename F>
static void run_step_part(gpu_model *g, step_graph &sg, float arg, F body) {
  if (!g->graphs || gtq_collecting(g->gq)) {
    body();
    return;
  }
  /* current scaling: the weights' fills take AdamW's folded amaxes, or run
   * their own passes after an upload; a graph is captured only after an
   * eager run of the same launches */
  const bool folded = g->weight_amax_valid;
  if (sg.exec && (sg.epoch != graph_epoch(g) || sg.arg != arg || sg.weights_folded != folded))
    graph_drop(sg);
  if (!sg.exec && !(sg.warm && sg.arg == arg && sg.weights_folded == folded)) {
    body();
    sg.warm = true;
    sg.arg = arg;
    sg.weights_folded = folded;
    return;
  }
  if (!sg.exec) {
    const uint64_t epoch = graph_epoch(g);
    cudaGraph_t graph = nullptr;
    gtq_check(cudaStreamBeginCapture(g->s, cudaStreamCaptureModeRelaxed), "graph capture");
    body();
    gtq_check(cudaStreamEndCapture(g->s, &graph), "graph capture");
    if (graph_epoch(g) != epoch) { /* a buffer moved while capturing: run it eagerly */
      cudaGraphDestroy(graph);
      sg.warm = false;
      body();
      return;
    }
    gtq_check(cudaGraphInstantiate(&sg.exec, graph, 0), "graph instantiate");
    cudaGraphDestroy(graph);
    sg.epoch = epoch;
    sg.arg = arg;
    sg.weights_folded = folded;
  }
  gtq_check(cudaGraphLaunch(sg.exec, g->s), "graph launch");
  g->graph_launches++;
}

/* activations = bf16: x (n values) rounded in place to bf16, model.c's
 * round_bf16 (the same kernel's bits as the library's); else nothing. */
static void act_round(gpu_model *g, float *x, size_t n) {
  if (!g->act_bf16 || !n) return;
  const exmy_rounding_opts rne = {};
  gtq_check(exmy_cuda_quantize_f32(&g->bf16, &rne, x, x, n, g->s), "bf16 activations");
}

/* activations = bf16: a GEMM's output gradient as its bf16 copy in dst
 * (the float32 dy stays for the residual stream); else dy itself. */
static const float *act_dy(gpu_model *g, float *dst, const float *dy, size_t n) {
  if (!g->act_bf16) return dy;
  const exmy_rounding_opts rne = {};
  gtq_check(exmy_cuda_quantize_f32(&g->bf16, &rne, dy, dst, n, g->s), "bf16 activations");
  return dst;
}

/* activations = bf16, outside statistics steps (whose fills read the
 * float32 tensors) and unless turned off: operands made by their producers
 * where the fills would leave them as they are. */
static bool act_direct(gpu_model *g) {
  return g->act_bf16 && !g->act_unfused && !gtq_collecting(g->gq);
}

/* The later use that reads the slot `use` fills (dW's X or dY, dX's W),
 * or -1. */
static int slot_reuse(int use) {
  return use == USE_FWD_X    ? USE_DW_X
         : use == USE_FWD_W  ? USE_DX_W
         : use == USE_DX_DY  ? USE_DW_DY
                             : -1;
}

/* Whether the fill of `use` of `site` and that of the slot's later use are
 * both bf16's own rne (gtq_use_bf16_identity), so that a tensor stored in
 * bf16 is that operand as it is, and a producer writing it in bf16 writes
 * the operand itself. */
static bool stored_own_operand(const gpu_model *g, int site, int use) {
  const int reuse = slot_reuse(use);
  return reuse >= 0 && gtq_use_bf16_identity(g->gq, site, use) &&
         gtq_use_bf16_identity(g->gq, site, reuse);
}

/* act_dy for the dY of `site`: dy itself where both its fills are bf16's
 * own rne (stored_own_operand: rne of dy is rne of bf16(dy), so the fill
 * makes act_dy's image from dy in one pass; act_direct), else act_dy. */
static const float *act_dy_for(gpu_model *g, int site, float *dst, const float *dy, size_t n) {
  if (act_direct(g) && stored_own_operand(g, site, USE_DX_DY)) {
    g->act_fused++;
    return dy;
  }
  return act_dy(g, dst, dy, n);
}

constexpr int kActSumTerms = 3; /* the dX of Q, K and V */

/* activations = bf16: dst = bf16(op(A) op(B)), or add_to + that where
 * add_to is given (it may be dst).  Where the GEMM can write bf16
 * (gtq_bf16_out_serves: the float32 product rounded once, the same bits)
 * and act_scratch holds it, into act_scratch, then one pass widens or adds
 * it into dst; else the float32 product (in dst, or act_scratch when adding
 * to dst) rounded in place and added. */
static void act_sum_flush(gpu_model *g);
static void gemm_act(gpu_model *g, bool ta, bool tb, int m, int n, int k, gtq_operand a,
                     gtq_operand b, float *dst, const float *add_to) {
  const size_t mn = (size_t)m * n, cap = 2 * g->act_scratch_n; /* bf16 values */
  auto &sum = g->act_sum;
  const size_t held = (size_t)sum.n * sum.mn; /* the pending sum's products */
  if (gtq_bf16_out_serves(g->gq, a, b) && held + mn <= cap) {
    uint16_t *t = (uint16_t *)g->act_scratch + held;
    gtq_gemm_bf16_out(g->gq, ta, tb, m, n, k, a, b, t, n);
    const bool term = dst == sum.dst && (sum.n ? add_to == dst && mn == sum.mn : !add_to);
    if (term && sum.n < kActSumTerms) { /* added by act_sum_flush */
      sum.mn = mn;
      sum.n++;
      return;
    }
    gpu_add_bf16(dst, add_to, t, mn, g->s);
    return;
  }
  act_sum_flush(g); /* act_scratch is the float32 product's below */
  float *y = add_to == dst ? g->act_scratch : dst;
  gtq_gemm(g->gq, ta, tb, m, n, k, 1.0f, a, b, 0.0f, y, n);
  act_round(g, y, mn);
  if (add_to) gpu_add_inplace(dst, add_to == dst ? y : add_to, mn, g->s);
}

static int site_index(const gpu_model *g, int layer, int kind) {
  return g->sites ? layer * SITES_PER_LAYER + kind : -1;
}

/* gemm_act's dst = base + bf16(op(A) op(B)) for a residual add that an
 * RMSNorm reads next: the product in bf16 in act_scratch and the sum left to
 * that RMSNorm's pass (add_pending; gpu_add_bf16_rmsnorm_forward_bf16, or
 * gpu_add_bf16 first where it cannot take it) where act_direct, else
 * gemm_act. */
static void gemm_act_residual(gpu_model *g, int m, int n, int k, gtq_operand a, gtq_operand b,
                              float *dst, const float *base) {
  const size_t mn = (size_t)m * n;
  if (act_direct(g) && !g->act_sum.n && gtq_bf16_out_serves(g->gq, a, b) &&
      mn <= 2 * g->act_scratch_n) {
    uint16_t *t = (uint16_t *)g->act_scratch;
    gtq_gemm_bf16_out(g->gq, false, true, m, n, k, a, b, t, n);
    g->add_pending = {t, base, dst};
    g->act_fused++;
    return;
  }
  gemm_act(g, false, true, m, n, k, a, b, dst, base);
}

/* bf16 activations: dst = bf16(P1) + bf16(P2) + ... of the linear products
 * that gemm_act writes into dst between act_sum_begin and act_sum_flush (the
 * first with nothing to add to, the others added to dst: the dX of Q, K, V
 * and of W1, W3), kept in bf16 and summed in one pass in the same order
 * (gpu_sum_bf16), not widened into dst and added to it one pass each; where
 * act_direct, else nothing pending (each product added as it comes). */
static void act_sum_begin(gpu_model *g, float *dst) {
  act_sum_flush(g);
  if (act_direct(g)) g->act_sum.dst = dst;
}
static void act_sum_flush(gpu_model *g) {
  auto &sum = g->act_sum;
  if (sum.n) {
    const uint16_t *t = (const uint16_t *)g->act_scratch;
    gpu_sum_bf16(sum.dst, t, sum.n > 1 ? t + sum.mn : nullptr,
                 sum.n > 2 ? t + 2 * sum.mn : nullptr, sum.mn, g->s);
    if (sum.n > 1) g->act_fused++;
  }
  sum = {};
}
/* The one product pending, taken as it is (bf16, in act_scratch until the
 * next gemm_act) in place of its float32 sum, or NULL (none, or several:
 * then flushed into dst). */
static const uint16_t *act_sum_take(gpu_model *g) {
  if (g->act_sum.n != 1) {
    act_sum_flush(g);
    return nullptr;
  }
  g->act_sum = {};
  g->act_fused++;
  return (const uint16_t *)g->act_scratch;
}

/* -------------------------------------------------------------- linear */

/* The word that the kernel writing tensor `tensor` (AMAX_*) of layer l folds
 * its amax into, when some fill of `use` of the layer's sites of the kinds
 * `readers` will take it (gtq_fill_takes_amax: current scaling on the BF16
 * path, not a statistics step) and folding is on; else NULL: nothing is
 * folded and the fills run their own amax passes. */
static unsigned int *amax_word_of(gpu_model *g, int l, int tensor,
                                  std::initializer_list<int> readers, int use) {
  if (!g->amax_words || g->amax_unfolded) return nullptr;
  for (int kind : readers)
    if (gtq_fill_takes_amax(g->gq, site_index(g, l, kind), use))
      return g->amax_words + (size_t)l * AMAX_PER_LAYER + (l < g->cfg.n_layers ? tensor : 0);
  return nullptr;
}
static unsigned int *amax_word(gpu_model *g, int l, int tensor, std::initializer_list<int> readers,
                               int use) {
  /* bf16 activations: of the float32 tensors only RMSNorm's forward outputs
   * reach their fills as written (the final one's word is layer L's); the
   * others are rounded after their producers (stored_amax_word) */
  if (g->act_bf16 && !(l == g->cfg.n_layers || tensor == AMAX_LN1 || tensor == AMAX_LN2))
    return nullptr;
  return amax_word_of(g, l, tensor, readers, use);
}
/* The word into which a producer on bf16 storage folds the amax of the bf16
 * values it stores (the values the fill rounds: stored_operand), as
 * amax_word's, outside statistics steps. */
static unsigned int *stored_amax_word(gpu_model *g, int l, int tensor,
                                      std::initializer_list<int> readers, int use) {
  return gtq_collecting(g->gq) ? nullptr : amax_word_of(g, l, tensor, readers, use);
}
/* The slot's own word (w.amax_bits) where the producer writing bf16 values
 * into the slot of fill w, which then become the image of quant `image` in
 * place, folds their amax into it for current scaling's scale, in place of
 * bf16_fill_finish's amax pass; else NULL (also with amax folding off). */
static unsigned int *slot_folded_word(const gpu_model *g, const gtq_bf16_fill &w,
                                      const exmy_operand_quant *image) {
  return image && w.current && !g->amax_unfolded ? w.amax_bits : nullptr;
}

/* Zeroes the words before the producers of a forward or a backward fold
 * into them (each word is folded into once per step). */
static void amax_words_clear(gpu_model *g) {
  if (!g->amax_words || g->amax_unfolded || gtq_collecting(g->gq)) return;
  gtq_check(cudaMemsetAsync(g->amax_words, 0,
                            sizeof(unsigned int) * ((size_t)g->cfg.n_layers * AMAX_PER_LAYER + 1),
                            g->s),
            "memset (amax words)");
}

/* The operand of a fill whose tensor's amax may have been folded by its
 * producer (amax: amax_word's, or NULL). */
static gtq_operand fill_operand(gpu_model *g, int site, int use, int slot, const float *x,
                                long rows, long cols, const unsigned int *amax) {
  if (amax && gtq_fill_takes_amax(g->gq, site, use)) g->amax_folded++;
  return gtq_operand_for_gemm_amax(g->gq, site, use, slot, FILL, x, cols, rows, cols, amax);
}

/* The word holding the amax of site's weight as the last update folded it
 * (gpu_model.weight_amax), where it still holds the parameters' and folding
 * is on; else NULL (the fill runs its own pass). */
static const unsigned int *weight_word(const gpu_model *g, int site) {
  if (!g->weight_amax || !g->weight_amax_valid || g->amax_unfolded || site < 0) return nullptr;
  return g->weight_amax + site;
}

/* A linear site's forward operands: X (N x C) filled, or its slot where
 * x_filled (it holds this step's operand already: swiglu_forward_fused;
 * x_amax: inp's amax as its producer folded it, amax_word's, or NULL), and
 * W (OC x C) filled. */
static void forward_operands(gpu_model *g, int site, const float *inp, const float *w, int N,
                             int C, int OC, const unsigned int *x_amax, bool x_filled,
                             gtq_operand *x, gtq_operand *wq) {
  *x = x_filled ? gtq_operand_for_gemm(g->gq, site, USE_FWD_X, SLOT_X, REUSE, inp, C, N, C)
                : fill_operand(g, site, USE_FWD_X, SLOT_X, inp, N, C, x_amax);
  *wq = fill_operand(g, site, USE_FWD_W, SLOT_W, w, OC, C, weight_word(g, site));
}

/* Y = X W^T (forward_operands' x_amax and x_filled). */
static void linear_forward(gpu_model *g, float *out, const float *inp, const float *w, int N,
                           int C, int OC, int site, const unsigned int *x_amax = nullptr,
                           bool x_filled = false) {
  gtq_operand x, wq;
  forward_operands(g, site, inp, w, N, C, OC, x_amax, x_filled, &x, &wq);
  gtq_gemm(g->gq, false, true, N, OC, C, 1.0f, x, wq, 0.0f, out, OC);
}

/* out = X W^T, plus resid where given; under activations = bf16 the product
 * rounded to bf16 first (gemm_act). */
static void linear_forward_act(gpu_model *g, float *out, const float *resid, const float *inp,
                               const float *w, int N, int C, int OC, int site,
                               const unsigned int *x_amax = nullptr, bool x_filled = false) {
  if (!g->act_bf16) {
    linear_forward(g, out, inp, w, N, C, OC, site, x_amax, x_filled);
    if (resid) gpu_add_inplace(out, resid, (size_t)N * OC, g->s);
    return;
  }
  gtq_operand x, wq;
  forward_operands(g, site, inp, w, N, C, OC, x_amax, x_filled, &x, &wq);
  gemm_act(g, false, true, N, OC, C, x, wq, out, resid);
}

static gtq_operand stored_operand(gpu_model *g, int site, int use, int slot, bool fill,
                                  const uint16_t *x, long rows, long cols,
                                  const unsigned int *amax = nullptr);

/* A layer's X of `site`, in a buffer of its own that nothing writes before
 * the backward's dW reads it (not the one layer's buffer of the lean layout,
 * which the next layer overwrites): its MX image along the tokens made with
 * the forward's along C and held for that read (gtq_mx_hold_twin), where the
 * site's X is an MX image both ways; nothing otherwise. */
static void hold_twin(gpu_model *g, int site, const float *x) {
  gtq_mx_hold_twin(g->gq, site, x);
}

/* dX = dinp_beta dX + dY W, dW += dY^T X: model.c's linear_backward.
 * dy_filled: dY's slot holds this step's operand already (swiglu_backward_fused);
 * dy_amax: dout's amax as its producer folded it (amax_word; of dout_bf16's
 * values, stored_amax_word), or NULL;
 * dout_bf16, inp_bf16: dY or X stored in bf16 (bf16 storage under
 * activations = bf16), read as stored (stored_operand) in place of dout or
 * inp. */
static void linear_backward(gpu_model *g, float *dinp, float *dw, const float *dout,
                            const float *inp, const float *w, int N, int C, int OC, int site,
                            float dinp_beta, bool dy_filled = false,
                            const unsigned int *dy_amax = nullptr,
                            const uint16_t *dout_bf16 = nullptr,
                            const uint16_t *inp_bf16 = nullptr) {
  if ((dout_bf16 || inp_bf16) && !g->act_bf16)
    gtq_check(cudaErrorInvalidValue, "bf16 storage without bf16 activations");
  gtq_operand dy =
      dout_bf16   ? stored_operand(g, site, USE_DX_DY, SLOT_DY, FILL, dout_bf16, N, OC, dy_amax)
      : dy_filled ? gtq_operand_for_gemm(g->gq, site, USE_DX_DY, SLOT_DY, REUSE, dout, OC, N, OC)
                  : fill_operand(g, site, USE_DX_DY, SLOT_DY, dout, N, OC, dy_amax);
  gtq_operand wq = gtq_operand_for_gemm(g->gq, site, USE_DX_W, SLOT_W, REUSE, w, C, OC, C);
  gtq_operand dy2 =
      dout_bf16 ? stored_operand(g, site, USE_DW_DY, SLOT_DY, REUSE, dout_bf16, N, OC)
                : gtq_operand_for_gemm(g->gq, site, USE_DW_DY, SLOT_DY, REUSE, dout, OC, N, OC);
  gtq_operand x = inp_bf16
                      ? stored_operand(g, site, USE_DW_X, SLOT_X, REUSE, inp_bf16, N, C)
                      : gtq_operand_for_gemm(g->gq, site, USE_DW_X, SLOT_X, REUSE, inp, C, N, C);
  if (g->act_bf16) {
    /* model.c's linear_backward_act: each product rounded to bf16 before it
     * is added (dX = dinp_beta dX + bf16(dY W), dW += bf16(dY^T X)) */
    if (dinp_beta != 0.0f && dinp_beta != 1.0f) gtq_check(cudaErrorInvalidValue, "dinp_beta");
    gemm_act(g, false, false, N, C, OC, dy, wq, dinp, dinp_beta != 0.0f ? dinp : nullptr);
    gemm_act(g, true, false, OC, C, N, dy2, x, dw, dw);
    return;
  }
  const bool twin = gtq_mx_twin_begin(g->gq, site, dout);
  gtq_gemm(g->gq, false, false, N, C, OC, 1.0f, dy, wq, dinp_beta, dinp, C);
  gtq_gemm(g->gq, true, false, OC, C, N, 1.0f, dy2, x, 1.0f, dw, C);    /* dW += dY^T X */
  if (twin) gtq_mx_twin_end(g->gq);
}

/* ---------------------------------------- bf16 storage (mlp_bf16, o_bf16) */

/* Layer l's (or the one) tensor of n bf16 values in a float32 arena piece. */
static uint16_t *bf16_at(float *base, size_t l, size_t n) { return (uint16_t *)base + l * n; }

/* The quant of `use` of `site` where bf16 values go into its operand image
 * by a pass of their own over the stored values (bf16_fill_finish) in place
 * of the float32 tensor's fill: an element-wise rounding into bf16 other
 * than bf16's own rne (those values are their own operand), unscaled or
 * per tensor (delayed; current, whose amax pass comes first), the slot's
 * later use reading the slot (gtq_fusable_bf16: outside statistics steps);
 * with allow_sr false not sr (for producers that take their fills in
 * another order than the float32 path); else NULL. */
static const exmy_operand_quant *bf16_image_quant(const gpu_model *g, int site, int use,
                                                  bool allow_sr = true) {
  const int reuse = slot_reuse(use);
  if (site < 0 || reuse < 0 || gtq_use_bf16_identity(g->gq, site, use)) return nullptr;
  const exmy_operand_quant *q = gtq_fusable_bf16(g->gq, site, use, reuse);
  if (!q || !gpu_bf16_operand_serves(&q->format) || (!allow_sr && q->round.mode == EXMY_SR))
    return nullptr;
  return q;
}

/* Whether a tensor stored in bf16 is read by `use` of `site` and by the
 * slot's later use without being widened (outside statistics steps): its
 * own operand both times, or rounded into its image in one pass
 * (bf16_image_quant). */
static bool stored_read_direct(const gpu_model *g, int site, int use) {
  return stored_own_operand(g, site, use) || bf16_image_quant(g, site, use);
}

/* Rounds n bf16 values into the slot of fill w (gtq_fill_bf16_slot) as the
 * image of quant q (NULL: they are their own operand, written there by a
 * producer), under current scaling after the scale of their amax: the word
 * `amax` their producer folded (stored_amax_word), or an amax pass over
 * them; then records the fill as done.  src: the values, stored elsewhere;
 * NULL: written into the slot by a producer, rounded in place. */
static void bf16_fill_finish(gpu_model *g, int site, int use, int slot, gtq_bf16_fill w,
                             const exmy_operand_quant *q, size_t n,
                             const uint16_t *src = nullptr,
                             const unsigned int *amax = nullptr) {
  if (q) {
    const uint16_t *x = src ? src : (const uint16_t *)w.y;
    if (w.current) { /* the amax, then its scale */
      if (amax)
        g->amax_folded++;
      else
        gtq_check(gpu_bf16_storage_amax(x, n, w.amax_bits, g->s), "bf16 storage (amax)");
      gtq_fill_bf16_scale_by_kernel(g->gq, site, use, slot, &w, amax);
    }
    const gpu_bf16_scaling sc = {w.scale_inv, w.amax_bits, w.of_amax};
    gtq_check(gpu_bf16_storage_image(w.y, x, n, &q->format, &w.o, &sc, g->s),
              "bf16 storage (operand image)");
  }
  gtq_fill_bf16_done(g->gq, site, use, slot);
}

/* A tensor stored in bf16 (rows x cols) as use `use` of `site`: outside
 * statistics steps, where its fill would leave it as it is
 * (gtq_use_bf16_identity), the tensor itself; else (fill) rounded into its
 * image in one pass where bf16_image_quant allows it (current scaling: the
 * scale of `amax`, the values' amax as their producer folded it, or of an
 * amax pass), or widened to float32 and filled (in a statistics step the
 * statistics are the fill's), or (!fill) the slot that fill made (an
 * element-wise fill's: the widened copy is not kept). */
static gtq_operand stored_operand(gpu_model *g, int site, int use, int slot, bool fill,
                                  const uint16_t *x, long rows, long cols,
                                  const unsigned int *amax) {
  if (!gtq_collecting(g->gq) && gtq_use_bf16_identity(g->gq, site, use))
    return gtq_operand_bf16(site, use, x, cols);
  const size_t n = (size_t)rows * cols;
  const exmy_operand_quant *q = fill ? bf16_image_quant(g, site, use) : nullptr;
  if (q && n % 8 == 0 && (uintptr_t)x % 16 == 0) { /* the image in one pass over x */
    gtq_bf16_fill w;
    gtq_fill_bf16_slot(g->gq, site, use, slot, n, nullptr, &w);
    bf16_fill_finish(g, site, use, slot, w, q, n, x, amax);
    return gtq_operand_for_gemm(g->gq, site, use, slot, REUSE, nullptr, cols, rows, cols);
  }
  if (!g->wide) g->wide = dalloc<float>((size_t)g->B * g->T * g->cfg.hidden);
  if (fill) gtq_check(exmy_cuda_decode_f32(&g->bf16, x, g->wide, n, g->s), "bf16 to float32");
  return gtq_operand_for_gemm(g->gq, site, use, slot, fill, g->wide, cols, rows, cols);
}

/* out (bf16, N x OC) = bf16(X W^T): linear_forward with the output rounded
 * once by the GEMM, as model.c rounds h1 and h3 under bf16 activations. */
static void linear_forward_bf16_out(gpu_model *g, uint16_t *out, const float *inp,
                                    const float *w, int N, int C, int OC, int site,
                                    const unsigned int *x_amax, bool x_filled = false) {
  gtq_operand x, wq;
  forward_operands(g, site, inp, w, N, C, OC, x_amax, x_filled, &x, &wq);
  gtq_gemm_bf16_out(g->gq, false, true, N, OC, C, x, wq, out, OC);
}

static const exmy_operand_quant *swiglu_dy_images(const gpu_model *g, int l);

/* SwiGLU's backward writing the images of dh1 and dh3 (n values each) into
 * the dY slots of layer l's W1 and W3 sites: the slots reserved as their
 * fills would reserve them, W1's then W3's (the sr stream indices in the
 * float32 path's order; spare1, spare3: gtq_fill_bf16_slot's spare); under
 * current scaling fold_amax(amax1, amax3) folds the gradients' amaxes
 * (NULL for a slot not under current scaling) before their scales are set;
 * then write(w1, w3, sc1, sc3) writes both images, and both fills are
 * recorded as done. */
template <class FoldAmax, class Write>
static void swiglu_backward_into_dy_slots(gpu_model *g, int l, size_t n, void *spare1,
                                          void *spare3, FoldAmax fold_amax, Write write) {
  const int s1 = site_index(g, l, SITE_W1), s3 = site_index(g, l, SITE_W3);
  gtq_bf16_fill w1, w3;
  gtq_fill_bf16_slot(g->gq, s1, USE_DX_DY, SLOT_DY, n, spare1, &w1);
  gtq_fill_bf16_slot(g->gq, s3, USE_DX_DY, SLOT_DY, n, spare3, &w3);
  if (w1.current || w3.current) {
    fold_amax(w1.current ? w1.amax_bits : nullptr, w3.current ? w3.amax_bits : nullptr);
    gtq_fill_bf16_scale(g->gq, s1, USE_DX_DY, SLOT_DY, &w1, nullptr);
    gtq_fill_bf16_scale(g->gq, s3, USE_DX_DY, SLOT_DY, &w3, nullptr);
  }
  const gpu_bf16_scaling sc1 = {w1.scale_inv, w1.amax_bits}, sc3 = {w3.scale_inv, w3.amax_bits};
  write(w1, w3, sc1, sc3);
  gtq_fill_bf16_done(g->gq, s1, USE_DX_DY, SLOT_DY);
  gtq_fill_bf16_done(g->gq, s3, USE_DX_DY, SLOT_DY);
  g->swiglu_fused++;
}

/* The quants of SwiGLU's tensors on bf16 storage written as GEMM operand
 * images by SwiGLU's kernels (gpu_swiglu_*_bf16_storage_image), in place of
 * the stored tensors and the fills' passes, outside statistics steps (whose
 * fills read the stored tensors) and unless act_unfused: hg as W2's X, dh1
 * and dh3 as W1's and W3's dY, where those fills are element-wise roundings
 * into bf16 other than bf16's own rne (that stored tensor is its own
 * operand), unscaled or under delayed scaling (not current scaling: its
 * amax first; those tensors are stored and their fills take the amax that
 * SwiGLU's bf16-storage kernels fold), and dW reads the same slot; else
 * NULL.  `layout`: the question asked when the storage is laid out, before
 * any step. */
static const exmy_operand_quant *hg_image_quant(gpu_model *g, int s2, bool layout = false) {
  if ((!layout && !act_direct(g)) || stored_own_operand(g, s2, USE_FWD_X)) return nullptr;
  const exmy_operand_quant *q = bf16_image_quant(g, s2, USE_FWD_X);
  if (!q || q->scaling.kind == EXMY_SCALING_TENSOR) return nullptr;
  return q;
}
static const exmy_operand_quant *dh_image_quant(gpu_model *g, int l, bool layout = false) {
  const int s1 = site_index(g, l, SITE_W1);
  if ((!layout && !act_direct(g)) || stored_own_operand(g, s1, USE_DX_DY)) return nullptr;
  const exmy_operand_quant *q = swiglu_dy_images(g, l);
  if (!q || q->scaling.kind == EXMY_SCALING_TENSOR) return nullptr;
  return q;
}

/* The feed-forward block's forward on bf16 storage: h1 and h3 from their
 * GEMMs in bf16, hg = SwiGLU in bf16, W2's X as it is; res_out = res_mid +
 * bf16(hg W2^T).  ln2_filled: W1's X slot holds ln2's image already
 * (rmsnorm_into_operand). */
static void mlp_forward_bf16(gpu_model *g, int l, float *res_out, const float *res_mid,
                             const float *ln2, const unsigned int *ln2_amax, bool ln2_filled) {
  const model_config &c = g->cfg;
  const int N = g->B * g->T, C = c.dim, H = c.hidden;
  const size_t BTH = (size_t)N * H;
  const param_tensors &p = g->p;
  const activation_tensors &a = g->acts;
  uint16_t *h1 = bf16_at(a.h1, l, BTH), *h3 = bf16_at(a.h3, l, BTH),
           *hg = bf16_at(a.hg, g->hg_recomputed ? 0 : l, BTH);
  const int s2 = site_index(g, l, SITE_W2);
  gtq_share_begin(g->gq); /* W1 and W3 read ln2 */
  linear_forward_bf16_out(g, h1, ln2, p.w1 + (size_t)l * H * C, N, C, H,
                          site_index(g, l, SITE_W1), ln2_amax, ln2_filled);
  linear_forward_bf16_out(g, h3, ln2, p.w3 + (size_t)l * H * C, N, C, H,
                          site_index(g, l, SITE_W3), ln2_amax);
  gtq_share_end(g->gq);
  gtq_operand x;
  if (const exmy_operand_quant *q = hg_image_quant(g, s2)) { /* hg only as W2's X image */
    gtq_bf16_fill w;
    gtq_fill_bf16_slot(g->gq, s2, USE_FWD_X, SLOT_X, BTH, nullptr, &w);
    const gpu_bf16_scaling sc = {w.scale_inv, w.amax_bits};
    gtq_check(gpu_swiglu_forward_bf16_storage_image(w.y, h1, h3, BTH, &q->format, &w.o, &sc,
                                                    g->s),
              "SwiGLU (bf16 storage, operand image)");
    gtq_fill_bf16_done(g->gq, s2, USE_FWD_X, SLOT_X);
    g->swiglu_fwd_fused++;
    x = gtq_operand_for_gemm(g->gq, s2, USE_FWD_X, SLOT_X, REUSE, nullptr, H, N, H);
  } else {
    unsigned int *hg_amax = stored_amax_word(g, l, AMAX_HG, {SITE_W2}, USE_FWD_X);
    gtq_check(gpu_swiglu_forward_bf16_storage(hg, h1, h3, BTH, hg_amax, g->s),
              "SwiGLU (bf16 storage)");
    x = stored_operand(g, s2, USE_FWD_X, SLOT_X, FILL, hg, N, H, hg_amax);
  }
  gtq_operand wq = fill_operand(g, s2, USE_FWD_W, SLOT_W, p.w2 + (size_t)l * C * H, C, H,
                                weight_word(g, s2));
  gemm_act_residual(g, N, C, H, x, wq, res_out, res_mid); /* res_mid + bf16(hg W2^T) */
}

/* Its backward from W2's output gradient dy_w2 (bf16 values, float32; or
 * W2's dY slot filled already where dy_filled: dres_into_dy):
 * dhg = bf16(dY W2) from the GEMM in bf16, SwiGLU's backward into dh1 and
 * dh3 in bf16 (or straight into W1's and W3's dY images: dh_image_quant),
 * dW2 += bf16(dY^T hg), and W1's and W3's backward reading dh1 and dh3 as
 * stored (or their images); dX into dln. */
static void mlp_backward_bf16(gpu_model *g, int l, const float *dy_w2, const float *ln2,
                              bool dy_filled) {
  const model_config &c = g->cfg;
  const int N = g->B * g->T, C = c.dim, H = c.hidden;
  const size_t BTH = (size_t)N * H;
  const param_tensors &p = g->p, &gr = g->gr;
  const activation_tensors &a = g->acts;
  const grad_act_tensors &d = g->grad_acts;
  uint16_t *h1 = bf16_at(a.h1, l, BTH), *h3 = bf16_at(a.h3, l, BTH),
           *hg = bf16_at(a.hg, g->hg_recomputed ? 0 : l, BTH);
  uint16_t *dhg = bf16_at(d.dhg, 0, BTH), *dh1 = bf16_at(d.dh1, 0, BTH),
           *dh3 = bf16_at(d.dh3, 0, BTH);
  const int s1 = site_index(g, l, SITE_W1), s3 = site_index(g, l, SITE_W3),
            s2 = site_index(g, l, SITE_W2);
  const float *w1 = p.w1 + (size_t)l * H * C, *w3 = p.w3 + (size_t)l * H * C,
              *w2 = p.w2 + (size_t)l * C * H;
  gtq_operand dy = dy_filled
                       ? gtq_operand_for_gemm(g->gq, s2, USE_DX_DY, SLOT_DY, REUSE, dy_w2, C, N, C)
                       : fill_operand(g, s2, USE_DX_DY, SLOT_DY, dy_w2, N, C, nullptr);
  gtq_operand wq = gtq_operand_for_gemm(g->gq, s2, USE_DX_W, SLOT_W, REUSE, w2, H, C, H);
  gtq_gemm_bf16_out(g->gq, false, false, N, H, C, dy, wq, dhg, H);
  /* hg its own operand and not kept (hg_recomputed): SwiGLU's
   * backward writes it again, the forward's bits, in the pass that reads h1
   * and h3 anyway; dW2 comes after it either way (W2's dY slot is untouched
   * in between: the dY images below take dh1's and dh3's buffers) */
  const bool hg_stored = stored_own_operand(g, s2, USE_FWD_X);
  const exmy_operand_quant *dh_image = dh_image_quant(g, l); /* not current scaling */
  unsigned int *dh_amax[2] = {nullptr, nullptr}; /* the stored dh1's and dh3's */
  if (dh_image) { /* dh1's and dh3's buffers lent to their images */
    swiglu_backward_into_dy_slots(
        g, l, BTH, dh1, dh3,
        [](unsigned int *, unsigned int *) {
          gtq_check(cudaErrorInvalidValue, "SwiGLU backward image under current scaling");
        },
        [&](const gtq_bf16_fill &w1, const gtq_bf16_fill &w3, const gpu_bf16_scaling &sc1,
            const gpu_bf16_scaling &sc3) {
          gtq_check(gpu_swiglu_backward_bf16_storage_image(w1.y, w3.y, dhg, h1, h3, BTH,
                                                           &dh_image->format, &w1.o, &w3.o, &sc1,
                                                           &sc3, g->s),
                    "SwiGLU backward (bf16 storage, operand images)");
        });
  } else {
    dh_amax[0] = stored_amax_word(g, l, AMAX_DH1, {SITE_W1}, USE_DX_DY);
    dh_amax[1] = stored_amax_word(g, l, AMAX_DH3, {SITE_W3}, USE_DX_DY);
    gtq_check(gpu_swiglu_backward_bf16_storage(dh1, dh3, g->hg_recomputed && hg_stored ? hg
                                                                                       : nullptr,
                                               dhg, h1, h3, BTH, dh_amax[0], dh_amax[1], g->s),
              "SwiGLU backward (bf16 storage)");
  }
  float *dw2 = gr.w2 + (size_t)l * C * H;
  gtq_operand dy2 = gtq_operand_for_gemm(g->gq, s2, USE_DW_DY, SLOT_DY, REUSE, dy_w2, C, N, C);
  gtq_operand x = hg_stored ? stored_operand(g, s2, USE_DW_X, SLOT_X, REUSE, hg, N, H)
                            : gtq_operand_for_gemm(g->gq, s2, USE_DW_X, SLOT_X, REUSE, nullptr,
                                                   H, N, H);
  gemm_act(g, true, false, C, H, N, dy2, x, dw2, dw2);
  gtq_share_begin(g->gq); /* dW1 and dW3 read ln2 */
  act_sum_begin(g, d.dln);
  for (int i = 0; i < 2; i++)
    linear_backward(g, d.dln, (i ? gr.w3 : gr.w1) + (size_t)l * H * C, nullptr, ln2, i ? w3 : w1,
                    N, C, H, i ? s3 : s1, i ? 1.0f : 0.0f, dh_image != nullptr, dh_amax[i],
                    dh_image ? nullptr : i ? dh3 : dh1);
  act_sum_flush(g);
  gtq_share_end(g->gq);
}

/* The slot of `use` of `site` for n bf16 values, reserved as its fill would
 * reserve it (gtq_fill_bf16_slot) and recorded as filled, for a fill that
 * leaves bf16 values as they are (gtq_use_bf16_identity: unscaled, so
 * gtq_fill_bf16_done has no amax to record and the producer may write the
 * slot after it). */
static void *bf16_rne_slot(gpu_model *g, int site, int use, int slot, size_t n) {
  gtq_bf16_fill w;
  gtq_fill_bf16_slot(g->gq, site, use, slot, n, nullptr, &w);
  gtq_fill_bf16_done(g->gq, site, use, slot);
  return w.y;
}

/* Where RMSNorm's backward writes the residual gradient dres (n values) in
 * bf16 as the dY of `site` (W2's or W_O's: gpu_rmsnorm_backward_bf16),
 * outside statistics steps (gtq_fusable_bf16): where that dY's fills are
 * bf16's own rne of dres (stored_own_operand), its slot, reserved as the
 * fill would reserve it (bf16_rne_slot); under bf16 activations, where
 * they are element-wise roundings of bf16(dres) into another image
 * (bf16_image_quant; not sr, whose stream indices the fill would take after
 * RMSNorm's other outputs), the slot reserved, the image made there in
 * place by rmsnorm_backward_into_dy once RMSNorm has written it (current
 * scaling: the scale of the bf16 values' amax, which RMSNorm folds into
 * the slot's word); else y NULL (act_dy and the fill's pass).  The GEMMs then
 * take the slot as filled. */
struct DresDy {
  void *y = nullptr;
  int site = -1;
  gtq_bf16_fill w = {};
  const exmy_operand_quant *image = nullptr;
};
static DresDy dres_into_dy(gpu_model *g, int site, size_t n) {
  DresDy d;
  if (site < 0 || g->dres_unfused || !gtq_fusable_bf16(g->gq, site, USE_DX_DY, USE_DW_DY))
    return d;
  d.site = site;
  if (stored_own_operand(g, site, USE_DX_DY)) {
    d.y = bf16_rne_slot(g, site, USE_DX_DY, SLOT_DY, n);
  } else if (act_direct(g) && (d.image = bf16_image_quant(g, site, USE_DX_DY, false))) {
    gtq_fill_bf16_slot(g->gq, site, USE_DX_DY, SLOT_DY, n, nullptr, &d.w);
    d.y = d.w.y;
  } else {
    return d;
  }
  g->dres_fused++;
  return d;
}
/* RMSNorm's backward (gpu_rmsnorm_backward_bf16: dres, its gradients of
 * the weight dw and of the input, x, w, rstd) with dres rounded to bf16
 * into d.y, its amax folded into the slot's own word under current scaling
 * (so the fill runs no amax pass), else into `amax` (amax_word's); then
 * d's image made there in place. */
static void rmsnorm_backward_into_dy(gpu_model *g, const DresDy &d, float *dw, const float *x,
                                     const float *w, const float *rstd, unsigned int *amax) {
  const grad_act_tensors &ga = g->grad_acts;
  const int N = g->B * g->T, C = g->cfg.dim;
  unsigned int *own = slot_folded_word(g, d.w, d.image);
  gpu_rmsnorm_backward_bf16(ga.dres, d.y, dw, ga.dln, x, w, rstd, N, C, own ? own : amax, g->s);
  if (d.image)
    bf16_fill_finish(g, d.site, USE_DX_DY, SLOT_DY, d.w, d.image, (size_t)N * C, nullptr, own);
}

/* SwiGLU's forward writing hg straight into W2's X slot as its bf16
 * operand image (gpu_swiglu_forward_bf16), without the float32 hg, where the
 * fill would be an element-wise rounding into bf16, unscaled or under
 * delayed scaling, and dW2 reads that slot too (gtq_fusable_bf16): the same
 * bits, sr stream indices and delayed state as the float32 tensor and the
 * fill's pass.  Not under current scaling (its amax first: the fused pair
 * would move as many bytes as SwiGLU folding the amax and the fill's pass),
 * Smooth-SwiGLU or activations = bf16.  False: nothing done, the caller runs
 * the float32 kernel and the fill. */
static bool swiglu_forward_fused(gpu_model *g, int l, const float *h1, const float *h3,
                                 size_t n) {
  const int s2 = site_index(g, l, SITE_W2);
  if (s2 < 0 || g->swiglu_fwd_unfused || g->act_bf16 || (g->rc && g->rc->swiglu_row_scale))
    return false;
  const exmy_operand_quant *q = gtq_fusable_bf16(g->gq, s2, USE_FWD_X, USE_DW_X);
  if (!q || !gpu_bf16_operand_serves(&q->format) ||
      q->scaling.kind == EXMY_SCALING_TENSOR)
    return false;
  gtq_bf16_fill w;
  gtq_fill_bf16_slot(g->gq, s2, USE_FWD_X, SLOT_X, n, nullptr, &w);
  const gpu_bf16_scaling sc = {w.scale_inv, w.amax_bits};
  gtq_check(gpu_swiglu_forward_bf16(w.y, h1, h3, n, &q->format, &w.o, &sc, g->s),
            "swiglu forward (bf16 operand)");
  gtq_fill_bf16_done(g->gq, s2, USE_FWD_X, SLOT_X);
  g->swiglu_fwd_fused++;
  return true;
}

/* RMSNorm's forward writing its output `out` straight into the X slot of
 * sites[0] as that site's bf16 operand image (gpu_rmsnorm_forward_bf16),
 * inside the share region of the sites that read it (sites, in the order
 * their GEMMs fill), where the fill would be an element-wise rounding into
 * bf16, unscaled or per tensor, and dW reads that slot too
 * (gtq_fusable_bf16): the same bits, sr stream indices and delayed state as
 * the float32 tensor and the fill's pass.  Current scaling wants the
 * output's amax before its scale: a first pass (gpu_rmsnorm_forward_amax,
 * the residual add made there) folds it into `amax` (the word the other
 * sites' fills take: amax_word's) or the fill's own word, then the image is
 * written from the sum.  The image is recorded as the
 * region's fill of `out` (gtq_fill_bf16_slot_lent), so the other sites'
 * fills borrow it as they would the pass's; the float32 out is written too
 * where keep_f32 (kept, or read again in the backward) or another site's
 * fill would not borrow (sr, other formats, share regions off), and left
 * unwritten otherwise.  Not for rows the kernel does not stage
 * (gpu_rmsnorm_forward_bf16_serves).  add: the pending residual add
 * (gpu_add_rmsnorm_forward's); add_bf16 and base: x = base + add_bf16
 * (gemm_act_residual's).  False: nothing done. */
static bool rmsnorm_into_operand(gpu_model *g, float *out, float *rstd, float *x,
                                 const float *add, const float *w, unsigned int *amax,
                                 std::initializer_list<int> sites, bool keep_f32,
                                 const uint16_t *add_bf16 = nullptr,
                                 const float *base = nullptr) {
  const int N = g->B * g->T, C = g->cfg.dim, site = *sites.begin();
  if (site < 0 || g->rmsnorm_fwd_unfused || !gpu_rmsnorm_forward_bf16_serves(C)) return false;
  const exmy_operand_quant *q = gtq_fusable_bf16(g->gq, site, USE_FWD_X, USE_DW_X);
  if (!q || !gpu_bf16_operand_serves(&q->format)) return false;
  /* a word that other sites' fills take is folded by current scaling's
   * first pass only (sites[0] not current-scaled: the float32 path folds it) */
  if (amax && q->scaling.kind != EXMY_SCALING_TENSOR) return false;
  gtq_bf16_fill fill;
  gtq_fill_bf16_slot_lent(g->gq, site, USE_FWD_X, SLOT_X, out, N, C, &fill);
  bool f32 = keep_f32;
  for (int other : sites)
    if (other != site && !gtq_fill_borrows(g->gq, other, USE_FWD_X, SLOT_X, out, N, C))
      f32 = true;
  if (fill.current) { /* the amax (and the residual add), then the image from x */
    gtq_check(gpu_rmsnorm_forward_amax(rstd, x, add, add_bf16 ? base : nullptr, add_bf16, w, N,
                                       C, amax ? amax : fill.amax_bits, g->s),
              "rmsnorm forward (amax)");
    if (amax) g->amax_folded++;
    gtq_fill_bf16_scale_by_kernel(g->gq, site, USE_FWD_X, SLOT_X, &fill, amax);
    add = nullptr, add_bf16 = nullptr;
  }
  const gpu_bf16_scaling sc = {fill.scale_inv, fill.amax_bits, fill.of_amax};
  if (add_bf16)
    gtq_check(gpu_add_bf16_rmsnorm_forward_bf16(fill.y, f32 ? out : nullptr, rstd, x, base,
                                                add_bf16, w, N, C, &q->format, &fill.o, &sc,
                                                g->s),
              "residual add and rmsnorm forward (bf16 operand)");
  else
    gtq_check(gpu_rmsnorm_forward_bf16(fill.y, f32 ? out : nullptr, rstd, x, add, w, N, C,
                                       &q->format, &fill.o, &sc, g->s),
              "rmsnorm forward (bf16 operand)");
  gtq_fill_bf16_done(g->gq, site, USE_FWD_X, SLOT_X);
  g->rmsnorm_fwd_fused++;
  return true;
}

/* The quant of W1's dY where the fills of W1's and W3's dY (layer l) would
 * both be an element-wise rounding into bf16 (gtq_fusable_bf16, dW reading
 * the slot too) in one format served by the bf16 operand kernels, with one
 * set of options but for the sr stream offset, so that one SwiGLU backward
 * kernel may round both gradients into their images; else NULL. */
static const exmy_operand_quant *swiglu_dy_images(const gpu_model *g, int l) {
  const int s1 = site_index(g, l, SITE_W1), s3 = site_index(g, l, SITE_W3);
  if (s1 < 0) return nullptr;
  const exmy_operand_quant *q1 = gtq_fusable_bf16(g->gq, s1, USE_DX_DY, USE_DW_DY),
                           *q3 = gtq_fusable_bf16(g->gq, s3, USE_DX_DY, USE_DW_DY);
  if (!q1 || !q3 || !gpu_bf16_operand_serves(&q1->format)) return nullptr;
  const exmy_format &f1 = q1->format, &f3 = q3->format;
  if (f1.exp_bits != f3.exp_bits || f1.man_bits != f3.man_bits || f1.bias != f3.bias ||
      f1.specials != f3.specials || !gpu_bf16_operand_serves(&f3))
    return nullptr; /* two table rows: equal in these fields, equal in all */
  const exmy_rounding_opts &r1 = q1->round, &r3 = q3->round;
  if (r1.mode != r3.mode || r1.saturate != r3.saturate ||
      r1.flush_subnormals != r3.flush_subnormals || r1.seed != r3.seed ||
      r1.sr_bits != r3.sr_bits)
    return nullptr;
  return q1;
}

/* SwiGLU's backward writing dh1 and dh3 straight into the dY slots of the
 * W1 and W3 sites as their bf16 operand images (gpu_swiglu_backward_bf16),
 * when both fills would be an element-wise rounding into bf16 (unscaled or
 * per-tensor scaled) in one format with one set of options, and no use reads
 * the float32 gradients: the same bits as the float32 tensors and the fills'
 * passes, sr stream indices taken in the same order (W1's, then W3's), the
 * delayed states fed the same amaxes.  Current scaling needs each gradient's
 * amax before its scale: a first kernel finds them from the same inputs
 * (gpu_swiglu_backward_amax: 12 bytes read per element, against the float32
 * gradients' 8 written and the amax passes' 8 read).  With the dY slots
 * shared (lean), W1's image takes the shared buffer and W3's the float32 dh3
 * buffer (`spare`, unused then, twice the size needed) until W3's GEMMs.
 * False: nothing done, the caller runs the float32 kernel and the fills. */
static bool swiglu_backward_fused(gpu_model *g, int l, const float *dout, const float *h1,
                                  const float *h3, size_t n, void *spare) {
  if (g->swiglu_unfused) return false;
  const exmy_operand_quant *q1 = swiglu_dy_images(g, l);
  if (!q1) return false;
  const exmy_format &f1 = q1->format;
  swiglu_backward_into_dy_slots(
      g, l, n, nullptr, spare,
      [&](unsigned int *amax1, unsigned int *amax3) {
        gtq_check(gpu_swiglu_backward_amax(dout, h1, h3, n, amax1, amax3, g->s),
                  "swiglu backward (amax)");
      },
      [&](const gtq_bf16_fill &w1, const gtq_bf16_fill &w3, const gpu_bf16_scaling &sc1,
          const gpu_bf16_scaling &sc3) {
        gtq_check(gpu_swiglu_backward_bf16(w1.y, w3.y, dout, h1, h3, n, &f1, &w1.o, &w3.o, &sc1,
                                           &sc3, g->s),
                  "swiglu backward (bf16 operands)");
      });
  return true;
}

/* ----------------------------------------------------------- attention */

/* Materialised, as model.c: per (sequence, head) products batched in one
 * cuBLAS call each; products that accumulate into a shared key/value head
 * (grouped-query attention) go in `group` calls so no two matrices of one
 * call write the same block. */
static void attention_forward(gpu_model *g, float *out, float *att, const float *q,
                              const float *k, const float *v, int l) {
  const model_config &c = g->cfg;
  const int B = g->B, T = g->T, NH = c.n_heads, NKV = c.n_kv_heads, hs = c.dim / NH,
            C = c.dim, KVC = NKV * hs, group = NH / NKV, N = B * T;
  /* activations = bf16: S = bf16(bf16(Q K^T) / sqrt(hs)) (model.c's
   * attention_forward_act), P in float32, O rounded */
  const float scale = g->act_bf16 ? 1.0f : (float)(1.0 / sqrt((double)hs));
  const int qk = site_index(g, l, SITE_ATT_QK), pv = site_index(g, l, SITE_ATT_PV);
  gtq_operand Q = gtq_operand_for_gemm(g->gq, qk, USE_FWD_X, SLOT_X, FILL, q, C, N, C);
  gtq_operand K = gtq_operand_for_gemm(g->gq, qk, USE_FWD_W, SLOT_W, FILL, k, KVC, N, KVC);
  const long TT = (long)T * T;
  gtq_gemm_batched(g->gq, false, true, T, T, hs, scale, Q, {T * Q.ld, hs, 1}, K,
                   {T * K.ld, hs, group}, 0.0f, att, T, {NH * TT, TT, 1}, B, NH);
  if (g->act_bf16) gpu_scores_act_bf16(att, (size_t)B * NH * TT, hs, g->s);
  gpu_causal_softmax_forward(att, (long)B * NH * T, T, g->s);
  gtq_operand P = gtq_operand_for_gemm(g->gq, pv, USE_FWD_X, SLOT_X, FILL, att, T, (long)B * NH * T, T);
  gtq_operand V = gtq_operand_for_gemm(g->gq, pv, USE_FWD_W, SLOT_W, FILL, v, KVC, N, KVC);
  gtq_gemm_batched(g->gq, false, false, T, hs, T, 1.0f, P, {NH * TT, TT, 1}, V,
                   {T * V.ld, hs, group}, 0.0f, out, C, {(long)T * C, hs, 1}, B, NH);
  act_round(g, out, (size_t)N * C);
}

/* One accumulating product per member j of each key/value group: head
 * h = kv * group + j. */
static gtq_operand shifted(gtq_operand o, long elements) {
  o.ptr = (const char *)o.ptr + elements * (o.bf16 ? 2 : 4);
  return o;
}

static void attention_backward(gpu_model *g, float *dq, float *dk, float *dv, float *datt,
                               const float *dout, const float *att, const float *q,
                               const float *k, const float *v, int l) {
  const model_config &c = g->cfg;
  const int B = g->B, T = g->T, NH = c.n_heads, NKV = c.n_kv_heads, hs = c.dim / NH,
            C = c.dim, KVC = NKV * hs, group = NH / NKV, N = B * T;
  const float scale = (float)(1.0 / sqrt((double)hs));
  const long TT = (long)T * T, rows = (long)B * NH * T;
  /* activations = bf16 (model.c's attention_backward_act): dP and dS as the
   * forward's S, each head's share of dK and dV rounded before the group's
   * sum (act_scratch, laid out as dk), the sums and dQ rounded */
  const bool act = g->act_bf16;
  const int qk = site_index(g, l, SITE_ATT_QK), pv = site_index(g, l, SITE_ATT_PV);
  gtq_ctx *gq = g->gq;
  /* sum (B T x KVC) += x^T y over the heads of each key/value group, x the
   * (b, h) rows of a T x T tensor, y the (b, h) columns of a B T x C one:
   * dV from P and dO, dK from dS and Q */
  auto add_head_shares = [&](const gtq_operand &x, const gtq_operand &y, float *sum) {
    for (int j = 0; j < group; j++) {
      float *dst = act ? g->act_scratch : sum;
      gtq_gemm_batched(gq, true, false, T, hs, T, 1.0f, shifted(x, j * TT),
                       {NH * TT, group * TT, 1}, shifted(y, (long)j * hs),
                       {T * y.ld, (long)group * hs, 1}, act ? 0.0f : 1.0f, dst, KVC,
                       {(long)T * KVC, hs, 1}, B, NKV);
      if (act) {
        act_round(g, dst, (size_t)N * KVC);
        gpu_add_inplace(sum, dst, (size_t)N * KVC, g->s);
      }
    }
  };
  gtq_operand dO = gtq_operand_for_gemm(gq, pv, USE_DX_DY, SLOT_DY, FILL, dout, C, N, C);
  gtq_operand V = gtq_operand_for_gemm(gq, pv, USE_DX_W, SLOT_W, REUSE, v, KVC, N, KVC);
  gtq_operand dO2 = gtq_operand_for_gemm(gq, pv, USE_DW_DY, SLOT_DY, REUSE, dout, C, N, C);
  gtq_operand P = gtq_operand_for_gemm(gq, pv, USE_DW_X, SLOT_X, REUSE, att, T, rows, T);
  /* dP = dO V^T */
  gtq_gemm_batched(gq, false, true, T, T, hs, 1.0f, dO, {T * dO.ld, hs, 1}, V,
                   {T * V.ld, hs, group}, 0.0f, datt, T, {NH * TT, TT, 1}, B, NH);
  add_head_shares(P, dO2, dv); /* dV += P^T dO */
  if (act) {
    act_round(g, dv, (size_t)N * KVC);
    act_round(g, datt, (size_t)B * NH * TT);
    gpu_causal_softmax_backward(datt, att, rows, T, 1.0f, g->s);
    gpu_scores_act_bf16(datt, (size_t)B * NH * TT, hs, g->s);
  } else {
    gpu_causal_softmax_backward(datt, att, rows, T, scale, g->s);
  }
  gtq_operand dS = gtq_operand_for_gemm(gq, qk, USE_DX_DY, SLOT_DY, FILL, datt, T, rows, T);
  gtq_operand K = gtq_operand_for_gemm(gq, qk, USE_DX_W, SLOT_W, REUSE, k, KVC, N, KVC);
  gtq_operand dS2 = gtq_operand_for_gemm(gq, qk, USE_DW_DY, SLOT_DY, REUSE, datt, T, rows, T);
  gtq_operand Q = gtq_operand_for_gemm(gq, qk, USE_DW_X, SLOT_X, REUSE, q, C, N, C);
  /* dQ = dS K */
  gtq_gemm_batched(gq, false, false, T, hs, T, 1.0f, dS, {NH * TT, TT, 1}, K,
                   {T * K.ld, hs, group}, 0.0f, dq, C, {(long)T * C, hs, 1}, B, NH);
  add_head_shares(dS2, Q, dk); /* dK += dS^T Q */
  act_round(g, dq, (size_t)N * C);
  act_round(g, dk, (size_t)N * KVC);
}

/* The fused kernel's bf16 inputs: the site's quantized copy when the recipe
 * quantizes attention (a bf16 slot, checked at construction), else plain bf16. */
static const __nv_bfloat16 *flash_input(gpu_model *g, int site, int use, int slot,
                                        const float *x, long rows, long cols,
                                        __nv_bfloat16 *plain) {
  if (site >= 0 && g->sites[site].op[use].enabled) {
    gtq_operand o = gtq_operand_for_gemm(g->gq, site, use, slot, FILL, x, cols, rows, cols);
    return (const __nv_bfloat16 *)o.ptr;
  }
  /* unquantized attention: plain bf16 (rne), as a bf16 model computes it */
  const exmy_rounding_opts rne = {};
  gtq_check(exmy_cuda_quantize_bf16(&g->bf16, &rne, x, plain, (size_t)rows * cols, g->s), "bf16");
  return plain;
}

/* Whether RoPE rotates q and k (forward) and dq and dk (backward) straight
 * into the bf16 operands that read them (rope_into_operand): under the
 * fused attention, which reads q and k only as bf16, outside statistics
 * steps (whose fills read the float32 tensors) and activations = bf16, head
 * sizes a multiple of 8. */
static bool rope_fusable(const gpu_model *g) {
  return g->attention == GPU_ATTENTION_FLASH && !g->rope_unfused && !g->act_bf16 &&
         !gtq_collecting(g->gq) && (g->cfg.dim / g->cfg.n_heads) % 8 == 0;
}

/* RoPE's forward (backward false) or backward of x (B T rows of nh heads,
 * x itself left as it is) written straight into `slot` of `use` of `site`
 * as its bf16 operand image (gpu_rope_bf16: the bits of the rotated float32
 * tensor and the fill's pass, the sr indices the fill would take), where
 * the fill is an element-wise rounding into bf16 (current scaling: after a
 * pass for the amax alone) and `reuse` reads the slot too; or, for an
 * attention input of unquantized attention (site not quantized, `plain`
 * given), into plain as flash_input rounds it (plain bf16, rne).  Else x
 * rotated in place (amax: its word, amax_word's) and NULL: the caller's
 * fill reads x. */
static const void *rope_into_operand(gpu_model *g, int site, int use, int reuse, int slot,
                                     float *x, int nh, bool backward, __nv_bfloat16 *plain,
                                     unsigned int *amax) {
  const int B = g->B, T = g->T, hs = g->cfg.dim / g->cfg.n_heads;
  const size_t n = (size_t)B * T * nh * hs;
  if (plain && !(site >= 0 && g->sites[site].op[use].enabled)) {
    const exmy_rounding_opts rne = {};
    gtq_check(gpu_rope_bf16(plain, x, g->rope_cos, g->rope_sin, B, T, nh, hs, backward, &g->bf16,
                            &rne, nullptr, g->s),
              "RoPE (bf16 input)");
    g->rope_fused++;
    return plain;
  }
  const exmy_operand_quant *q = site >= 0 ? gtq_fusable_bf16(g->gq, site, use, reuse) : nullptr;
  if (q && gpu_bf16_operand_serves(&q->format)) {
    gtq_bf16_fill w;
    gtq_fill_bf16_slot(g->gq, site, use, slot, n, nullptr, &w);
    if (w.current) { /* the amax first (4 bytes read; the in-place rotation's 8 saved) */
      const gpu_bf16_scaling first = {nullptr, w.amax_bits};
      gtq_check(gpu_rope_bf16(nullptr, x, g->rope_cos, g->rope_sin, B, T, nh, hs, backward,
                              &q->format, &w.o, &first, g->s),
                "RoPE (amax)");
      gtq_fill_bf16_scale(g->gq, site, use, slot, &w, nullptr);
    }
    const gpu_bf16_scaling sc = {w.scale_inv, w.amax_bits};
    gtq_check(gpu_rope_bf16(w.y, x, g->rope_cos, g->rope_sin, B, T, nh, hs, backward, &q->format,
                            &w.o, &sc, g->s),
              "RoPE (bf16 operand)");
    gtq_fill_bf16_done(g->gq, site, use, slot);
    g->rope_fused++;
    return w.y;
  }
  if (backward)
    gpu_rope_backward(x, g->rope_cos, g->rope_sin, B, T, nh, hs, amax, g->s);
  else
    gpu_rope_forward(x, g->rope_cos, g->rope_sin, B, T, nh, hs, g->s);
  return nullptr;
}

/* How the kernel rounds P (the X of the P V product) or dS (the dY of the
 * dS K product): as the materialised path rounds that operand, and under sr
 * with the stream indices it takes there (reserved where it would quantize
 * them: P after K, dS after dO). */
static flash_rounding flash_rounding_of(gpu_model *g, int site, int use) {
  flash_rounding r = {g->p_bits, {}};
  if (site >= 0 && g->sites[site].op[use].enabled) r.round = g->sites[site].op[use].round;
  if (r.round.mode == EXMY_SR)
    r.round.offset = gtq_sr_reserve(g->gq, (uint64_t)g->B * g->cfg.n_heads * g->T * g->T);
  return r;
}

/* out_amax: the word out's amax is folded into (amax_word; of out_bf16's
 * values, stored_amax_word), or NULL. */
/* rotate: q and k as their GEMMs left them, RoPE's forward still to apply
 * (rope_into_operand; rope_fusable), else rotated already. */
/* ready: the kernel's inputs Q, K, V made already (qkv_into_flash_inputs),
 * or NULL.  out_bf16: the output written in bf16 there instead of out. */
static void flash_forward(gpu_model *g, float *out, float *lse, float *q, float *k,
                          const float *v, int l, unsigned int *out_amax, bool rotate,
                          const __nv_bfloat16 *const *ready = nullptr,
                          uint16_t *out_bf16 = nullptr) {
  const model_config &c = g->cfg;
  const int N = g->B * g->T, hs = c.dim / c.n_heads, KVC = c.n_kv_heads * hs;
  const int qk = site_index(g, l, SITE_ATT_QK), pv = site_index(g, l, SITE_ATT_PV);
  const size_t BTC = (size_t)N * c.dim, BTK = (size_t)N * KVC;
  /* q or k (nh heads) as the kernel's input: rotated into it, or the fill */
  auto qk_input = [&](int use, int reuse, int slot, float *x, int nh, __nv_bfloat16 *plain) {
    const void *r =
        rotate ? rope_into_operand(g, qk, use, reuse, slot, x, nh, false, plain, nullptr) : nullptr;
    return r ? (const __nv_bfloat16 *)r : flash_input(g, qk, use, slot, x, N, nh * hs, plain);
  };
  const __nv_bfloat16 *Q =
      ready ? ready[0] : qk_input(USE_FWD_X, USE_DW_X, SLOT_X, q, c.n_heads, g->fq + l * BTC);
  const __nv_bfloat16 *K =
      ready ? ready[1] : qk_input(USE_FWD_W, USE_DX_W, SLOT_W, k, c.n_kv_heads, g->fk + l * BTK);
  const flash_rounding p = flash_rounding_of(g, pv, USE_FWD_X);
  g->p_offsets[l] = p.round.offset;
  const __nv_bfloat16 *V =
      ready ? ready[2] : flash_input(g, pv, USE_FWD_W, SLOT_W, v, N, KVC, g->fv + l * BTK);
  if (out_bf16)
    gtq_check(flash_attention_forward_bf16((__nv_bfloat16 *)out_bf16, lse, Q, K, V, g->B, g->T,
                                           c.n_heads, c.n_kv_heads, hs, &p, out_amax, g->s),
              "flash_attention_forward (bf16 output)");
  else
    gtq_check(flash_attention_forward(out, lse, Q, K, V, g->B, g->T, c.n_heads, c.n_kv_heads,
                                      hs, &p, out_amax, g->s),
              "flash_attention_forward");
}

/* Where the fused kernel reads its input for `use` of attention site `site`
 * (n bf16 values): under quantized attention the site's slot, reserved as
 * its fill would reserve it (gtq_fill_bf16_slot, into *w; *image: the quant
 * whose image the values written there become, bf16_image_quant, or NULL
 * where they are the input as they are), else the plain copy (w->y NULL).
 * flash_input_finish, once the values are written, rounds them (qkv_bf16
 * allows no other fills; the fused kernel takes no scaled operands). */
static __nv_bfloat16 *flash_input_slot(gpu_model *g, int site, int use, int slot, size_t n,
                                       __nv_bfloat16 *plain, gtq_bf16_fill *w,
                                       const exmy_operand_quant **image) {
  *w = {};
  *image = nullptr;
  if (site < 0 || !g->sites[site].op[use].enabled) return plain;
  if (!gtq_use_bf16_identity(g->gq, site, use) &&
      !(*image = bf16_image_quant(g, site, use, false)))
    gtq_check(cudaErrorInvalidValue, "the fused attention's bf16 input: a fill qkv_bf16 refuses");
  gtq_fill_bf16_slot(g->gq, site, use, slot, n, nullptr, w);
  return (__nv_bfloat16 *)w->y;
}
static void flash_input_finish(gpu_model *g, int site, int use, int slot, size_t n,
                               const gtq_bf16_fill &w, const exmy_operand_quant *image) {
  if (w.y) bf16_fill_finish(g, site, use, slot, w, image, n);
}

/* Under qkv_bf16: layer l's q, k and v from their GEMMs in bf16 (the
 * product rounded once, as gemm_act rounds it), q and k rotated by RoPE on
 * bf16 storage straight into the fused kernel's inputs (the bits of the
 * float32 path: RoPE of bf16 activations rounds every result, and the
 * inputs, plain or the attention sites' slots, are the fills' images of
 * those bf16 values, rounded in place where they are not their own), v
 * straight into its input; in[0..2] their addresses.  qs and ks: the
 * layer's float32 q and k buffers, holding the unrotated bf16 q and k
 * meanwhile (nothing else reads them under lean activations).  ln1_filled:
 * Q's X slot holds ln1's image already (rmsnorm_into_operand). */
static void qkv_into_flash_inputs(gpu_model *g, int l, const float *ln1,
                                  const unsigned int *ln1_amax, bool ln1_filled, float *qs,
                                  float *ks, const __nv_bfloat16 *in[3]) {
  const model_config &c = g->cfg;
  const int N = g->B * g->T, C = c.dim, hs = C / c.n_heads, KVC = c.n_kv_heads * hs;
  const size_t BTC = (size_t)N * C, BTK = (size_t)N * KVC;
  const int qk = site_index(g, l, SITE_ATT_QK), pv = site_index(g, l, SITE_ATT_PV);
  const param_tensors &p = g->p;
  uint16_t *qb = (uint16_t *)qs, *kb = (uint16_t *)ks;
  /* the inputs' slots in the float32 path's order of fills: Q, K, V */
  gtq_bf16_fill w[3];
  const exmy_operand_quant *image[3];
  __nv_bfloat16 *Q = flash_input_slot(g, qk, USE_FWD_X, SLOT_X, BTC, g->fq + l * BTC, &w[0],
                                      &image[0]);
  __nv_bfloat16 *K = flash_input_slot(g, qk, USE_FWD_W, SLOT_W, BTK, g->fk + l * BTK, &w[1],
                                      &image[1]);
  __nv_bfloat16 *V = flash_input_slot(g, pv, USE_FWD_W, SLOT_W, BTK, g->fv + l * BTK, &w[2],
                                      &image[2]);
  linear_forward_bf16_out(g, qb, ln1, p.wq + (size_t)l * C * C, N, C, C,
                          site_index(g, l, SITE_Q), ln1_amax, ln1_filled);
  linear_forward_bf16_out(g, kb, ln1, p.wk + (size_t)l * KVC * C, N, C, KVC,
                          site_index(g, l, SITE_K), ln1_amax);
  linear_forward_bf16_out(g, (uint16_t *)V, ln1, p.wv + (size_t)l * KVC * C, N, C, KVC,
                          site_index(g, l, SITE_V), ln1_amax);
  gtq_check(gpu_rope_bf16_storage((uint16_t *)Q, qb, g->rope_cos, g->rope_sin, g->B, g->T,
                                  c.n_heads, hs, false, nullptr, g->s),
            "RoPE (bf16 storage)");
  gtq_check(gpu_rope_bf16_storage((uint16_t *)K, kb, g->rope_cos, g->rope_sin, g->B, g->T,
                                  c.n_kv_heads, hs, false, nullptr, g->s),
            "RoPE (bf16 storage)");
  flash_input_finish(g, qk, USE_FWD_X, SLOT_X, BTC, w[0], image[0]);
  flash_input_finish(g, qk, USE_FWD_W, SLOT_W, BTK, w[1], image[1]);
  flash_input_finish(g, pv, USE_FWD_W, SLOT_W, BTK, w[2], image[2]);
  in[0] = Q, in[1] = K, in[2] = V;
  g->act_fused += 3;
}

/* Whether the fused attention's dO input of layer l is bf16's own rne of
 * dout (plain, or the PV site's fill gtq_use_bf16_identity), so that a bf16
 * dout is that input as it is. */
static bool flash_do_identity(const gpu_model *g, int l) {
  const int pv = site_index(g, l, SITE_ATT_PV);
  return pv < 0 || !g->sites[pv].op[USE_DX_DY].enabled ||
         gtq_use_bf16_identity(g->gq, pv, USE_DX_DY);
}

/* Whether dqkv_into_operands makes the bits of Q's, K's and V's dY fills
 * of layer l: each dY, written in bf16, read as stored (stored_read_direct:
 * its own operand, or rounded into its image in place). */
static bool dqkv_direct_ok(const gpu_model *g, int l) {
  bool ok = true;
  for (int kind : {SITE_Q, SITE_K, SITE_V}) {
    const int site = site_index(g, l, kind);
    ok = ok && stored_read_direct(g, site, USE_DX_DY);
  }
  return ok;
}

/* Layer l's backward through Q, K and V from the fused kernel's dq, dk, dv
 * written in bf16 (act_round's bits) into their buffers' memory, under
 * qkv_bf16 where dqkv_direct_ok holds: dq and dk rotated back on bf16
 * storage (RoPE's bits) straight into Q's and K's dY slots and rounded
 * there into their images where they are not their own (bf16_image_quant), each
 * just before its GEMMs (one dY buffer under lean activations); dv read as
 * stored (stored_operand; dv_amax: its amax as the kernel folded it, or
 * NULL).  Inside the caller's share region for ln1. */
static void dqkv_into_operands(gpu_model *g, int l, const float *ln1,
                               const unsigned int *dv_amax) {
  const model_config &c = g->cfg;
  const int N = g->B * g->T, C = c.dim, hs = C / c.n_heads, KVC = c.n_kv_heads * hs;
  const param_tensors &p = g->p, &gr = g->gr;
  const grad_act_tensors &d = g->grad_acts;
  for (int i = 0; i < 2; i++) { /* dq, then dk */
    const int kind = i ? SITE_K : SITE_Q, site = site_index(g, l, kind), width = i ? KVC : C;
    const size_t n = (size_t)N * width;
    float *dx = i ? d.dk : d.dq;
    const exmy_operand_quant *image = bf16_image_quant(g, site, USE_DX_DY); /* NULL: its own */
    gtq_bf16_fill w;
    gtq_fill_bf16_slot(g->gq, site, USE_DX_DY, SLOT_DY, n, nullptr, &w);
    unsigned int *folded = slot_folded_word(g, w, image);
    gtq_check(gpu_rope_bf16_storage((uint16_t *)w.y, (const uint16_t *)dx, g->rope_cos,
                                    g->rope_sin, g->B, g->T, i ? c.n_kv_heads : c.n_heads, hs,
                                    true, folded, g->s),
              "RoPE backward (bf16 storage)");
    bf16_fill_finish(g, site, USE_DX_DY, SLOT_DY, w, image, n, nullptr, folded);
    linear_backward(g, d.dln, (i ? gr.wk : gr.wq) + (size_t)l * width * C, dx, ln1,
                    (i ? p.wk : p.wq) + (size_t)l * width * C, N, C, width, site, i ? 1 : 0,
                    true);
  }
  linear_backward(g, d.dln, gr.wv + (size_t)l * KVC * C, nullptr, ln1,
                  p.wv + (size_t)l * KVC * C, N, C, KVC, site_index(g, l, SITE_V), 1, false,
                  dv_amax, (const uint16_t *)d.dv);
  g->act_fused += 3;
}

/* dv_amax: the word dv's amax is folded into (amax_word; of the bf16 values
 * under grads_bf16, stored_amax_word), or NULL. */
/* out_bf16: O stored in bf16 (read in place of out), or NULL. */
/* dO_bf16: the kernel's dO input made already (bf16 values that its fill
 * would leave as they are: flash_do_identity), or NULL: dout's fill.
 * grads_bf16: dq, dk, dv written in bf16 into their own buffers' memory. */
static void flash_backward(gpu_model *g, float *dq, float *dk, float *dv, const float *dout,
                           const float *out, const uint16_t *out_bf16, const float *lse,
                           const float *q, const float *k, const float *v, int l,
                           unsigned int *dv_amax, const __nv_bfloat16 *dO_bf16 = nullptr,
                           bool grads_bf16 = false) {
  const model_config &c = g->cfg;
  const int N = g->B * g->T, hs = c.dim / c.n_heads, KVC = c.n_kv_heads * hs;
  const int qk = site_index(g, l, SITE_ATT_QK), pv = site_index(g, l, SITE_ATT_PV);
  const size_t BTC = (size_t)N * c.dim, BTK = (size_t)N * KVC;
  /* the quantized copies of the forward, or the plain ones kept per layer */
  auto kept = [&](int site, int use, int slot, __nv_bfloat16 *plain) -> const __nv_bfloat16 * {
    if (site >= 0 && g->sites[site].op[use].enabled)
      return (const __nv_bfloat16 *)gtq_operand_for_gemm(g->gq, site, use, slot, REUSE, nullptr, 0,
                                                         0, 0).ptr;
    return plain;
  };
  (void)q, (void)k, (void)v;
  const __nv_bfloat16 *Q = kept(qk, USE_DW_X, SLOT_X, g->fq + l * BTC);
  const __nv_bfloat16 *K = kept(qk, USE_DX_W, SLOT_W, g->fk + l * BTK);
  const __nv_bfloat16 *V = kept(pv, USE_DX_W, SLOT_W, g->fv + l * BTK);
  const __nv_bfloat16 *dO =
      dO_bf16 ? dO_bf16 : flash_input(g, pv, USE_DX_DY, SLOT_DY, dout, N, c.dim, g->fdo);
  flash_rounding p = {g->p_bits, {}};
  if (pv >= 0 && g->sites[pv].op[USE_FWD_X].enabled) p.round = g->sites[pv].op[USE_FWD_X].round;
  p.round.offset = g->p_offsets[l]; /* the forward's words for the same elements */
  const flash_rounding ds = flash_rounding_of(g, qk, USE_DX_DY);
  flash_act_bf16 act = {g->act_bf16, (const __nv_bfloat16 *)out_bf16, {}};
  if (grads_bf16)
    act.grads_bf16[0] = (__nv_bfloat16 *)dq, act.grads_bf16[1] = (__nv_bfloat16 *)dk,
    act.grads_bf16[2] = (__nv_bfloat16 *)dv;
  gtq_check(flash_attention_backward(dq, dk, dv, dO, out_bf16 ? nullptr : out, lse, Q, K, V, g->B,
                                     g->T, c.n_heads, c.n_kv_heads, hs, &p, &ds,
                                     g->flash_scratch, dv_amax, &act, g->s),
            "flash_attention_backward");
}

/* --------------------------------------------------------------- model */


/* Whether the fused kernel can stand for the attention sites of this recipe:
 * unquantized attention (bf16 inputs, as a bf16 model computes it), or every
 * attention operand unscaled, without saturation, in a format of the BF16
 * path with float32's exponent range (bf16, E8M3..E8M6) and one rounding mode
 * of rne, rz and sr (sr: T % 4 == 0), whose mantissa width and mode the
 * kernel then applies to P and dS too. */
static const char *flash_recipe_check(const tq_site *sites, const model_config &c, int T,
                                      int *p_bits) {
  *p_bits = 7;
  if (!sites) return NULL;
  int bits = -1;
  exmy_rounding mode = EXMY_RNE;
  for (int l = 0; l < c.n_layers; l++)
    for (int kind = SITE_ATT_QK; kind <= SITE_ATT_PV; kind++)
      for (int u = 0; u < USES_PER_SITE; u++) {
        const exmy_operand_quant &q = sites[l * SITES_PER_LAYER + kind].op[u];
        if (!q.enabled) {
          if (bits >= 0) return "attention operands partly quantized";
          bits = -2;
          continue;
        }
        if (bits == -2) return "attention operands partly quantized";
        if (sites[l * SITES_PER_LAYER + kind].accum.group != EXMY_ACCUM_FP32)
          return "attention_kernel = flash accumulates in float32: the recipe's accumulate "
                 "model needs attention_kernel = materialized";
        const exmy_rounding m = q.round.mode;
        if (q.scaling.kind != EXMY_SCALING_NONE ||
            (m != EXMY_RNE && m != EXMY_RZ && m != EXMY_SR) || q.format.exp_bits != 8 ||
            q.format.man_bits > 7 || (m != EXMY_RNE && q.format.man_bits < 1) ||
            q.round.flush_subnormals || q.round.saturate || !exmy_cuda_bf16_exact(&q.format))
          return "attention_kernel = flash needs the attention operands unquantized or in an "
                 "E8 format of <= 7 mantissa bits, unscaled, unsaturated, rne, rz or sr";
        if (bits >= 0 && bits != q.format.man_bits) return "attention formats differ";
        if (bits >= 0 && mode != m) return "attention rounding modes differ";
        bits = q.format.man_bits;
        mode = m;
      }
  if (bits >= 0 && mode == EXMY_SR && T % 4)
    return "attention_kernel = flash with sr needs T to be a multiple of 4";
  if (bits >= 0) *p_bits = bits;
  return NULL;
}

static bool bf16_storage_for_new = true;
extern "C" void gpu_model_bf16_storage_for_new(bool on) { bf16_storage_for_new = on; }
extern "C" int gpu_model_bf16_storage(const gpu_model *g) {
  return (g->mlp_bf16 ? 1 : 0) | (g->o_bf16 ? 2 : 0);
}

extern "C" gpu_model *gpu_model_new(const model *m, const recipe *rc, tq_site *sites,
                                    int n_sites, int B, int T, gpu_attention_kind attention,
                                    char *err, size_t errlen) {
  return gpu_model_new_lean(m, rc, sites, n_sites, B, T, attention, true, err, errlen);
}

extern "C" gpu_model *gpu_model_new_lean(const model *m, const recipe *rc, tq_site *sites,
                                         int n_sites, int B, int T,
                                         gpu_attention_kind attention, int lean_activations,
                                         char *err, size_t errlen) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices < 1) {
    snprintf(err, errlen, "no CUDA GPU found (device = gpu)");
    return NULL;
  }
  if (exmy_cuda_cublas_load(err, errlen)) return NULL;
  const model_config &c = m->cfg;
  int p_bits = 7;
  if (attention == GPU_ATTENTION_FLASH) {
    const int hs = c.dim / c.n_heads;
    if (!flash_attention_supported(hs, T)) {
      snprintf(err, errlen, "attention_kernel = flash does not serve head size %d, T = %d", hs, T);
      return NULL;
    }
    const char *why = flash_recipe_check(sites, c, T, &p_bits);
    if (why) {
      snprintf(err, errlen, "%s", why);
      return NULL;
    }
  }
  const bool act_bf16 = rc && rc->bf16_activations;
  if (act_bf16 && rc->swiglu_row_scale) {
    snprintf(err, errlen, "activations = bf16 with swiglu_scale = row: not on the GPU");
    return NULL;
  }
  /* bf16 activations round each head's share of dK and dV before a
   * key/value group's sum: the fused kernel does so under bf16 P and dS */
  if (act_bf16 && attention == GPU_ATTENTION_FLASH && c.n_kv_heads != c.n_heads) {
    const exmy_operand_quant *pq = sites ? &sites[SITE_ATT_PV].op[USE_FWD_X] : nullptr;
    if (p_bits != 7 || (pq && pq->enabled && pq->round.mode != EXMY_RNE)) {
      snprintf(err, errlen, "activations = bf16 with grouped-query attention (n_kv_heads %d < "
                            "n_heads %d) and attention operands other than bf16 rne: "
                            "attention_kernel = materialized only",
               c.n_kv_heads, c.n_heads);
      return NULL;
    }
  }
  gpu_model *g = new gpu_model();
  g->cfg = c;
  g->B = B;
  g->T = T;
  g->attention = attention;
  g->p_bits = p_bits;
  g->p_offsets = (uint64_t *)calloc(c.n_layers, sizeof(uint64_t));
  exmy_format_parse("bf16", &g->bf16);
  g->rc = rc;
  g->sites = sites;
  g->n_sites = sites ? n_sites : 0;
  gtq_check(cudaStreamCreateWithFlags(&g->s, cudaStreamNonBlocking), "stream");
  g->num_params = m->num_params;
  memcpy(g->param_sizes, m->param_sizes, sizeof g->param_sizes);
  g->params_mem = dalloc<float>(g->num_params);
  g->grads_mem = dalloc<float>(g->num_params);
  g->mom1 = dalloc<float>(g->num_params);
  g->mom2 = dalloc<float>(g->num_params);
  model_point_params(&g->p, g->params_mem, g->param_sizes);
  model_point_params(&g->gr, g->grads_mem, g->param_sizes);

  const size_t L = c.n_layers, C = c.dim, V = c.vocab, NH = c.n_heads;
  const size_t hs = C / NH, KVC = c.n_kv_heads * hs, BT = (size_t)B * T;
  /* the arena: the activations as the host model lays them out, then the rest */
  size_t act[NUM_ACT_TENSORS], grad_act[NUM_GRAD_ACT_TENSORS];
  model_act_sizes(&c, B, T, act, grad_act);
  const bool flash = attention == GPU_ATTENTION_FLASH;
  if (flash) act[ACT_ATT] = grad_act[GRAD_ACT_DATT] = 0; /* the fused kernel keeps no scores */
  g->lean = flash && lean_activations > 0;
  g->gq = gtq_new(sites, n_sites, g->s);
  if (g->lean) {
    /* one layer of q, k, v; of ln1, ln2 and hg one layer where no backward
     * GEMM reads the float32 tensor (it reads the slot the forward filled),
     * else every layer's (lean_activations = 1) or one recomputed in the
     * backward (2: the least memory, a RMSNorm or SwiGLU pass more) */
    auto reads = [&](int kind) { /* a dW GEMM's X reads the float32 tensor */
      bool any = false;
      for (int l = 0; l < c.n_layers; l++)
        any = any || gtq_use_reads_source(g->gq, site_index(g, l, kind), USE_DW_X);
      return any;
    };
    const bool recompute = lean_activations >= 2;
    const bool read_ln1 = reads(SITE_Q) || reads(SITE_K) || reads(SITE_V);
    const bool read_ln2 = reads(SITE_W1) || reads(SITE_W3), read_hg = reads(SITE_W2);
    g->recompute_ln1 = read_ln1 && recompute;
    g->recompute_ln2 = read_ln2 && recompute;
    g->recompute_hg = read_hg && recompute;
    g->keep_ln1 = read_ln1 && !recompute;
    g->keep_ln2 = read_ln2 && !recompute;
    g->keep_hg = read_hg && !recompute;
    act[ACT_Q] = BT * C;
    act[ACT_K] = act[ACT_V] = BT * KVC;
    if (!g->keep_ln1) act[ACT_LN1] = BT * C;
    if (!g->keep_ln2) act[ACT_LN2] = BT * C;
    if (!g->keep_hg) act[ACT_HG] = BT * c.hidden;
  }
  /* bf16 activations: SwiGLU's tensors stored in bf16 where every GEMM that
   * writes one takes bf16 images through cuBLAS and every GEMM that reads
   * one takes it as it is or through its image made in one pass
   * (gpu_model.mlp_bf16) */
  if (act_bf16 && g->lean && bf16_storage_for_new && sites && c.hidden % 8 == 0) {
    bool ok = true;
    for (int l = 0; ok && l < c.n_layers; l++) {
      const int s1 = site_index(g, l, SITE_W1), s3 = site_index(g, l, SITE_W3),
                s2 = site_index(g, l, SITE_W2);
      for (int s13 : {s1, s3})
        ok = ok && gtq_use_bf16_cublas(g->gq, s13, USE_FWD_X) &&
             gtq_use_bf16_cublas(g->gq, s13, USE_FWD_W);
      /* SwiGLU's outputs: their own operands, or their images made by
       * SwiGLU's kernels (dh_image_quant, hg_image_quant) or in a pass of
       * their own (statistics steps fill from the stored tensors) */
      ok = ok && stored_read_direct(g, s1, USE_DX_DY) && stored_read_direct(g, s3, USE_DX_DY);
      ok = ok && gtq_use_bf16_cublas(g->gq, s2, USE_DX_DY) &&
           gtq_use_bf16_cublas(g->gq, s2, USE_DX_W) && stored_read_direct(g, s2, USE_FWD_X);
    }
    g->mlp_bf16 = ok;
  }
  /* hg remade costs one write of it a layer, and saves L - 1 layers of it
   * (at 120m 1.4 GiB, a tenth of the step's memory) */
  g->hg_recomputed = g->mlp_bf16;
  if (act_bf16 && g->lean && bf16_storage_for_new && sites && C % 8 == 0) {
    bool ok = true;
    for (int l = 0; ok && l < c.n_layers; l++) {
      /* O its own operand, or rounded into W_O's image in a pass of its own
       * (stored_operand; statistics steps fill from the stored tensor) */
      ok = stored_read_direct(g, site_index(g, l, SITE_O), USE_FWD_X);
    }
    g->o_bf16 = ok;
  }
  /* q, k, v in bf16 from their GEMMs into the fused kernel's plain inputs
   * (qkv_into_flash_inputs): Q's, K's and V's forward operands bf16 images
   * through cuBLAS (unscaled or per-tensor scaled) */
  if (act_bf16 && g->lean && bf16_storage_for_new && sites && flash &&
      (C / c.n_heads) % 8 == 0) {
    bool ok = true;
    for (int l = 0; ok && l < c.n_layers; l++) {
      for (int kind : {SITE_Q, SITE_K, SITE_V})
        ok = ok && gtq_use_bf16_cublas(g->gq, site_index(g, l, kind), USE_FWD_X) &&
             gtq_use_bf16_cublas(g->gq, site_index(g, l, kind), USE_FWD_W);
      /* quantized attention: inputs whose fills leave bf16 values as they
       * are, or round them into their images in place (not sr: these fills
       * are taken in another order than the float32 path's, around P's) */
      const int qk = site_index(g, l, SITE_ATT_QK), pv = site_index(g, l, SITE_ATT_PV);
      if (sites[qk].op[USE_FWD_X].enabled)
        for (const auto &[site, use] : {std::pair{qk, USE_FWD_X}, std::pair{qk, USE_FWD_W},
                                        std::pair{pv, USE_FWD_W}})
          ok = ok && (gtq_use_bf16_identity(g->gq, site, use) ||
                      bf16_image_quant(g, site, use, false));
    }
    g->qkv_bf16 = ok;
  }
  if (g->o_bf16) act[ACT_ATTY] = L * BT * C / 2;
  if (g->mlp_bf16) { /* bf16 values: half a float32 piece each */
    act[ACT_H1] = act[ACT_H3] = L * BT * c.hidden / 2;
    act[ACT_HG] = (g->hg_recomputed ? 1 : L) * BT * c.hidden / 2;
    grad_act[GRAD_ACT_DH1] = grad_act[GRAD_ACT_DH3] = grad_act[GRAD_ACT_DHG] = BT * c.hidden / 2;
  }
  /* plain bf16 copies kept per layer for the backward (unquantized attention) */
  const bool plain_bf16 = flash && !(sites && sites[SITE_ATT_QK].op[USE_FWD_X].enabled);
  size_t end = model_point_acts(&g->acts, &g->grad_acts, NULL, act, grad_act);
  auto take = [&end](size_t bytes) { /* the byte offset of the next piece */
    const size_t at = end;
    end += arena_round_up(bytes);
    return at;
  };
  const size_t bf = sizeof(__nv_bfloat16);
  const size_t at_lse = take(flash ? sizeof(float) * L * B * NH * T : 0),
               at_fq = take(plain_bf16 ? bf * L * BT * C : 0),
               at_fk = take(plain_bf16 ? bf * L * BT * KVC : 0),
               at_fv = take(plain_bf16 ? bf * L * BT * KVC : 0),
               at_fdo = take(flash ? bf * BT * C : 0),
               at_o_f32 = take(g->o_bf16 ? sizeof(float) * BT * C : 0),
               at_flash_scratch =
                   take(flash ? flash_attention_scratch_bytes(B, T, NH, c.n_kv_heads, hs) : 0),
               at_rope_cos = take(sizeof(float) * T * hs / 2),
               at_rope_sin = take(sizeof(float) * T * hs / 2),
               at_tokens = take(sizeof(int) * BT), at_targets = take(sizeof(int) * BT),
               at_bucket_start = take(sizeof(int) * (V + 1)),
               at_bucket_pos = take(sizeof(int) * BT), at_loss_dev = take(sizeof(double)),
               at_logit_phi = take(sizeof(float) * LOGIT_SHARPNESS_NUM_EPS * BT),
               at_sumsq = take(sizeof(double)),
               at_sumsq_scratch = take(sizeof(double) * gpu_sumsq_scratch(g->num_params));
  char *arena = dalloc<char>(end); /* cudaMalloc: 256-byte aligned, zeroed */
  g->arena = arena;
  g->arena_bytes = end;
  model_point_acts(&g->acts, &g->grad_acts, arena, act, grad_act);
  g->lse = (float *)(arena + at_lse);
  g->fq = (__nv_bfloat16 *)(arena + at_fq);
  g->fk = (__nv_bfloat16 *)(arena + at_fk);
  g->fv = (__nv_bfloat16 *)(arena + at_fv);
  g->fdo = (__nv_bfloat16 *)(arena + at_fdo);
  g->o_f32 = g->o_bf16 ? (float *)(arena + at_o_f32) : nullptr;
  g->flash_scratch = arena + at_flash_scratch;
  g->rope_cos = (float *)(arena + at_rope_cos);
  g->rope_sin = (float *)(arena + at_rope_sin);
  g->tokens = (int *)(arena + at_tokens);
  g->targets = (int *)(arena + at_targets);
  g->bucket_start = (int *)(arena + at_bucket_start);
  g->bucket_pos = (int *)(arena + at_bucket_pos);
  g->loss_dev = (double *)(arena + at_loss_dev);
  g->logit_phi = (float *)(arena + at_logit_phi);
  g->act_bf16 = act_bf16;
  if (act_bf16) {
    /* model.c's bf16_scratch: the largest of a linear layer's dX (B T x C),
     * its dW (widest x C) and a key/value head group's gradient (B T x KVC)
     * (the amaxes folded by producers: amax_word) */
    const size_t widest = (size_t)(c.hidden > c.vocab ? c.hidden : c.vocab);
    size_t n = BT * C;
    if (widest * C > n) n = widest * C;
    /* and act_sum's three B T x C products in bf16 with a dW after them */
    n = std::max(n, (kActSumTerms * BT * C + widest * C + 1) / 2);
    g->act_scratch = dalloc<float>(n);
    g->act_scratch_n = n;
  }
  g->sumsq = (double *)(arena + at_sumsq);
  g->sumsq_scratch = (double *)(arena + at_sumsq_scratch);
  /* RoPE tables computed by the host code of model.c, so both devices rotate alike */
  float *cos_t = (float *)malloc(sizeof(float) * T * hs / 2),
        *sin_t = (float *)malloc(sizeof(float) * T * hs / 2);
  rope_tables(cos_t, sin_t, T, (int)hs, 10000.0);
  gtq_check(cudaMemcpy(g->rope_cos, cos_t, sizeof(float) * T * hs / 2, cudaMemcpyHostToDevice), "rope");
  gtq_check(cudaMemcpy(g->rope_sin, sin_t, sizeof(float) * T * hs / 2, cudaMemcpyHostToDevice), "rope");
  free(cos_t);
  free(sin_t);
  g->h_bucket_start = (int *)malloc(sizeof(int) * (V + 1));
  g->h_bucket_pos = (int *)malloc(sizeof(int) * BT);
  if (g->lean) {
    /* each site's dY is filled and read by its GEMMs before the next site's
     * is filled (linear_backward, flash_backward): one buffer for all */
    gtq_share_dy_slots(g->gq);
  }
  /* the amax words, where some fill is current-scaled on the BF16 path */
  bool current = false;
  for (int i = 0; i < g->n_sites; i++)
    for (int u = 0; u < USES_PER_SITE; u++) current = current || gtq_fill_takes_amax(g->gq, i, u);
  if (current) g->amax_words = dalloc<unsigned int>(L * AMAX_PER_LAYER + 1);
  bool weights_current = false;
  for (int i = 0; i < g->n_sites; i++)
    weights_current = weights_current || gtq_fill_takes_amax_outside_stats(g->gq, i, USE_FWD_W);
  if (weights_current) g->weight_amax = dalloc<unsigned int>(g->n_sites);
  const int n_grad = rc && rc->grad_quant
                         ? recipe_grad_stretches(rc, &c, g->param_sizes, NULL, NULL) : 0;
  if (n_grad > 0 && gpu_quantize_matrices_serves(&rc->grad_format, &grad_rounding)) {
    std::vector<size_t> offset(n_grad), length(n_grad);
    recipe_grad_stretches(rc, &c, g->param_sizes, offset.data(), length.data());
    std::vector<gpu_matrix> mats(n_grad);
    for (int i = 0; i < n_grad; i++) {
      mats[i] = {g->grads_mem + offset[i], length[i]};
      g->grad_matrix_max = std::max(g->grad_matrix_max, length[i]);
    }
    g->grad_matrices = dalloc<gpu_matrix>(n_grad);
    gtq_check(cudaMemcpy(g->grad_matrices, mats.data(), sizeof(gpu_matrix) * n_grad,
                         cudaMemcpyHostToDevice),
              "grad_format matrices");
    g->grad_amax = dalloc<unsigned int>(n_grad);
    g->n_grad_matrices = n_grad;
  }
  gpu_model_upload(g, m->params_mem, NULL, NULL);
  return g;
}

extern "C" void gpu_model_accum_paths(gpu_model *g, unsigned long long *fast,
                                      unsigned long long *ineligible,
                                      unsigned long long *scale_range,
                                      unsigned long long *not_codes,
                                      unsigned long long *block_scaled,
                                      unsigned long long *block_one_call) {
  gtq_accum_path_counts c;
  gtq_accum_counts(g->gq, &c);
  *fast = c.fast, *ineligible = c.ineligible, *scale_range = c.scales_out_of_range,
  *not_codes = c.not_codes, *block_scaled = c.block_scaled, *block_one_call = c.block_one_call;
}

extern "C" void gpu_model_along_k_paths(const gpu_model *g, unsigned long long *mx_images,
                                        unsigned long long *nvfp4_images,
                                        unsigned long long *reference) {
  gtq_along_k_path_counts c;
  gtq_along_k_paths(g->gq, &c);
  *mx_images = c.mx_images, *nvfp4_images = c.nvfp4_images, *reference = c.reference;
}

extern "C" void gpu_model_set_cuda_graph(gpu_model *g, bool on) {
  graph_drop(g->fwd);
  graph_drop(g->bwd);
  g->graphs = on && gtq_replayable(g->gq);
}
extern "C" bool gpu_model_cuda_graph(const gpu_model *g) { return g->graphs; }
extern "C" unsigned long long gpu_model_graph_launches(const gpu_model *g) {
  return g->graph_launches;
}

extern "C" void gpu_model_profile(gpu_model *g, bool on) {
  gtq_check(cudaStreamSynchronize(g->s), "profile");
  gtq_check(on ? cudaProfilerStart() : cudaProfilerStop(), "profile");
}

extern "C" void gpu_model_set_logit_sharpness(gpu_model *g, bool on) { g->logit_sharpness = on; }
extern "C" void gpu_model_logit_phi(gpu_model *g, float *phi) {
  gtq_check(cudaMemcpyAsync(phi, g->logit_phi,
                            sizeof(float) * LOGIT_SHARPNESS_NUM_EPS * g->B * g->T,
                            cudaMemcpyDeviceToHost, g->s), "logit sharpness");
  gtq_check(cudaStreamSynchronize(g->s), "logit sharpness");
}

extern "C" void gpu_model_free(gpu_model *g) {
  if (!g) return;
  graph_drop(g->fwd);
  graph_drop(g->bwd);
  gtq_free(g->gq);
  void *bufs[] = {g->params_mem, g->grads_mem, g->mom1, g->mom2, g->arena, g->amax_words,
                  g->weight_amax, g->grad_matrices, g->grad_amax, g->act_scratch, g->wide};
  for (void *b : bufs) cudaFree(b);
  free(g->h_bucket_start);
  free(g->h_bucket_pos);
  free(g->p_offsets);
  cudaStreamDestroy(g->s);
  delete g;
}

extern "C" void gpu_model_upload(gpu_model *g, const float *params, const float *mom1,
                                 const float *mom2) {
  const size_t bytes = g->num_params * sizeof(float);
  gtq_check(cudaStreamSynchronize(g->s), "sync");
  if (params) {
    gtq_check(cudaMemcpy(g->params_mem, params, bytes, cudaMemcpyHostToDevice), "upload");
    g->weight_amax_valid = false; /* other parameters: the next fills run their passes */
  }
  if (mom1) gtq_check(cudaMemcpy(g->mom1, mom1, bytes, cudaMemcpyHostToDevice), "upload");
  if (mom2) gtq_check(cudaMemcpy(g->mom2, mom2, bytes, cudaMemcpyHostToDevice), "upload");
  gtq_states_upload(g->gq);
}

extern "C" void gpu_model_download(gpu_model *g, float *params, float *mom1, float *mom2) {
  const size_t bytes = g->num_params * sizeof(float);
  gtq_check(cudaStreamSynchronize(g->s), "sync");
  if (params) gtq_check(cudaMemcpy(params, g->params_mem, bytes, cudaMemcpyDeviceToHost), "download");
  if (mom1) gtq_check(cudaMemcpy(mom1, g->mom1, bytes, cudaMemcpyDeviceToHost), "download");
  if (mom2) gtq_check(cudaMemcpy(mom2, g->mom2, bytes, cudaMemcpyDeviceToHost), "download");
  gtq_states_download(g->gq);
}

extern "C" void gpu_model_states_download(gpu_model *g) { gtq_states_download(g->gq); }
extern "C" void gpu_model_states_upload(gpu_model *g) { gtq_states_upload(g->gq); }

extern "C" void gpu_model_begin_step(gpu_model *g, uint64_t sr_counter, bool collect_stats) {
  gtq_begin_step(g->gq, sr_counter, collect_stats);
}
extern "C" void gpu_model_fetch_stats(gpu_model *g) { gtq_fetch_stats(g->gq); }
extern "C" float *gpu_model_params(gpu_model *g) {
  g->weight_amax_valid = false; /* the caller may write them */
  return g->params_mem;
}
extern "C" float *gpu_model_grads(gpu_model *g) { return g->grads_mem; }
extern "C" const float *gpu_model_probs(gpu_model *g) { return g->acts.probs; }
extern "C" gtq_ctx *gpu_model_gemm(gpu_model *g) { return g->gq; }
extern "C" size_t gpu_model_arena_bytes(const gpu_model *g) { return g->arena_bytes; }
extern "C" void gpu_model_set_coat_unfused(gpu_model *g, bool on) { g->coat_unfused = on; }

/* A test switch whose change alters the launches of the forward, the
 * backward or both: their captured graphs go. */
static void set_switch(gpu_model *g, bool *flag, bool on, bool forward, bool backward) {
  if (on != *flag) {
    if (forward) graph_drop(g->fwd);
    if (backward) graph_drop(g->bwd);
  }
  *flag = on;
}
extern "C" void gpu_model_set_swiglu_unfused(gpu_model *g, bool on) {
  set_switch(g, &g->swiglu_unfused, on, false, true);
}
extern "C" unsigned long long gpu_model_swiglu_fused(const gpu_model *g) { return g->swiglu_fused; }
extern "C" void gpu_model_set_rope_unfused(gpu_model *g, bool on) {
  set_switch(g, &g->rope_unfused, on, true, true);
}
extern "C" unsigned long long gpu_model_rope_fused(const gpu_model *g) { return g->rope_fused; }
extern "C" void gpu_model_set_swiglu_forward_unfused(gpu_model *g, bool on) {
  set_switch(g, &g->swiglu_fwd_unfused, on, true, false);
}
extern "C" unsigned long long gpu_model_swiglu_forward_fused(const gpu_model *g) {
  return g->swiglu_fwd_fused;
}
extern "C" void gpu_model_set_rmsnorm_forward_unfused(gpu_model *g, bool on) {
  set_switch(g, &g->rmsnorm_fwd_unfused, on, true, false);
}
extern "C" unsigned long long gpu_model_rmsnorm_forward_fused(const gpu_model *g) {
  return g->rmsnorm_fwd_fused;
}
extern "C" void gpu_model_set_dres_unfused(gpu_model *g, bool on) {
  set_switch(g, &g->dres_unfused, on, false, true);
}
extern "C" unsigned long long gpu_model_dres_fused(const gpu_model *g) { return g->dres_fused; }
extern "C" void gpu_model_set_act_bf16_unfused(gpu_model *g, bool on) {
  set_switch(g, &g->act_unfused, on, true, true);
}
extern "C" unsigned long long gpu_model_act_bf16_fused(const gpu_model *g) {
  return g->act_fused;
}
extern "C" void gpu_model_set_amax_unfolded(gpu_model *g, bool on) {
  set_switch(g, &g->amax_unfolded, on, true, true);
}
extern "C" unsigned long long gpu_model_amax_folded(const gpu_model *g) { return g->amax_folded; }
extern "C" void gpu_model_set_scale_nodes(gpu_model *g, bool on) {
  set_switch(g, &g->scale_nodes, on, true, true);
  gtq_set_scale_nodes(g->gq, on);
}
extern "C" unsigned long long gpu_model_alphas_paired(const gpu_model *g) {
  return gtq_alphas_paired(g->gq);
}
extern "C" double gpu_memory_in_use_gib(void) {
  size_t free_b = 0, total_b = 0;
  if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) return NAN;
  return (double)(total_b - free_b) / (1024.0 * 1024.0 * 1024.0);
}

extern "C" float gpu_model_forward(gpu_model *g, const int *tokens, const int *targets) {
  const model_config &c = g->cfg;
  const int B = g->B, T = g->T, L = c.n_layers, C = c.dim, H = c.hidden, V = c.vocab,
            NH = c.n_heads, NKV = c.n_kv_heads, hs = C / NH, KVC = NKV * hs, N = B * T;
  const size_t BTC = (size_t)N * C, BTK = (size_t)N * KVC, BTH = (size_t)N * H;
  cudaStream_t s = g->s;
  gtq_check(cudaMemcpyAsync(g->tokens, tokens, sizeof(int) * N, cudaMemcpyHostToDevice, s), "tokens");
  gtq_check(cudaMemcpyAsync(g->targets, targets, sizeof(int) * N, cudaMemcpyHostToDevice, s), "targets");
  /* the embedding gradient's buckets, built now while the GPU works */
  gpu_token_buckets(tokens, N, V, g->h_bucket_start, g->h_bucket_pos);
  gtq_check(cudaMemcpyAsync(g->bucket_start, g->h_bucket_start, sizeof(int) * (V + 1),
                            cudaMemcpyHostToDevice, s), "buckets");
  gtq_check(cudaMemcpyAsync(g->bucket_pos, g->h_bucket_pos, sizeof(int) * N,
                            cudaMemcpyHostToDevice, s), "buckets");
  const param_tensors &p = g->p;
  const activation_tensors &a = g->acts;
  /* the graph's argument: a forward with the sharpness has one more launch */
  run_step_part(g, g->fwd, g->logit_sharpness ? 1.0f : 0.0f, [&] {
  gtq_begin_forward(g->gq);
  amax_words_clear(g);
  gpu_encoder_forward(a.res, g->tokens, p.wte, N, C, s);
  /* a residual branch's sum left to the RMSNorm that reads it next (one
   * pass: gpu_add_rmsnorm_forward), as float32 activations allow: the
   * residual stream added to W2's output (in res_out), or NULL */
  const float *pending_add = nullptr;
  /* true: out's image is in the X slot of sites[0] (rmsnorm_into_operand),
   * else out is written and the GEMMs fill from it */
  auto rmsnorm = [&](float *out, float *rstd, float *x, const float *w, unsigned int *amax,
                     std::initializer_list<int> sites, bool keep_f32) {
    const float *add = pending_add;
    pending_add = nullptr;
    const auto pend = g->add_pending; /* bf16 activations: x = base + bf16 product */
    g->add_pending = {};
    if (pend.p) {
      if (pend.dst != x) gtq_check(cudaErrorInvalidValue, "residual add pending elsewhere");
      if (rmsnorm_into_operand(g, out, rstd, x, nullptr, w, amax, sites, keep_f32, pend.p,
                               pend.base))
        return true;
      gpu_add_bf16(x, pend.base, pend.p, (size_t)N * C, s);
    }
    if (rmsnorm_into_operand(g, out, rstd, x, add, w, amax, sites, keep_f32)) return true;
    if (add)
      gpu_add_rmsnorm_forward(out, rstd, x, add, w, N, C, amax, s);
    else
      gpu_rmsnorm_forward(out, rstd, x, w, N, C, amax, s);
    return false;
  };
  for (int l = 0; l < L; l++) {
    float *res = a.res + l * BTC;
    /* the layer's place in q, k, v, ln1, ln2, hg: 0 where one layer is kept */
    const size_t kl = g->lean ? 0 : l, kl1 = g->keep_ln1 ? l : kl,
                 kl2 = g->keep_ln2 ? l : kl, klg = g->keep_hg ? l : kl;
    float *ln1 = a.ln1 + kl1 * BTC, *q = a.q + kl * BTC, *k = a.k + kl * BTK, *v = a.v + kl * BTK;
    float *atty = a.atty + l * BTC, *res_mid = a.res_mid + l * BTC, *ln2 = a.ln2 + kl2 * BTC;
    float *h1 = a.h1 + l * BTH, *h3 = a.h3 + l * BTH, *hg = a.hg + klg * BTH;
    float *res_out = a.res + (l + 1) * BTC;
    unsigned int *ln1_amax = amax_word(g, l, AMAX_LN1, {SITE_Q, SITE_K, SITE_V}, USE_FWD_X),
                 *ln2_amax = amax_word(g, l, AMAX_LN2, {SITE_W1, SITE_W3}, USE_FWD_X);
    /* q, k and v read ln1 the same way: one rounded copy of it (an MX image
     * or an element-wise slot), not three (gtq_share_begin; nothing the three
     * GEMMs read changes in between) */
    gtq_share_begin(g->gq);
    const int sq = site_index(g, l, SITE_Q);
    const bool ln1_filled =
        rmsnorm(ln1, a.ln1_rstd + (size_t)l * N, res, p.rms1 + (size_t)l * C, ln1_amax,
                {sq, site_index(g, l, SITE_K), site_index(g, l, SITE_V)},
                !g->lean || g->keep_ln1 || g->recompute_ln1);
    const bool qkv_ready = g->qkv_bf16 && act_direct(g);
    const __nv_bfloat16 *qkv_in[3] = {nullptr, nullptr, nullptr};
    if (!g->lean || g->keep_ln1) hold_twin(g, sq, ln1);
    if (qkv_ready) {
      qkv_into_flash_inputs(g, l, ln1, ln1_amax, ln1_filled, q, k, qkv_in);
    } else {
      linear_forward_act(g, q, nullptr, ln1, p.wq + (size_t)l * C * C, N, C, C, sq, ln1_amax,
                         ln1_filled);
      linear_forward_act(g, k, nullptr, ln1, p.wk + (size_t)l * KVC * C, N, C, KVC,
                         site_index(g, l, SITE_K), ln1_amax);
      linear_forward_act(g, v, nullptr, ln1, p.wv + (size_t)l * KVC * C, N, C, KVC,
                         site_index(g, l, SITE_V), ln1_amax);
    }
    gtq_share_end(g->gq);
    const bool rope_in_flash = rope_fusable(g); /* RoPE rotates into the kernel's inputs */
    if (qkv_ready) {
      /* rotated into the kernel's inputs already */
    } else if (g->act_bf16) { /* model.c's forward under activations = bf16, point by point */
      gpu_rope_forward_act_bf16(q, g->rope_cos, g->rope_sin, B, T, NH, hs, s);
      gpu_rope_forward_act_bf16(k, g->rope_cos, g->rope_sin, B, T, NKV, hs, s);
    } else if (!rope_in_flash) {
      gpu_rope_forward(q, g->rope_cos, g->rope_sin, B, T, NH, hs, s);
      gpu_rope_forward(k, g->rope_cos, g->rope_sin, B, T, NKV, hs, s);
    }
    unsigned int *atty_amax = nullptr; /* the materialised attention's output: cuBLAS's */
    if (g->o_bf16) { /* O rounded into bf16 storage, W_O's X as it is */
      uint16_t *o = bf16_at(a.atty, l, BTC);
      unsigned int *o_amax = nullptr;
      if (act_direct(g)) { /* written in bf16 by the kernel */
        o_amax = stored_amax_word(g, l, AMAX_ATTY, {SITE_O}, USE_FWD_X);
        flash_forward(g, nullptr, g->lse + (size_t)l * B * NH * T, q, k, v, l, o_amax,
                      rope_in_flash, qkv_ready ? qkv_in : nullptr, o);
        g->act_fused++;
      } else {
        flash_forward(g, g->o_f32, g->lse + (size_t)l * B * NH * T, q, k, v, l, nullptr,
                      rope_in_flash, qkv_ready ? qkv_in : nullptr);
        const exmy_rounding_opts rne = {};
        gtq_check(exmy_cuda_quantize_bf16(&g->bf16, &rne, g->o_f32, o, BTC, s), "O to bf16");
      }
      const int so = site_index(g, l, SITE_O);
      gtq_operand x = stored_operand(g, so, USE_FWD_X, SLOT_X, FILL, o, N, C, o_amax);
      gtq_operand wq = fill_operand(g, so, USE_FWD_W, SLOT_W, p.wo + (size_t)l * C * C, C, C,
                                    weight_word(g, so));
      gemm_act_residual(g, N, C, C, x, wq, res_mid, res); /* res + bf16(O W_O^T) */
    } else {
      if (g->attention == GPU_ATTENTION_FLASH) {
        atty_amax = amax_word(g, l, AMAX_ATTY, {SITE_O}, USE_FWD_X);
        flash_forward(g, atty, g->lse + (size_t)l * B * NH * T, q, k, v, l, atty_amax,
                      rope_in_flash, qkv_ready ? qkv_in : nullptr);
        act_round(g, atty, BTC); /* O, as FlashAttention writes it in bf16 */
      } else {
        attention_forward(g, atty, a.att + (size_t)l * B * NH * T * T, q, k, v, l);
      }
      /* the residual add promotes the bf16 branch; under float32
       * activations RMSNorm 2 makes it */
      hold_twin(g, site_index(g, l, SITE_O), atty);
      linear_forward_act(g, res_mid, g->act_bf16 ? res : nullptr, atty, p.wo + (size_t)l * C * C,
                         N, C, C, site_index(g, l, SITE_O), atty_amax);
      if (!g->act_bf16) pending_add = res;
    }
    gtq_share_begin(g->gq); /* W1 and W3 read ln2 */
    const int s1 = site_index(g, l, SITE_W1);
    const bool ln2_filled =
        rmsnorm(ln2, a.ln2_rstd + (size_t)l * N, res_mid, p.rms2 + (size_t)l * C, ln2_amax,
                {s1, site_index(g, l, SITE_W3)}, !g->lean || g->keep_ln2 || g->recompute_ln2);
    if (g->mlp_bf16) {
      mlp_forward_bf16(g, l, res_out, res_mid, ln2, ln2_amax, ln2_filled);
      gtq_share_end(g->gq);
      continue;
    }
    if (!g->lean || g->keep_ln2) hold_twin(g, s1, ln2);
    linear_forward(g, h1, ln2, p.w1 + (size_t)l * H * C, N, C, H, s1, ln2_amax, ln2_filled);
    linear_forward(g, h3, ln2, p.w3 + (size_t)l * H * C, N, C, H, site_index(g, l, SITE_W3),
                   ln2_amax);
    gtq_share_end(g->gq);
    act_round(g, h1, BTH);
    act_round(g, h3, BTH);
    unsigned int *hg_amax = nullptr;
    bool hg_filled = false;
    if (g->rc && g->rc->swiglu_row_scale) {
      gpu_smooth_swiglu_forward(hg, h1, h3, N, H, s);
    } else if ((hg_filled = swiglu_forward_fused(g, l, h1, h3, BTH))) {
      /* hg lives only in W2's X slot */
    } else {
      hg_amax = amax_word(g, l, AMAX_HG, {SITE_W2}, USE_FWD_X);
      if (g->act_bf16)
        gpu_swiglu_forward_act_bf16(hg, h1, h3, BTH, hg_amax, s);
      else
        gpu_swiglu_forward(hg, h1, h3, BTH, hg_amax, s);
    }
    if (g->rc && g->rc->swiglu_row_scale) { /* never under bf16 activations */
      linear_forward(g, res_out, hg, p.w2 + (size_t)l * C * H, N, H, C,
                     site_index(g, l, SITE_W2), hg_amax);
      gpu_smooth_swiglu_scale_rows(res_out, res_out, h3, N, C, H, s);
      gpu_add_inplace(res_out, res_mid, BTC, s);
    } else {
      if (!g->lean || g->keep_hg) hold_twin(g, site_index(g, l, SITE_W2), hg);
      linear_forward_act(g, res_out, g->act_bf16 ? res_mid : nullptr, hg,
                         p.w2 + (size_t)l * C * H, N, H, C, site_index(g, l, SITE_W2), hg_amax,
                         hg_filled);
      if (!g->act_bf16) pending_add = res_mid; /* the next RMSNorm 1, or the final one */
    }
  }
  unsigned int *lnf_amax = amax_word(g, L, 0, {0}, USE_FWD_X);
  const int sf = site_index(g, L, 0);
  const bool lnf_filled =
      rmsnorm(a.lnf, a.lnf_rstd, a.res + L * BTC, p.rmsf, lnf_amax, {sf}, !g->lean);
  linear_forward(g, a.probs, a.lnf, p.lm_head, N, C, V, sf, lnf_amax, lnf_filled);
  act_round(g, a.probs, (size_t)N * V); /* the logits; the loss in float32 */
  if (g->logit_sharpness) gpu_logit_sharpness_forward(g->logit_phi, a.probs, g->targets, N, V, s);
  gpu_crossentropy_forward(a.probs, a.losses, g->targets, N, V, s);
  gpu_mean(a.losses, N, g->loss_dev, s);
  });
  double loss = 0;
  gtq_check(cudaMemcpyAsync(&loss, g->loss_dev, sizeof loss, cudaMemcpyDeviceToHost, s), "loss");
  gtq_check(cudaStreamSynchronize(s), "forward");
  return (float)loss;
}

extern "C" void gpu_model_zero_grad(gpu_model *g) {
  gtq_check(cudaMemsetAsync(g->grads_mem, 0, g->num_params * sizeof(float), g->s), "zero grad");
}

extern "C" void gpu_model_backward(gpu_model *g, float loss_scale) {
  const model_config &c = g->cfg;
  const int B = g->B, T = g->T, L = c.n_layers, C = c.dim, H = c.hidden, V = c.vocab,
            NH = c.n_heads, NKV = c.n_kv_heads, hs = C / NH, KVC = NKV * hs, N = B * T;
  const size_t BTC = (size_t)N * C, BTK = (size_t)N * KVC, BTH = (size_t)N * H;
  cudaStream_t s = g->s;
  const param_tensors &p = g->p, &gr = g->gr;
  const activation_tensors &a = g->acts;
  const grad_act_tensors &d = g->grad_acts;
  float *dlogits = a.probs;
  const bool smooth = g->rc && g->rc->swiglu_row_scale; /* model.c: dY s_t in dln */
  /* the residual gradient as it enters layer l's backward: W2's dY (not
   * under Smooth-SwiGLU, whose W2 dY is dres scaled by rows) */
  auto dres_amax = [&](int l) {
    return l >= 0 && !smooth ? amax_word(g, l, AMAX_DRES_W2, {SITE_W2}, USE_DX_DY) : nullptr;
  };
  run_step_part(g, g->bwd, loss_scale, [&] {
  amax_words_clear(g);
  gpu_crossentropy_backward(dlogits, a.probs, g->targets, N, V, loss_scale / N, s);
  act_round(g, dlogits, (size_t)N * V);
  linear_backward(g, d.dln, gr.lm_head, dlogits, a.lnf, p.lm_head, N, C, V, site_index(g, L, 0),
                  0);
  gtq_check(cudaMemsetAsync(d.dres, 0, BTC * sizeof(float), s), "memset");
  /* the residual gradient entering layer l's backward, as W2's dY image
   * too where dres_into_dy serves (not under Smooth-SwiGLU: dY is scaled) */
  auto w2_dy = [&](int l) {
    return smooth ? DresDy{} : dres_into_dy(g, site_index(g, l, SITE_W2), BTC);
  };
  DresDy w2_img = w2_dy(L - 1);
  rmsnorm_backward_into_dy(g, w2_img, gr.rmsf, a.res + L * BTC, p.rmsf, a.lnf_rstd,
                           dres_amax(L - 1));
  for (int l = L - 1; l >= 0; l--) {
    const float *res = a.res + l * BTC, *ln1 = a.ln1 + l * BTC, *q = a.q + l * BTC,
                *k = a.k + l * BTK, *v = a.v + l * BTK, *atty = a.atty + l * BTC,
                *res_mid = a.res_mid + l * BTC, *ln2 = a.ln2 + l * BTC, *h1 = a.h1 + l * BTH,
                *h3 = a.h3 + l * BTH, *hg = a.hg + l * BTH;
    if (g->lean) {
      /* the flash backward reads the bf16 copies of q, k, v; ln1, ln2 and hg
       * kept (every layer's), or again from the forward's kernels on the same
       * inputs (recompute_*) where a GEMM reads them in float32, else NULL
       * (read nowhere) */
      q = k = v = nullptr;
      if (!g->keep_ln1) ln1 = g->recompute_ln1 ? a.ln1 : nullptr;
      if (!g->keep_ln2) ln2 = g->recompute_ln2 ? a.ln2 : nullptr;
      if (!g->keep_hg) hg = g->recompute_hg ? a.hg : nullptr;
      if (g->recompute_hg) {
        if (smooth)
          gpu_smooth_swiglu_forward(a.hg, h1, h3, N, H, s);
        else if (g->act_bf16)
          gpu_swiglu_forward_act_bf16(a.hg, h1, h3, BTH, nullptr, s);
        else
          gpu_swiglu_forward(a.hg, h1, h3, BTH, nullptr, s);
      }
      if (g->recompute_ln2)
        gpu_rmsnorm_forward(a.ln2, a.ln2_rstd + (size_t)l * N, res_mid, p.rms2 + (size_t)l * C,
                            N, C, nullptr, s);
      if (g->recompute_ln1)
        gpu_rmsnorm_forward(a.ln1, a.ln1_rstd + (size_t)l * N, res, p.rms1 + (size_t)l * C, N,
                            C, nullptr, s);
    }
    if (smooth) gpu_smooth_swiglu_scale_rows(d.dln, d.dres, h3, N, C, H, s);
    /* W2's output gradient (bf16 activations: bf16(d(res_out)) in dln) */
    const bool w2_filled = w2_img.y != nullptr;
    const float *dy_w2 = smooth      ? d.dln
                         : w2_filled ? d.dres
                                     : act_dy_for(g, site_index(g, l, SITE_W2), d.dln, d.dres, BTC);
    if (g->mlp_bf16) {
      mlp_backward_bf16(g, l, dy_w2, ln2, w2_filled);
    } else {
    linear_backward(g, d.dhg, gr.w2 + (size_t)l * C * H, dy_w2, hg, p.w2 + (size_t)l * C * H, N,
                    H, C, site_index(g, l, SITE_W2), 0, w2_filled, dres_amax(l));
    bool fused = false;
    if (smooth)
      gpu_smooth_swiglu_backward(d.dh1, d.dh3, d.dhg, h1, h3, N, H, s);
    else if (g->act_bf16)
      gpu_swiglu_backward_act_bf16(d.dh1, d.dh3, d.dhg, h1, h3, BTH, s);
    else if (!(fused = swiglu_backward_fused(g, l, d.dhg, h1, h3, BTH, d.dh3)))
      gpu_swiglu_backward(d.dh1, d.dh3, d.dhg, h1, h3, BTH, s);
    /* dW1 and dW3 read ln2 along the tokens; the GEMMs between write dln */
    gtq_share_begin(g->gq);
    act_sum_begin(g, d.dln);
    linear_backward(g, d.dln, gr.w1 + (size_t)l * H * C, d.dh1, ln2, p.w1 + (size_t)l * H * C,
                    N, C, H, site_index(g, l, SITE_W1), 0, fused);
    linear_backward(g, d.dln, gr.w3 + (size_t)l * H * C, d.dh3, ln2, p.w3 + (size_t)l * H * C,
                    N, C, H, site_index(g, l, SITE_W3), 1, fused);
    act_sum_flush(g);
    gtq_share_end(g->gq);
    }
    unsigned int *dres_wo_amax = amax_word(g, l, AMAX_DRES_WO, {SITE_O}, USE_DX_DY);
    const DresDy wo_img = dres_into_dy(g, site_index(g, l, SITE_O), BTC);
    rmsnorm_backward_into_dy(g, wo_img, gr.rms2 + (size_t)l * C, res_mid, p.rms2 + (size_t)l * C,
                             a.ln2_rstd + (size_t)l * N, dres_wo_amax);
    /* WO's output gradient */
    const bool wo_filled = wo_img.y != nullptr;
    const float *dy_o =
        wo_filled ? d.dres : act_dy_for(g, site_index(g, l, SITE_O), d.dln, d.dres, BTC);
    const uint16_t *o_bf16 = g->o_bf16 ? bf16_at(a.atty, l, BTC) : nullptr;
    /* the fused attention's dO: W_O's bf16 product itself where its input
     * would be bf16's rne of it (act_sum_take), else datty */
    const bool do_direct = g->attention == GPU_ATTENTION_FLASH && flash_do_identity(g, l);
    if (do_direct) act_sum_begin(g, d.datty);
    linear_backward(g, d.datty, gr.wo + (size_t)l * C * C, dy_o, atty, p.wo + (size_t)l * C * C,
                    N, C, C, site_index(g, l, SITE_O), 0, wo_filled, dres_wo_amax, nullptr,
                    o_bf16);
    const __nv_bfloat16 *dO_bf16 =
        do_direct ? (const __nv_bfloat16 *)act_sum_take(g) : nullptr;
    /* attention_backward accumulates dk and dv head by head (the fused kernel overwrites them) */
    if (g->attention == GPU_ATTENTION_MATERIALIZED) {
      gtq_check(cudaMemsetAsync(d.dk, 0, BTK * sizeof(float), s), "memset");
      gtq_check(cudaMemsetAsync(d.dv, 0, BTK * sizeof(float), s), "memset");
    }
    unsigned int *dv_amax = nullptr; /* the materialised attention's dv: cuBLAS's */
    const bool dqkv_direct = g->qkv_bf16 && act_direct(g) && dqkv_direct_ok(g, l);
    if (g->attention == GPU_ATTENTION_FLASH) {
      dv_amax = dqkv_direct ? stored_amax_word(g, l, AMAX_DV, {SITE_V}, USE_DX_DY)
                            : amax_word(g, l, AMAX_DV, {SITE_V}, USE_DX_DY);
      flash_backward(g, d.dq, d.dk, d.dv, d.datty, atty, o_bf16,
                     g->lse + (size_t)l * B * NH * T, q, k, v, l, dv_amax, dO_bf16, dqkv_direct);
      if (!dqkv_direct) {
        act_round(g, d.dq, BTC); /* as written in bf16 (one head per key/value head) */
        act_round(g, d.dk, BTK);
        act_round(g, d.dv, BTK);
      }
    } else {
      attention_backward(g, d.dq, d.dk, d.dv, d.datt, d.datty,
                         a.att + (size_t)l * B * NH * T * T, q, k, v, l);
    }
    unsigned int *dq_amax = amax_word(g, l, AMAX_DQ, {SITE_Q}, USE_DX_DY),
                 *dk_amax = amax_word(g, l, AMAX_DK, {SITE_K}, USE_DX_DY);
    /* RoPE's backward rotating dq and dk into Q's and K's dY operands, each
     * just before its GEMMs (one dY buffer under lean activations) */
    const bool rope_dy = rope_fusable(g);
    if (dqkv_direct) {
      /* rotated in bf16 into Q's and K's dY below */
    } else if (g->act_bf16) {
      gpu_rope_backward_act_bf16(d.dq, g->rope_cos, g->rope_sin, B, T, NH, hs, dq_amax, s);
      gpu_rope_backward_act_bf16(d.dk, g->rope_cos, g->rope_sin, B, T, NKV, hs, dk_amax, s);
    } else if (!rope_dy) {
      gpu_rope_backward(d.dq, g->rope_cos, g->rope_sin, B, T, NH, hs, dq_amax, s);
      gpu_rope_backward(d.dk, g->rope_cos, g->rope_sin, B, T, NKV, hs, dk_amax, s);
    }
    const int sq = site_index(g, l, SITE_Q), sk = site_index(g, l, SITE_K);
    gtq_share_begin(g->gq); /* dWq, dWk and dWv read ln1 */
    act_sum_begin(g, d.dln);
    if (dqkv_direct) {
      dqkv_into_operands(g, l, ln1, dv_amax);
    } else {
    const bool dq_filled = rope_dy && rope_into_operand(g, sq, USE_DX_DY, USE_DW_DY, SLOT_DY, d.dq,
                                                        NH, true, nullptr, dq_amax);
    linear_backward(g, d.dln, gr.wq + (size_t)l * C * C, d.dq, ln1, p.wq + (size_t)l * C * C,
                    N, C, C, sq, 0, dq_filled, dq_amax);
    const bool dk_filled = rope_dy && rope_into_operand(g, sk, USE_DX_DY, USE_DW_DY, SLOT_DY, d.dk,
                                                        NKV, true, nullptr, dk_amax);
    linear_backward(g, d.dln, gr.wk + (size_t)l * KVC * C, d.dk, ln1,
                    p.wk + (size_t)l * KVC * C, N, C, KVC, sk, 1, dk_filled, dk_amax);
    linear_backward(g, d.dln, gr.wv + (size_t)l * KVC * C, d.dv, ln1,
                    p.wv + (size_t)l * KVC * C, N, C, KVC, site_index(g, l, SITE_V), 1, false,
                    dv_amax);
    }
    act_sum_flush(g);
    gtq_share_end(g->gq);
    w2_img = l > 0 ? w2_dy(l - 1) : DresDy{};
    rmsnorm_backward_into_dy(g, w2_img, gr.rms1 + (size_t)l * C, res, p.rms1 + (size_t)l * C,
                             a.ln1_rstd + (size_t)l * N, dres_amax(l - 1));
  }
  gpu_encoder_backward(gr.wte, d.dres, g->bucket_start, g->bucket_pos, V, C, s);
  });
  gtq_check(cudaGetLastError(), "backward");
}

/* Where AdamW folds parameter tensor ti's amaxes: the word of layer 0's
 * site, the layers' following every SITES_PER_LAYER words (*matrices: the
 * tensor's matrices, one per layer; the LM head one), when the next
 * forward's fill of some layer's W will take it outside statistics steps;
 * else NULL (not a GEMM operand, or no such fill). */
static unsigned int *weight_words(const gpu_model *g, int ti, size_t *matrices) {
  int kind;
  switch (ti) {
    case PARAM_WQ: kind = SITE_Q; break;
    case PARAM_WK: kind = SITE_K; break;
    case PARAM_WV: kind = SITE_V; break;
    case PARAM_WO: kind = SITE_O; break;
    case PARAM_W1: kind = SITE_W1; break;
    case PARAM_W3: kind = SITE_W3; break;
    case PARAM_W2: kind = SITE_W2; break;
    case PARAM_LM_HEAD: kind = -1; break;
    default: return nullptr;
  }
  const int L = g->cfg.n_layers;
  const int first = kind < 0 ? site_index(g, L, 0) : site_index(g, 0, kind);
  *matrices = kind < 0 ? 1 : (size_t)L;
  for (size_t j = 0; j < *matrices; j++)
    if (gtq_fill_takes_amax_outside_stats(g->gq, first + (int)j * SITES_PER_LAYER, USE_FWD_W))
      return g->weight_amax + first;
  return nullptr;
}

extern "C" double gpu_model_update(gpu_model *g, const adamw_hparams *h, int t, double max_norm) {
  cudaStream_t s = g->s;
  if (g->grad_matrices && !g->amax_unfolded) {
    /* recipe_round_grads: MS-AMP O1's FP8 weight gradients, every matrix's
     * amax in one launch, then every matrix rounded under its scale in one */
    const recipe *r = g->rc;
    gtq_check(cudaMemsetAsync(g->grad_amax, 0, sizeof(unsigned int) * g->n_grad_matrices, s),
              "memset (grad_format amax words)");
    gpu_amax_matrices(g->grad_matrices, g->n_grad_matrices, g->grad_matrix_max, g->grad_amax, s);
    gtq_check(gpu_quantize_matrices_scaled(&r->grad_format, &grad_rounding, r->grad_margin, false,
                                           g->grad_matrices, g->n_grad_matrices,
                                           g->grad_matrix_max, g->grad_amax, s),
              "grad_format");
  } else if (g->rc && g->rc->grad_quant) {
    /* the same, matrix by matrix (recipe_grad_stretches), each with its own amax pass */
    const recipe *r = g->rc;
    const int n = recipe_grad_stretches(r, &g->cfg, g->param_sizes, NULL, NULL);
    std::vector<size_t> offset(n), length(n);
    recipe_grad_stretches(r, &g->cfg, g->param_sizes, offset.data(), length.data());
    for (int i = 0; i < n; i++)
      gtq_check(exmy_cuda_quantize_tensor_scaled_f32(&r->grad_format, &grad_rounding,
                                                     r->grad_margin, false,
                                                     g->grads_mem + offset[i],
                                                     g->grads_mem + offset[i], length[i], NULL, s),
                "grad_format");
  }
  gpu_sumsq(g->grads_mem, g->num_params, g->sumsq_scratch, g->sumsq, s);
  const bool coat_fused = g->rc && g->rc->coat && !g->coat_unfused;
  if (coat_fused) {
    /* adamw_update and recipe_store_moments (moments = coat) in one pass */
    const recipe *r = g->rc;
    adamw_coefs coefs[NUM_PARAM_TENSORS];
    for (int ti = 0; ti < NUM_PARAM_TENSORS; ti++) coefs[ti] = adamw_step_coefs(h, t, ti);
    gtq_check(gpu_adamw_coat(g->params_mem, g->grads_mem, g->mom1, g->mom2, g->param_sizes, coefs,
                             NUM_PARAM_TENSORS, g->sumsq, max_norm, r->moment_format,
                             r->moment_group, r->moment_dre, s),
              "AdamW, COAT moments");
  }
  /* the weights' amaxes for the next forward's fills, folded as AdamW
   * writes them (not by the fused COAT update: its fills run their passes) */
  const bool fold = g->weight_amax && !g->amax_unfolded && !coat_fused;
  if (fold)
    gtq_check(cudaMemsetAsync(g->weight_amax, 0, sizeof(unsigned int) * g->n_sites, s),
              "memset (weight amax words)");
  size_t off = 0;
  for (int ti = 0; ti < NUM_PARAM_TENSORS && !coat_fused; ti++) {
    const size_t n = g->param_sizes[ti];
    const adamw_coefs coefs = adamw_step_coefs(h, t, ti); /* as optim.c's adamw_update */
    size_t matrices = 0;
    unsigned int *words = fold ? weight_words(g, ti, &matrices) : nullptr;
    if (words)
      gpu_adamw_fold(g->params_mem + off, g->grads_mem + off, g->mom1 + off, g->mom2 + off, n,
                     g->sumsq, max_norm, &coefs, matrices, words, SITES_PER_LAYER, s);
    else
      gpu_adamw(g->params_mem + off, g->grads_mem + off, g->mom1 + off, g->mom2 + off, n,
                g->sumsq, max_norm, &coefs, s);
    off += n;
  }
  g->weight_amax_valid = fold;
  if (g->rc && g->rc->moments_bf16) {
    /* recipe_store_moments: the moments stored as bfloat16 */
    exmy_format bf16;
    exmy_format_parse("bf16", &bf16);
    exmy_rounding_opts o = {};
    o.mode = EXMY_RNE;
    for (int i = 0; i < 2; i++)
      gtq_check(exmy_cuda_quantize_f32(&bf16, &o, i ? g->mom2 : g->mom1, i ? g->mom2 : g->mom1,
                                       g->num_params, s),
                "bf16 moments");
  } else if (g->rc && g->rc->moments_fp8) {
    /* recipe_store_moments: each matrix's moments in FP8 under its own current scale */
    const recipe *r = g->rc;
    const int n = recipe_moment_stretches(&g->cfg, g->param_sizes, NULL, NULL);
    std::vector<size_t> offset(n), length(n);
    recipe_moment_stretches(&g->cfg, g->param_sizes, offset.data(), length.data());
    exmy_rounding_opts o = {};
    o.mode = EXMY_RNE;
    o.saturate = true;
    for (int k = 0; k < 2; k++)
      for (int i = 0; i < n; i++) {
        float *x = (k ? g->mom2 : g->mom1) + offset[i];
        gtq_check(exmy_cuda_quantize_tensor_scaled_f32(&r->moment_format[k], &o, 0, false, x, x,
                                                       length[i], NULL, s),
                  "FP8 moments");
      }
  } else if (g->rc && g->rc->coat && !coat_fused) {
    /* recipe_store_moments: the moments as COAT stores them */
    const recipe *r = g->rc;
    exmy_rounding_opts o = {};
    o.mode = EXMY_RNE;
    o.saturate = true;
    for (int i = 0; i < 2; i++)
      gtq_check(exmy_cuda_quantize_group_scaled_f32(&r->moment_format[i], &o, r->moment_group, 0,
                                                    false, r->moment_dre, i ? g->mom2 : g->mom1,
                                                    i ? g->mom2 : g->mom1, 1, g->num_params, s),
                "COAT moments");
  }
  double sumsq = 0;
  gtq_check(cudaMemcpyAsync(&sumsq, g->sumsq, sizeof sumsq, cudaMemcpyDeviceToHost, s), "norm");
  gtq_check(cudaStreamSynchronize(s), "update");
  return sqrt(sumsq);
}
