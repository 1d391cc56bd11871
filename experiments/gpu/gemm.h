/*
 * The trainer's GEMM on the GPU: the twin of experiments/trainer/qgemm.h.
 *
 * Each GEMM site keeps, per tensor slot (X, W, dY), the quantized copy its
 * GEMMs of the step read: filled by the first use (X and W in the forward, dY
 * in dX = dY W) and reused by the later ones, exactly as the CPU's cache, with
 * the same recipe, sr stream offsets and delayed-scaling sequence, so that the
 * quantized operands are bit-identical to the CPU's (the recipe kernels of
 * cuda/ are); sites whose copies would be the same bits may hold one
 * (gtq_share_begin: q, k and v of ln1, W1 and W3 of ln2).  Products:
 *   BF16 path: when every operand of the site is in a format whose values are
 *     bfloat16 values and is unscaled or per-tensor scaled, the slots hold
 *     bfloat16 copies (for scaled operands the scaled values Q(x s), the
 *     factors 1/s going into alpha, as Transformer Engine does) and cuBLAS
 *     multiplies them on the tensor cores with FP32 accumulation: exact
 *     products, so the emulated GEMM up to the order of FP32 additions;
 *   FP32 path: otherwise, float32 slots and pedantic SGEMM (never TF32);
 *   MX operands: rounded along this GEMM's K at every use (the blocks run
 *     along K, a different axis of the same tensor in the forward and the
 *     backward GEMMs, so no slot holds them; GEMMs that read one tensor the
 *     same way may share its image, gtq_share_begin) into a bf16 image
 *     (exmy_cuda_mx_quantize_bf16) that cuBLAS multiplies as on the BF16
 *     path; should a value fall outside bf16's grid (a float32 subnormal
 *     below 2^-133), that GEMM runs the FP32 fallback, decided on the device
 *     (no synchronisation).  Other MX shapes: exmy_cuda_qgemm, the reference.
 *   Sites with an accumulation model (the recipe's `accumulate`): float32
 *     slots, and exmy_cuda_qgemm_accum, bit-identical to the CPU's
 *     exmy_qgemm_accum (no cuBLAS: one thread per element of C).  Except
 *     the H100's own models, `hopper` and `hopper-split` (k_slice 0) on
 *     E4M3 / E5M2 operands (not E5M2 x E5M2), unscaled or per-tensor scaled
 *     by powers of two: cuBLASLt's FP8 GEMM itself (fast accumulation for
 *     hopper), the operands re-encoded as FP8 codes times 1/s, an algorithm
 *     that does not split K, beta applied in a separate pass as the model
 *     does.  Where a value is not exactly such a code (or, for a scaled
 *     operand, is an FP8 subnormal: the model aligns scaled operands with
 *     float32's emin, the tensor core with the format's), a device flag
 *     makes that GEMM run the emulation instead, with no synchronisation.
 *     And for operands block-scaled along K with blocks of the promotion
 *     interval under hopper-split (fp8-deepseek: E4M3 codes, a float32 scale
 *     per 1 x 128 tile or 128 x 128 block), K a multiple of 128: cuBLASLt's
 *     FP8 GEMM with fast accumulation on each 128-element slice of K (one
 *     strided-batched call per chunk of slices), its partial sums promoted
 *     with the blocks' scales as the model does (exmy_accum_promote_scaled),
 *     the same device flag sending non-codes and non-finite scales to the
 *     emulation.
 * Statistics (stats steps) are reduced on the device into per-use
 * exmy_tensor_stats and copied to the host sites once per step.
 */
#ifndef EXPERIMENTS_GPU_GEMM_H
#define EXPERIMENTS_GPU_GEMM_H

#include <cuda_runtime_api.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cuda/exmy_cuda.h"
#include "lib/accum_core.h" /* before the C block: it includes system headers */

#ifdef __cplusplus
extern "C" { /* the C headers of experiments/ have no guards of their own */
#endif
#include "experiments/trainer/qgemm.h"

typedef struct gtq_ctx gtq_ctx;

/* sites: the host sites of recipe_make_sites (their op[] is the recipe; their
 * stats[] receive the statistics; their delayed states are mirrored on the
 * device, see gtq_states_*); NULL: every GEMM in float32. */
gtq_ctx *gtq_new(tq_site *sites, int n_sites, cudaStream_t stream);
void gtq_free(gtq_ctx *g);

/* Per step, as tq_collect_stats / tq_sr_counter on the CPU. */
void gtq_begin_step(gtq_ctx *g, uint64_t sr_counter, bool collect_stats);
/* At the start of every forward, inside its captured launches (MX tags). */
void gtq_begin_forward(gtq_ctx *g);
/* Whether a step's launches are the same every step (no per-step host
 * state in them), so that CUDA graphs may replay them: no sr (each step's
 * stream offsets), no accumulation models, and block scalings only as MX
 * images on the BF16 path (each forward's MX tags count from 1,
 * gtq_begin_forward); unscaled, per-tensor current scaling (on the BF16
 * path) and delayed scaling (its history's position lives on the device)
 * otherwise. */
bool gtq_replayable(const gtq_ctx *g);
uint64_t gtq_sr_counter(const gtq_ctx *g);
/* Takes the next n indices of the sr stream, as quantizing an operand of n
 * elements would, for values rounded elsewhere (the fused attention's P and
 * dS); returns the first. */
uint64_t gtq_sr_reserve(gtq_ctx *g, uint64_t n);
bool gtq_collecting(const gtq_ctx *g);
/* Grows whenever a CUDA graph captured before then is stale: an operand
 * cache, staging or pointer buffer reallocated (the graph would read freed
 * memory), or delayed states uploaded (gtq_states_upload). */
uint64_t gtq_graph_epoch(const gtq_ctx *g);
/* Copies the device statistics of this step into the host sites (sync). */
void gtq_fetch_stats(gtq_ctx *g);
/* Delayed-scaling states: device -> host sites (for a checkpoint) and back.
 * A step captured in a CUDA graph keeps the slot sharing it was captured
 * with (one delayed state copied into another where the two were equal
 * then, gtq_share_begin), so an upload makes every graph stale
 * (gtq_graph_epoch): the next steps run eagerly, then capture again. */
void gtq_states_download(gtq_ctx *g);
void gtq_states_upload(gtq_ctx *g);
/* Between gtq_share_begin and gtq_share_end (nestable), GEMMs that read one
 * tensor the same way (the same address and layout, format, rounding and sr
 * offset: the same bits) share its rounded copy: an MX operand's bf16 image
 * is made once and taken by the region's later GEMMs, and an element-wise
 * slot on the BF16 path (unscaled, not stochastic, not a statistics step)
 * borrows the slot an earlier fill of the region made, giving back its own
 * buffer, until its next fill.  The caller promises that no tensor those
 * GEMMs read is written inside the region.  The end forgets the images and
 * the fills.  Elsewhere every use rounds its own.  gtq_mx_shared_hits and
 * gtq_slots_borrowed count them (for tests and logs). */
void gtq_share_begin(gtq_ctx *g);
void gtq_share_end(gtq_ctx *g);
unsigned long long gtq_mx_shared_hits(const gtq_ctx *g);
unsigned long long gtq_slots_borrowed(const gtq_ctx *g);
/* Tests: regions share nothing (each use rounds its own, as outside). */
void gtq_set_share_off(gtq_ctx *g, bool off);
/* Tests: on = every current-scaled fill's scale made by a one-thread kernel
 * (exmy_cuda_scale_from_amax) before its rounding, and every scaled GEMM's
 * alpha by another; the default: the rounding kernel works the scale out
 * (exmy_cuda_amax_scale), and with it the alphas of the GEMMs that pair its
 * slot with the site's other scaled slots, which a GEMM takes while neither
 * slot has been filled since.  gtq_alphas_paired counts the GEMMs that took
 * such an alpha. */
void gtq_set_scale_nodes(gtq_ctx *g, bool on);
unsigned long long gtq_alphas_paired(const gtq_ctx *g);
/* A share region around a site's two backward GEMMs (dX = dY W, then
 * dW += dY^T X) where both read dY as MX images (not sr): dX's image of dY
 * along OC is made in one pass with dW's along the tokens
 * (exmy_cuda_mx_quantize_bf16_pair), the same bits.  Returns false, and
 * opens nothing, where the site's dY uses are not such images;
 * gtq_mx_twin_end closes what begin opened.  gtq_mx_twins: how many
 * transposes' images the pairs made (here and gtq_mx_hold_twin's) and how
 * many a GEMM took (tests; not counted in gtq_mx_shared_hits). */
bool gtq_mx_twin_begin(gtq_ctx *g, int site, const float *dy);
void gtq_mx_twin_end(gtq_ctx *g);
/* The forward's image of x as site's X (along C) is made in one pass with
 * its transpose's image (along the tokens, the backward's dW read), which is
 * held until the next forward begins (gtq_begin_forward) and taken by the
 * reads that match it, the same bits.  The caller promises that nothing
 * writes x in between.  Returns false, and arms nothing, where the site's X
 * uses are not MX images both ways (not sr), sharing is off, or statistics
 * are collected; counted in gtq_mx_twins. */
bool gtq_mx_hold_twin(gtq_ctx *g, int site, const float *x);
void gtq_mx_twins(const gtq_ctx *g, unsigned long long *made, unsigned long long *taken);
/* Whether site i runs on the BF16 path (for logs and tests). */
bool gtq_site_bf16(const gtq_ctx *g, int site);

/* An operand as a GEMM reads it. */
typedef struct {
  const void *ptr;
  long ld;
  bool bf16;                          /* else float32 */
  const float *scale;                 /* device s of a scaled bf16 operand, or NULL */
  const exmy_operand_quant *mx;       /* MX: quantize at this use (ptr is the float tensor) */
  int site, use;                      /* MX: whose statistics this use fills */
  const float *qscale;                /* device s of a float32 slot of Q(x s) / s, or NULL */
} gtq_operand;

/* The operand `use` of site `site` for a GEMM: fill = quantize x (rows x
 * cols, leading dimension ld, device) into the slot; !fill = take the slot an
 * earlier use of this step filled.  site < 0: the plain tensor. */
gtq_operand gtq_operand_for_gemm(gtq_ctx *g, int site, int use, int slot, bool fill,
                                 const float *x, long ld, long rows, long cols);

/* Whether a fill of use `use` of site `site` would reduce its tensor's amax
 * in a pass of its own before rounding it (per-tensor current scaling on
 * the BF16 path, not quantized along K, not a statistics step), and so can
 * take that amax from the kernel that writes the tensor instead
 * (gtq_operand_for_gemm_amax). */
bool gtq_fill_takes_amax(const gtq_ctx *g, int site, int use);
/* The same but for the statistics step: whether a fill of that use outside
 * statistics steps would take such an amax, for a word folded before it is
 * known whether the step that fills is one (the weights' amaxes, folded by
 * the update before the next step); gtq_fill_takes_amax decides at the fill. */
bool gtq_fill_takes_amax_outside_stats(const gtq_ctx *g, int site, int use);
/* gtq_operand_for_gemm with x's amax known: x_amax (device) holds the float
 * bits of the finite max |x| over the rows x cols elements of x, folded by
 * the kernel that wrote x as an amax pass would reduce it (layers.h).  Where
 * the fill takes it (fill and gtq_fill_takes_amax), the fill makes the scale
 * of that word (exmy_cuda_scale_from_amax) and runs only the rounding pass
 * (exmy_cuda_quantize_scaled_bf16): the same scale and bits as
 * exmy_cuda_quantize_tensor_bf16, one pass fewer.  Otherwise, or with
 * x_amax NULL: gtq_operand_for_gemm. */
gtq_operand gtq_operand_for_gemm_amax(gtq_ctx *g, int site, int use, int slot, bool fill,
                                      const float *x, long ld, long rows, long cols,
                                      const unsigned int *x_amax);

/* From now on every site's dY slot is one buffer, as large as the largest:
 * for a model whose dY slots are each filled and read by one use after the
 * other (fill, then the GEMMs that reuse it, before the next fill of any
 * site), as the model's backward does.  The GEMMs read the same values;
 * only gtq_slot_download of a dY slot no longer sees an earlier site's.
 * One way; call before the first GEMM. */
void gtq_share_dy_slots(gtq_ctx *g);

/* Tensors stored in bf16 (activations = bf16).  gtq_use_bf16_cublas: use
 * `use` of site `site` reads a bf16 operand image through one cuBLAS GEMM
 * (the BF16 path: unscaled, or per tensor by delayed or current scaling,
 * whose scales enter alpha; not along K, no accumulation model), as
 * gtq_gemm_bf16_out needs of both its operands.
 * gtq_use_bf16_identity: moreover its fill leaves a bf16 value as it is
 * (format bf16, unscaled, not sr, neither saturating nor flushing), so that
 * outside statistics steps (which fill, for the statistics) a tensor stored
 * in bf16 is its own operand: gtq_operand_bf16 (x: rows of ld bf16 values).
 * gtq_gemm_bf16_out: C (bf16, m x n, ldc) = alpha op(A) op(B), accumulated
 * in float32, multiplied by alpha = 1 / (sa sb) in float32 as gtq_gemm's
 * float32 output is (k_alpha's alpha; 1 for unscaled operands) and rounded
 * to bf16 once, by cuBLAS (beta 0), for the operands gtq_bf16_out_serves
 * (both bf16 images, unscaled or per-tensor scaled, not along K, no
 * accumulation model); others: an error. */
bool gtq_use_bf16_cublas(const gtq_ctx *g, int site, int use);
bool gtq_use_bf16_identity(const gtq_ctx *g, int site, int use);
gtq_operand gtq_operand_bf16(int site, int use, const void *x, long ld);
bool gtq_bf16_out_serves(const gtq_ctx *g, gtq_operand a, gtq_operand b);
void gtq_gemm_bf16_out(gtq_ctx *g, bool trans_a, bool trans_b, int m, int n, int k,
                       gtq_operand a, gtq_operand b, void *c, long ldc);

/* Whether a !fill call for `use` of site `site` hands back the float32 tensor
 * x itself (site < 0, the use not quantized, or quantized along K at every
 * use: MX, GROUP, NVFP4) rather than a slot an earlier use filled: whether a
 * GEMM of that use reads x. */
bool gtq_use_reads_source(const gtq_ctx *g, int site, int use);

/* For a kernel that rounds an operand as it computes it, in place of the
 * float32 tensor and the fill's separate pass.  gtq_fusable_bf16: the
 * operand quant of use `use` of site `site` when its fill would be a plain
 * element-wise rounding into bf16 (the BF16 path: exmy_cuda_quantize_bf16,
 * or its per-tensor delayed or current scaling, exmy_cuda_quantize_delayed_bf16
 * or exmy_cuda_quantize_tensor_bf16; not along K, not a statistics step) and
 * use `reuse`, the later use of the same slot, reads that slot and not the
 * float32 tensor; else NULL.
 *
 * For such a use, the fill in steps.  gtq_fill_bf16_slot does what the fill
 * would before its pass: reserves the slot for n bf16 values, takes the sr
 * stream indices, and sets *fill: the slot to write (y), the options of the
 * pass (o, sr offset included), and the scaling as cuda/elementwise.cuh's
 * quantize8_bf16 and block_amax_fold take it (scale_inv, amax_bits, with the
 * amax word zeroed): delayed scaling, the state's current {s, 1/s} and its
 * amax; current scaling (`current`), the amax word only, scale_inv NULL: the
 * caller folds the tensor's amax into amax_bits first (a pass of its own),
 * then gtq_fill_bf16_scale sets scale_inv to the scale of that amax (and
 * amax_bits to NULL), as exmy_cuda_quantize_tensor_bf16 does, or of the word
 * `amax` (not NULL: the tensor's amax as its producer folded it, amax_bits
 * left unused); nothing for other fills.  gtq_fill_bf16_scale_by_kernel is
 * the same for a kernel that works the scale out itself (layers.h's
 * gpu_bf16_scaling.of_amax): it launches nothing, sets of_amax to that amax
 * word and the slot's scale, and leaves scale_inv NULL.  The caller then
 * writes y, and gtq_fill_bf16_done records the
 * amax and moves the delayed state on (nothing for the other scalings).  The
 * later uses take the slot with fill = false.  spare (device, 2n bytes, or
 * NULL): for a second image filled before the first one's GEMMs have run,
 * when the slot is a dY slot under gtq_share_dy_slots (whose one buffer holds
 * the first): the slot then borrows spare, which must stay as written until
 * the slot's GEMMs have read it; ignored for a slot with storage of its own. */
typedef struct {
  void *y;
  exmy_rounding_opts o;
  const float *scale_inv;
  unsigned int *amax_bits;
  bool current;
  exmy_cuda_amax_scale of_amax;
} gtq_bf16_fill;
const exmy_operand_quant *gtq_fusable_bf16(const gtq_ctx *g, int site, int use, int reuse);
void gtq_fill_bf16_slot(gtq_ctx *g, int site, int use, int slot, size_t n, void *spare,
                        gtq_bf16_fill *fill);
void gtq_fill_bf16_scale(gtq_ctx *g, int site, int use, int slot, gtq_bf16_fill *fill,
                         const unsigned int *amax);
void gtq_fill_bf16_scale_by_kernel(gtq_ctx *g, int site, int use, int slot,
                                   gtq_bf16_fill *fill, const unsigned int *amax);
/* gtq_fill_bf16_slot for an image of the dense float32 tensor x (rows x
 * cols), recorded inside a share region as the fill of x, so that a later
 * fill of x the same way borrows the slot as it would borrow a pass's
 * (gtq_operand_for_gemm); gtq_fill_borrows: whether a fill of x for `use`
 * of `site` would borrow now (the producer may then leave x unwritten). */
void gtq_fill_bf16_slot_lent(gtq_ctx *g, int site, int use, int slot, const float *x, long rows,
                             long cols, gtq_bf16_fill *fill);
bool gtq_fill_borrows(const gtq_ctx *g, int site, int use, int slot, const float *x, long rows,
                      long cols);
void gtq_fill_bf16_done(gtq_ctx *g, int site, int use, int slot);

/* C = alpha op(A) op(B) + beta C, row-major as cblas_sgemm. */
void gtq_gemm(gtq_ctx *g, bool trans_a, bool trans_b, int m, int n, int k, float alpha,
              gtq_operand a, gtq_operand b, float beta, float *c, long ldc);

/* The same for `batch` = nb * nh GEMMs (attention, per sequence and head):
 * matrix (i, j) of A starts at element i * a_sb + (j / a_div) * a_sh of A,
 * likewise B and C (div 1 for C); all share ld, op and the recipe. */
typedef struct {
  long sb, sh;
  int div;
} gtq_stride;
void gtq_gemm_batched(gtq_ctx *g, bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                      gtq_operand a, gtq_stride sa, gtq_operand b, gtq_stride sb, float beta,
                      float *c, long ldc, gtq_stride sc, int nb, int nh);

/* For tests: on = every MX and NVFP4 GEMM through exmy_cuda_qgemm (the
 * reference path: gathered, quantized in float32, checked with a host round
 * trip). */
void gtq_set_mx_reference(gtq_ctx *g, bool on);
/* How many GEMMs of operands quantized along K (MX, GROUP, NVFP4; not those
 * under an accumulation model) took each path since gtq_new: MX's bf16
 * images (mx_gemm_bf16, its FP32 fallbacks included), NVFP4's bf16 images of
 * q · s_b (nvfp4_gemm_bf16), or exmy_cuda_qgemm (the reference, forced or
 * not eligible).  Host counts: no synchronisation. */
typedef struct {
  unsigned long long mx_images, nvfp4_images, reference;
} gtq_along_k_path_counts;
void gtq_along_k_paths(const gtq_ctx *g, gtq_along_k_path_counts *counts);
/* How many MX GEMMs took the FP32 fallback of the bf16 images (syncs). */
unsigned long long gtq_mx_fallbacks(gtq_ctx *g);

/* For tests: on = every GEMM under an accumulation model through
 * exmy_cuda_qgemm_accum (the emulation), never cuBLASLt's FP8 GEMM. */
void gtq_set_accum_emulation(gtq_ctx *g, bool on);
/* How many GEMMs under an accumulation model (each matrix of a batched one
 * counts) ran cuBLASLt's FP8 GEMM (*fast) and how many the emulation
 * (*emulated: not eligible, forced, or flagged on the device); syncs. */
void gtq_accum_paths(gtq_ctx *g, unsigned long long *fast, unsigned long long *emulated);
/* The same, with why the emulation ran: not eligible on the host (format,
 * scaling, shape, model, or no unsplit cuBLASLt algorithm), the operands'
 * scales beyond the FP8 path's bounds, or values that are not exact FP8
 * codes (found on the device); syncs. */
typedef struct {
  unsigned long long fast, ineligible, scales_out_of_range, not_codes;
  /* of all these, the GEMMs of block-scaled operands (fp8-deepseek) that
   * tried cuBLASLt, per slice of K or in one call: fast or flagged on the
   * device (host count); of those, the ones that made one call of
   * cuBLASLt's block-scaled GEMM (1 x 128 tiles against 128 x 128 blocks) */
  unsigned long long block_scaled, block_one_call;
} gtq_accum_path_counts;
void gtq_accum_counts(gtq_ctx *g, gtq_accum_path_counts *counts);
/* For tests: on = block-scaled GEMMs per slice of K even where cuBLASLt's
 * block-scaled GEMM could take them in one call (the default: the
 * environment's EXMY_FP8_BLOCK_BATCHED, set and not "0"). */
void gtq_set_block_batched(gtq_ctx *g, bool on);

/* For tests: the dequantized values of slot `slot` of site `site` (n
 * elements) as the GEMMs of this step read them, on the host: bf16 copies
 * widened, scaled copies times 1/s in float32 (as the CPU dequantizes). */
void gtq_slot_download(gtq_ctx *g, int site, int slot, float *out, size_t n);

/* Aborts with a message on a CUDA or cuBLAS error (the trainer cannot go on). */
void gtq_check(cudaError_t e, const char *what);

#ifdef __cplusplus
}
#endif

#endif /* EXPERIMENTS_GPU_GEMM_H */
