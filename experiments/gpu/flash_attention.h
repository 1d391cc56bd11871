/*
 * Fused causal attention on the GPU (FlashAttention-2 style): the T x T scores
 * are never stored; each block of queries streams over the blocks of keys
 * with an online softmax, and the backward recomputes the probabilities from
 * the saved log-sum-exp.
 *
 * Precision: the products run on the bf16 tensor cores with FP32
 * accumulation.  Q, K, V and dO arrive as bf16 (the caller has already rounded
 * them, into the attention site's format or plainly to bf16).  The
 * probabilities P (before P V and dV = P^T dO) and dS (before dQ = dS K and
 * dK = dS^T Q) are rounded inside the kernel into E8M<mantissa_bits> (7:
 * plain bf16; 3..6: E8M3..E8M6, whose values are bf16 values) by rne, rz or
 * sr exactly as lib/round_core.h rounds, then multiplied exactly.  Note that
 * P here is FlashAttention's P: exp(s - running max) before the division by
 * the row sum in the forward, exp(s - lse) in the backward, so its rounding
 * is that of a real FlashAttention on bf16 hardware, not of the materialised
 * softmax of model.c.
 *
 * Stochastic rounding: element (b, h, i, j) (query i, key j) of P, or of dS,
 * draws the random word of stream index
 *     offset + ((b * NH + h) * T + i) * T + j
 * of the Philox stream `seed` (lib/philox.h: exmy_sr_word), i.e. the index it
 * has in the dense (B * NH * T, T) matrix that the materialised attention
 * rounds with the same (seed, offset).  P takes the same word in the forward
 * (P V) and the backward (P^T dO), dS the same in dQ and dK.
 *
 * Layouts are the model's: q (B, T, NH*hs), k and v (B, T, NKV*hs), out and
 * dq (B, T, NH*hs), dk and dv (B, T, NKV*hs), all row-major; head h reads
 * key/value head h / (NH/NKV) (grouped-query attention).  lse (B, NH, T).
 * Scale 1/sqrt(hs).  Deterministic: no atomics; a run repeated gives the same
 * bits.
 */
#ifndef EXPERIMENTS_GPU_FLASH_ATTENTION_H
#define EXPERIMENTS_GPU_FLASH_ATTENTION_H

#include <cuda_runtime_api.h>
#include <stdint.h>

#include "lib/exmy.h"

#ifdef __cplusplus
#include <cuda_bf16.h>
#else
/* From C the bf16 type is opaque: cuda_bf16.h defines it for C++ only (and
 * pulls in <nv/target>, which C cannot use). */
typedef struct __nv_bfloat16 __nv_bfloat16;
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* How the kernels round P or dS.
 * mantissa_bits: 0..7 (rz and sr: 1..7), the format E8M<mantissa_bits>
 *   (bias 127, IEEE specials: float32's exponent range, subnormals kept).
 * round: mode EXMY_RNE, EXMY_RZ or EXMY_SR; saturate and flush_subnormals
 *   false; sr: seed, offset (a multiple of 4, and T one too) and sr_bits
 *   (0..32, 0 meaning 32) as in exmy_rounding_opts, with the element indices
 *   of the header comment.
 * A NULL flash_rounding means plain bf16 (7 bits, rne). */
typedef struct {
  int mantissa_bits;
  exmy_rounding_opts round;
} flash_rounding;

/* Whether the kernels serve this head size and T: hs 32, 64 or 128, any T
 * from 1 to 65535 * 64 (T need not be a multiple of a block).  The calls
 * below also need NH % NKV == 0 and roundings as above (in the backward, P
 * and dS rounded by the same mode); otherwise they return
 * cudaErrorInvalidValue and launch nothing. */
int flash_attention_supported(int hs, int T);

/* out (float32) and lse (float32, log-sum-exp of each query row's scaled
 * scores, for the backward).  out_amax (device word, NULL: not wanted): the
 * finite max |out| folded in as float bits as out is written, the word an
 * amax pass over out would leave (layers.h's `amax`; the caller zeroes it),
 * for per-tensor current scaling of the next GEMM's X. */
cudaError_t flash_attention_forward(float *out, float *lse, const __nv_bfloat16 *q,
                                    const __nv_bfloat16 *k, const __nv_bfloat16 *v, int B,
                                    int T, int NH, int NKV, int hs, const flash_rounding *p,
                                    unsigned int *out_amax, cudaStream_t s);
/* The same with the output written in bf16 (out: B x T x NH*hs), each value
 * rounded once, rne: the float32 output's values rounded as
 * exmy_cuda_quantize_bf16 rounds them into plain bf16.  out_amax: as above,
 * of the bf16 values written. */
cudaError_t flash_attention_forward_bf16(__nv_bfloat16 *out, float *lse,
                                         const __nv_bfloat16 *q, const __nv_bfloat16 *k,
                                         const __nv_bfloat16 *v, int B, int T, int NH, int NKV,
                                         int hs, const flash_rounding *p,
                                         unsigned int *out_amax, cudaStream_t s);

/* dq, dk, dv (float32) are OVERWRITTEN.  out: the forward's output (float32),
 * for D = rowsum(dO * O).  scratch: at least flash_attention_scratch_bytes.
 * dv_amax: dv's finite amax, as out_amax above.  act (NULL: neither) holds
 * what bf16 activations change.  round_head_grads (grouped-query attention,
 * NKV < NH): each head's share of dK and dV rounded to bf16 (rne) before
 * the float32 sum over its key/value group, in head order (autograd's
 * gradients of K and V repeated over the group, bf16 tensors, summed); only
 * with plain bf16 P and dS (7 bits, rne), else cudaErrorInvalidValue; no
 * effect where NKV == NH.  out_bf16: O stored in bf16 (its values rounded),
 * read in place of out, which may then be NULL.  grads_bf16 (all three or
 * none): dQ, dK and dV written there in bf16 (rne) in place of dq, dk, dv,
 * which are then not written (dv_amax: of the bf16 values written). */
typedef struct {
  int round_head_grads;
  const __nv_bfloat16 *out_bf16;
  __nv_bfloat16 *grads_bf16[3];
} flash_act_bf16;
size_t flash_attention_scratch_bytes(int B, int T, int NH, int NKV, int hs);
cudaError_t flash_attention_backward(float *dq, float *dk, float *dv, const __nv_bfloat16 *dout,
                                     const float *out, const float *lse,
                                     const __nv_bfloat16 *q, const __nv_bfloat16 *k,
                                     const __nv_bfloat16 *v, int B, int T, int NH, int NKV,
                                     int hs, const flash_rounding *p,
                                     const flash_rounding *ds, void *scratch,
                                     unsigned int *dv_amax, const flash_act_bf16 *act,
                                     cudaStream_t s);

/* Which kernels run.  On a GPU of compute capability 9.0 (H100, H200) the
 * products of hs 64 run on Hopper's warpgroup MMA (wgmma, asynchronous, from
 * shared memory); elsewhere, and for hs 32 and 128, on mma.sync.  Both
 * compute every sum in the same order, so they give the same bits (checked
 * by flash_attention_gpu_test).  flash_attention_use_wgmma(0) keeps to
 * mma.sync everywhere (1: the default choice again) and returns the previous
 * setting; not thread-safe, for tests and benchmarks.
 * flash_attention_wgmma_active(hs): whether calls of this head size would
 * run on wgmma now. */
int flash_attention_use_wgmma(int allow);
int flash_attention_wgmma_active(int hs);

/* For tests, on the host. */
/* x as the kernels round it (r as above; random: the sr word; rne as the
 * kernels do it, which differs from lib/round_core.h for NaN inputs only). */
float flash_attention_round(float x, const flash_rounding *r, uint32_t random);
/* The kernels' lanes replayed on the host: for every element of one head of
 * a T x T matrix, in the layouts of the forward / dQ kernels (query rows) and
 * of the dK, dV kernel (key rows), the sr word the lane holding it ends up
 * with after the lanes have shared their Philox blocks; returns how many of
 * the 2 T^2 words differ from exmy_sr_word(seed, offset + i * T + j) (-1
 * when T or offset is not a multiple of 4). */
long flash_attention_sr_layout_mismatches(int T, uint64_t seed, uint64_t offset);
/* On the device: every float32 input (2^32, each paired with another) as
 * the kernels round a pair of P or dS values into a bf16x2 operand, against
 * lib/round_core.h's encode and decode (r's mode, bits and sr_bits; sr
 * words from the index); returns the halves that differ, a NaN for a NaN,
 * rne's NaN inputs left out as in flash_attention_round (-1 for a rounding
 * the kernels do not serve or a CUDA error). */
long long flash_attention_pack_mismatches(const flash_rounding *r);

#ifdef __cplusplus
}
#endif

#endif /* EXPERIMENTS_GPU_FLASH_ATTENTION_H */
