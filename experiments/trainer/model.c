/* LLaMA forward and backward (see model.h). */
#include "experiments/trainer/model.h"
#include "experiments/trainer/logit_sharpness.h"
#include "experiments/trainer/splitmix64.h"
#include "lib/scale_core.h"
#ifndef MODEL_DOUBLE
#include "experiments/trainer/act_bf16_core.h"
#include "cpu/exmy_cpu.h"
#endif

#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const param_tensor_names[NUM_PARAM_TENSORS] = {
    "wte", "rms1", "wq", "wk", "wv", "wo", "rms2", "w1", "w3", "w2", "rmsf", "lm_head"};
const char *const site_kind_names[SITES_PER_LAYER] = {"q", "k", "v", "o", "w1", "w3", "w2",
                                                      "att_qk", "att_pv"};

static void *zalloc(size_t n, size_t size) { return calloc(n ? n : 1, size); }

/* activations = bf16 (model.h): x rounded in place to bfloat16, rne, by the
 * library's bulk kernel (the rounding of every other bf16 operand); the
 * double build (gradient check) rounds nothing. */
static void round_bf16(real *x, size_t n) {
#ifdef MODEL_DOUBLE
  (void)x, (void)n;
#else
  exmy_format bf16;
  exmy_format_parse("bf16", &bf16);
  const exmy_rounding_opts rne = {.mode = EXMY_RNE};
  exmy_quantize_f32(&bf16, &rne, x, x, n);
#endif
}

/* dst += src (n elements) */
static void add_into(real *dst, const real *src, size_t n) {
#pragma omp parallel for if (n > 65536)
  for (size_t i = 0; i < n; i++) dst[i] += src[i];
}

/* The one matrix product of site s (NULL: none), of its operands of uses ua
 * and ub: float -> the quantized GEMM with the site's accumulation (the
 * subnormals of those operands' formats counted at their emin);
 * double (gradient check) -> dgemm. */
static void gemm(const tq_site *s, int ua, int ub, int ta, int tb, int m, int n, int k,
                 real alpha, const real *a, int lda, const exmy_operand_quant *qa, const real *b,
                 int ldb, const exmy_operand_quant *qb, real beta, real *c, int ldc) {
#ifdef MODEL_DOUBLE
  (void)s, (void)ua, (void)ub;
  (void)qa;
  (void)qb;
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m,
              n, k, alpha, a, lda, b, ldb, beta, c, ldc);
#else
  const exmy_accum_model accum = s ? tq_site_accum(s, ua, ub) : (exmy_accum_model){0};
  tq_gemm(ta, tb, m, n, k, alpha, a, lda, qa, b, ldb, qb, beta, c, ldc, s ? &accum : NULL);
#endif
}

/* ------------------------------------------------------------- encoder */

void encoder_forward(real *out, const int *tokens, const real *wte, int N, int C) {
#pragma omp parallel for if (N > 256)
  for (int i = 0; i < N; i++) memcpy(out + (size_t)i * C, wte + (size_t)tokens[i] * C, sizeof(real) * C);
}

void encoder_backward(real *dwte, const real *dout, const int *tokens, int N, int C) {
  /* serial: tokens repeat, and the order of the sums must not depend on threads */
  for (int i = 0; i < N; i++) {
    real *d = dwte + (size_t)tokens[i] * C;
    const real *g = dout + (size_t)i * C;
    for (int c = 0; c < C; c++) d[c] += g[c];
  }
}

/* ------------------------------------------------------------- RMSNorm */

#define RMS_EPS 1e-5

void rmsnorm_forward(real *out, real *rstd, const real *inp, const real *w, int N, int C) {
#pragma omp parallel for if (N > 64)
  for (int i = 0; i < N; i++) {
    const real *x = inp + (size_t)i * C;
    real *y = out + (size_t)i * C;
    real ss = 0;
    for (int c = 0; c < C; c++) ss += x[c] * x[c];
    real r = (real)(1.0 / sqrt((double)(ss / C) + RMS_EPS));
    for (int c = 0; c < C; c++) y[c] = x[c] * r * w[c];
    rstd[i] = r;
  }
}

/* y = w x r, r = (mean x^2 + eps)^-1/2:
 * dx_j = r (dy_j w_j - x_j r^2 mean_i(dy_i w_i x_i)),  dw_j = sum over rows dy_j x_j r. */
void rmsnorm_backward(real *dinp, real *dw, const real *dout, const real *inp, const real *w,
                      const real *rstd, int N, int C) {
#pragma omp parallel for if (N > 64)
  for (int i = 0; i < N; i++) {
    const real *x = inp + (size_t)i * C, *dy = dout + (size_t)i * C;
    real *dx = dinp + (size_t)i * C;
    real r = rstd[i], dot = 0;
    for (int c = 0; c < C; c++) dot += dy[c] * w[c] * x[c];
    real k = r * r * dot / C;
    for (int c = 0; c < C; c++) dx[c] += r * (dy[c] * w[c] - x[c] * k);
  }
  /* the weight gradient: a sum over rows, columns split among threads */
#pragma omp parallel for if (N > 64)
  for (int c = 0; c < C; c++) {
    real s = 0;
    for (int i = 0; i < N; i++) s += dout[(size_t)i * C + c] * inp[(size_t)i * C + c] * rstd[i];
    dw[c] += s;
  }
}

/* -------------------------------------------------------------- linear */

/* The operand of a site for one use as the GEMM gets it (see tq_operand_for_gemm):
 * a quantized copy cached for the step, or the tensor with its recipe, or the
 * plain tensor.  Double precision (gradient check): always the plain tensor. */
static const real *operand(tq_site *s, int use, int slot, int fill, const real *x, int *ld,
                           int rows, int cols, const exmy_operand_quant **q) {
#ifdef MODEL_DOUBLE
  (void)s, (void)use, (void)slot, (void)fill, (void)ld, (void)rows, (void)cols;
  *q = NULL;
  return x;
#else
  return tq_operand_for_gemm(s, use, slot, fill, x, ld, rows, cols, q);
#endif
}
enum { REUSE = 0, FILL = 1 };

void linear_forward(real *out, const real *inp, const real *w, int N, int C, int OC, tq_site *s) {
  const exmy_operand_quant *qx, *qw;
  int ldx = C, ldw = C;
  const real *x = operand(s, USE_FWD_X, SLOT_X, FILL, inp, &ldx, N, C, &qx);
  const real *wq = operand(s, USE_FWD_W, SLOT_W, FILL, w, &ldw, OC, C, &qw);
  /* Y = X W^T */
  gemm(s, USE_FWD_X, USE_FWD_W, 0, 1, N, OC, C, 1, x, ldx, qx, wq, ldw, qw, 0, out, OC);
}

/* bf16_scratch NULL: linear_backward.  Else (activations = bf16) both
 * products are rounded to bf16 before they are added, as autocast's bf16
 * GEMMs return them: dX = dinp_beta dX + bf16(dY W) and dW += bf16(dY^T X)
 * (the gradient of the weight's bf16 cast, summed in float32), each product
 * first in bf16_scratch (N x C for dinp_beta != 0, and OC x C). */
static void linear_backward_act(real *dinp, real *dw, const real *dout, const real *inp,
                                const real *w, int N, int C, int OC, tq_site *s, real dinp_beta,
                                real *bf16_scratch) {
  const exmy_operand_quant *qdy, *qw, *qdy2, *qx;
  int lddy = OC, ldw = C, lddy2 = OC, ldx = C;
  const real *dy = operand(s, USE_DX_DY, SLOT_DY, FILL, dout, &lddy, N, OC, &qdy);
  const real *wq = operand(s, USE_DX_W, SLOT_W, REUSE, w, &ldw, OC, C, &qw);
  const real *dy2 = operand(s, USE_DW_DY, SLOT_DY, REUSE, dout, &lddy2, N, OC, &qdy2);
  const real *x = operand(s, USE_DW_X, SLOT_X, REUSE, inp, &ldx, N, C, &qx);
  if (!bf16_scratch) {
    /* dX = dinp_beta dX + dY W */
    gemm(s, USE_DX_DY, USE_DX_W, 0, 0, N, C, OC, 1, dy, lddy, qdy, wq, ldw, qw, dinp_beta, dinp, C);
    /* dW += dY^T X */
    gemm(s, USE_DW_DY, USE_DW_X, 1, 0, OC, C, N, 1, dy2, lddy2, qdy2, x, ldx, qx, 1, dw, C);
    return;
  }
  real *dx = dinp_beta == 0 ? dinp : bf16_scratch;
  gemm(s, USE_DX_DY, USE_DX_W, 0, 0, N, C, OC, 1, dy, lddy, qdy, wq, ldw, qw, 0, dx, C);
  round_bf16(dx, (size_t)N * C);
  if (dx != dinp) {
    if (dinp_beta != 1)
      for (size_t i = 0; i < (size_t)N * C; i++) dinp[i] *= dinp_beta;
    add_into(dinp, dx, (size_t)N * C);
  }
  gemm(s, USE_DW_DY, USE_DW_X, 1, 0, OC, C, N, 1, dy2, lddy2, qdy2, x, ldx, qx, 0, bf16_scratch, C);
  round_bf16(bf16_scratch, (size_t)OC * C);
  add_into(dw, bf16_scratch, (size_t)OC * C);
}

void linear_backward(real *dinp, real *dw, const real *dout, const real *inp, const real *w,
                     int N, int C, int OC, tq_site *s, real dinp_beta) {
  linear_backward_act(dinp, dw, dout, inp, w, N, C, OC, s, dinp_beta, NULL);
}

/* ---------------------------------------------------------------- RoPE */

void rope_tables(real *cos_t, real *sin_t, int T, int hs, double theta) {
  for (int t = 0; t < T; t++)
    for (int i = 0; i < hs / 2; i++) {
      double freq = pow(theta, -2.0 * i / hs);
      cos_t[t * (hs / 2) + i] = (real)cos(t * freq);
      sin_t[t * (hs / 2) + i] = (real)sin(t * freq);
    }
}

/* x rotated pair by pair (sign -1: the inverse rotation); bf16: each result
 * rounded once (activations = bf16).  The float build rotates with the text
 * the GPU compiles (act_bf16_core.h); the double build rounds nothing. */
static void rope_rotate(real *x, const real *cos_t, const real *sin_t, int B, int T, int nh,
                        int hs, real sign, int bf16) {
#ifdef MODEL_DOUBLE
  (void)bf16;
#endif
#pragma omp parallel for collapse(2) if (B * T > 64)
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T; t++) {
      const real *cs = cos_t + t * (hs / 2), *sn = sin_t + t * (hs / 2);
      real *row = x + ((size_t)b * T + t) * nh * hs;
      for (int h = 0; h < nh; h++)
        for (int i = 0; i < hs / 2; i++) {
          real *p = row + h * hs + 2 * i;
          real x0 = p[0], x1 = p[1], c = cs[i], s = sign * sn[i];
#ifdef MODEL_DOUBLE
          p[0] = x0 * c - x1 * s;
          p[1] = x0 * s + x1 * c;
#else
          rope_rotate_pair(x0, x1, c, s, bf16, &p[0], &p[1]);
#endif
        }
    }
}

void rope_forward(real *x, const real *cos_t, const real *sin_t, int B, int T, int nh, int hs) {
  rope_rotate(x, cos_t, sin_t, B, T, nh, hs, 1, 0);
}

/* The rotation is orthogonal: its gradient is the inverse rotation. */
void rope_backward(real *dx, const real *cos_t, const real *sin_t, int B, int T, int nh, int hs) {
  rope_rotate(dx, cos_t, sin_t, B, T, nh, hs, -1, 0);
}

void rope_forward_act_bf16(real *x, const real *cos_t, const real *sin_t, int B, int T, int nh,
                           int hs) {
  rope_rotate(x, cos_t, sin_t, B, T, nh, hs, 1, 1);
}

void rope_backward_act_bf16(real *dx, const real *cos_t, const real *sin_t, int B, int T, int nh,
                            int hs) {
  rope_rotate(dx, cos_t, sin_t, B, T, nh, hs, -1, 1);
}

/* ----------------------------------------------------------- attention */

/* Row by row (row r of T entries is query r % T): the entries above the
 * diagonal become 0, the rest their softmax. */
void causal_softmax_forward(real *att, long rows, int T) {
#pragma omp parallel for if (rows > 64)
  for (long r = 0; r < rows; r++) {
    int t = (int)(r % T);
    real *row = att + (size_t)r * T;
    real mx = row[0];
    for (int j = 1; j <= t; j++) mx = row[j] > mx ? row[j] : mx;
    real sum = 0;
    for (int j = 0; j <= t; j++) {
      row[j] = (real)exp((double)(row[j] - mx));
      sum += row[j];
    }
    real inv = 1 / sum;
    for (int j = 0; j <= t; j++) row[j] *= inv;
    for (int j = t + 1; j < T; j++) row[j] = 0;
  }
}

/* In place, datt = dS = scale P (dP - rowsum(dP P)) from dP and P = att. */
void causal_softmax_backward(real *datt, const real *att, long rows, int T, real scale) {
#pragma omp parallel for if (rows > 64)
  for (long r = 0; r < rows; r++) {
    int t = (int)(r % T);
    real *d = datt + (size_t)r * T;
    const real *p = att + (size_t)r * T;
    real dot = 0;
    for (int j = 0; j <= t; j++) dot += d[j] * p[j];
    for (int j = 0; j <= t; j++) d[j] = scale * p[j] * (d[j] - dot);
    for (int j = t + 1; j < T; j++) d[j] = 0;
  }
}

/* The scale of the attention scores, 1 / sqrt(head size). */
static real attention_scale(int hs) { return (real)(1.0 / sqrt((double)hs)); }

/* activations = bf16: the scores as autocast computes (Q K^T) / sqrt(hs)
 * from bf16 tensors, bf16(bf16(Q K^T) / sqrt(hs)), the division in float32;
 * the same for their gradient, dS <- bf16(bf16(dS) / sqrt(hs)).  n entries of x. */
static void scale_scores_bf16(real *x, size_t n, int hs) {
  const real sqrt_hs = (real)sqrt((double)hs);
#ifdef MODEL_DOUBLE
#pragma omp parallel for if (n > 65536)
  for (size_t i = 0; i < n; i++) x[i] /= sqrt_hs;
#else
  /* act_bf16_core.h's text, the GPU's too */
#pragma omp parallel for if (n > 65536)
  for (size_t i = 0; i < n; i++) x[i] = scores_act_bf16_element(x[i], sqrt_hs);
#endif
}

/* Per (batch, head): S = scale Q_h K_g^T (g = the head's key/value group),
 * causal softmax, O_h = P V_g.  Whole tensors are quantized once (per-tensor
 * scaling sees the tensor), the products run per head.  bf16: S as
 * scale_scores_bf16, P float32 (autocast's softmax), O rounded to bf16. */
static void attention_forward_act(real *out, real *att, const real *q, const real *k,
                                  const real *v, int B, int T, int NH, int NKV, int hs,
                                  tq_site *qk, tq_site *pv, int bf16) {
  const int C = NH * hs, KVC = NKV * hs, group = NH / NKV, N = B * T;
  const real scale = bf16 ? 1 : attention_scale(hs);
  const exmy_operand_quant *qq, *qkk, *qp, *qv;
  int ldq = C, ldk = KVC, ldp = T, ldv = KVC;
  const real *Q = operand(qk, USE_FWD_X, SLOT_X, FILL, q, &ldq, N, C, &qq);
  const real *K = operand(qk, USE_FWD_W, SLOT_W, FILL, k, &ldk, N, KVC, &qkk);
  for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++) {
      int g = h / group;
      gemm(qk, USE_FWD_X, USE_FWD_W, 0, 1, T, T, hs, scale, Q + (size_t)b * T * ldq + h * hs, ldq, qq,
           K + (size_t)b * T * ldk + g * hs, ldk, qkk, 0, att + ((size_t)b * NH + h) * T * T, T);
    }
  if (bf16) scale_scores_bf16(att, (size_t)B * NH * T * T, hs);
  causal_softmax_forward(att, (long)B * NH * T, T);
  const real *P = operand(pv, USE_FWD_X, SLOT_X, FILL, att, &ldp, B * NH * T, T, &qp);
  const real *V = operand(pv, USE_FWD_W, SLOT_W, FILL, v, &ldv, N, KVC, &qv);
  for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++) {
      int g = h / group;
      gemm(pv, USE_FWD_X, USE_FWD_W, 0, 0, T, hs, T, 1, P + ((size_t)b * NH + h) * T * ldp, ldp, qp,
           V + (size_t)b * T * ldv + g * hs, ldv, qv, 0, out + (size_t)b * T * C + h * hs, C);
    }
  if (bf16) round_bf16(out, (size_t)N * C);
}

void attention_forward(real *out, real *att, const real *q, const real *k, const real *v, int B,
                       int T, int NH, int NKV, int hs, tq_site *qk, tq_site *pv) {
  attention_forward_act(out, att, q, k, v, B, T, NH, NKV, hs, qk, pv, 0);
}

/* dst (T x hs, leading dimension ld) += op(a) op(b), one head's share of a
 * key/value group's gradient: accumulated by the GEMM in float32, or with
 * bf16_scratch (activations = bf16) rounded to bf16 before the sum. */
static void add_head_share(const tq_site *s, int ua, int ub, int ta, int tb, int T, int hs,
                           int k, const real *a, int lda, const exmy_operand_quant *qa,
                           const real *b, int ldb, const exmy_operand_quant *qb, real *dst,
                           int ld, real *bf16_scratch) {
  if (!bf16_scratch) {
    gemm(s, ua, ub, ta, tb, T, hs, k, 1, a, lda, qa, b, ldb, qb, 1, dst, ld);
    return;
  }
  gemm(s, ua, ub, ta, tb, T, hs, k, 1, a, lda, qa, b, ldb, qb, 0, bf16_scratch, hs);
  round_bf16(bf16_scratch, (size_t)T * hs);
  for (int t = 0; t < T; t++)
    for (int j = 0; j < hs; j++) dst[(size_t)t * ld + j] += bf16_scratch[(size_t)t * hs + j];
}

/* datt: scratch of B * NH * T * T.  bf16_scratch NULL: float32.  Else
 * (activations = bf16, T x hs of scratch) autocast's backward of
 * attention_forward_act: dP = bf16(dO V^T), dS from the float32 softmax
 * backward then as scale_scores_bf16, dQ = bf16(dS K); each head's share of
 * dK and dV rounded to bf16, the shares of a key/value group summed in
 * float32 and the sum rounded (the backward of the heads' expand). */
static void attention_backward_act(real *dq, real *dk, real *dv, real *datt, const real *dout,
                                   const real *att, const real *q, const real *k, const real *v,
                                   int B, int T, int NH, int NKV, int hs, tq_site *qk,
                                   tq_site *pv, real *bf16_scratch) {
  const int C = NH * hs, KVC = NKV * hs, group = NH / NKV, N = B * T;
  const exmy_operand_quant *q_do, *q_v, *q_do2, *q_p;
  int ld_do = C, ld_v = KVC, ld_do2 = C, ld_p = T;
  const real *dO = operand(pv, USE_DX_DY, SLOT_DY, FILL, dout, &ld_do, N, C, &q_do);
  const real *V = operand(pv, USE_DX_W, SLOT_W, REUSE, v, &ld_v, N, KVC, &q_v);
  const real *dO2 = operand(pv, USE_DW_DY, SLOT_DY, REUSE, dout, &ld_do2, N, C, &q_do2);
  const real *P = operand(pv, USE_DW_X, SLOT_X, REUSE, att, &ld_p, B * NH * T, T, &q_p);
  for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++) {
      int g = h / group;
      size_t bh = (size_t)b * NH + h;
      /* dP = dO V^T */
      gemm(pv, USE_DX_DY, USE_DX_W, 0, 1, T, T, hs, 1, dO + (size_t)b * T * ld_do + h * hs, ld_do, q_do,
           V + (size_t)b * T * ld_v + g * hs, ld_v, q_v, 0, datt + bh * T * T, T);
      /* dV += P^T dO */
      add_head_share(pv, USE_DW_X, USE_DW_DY, 1, 0, T, hs, T, P + bh * T * ld_p, ld_p, q_p,
                     dO2 + (size_t)b * T * ld_do2 + h * hs, ld_do2, q_do2,
                     dv + (size_t)b * T * KVC + g * hs, KVC, bf16_scratch);
    }
  if (bf16_scratch) {
    round_bf16(dv, (size_t)N * KVC);
    round_bf16(datt, (size_t)B * NH * T * T);
    causal_softmax_backward(datt, att, (long)B * NH * T, T, 1);
    scale_scores_bf16(datt, (size_t)B * NH * T * T, hs);
  } else {
    causal_softmax_backward(datt, att, (long)B * NH * T, T, attention_scale(hs));
  }
  const exmy_operand_quant *q_ds, *q_k, *q_ds2, *q_q;
  int ld_ds = T, ld_k = KVC, ld_ds2 = T, ld_q = C;
  const real *dS = operand(qk, USE_DX_DY, SLOT_DY, FILL, datt, &ld_ds, B * NH * T, T, &q_ds);
  const real *K = operand(qk, USE_DX_W, SLOT_W, REUSE, k, &ld_k, N, KVC, &q_k);
  const real *dS2 = operand(qk, USE_DW_DY, SLOT_DY, REUSE, datt, &ld_ds2, B * NH * T, T, &q_ds2);
  const real *Q = operand(qk, USE_DW_X, SLOT_X, REUSE, q, &ld_q, N, C, &q_q);
  for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++) {
      int g = h / group;
      size_t bh = (size_t)b * NH + h;
      /* dQ = dS K */
      gemm(qk, USE_DX_DY, USE_DX_W, 0, 0, T, hs, T, 1, dS + bh * T * ld_ds, ld_ds, q_ds, K + (size_t)b * T * ld_k + g * hs,
           ld_k, q_k, 0, dq + (size_t)b * T * C + h * hs, C);
      /* dK += dS^T Q */
      add_head_share(qk, USE_DW_DY, USE_DW_X, 1, 0, T, hs, T, dS2 + bh * T * ld_ds2, ld_ds2,
                     q_ds2, Q + (size_t)b * T * ld_q + h * hs, ld_q, q_q,
                     dk + (size_t)b * T * KVC + g * hs, KVC, bf16_scratch);
    }
  if (bf16_scratch) {
    round_bf16(dq, (size_t)N * C);
    round_bf16(dk, (size_t)N * KVC);
  }
}

void attention_backward(real *dq, real *dk, real *dv, real *datt, const real *dout,
                        const real *att, const real *q, const real *k, const real *v, int B,
                        int T, int NH, int NKV, int hs, tq_site *qk, tq_site *pv) {
  attention_backward_act(dq, dk, dv, datt, dout, att, q, k, v, B, T, NH, NKV, hs, qk, pv, NULL);
}

/* -------------------------------------------------------------- SwiGLU */

void swiglu_forward(real *out, const real *h1, const real *h3, size_t n) {
#pragma omp parallel for if (n > 65536)
  for (size_t i = 0; i < n; i++) {
    real a = h1[i], sig = (real)(1.0 / (1.0 + exp(-(double)a)));
    out[i] = a * sig * h3[i];
  }
}

void swiglu_backward(real *dh1, real *dh3, const real *dout, const real *h1, const real *h3,
                     size_t n) {
#pragma omp parallel for if (n > 65536)
  for (size_t i = 0; i < n; i++) {
    real a = h1[i], sig = (real)(1.0 / (1.0 + exp(-(double)a)));
    dh3[i] = dout[i] * a * sig;
    dh1[i] = dout[i] * h3[i] * sig * (1 + a * (1 - sig));
  }
}

/* activations = bf16: autocast's silu(h1) * h3 of bf16 tensors and its
 * backward, element by element in act_bf16_core.h (the GPU's text); the
 * double build rounds nothing. */
void swiglu_forward_act_bf16(real *out, const real *h1, const real *h3, size_t n) {
#ifdef MODEL_DOUBLE
  swiglu_forward(out, h1, h3, n);
#else
#pragma omp parallel for if (n > 65536)
  for (size_t i = 0; i < n; i++) out[i] = swiglu_forward_act_bf16_element(h1[i], h3[i]);
#endif
}

void swiglu_backward_act_bf16(real *dh1, real *dh3, const real *dout, const real *h1,
                              const real *h3, size_t n) {
#ifdef MODEL_DOUBLE
  swiglu_backward(dh1, dh3, dout, h1, h3, n);
#else
#pragma omp parallel for if (n > 65536)
  for (size_t i = 0; i < n; i++)
    swiglu_backward_act_bf16_element(dout[i], h1[i], h3[i], &dh1[i], &dh3[i]);
#endif
}

static real smooth_swiglu_row_scale(const real *h3_row, int H) {
  float amax = 0;
  for (int j = 0; j < H; j++) {
    const float a = fabsf((float)h3_row[j]);
    if (a > amax) amax = a;
  }
  return (real)exmy_core_row_scale_from_amax(amax);
}

void smooth_swiglu_forward(real *out, const real *h1, const real *h3, int N, int H) {
#pragma omp parallel for if ((size_t)N * H > 65536)
  for (int t = 0; t < N; t++) {
    const size_t row = (size_t)t * H;
    const real s = smooth_swiglu_row_scale(h3 + row, H);
    for (int j = 0; j < H; j++) {
      real a = h1[row + j], sig = (real)(1.0 / (1.0 + exp(-(double)a)));
      out[row + j] = a * sig * (h3[row + j] / s);
    }
  }
}

void smooth_swiglu_backward(real *dh1, real *dh3, const real *dout, const real *h1, const real *h3,
                            int N, int H) {
#pragma omp parallel for if ((size_t)N * H > 65536)
  for (int t = 0; t < N; t++) {
    const size_t row = (size_t)t * H;
    const real s = smooth_swiglu_row_scale(h3 + row, H);
    for (int j = 0; j < H; j++) {
      const size_t i = row + j;
      real a = h1[i], sig = (real)(1.0 / (1.0 + exp(-(double)a)));
      dh3[i] = dout[i] * a * sig / s;
      dh1[i] = dout[i] * (h3[i] / s) * sig * (1 + a * (1 - sig));
    }
  }
}

void smooth_swiglu_scale_rows(real *dst, const real *src, const real *h3, int N, int C, int H) {
#pragma omp parallel for if ((size_t)N * H > 65536)
  for (int t = 0; t < N; t++) {
    const real s = smooth_swiglu_row_scale(h3 + (size_t)t * H, H);
    for (int j = 0; j < C; j++) dst[(size_t)t * C + j] = src[(size_t)t * C + j] * s;
  }
}

/* -------------------------------------------------------- cross-entropy */

void crossentropy_softmax_forward(real *probs, real *losses, const int *targets, int N, int V) {
#pragma omp parallel for if (N > 64)
  for (int i = 0; i < N; i++) {
    real *p = probs + (size_t)i * V;
    real mx = p[0];
    for (int j = 1; j < V; j++) mx = p[j] > mx ? p[j] : mx;
    double sum = 0;
    for (int j = 0; j < V; j++) {
      p[j] = (real)exp((double)(p[j] - mx));
      sum += p[j];
    }
    real inv = (real)(1.0 / sum);
    for (int j = 0; j < V; j++) p[j] *= inv;
    losses[i] = (real)-log((double)p[targets[i]]);
  }
}

/* log sum_j exp(w_j) - w_y in double, w_j = z_j (k < 0) or the box corner of
 * eps index k. */
static double row_loss(const real *z, int y, int V, int k) {
  const double eps = k < 0 ? 0 : logit_sharpness_eps(k);
  double mx = -INFINITY;
  for (int j = 0; j < V; j++) {
    const double w = k < 0 ? (double)z[j] : logit_box_corner((double)z[j], j == y, eps);
    mx = w > mx ? w : mx;
  }
  double sum = 0;
  for (int j = 0; j < V; j++)
    sum += exp((k < 0 ? (double)z[j] : logit_box_corner((double)z[j], j == y, eps)) - mx);
  const double wy = k < 0 ? (double)z[y] : logit_box_corner((double)z[y], 1, eps);
  return mx + log(sum) - wy;
}

void logit_sharpness_forward(float *phi, const real *logits, const int *targets, int N, int V) {
#pragma omp parallel for if (N > 64)
  for (int i = 0; i < N; i++) {
    const real *z = logits + (size_t)i * V;
    const double loss = row_loss(z, targets[i], V, -1);
    for (int k = 0; k < LOGIT_SHARPNESS_NUM_EPS; k++)
      phi[(size_t)k * N + i] =
          (float)logit_sharpness_phi(loss, row_loss(z, targets[i], V, k));
  }
}

void crossentropy_softmax_backward(real *dlogits, const real *probs, const int *targets, int N,
                                   int V, real scale) {
#pragma omp parallel for if (N > 64)
  for (int i = 0; i < N; i++) {
    real *d = dlogits + (size_t)i * V;
    const real *p = probs + (size_t)i * V;
    for (int j = 0; j < V; j++) d[j] = p[j] * scale;
    d[targets[i]] -= scale;
  }
}

/* --------------------------------------------------------------- model */

const char *model_config_check(const model_config *c) {
  if (c->vocab < 2 || c->dim < 2 || c->n_layers < 1 || c->n_heads < 1 || c->n_kv_heads < 1 ||
      c->hidden < 1 || c->seq_len < 1)
    return "model sizes must be positive";
  if (c->dim % c->n_heads) return "dim must be a multiple of n_heads";
  if ((c->dim / c->n_heads) % 2) return "head size (dim / n_heads) must be even for RoPE";
  if (c->n_heads % c->n_kv_heads) return "n_heads must be a multiple of n_kv_heads";
  return NULL;
}

size_t model_param_sizes(const model_config *c, size_t s[NUM_PARAM_TENSORS]) {
  size_t V = c->vocab, C = c->dim, L = c->n_layers, H = c->hidden;
  size_t KVC = (size_t)c->n_kv_heads * (C / c->n_heads);
  s[PARAM_WTE] = V * C;
  s[PARAM_RMS1] = L * C;
  s[PARAM_WQ] = L * C * C;
  s[PARAM_WK] = L * KVC * C;
  s[PARAM_WV] = L * KVC * C;
  s[PARAM_WO] = L * C * C;
  s[PARAM_RMS2] = L * C;
  s[PARAM_W1] = L * H * C;
  s[PARAM_W3] = L * H * C;
  s[PARAM_W2] = L * C * H;
  s[PARAM_RMSF] = C;
  s[PARAM_LM_HEAD] = V * C;
  size_t total = 0;
  for (int i = 0; i < NUM_PARAM_TENSORS; i++) total += s[i];
  return total;
}

static void point_tensors(real *mem, const size_t *sizes, int n, real **ptrs[]) {
  for (int i = 0; i < n; i++) {
    *ptrs[i] = mem;
    mem += sizes[i];
  }
}

void model_point_params(param_tensors *p, real *mem, const size_t *sizes) {
  real **ptrs[NUM_PARAM_TENSORS] = {&p->wte, &p->rms1, &p->wq, &p->wk, &p->wv, &p->wo,
                                    &p->rms2, &p->w1, &p->w3, &p->w2, &p->rmsf, &p->lm_head};
  point_tensors(mem, sizes, NUM_PARAM_TENSORS, ptrs);
}

/* splitmix64 + Box-Muller: a small deterministic normal generator */
static double normal01(uint64_t *s) {
  double u1 = ((splitmix64(s) >> 11) + 1.0) * (1.0 / 9007199254740993.0);
  double u2 = (splitmix64(s) >> 11) * (1.0 / 9007199254740992.0);
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

int model_init(model *m, const model_config *c, uint64_t seed) {
  memset(m, 0, sizeof *m);
  m->cfg = *c;
  m->num_params = model_param_sizes(c, m->param_sizes);
  m->params_mem = zalloc(m->num_params, sizeof(real));
  m->grads_mem = zalloc(m->num_params, sizeof(real));
  if (!m->params_mem || !m->grads_mem) {
    model_free(m);
    return -1;
  }
  model_point_params(&m->params, m->params_mem, m->param_sizes);
  model_point_params(&m->grads, m->grads_mem, m->param_sizes);
  uint64_t state = seed;
  const double out_scale = 1.0 / sqrt(2.0 * c->n_layers);
  real *p = m->params_mem;
  for (int i = 0; i < NUM_PARAM_TENSORS; i++) {
    const int is_norm = param_is_norm(i), is_out_proj = i == PARAM_WO || i == PARAM_W2;
    for (size_t j = 0; j < m->param_sizes[i]; j++)
      p[j] = is_norm ? 1 : (real)(0.02 * normal01(&state) * (is_out_proj ? out_scale : 1.0));
    p += m->param_sizes[i];
  }
  return 0;
}

void model_act_sizes(const model_config *c, int B, int T, size_t act[NUM_ACT_TENSORS],
                     size_t grad_act[NUM_GRAD_ACT_TENSORS]) {
  const size_t L = c->n_layers, C = c->dim, H = c->hidden, V = c->vocab, NH = c->n_heads;
  const size_t hs = C / NH, KVC = c->n_kv_heads * hs, BT = (size_t)B * T;
  const size_t *sizes = (const size_t[NUM_ACT_TENSORS]){
      (L + 1) * BT * C,  /* res */
      L * BT * C,        /* ln1 */
      L * BT,            /* ln1_rstd */
      L * BT * C,        /* q */
      L * BT * KVC,      /* k */
      L * BT * KVC,      /* v */
      L * B * NH * T * T, /* att */
      L * BT * C,        /* atty */
      L * BT * C,        /* res_mid */
      L * BT * C,        /* ln2 */
      L * BT,            /* ln2_rstd */
      L * BT * H,        /* h1 */
      L * BT * H,        /* h3 */
      L * BT * H,        /* hg */
      BT * C,            /* lnf */
      BT,                /* lnf_rstd */
      BT * V,            /* probs */
      BT,                /* losses */
  };
  memcpy(act, sizes, NUM_ACT_TENSORS * sizeof *act);
  const size_t *grad_sizes = (const size_t[NUM_GRAD_ACT_TENSORS]){
      BT * C,            /* dres */
      BT * C,            /* dln */
      BT * C,            /* datty */
      BT * C,            /* dq */
      BT * KVC,          /* dk */
      BT * KVC,          /* dv */
      (size_t)B * NH * T * T, /* datt */
      BT * H,            /* dh1 */
      BT * H,            /* dh3 */
      BT * H,            /* dhg */
  };
  memcpy(grad_act, grad_sizes, NUM_GRAD_ACT_TENSORS * sizeof *grad_act);
}

/* Points *ptrs[i] at byte offsets of mem, each tensor aligned; returns the end offset. */
static size_t carve(char *mem, size_t offset, const size_t *sizes, int n, real **ptrs[]) {
  for (int i = 0; i < n; i++) {
    if (mem) *ptrs[i] = (real *)(mem + offset);
    offset += arena_round_up(sizes[i] * sizeof(real));
  }
  return offset;
}

/* The indices model.h names, checked against the struct's order. */
#define ACT_INDEX(f) (offsetof(activation_tensors, f) / sizeof(real *))
_Static_assert(ACT_INDEX(ln1) == ACT_LN1 && ACT_INDEX(q) == ACT_Q && ACT_INDEX(k) == ACT_K &&
                   ACT_INDEX(v) == ACT_V && ACT_INDEX(att) == ACT_ATT && ACT_INDEX(ln2) == ACT_LN2 &&
                   ACT_INDEX(atty) == ACT_ATTY && ACT_INDEX(h1) == ACT_H1 &&
                   ACT_INDEX(h3) == ACT_H3 && ACT_INDEX(hg) == ACT_HG,
               "model.h's ACT_ indices");
#undef ACT_INDEX
#define GRAD_INDEX(f) (offsetof(grad_act_tensors, f) / sizeof(real *))
_Static_assert(GRAD_INDEX(datt) == GRAD_ACT_DATT && GRAD_INDEX(dh1) == GRAD_ACT_DH1 &&
                   GRAD_INDEX(dh3) == GRAD_ACT_DH3 && GRAD_INDEX(dhg) == GRAD_ACT_DHG,
               "model.h's GRAD_ACT_ indices");
#undef GRAD_INDEX

size_t model_point_acts(activation_tensors *a, grad_act_tensors *d, void *mem,
                        const size_t act[NUM_ACT_TENSORS],
                        const size_t grad_act[NUM_GRAD_ACT_TENSORS]) {
  real **ptrs[NUM_ACT_TENSORS] = {&a->res, &a->ln1, &a->ln1_rstd, &a->q, &a->k, &a->v,
                                  &a->att, &a->atty, &a->res_mid, &a->ln2, &a->ln2_rstd,
                                  &a->h1, &a->h3, &a->hg, &a->lnf, &a->lnf_rstd, &a->probs,
                                  &a->losses};
  real **gptrs[NUM_GRAD_ACT_TENSORS] = {&d->dres, &d->dln, &d->datty, &d->dq, &d->dk,
                                        &d->dv, &d->datt, &d->dh1, &d->dh3, &d->dhg};
  const size_t end = carve(mem, 0, act, NUM_ACT_TENSORS, ptrs);
  return carve(mem, end, grad_act, NUM_GRAD_ACT_TENSORS, gptrs);
}

static int model_alloc_acts(model *m, int B, int T) {
  const model_config *c = &m->cfg;
  const size_t hs = c->dim / c->n_heads;
  free(m->acts_mem);
  free(m->rope_cos);
  free(m->rope_sin);
  free(m->logit_phi);
  free(m->bf16_scratch);
  m->acts_mem = m->rope_cos = m->rope_sin = NULL;
  m->logit_phi = NULL;
  m->bf16_scratch = NULL;
  m->B = m->T = 0;
  model_act_sizes(c, B, T, m->act_sizes, m->grad_act_sizes);
  const size_t bytes = model_point_acts(&m->acts, &m->grad_acts, NULL, m->act_sizes,
                                        m->grad_act_sizes);
  if (!(m->acts_mem = aligned_alloc(ARENA_ALIGN, bytes ? bytes : ARENA_ALIGN))) return -1;
  memset(m->acts_mem, 0, bytes);
  model_point_acts(&m->acts, &m->grad_acts, m->acts_mem, m->act_sizes, m->grad_act_sizes);

  m->rope_cos = zalloc((size_t)T * hs / 2, sizeof(real));
  m->rope_sin = zalloc((size_t)T * hs / 2, sizeof(real));
  m->logit_phi = zalloc((size_t)LOGIT_SHARPNESS_NUM_EPS * B * T, sizeof(float));
  if (!m->rope_cos || !m->rope_sin || !m->logit_phi) return -1;
  rope_tables(m->rope_cos, m->rope_sin, T, (int)hs, 10000.0);
  m->B = B;
  m->T = T;
  return 0;
}

int model_reserve(model *m, int B, int T) {
  return m->B == B && m->T == T ? 0 : model_alloc_acts(m, B, T);
}

/* activations = bf16: the backward's scratch for a product before it is
 * added, allocated on first use for micro-batches of B x T: the largest of a
 * linear layer's dX (N x C), its dW (OC x C) and a head's dK or dV piece. */
static real *bf16_scratch(model *m) {
  if (!m->bf16_activations) return NULL;
  if (!m->bf16_scratch) {
    const model_config *c = &m->cfg;
    const size_t C = c->dim, widest = (size_t)(c->hidden > c->vocab ? c->hidden : c->vocab);
    size_t n = (size_t)m->B * m->T * C;
    if (widest * C > n) n = widest * C;
    if (C * C > n) n = C * C;
    if (!(m->bf16_scratch = malloc(n * sizeof(real)))) {
      fprintf(stderr, "model_backward: out of memory for the bf16 activations' scratch\n");
      exit(1);
    }
  }
  return m->bf16_scratch;
}

void model_free(model *m) {
  free(m->bf16_scratch);
  free(m->params_mem);
  free(m->grads_mem);
  free(m->acts_mem);
  free(m->rope_cos);
  free(m->rope_sin);
  free(m->logit_phi);
  memset(m, 0, sizeof *m);
}

static tq_site *site_of(const model *m, int layer, int kind) {
  return m->sites ? &m->sites[layer * SITES_PER_LAYER + kind] : NULL;
}

void model_forward(model *m, const int *tokens, const int *targets, int B, int T) {
  const model_config *c = &m->cfg;
  if (T > c->seq_len) {
    fprintf(stderr, "model_forward: T = %d exceeds seq_len %d\n", T, c->seq_len);
    exit(1);
  }
  if (model_reserve(m, B, T)) {
    fprintf(stderr, "model_forward: out of memory for the activations of %d x %d tokens\n", B, T);
    exit(1);
  }
  const int L = c->n_layers, C = c->dim, H = c->hidden, V = c->vocab, NH = c->n_heads,
            NKV = c->n_kv_heads, hs = C / NH, KVC = NKV * hs, N = B * T;
  const size_t BTC = (size_t)N * C, BTK = (size_t)N * KVC, BTH = (size_t)N * H;
  param_tensors p = m->params;
  activation_tensors a = m->acts;
  const int bf16 = m->bf16_activations;
  /* activations = bf16: a GEMM's or layer's output rounded where autocast rounds it */
#define ACT_ROUND(x, n) \
  do {                  \
    if (bf16) round_bf16((x), (n)); \
  } while (0)

  encoder_forward(a.res, tokens, p.wte, N, C);
  for (int l = 0; l < L; l++) {
    const real *res = a.res + l * BTC;
    real *ln1 = a.ln1 + l * BTC, *q = a.q + l * BTC, *k = a.k + l * BTK, *v = a.v + l * BTK;
    real *att = a.att + (size_t)l * B * NH * T * T, *atty = a.atty + l * BTC;
    real *res_mid = a.res_mid + l * BTC, *ln2 = a.ln2 + l * BTC;
    real *h1 = a.h1 + l * BTH, *h3 = a.h3 + l * BTH, *hg = a.hg + l * BTH;
    real *res_out = a.res + (l + 1) * BTC;

    rmsnorm_forward(ln1, a.ln1_rstd + (size_t)l * N, res, p.rms1 + (size_t)l * C, N, C);
    linear_forward(q, ln1, p.wq + (size_t)l * C * C, N, C, C, site_of(m, l, SITE_Q));
    linear_forward(k, ln1, p.wk + (size_t)l * KVC * C, N, C, KVC, site_of(m, l, SITE_K));
    linear_forward(v, ln1, p.wv + (size_t)l * KVC * C, N, C, KVC, site_of(m, l, SITE_V));
    ACT_ROUND(q, BTC);
    ACT_ROUND(k, BTK);
    ACT_ROUND(v, BTK);
    /* bf16: the rotation in float32 and rounded once (Meta's apply_rotary_emb) */
    if (bf16) {
      rope_forward_act_bf16(q, m->rope_cos, m->rope_sin, B, T, NH, hs);
      rope_forward_act_bf16(k, m->rope_cos, m->rope_sin, B, T, NKV, hs);
    } else {
      rope_forward(q, m->rope_cos, m->rope_sin, B, T, NH, hs);
      rope_forward(k, m->rope_cos, m->rope_sin, B, T, NKV, hs);
    }
    attention_forward_act(atty, att, q, k, v, B, T, NH, NKV, hs, site_of(m, l, SITE_ATT_QK),
                          site_of(m, l, SITE_ATT_PV), bf16);
    linear_forward(res_mid, atty, p.wo + (size_t)l * C * C, N, C, C, site_of(m, l, SITE_O));
    ACT_ROUND(res_mid, BTC); /* the residual add promotes the bf16 branch to float32 */
    for (size_t i = 0; i < BTC; i++) res_mid[i] += res[i];

    rmsnorm_forward(ln2, a.ln2_rstd + (size_t)l * N, res_mid, p.rms2 + (size_t)l * C, N, C);
    linear_forward(h1, ln2, p.w1 + (size_t)l * H * C, N, C, H, site_of(m, l, SITE_W1));
    linear_forward(h3, ln2, p.w3 + (size_t)l * H * C, N, C, H, site_of(m, l, SITE_W3));
    ACT_ROUND(h1, BTH);
    ACT_ROUND(h3, BTH);
    if (m->swiglu_row_scale) {
      smooth_swiglu_forward(hg, h1, h3, N, H);
      linear_forward(res_out, hg, p.w2 + (size_t)l * C * H, N, H, C, site_of(m, l, SITE_W2));
      smooth_swiglu_scale_rows(res_out, res_out, h3, N, C, H);
    } else {
      if (bf16)
        swiglu_forward_act_bf16(hg, h1, h3, BTH);
      else
        swiglu_forward(hg, h1, h3, BTH);
      linear_forward(res_out, hg, p.w2 + (size_t)l * C * H, N, H, C, site_of(m, l, SITE_W2));
    }
    ACT_ROUND(res_out, BTC);
    for (size_t i = 0; i < BTC; i++) res_out[i] += res_mid[i];
  }
  rmsnorm_forward(a.lnf, a.lnf_rstd, a.res + L * BTC, p.rmsf, N, C);
  linear_forward(a.probs, a.lnf, p.lm_head, N, C, V, site_of(m, L, 0));
  /* bf16: the logits; the cross-entropy in float32 (autocast's fp32 list) */
  ACT_ROUND(a.probs, (size_t)N * V);
#undef ACT_ROUND
  if (targets) {
    if (m->logit_sharpness) logit_sharpness_forward(m->logit_phi, a.probs, targets, N, V);
    crossentropy_softmax_forward(a.probs, a.losses, targets, N, V);
    double sum = 0;
    for (int i = 0; i < N; i++) sum += a.losses[i];
    m->loss = (real)(sum / N);
  }
}

void model_zero_grad(model *m) { memset(m->grads_mem, 0, m->num_params * sizeof(real)); }

void model_backward(model *m, const int *tokens, const int *targets, real loss_scale) {
  const model_config *c = &m->cfg;
  const int B = m->B, T = m->T;
  const int L = c->n_layers, C = c->dim, H = c->hidden, V = c->vocab, NH = c->n_heads,
            NKV = c->n_kv_heads, hs = C / NH, KVC = NKV * hs, N = B * T;
  const size_t BTC = (size_t)N * C, BTK = (size_t)N * KVC, BTH = (size_t)N * H;
  param_tensors p = m->params, g = m->grads;
  activation_tensors a = m->acts;
  grad_act_tensors d = m->grad_acts;

  /* activations = bf16: every gradient of a bf16 tensor rounded to bf16, and
   * the linear layers' products rounded before they are added */
  real *const scratch = bf16_scratch(m);
#define ACT_ROUND(x, n)                \
  do {                                 \
    if (scratch) round_bf16((x), (n)); \
  } while (0)

  /* the logits' gradient replaces the probabilities in place */
  real *dlogits = a.probs;
  crossentropy_softmax_backward(dlogits, a.probs, targets, N, V, loss_scale / N);
  ACT_ROUND(dlogits, (size_t)N * V);
  linear_backward_act(d.dln, g.lm_head, dlogits, a.lnf, p.lm_head, N, C, V, site_of(m, L, 0), 0,
                      scratch);
  memset(d.dres, 0, BTC * sizeof(real));
  rmsnorm_backward(d.dres, g.rmsf, d.dln, a.res + L * BTC, p.rmsf, a.lnf_rstd, N, C);

  for (int l = L - 1; l >= 0; l--) {
    const real *res = a.res + l * BTC, *ln1 = a.ln1 + l * BTC, *q = a.q + l * BTC,
               *k = a.k + l * BTK, *v = a.v + l * BTK, *att = a.att + (size_t)l * B * NH * T * T,
               *atty = a.atty + l * BTC, *res_mid = a.res_mid + l * BTC, *ln2 = a.ln2 + l * BTC,
               *h1 = a.h1 + l * BTH, *h3 = a.h3 + l * BTH, *hg = a.hg + l * BTH;
    /* MLP: dres holds d(res_out) and becomes d(res_mid) */
    if (m->swiglu_row_scale) {
      /* W2's output gradient d(res_out) s_t, in dln (free until W1's dX) */
      smooth_swiglu_scale_rows(d.dln, d.dres, h3, N, C, H);
      linear_backward(d.dhg, g.w2 + (size_t)l * C * H, d.dln, hg, p.w2 + (size_t)l * C * H, N, H,
                      C, site_of(m, l, SITE_W2), 0);
      smooth_swiglu_backward(d.dh1, d.dh3, d.dhg, h1, h3, N, H);
    } else if (scratch) {
      /* W2's output gradient bf16(d(res_out)) in dln (free until W1's dX); dres stays float32 */
      memcpy(d.dln, d.dres, BTC * sizeof(real));
      round_bf16(d.dln, BTC);
      linear_backward_act(d.dhg, g.w2 + (size_t)l * C * H, d.dln, hg, p.w2 + (size_t)l * C * H, N,
                          H, C, site_of(m, l, SITE_W2), 0, scratch);
      swiglu_backward_act_bf16(d.dh1, d.dh3, d.dhg, h1, h3, BTH);
    } else {
      linear_backward(d.dhg, g.w2 + (size_t)l * C * H, d.dres, hg, p.w2 + (size_t)l * C * H, N, H,
                      C, site_of(m, l, SITE_W2), 0);
      swiglu_backward(d.dh1, d.dh3, d.dhg, h1, h3, BTH);
    }
    linear_backward_act(d.dln, g.w1 + (size_t)l * H * C, d.dh1, ln2, p.w1 + (size_t)l * H * C, N,
                        C, H, site_of(m, l, SITE_W1), 0, scratch);
    linear_backward_act(d.dln, g.w3 + (size_t)l * H * C, d.dh3, ln2, p.w3 + (size_t)l * H * C, N,
                        C, H, site_of(m, l, SITE_W3), 1, scratch);
    rmsnorm_backward(d.dres, g.rms2 + (size_t)l * C, d.dln, res_mid, p.rms2 + (size_t)l * C,
                     a.ln2_rstd + (size_t)l * N, N, C);
    /* attention: dres becomes d(res); bf16: WO's output gradient bf16(d(res_mid)) in dln */
    const real *dy_o = d.dres;
    if (scratch) {
      memcpy(d.dln, d.dres, BTC * sizeof(real));
      round_bf16(d.dln, BTC);
      dy_o = d.dln;
    }
    linear_backward_act(d.datty, g.wo + (size_t)l * C * C, dy_o, atty, p.wo + (size_t)l * C * C, N,
                        C, C, site_of(m, l, SITE_O), 0, scratch);
    /* attention_backward accumulates dk and dv head by head */
    memset(d.dk, 0, BTK * sizeof(real));
    memset(d.dv, 0, BTK * sizeof(real));
    attention_backward_act(d.dq, d.dk, d.dv, d.datt, d.datty, att, q, k, v, B, T, NH, NKV, hs,
                           site_of(m, l, SITE_ATT_QK), site_of(m, l, SITE_ATT_PV), scratch);
    if (scratch) {
      rope_backward_act_bf16(d.dq, m->rope_cos, m->rope_sin, B, T, NH, hs);
      rope_backward_act_bf16(d.dk, m->rope_cos, m->rope_sin, B, T, NKV, hs);
    } else {
      rope_backward(d.dq, m->rope_cos, m->rope_sin, B, T, NH, hs);
      rope_backward(d.dk, m->rope_cos, m->rope_sin, B, T, NKV, hs);
    }
    linear_backward_act(d.dln, g.wq + (size_t)l * C * C, d.dq, ln1, p.wq + (size_t)l * C * C, N, C,
                        C, site_of(m, l, SITE_Q), 0, scratch);
    linear_backward_act(d.dln, g.wk + (size_t)l * KVC * C, d.dk, ln1, p.wk + (size_t)l * KVC * C, N,
                        C, KVC, site_of(m, l, SITE_K), 1, scratch);
    linear_backward_act(d.dln, g.wv + (size_t)l * KVC * C, d.dv, ln1, p.wv + (size_t)l * KVC * C, N,
                        C, KVC, site_of(m, l, SITE_V), 1, scratch);
    rmsnorm_backward(d.dres, g.rms1 + (size_t)l * C, d.dln, res, p.rms1 + (size_t)l * C,
                     a.ln1_rstd + (size_t)l * N, N, C);
  }
  encoder_backward(g.wte, d.dres, tokens, N, C);
#undef ACT_ROUND
}

int model_named_size(const char *name, model_config *c) {
  static const struct {
    const char *name;
    model_config cfg;
  } sizes[] = {
      /*                 V    C    L  NH NKV  H     T */
      {"test", {256, 16, 2, 2, 1, 32, 16}},         /* ~15k parameters, GQA on */
      {"tiny", {256, 128, 6, 4, 4, 384, 128}},      /* ~1.3M */
      {"small", {256, 384, 10, 6, 6, 1152, 256}},   /* ~19.4M */
      {"120m", {256, 768, 12, 12, 12, 2048, 1024}}, /* TinyLLaMA-120M shape (byte vocabulary) */
      /* TinyLlama's tiny_LLaMA_120M (lit_gpt/config.py): one key/value head, context 2048, and
       * the 32000-token SentencePiece vocabulary of experiments/data/tokenizer; ~121M */
      {"120m-32k", {32000, 768, 12, 12, 1, 2048, 2048}},
      /* GPT-3 Medium's depth and width (Brown et al. 2020, table 2.1: 24 layers, d_model
       * 1024, 16 heads of 64) in LLaMA's form: SwiGLU hidden 2816 = 8/3 x 1024 rounded up to
       * a multiple of 256 (LLaMA's multiple_of), full multi-head attention; ~309M with the
       * byte vocabulary (~374M with 32000) */
      {"350m", {256, 1024, 24, 16, 16, 2816, 1024}},
      /* TinyLlama-1.1B (its config.json: dim 2048, 22 layers, 32 heads, 4 key/value heads,
       * intermediate 5632); byte vocabulary and context 1024 as 120m: ~970M; with
       * vocab = 32000 and seq_len = 2048 it is TinyLlama-1.1B itself, 1,100,048,384 */
      {"1b", {256, 2048, 22, 32, 4, 5632, 1024}},
  };
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
    if (!strcmp(sizes[i].name, name)) {
      *c = sizes[i].cfg;
      return 0;
    }
  return -1;
}
