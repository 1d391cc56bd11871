/*
 * exmy_cpu.h — the CPU library (//cpu:exmy_cpu, in //:libexmy.so): float32
 * tensors rounded into any format of lib/exmy.h, with OpenMP and AVX-512.
 *
 * The bulk kernels round arrays element by element, bit for bit as lib/'s
 * scalar reference does; the tensor level adds the scaling recipes, the
 * per-tensor statistics and the quantized GEMM (types in lib/exmy.h).
 * cuda/exmy_cuda.h mirrors these on the GPU.
 */
#ifndef EXMY_CPU_H
#define EXMY_CPU_H

#include "lib/exmy.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------ bulk kernels */

/* y[i] = the nearest value (per the options) of x[i] in format f, as float32.
 * y may alias x. */
void exmy_quantize_f32(const exmy_format *f, const exmy_rounding_opts *o,
                       const float *x, float *y, size_t n);
/* codes[i] = the code of x[i]; codes is uint8_t / uint16_t / uint32_t per
 * exmy_code_bytes(f). */
void exmy_encode_f32(const exmy_format *f, const exmy_rounding_opts *o,
                     const float *x, void *codes, size_t n);
/* y[i] = the value of codes[i]. */
void exmy_decode_f32(const exmy_format *f, const void *codes, float *y,
                     size_t n);

/* ================================================== tensor level
 * Scaling recipes, per-tensor statistics and the quantized GEMM.  cpu/
 * implements them; cuda/ mirrors them.  Tensors are row-major: `rows` rows of
 * `cols` contiguous float32 values.  Every recipe quantizes x·s with the bulk
 * kernels (so stochastic rounding follows the same (seed, offset + index)
 * rule, index = r * cols + c) and dequantizes as q · (1/s), both products in
 * float32, so that two implementations agree bit for bit.                  */

/* ---- scaling recipes (types: lib/exmy.h) ---- */

/* history_len >= 1; NULL on bad length or no memory. */
exmy_delayed_state *exmy_delayed_state_new(int history_len);
void exmy_delayed_state_free(exmy_delayed_state *s);
/* Records one amax and recomputes scale/scale_inv for format f and sc (the
 * update every DELAYED quantization does after use). */
void exmy_delayed_state_update(exmy_delayed_state *s, const exmy_format *f,
                               const exmy_scaling *sc, float amax);
/* Whether two states are the same bit for bit: history length, position
 * (count, latest), scale, scale_inv and every history slot. */
bool exmy_delayed_state_equal(const exmy_delayed_state *a, const exmy_delayed_state *b);

/* The TENSOR-recipe scale for a given amax (see EXMY_SCALING_TENSOR). */
float exmy_scale_from_amax(const exmy_format *f, float amax, int margin,
                           bool pow2);

/* ---- statistics (types: lib/exmy.h) ---- */
/* The statistics of x (n values) against its quantized image y = Q(x) in
 * format f (no scaling: scale = 1, delayed_over_current = NAN). */
void exmy_tensor_stats_f32(const exmy_format *f, const float *x,
                           const float *y, size_t n, exmy_tensor_stats *stats);

/* ---- fake quantization of a row-major tensor ---- */
/* y = dequant(Q(x)) under the recipe sc (NULL = NONE); y may alias x.  state:
 * DELAYED only (updated after use).  stats: may be NULL.  Returns 0, or -1 on
 * invalid arguments (DELAYED without state, negative group). */
int exmy_quantize_scaled_f32(const exmy_format *f, const exmy_rounding_opts *o,
                             const exmy_scaling *sc, exmy_delayed_state *state,
                             const float *x, float *y, size_t rows, size_t cols,
                             exmy_tensor_stats *stats);
/* The same, with *scale (if scale is non-NULL) set to the per-tensor scale
 * s it used: TENSOR's, or DELAYED's before the update; 1 for NONE; NAN for
 * the recipes with a scale per block (the accumulation model's emin of a
 * power-of-two-scaled operand follows s: exmy_accum_operand_emin_scaled). */
int exmy_quantize_scaled_f32_used(const exmy_format *f, const exmy_rounding_opts *o,
                                  const exmy_scaling *sc, exmy_delayed_state *state,
                                  const float *x, float *y, size_t rows, size_t cols,
                                  exmy_tensor_stats *stats, float *scale);
/* exmy_quantize_scaled_f32_used under GROUP scaling (no dynamic range
 * expansion), also writing each element's code q = Q(x·s) to codes (rows x
 * cols, or NULL; neither x nor y) and each block's dequantization factor
 * 1/s (y = q · (1/s) rounded to float32) to block_scales (or NULL): block
 * (R, C), R = row / max(block_rows, 1) and C = column / group, at
 * R · ceil(cols / group) + C.  -1 for other recipes. */
int exmy_quantize_group_codes_f32(const exmy_format *f, const exmy_rounding_opts *o,
                                  const exmy_scaling *sc, const float *x, float *y,
                                  float *codes, float *block_scales, size_t rows, size_t cols,
                                  exmy_tensor_stats *stats);

/* MX encoding proper: codes (one byte per element, format f of <= 8 bits) and
 * one E8M0 code per block (scales[r * nblocks + b], nblocks = ceil(cols /
 * block)); block = 0 means 32.  The values are exactly those of
 * EXMY_SCALING_MX.  Returns 0, or -1 if f is wider than 8 bits. */
int exmy_mx_encode_f32(const exmy_format *f, const exmy_rounding_opts *o,
                       int block, const float *x, size_t rows, size_t cols,
                       uint8_t *codes, uint8_t *scales);
/* The inverse: y = decode(code) · 2^(scale - 127). */
void exmy_mx_decode_f32(const exmy_format *f, int block, const uint8_t *codes,
                        const uint8_t *scales, size_t rows, size_t cols,
                        float *y);

/* ---- float32 GEMM with one order of operations ---- */

/* C = alpha · op(A) · op(B) + beta · C, row-major like
 * cblas_sgemm(CblasRowMajor, ...) (op(A) is m x k: A, or A^T if trans_a;
 * op(B) is k x n), where every element of C is computed as
 *     acc = 0;  for p = 0, 1, ..., k-1:  acc = fmaf(op(A)[i][p], op(B)[p][j], acc);
 *     C[i][j] = alpha·acc            if beta == 0 (C is not read: NaN there is fine)
 *     C[i][j] = alpha·acc + beta·C[i][j]   otherwise (a multiply, a multiply, an add),
 * each operation rounded to float32 as IEEE 754 says (rne, subnormals kept).
 * So C is the same bits on every CPU (AVX-512, AVX2 + FMA and plain C kernels,
 * chosen at run time: cpu/gemm_dispatch.h) and for any number of OpenMP
 * threads, which an optimised BLAS does not promise.  Leading dimensions:
 * lda >= k (m if trans_a), ldb >= n (k if trans_b), ldc >= n.  Returns 0, or
 * -1 on a leading dimension too small or no memory (C untouched). */
int exmy_sgemm(bool trans_a, bool trans_b, size_t m, size_t n, size_t k, float alpha,
               const float *a, size_t lda, const float *b, size_t ldb, float beta, float *c,
               size_t ldc);

/* A function with exmy_sgemm's signature and contract (apart from the order
 * of operations). */
typedef int (*exmy_sgemm_fn)(bool trans_a, bool trans_b, size_t m, size_t n, size_t k,
                             float alpha, const float *a, size_t lda, const float *b,
                             size_t ldb, float beta, float *c, size_t ldc);

/* ---- quantized GEMM: an FP8 tensor-core GEMM with FP32 accumulation ---- */

/* C = alpha · op(A) · op(B) + beta · C, row-major like
 * cblas_sgemm(CblasRowMajor, ...), with A and B replaced by dequant(Q(.)) per
 * qa / qb (NULL or !enabled: used as they are), then C quantized per qc (NULL
 * or !enabled: left as the GEMM wrote it).  The products are exmy_sgemm's:
 * float32 accumulation in order along K, the same bits on every CPU and
 * thread count.  A quantized operand is first copied, K contiguous, into a
 * temporary of its size (m·k or n·k floats).  Returns 0, or -1 on invalid
 * arguments or no memory. */
int exmy_qgemm(bool trans_a, bool trans_b, size_t m, size_t n, size_t k,
               float alpha, const float *a, size_t lda,
               const exmy_operand_quant *qa, const float *b, size_t ldb,
               const exmy_operand_quant *qb, float beta, float *c, size_t ldc,
               const exmy_operand_quant *qc);

struct exmy_accum_model; /* lib/accum_core.h */

/* exmy_qgemm with every dot product of op(A)·op(B) accumulated as `model`
 * says (lib/accum_core.h: a tensor core's limited-precision accumulation;
 * group = EXMY_ACCUM_FP32 is exmy_qgemm's float32 accumulation, same bits,
 * slower), after the operands are quantized exactly as exmy_qgemm does;
 * then C[i][j] = alpha·dot (+ beta·C[i][j]) as exmy_sgemm, then qc.  The
 * H100's models (truncation, alignment by the inputs' exponents) run an
 * AVX2 kernel where the CPU has it (its AVX-512 build only where named:
 * cpu/accum_vector.h), the others a scalar loop per element of C; all
 * OpenMP, bit-identical.  The model is used as given: with EXMY_ACCUM_ALIGN_INPUTS
 * its emin_a / emin_b should be those of the formats of A's and B's values
 * (exmy_accum_operand_emin(qa / qb); -126 for float32 values), which
 * exmy_accum_model_parse leaves 0 (every input below 1 would then count as
 * 2^0).  Except for an operand that qa / qb scale per tensor with pow2
 * (exmy_accum_pow2_scaled): its emin is set here from the scale s this call
 * uses, exmy_accum_operand_emin_scaled (the format's emin - log2 s, where the
 * tensor core clamps the codes); and for a block-scaled operand
 * (exmy_accum_block_scaled: GROUP blocks of promote_every along K), which
 * is read as its codes (emin its format's) with its block scales applied at
 * each promotion (exmy_accum_dot_scaled, DeepGEMM's order).  Returns 0, or -1 on an invalid model (or NULL), a leading
 * dimension too small, k > INT_MAX or no memory. */
int exmy_qgemm_accum(bool trans_a, bool trans_b, size_t m, size_t n, size_t k,
                     float alpha, const float *a, size_t lda,
                     const exmy_operand_quant *qa, const float *b, size_t ldb,
                     const exmy_operand_quant *qb, float beta, float *c, size_t ldc,
                     const exmy_operand_quant *qc, const struct exmy_accum_model *model);

/* Replaces the float32 GEMM inside exmy_qgemm (NULL: exmy_sgemm again), for
 * the whole process; not while a GEMM runs.  For comparisons (an optimised
 * BLAS's speed) and tests (a spy on the operands the GEMM receives). */
void exmy_qgemm_set_sgemm(exmy_sgemm_fn f);

#ifdef __cplusplus
}
#endif

#endif /* EXMY_H */
