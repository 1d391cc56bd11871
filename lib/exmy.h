/*
 * exmy.h — rounding float32 into any low-bit floating-point format, bit-exactly.
 *
 * A format is a sign bit (for signed formats), E exponent bits and M mantissa
 * bits with a bias and a convention for special values (exmy_specials).  Every
 * conversion goes float32 -> format in ONE rounding step, the way ml_dtypes and
 * the GPU's cvt instructions do, never through an intermediate type.
 *
 * Codes: a format of <= 8 bits stores one code per uint8_t, <= 16 bits per
 * uint16_t, wider formats (float32 itself) per uint32_t; exmy_code_bytes() tells.
 * Sub-byte formats (FP6, FP4) keep their bits in the low bits of the byte.
 */
#ifndef EXMY_H
#define EXMY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------ formats */

/* How a format spends its codes on special values. */
typedef enum {
  /* IEEE 754-like: the all-ones exponent holds +-inf (mantissa 0) and NaN
   * (mantissa != 0).  With M = 0 there is no NaN code: NaN inputs map to inf. */
  EXMY_SPECIALS_IEEE = 0,
  /* "fn" (finite + NaN), e.g. float8_e4m3fn: no inf; only S.1111.111 is NaN,
   * so the all-ones exponent also holds ordinary values. */
  EXMY_SPECIALS_FN,
  /* "fnuz" (finite, NaN, unsigned zero), e.g. float8_e4m3fnuz: no inf, no -0;
   * the negative-zero code 1.000...0 is the only NaN.  All other codes finite. */
  EXMY_SPECIALS_FNUZ,
  /* Finite only (OCP MX FP6/FP4): no inf, no NaN; every code is a number. */
  EXMY_SPECIALS_NONE,
  /* OCP MX scale E8M0 (float8_e8m0fnu): unsigned, no mantissa, no zero,
   * code c means 2^(c-127), 0xFF is NaN. */
  EXMY_SPECIALS_E8M0,
} exmy_specials;

/* A format descriptor.  Fill it with exmy_format_parse() or exmy_format_make();
 * the derived fields are computed there and must not be edited by hand. */
typedef struct {
  char name[32];          /* canonical name, e.g. "float8_e4m3fn", "e8m3" */
  int exp_bits;           /* E, 1..8 */
  int man_bits;           /* M, 0..23 */
  int bias;               /* exponent bias */
  exmy_specials specials; /* special-value convention */
  bool is_signed;         /* false only for E8M0 */
  /* derived */
  int bits;               /* total bits: E + M + (is_signed) */
  int emin;               /* unbiased exponent of the smallest normal */
  int emax;               /* unbiased exponent of the largest finite value */
  uint32_t max_code;      /* code (magnitude bits, sign clear) of the largest finite value */
  uint32_t sign_mask;     /* the sign bit within a code; 0 for unsigned formats */
  uint32_t nan_code;      /* canonical NaN magnitude code, or EXMY_NO_CODE */
  uint32_t inf_code;      /* +inf magnitude code, or EXMY_NO_CODE */
} exmy_format;

#define EXMY_NO_CODE 0xFFFFFFFFu

/* Parses a format name (case-insensitive): the ml_dtypes names float8_e4m3fn,
 * float8_e5m2, float8_e4m3fnuz, float8_e5m2fnuz, float8_e3m4, float8_e4m3,
 * float6_e2m3fn, float6_e3m2fn, float4_e2m1fn, float8_e8m0fnu, bfloat16,
 * float16, float32; the aliases e4m3, e5m2, e2m3, e3m2, e2m1, e8m0, bf16, fp16,
 * fp32; and generic IEEE-like "eXmY" with 1 <= X <= 8, 0 <= Y <= 23 (bias
 * 2^(X-1)-1).  Returns 0 on success, -1 (leaving *out untouched) otherwise. */
int exmy_format_parse(const char *name, exmy_format *out);

/* Builds a format from its fields; returns 0, or -1 if they do not describe a
 * subset of float32 (E in 1..8, M in 0..23, bias such that every finite value
 * is a float32 value) or the specials are inconsistent with E and M. */
int exmy_format_make(const char *name, int exp_bits, int man_bits, int bias,
                     exmy_specials specials, exmy_format *out);

/* Bytes used to store one code: 1, 2 or 4. */
size_t exmy_code_bytes(const exmy_format *f);

/* Facts about a format, all exact float32 values. */
typedef struct {
  float max;             /* largest finite value */
  float min_normal;      /* smallest positive normal value */
  float min_subnormal;   /* smallest positive value (== min_normal if no subnormals) */
  float epsilon;         /* 2^-M: distance from 1 to the next larger value */
  uint64_t finite_codes; /* number of codes that decode to finite values */
  uint64_t finite_values;/* number of distinct finite values (+0 and -0 count once) */
  bool has_inf, has_nan, has_negative_zero, has_subnormals;
} exmy_format_info;

void exmy_format_get_info(const exmy_format *f, exmy_format_info *info);

/* ----------------------------------------------------------------- rounding */

typedef enum {
  EXMY_RNE = 0, /* to nearest, ties to even (default).  For E8M0 the tie goes up,
                 * as in ml_dtypes: its only significand bit is the implicit 1. */
  EXMY_RNA,     /* to nearest, ties away from zero */
  EXMY_RZ,      /* toward zero (truncation) */
  EXMY_RU,      /* toward +inf */
  EXMY_RD,      /* toward -inf */
  EXMY_RO,      /* to odd: truncate, then set the code's last bit if inexact */
  EXMY_SR,      /* stochastic: up (in magnitude) with probability
                 * (|x| - lower) / (upper - lower), see sr_bits */
} exmy_rounding;

/* Options of a conversion.  A zero-initialised struct means plain rne with the
 * format's own overflow behaviour and subnormals kept.
 *
 * mode: one of exmy_rounding.
 *
 * saturate: false (default): overflow follows IEEE 754 and the format.  Under
 *   rne, rna, sr, and under ru (x > 0) / rd (x < 0), a value beyond the largest
 *   finite one becomes +-inf where the format has inf, NaN where it has only
 *   NaN, +-max where it has neither; under rz, ro, ru (x < 0) and rd (x > 0) it
 *   becomes +-max.  Infinite inputs become inf, or NaN / max likewise.
 *   true: every finite or infinite input out of range becomes +-max.
 *   NaN inputs always give NaN where the format has one (sign kept where the
 *   format has signed NaNs).  In formats without NaN (FP6, FP4) they give
 *   +-max, so that a NaN is never hidden as a number near zero.
 *
 * flush_subnormals: false (default): the format's subnormals are used.  true:
 *   the format is taken without its subnormal codes: below the smallest normal
 *   value xmin the representable magnitudes are 0 and xmin, and rounding
 *   chooses between them by the mode (nearest: ties go to xmin; ro: an inexact
 *   result is xmin).  Float32 subnormal inputs are treated as the small numbers
 *   they are.
 *
 * seed, offset: stochastic rounding only.  The random bits used for element i
 *   of a call are a pure function of (seed, offset + i), drawn from the
 *   counter-based generator Philox4x32-10: counter block (j / 4) with
 *   j = offset + i, key = seed, word j % 4.  The same (seed, offset) therefore
 *   gives the same result on any thread count and on CPU or GPU; to continue a
 *   stream over successive calls, advance offset by the number of elements.
 *
 * sr_bits: stochastic rounding only, 1..32; 0 means 32.  The top sr_bits bits
 *   of the dropped part of |x| are added to an sr_bits-bit uniform integer;
 *   a carry rounds up.  So P(up) = floor(2^R * frac) / 2^R with R = sr_bits and
 *   frac = (|x| - lower) / (upper - lower); with R = 32 this is exact whenever
 *   at most 32 bits are dropped, which covers every float32 input in any
 *   format's normal range and every input of E8 formats.
 */
typedef struct {
  exmy_rounding mode;
  bool saturate;
  bool flush_subnormals;
  uint64_t seed, offset;
  int sr_bits;
} exmy_rounding_opts;

/* Validates options; returns 0 or -1.  The conversion functions assume valid
 * options (they do not re-check in their loops). */
int exmy_rounding_opts_check(const exmy_rounding_opts *o);

/* Parses a rounding-mode name: rne, rna, rz, ru, rd, ro, sr. 0 or -1. */
int exmy_rounding_parse(const char *name, exmy_rounding *out);
const char *exmy_rounding_name(exmy_rounding mode);

/* -------------------------------------------------------- scalar reference */

/* The portable scalar reference.  Every fast kernel (cpu/, cuda/) must equal it
 * bit for bit.  `random` is the 32-bit uniform word for stochastic rounding
 * (ignored otherwise); exmy_sr_random() gives the one the bulk calls use. */
uint32_t exmy_ref_encode(const exmy_format *f, const exmy_rounding_opts *o,
                         float x, uint32_t random);
float exmy_ref_decode(const exmy_format *f, uint32_t code);
float exmy_ref_quantize(const exmy_format *f, const exmy_rounding_opts *o,
                        float x, uint32_t random);

/* The random word for element i of a call with these options. */
uint32_t exmy_sr_random(uint64_t seed, uint64_t index);

/* Philox4x32-10 (Salmon et al., SC'11; Random123's constants). */
void exmy_philox4x32_10(const uint32_t counter[4], const uint32_t key[2],
                        uint32_t out[4]);

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


/* ------------------------------------------------ PLANNED (issue 3, cpu/)
 * The tensor-level API contract agreed between cpu/ (implements it), cuda/
 * (mirrors it) and experiments/ (calls it).  The cpu helper replaces this
 * comment by the real declarations, refining names only where needed:
 *
 * /* ---- scaling recipes ---- * /
 * typedef enum {
 *   EXMY_SCALING_NONE = 0, /* quantize x as it is * /
 *   EXMY_SCALING_TENSOR,   /* per-tensor current scaling: s = (fmax/amax) * 2^-margin * /
 *   EXMY_SCALING_DELAYED,  /* per-tensor delayed scaling (Transformer Engine DelayedScaling); needs exmy_delayed_state * /
 *   EXMY_SCALING_MX,       /* OCP MX v1.0: blocks of 32 along the reduction/contiguous dim share an E8M0 scale * /
 *   EXMY_SCALING_GROUP,    /* per-group: groups of `group` consecutive elements (0 = one group per row) * /
 * } exmy_scaling_kind;
 * typedef struct {
 *   exmy_scaling_kind kind;
 *   int margin;                 /* TENSOR/DELAYED/GROUP: scale multiplied by 2^-margin * /
 *   bool pow2;                  /* round the scale down to a power of two * /
 *   int group;                  /* GROUP: group size (COAT: 128); MX: block size (0 = 32) * /
 *   int history_len;            /* DELAYED: amax history length (TE: 16 or 1024) * /
 *   bool history_most_recent;   /* DELAYED: most recent amax instead of max over the history * /
 *   bool dynamic_range_expansion; /* GROUP only: COAT's x -> sign(x)|x|^k per group * /
 * } exmy_scaling;
 * typedef struct exmy_delayed_state exmy_delayed_state;   /* opaque or public struct: amax history, scale * /
 * exmy_delayed_state *exmy_delayed_state_new(int history_len);
 * void exmy_delayed_state_free(exmy_delayed_state *s);
 * /* ---- statistics (NVIDIA FP8 debug tool's per-tensor numbers) ---- * /
 * typedef struct {
 *   size_t n; double amax, min_nonzero, underflow_ratio, subnormal_ratio, overflow_ratio,
 *   mse, rel_l2, cosine, sqnr_db, scale, delayed_over_current;
 * } exmy_tensor_stats;
 * /* ---- fake quantization of a row-major tensor (rows x cols, leading dim = cols) ---- * /
 * void exmy_quantize_scaled_f32(const exmy_format *f, const exmy_rounding_opts *o, const exmy_scaling *sc,
 *                               exmy_delayed_state *state, const float *x, float *y, size_t rows, size_t cols,
 *                               exmy_tensor_stats *stats /* may be NULL * /);
 * /* ---- quantized GEMM: emulates an FP8 tensor-core GEMM with FP32 accumulation ---- * /
 * typedef struct {
 *   bool enabled;               /* false: this operand stays float32 * /
 *   exmy_format format;
 *   exmy_rounding_opts round;   /* sr: element index = position in the operand's row-major storage + round.offset * /
 *   exmy_scaling scaling;       /* blocks/groups run along the reduction dimension K * /
 *   exmy_delayed_state *delayed;/* DELAYED only * /
 *   exmy_tensor_stats *stats;   /* if non-NULL, filled for this operand * /
 * } exmy_operand_quant;
 * /* C = alpha * op(A) * op(B) + beta * C, row-major like cblas_sgemm(CblasRowMajor, ...), with A and B replaced by
 *    dequant(Q(.)) per qa / qb (NULL or !enabled = untouched), then C quantized per qc (NULL = untouched). * /
 * void exmy_qgemm(bool trans_a, bool trans_b, size_t m, size_t n, size_t k, float alpha,
 *                 const float *a, size_t lda, const exmy_operand_quant *qa,
 *                 const float *b, size_t ldb, const exmy_operand_quant *qb,
 *                 float beta, float *c, size_t ldc, const exmy_operand_quant *qc);
 */

#ifdef __cplusplus
}
#endif

#endif /* EXMY_H */
