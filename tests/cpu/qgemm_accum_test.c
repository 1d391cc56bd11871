/* exmy_qgemm_accum against lib/accum_core.h's scalar exmy_accum_dot on the
 * operands quantized separately (exmy_quantize_scaled_f32), bit for bit, every
 * transpose, padded leading dimensions; and group = 0 against exmy_qgemm.
 * Block-scaled operands (fp8-deepseek) against the oracle's text of the
 * block-scaled model (tests/lib/accum_oracle.c). */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include <check.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <omp.h>

#include "cpu/accum_vector.h"
#include "cpu/exmy_cpu.h"
#include "lib/accum_core.h"
#include "tests/check_suite.h"
#include "tests/cpu/gemm_operands.h"
#include "tests/lib/accum_oracle.h"
#include "tests/test_rng.h"

static int same(float x, float y) { return memcmp(&x, &y, sizeof x) == 0 || (isnan(x) && isnan(y)); }

static void check_case(bool ta, bool tb, const exmy_accum_model *model, bool quant_a, float beta) {
  const size_t m = 9, n = 11, k = 300, pad = 3;
  gemm_case g = gemm_case_new(ta, tb, m, n, k, pad, 11 + ta + 2 * tb);
  float *a = g.a, *b = g.b, *c = g.c, *c0 = g.c0;
  const size_t lda = g.lda, ldb = g.ldb, ldc = g.ldc;

  exmy_operand_quant qa = {.enabled = quant_a}, qb = {.enabled = true};
  ck_assert_int_eq(exmy_format_parse("e4m3", &qa.format), 0);
  ck_assert_int_eq(exmy_format_parse("e5m2", &qb.format), 0);
  qa.scaling.kind = qb.scaling.kind = EXMY_SCALING_TENSOR;
  const float alpha = 0.75f;
  ck_assert_int_eq(exmy_qgemm_accum(ta, tb, m, n, k, alpha, a, lda, &qa, b, ldb, &qb, beta,
                                    c, ldc, NULL, model), 0);

  float *aq = dense_op(a, lda, ta, m, k), *bq = dense_op(b, ldb, !tb, n, k);
  if (quant_a)
    exmy_quantize_scaled_f32(&qa.format, &qa.round, &qa.scaling, NULL, aq, aq, m, k, NULL);
  exmy_quantize_scaled_f32(&qb.format, &qb.round, &qb.scaling, NULL, bq, bq, n, k, NULL);
  for (size_t i = 0; i < m; i++)
    for (size_t j = 0; j < n; j++) {
      const float dot = exmy_accum_dot(model, aq + i * k, 1, bq + j * k, 1, (int)k);
      const float want = beta != 0 ? alpha * dot + beta * c0[i * ldc + j] : alpha * dot;
      if (!same(c[i * ldc + j], want)) {
        fprintf(stderr, "ta=%d tb=%d group %d: C[%zu][%zu] = %.9g, want %.9g\n", ta, tb,
                model->group, i, j, c[i * ldc + j], want);
        ck_abort();
      }
    }
  for (size_t i = 0; i < m; i++)
    for (size_t j = n; j < ldc; j++) ck_assert(c[i * ldc + j] == c0[i * ldc + j]);

  if (model->group == EXMY_ACCUM_FP32) { /* the same bits as exmy_qgemm */
    float *c2 = malloc(m * ldc * sizeof *c2);
    memcpy(c2, c0, m * ldc * sizeof *c2);
    ck_assert_int_eq(exmy_qgemm(ta, tb, m, n, k, alpha, a, lda, &qa, b, ldb, &qb, beta, c2,
                                ldc, NULL), 0);
    ck_assert_int_eq(memcmp(c, c2, m * ldc * sizeof *c2), 0);
    free(c2);
  }
  gemm_case_free(&g), free(aq), free(bq);
}

START_TEST(test_against_core) {
  enum { P = EXMY_ACCUM_ALIGN_PRODUCT }; /* each product aligned by its own exponent */
  const exmy_accum_model models[] = {
      {32, 14, 14, EXMY_ACCUM_TRUNCATE, 0, 0, P, 0, 0, 0},   /* DeepSeek-V3's description */
      {32, 14, 14, EXMY_ACCUM_TRUNCATE, 128, 0, P, 0, 0, 0}, /* with the split accumulator */
      {16, 10, 24, EXMY_ACCUM_NEAREST_EVEN, 64, 1, P, 0, 0, 0},
      {EXMY_ACCUM_FP32, 0, 0, 0, 0, 0, P, 0, 0, 0},
  };
  for (int t = 0; t < 4; t++)
    for (int mi = 0; mi < 4; mi++)
      check_case(t & 1, t & 2, &models[mi], mi != 2, mi == 0 ? 0.0f : 0.5f);
}
END_TEST

/* Operand values for the vector kernels: E4M3/E5M2-like values, float32's
 * wide exponents and subnormals, zeros, cancelling pairs; kind 4 also puts
 * an Inf or a NaN into some rows and columns. */
static float draw(uint64_t *state, int kind) {
  const uint64_t r = test_rng_next(state) >> 11;
  const float u = (float)((r & 0xFFFFF) / 1048576.0) + 1.0f; /* [1, 2) */
  const float sign = (r >> 20) & 1 ? -1.0f : 1.0f;
  const int e = (int)((r >> 21) % 24) - 12;
  switch (kind) {
    case 0: return sign * ldexpf(roundf(u * 8) / 8, e);            /* 4-bit significands */
    case 1: return sign * ldexpf(u, (int)((r >> 21) % 250) - 140);  /* wide, subnormals */
    case 2: return (r >> 26) % 3 == 0 ? 0.0f : sign * ldexpf(u, e);  /* zeros */
    case 3: return sign * ldexpf(roundf(u * 4) / 4, (r >> 26) % 2 ? 6 : -6); /* cancelling */
    default: {
      const uint64_t w = (r >> 26) % 500;
      return w == 0 ? INFINITY : w == 1 ? NAN : sign * ldexpf(u, e);
    }
  }
}

/* Makes `kernel` ("avx512", "avx2" or "scalar") the one exmy_qgemm_accum
 * runs for the models it covers, by turning the ones before it off. */
static void use_kernel(const char *kernel) {
  exmy_accum_avx512_enable(!strcmp(kernel, "avx512"));
  exmy_accum_avx2_enable(strcmp(kernel, "scalar") != 0);
}

/* exmy_qgemm_accum against the scalar exmy_accum_dot, element by element, on
 * unquantized operands; the number of outputs that the kernel `expect`
 * (exmy_accum_kernel_name's answer, checked) computed, 0 for "scalar". */
static size_t check_avx(const char *expect, const exmy_accum_model *model, bool ta, bool tb,
                        size_t m, size_t n, size_t k, int kind, float beta, int threads) {
  ck_assert_str_eq(exmy_accum_kernel_name(model), expect);
  const size_t lda = (ta ? m : k) + 2, ldb = (tb ? k : n) + 1, ldc = n + 3;
  float *a = malloc((ta ? k : m) * lda * sizeof *a), *b = malloc((tb ? n : k) * ldb * sizeof *b);
  float *c = malloc(m * ldc * sizeof *c), *c0 = malloc(m * ldc * sizeof *c0);
  uint64_t st = 1000 * kind + 17 * m + n + k + ta + 2 * tb;
  for (size_t i = 0; i < (ta ? k : m) * lda; i++) a[i] = draw(&st, kind);
  for (size_t i = 0; i < (tb ? n : k) * ldb; i++) b[i] = draw(&st, kind);
  if (kind == 3) /* each pair of K cancels but for its rounding: b[p+1] = b[p] */
    for (size_t p = 0; p + 1 < k; p += 2)
      for (size_t j = 0; j < n; j++) {
        float *bp = tb ? b + j * ldb + p : b + p * ldb + j, *bq = tb ? bp + 1 : bp + ldb;
        *bq = *bp;
      }
  for (size_t i = 0; i < m * ldc; i++) c[i] = c0[i] = draw(&st, 0);
  const float alpha = 0.625f;
  omp_set_num_threads(threads);
  ck_assert_int_eq(exmy_qgemm_accum(ta, tb, m, n, k, alpha, a, lda, NULL, b, ldb, NULL, beta, c,
                                    ldc, NULL, model), 0);
  omp_set_num_threads(omp_get_num_procs());
  for (size_t i = 0; i < m; i++) {
    for (size_t j = 0; j < n; j++) {
      const float *ai = ta ? a + i : a + i * lda, *bj = tb ? b + j * ldb : b + j;
      const float dot = exmy_accum_dot(model, ai, ta ? (long)lda : 1, bj, tb ? 1 : (long)ldb, (int)k);
      const float want = beta != 0 ? alpha * dot + beta * c0[i * ldc + j] : alpha * dot;
      if (!same(c[i * ldc + j], want)) {
        fprintf(stderr, "%s: kind %d ta=%d tb=%d %zux%zux%zu model {%d,%d,%d,%d,%d,%d,%d,%d,%d,%d}: "
                "C[%zu][%zu] = %.9g, want %.9g\n", expect, kind, ta, tb, m, n, k, model->group,
                model->product_bits, model->sum_bits, model->round, model->promote_every,
                model->align_sum, model->align_exp, model->emin_a, model->emin_b, model->k_slice,
                i, j, c[i * ldc + j], want);
        ck_abort();
      }
    }
    for (size_t j = n; j < ldc; j++) ck_assert(same(c[i * ldc + j], c0[i * ldc + j]));
  }
  free(a), free(b), free(c), free(c0);
  return strcmp(expect, "scalar") ? m * n : 0;
}

/* Every model the vector kernels cover that the sweep below runs. */
static const exmy_accum_model covered[] = {
    /* hopper and hopper-split: E4M3 x E4M3, E5M2 x E4M3 */
    {32, 14, 14, EXMY_ACCUM_TRUNCATE, 0, 1, EXMY_ACCUM_ALIGN_INPUTS, -6, -6, 0},
    {32, 14, 14, EXMY_ACCUM_TRUNCATE, 128, 1, EXMY_ACCUM_ALIGN_INPUTS, -14, -6, 0},
    /* split K, float32 emin, no sum alignment, other widths and groups */
    {32, 14, 14, EXMY_ACCUM_TRUNCATE, 0, 1, EXMY_ACCUM_ALIGN_INPUTS, -126, -126, 96},
    {32, 14, 14, EXMY_ACCUM_TRUNCATE, 64, 1, EXMY_ACCUM_ALIGN_INPUTS, -6, -14, 128},
    {16, 10, 24, EXMY_ACCUM_TRUNCATE, 32, 0, EXMY_ACCUM_ALIGN_INPUTS, -149, -149, 0},
    {64, 30, 40, EXMY_ACCUM_TRUNCATE, 0, 0, EXMY_ACCUM_ALIGN_INPUTS, -6, -6, 0},
    {1, 53, 62, EXMY_ACCUM_TRUNCATE, 0, 1, EXMY_ACCUM_ALIGN_INPUTS, 127, -149, 0},
    {256, 5, 3, EXMY_ACCUM_TRUNCATE, 256, 1, EXMY_ACCUM_ALIGN_INPUTS, 0, 0, 0},
};

/* One kernel against the scalar products on every model above, every kind
 * of operand, every transpose, beta 0 and not, one thread and two; the
 * number of outputs it computed. */
static size_t sweep_kernel(const char *kernel) {
  use_kernel(kernel);
  const size_t nm = sizeof covered / sizeof *covered;
  size_t outputs = 0;
  for (size_t mi = 0; mi < nm; mi++)
    for (int kind = 0; kind < 5; kind++)
      for (int t = 0; t < 4; t++) {
        const size_t k = kind == 1 ? 300 : 257 + 64 * (size_t)t;
        outputs += check_avx(kernel, &covered[mi], t & 1, t & 2, 5 + t, 13 + 2 * (size_t)kind, k,
                             kind, t == 3 ? 0.0f : 0.5f, 1 + (t & 1));
      }
  /* large enough to be shared out between threads */
  outputs += check_avx(kernel, &covered[0], false, true, 64, 70, 512, 0, 0.0f, 2);
  outputs += check_avx(kernel, &covered[1], true, false, 40, 33, 1024, 2, 1.0f, 2);
  use_kernel("avx512");
  printf("%s kernel: %zu outputs of %zu models bit-identical to exmy_accum_dot\n", kernel,
         outputs, nm);
  return outputs;
}

START_TEST(test_avx512_kernel_against_core) {
  if (!__builtin_cpu_supports("avx512f")) {
    printf("no AVX-512 on this CPU: the AVX-512 kernel is not tested\n");
    return;
  }
  ck_assert_uint_gt(sweep_kernel("avx512"), 0);
}
END_TEST

/* On a CPU with AVX-512 too (its kernel turned off). */
START_TEST(test_avx2_kernel_against_core) {
  if (!__builtin_cpu_supports("avx2")) {
    printf("no AVX2 on this CPU: the AVX2 kernel is not tested\n");
    return;
  }
  ck_assert_uint_gt(sweep_kernel("avx2"), 0);
}
END_TEST

/* A model the kernels do not cover (rounding to nearest, alignment by the
 * product) and kernels turned off take the scalar products; with AVX-512 off,
 * a CPU with AVX2 runs that kernel. */
START_TEST(test_vector_kernel_scope) {
  const exmy_accum_model hopper = covered[0];
  const exmy_accum_model nearest = {32, 14, 14, EXMY_ACCUM_NEAREST_EVEN, 0, 1,
                                    EXMY_ACCUM_ALIGN_INPUTS, -6, -6, 0};
  const exmy_accum_model product = {32, 14, 14, EXMY_ACCUM_TRUNCATE, 0, 1, EXMY_ACCUM_ALIGN_PRODUCT,
                                    0, 0, 0};
  const bool avx512 = __builtin_cpu_supports("avx512f"), avx2 = __builtin_cpu_supports("avx2");
  ck_assert(!exmy_accum_avx512_covers(&nearest) && !exmy_accum_avx2_covers(&nearest));
  ck_assert(!exmy_accum_avx512_covers(&product) && !exmy_accum_avx2_covers(&product));
  ck_assert(exmy_accum_avx512_covers(&hopper) == avx512);
  ck_assert(exmy_accum_avx2_covers(&hopper) == avx2);
  ck_assert_str_eq(exmy_accum_kernel_name(&hopper), avx512 ? "avx512" : avx2 ? "avx2" : "scalar");
  use_kernel("avx2");
  ck_assert(!exmy_accum_avx512_covers(&hopper));
  ck_assert_str_eq(exmy_accum_kernel_name(&hopper), avx2 ? "avx2" : "scalar");
  use_kernel("scalar");
  ck_assert(!exmy_accum_avx512_covers(&hopper) && !exmy_accum_avx2_covers(&hopper));
  check_avx("scalar", &hopper, false, false, 7, 9, 100, 0, 0.5f, 1);
  use_kernel("avx512");
  check_avx("scalar", &nearest, true, false, 7, 9, 100, 1, 0.5f, 1);
  check_avx("scalar", &product, false, true, 7, 9, 100, 2, 0.5f, 1);
}
END_TEST

/* Operands scaled per tensor by powers of two (A: DELAYED, B: TENSOR, pow2)
 * with many FP8-subnormal codes: exmy_qgemm_accum sets their emin from the
 * scales it uses (whatever the model says), so that C is the hopper presets
 * on the codes c = y s with the formats' emin, as the tensor core computes
 * them, times 2^-(ka+kb), bit for bit. */
START_TEST(test_pow2_scaled_operands_are_the_codes) {
  const size_t m = 7, n = 5, k = 320;
  float *a = malloc(m * k * sizeof *a), *b = malloc(n * k * sizeof *b), *c = malloc(m * n * 4);
  float *ya = malloc(m * k * sizeof *a), *yb = malloc(n * k * sizeof *b);
  uint64_t st = 99;
  for (size_t i = 0; i < m * k + n * k; i++) {
    test_rng_next(&st);
    const double v = ldexp(1.0 + (double)(st >> 40) / (1 << 24), -(int)(st >> 59) - (int)(st >> 33 & 7));
    *(i < m * k ? &a[i] : &b[i - m * k]) = (float)((st >> 20 & 1) ? -v : v);
  }
  for (size_t p = 0; p < k; p++) a[p] *= 0x1p-12f; /* row 0 of A: subnormal codes only */
  for (int preset = 0; preset < 2; preset++) {
    exmy_accum_model model;
    ck_assert_int_eq(exmy_accum_model_parse(preset ? "hopper-split" : "hopper", &model), 0);
    model.emin_a = model.emin_b = -126; /* exmy_accum_operand_emin's: replaced */
    exmy_operand_quant qa = {.enabled = true}, qb = {.enabled = true};
    ck_assert_int_eq(exmy_format_parse("float8_e4m3fn", &qa.format), 0);
    ck_assert_int_eq(exmy_format_parse(preset ? "float8_e4m3fn" : "float8_e5m2", &qb.format), 0);
    qa.scaling.kind = EXMY_SCALING_DELAYED, qb.scaling.kind = EXMY_SCALING_TENSOR;
    qa.scaling.pow2 = qb.scaling.pow2 = true;
    exmy_delayed_state *d1 = exmy_delayed_state_new(4), *d2 = exmy_delayed_state_new(4);
    d1->scale = d2->scale = 32.0f, d1->scale_inv = d2->scale_inv = 1.0f / 32;
    qa.delayed = d1;
    /* A m x k as is, B given as n x k (trans_b): both K contiguous */
    ck_assert_int_eq(exmy_qgemm_accum(false, true, m, n, k, 0.5f, a, k, &qa, b, k, &qb, 0.0f, c,
                                      n, NULL, &model), 0);
    float sa = 0, sb = 0;
    ck_assert_int_eq(exmy_quantize_scaled_f32_used(&qa.format, &qa.round, &qa.scaling, d2, a, ya,
                                                   m, k, NULL, &sa), 0);
    ck_assert_int_eq(exmy_quantize_scaled_f32_used(&qb.format, &qb.round, &qb.scaling, NULL, b,
                                                   yb, n, k, NULL, &sb), 0);
    ck_assert(sa == 32.0f && sb >= 256.0f && sb == ldexpf(1.0f, ilogbf(sb)));
    size_t subnormal = 0;
    for (size_t i = 0; i < m * k; i++) { /* the codes, in place */
      ya[i] *= sa;
      subnormal += ya[i] != 0 && fabsf(ya[i]) < 0x1p-6f;
    }
    for (size_t i = 0; i < n * k; i++) {
      yb[i] *= sb;
      subnormal += yb[i] != 0 && fabsf(yb[i]) < (preset ? 0x1p-6f : 0x1p-14f);
    }
    ck_assert_uint_gt(subnormal, 50);
    exmy_accum_model hw = model;
    hw.emin_a = qa.format.emin, hw.emin_b = qb.format.emin;
    const int shift = -ilogbf(sa) - ilogbf(sb);
    size_t differ = 0; /* from the model with float32's emin */
    exmy_accum_model f32 = model;
    for (size_t i = 0; i < m; i++)
      for (size_t j = 0; j < n; j++) {
        const float want = 0.5f * ldexpf(exmy_accum_dot(&hw, ya + i * k, 1, yb + j * k, 1, (int)k),
                                         shift);
        ck_assert_msg(same(c[i * n + j], want), "preset %d C[%zu][%zu] = %a, want %a", preset, i,
                      j, c[i * n + j], want);
        float ra[320], rb[320];
        for (size_t p = 0; p < k; p++) ra[p] = ya[i * k + p] / sa, rb[p] = yb[j * k + p] / sb;
        differ += !same(0.5f * exmy_accum_dot(&f32, ra, 1, rb, 1, (int)k), want);
      }
    ck_assert_uint_gt(differ, 0);
    printf("pow2-scaled operands, preset %d: %zu subnormal codes, %zu of %zu elements differ "
           "under float32's emin\n", preset, subnormal, differ, m * n);
    exmy_delayed_state_free(d1), exmy_delayed_state_free(d2);
  }
  free(a), free(b), free(c), free(ya), free(yb);
}
END_TEST

/* fp8-deepseek's operands (E4M3, 1 x 128 tiles of op(A), 128 x 128 blocks
 * of op(B)^T, scales 448 / amax not powers of two or, with pow2, powers of
 * two) under hopper-split, quantized by exmy_qgemm_accum. */
static void deepseek_operands(bool pow2, exmy_operand_quant *qa, exmy_operand_quant *qb) {
  *qa = (exmy_operand_quant){.enabled = true}, *qb = (exmy_operand_quant){.enabled = true};
  ck_assert_int_eq(exmy_format_parse("float8_e4m3fn", &qa->format), 0);
  qb->format = qa->format;
  qa->round.saturate = qb->round.saturate = true;
  qa->scaling.kind = qb->scaling.kind = EXMY_SCALING_GROUP;
  qa->scaling.group = qb->scaling.group = 128;
  qb->scaling.block_rows = 128;
  qa->scaling.pow2 = qb->scaling.pow2 = pow2;
}

/* Block-scaled operands: exmy_qgemm_accum (every kernel this CPU has, every
 * transpose, K a multiple of 128 and not, two of op(B)^T's 128-row blocks)
 * against the oracle's scalar text of the block-scaled model
 * (tests/lib/accum_oracle.c) on the codes and block scales of the same
 * quantization, and against exmy_accum_dot_scaled, bit for bit.  The codes
 * times their block's scale, rounded, are the dequantized values that
 * exmy_quantize_scaled_f32 gives. */
START_TEST(test_block_scaled_against_oracle) {
  const char *kernels[] = {"avx512", "avx2", "scalar"};
  size_t outputs = 0, nonpow2 = 0;
  for (int kn = 0; kn < 3; kn++) {
    if (kn == 0 && !__builtin_cpu_supports("avx512f")) continue;
    if (kn == 1 && !__builtin_cpu_supports("avx2")) continue;
    use_kernel(kernels[kn]);
    for (int t = 0; t < 4; t++) {
      const bool ta = t & 1, tb = t & 2;
      const size_t m = 6 + (size_t)t, n = 140, k = t % 2 ? 384 : 300;
      gemm_case g = gemm_case_new(ta, tb, m, n, k, 2, 31 + (unsigned)t);
      exmy_operand_quant qa, qb;
      deepseek_operands(false, &qa, &qb);
      exmy_accum_model model;
      ck_assert_int_eq(exmy_accum_model_parse("hopper-split", &model), 0);
      model.emin_a = model.emin_b = -126; /* as the trainer passes it: replaced */
      ck_assert(exmy_accum_block_scaled(&qa, &model) && exmy_accum_block_scaled(&qb, &model));
      const float alpha = 0.75f, beta = t == 3 ? 0.0f : 0.5f;
      ck_assert_int_eq(exmy_qgemm_accum(ta, tb, m, n, k, alpha, g.a, g.lda, &qa, g.b, g.ldb, &qb,
                                        beta, g.c, g.ldc, NULL, &model), 0);
      /* the same quantization: codes, block scales, and the dequantized values */
      float *xa = dense_op(g.a, g.lda, ta, m, k), *xb = dense_op(g.b, g.ldb, !tb, n, k);
      const size_t kb = (k + 127) / 128;
      float *ca = malloc(m * k * 4), *cb = malloc(n * k * 4), *ya = malloc(m * k * 4),
            *yb = malloc(n * k * 4), *sa = malloc(m * kb * 4), *sb = malloc(2 * kb * 4);
      ck_assert_int_eq(exmy_quantize_group_codes_f32(&qa.format, &qa.round, &qa.scaling, xa, ya,
                                                     ca, sa, m, k, NULL), 0);
      ck_assert_int_eq(exmy_quantize_group_codes_f32(&qb.format, &qb.round, &qb.scaling, xb, yb,
                                                     cb, sb, n, k, NULL), 0);
      float *da = dense_op(g.a, g.lda, ta, m, k), *db = dense_op(g.b, g.ldb, !tb, n, k);
      exmy_quantize_scaled_f32(&qa.format, &qa.round, &qa.scaling, NULL, da, da, m, k, NULL);
      exmy_quantize_scaled_f32(&qb.format, &qb.round, &qb.scaling, NULL, db, db, n, k, NULL);
      for (size_t i = 0; i < m * k; i++)
        ck_assert(same(ya[i], da[i]) && same(ca[i] * sa[(i / k) * kb + (i % k) / 128], da[i]));
      for (size_t i = 0; i < n * k; i++)
        ck_assert(same(yb[i], db[i]) && same(cb[i] * sb[(i / k / 128) * kb + (i % k) / 128], db[i]));
      for (size_t i = 0; i < m * kb; i++) nonpow2 += sa[i] != ldexpf(1.0f, ilogbf(sa[i]));
      exmy_accum_model hw = model;
      hw.emin_a = hw.emin_b = qa.format.emin;
      for (size_t i = 0; i < m; i++)
        for (size_t j = 0; j < n; j++) {
          const float *ra = sa + i * kb, *rb = sb + (j / 128) * kb;
          const float dot = oracle_scaled_dot(&hw, ca + i * k, 1, ra, cb + j * k, 1, rb, (int)k);
          ck_assert(same(exmy_accum_dot_scaled(&hw, ca + i * k, 1, ra, cb + j * k, 1, rb, (int)k),
                         dot));
          const float r = alpha * dot, want = beta != 0 ? r + beta * g.c0[i * g.ldc + j] : r;
          ck_assert_msg(same(g.c[i * g.ldc + j], want),
                        "%s ta=%d tb=%d: C[%zu][%zu] = %a, want %a", kernels[kn], ta, tb, i, j,
                        g.c[i * g.ldc + j], want);
          outputs++;
        }
      free(xa), free(xb), free(ca), free(cb), free(ya), free(yb), free(sa), free(sb), free(da),
          free(db);
      gemm_case_free(&g);
    }
  }
  use_kernel("avx512");
  ck_assert_uint_gt(nonpow2, 0);
  printf("block-scaled operands: %zu outputs match the oracle (%zu of A's scales not powers of "
         "two)\n", outputs, nonpow2);
}
END_TEST

/* With power-of-two block scales and no subnormal code, exmy_qgemm_accum's
 * block-scaled path gives what it gave before it read codes: the model on the
 * dequantized values with float32's emin, bit for bit. */
START_TEST(test_block_scaled_pow2_unchanged) {
  const size_t m = 5, n = 130, k = 300;
  float *a = malloc(m * k * 4), *b = malloc(n * k * 4), *c = malloc(m * n * 4);
  uint64_t st = 7;
  for (size_t i = 0; i < m * k + n * k; i++) { /* |x| in [1/2, 1) or 0: normal codes */
    test_rng_next(&st);
    const float v = (st >> 60) == 0 ? 0.0f : 0.5f + (float)(st >> 40 & 0xFFFFF) / 0x1p21f;
    *(i < m * k ? &a[i] : &b[i - m * k]) = (st >> 20 & 1) ? -v : v;
  }
  for (size_t p = 0; p < 128; p++) a[p] *= 0x1p-20f; /* a block with its own scale */
  exmy_operand_quant qa, qb;
  deepseek_operands(true, &qa, &qb);
  exmy_accum_model model;
  ck_assert_int_eq(exmy_accum_model_parse("hopper-split", &model), 0);
  model.emin_a = model.emin_b = -126;
  for (int kn = 0; kn < 2; kn++) {
    use_kernel(kn ? "scalar" : "avx512");
    ck_assert_int_eq(exmy_qgemm_accum(false, true, m, n, k, 1.0f, a, k, &qa, b, k, &qb, 0.0f, c,
                                      n, NULL, &model), 0);
    float *ya = malloc(m * k * 4), *yb = malloc(n * k * 4);
    exmy_quantize_scaled_f32(&qa.format, &qa.round, &qa.scaling, NULL, a, ya, m, k, NULL);
    exmy_quantize_scaled_f32(&qb.format, &qb.round, &qb.scaling, NULL, b, yb, n, k, NULL);
    for (size_t i = 0; i < m; i++)
      for (size_t j = 0; j < n; j++)
        ck_assert_msg(same(c[i * n + j], exmy_accum_dot(&model, ya + i * k, 1, yb + j * k, 1,
                                                       (int)k)),
                      "C[%zu][%zu]", i, j);
    free(ya), free(yb);
  }
  use_kernel("avx512");
  free(a), free(b), free(c);
}
END_TEST

START_TEST(test_bad_arguments) {
  float a[4] = {1, 2, 3, 4}, b[4] = {1, 1, 1, 1}, c[4] = {7, 7, 7, 7};
  const exmy_accum_model bad = {32, 14, 14, EXMY_ACCUM_TRUNCATE, 100, 0,
                                EXMY_ACCUM_ALIGN_PRODUCT, 0, 0, 0};
  ck_assert_int_eq(exmy_qgemm_accum(false, false, 2, 2, 2, 1, a, 2, NULL, b, 2, NULL, 0, c, 2,
                                    NULL, &bad), -1);
  ck_assert_int_eq(exmy_qgemm_accum(false, false, 2, 2, 2, 1, a, 2, NULL, b, 2, NULL, 0, c, 2,
                                    NULL, NULL), -1);
  for (int i = 0; i < 4; i++) ck_assert(c[i] == 7);
}
END_TEST

int main(void) {
  /* the AVX-512 kernel runs only where named (cpu/accum_vector.h): every
   * kernel this CPU has is under test here */
  setenv("EXMY_ACCUM_KERNEL", "avx512", 0);
  const TTest *tests[] = {test_against_core,
                         test_avx512_kernel_against_core,
                         test_avx2_kernel_against_core,
                         test_vector_kernel_scope,
                         test_pow2_scaled_operands_are_the_codes,
                         test_block_scaled_against_oracle,
                         test_block_scaled_pow2_unchanged,
                         test_bad_arguments,
                         NULL};
  return run_suite(suite_of("qgemm_accum", 120, tests), true);
}
