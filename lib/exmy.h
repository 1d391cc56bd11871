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
 *
 * This header is the exact core (//lib:exmy): formats, rounding options, the
 * scalar reference, Philox, and the types of the tensor-level API.  The array
 * and tensor functions are the devices': cpu/exmy_cpu.h (bulk kernels,
 * scaling recipes, statistics, GEMMs; //:libexmy.so) and cuda/exmy_cuda.h.
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
   * code c means 2^(c-127), 0xFF is NaN.  Positive normal inputs convert as
   * ml_dtypes does (rne: nearest power of two, ties up) and as CUDA's
   * __nv_cvt_float_to_e8m0 does (rz, ru).  Our choices where they differ or
   * are silent: zero and negative inputs give NaN (0xFF), or 0x00 (2^-127)
   * when saturating (CUDA converts |x| and maps 0 to 0x00); float32
   * subnormal inputs round to the nearest of 2^-127 and 2^-126 by the mode,
   * everything below 2^-127 giving 2^-127 (ml_dtypes rounds (2^-127,
   * 1.5*2^-127) up to 2^-126); +inf gives NaN, or 0xFE when saturating. */
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

/* ============================================== tensor-level vocabulary
 * The types of the scaling recipes and of the per-tensor statistics: the
 * words cpu/ (cpu/exmy_cpu.h) and cuda/ (cuda/exmy_cuda.h) speak, and what the
 * exact cores lib/scale_core.h and lib/stats_core.h compute.  The functions
 * that quantize tensors live with their device: this header declares only
 * what lib/ itself defines.  Tensors are row-major: `rows` rows of `cols`
 * contiguous float32 values.                                              */

/* ---- scaling recipes (the vocabulary of FP8 training) ---- */
typedef enum {
  /* y = Q(x): no scale. */
  EXMY_SCALING_NONE = 0,
  /* Per-tensor current scaling: amax = max |x| over the finite x;
   * s = (fmax / amax) · 2^-margin in float32 (fmax: the format's largest
   * finite value), rounded down to a power of two if pow2; s = 1 when amax is
   * 0, not finite, or s would not be finite.  y = Q(x·s) · (1/s). */
  EXMY_SCALING_TENSOR,
  /* Per-tensor delayed scaling, as Transformer Engine's DelayedScaling: the
   * scale used is state->scale (computed from earlier calls); then this call's
   * amax is recorded in the history and the scale is recomputed from the
   * history (max, or most recent if history_most_recent) with the TENSOR
   * formula, keeping the old scale where amax is 0 or not finite.  Needs an
   * exmy_delayed_state. */
  EXMY_SCALING_DELAYED,
  /* OCP Microscaling (MX) v1.0: each block of `group` (0 = 32) consecutive
   * elements of a row (the last block of a row may be shorter) shares the
   * scale 2^X, X = floor(log2(block amax)) - emax of the element format,
   * clamped to the E8M0 range [-127, 127] (X = -127 for an all-zero block).
   * y = Q(x·2^-X) · 2^X, Q with saturate forced on: a block's largest values
   * may lie between fmax and 2^(emax+1), and they clamp to +-fmax as in the
   * OCP reference code (microxcaling).  Elements: E4M3, E5M2, E2M3, E3M2,
   * E2M1 per the spec (other formats accepted).  margin, pow2 ignored. */
  EXMY_SCALING_MX,
  /* Per-group scaling: each group of `group` consecutive elements of a row
   * (0 = the whole row; COAT uses 128) gets its own TENSOR-formula scale.
   * With dynamic_range_expansion, see exmy_scaling. */
  EXMY_SCALING_GROUP,
  /* NVIDIA's NVFP4 two-level scaling, as Transformer Engine computes it
   * (lib/scale_core.h has the arithmetic): a float32 tensor scale
   * S_enc = (448 · 6) / amax over the tensor's finite values, and per block of
   * `group` (0 = 16) consecutive elements of a row an E4M3 decode scale
   * s_b = E4M3(block amax · (S_enc · (1/6))), rne and saturating; the block is
   * rounded as q = Q(x · (1 / (s_b · (1/S_enc)))) with saturate forced on,
   * and dequantized as y = q · (s_b · (1/S_enc)).  Meant for E2M1 elements
   * (other formats accepted). */
  EXMY_SCALING_NVFP4,
} exmy_scaling_kind;

typedef struct {
  exmy_scaling_kind kind;
  /* TENSOR, DELAYED, GROUP: the scale is multiplied by 2^-margin (headroom
   * against amax growing between calls); >= 0 in practice, any int allowed. */
  int margin;
  /* TENSOR, DELAYED, GROUP: round the scale down to a power of two, so that
   * scaling and unscaling are exact. */
  bool pow2;
  /* GROUP: group size along a row, 0 = one group per row.  MX: block size,
   * 0 = 32 (the spec's k). */
  int group;
  /* DELAYED: informational; the history length lives in exmy_delayed_state. */
  int history_len;
  /* DELAYED: scale from the most recent amax instead of the history's max
   * (TE's amax_compute_algo "most_recent" vs "max"). */
  bool history_most_recent;
  /* GROUP only, COAT's dynamic range expansion (Xi et al., 2024, for
   * optimizer states): per group, with R_x = max|x| / min nonzero |x| and
   * R_f = fmax / (the format's smallest positive value), k = ln R_f / ln R_x
   * (k = 1 when R_x <= 1 or the group has no nonzero finite value); the group
   * is quantized as z = sign(x)|x|^k with the group scale, and dequantized as
   * sign(w)|w|^(1/k) with w = Q(z·s)·(1/s).  Uses libm pow (double): results
   * may differ by an ulp between libms, unlike every other recipe. */
  bool dynamic_range_expansion;
  /* GROUP and NVFP4: rows per block (0 or 1: blocks along a row only).  With
   * b > 1 each block is b rows x `group` columns (the last ones of the tensor
   * may be smaller), scaled by its amax: two-dimensional blocks, whose values
   * are the same whichever way the tensor is read (b = group: NVFP4's 16 x 16
   * weight blocks, DeepSeek-V3's 128 x 128). */
  int block_rows;
  /* NVFP4 only, 0 or 16: before the scales are computed, every run of 16
   * consecutive elements of a row (a shorter tail is left as it is) is
   * replaced by (1/4) H D x, H the 16 x 16 Sylvester Hadamard matrix and D
   * the diagonal of random signs drawn from hadamard_seed (bit i of
   * exmy_sr_word(hadamard_seed, 0): element i negated), summed in index order,
   * each addition rounded once.  The transform is orthogonal: a GEMM whose two
   * operands are transformed alike along K keeps its products (the random
   * Hadamard transform of NVFP4's weight-gradient GEMM). */
  int hadamard;
  uint64_t hadamard_seed;
} exmy_scaling;

/* The state of delayed scaling, one per tensor (TE's fp8_meta): a circular
 * amax history and the scale the next call uses. */
typedef struct exmy_delayed_state {
  int history_len;      /* number of amax slots (TE: 16 by default, up to 1024) */
  int count;            /* slots filled so far (<= history_len) */
  int latest;           /* index of the most recent amax in amax_history */
  float *amax_history;  /* history_len entries; unfilled slots are 0 */
  float scale;          /* scale for the next call; 1 initially */
  float scale_inv;      /* 1 / scale */
} exmy_delayed_state;

/* ---- statistics (what NVIDIA's FP8 debug tool reports per tensor) ---- */
typedef struct {
  size_t n;               /* number of elements */
  double amax;            /* max |x| over the finite x */
  double min_nonzero;     /* smallest nonzero finite |x|; 0 if there is none */
  /* The three ratios are counts divided by n, judged on the scaled values
   * x·s and their rounded images Q(x·s): */
  double underflow_ratio; /* x·s finite and nonzero, Q(x·s) == 0 */
  double subnormal_ratio; /* 0 < |Q(x·s)| < the format's smallest normal */
  double overflow_ratio;  /* x·s finite with |x·s| > fmax (so Q(x·s) is
                           * +-fmax, inf or NaN), or Q(x·s) not finite */
  /* Errors of the dequantized y against x, in double, over the elements where
   * both are finite: */
  double mse;             /* mean (x - y)^2 */
  double rel_l2;          /* ||x - y|| / ||x|| (0 if x == 0 and y == 0) */
  double cosine;          /* <x, y> / (||x|| ||y||); 1 if both are 0 */
  double sqnr_db;         /* 10 log10(||x||^2 / ||x - y||^2); +inf if exact */
  double scale;           /* TENSOR/DELAYED: the scale used; NONE: 1;
                           * MX/GROUP: NAN (one scale per block) */
  double delayed_over_current; /* DELAYED: scale used / the TENSOR-recipe scale
                                * of this very x; NAN for the other recipes */
} exmy_tensor_stats;

/* ---- how a GEMM quantizes one operand (exmy_qgemm, the GPU trainer) ---- */
typedef struct {
  bool enabled;                /* false: this operand stays float32 */
  exmy_format format;
  exmy_rounding_opts round;
  /* Blocks and groups run along the reduction dimension K: the operand is
   * quantized as a dense row-major matrix with K contiguous, op(A) (m x k) and
   * op(B)^T (n x k); sr's element index is its position there + round.offset.
   * For C (qc) it is C itself, m x n dense. */
  exmy_scaling scaling;
  exmy_delayed_state *delayed; /* DELAYED only */
  exmy_tensor_stats *stats;    /* if non-NULL, filled for this operand */
} exmy_operand_quant;

/* ---- accumulation models (lib/accum_core.h) by name ----
 * "fp32" (float32 accumulation), "hopper" (the H100's cuBLASLt FP8 GEMM with
 * fast accumulation, calibrated bit for bit: group 32, 14 product bits, 14
 * sum bits, truncation, the running sum aligned with the products, products
 * aligned by their inputs' exponents, no promotion, no split-K),
 * "hopper-split" (the same, promoted every 128: without fast accumulation),
 * or keys
 * "group:32,bits:14,sum:14,round:trunc,promote:128,align:1,align_to:inputs,kslice:0"
 * (round: trunc or nearest; align: align_sum, 0 or 1; align_to: align_exp,
 * product or inputs; kslice: k_slice; each key at most once; the keys not
 * given are hopper's).  emin_a / emin_b are no keys: they come out 0 and
 * belong to the operands' formats (exmy_accum_operand_emin), which the
 * caller of the GEMM knows; a GEMM of unquantized float32 operands under
 * align_to:inputs should set them to -126.
 * 0 and *out set, or -1 and *out untouched for anything else or a model
 * exmy_accum_model_check refuses. */
struct exmy_accum_model;
int exmy_accum_model_parse(const char *text, struct exmy_accum_model *out);
/* The model as the keys above ("fp32" for float32), that parse back to it
 * (emin_a / emin_b, not written, back as 0); -1 if m is invalid or buf too
 * short (len 128 is always enough). */
int exmy_accum_model_format(const struct exmy_accum_model *m, char *buf, size_t len);
/* The emin_a / emin_b of an accumulation model for a GEMM operand quantized
 * per q: its format's smallest normal exponent (the exponent its subnormals
 * count with on the hardware) when q rounds the values into the format
 * unscaled; float32's, -126, when q is NULL, disabled or scaled (a scaled
 * operand's values are Q(x s) / s, whose subnormals the model cannot place
 * without s). */
int exmy_accum_operand_emin(const exmy_operand_quant *q);
/* The same for an operand quantized per q whose per-tensor scale was s, the
 * one the hardware's codes c = Q(x s) carry: with TENSOR or DELAYED scaling
 * and pow2 (exmy_accum_pow2_scaled), the format's emin - log2 s
 * (exmy_accum_scaled_emin in lib/accum_core.h: then the model on y = c / s
 * is the tensor core's on c, clamped at the format's emin, times 1/s); -126
 * where that falls outside -149 .. 127.  Other scaled recipes: -126, not
 * the hardware's (it would accumulate the codes and apply 1/s after; the
 * GEMMs do so for block-scaled operands, exmy_accum_block_scaled, whose
 * emin is then their format's whatever this says); unscaled: as
 * exmy_accum_operand_emin. */
int exmy_accum_operand_emin_scaled(const exmy_operand_quant *q, float s);
/* Whether q is enabled with per-tensor TENSOR or DELAYED scaling and pow2:
 * the operands whose emin follows their scale. */
bool exmy_accum_pow2_scaled(const exmy_operand_quant *q);
/* The scaling part of that rule (per-tensor TENSOR or DELAYED, pow2), for
 * any operand recipe that carries an exmy_scaling (the GPU's too). */
bool exmy_accum_pow2_scaling(const exmy_scaling *s);
/* Whether a GEMM operand quantized per q under accumulation model m is
 * accumulated as its codes with a float32 scale per block
 * (exmy_accum_dot_scaled in lib/accum_core.h), as DeepGEMM does: q enabled
 * with GROUP scaling (no dynamic range expansion) whose blocks along K are
 * m's promotion interval (group == promote_every > 0: DeepSeek-V3's 1 x 128
 * and 128 x 128 blocks under hopper-split).  Its model's emin is then its
 * format's. */
bool exmy_accum_block_scaled(const exmy_operand_quant *q, const struct exmy_accum_model *m);
/* The scaling part of that rule, for any operand recipe (the GPU's too). */
bool exmy_accum_block_scaling(const exmy_scaling *s, const struct exmy_accum_model *m);

#ifdef __cplusplus
}
#endif

#endif /* EXMY_H */
