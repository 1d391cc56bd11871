/*
 * The element-wise layers of activations = bf16 (experiments/README.md, "bf16
 * activations"), one element at a time, written once for the host (model.c)
 * and the GPU (experiments/gpu/layers.cu), as adamw_core.h is for AdamW: the
 * same float operations in the same order, each rounded once (the exmy_*_rn
 * helpers of lib/scale_core.h: nvcc would otherwise contract a * b + c), and
 * every bf16 rounding by the library's reference core, so both devices give
 * the same bits.  Every function takes and returns float: model.c's double
 * build (gradient check) rounds nothing and keeps its own expressions.
 */
#ifndef EXPERIMENTS_ACT_BF16_CORE_H
#define EXPERIMENTS_ACT_BF16_CORE_H

#include <math.h>

#include "lib/format_core.h"
#include "lib/hostdevice.h"
#include "lib/round_core.h"
#include "lib/scale_core.h"

#ifdef __CUDA_ARCH__
#include <cuda_bf16.h>
#endif

/* x rounded to bfloat16 by the reference core, rne, neither saturating nor
 * flushing (overflow gives infinity, NaN stays NaN): exmy_quantize_f32's
 * value under bf16 and {.mode = EXMY_RNE}, model.c's round_bf16. */
EXMY_HD float act_bf16_core(float x) {
  const exmy_format bf16 = exmy_format_fields(8, 7, 127, EXMY_SPECIALS_IEEE);
  return exmy_core_decode(&bf16, exmy_core_encode(&bf16, EXMY_RNE, 0, 0, 32, x, 0));
}

/* The same value: on the GPU the conversion instruction (cvt.rn.bf16.f32,
 * subnormals kept), which gives the core's bits for every input but a NaN's
 * payload (a NaN either way; layers_gpu_test compares the two on all 2^32
 * inputs): the core's generality made the element-wise kernels of bf16
 * activations compute-bound. */
EXMY_HD float act_bf16(float x) {
#ifdef __CUDA_ARCH__
  return __bfloat162float(__float2bfloat16_rn(x));
#else
  return act_bf16_core(x);
#endif
}

/* sigmoid(a) as model.c's SwiGLU computes it: in double, rounded to float once. */
EXMY_HD float silu_sigmoid(float a) { return (float)(1.0 / (1.0 + exp(-(double)a))); }

/* SwiGLU's forward under bf16 activations, autocast's silu(h1) * h3 of bf16
 * tensors: s = bf16(silu(a)), out = bf16(s b), each op in float32. */
EXMY_HD float swiglu_forward_act_bf16_sig(float a, float sig, float b) {
  const float s = act_bf16(exmy_fmul_rn(a, sig));
  return act_bf16(exmy_fmul_rn(s, b));
}
/* The same with sig = silu_sigmoid(a) given (the GPU's bf16 storage looks
 * it up: a is a bf16 value there, one of 65536). */
EXMY_HD float swiglu_forward_act_bf16_element(float a, float b) {
  return swiglu_forward_act_bf16_sig(a, silu_sigmoid(a), b);
}

/* Its backward, autograd's through those two ops, for output gradient d:
 * dh3 = bf16(d s), ds = bf16(d b), dh1 = bf16(ds silu'(a)) with
 * silu'(a) = sig (1 + a (1 - sig)), multiplied in that order; sig =
 * silu_sigmoid(a) given, as above. */
EXMY_HD void swiglu_backward_act_bf16_sig(float d, float a, float sig, float b, float *dh1,
                                          float *dh3) {
  const float s = act_bf16(exmy_fmul_rn(a, sig)), ds = act_bf16(exmy_fmul_rn(d, b));
  *dh3 = act_bf16(exmy_fmul_rn(d, s));
  *dh1 = act_bf16(exmy_fmul_rn(exmy_fmul_rn(ds, sig),
                               exmy_fadd_rn(1.0f, exmy_fmul_rn(a, exmy_fsub_rn(1.0f, sig)))));
}

EXMY_HD void swiglu_backward_act_bf16_element(float d, float a, float b, float *dh1, float *dh3) {
  swiglu_backward_act_bf16_sig(d, a, silu_sigmoid(a), b, dh1, dh3);
}

/* RoPE's rotation of one pair (x0, x1) by the angle with cosine c and sine s
 * (the backward passes -sin: the inverse rotation); under bf16 activations
 * (round_bf16 != 0) each result rounded once after the float32 rotation
 * (Meta's apply_rotary_emb on the bf16 q and k). */
EXMY_HD void rope_rotate_pair(float x0, float x1, float c, float s, int round_bf16, float *y0,
                              float *y1) {
  const float r0 = exmy_fsub_rn(exmy_fmul_rn(x0, c), exmy_fmul_rn(x1, s)),
              r1 = exmy_fadd_rn(exmy_fmul_rn(x0, s), exmy_fmul_rn(x1, c));
  *y0 = round_bf16 ? act_bf16(r0) : r0;
  *y1 = round_bf16 ? act_bf16(r1) : r1;
}

/* Attention's scores under bf16 activations, autocast's (Q K^T) / sqrt(hs)
 * of a bf16 product: the product rounded, divided in float32 by sqrt_hs =
 * (float)sqrt((double)hs), rounded again; the backward's dS the same. */
EXMY_HD float scores_act_bf16_element(float x, float sqrt_hs) {
  return act_bf16(exmy_fdiv_rn(act_bf16(x), sqrt_hs));
}

#endif /* EXPERIMENTS_ACT_BF16_CORE_H */
