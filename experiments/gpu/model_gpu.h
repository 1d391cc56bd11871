/*
 * The LLaMA model of experiments/trainer/model.h on the GPU: the same layers in the
 * same order, every matrix product through the recipe's GEMM (gemm.h), all
 * state on the device between steps; the host sees the loss, the gradient
 * norm, the statistics of stats steps and, for checkpoints, the parameters.
 *
 * Parameters, gradients, AdamW moments: one device allocation each, in the
 * host model's storage order (model_param_sizes), so a checkpoint is the same
 * bytes whichever device wrote it.
 */
#ifndef EXPERIMENTS_GPU_MODEL_GPU_H
#define EXPERIMENTS_GPU_MODEL_GPU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lib/accum_core.h" /* before the C block: it includes system headers */

#ifdef __cplusplus
extern "C" { /* the C headers of experiments/ have no guards of their own */
#endif
#include "experiments/trainer/model.h"
#include "experiments/trainer/optim.h"
#include "experiments/trainer/recipe.h"

typedef enum {
  GPU_ATTENTION_MATERIALIZED = 0, /* scores stored, each product through the recipe: model.c exactly */
  GPU_ATTENTION_FLASH,            /* fused bf16 kernel (flash_attention.h) */
} gpu_attention_kind;

typedef struct gpu_model gpu_model;

/* A device copy of host model m (its configuration and parameters) for
 * micro-batches of B x T, with the recipe's sites (NULL: float32 throughout;
 * their delayed states are copied to the device).  NULL with a message in err
 * when the GPU or the configuration cannot serve. */
gpu_model *gpu_model_new(const model *m, const recipe *rc, tq_site *sites, int n_sites, int B,
                         int T, gpu_attention_kind attention, char *err, size_t errlen);
/* The same, choosing what the fused attention keeps (gpu_model_new: 1).
 * lean_activations 1: q, k and v for one layer, not every layer (the flash
 * backward reads Q, K, V from their bf16 copies), ln1, ln2 and hg too where
 * no backward GEMM reads them in float32 (every layer's where one does: MX,
 * NVFP4 and group-scaled or unquantized sites), and one buffer behind the
 * GEMM sites' dY slots (gtq_share_dy_slots) rather than one per site: the
 * same bits, about 13 GiB less at 120m (bf16).  At 0 and 1 the MX images
 * of ln1, O, ln2 and hg along the tokens (their dW GEMMs' reads) are made
 * with the forward's and held until the backward (gtq_mx_hold_twin): mxfp8
 * at 120m 23.9 GiB in use at 1, 2.2 ms a step faster than without.  2: as 1,
 * but ln1, ln2 and hg are always one layer, recomputed in the backward by
 * the forward's kernels where a GEMM reads them, and only O's image held
 * (the least memory: mxfp8 at 120m 16.1 GiB in use before the held images,
 * and 6 ms a step slower).  0: every layer's, as model.c
 * keeps them, and a dY slot per site (for comparisons, and the tests that
 * read the slots).  The materialised attention is never lean. */
gpu_model *gpu_model_new_lean(const model *m, const recipe *rc, tq_site *sites, int n_sites,
                              int B, int T, gpu_attention_kind attention, int lean_activations,
                              char *err, size_t errlen);
void gpu_model_free(gpu_model *g);
/* Under activations = bf16 with lean activations, what is stored in bf16 (the
 * values are bf16 values, so the same bits): 1, SwiGLU's tensors (h1, h3, hg
 * and their gradients), where every GEMM writing one takes bf16 images
 * through cuBLAS (unscaled or per-tensor scaled) and every GEMM reading one
 * takes it as it is or through its image made in one pass from it; 2, the
 * attention output O, where W_O's GEMMs take it so (the bf16 recipe, the
 * element-wise E8Mx recipes, FP8 under delayed or current scaling); else
 * float32 storage.  Tests: whether models made after the
 * call may store them so (on by default; off: float32, for comparisons). */
int gpu_model_bf16_storage(const gpu_model *g);
void gpu_model_bf16_storage_for_new(bool on);

/* Host <-> device: parameters, AdamW moments and the delayed-scaling states
 * of the sites (synchronous).  Uploaded parameters (a checkpoint resumed)
 * have no weight amaxes folded: the next forward's current-scaled weight
 * fills run their own amax passes (see gpu_model_update). */
void gpu_model_upload(gpu_model *g, const float *params, const float *mom1, const float *mom2);
void gpu_model_download(gpu_model *g, float *params, float *mom1, float *mom2);
/* Only the delayed-scaling states (validation must leave them untouched). */
void gpu_model_states_download(gpu_model *g);
void gpu_model_states_upload(gpu_model *g);

/* Whether the forward and backward launches are captured into CUDA graphs
 * (on their second call) and replayed afterwards: the same kernels with the
 * same arguments in the same order, so the same bits, fewer launch gaps.
 * Off after gpu_model_new; on takes effect only for recipes whose launches do
 * not change from step to step (gtq_replayable: not under stochastic
 * rounding, group scaling, NVFP4, an accumulation model, current scaling
 * off the BF16 path, MX operands that are not bf16 images or beside
 * operands that are not MX, or the MX reference path); statistics steps
 * always run eagerly, and after an upload of delayed states or a buffer
 * reallocated the next steps capture again (gtq_graph_epoch).
 * gpu_model_graph_launches counts the step parts replayed. */
void gpu_model_set_cuda_graph(gpu_model *g, bool on);
bool gpu_model_cuda_graph(const gpu_model *g);
unsigned long long gpu_model_graph_launches(const gpu_model *g);

/* Waits for the model's stream, then starts (on) or stops the CUDA
 * profiler's collection (cudaProfilerStart / cudaProfilerStop): a profiler
 * launched with collection off (ncu --profile-from-start off) sees the
 * kernels in between and nothing else.  Without a profiler, no effect. */
void gpu_model_profile(gpu_model *g, bool on);

/* The GEMMs under an accumulation model so far: *fast on cuBLASLt's FP8
 * GEMM; emulated because not eligible on the host (*ineligible), because
 * the operands' scales were beyond the FP8 path's bounds (*scale_range) or
 * their values not exact FP8 codes (*not_codes); of all these, the GEMMs of
 * block-scaled operands that tried cuBLASLt (*block_scaled) and those of
 * them that made one call of its block-scaled GEMM (*block_one_call,
 * gtq_accum_path_counts); syncs. */
void gpu_model_accum_paths(gpu_model *g, unsigned long long *fast, unsigned long long *ineligible,
                           unsigned long long *scale_range, unsigned long long *not_codes,
                           unsigned long long *block_scaled, unsigned long long *block_one_call);

/* The GEMMs of operands quantized along K so far (gtq_along_k_paths): on
 * MX's bf16 images, on NVFP4's bf16 images, on the reference
 * (exmy_cuda_qgemm); no synchronisation. */
void gpu_model_along_k_paths(const gpu_model *g, unsigned long long *mx_images,
                             unsigned long long *nvfp4_images, unsigned long long *reference);

/* As tq_sr_counter / tq_collect_stats at the start of a step. */
void gpu_model_begin_step(gpu_model *g, uint64_t sr_counter, bool collect_stats);
/* Copies this step's statistics into the host sites. */
void gpu_model_fetch_stats(gpu_model *g);

/* As model.logit_sharpness: whether gpu_model_forward also computes the
 * epsilon-sharpness of every position's logits (logit_sharpness.h); off after
 * gpu_model_new. */
void gpu_model_set_logit_sharpness(gpu_model *g, bool on);
/* Copies the last such forward's phi (LOGIT_SHARPNESS_NUM_EPS x B*T, as
 * model.logit_phi) to the host (synchronises). */
void gpu_model_logit_phi(gpu_model *g, float *phi);

/* model_forward: tokens and targets (B x T) on the host; returns the mean
 * loss (float, as m->loss; synchronises). */
float gpu_model_forward(gpu_model *g, const int *tokens, const int *targets);
void gpu_model_zero_grad(gpu_model *g);
/* model_backward of the last forward. */
void gpu_model_backward(gpu_model *g, float loss_scale);
/* grad_global_norm, grad_clip (max_norm > 0), adamw_update and
 * recipe_store_moments; returns the norm before clipping.  Where the next
 * forward's fill of a weight (the W of a linear site or of the LM head) is
 * per-tensor current scaling on the BF16 path, AdamW folds each weight
 * matrix's finite amax as it writes it, and the fills of the forwards until
 * the parameters are next written take it (not the fused COAT update). */
double gpu_model_update(gpu_model *g, const adamw_hparams *h, int t, double max_norm);

/* For tests: device pointers of the parameter and gradient blocks, and the
 * logits/probabilities of the last forward (B*T x V, device).  The
 * parameters' pointer drops the weights' folded amaxes (the caller may
 * write them). */
float *gpu_model_params(gpu_model *g);
float *gpu_model_grads(gpu_model *g);
const float *gpu_model_probs(gpu_model *g);
/* The bytes of the model's arena: activations, backward scratch, the fused
 * attention's buffers. */
size_t gpu_model_arena_bytes(const gpu_model *g);
/* Device memory in use now (all of this process's allocations), GiB. */
double gpu_memory_in_use_gib(void);
/* The recipe's GEMM context (gemm.h), to read its operand slots. */
struct gtq_ctx *gpu_model_gemm(gpu_model *g);
/* For tests: on = SwiGLU's backward always through the float32 gradients and
 * the GEMM fills' rounding passes, never the fused kernel that writes the W1
 * and W3 dY operands itself (the default where the recipe allows it); and
 * how many layers' backward took the fused kernel since gpu_model_new. */
void gpu_model_set_swiglu_unfused(gpu_model *g, bool on);
unsigned long long gpu_model_swiglu_fused(const gpu_model *g);
/* The same for RoPE rotating q and k into the fused attention's bf16
 * inputs and dq and dk into Q's and K's dY operands (the rotated tensors
 * never in float32): on = always the in-place rotation and the fills'
 * passes; the count is of tensors so rotated. */
void gpu_model_set_rope_unfused(gpu_model *g, bool on);
unsigned long long gpu_model_rope_fused(const gpu_model *g);
/* The same for SwiGLU's forward writing W2's X operand itself (hg never in
 * float32): on = always the float32 hg and the fill's pass. */
void gpu_model_set_swiglu_forward_unfused(gpu_model *g, bool on);
unsigned long long gpu_model_swiglu_forward_fused(const gpu_model *g);
/* The same for RMSNorm's forward writing the bf16 X operand of the GEMMs that
 * read its output (ln1, ln2, lnf; the float32 output only where something
 * else reads it): on = always the float32 output and the fills' passes; the
 * count is of RMSNorms so written. */
void gpu_model_set_rmsnorm_forward_unfused(gpu_model *g, bool on);
unsigned long long gpu_model_rmsnorm_forward_fused(const gpu_model *g);
/* The same for RMSNorm's backward writing the residual gradient as W2's
 * and W_O's dY where their fills are bf16's own rne of it: on = the fills'
 * passes; the count is of images so written. */
void gpu_model_set_dres_unfused(gpu_model *g, bool on);
unsigned long long gpu_model_dres_fused(const gpu_model *g);
/* The same for bf16 activations' operands made by their producers where
 * the fills would leave them as they are: with the fused attention on plain
 * bf16 inputs, q, k and v written in bf16 by their GEMMs, q and k rotated
 * in bf16 into the kernel's inputs, dq and dk rotated back in bf16 into Q's
 * and K's dY, dv rounded by its fill alone; W2's and WO's dY filled from the
 * residual gradient itself.  On = the float32 tensors, RoPE on them, the
 * rounding passes and the fills; the count is of tensors so made. */
void gpu_model_set_act_bf16_unfused(gpu_model *g, bool on);
unsigned long long gpu_model_act_bf16_fused(const gpu_model *g);
/* For tests: on = every fill under per-tensor current scaling runs its own
 * amax pass, never takes the amax that the layer writing its tensor folded
 * as it wrote it (RMSNorm's forward and backward, SwiGLU's forward, RoPE's
 * backward: layers.h's `amax`; the fused attention's forward and backward
 * for its output and dv; AdamW for the weights; the default where the
 * recipe allows it), and gpu_model_update folds nothing and rounds the
 * weight gradients (grad_format) matrix by matrix, an amax pass each, not
 * all in one amax launch and one rounding launch; and how many fills took
 * such an amax since gpu_model_new. */
void gpu_model_set_amax_unfolded(gpu_model *g, bool on);
unsigned long long gpu_model_amax_folded(const gpu_model *g);
/* For tests: gtq_set_scale_nodes on the model's GEMMs (on = the scales and
 * alphas of current scaling by one-thread kernels of their own), and
 * gtq_alphas_paired since gpu_model_new. */
void gpu_model_set_scale_nodes(gpu_model *g, bool on);
unsigned long long gpu_model_alphas_paired(const gpu_model *g);
/* For tests: on = the COAT moments (moments = coat) stored by AdamW and then
 * a group-quantization pass per moment (exmy_cuda_quantize_group_scaled_f32),
 * not by the fused gpu_adamw_coat (the default); the same bits either way. */
void gpu_model_set_coat_unfused(gpu_model *g, bool on);

#ifdef __cplusplus
}
#endif

#endif /* EXPERIMENTS_GPU_MODEL_GPU_H */
