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
 * dK = dS^T Q) are rounded inside the kernel, to nearest even with
 * `p_mantissa_bits` mantissa bits (7: plain bf16; 3..6: E8M3..E8M6, whose
 * values are bf16 values), then multiplied exactly.  Note that P here is
 * FlashAttention's P: exp(s - running max) before the division by the row
 * sum, so its rounding is that of a real FlashAttention on bf16 hardware, not
 * of the materialised softmax of model.c.
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

/* Whether the kernels serve this head size and T: hs 32, 64 or 128, any T
 * from 1 to 65535 * 64 (T need not be a multiple of a block).  The calls
 * below also need NH % NKV == 0 and p_mantissa_bits in 0..7; otherwise they
 * return cudaErrorInvalidValue and launch nothing. */
int flash_attention_supported(int hs, int T);

/* out (float32) and lse (float32, log-sum-exp of each query row's scaled
 * scores, for the backward). */
cudaError_t flash_attention_forward(float *out, float *lse, const __nv_bfloat16 *q,
                                    const __nv_bfloat16 *k, const __nv_bfloat16 *v, int B,
                                    int T, int NH, int NKV, int hs, int p_mantissa_bits,
                                    cudaStream_t s);

/* dq, dk, dv (float32) are OVERWRITTEN.  out: the forward's output (float32),
 * for D = rowsum(dO * O).  scratch: at least flash_attention_scratch_bytes. */
size_t flash_attention_scratch_bytes(int B, int T, int NH, int NKV, int hs);
cudaError_t flash_attention_backward(float *dq, float *dk, float *dv, const __nv_bfloat16 *dout,
                                     const float *out, const float *lse,
                                     const __nv_bfloat16 *q, const __nv_bfloat16 *k,
                                     const __nv_bfloat16 *v, int B, int T, int NH, int NKV,
                                     int hs, int p_mantissa_bits, void *scratch,
                                     cudaStream_t s);

#ifdef __cplusplus
}
#endif

#endif /* EXPERIMENTS_GPU_FLASH_ATTENTION_H */
