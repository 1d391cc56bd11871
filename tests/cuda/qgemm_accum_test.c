/* exmy_cuda_qgemm_accum against the CPU's exmy_qgemm_accum, bit for bit:
 * every transpose, padded leading dimensions, alpha/beta, quantized and raw
 * operands, C quantized or not, odd shapes (K = 0, 1, not a multiple of the
 * group), accumulation models from float32 to the calibrated H100 one
 * (alignment by the inputs' exponents with their formats' emin, split-K
 * slices) and extreme ones,
 * and data made to break an accumulator (exponents spread over the whole
 * float32 range, cancellation, zeros of both signs, subnormals, Inf and NaN);
 * and fp8-deepseek's block-scaled operands, accumulated as codes.
 * Needs a GPU (tag "gpu"). */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/exmy_cpu.h"
#include "cuda/exmy_cuda.h"
#include "lib/accum_core.h"
#include "tests/check_suite.h"
#include "tests/cuda/gpu_check.h"

static const struct {
  const char *name;
  /* group, product_bits, sum_bits, round, promote_every, align_sum, align_exp,
   * emin_a, emin_b, k_slice */
  exmy_accum_model model;
} models[] = {
    {"fp32", {EXMY_ACCUM_FP32, 0, 0, 0, 0, 0, 0, 0, 0, 0}},
    {"hopper", {32, 14, 14, EXMY_ACCUM_TRUNCATE, 0, 1, EXMY_ACCUM_ALIGN_INPUTS, -6, -14, 0}},
    {"hopper-split", {32, 14, 14, EXMY_ACCUM_TRUNCATE, 128, 1, EXMY_ACCUM_ALIGN_INPUTS, -6, -6, 0}},
    {"hopper-kslice", {32, 14, 14, EXMY_ACCUM_TRUNCATE, 128, 1, EXMY_ACCUM_ALIGN_INPUTS, -6, -14,
                       256}},
    {"inputs-emin3-k32", {32, 14, 14, EXMY_ACCUM_TRUNCATE, 0, 1, EXMY_ACCUM_ALIGN_INPUTS, 3, -149,
                          32}},
    {"inputs-g7-split21", {7, 53, 20, EXMY_ACCUM_NEAREST_EVEN, 21, 0, EXMY_ACCUM_ALIGN_INPUTS,
                           -126, -14, 42}},
    {"product-hopper", {32, 14, 14, EXMY_ACCUM_TRUNCATE, 0, 1, 0, 0, 0, 0}},
    {"nearest", {32, 14, 14, EXMY_ACCUM_NEAREST_EVEN, 0, 1, 0, 0, 0, 0}},
    {"align_sum0", {32, 14, 14, EXMY_ACCUM_TRUNCATE, 0, 0, 0, 0, 0, 0}},
    {"fp22-like", {32, 25, 14, EXMY_ACCUM_NEAREST_EVEN, 0, 0, 0, 0, 0, 0}},
    {"g16-split64-k128", {16, 13, 24, EXMY_ACCUM_TRUNCATE, 64, 0, 0, 0, 0, 128}},
    {"g7-split21", {7, 20, 18, EXMY_ACCUM_NEAREST_EVEN, 21, 1, 0, 0, 0, 0}},
    {"g1-1bit", {1, 1, 1, EXMY_ACCUM_NEAREST_EVEN, 0, 1, 0, 0, 0, 0}},
    {"widest", {EXMY_ACCUM_MAX_GROUP, EXMY_ACCUM_MAX_PRODUCT_BITS, EXMY_ACCUM_MAX_SUM_BITS,
                EXMY_ACCUM_TRUNCATE, 0, 1, 0, 0, 0, 0}},
};
enum { NMODELS = sizeof models / sizeof *models };

typedef enum {
  DATA_UNIFORM,    /* [0.5, 1.5], positive: the calibration's first case */
  DATA_MIXED,      /* [-4, 4) */
  DATA_SPREAD,     /* +-(1 + u) 2^e, e uniform in [-149, 127]: products over- and underflow */
  DATA_CANCEL,     /* pairs a b, a (-b) with a little noise: sums near 0 */
  DATA_ZEROS,      /* most values +0 or -0 */
  DATA_SUBNORMAL,  /* float32 subnormals and tiny normals */
  DATA_SPECIALS,   /* [-4, 4) with a few Inf and NaN */
  DATA_BITS,       /* random bit patterns */
  NDATA
} data_kind;
static const char *data_name[NDATA] = {"uniform", "mixed", "spread", "cancel",
                                       "zeros",   "subnormal", "specials", "bits"};

static float unit(uint64_t *s) { return (float)(splitmix32(s) >> 8) / 16777216.0f; }

/* A value of operand `which` (0: A, 1: B) at position p along K. */
static float draw(data_kind kind, int which, size_t p, uint64_t *s) {
  switch (kind) {
    case DATA_UNIFORM:
      return 0.5f + unit(s);
    case DATA_MIXED:
      return unit(s) * 8.0f - 4.0f;
    case DATA_SPREAD: {
      const int e = -149 + (int)(splitmix32(s) % 277);
      const float v = ldexpf(1.0f + unit(s), e);
      return splitmix32(s) & 1 ? -v : v;
    }
    case DATA_CANCEL: {
      /* products in pairs p = 2q, 2q + 1 of equal magnitude (2^-20 .. 2^20)
       * and opposite signs, a few of them nudged */
      const size_t q = p / 2;
      const float v = which ? ldexpf(1.0f + (float)(q % 5) / 4.0f, (int)(q % 11) - 5)
                            : ldexpf((p & 1 ? -1.0f : 1.0f) * (1.0f + (float)(q % 7) / 8.0f),
                                     (int)(q % 31) - 15);
      return v + (splitmix32(s) % 16 == 0 ? ldexpf(unit(s), -20) : 0.0f);
    }
    case DATA_ZEROS: {
      const uint32_t r = splitmix32(s) % 8;
      return r < 3 ? 0.0f : r < 6 ? -0.0f : unit(s) * 2.0f - 1.0f;
    }
    case DATA_SUBNORMAL: {
      const uint32_t r = splitmix32(s);
      float v;
      const uint32_t bits = r % 4 ? (r >> 9) & 0x7FFFFFu : (uint32_t)(1 + r % 12) << 23 | (r >> 9);
      memcpy(&v, &bits, 4);
      return r & 0x100 ? -v : v;
    }
    case DATA_SPECIALS: {
      const uint32_t r = splitmix32(s) % 512;
      return r == 0 ? INFINITY : r == 1 ? -INFINITY : r == 2 ? NAN : unit(s) * 8.0f - 4.0f;
    }
    case DATA_BITS:
    default: {
      const uint32_t bits = splitmix32(s);
      float v;
      memcpy(&v, &bits, 4);
      return v;
    }
  }
}

static int same(float x, float y) { return !memcmp(&x, &y, 4) || (isnan(x) && isnan(y)); }

typedef struct {
  size_t m, n, k;
} shape;

/* One C = alpha op(A) op(B) + beta C on both devices; returns the number of
 * elements (padding included) that differ. */
static size_t one_case(exmy_cuda_gemm *ctx, shape sh, bool ta, bool tb, data_kind kind,
                       const exmy_accum_model *model, bool quant, bool with_qc, float beta,
                       uint64_t seed, int block) {
  const size_t pad = 3, m = sh.m, n = sh.n, k = sh.k;
  const size_t lda = (ta ? m : k) + pad, ldb = (tb ? k : n) + pad, ldc = n + pad;
  const size_t asz = (ta ? k : m) * lda, bsz = (tb ? n : k) * ldb, csz = m * ldc;
  float *a = malloc(asz * 4 + 4), *b = malloc(bsz * 4 + 4), *c = malloc(csz * 4 + 4),
        *gc = malloc(csz * 4 + 4);
  uint64_t s = seed;
  for (size_t i = 0; i < asz; i++) a[i] = draw(kind, 0, ta ? i / lda : i % lda, &s);
  for (size_t i = 0; i < bsz; i++) b[i] = draw(kind, 1, tb ? i % ldb : i / ldb, &s);
  for (size_t i = 0; i < csz; i++) c[i] = unit(&s) * 8.0f - 4.0f;
  float *da = dev_from(a, asz * 4 + 4), *db = dev_from(b, bsz * 4 + 4),
        *dc = dev_from(c, csz * 4 + 4);

  exmy_operand_quant cq[2] = {{0}}, cqc = {0};
  exmy_cuda_operand_quant gq[2] = {{0}}, gqc = {0};
  const char *fmt[2] = {"float8_e4m3fn", "float8_e5m2"};
  for (int o = 0; o < 2; o++) {
    cq[o].enabled = quant;
    ck_assert_int_eq(exmy_format_parse(fmt[o], &cq[o].format), 0);
    cq[o].round.saturate = true;
    /* TENSOR on A: a non-power-of-two scale, so dequantized values are not
     * FP8 values; NONE on B */
    cq[o].scaling.kind = o == 0 ? EXMY_SCALING_TENSOR : EXMY_SCALING_NONE;
    if (block) { /* fp8-deepseek's: E4M3, 1 x 128 tiles of A, 128 x 128 blocks of B */
      cq[o].enabled = true;
      ck_assert_int_eq(exmy_format_parse(fmt[0], &cq[o].format), 0);
      cq[o].scaling.kind = EXMY_SCALING_GROUP;
      cq[o].scaling.group = 128;
      cq[o].scaling.block_rows = o == 1 ? 128 : 1;
      cq[o].scaling.pow2 = block == 2;
      ck_assert(exmy_accum_block_scaled(&cq[o], model));
    }
    gq[o].enabled = cq[o].enabled;
    gq[o].format = cq[o].format;
    gq[o].round = cq[o].round;
    gq[o].scaling = cq[o].scaling;
  }
  cqc.enabled = gqc.enabled = with_qc;
  ck_assert_int_eq(exmy_format_parse("bfloat16", &cqc.format), 0);
  gqc.format = cqc.format;

  const float alpha = 0.75f;
  ck_assert_int_eq(exmy_qgemm_accum(ta, tb, m, n, k, alpha, a, lda, &cq[0], b, ldb, &cq[1], beta,
                                    c, ldc, &cqc, model),
                   0);
  CU(exmy_cuda_qgemm_accum(ctx, ta, tb, m, n, k, alpha, da, lda, &gq[0], db, ldb, &gq[1], beta,
                           dc, ldc, &gqc, model, 0));
  to_host(gc, dc, csz * 4);
  size_t differ = 0;
  for (size_t i = 0; i < csz; i++)
    if (!same(c[i], gc[i])) {
      if (differ++ < 3)
        fprintf(stderr, "  C[%zu][%zu]: CPU %.9g (0x%08x), GPU %.9g (0x%08x)\n", i / ldc,
                i % ldc, c[i], *(uint32_t *)&c[i], gc[i], *(uint32_t *)&gc[i]);
    }
  free(a), free(b), free(c), free(gc);
  CU(cudaFree(da));
  CU(cudaFree(db));
  CU(cudaFree(dc));
  return differ;
}

START_TEST(accum_gemm_matches_cpu) {
  const shape shapes[] = {{67, 45, 131}, {5, 3, 1000}, {1, 1, 1}, {4, 6, 0}, {33, 17, 4096}};
  exmy_cuda_gemm *ctx = exmy_cuda_gemm_new();
  ck_assert_ptr_nonnull(ctx);
  int cases = 0, bad = 0;
  for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++)
    for (int t = 0; t < 4; t++)
      for (int mi = 0; mi < NMODELS; mi++)
        for (int d = 0; d < NDATA; d++) {
          /* the big shape: every model, the first transpose only */
          if (si == 4 && t) continue;
          const bool quant = (d + mi + t) % 3 == 0, with_qc = (d + t) % 4 == 1;
          const float beta = (mi + d) % 2 ? 0.5f : 0.0f;
          const size_t differ = one_case(ctx, shapes[si], t & 1, t & 2, (data_kind)d,
                                         &models[mi].model, quant, with_qc, beta,
                                         1000 + 97 * si + 13 * t + d, 0);
          cases++;
          if (differ) {
            bad++;
            printf("%zux%zux%zu ta=%d tb=%d %-12s %-9s quant=%d qc=%d beta=%g: %zu differ  FAIL\n",
                   shapes[si].m, shapes[si].n, shapes[si].k, t & 1, (t & 2) >> 1,
                   models[mi].name, data_name[d], quant, with_qc, beta, differ);
          }
        }
  printf("exmy_cuda_qgemm_accum: %d cases against exmy_qgemm_accum, %d differ\n", cases, bad);
  exmy_cuda_gemm_free(ctx);
  ck_assert_msg(bad == 0, "%d of %d cases differ from the CPU", bad, cases);
}
END_TEST

/* fp8-deepseek's block-scaled operands (exmy_accum_block_scaled: E4M3,
 * 1 x 128 and 128 x 128 blocks, scales 448 / amax not powers of two, and
 * with pow2) under hopper-split and split K: read as codes with their block
 * scales applied at each promotion on both devices, bit for bit. */
START_TEST(block_scaled_matches_cpu) {
  const shape shapes[] = {{67, 150, 300}, {5, 130, 1000}, {1, 1, 1}, {4, 6, 0}, {33, 260, 4096}};
  const int split[] = {2, 3}; /* hopper-split, hopper-kslice */
  exmy_cuda_gemm *ctx = exmy_cuda_gemm_new();
  ck_assert_ptr_nonnull(ctx);
  int cases = 0, bad = 0;
  for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++)
    for (int t = 0; t < 4; t++)
      for (int block = 1; block <= 2; block++)
        for (int ms = 0; ms < 2; ms++)
          for (int d = 0; d < NDATA; d++) {
            if (si == 4 && (t || block == 2 || ms)) continue;
            exmy_accum_model model = models[split[ms]].model;
            model.emin_a = model.emin_b = -126; /* as the trainers pass it: replaced */
            const bool with_qc = (d + t) % 4 == 1;
            const float beta = (ms + d) % 2 ? 0.5f : 0.0f;
            const size_t differ = one_case(ctx, shapes[si], t & 1, t & 2, (data_kind)d, &model,
                                           true, with_qc, beta, 5000 + 97 * si + 13 * t + d,
                                           block);
            cases++;
            if (differ) {
              bad++;
              printf("%zux%zux%zu ta=%d tb=%d %-13s %-9s %s scales qc=%d beta=%g: %zu differ  "
                     "FAIL\n",
                     shapes[si].m, shapes[si].n, shapes[si].k, t & 1, (t & 2) >> 1,
                     models[split[ms]].name, data_name[d], block == 2 ? "pow2" : "448/amax",
                     with_qc, beta, differ);
            }
          }
  printf("exmy_cuda_qgemm_accum, block-scaled operands: %d cases against exmy_qgemm_accum, %d "
         "differ\n", cases, bad);
  exmy_cuda_gemm_free(ctx);
  ck_assert_msg(bad == 0, "%d of %d cases differ from the CPU", bad, cases);
}
END_TEST

/* The arguments exmy_qgemm_accum refuses are refused, and C is untouched. */
START_TEST(bad_arguments_refused) {
  exmy_cuda_gemm *ctx = exmy_cuda_gemm_new();
  ck_assert_ptr_nonnull(ctx);
  const float host[4] = {7, 7, 7, 7};
  float *d = dev_from(host, sizeof host), back[4];
  const exmy_accum_model bad_promote = {32, 14, 14, EXMY_ACCUM_TRUNCATE, 100, 0, 0, 0, 0, 0};
  const exmy_accum_model bad_bits = {32, 0, 14, EXMY_ACCUM_TRUNCATE, 0, 0, 0, 0, 0, 0};
  /* a slice that is not a multiple of the group */
  const exmy_accum_model bad_slice = {32, 14, 14, EXMY_ACCUM_TRUNCATE, 0, 0, 0, 0, 0, 48};
  const exmy_accum_model good = {32, 14, 14, EXMY_ACCUM_TRUNCATE, 0, 0, 0, 0, 0, 0};
  /* each refused call: its model and leading dimensions of A and C */
  const struct { const exmy_accum_model *model; int lda, ldc; } refused[] = {
      {&bad_promote, 2, 2}, {&bad_bits, 2, 2}, {&bad_slice, 2, 2},
      {NULL, 2, 2},        /* no model */
      {&good, 2, 1},       /* ldc < n */
      {&good, 1, 2}};      /* lda < k */
  for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++)
    ck_assert_msg(exmy_cuda_qgemm_accum(ctx, false, false, 2, 2, 2, 1, d, refused[i].lda, NULL, d,
                                        2, NULL, 0, d, refused[i].ldc, NULL, refused[i].model,
                                        0) == cudaErrorInvalidValue,
                  "refused call %zu was accepted", i);
  to_host_free(back, d, sizeof back);
  ck_assert(!memcmp(back, host, sizeof host));
  exmy_cuda_gemm_free(ctx);
}
END_TEST

int main(void) {
  const TTest *const tests[] = {accum_gemm_matches_cpu, block_scaled_matches_cpu,
                                bad_arguments_refused, NULL};
  return run_suite(suite_of("cuda_qgemm_accum", 600, tests), false);
}
