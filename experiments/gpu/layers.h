/*
 * The GPU twins of model.c's layers that are not matrix products, and of
 * optim.c's update: one function per layer and direction, each a kernel launch
 * on `s` over DEVICE pointers, with the arguments and the accumulate/overwrite
 * contract of its CPU twin in experiments/trainer/model.h / optim.h.
 *
 * Determinism: every reduction (RMSNorm's weight gradient, the embedding
 * gradient, the gradient norm, the mean loss) runs in a fixed order that does
 * not depend on the launch or the GPU, so that a run repeated, or resumed from
 * a checkpoint, reproduces its losses bit for bit.
 */
#ifndef EXPERIMENTS_GPU_LAYERS_H
#define EXPERIMENTS_GPU_LAYERS_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#include "cuda/exmy_cuda.h"
#include "experiments/trainer/adamw_core.h"
#include "lib/exmy.h"

#ifdef __cplusplus
extern "C" {
#endif

/* out (N, C) = wte[tokens[i]] */
void gpu_encoder_forward(float *out, const int *tokens, const float *wte, int N, int C,
                         cudaStream_t s);
/* dwte[v] += sum of dout[i] over the positions i with tokens[i] == v, added in
 * increasing i (the CPU's order).  The positions come bucketed by token id,
 * built on the host by gpu_token_buckets: bucket v is
 * bucket_pos[bucket_start[v] .. bucket_start[v+1]), increasing. */
void gpu_encoder_backward(float *dwte, const float *dout, const int *bucket_start,
                          const int *bucket_pos, int V, int C, cudaStream_t s);
/* Host helper: bucket_start (V+1) and bucket_pos (N) of tokens (N, host). */
void gpu_token_buckets(const int *tokens, int N, int V, int *bucket_start, int *bucket_pos);

/* The layers whose output is a GEMM operand that per-tensor current scaling
 * rounds take `amax`: a device word (NULL: not wanted) into which the finite
 * max |y| of every value y they write is folded as float bits, as they write
 * it (cuda/kernel_common.cuh's fold_finite_amax, then block_amax_fold):
 * the word a separate amax pass over the output would leave, NaN and
 * infinities left out as there.  The caller zeroes it first; the values
 * written are the same with or without it. */

/* RMSNorm (eps 1e-5): out = inp * rstd * w, rstd (N) = (mean inp^2 + eps)^-1/2;
 * amax: out's. */
void gpu_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *w, int N, int C,
                         unsigned int *amax, cudaStream_t s);
/* The residual add and the RMSNorm after it in one pass: inp += add (as
 * gpu_add_inplace), then gpu_rmsnorm_forward of inp; the same bits. */
void gpu_add_rmsnorm_forward(float *out, float *rstd, float *inp, const float *add,
                             const float *w, int N, int C, unsigned int *amax, cudaStream_t s);
/* RMSNorm's forward without its output, for per-tensor current scaling's
 * image of it: rstd, and the finite amax of the float32 output folded into
 * *amax (not NULL), nothing else written; gpu_rmsnorm_forward_bf16 on inp
 * then writes the image under the scale of that amax, the same values.  The
 * residual add before it in the same pass: inp += add (as
 * gpu_add_rmsnorm_forward), or inp = base + add_bf16 (as gpu_add_bf16, base
 * with add_bf16), or neither.  Rows as gpu_rmsnorm_forward_bf16_serves
 * takes them, 16-byte aligned tensors; else cudaErrorInvalidValue, nothing
 * launched. */
cudaError_t gpu_rmsnorm_forward_amax(float *rstd, float *inp, const float *add,
                                     const float *base, const uint16_t *add_bf16,
                                     const float *w, int N, int C, unsigned int *amax,
                                     cudaStream_t s);
/* dinp += ..., dw += ... (as rmsnorm_backward); amax: dinp's, after the
 * addition. */
void gpu_rmsnorm_backward(float *dinp, float *dw, const float *dout, const float *inp,
                          const float *w, const float *rstd, int N, int C, unsigned int *amax,
                          cudaStream_t s);
/* The same, and dinp after the addition written rounded to bf16 (rne, as
 * exmy_cuda_quantize_bf16 rounds it into plain bf16: the unscaled bf16 fill
 * of the GEMMs that read it as their dY) into dinp_bf16 (N x C bf16 values;
 * NULL: not written); amax then that of the bf16 values written. */
void gpu_rmsnorm_backward_bf16(float *dinp, void *dinp_bf16, float *dw, const float *dout,
                               const float *inp, const float *w, const float *rstd, int N, int C,
                               unsigned int *amax, cudaStream_t s);
/* For tests: off = the RMSNorm kernels read each row from memory at every
 * pass (any C), never hold it in registers (rows up to 1024, the default);
 * the same bits either way. */
void gpu_rmsnorm_set_rows_in_registers(bool on);

/* RoPE on x (B, T, nh*hs), pairs (2i, 2i+1) of each head, in place; tables
 * (T, hs/2); amax: the rotated dx's. */
void gpu_rope_forward(float *x, const float *cos_t, const float *sin_t, int B, int T, int nh,
                      int hs, cudaStream_t s);
void gpu_rope_backward(float *dx, const float *cos_t, const float *sin_t, int B, int T, int nh,
                       int hs, unsigned int *amax, cudaStream_t s);

/* out = silu(h1) * h3 (amax: out's); backward overwrites dh1 and dh3. */
void gpu_swiglu_forward(float *out, const float *h1, const float *h3, size_t n,
                        unsigned int *amax, cudaStream_t s);
void gpu_swiglu_backward(float *dh1, float *dh3, const float *dout, const float *h1,
                         const float *h3, size_t n, cudaStream_t s);

/* activations = bf16 (experiments/README.md, "bf16 activations"): RoPE and
 * SwiGLU as model.h's rope_*_act_bf16 and swiglu_*_act_bf16, bit for bit
 * (one text, experiments/trainer/act_bf16_core.h): every output rounded to
 * bf16 where autocast rounds it, stored as float32 (bf16 values); amax as
 * above. */
void gpu_rope_forward_act_bf16(float *x, const float *cos_t, const float *sin_t, int B, int T,
                               int nh, int hs, cudaStream_t s);
void gpu_rope_backward_act_bf16(float *dx, const float *cos_t, const float *sin_t, int B, int T,
                                int nh, int hs, unsigned int *amax, cudaStream_t s);
void gpu_swiglu_forward_act_bf16(float *out, const float *h1, const float *h3, size_t n,
                                 unsigned int *amax, cudaStream_t s);
void gpu_swiglu_backward_act_bf16(float *dh1, float *dh3, const float *dout, const float *h1,
                                  const float *h3, size_t n, cudaStream_t s);
/* The same SwiGLU on tensors stored in bf16 (bit patterns; n % 8 == 0 and
 * every pointer 16-byte aligned, else cudaErrorInvalidValue and nothing
 * launched): the float32-storage kernels' bits, half the bytes.  The
 * backward also writes the forward's output into hg unless hg is NULL (the
 * forward's bits, for a backward that did not keep them: one pass over h1
 * and h3, not two).  amax (forward: out's), amax1 (dh1's), amax3 (dh3's):
 * the stored bf16 values' finite max folded as above (NULL: not wanted),
 * the word gpu_bf16_storage_amax would leave. */
cudaError_t gpu_swiglu_forward_bf16_storage(uint16_t *out, const uint16_t *h1,
                                            const uint16_t *h3, size_t n, unsigned int *amax,
                                            cudaStream_t s);
cudaError_t gpu_swiglu_backward_bf16_storage(uint16_t *dh1, uint16_t *dh3, uint16_t *hg,
                                             const uint16_t *dout, const uint16_t *h1,
                                             const uint16_t *h3, size_t n, unsigned int *amax1,
                                             unsigned int *amax3, cudaStream_t s);
/* RoPE's forward (backward false) or backward of bf16 activations on bf16
 * storage: x (B, T, nh*hs bf16 values) rotated into out (may be x) with
 * each result rounded, the bits of gpu_rope_forward_act_bf16 /
 * gpu_rope_backward_act_bf16 on their float32 storage; hs a multiple of 8
 * and 16-byte aligned pointers, else cudaErrorInvalidValue and nothing
 * launched.  amax: out's stored values' finite max folded as above (NULL:
 * not wanted). */
cudaError_t gpu_rope_bf16_storage(uint16_t *out, const uint16_t *x, const float *cos_t,
                                  const float *sin_t, int B, int T, int nh, int hs, bool backward,
                                  unsigned int *amax, cudaStream_t s);
/* Tests: over all 2^32 float32 inputs, how many act_bf16 on the GPU (the
 * conversion instruction) gives other bits than the reference core (a NaN
 * for a NaN counts as equal); -1 on a CUDA error. */
long long gpu_act_bf16_core_mismatches(void);
/* The attention scores of n entries of x, or their gradient, as model.c's
 * scale_scores_bf16: x <- bf16(bf16(x) / sqrt(hs)). */
void gpu_scores_act_bf16(float *x, size_t n, int hs, cudaStream_t s);

/* The same, dh1 and dh3 (n bf16 values each, bit patterns) written as the
 * bf16 GEMM operand images that cuda/exmy_cuda.h's bf16 quantizers make of
 * the float32 gradients above with format f and options o1 (dh1) and o3
 * (dh3), bit for bit, without the float32 tensors: o1 and o3 may differ only
 * in the sr stream offset.  sc1 and sc3 (NULL: unscaled, no amax) are each
 * gradient's per-tensor scaling as the quantizer applies it: scale_inv the
 * device {s, 1/s} of the scaled image Q(g s) (NULL: unscaled), amax_bits a
 * device word the finite max |g| is folded into as float bits (NULL: none;
 * the caller zeroes it): exmy_cuda_quantize_bf16 with both NULL,
 * exmy_cuda_quantize_delayed_bf16 with the pointers of
 * exmy_cuda_delayed_begin (then exmy_cuda_delayed_end), and
 * exmy_cuda_quantize_tensor_bf16 with the {s, 1/s} that
 * exmy_cuda_scale_from_amax makes of gpu_swiglu_backward_amax's amax.  f must
 * pass gpu_bf16_operand_serves (a table format of the bf16 operand
 * path: bf16, e4m3, e5m2, e8m3..e8m6); any other f or options:
 * cudaErrorInvalidValue, nothing launched.  of_amax (gpu_bf16_storage_image
 * and the RMSNorm kernels only; zero elsewhere): current scaling's scale
 * worked out by the kernel from an amax word, in place of scale_inv (whose
 * {s, 1/s} exmy_cuda_scale_from_amax would have made in of_amax.scale_out). */
typedef struct {
  const float *scale_inv;
  unsigned int *amax_bits;
  exmy_cuda_amax_scale of_amax;
} gpu_bf16_scaling;
bool gpu_bf16_operand_serves(const exmy_format *f);
cudaError_t gpu_swiglu_backward_bf16(void *dh1, void *dh3, const float *dout, const float *h1,
                                     const float *h3, size_t n, const exmy_format *f,
                                     const exmy_rounding_opts *o1, const exmy_rounding_opts *o3,
                                     const gpu_bf16_scaling *sc1, const gpu_bf16_scaling *sc3,
                                     cudaStream_t s);
/* The forward's out = silu(h1) h3 (n bf16 values, bit patterns) written as
 * the bf16 GEMM operand image of the float32 tensor gpu_swiglu_forward
 * makes, with format f, options o and scaling sc as above (NULL: unscaled),
 * bit for bit, without the float32 tensor; the same formats served. */
cudaError_t gpu_swiglu_forward_bf16(void *out, const float *h1, const float *h3, size_t n,
                                    const exmy_format *f, const exmy_rounding_opts *o,
                                    const gpu_bf16_scaling *sc, cudaStream_t s);
/* x (n values stored in bf16) written into y (may be x) as its bf16 GEMM
 * operand image with f, o and sc as above: the bits, sr stream indices and
 * amax of the fill of the float32 tensor of those values.  n % 8 == 0 and
 * 16-byte aligned pointers, formats and options as gpu_swiglu_forward_bf16;
 * else cudaErrorInvalidValue, nothing launched. */
cudaError_t gpu_bf16_storage_image(void *y, const uint16_t *x, size_t n, const exmy_format *f,
                                   const exmy_rounding_opts *o, const gpu_bf16_scaling *sc,
                                   cudaStream_t s);
/* The finite max |x| of n values stored in bf16 folded into *amax (device
 * word, as float bits; the caller zeroes it): the word exmy_cuda_amax_fold
 * leaves on the widened values, current scaling's first pass before
 * gpu_bf16_storage_image.  Storage rules as above; else
 * cudaErrorInvalidValue, nothing launched. */
cudaError_t gpu_bf16_storage_amax(const uint16_t *x, size_t n, unsigned int *amax,
                                  cudaStream_t s);
/* gpu_swiglu_forward_bf16_storage and gpu_swiglu_backward_bf16_storage
 * (without hg) with each output written as the bf16 GEMM operand image of
 * the bf16 tensor they store, with f, o and sc as above: the bits, sr stream
 * indices and amax of that tensor's fill (bf16 activations, where the GEMMs
 * read SwiGLU's tensors through another format).  Storage rules as those
 * functions (n % 8 == 0, 16-byte aligned), formats and options as
 * gpu_swiglu_backward_bf16; else cudaErrorInvalidValue, nothing launched. */
cudaError_t gpu_swiglu_forward_bf16_storage_image(void *out, const uint16_t *h1,
                                                  const uint16_t *h3, size_t n,
                                                  const exmy_format *f,
                                                  const exmy_rounding_opts *o,
                                                  const gpu_bf16_scaling *sc, cudaStream_t s);
cudaError_t gpu_swiglu_backward_bf16_storage_image(
    void *dh1, void *dh3, const uint16_t *dout, const uint16_t *h1, const uint16_t *h3, size_t n,
    const exmy_format *f, const exmy_rounding_opts *o1, const exmy_rounding_opts *o3,
    const gpu_bf16_scaling *sc1, const gpu_bf16_scaling *sc3, cudaStream_t s);
/* RoPE's forward (backward false) or backward of x (B, T, nh*hs; x is not
 * changed), written as the bf16 GEMM operand image of the float32 tensor
 * gpu_rope_forward or gpu_rope_backward leaves, with f, o and sc as above,
 * bit for bit; hs a multiple of 8, else (or an f or o not served)
 * cudaErrorInvalidValue, nothing launched.  out NULL: nothing written but
 * the finite max |rotated x| folded into sc->amax_bits (current scaling's
 * first pass, as gpu_swiglu_backward_amax). */
cudaError_t gpu_rope_bf16(void *out, const float *x, const float *cos_t, const float *sin_t,
                          int B, int T, int nh, int hs, bool backward, const exmy_format *f,
                          const exmy_rounding_opts *o, const gpu_bf16_scaling *sc,
                          cudaStream_t s);
/* RMSNorm's forward (gpu_rmsnorm_forward, or gpu_add_rmsnorm_forward where
 * add is not NULL: inp = inp + add first) written as the bf16 GEMM operand
 * image of its float32 output, with f, o and sc as above, bit for bit (sr
 * stream indices those of the float32 tensor's fill); the float32 output
 * too where out_f32 is not NULL, and rstd as always.  C a multiple of 8 and
 * at most 1024, inp and add 16-byte aligned, else (or an f or o not served)
 * cudaErrorInvalidValue, nothing launched. */
cudaError_t gpu_rmsnorm_forward_bf16(void *out, float *out_f32, float *rstd, float *inp,
                                     const float *add, const float *w, int N, int C,
                                     const exmy_format *f, const exmy_rounding_opts *o,
                                     const gpu_bf16_scaling *sc, cudaStream_t s);
/* The same after sum = inp + add for bf16 add (gpu_add_bf16's sums, written
 * to sum; inp is not changed): the residual add of bf16 activations and the
 * RMSNorm after it in one pass. */
cudaError_t gpu_add_bf16_rmsnorm_forward_bf16(void *out, float *out_f32, float *rstd, float *sum,
                                              const float *inp, const uint16_t *add,
                                              const float *w, int N, int C,
                                              const exmy_format *f,
                                              const exmy_rounding_opts *o,
                                              const gpu_bf16_scaling *sc, cudaStream_t s);
/* Whether the two above take rows of C: C a multiple of 8 and at most 1024,
 * the widest row their kernel stages in shared memory. */
bool gpu_rmsnorm_forward_bf16_serves(int C);
/* The finite max |dh1| and |dh3| of the gradients above, folded into *amax1
 * and *amax3 (device words, either NULL) as float bits, nothing written:
 * per-tensor current scaling's first pass for gpu_swiglu_backward_bf16. */
cudaError_t gpu_swiglu_backward_amax(const float *dout, const float *h1, const float *h3,
                                     size_t n, unsigned int *amax1, unsigned int *amax3,
                                     cudaStream_t s);

/* y += x */
void gpu_add_inplace(float *y, const float *x, size_t n, cudaStream_t s);
/* y = a + x with x in bf16 (bit patterns), or y = x where a is NULL (y may
 * be a): the float32 sum gpu_add_inplace makes of x's values. */
void gpu_add_bf16(float *y, const float *a, const uint16_t *x, size_t n, cudaStream_t s);
/* y = x0 + x1 + x2 (x1 and x2 bf16 like x0, either NULL: fewer terms),
 * added left to right in float32: gpu_add_bf16(y, NULL, x0), then
 * gpu_add_bf16(y, y, x1) and (y, y, x2), in one pass; the same bits. */
void gpu_sum_bf16(float *y, const uint16_t *x0, const uint16_t *x1, const uint16_t *x2, size_t n,
                  cudaStream_t s);

/* Attention's causal softmax over rows of length T, in place: row r has its
 * query at t = r % T, entries j <= t become softmax, j > t become 0.
 * rows = B * NH * T. */
void gpu_causal_softmax_forward(float *att, long rows, int T, cudaStream_t s);
/* datt (in place, holds dP on entry) = scale * P * (dP - rowsum(dP * P)) for
 * j <= t, 0 above the diagonal. */
void gpu_causal_softmax_backward(float *datt, const float *att, long rows, int T, float scale,
                                 cudaStream_t s);

/* probs (N, V) holds the logits on entry and the softmax on exit; losses (N). */
void gpu_crossentropy_forward(float *probs, float *losses, const int *targets, int N, int V,
                              cudaStream_t s);
/* phi (LOGIT_SHARPNESS_NUM_EPS, N): model.c's logit_sharpness_forward of the
 * logits (N, V), which it leaves unchanged. */
void gpu_logit_sharpness_forward(float *phi, const float *logits, const int *targets, int N,
                                 int V, cudaStream_t s);
/* dlogits (N, V) = (probs - onehot(targets)) * scale; dlogits may alias probs. */
void gpu_crossentropy_backward(float *dlogits, const float *probs, const int *targets, int N,
                               int V, float scale, cudaStream_t s);
/* *out (device) = mean of x (n values), summed in double in a fixed order. */
void gpu_mean(const float *x, int n, double *out, cudaStream_t s);

/* Grows by one whenever a layer's internal scratch buffer is reallocated (a
 * CUDA graph captured before then reads freed memory). */
uint64_t gpu_layers_scratch_epoch(void);

/* *out (device) = sum of g[i]^2 in double, in a fixed order (the global
 * gradient norm's square).  scratch: at least gpu_sumsq_scratch(n) doubles. */
size_t gpu_sumsq_scratch(size_t n);
void gpu_sumsq(const float *g, size_t n, double *scratch, double *out, cudaStream_t s);

/* Clipping and AdamW in one pass, as grad_clip + adamw_update (optim.c):
 * coef = max_norm / (sqrt(*sumsq) + 1e-6) in double, cast to float, applied
 * to g (g is scaled in place) when max_norm > 0 and coef < 1; then
 * adamw_element (experiments/trainer/adamw_core.h, the CPU's very code) with the
 * coefficients of this step and tensor (adamw_step_coefs, optim.h). */
void gpu_adamw(float *p, float *g, float *m, float *v, size_t n, const double *sumsq,
               double max_norm, const adamw_coefs *c, cudaStream_t s);
/* gpu_adamw with the new parameters' amaxes, for the fills of the next
 * forward under per-tensor current scaling: p holds `matrices` matrices of
 * n / matrices elements each (n a multiple of matrices), and the finite max
 * |p| of matrix j's new values is folded into amax[j * amax_stride] as float
 * bits (layers.h's `amax` above; the caller zeroes the words).  The same p,
 * g, m, v as gpu_adamw. */
void gpu_adamw_fold(float *p, float *g, float *m, float *v, size_t n, const double *sumsq,
                    double max_norm, const adamw_coefs *c, size_t matrices, unsigned int *amax,
                    size_t amax_stride, cudaStream_t s);

/* A matrix of the multi-matrix passes below: n floats at x (device). */
typedef struct {
  float *x;
  size_t n;
} gpu_matrix;

/* The finite amax of each of `count` matrices (a device array of their
 * descriptors, count <= 65535; max_n: the largest n) in one launch, a row of
 * blocks per matrix as gpu_adamw_fold: amax[j] (device words, zeroed by the
 * caller) = the word that an amax pass over matrix j alone (cuda/reduce.cuh's
 * k_amax) would leave, NaN and infinities left out as there (layers.h's
 * `amax` above). */
void gpu_amax_matrices(const gpu_matrix *matrices, int count, size_t max_n, unsigned int *amax,
                       cudaStream_t s);
/* Per-tensor current scaling of each of those matrices in place under its
 * own amax word (gpu_amax_matrices'), in one launch: the bits that
 * exmy_cuda_quantize_tensor_scaled_f32 (margin, pow2) leaves on each matrix
 * alone.  Served for the formats with float32 scaled kernels of their own
 * (EXMY_GPU_SCALED) in rne (gpu_quantize_matrices_serves); otherwise
 * cudaErrorInvalidValue and nothing launched. */
bool gpu_quantize_matrices_serves(const exmy_format *f, const exmy_rounding_opts *o);
cudaError_t gpu_quantize_matrices_scaled(const exmy_format *f, const exmy_rounding_opts *o,
                                         int margin, bool pow2, const gpu_matrix *matrices,
                                         int count, size_t max_n, const unsigned int *amax,
                                         cudaStream_t s);

/* gpu_adamw over ntensors consecutive tensors at once (tensor i: lengths[i]
 * elements, coefficients coefs[i]; at most GPU_ADAMW_MAX_TENSORS) with the
 * moments stored as COAT stores them (recipe_store_moments, moments = coat):
 * each group of `group` elements of m (of v), counted from the first tensor's
 * start, rounded rne, saturating, to formats[0] (formats[1]) under the
 * group's scale, with dynamic range expansion if dre.  The same bits as
 * gpu_adamw per tensor followed by exmy_cuda_quantize_group_scaled_f32 on m
 * and on v as one row (margin 0, no pow2), in one pass: a warp per group,
 * the moments rounded before they are stored. */
#define GPU_ADAMW_MAX_TENSORS 16
cudaError_t gpu_adamw_coat(float *p, float *g, float *m, float *v, const size_t *lengths,
                           const adamw_coefs *coefs, int ntensors, const double *sumsq,
                           double max_norm, const exmy_format formats[2], int group, bool dre,
                           cudaStream_t s);

/* Smooth-SwiGLU per token row: model.h's smooth_swiglu_forward,
 * smooth_swiglu_backward and smooth_swiglu_scale_rows, bit for bit. */
void gpu_smooth_swiglu_forward(float *out, const float *h1, const float *h3, int N, int H,
                               cudaStream_t s);
void gpu_smooth_swiglu_backward(float *dh1, float *dh3, const float *dout, const float *h1,
                                const float *h3, int N, int H, cudaStream_t s);
void gpu_smooth_swiglu_scale_rows(float *dst, const float *src, const float *h3, int N, int C,
                                  int H, cudaStream_t s);

#ifdef __cplusplus
}
#endif

#endif /* EXPERIMENTS_GPU_LAYERS_H */
