/* GPU recipes against the CPU's (cpu/): MX codes and scales, MX decode,
 * per-tensor current scaling, block scaling (GROUP, NVFP4) and NVFP4's bf16
 * images, and the statistics.  Codes, values, scales and
 * counts must be bit-identical; the statistics' double sums may differ only by
 * the order of additions.  Needs a GPU (tag "gpu"). */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/exmy_cuda.h"
#include "cpu/exmy_cpu.h"
#include "lib/scale_core.h"
#include "tests/check_suite.h"
#include "tests/cuda/gpu_check.h"

/* Values spread over many binades, with zeros, specials and a few blocks that
 * are all zero or tiny, so that every branch of the scale rule runs. */
static float *test_tensor(size_t n, uint64_t seed) {
  float *x = malloc(n * sizeof *x);
  for (size_t i = 0; i < n; i++) {
    uint32_t r = splitmix32(&seed), e = splitmix32(&seed);
    float m = (float)(r >> 8) / 16777216.0f - 0.5f;
    x[i] = ldexpf(m, (int)(e % 40) - 20);
    if (e % 97 == 0) x[i] = 0.0f;
  }
  if (n > 200) {
    x[3] = INFINITY;
    x[50] = -NAN;
    x[71] = 1e-40f;
    for (size_t i = 96; i < 128; i++) x[i] = 0.0f;          /* an all-zero block */
    for (size_t i = 128; i < 160; i++) x[i] = ldexpf(1.0f, -140) * (float)(i - 127);
  }
  return x;
}

static uint32_t bits(float v) {
  uint32_t u;
  memcpy(&u, &v, 4);
  return u;
}

static size_t diff_bytes(const uint8_t *a, const uint8_t *b, size_t n, const char *what) {
  size_t bad = 0;
  for (size_t i = 0; i < n; i++)
    if (a[i] != b[i] && bad++ < 3) printf("  %s[%zu]: gpu 0x%02x cpu 0x%02x\n", what, i, a[i], b[i]);
  return bad;
}

static size_t diff_floats(const float *a, const float *b, size_t n, const char *what) {
  size_t bad = 0;
  for (size_t i = 0; i < n; i++)
    if (bits(a[i]) != bits(b[i]) && bad++ < 3)
      printf("  %s[%zu]: gpu 0x%08x cpu 0x%08x\n", what, i, bits(a[i]), bits(b[i]));
  return bad;
}

START_TEST(mx_matches_cpu) {
  const char *names[] = {"float8_e4m3fn", "float8_e5m2", "float6_e2m3fn",
                         "float6_e3m2fn", "float4_e2m1fn", "float8_e4m3fnuz"};
  /* shapes: the one-pass path (cols % block == 0) and the general one */
  const size_t shapes[][3] = {{37, 256, 32}, {5, 100, 32}, {9, 64, 16}, {3, 512, 256}, {4, 96, 24}};
  size_t bad = 0;
  for (int k = 0; k < 6; k++)
    for (int s = 0; s < 5; s++)
      for (int mode = EXMY_RNE; mode <= EXMY_SR; mode += 2) {
        exmy_format f;
        ck_assert_int_eq(exmy_format_parse(names[k], &f), 0);
        const size_t rows = shapes[s][0], cols = shapes[s][1];
        const int block = (int)shapes[s][2];
        const size_t n = rows * cols, nb = rows * ((cols + block - 1) / block);
        exmy_rounding_opts o = {0};
        o.mode = (exmy_rounding)mode;
        o.seed = 99;
        o.offset = 13;
        float *x = test_tensor(n, 7 + s);
        uint8_t *codes = malloc(n), *scales = malloc(nb), *gcodes = malloc(n), *gscales = malloc(nb);
        ck_assert_int_eq(exmy_mx_encode_f32(&f, &o, block, x, rows, cols, codes, scales), 0);
        float *dx = dev_from(x, n * 4);
        uint8_t *dc = dev_alloc(n), *ds = dev_alloc(nb);
        CU(exmy_cuda_mx_encode_f32(&f, &o, block, dx, rows, cols, dc, ds, 0));
        to_host(gcodes, dc, n);
        to_host(gscales, ds, nb);
        size_t b = diff_bytes(gcodes, codes, n, "mx code") + diff_bytes(gscales, scales, nb, "mx scale");
        /* decode the CPU's codes on both sides */
        float *y = malloc(n * 4), *gy = malloc(n * 4), *dy = dev_alloc(n * 4);
        exmy_mx_decode_f32(&f, block, codes, scales, rows, cols, y);
        CU(cudaMemcpy(dc, codes, n, cudaMemcpyHostToDevice));
        CU(cudaMemcpy(ds, scales, nb, cudaMemcpyHostToDevice));
        CU(exmy_cuda_mx_decode_f32(&f, block, dc, ds, rows, cols, dy, 0));
        to_host(gy, dy, n * 4);
        b += diff_floats(gy, y, n, "mx decode");
        if (b) printf("  ^ %s %zux%zu block %d %s\n", f.name, rows, cols, block, exmy_rounding_name(o.mode));
        bad += b;
        free(x); free(codes); free(scales); free(gcodes); free(gscales); free(y); free(gy);
        CU(cudaFree(dx)); CU(cudaFree(dc)); CU(cudaFree(ds)); CU(cudaFree(dy));
      }
  ck_assert_msg(bad == 0, "%zu MX differences", bad);
}
END_TEST

START_TEST(tensor_scaling_matches_cpu) {
  const char *names[] = {"float8_e4m3fn", "float8_e5m2", "float4_e2m1fn", "e8m3", "bfloat16"};
  size_t bad = 0;
  const size_t n = 300007;
  float *x = test_tensor(n, 3);
  float *dx = dev_from(x, n * 4), *dy = dev_alloc(n * 4), *ds = dev_alloc(4);
  float *y = malloc(n * 4), *gy = malloc(n * 4);
  for (int k = 0; k < 5; k++)
    for (int margin = 0; margin <= 3; margin += 3)
      for (int pow2 = 0; pow2 < 2; pow2++)
        for (int mode = EXMY_RNE; mode <= EXMY_SR; mode += 3) {
          exmy_format f;
          ck_assert_int_eq(exmy_format_parse(names[k], &f), 0);
          exmy_rounding_opts o = {0};
          o.mode = (exmy_rounding)mode;
          o.seed = 5;
          exmy_scaling sc = {0};
          sc.kind = EXMY_SCALING_TENSOR;
          sc.margin = margin;
          sc.pow2 = pow2;
          exmy_tensor_stats st;
          ck_assert_int_eq(exmy_quantize_scaled_f32(&f, &o, &sc, NULL, x, y, 1, n, &st), 0);
          CU(exmy_cuda_quantize_tensor_scaled_f32(&f, &o, margin, pow2, dx, dy, n, ds, 0));
          to_host(gy, dy, n * 4);
          float gs;
          to_host(&gs, ds, 4);
          size_t b = diff_floats(gy, y, n, "tensor-scaled y");
          if ((float)st.scale != gs) {
            printf("  scale gpu %a cpu %a\n", gs, st.scale);
            b++;
          }
          if (b) printf("  ^ %s margin %d pow2 %d %s\n", f.name, margin, pow2, exmy_rounding_name(o.mode));
          bad += b;
        }
  free(x); free(y); free(gy);
  CU(cudaFree(dx)); CU(cudaFree(dy)); CU(cudaFree(ds));
  ck_assert_msg(bad == 0, "%zu tensor-scaling differences", bad);
}
END_TEST

/* DELAYED: a sequence of tensors whose range moves; after every call the
 * values and the next scale must equal the CPU's. */
START_TEST(delayed_scaling_matches_cpu) {
  const char *names[] = {"float8_e4m3fn", "float8_e5m2"};
  size_t bad = 0;
  const size_t n = 100003;
  for (int k = 0; k < 2; k++)
    for (int recent = 0; recent < 2; recent++) {
      exmy_format f;
      ck_assert_int_eq(exmy_format_parse(names[k], &f), 0);
      exmy_rounding_opts o = {0};
      exmy_scaling sc = {0};
      sc.kind = EXMY_SCALING_DELAYED;
      sc.margin = 1;
      sc.history_most_recent = recent;
      exmy_delayed_state *cs = exmy_delayed_state_new(4);
      exmy_cuda_delayed_state *gs = exmy_cuda_delayed_state_new(4);
      ck_assert_ptr_nonnull(gs);
      float *y = malloc(n * 4), *gy = malloc(n * 4);
      float *dx = dev_alloc(n * 4), *dy = dev_alloc(n * 4);
      for (int step = 0; step < 7; step++) {
        float *x = test_tensor(n, 100 + step);
        const float grow = ldexpf(1.0f, (step * 5) % 11 - 5);
        for (size_t i = 0; i < n; i++) x[i] *= grow;
        if (step == 3) memset(x, 0, n * 4); /* amax 0: the old scale stays */
        CU(cudaMemcpy(dx, x, n * 4, cudaMemcpyHostToDevice));
        ck_assert_int_eq(exmy_quantize_scaled_f32(&f, &o, &sc, cs, x, y, 1, n, NULL), 0);
        CU(exmy_cuda_quantize_delayed_scaled_f32(&f, &o, sc.margin, sc.pow2, recent, gs, dx, dy, n, 0));
        to_host(gy, dy, n * 4);
        float gsc[2];
        to_host(gsc, exmy_cuda_delayed_scale(gs), sizeof gsc);
        size_t b = diff_floats(gy, y, n, "delayed y");
        if (gsc[0] != cs->scale || gsc[1] != cs->scale_inv) {
          printf("  next scale gpu %a cpu %a\n", gsc[0], cs->scale);
          b++;
        }
        if (b) printf("  ^ %s step %d most_recent %d\n", f.name, step, recent);
        bad += b;
        free(x);
      }
      /* the device's history, position included, is the CPU's slot for slot */
      exmy_delayed_state *back = exmy_delayed_state_new(4);
      CU(exmy_cuda_delayed_state_download(gs, back));
      if (back->count != cs->count || back->latest != cs->latest ||
          memcmp(back->amax_history, cs->amax_history, 4 * sizeof(float))) {
        printf("  %s most_recent %d: history count %d latest %d, cpu %d %d\n", f.name, recent,
               back->count, back->latest, cs->count, cs->latest);
        bad++;
      }
      exmy_delayed_state_free(back);
      exmy_delayed_state_free(cs);
      exmy_cuda_delayed_state_free(gs);
      free(y); free(gy);
      CU(cudaFree(dx)); CU(cudaFree(dy));
    }
  ck_assert_msg(bad == 0, "%zu delayed-scaling differences", bad);
}
END_TEST

/* GROUP: bit-identical without COAT's expansion; with it, pow and log come
 * from different libms, so a few values may differ (counted, at most 0.1%). */
START_TEST(group_scaling_matches_cpu) {
  const char *names[] = {"float8_e4m3fn", "float8_e5m2", "float4_e2m1fn", "e8m3"};
  const size_t shapes[][3] = {{64, 512, 128}, {7, 300, 128}, {5, 200, 0}, {3, 1000, 100}};
  size_t bad = 0, dre_diff = 0, dre_total = 0;
  for (int k = 0; k < 4; k++)
    for (int s = 0; s < 4; s++)
      for (int dre = 0; dre < 2; dre++)
        for (int mode = EXMY_RNE; mode <= EXMY_SR; mode += 6) {
          exmy_format f;
          ck_assert_int_eq(exmy_format_parse(names[k], &f), 0);
          const size_t rows = shapes[s][0], cols = shapes[s][1], n = rows * cols;
          exmy_rounding_opts o = {0};
          o.mode = (exmy_rounding)mode;
          o.seed = 8;
          o.offset = 3;
          exmy_scaling sc = {0};
          sc.kind = EXMY_SCALING_GROUP;
          sc.group = (int)shapes[s][2];
          sc.margin = s & 1;
          sc.pow2 = (s >> 1) & 1;
          sc.dynamic_range_expansion = dre;
          float *x = test_tensor(n, 21 + s), *y = malloc(n * 4), *gy = malloc(n * 4);
          ck_assert_int_eq(exmy_quantize_scaled_f32(&f, &o, &sc, NULL, x, y, rows, cols, NULL), 0);
          float *dx = dev_from(x, n * 4), *dy = dev_alloc(n * 4);
          CU(exmy_cuda_quantize_group_scaled_f32(&f, &o, sc.group, sc.margin, sc.pow2, dre, dx, dy,
                                                 rows, cols, 0));
          to_host(gy, dy, n * 4);
          if (dre) {
            for (size_t i = 0; i < n; i++) dre_diff += bits(gy[i]) != bits(y[i]);
            dre_total += n;
          } else {
            size_t b = diff_floats(gy, y, n, "group-scaled y");
            if (b) printf("  ^ %s %zux%zu group %d %s\n", f.name, rows, cols, sc.group,
                          exmy_rounding_name(o.mode));
            bad += b;
          }
          free(x); free(y); free(gy);
          CU(cudaFree(dx)); CU(cudaFree(dy));
        }
  printf("group scaling: %zu differences without DRE; with DRE %zu of %zu values differ\n", bad,
         dre_diff, dre_total);
  ck_assert_msg(bad == 0, "%zu group-scaling differences", bad);
  ck_assert_msg(dre_diff * 1000 <= dre_total, "DRE: %zu of %zu differ", dre_diff, dre_total);
}
END_TEST

static int close_rel(double a, double b) {
  if (a == b || (isnan(a) && isnan(b))) return 1;
  return fabs(a - b) <= 1e-9 * fmax(fabs(a), fabs(b));
}

static int same_or_nan(double a, double b) { return a == b || (isnan(a) && isnan(b)); }

/* How many of the device's statistics g differ from the CPU's c: counts,
 * amax and min_nonzero exactly, the sums' results to 1e-9, scale exactly. */
static int stats_differ(const exmy_tensor_stats *g, const exmy_tensor_stats *c) {
  int b = g->n != c->n;
  b += g->amax != c->amax || g->min_nonzero != c->min_nonzero;
  b += g->underflow_ratio != c->underflow_ratio || g->subnormal_ratio != c->subnormal_ratio ||
       g->overflow_ratio != c->overflow_ratio;
  b += !close_rel(g->mse, c->mse) + !close_rel(g->rel_l2, c->rel_l2) +
       !close_rel(g->cosine, c->cosine) + !close_rel(g->sqnr_db, c->sqnr_db);
  b += !same_or_nan(g->scale, c->scale) ||
       !(isnan(g->delayed_over_current) && isnan(c->delayed_over_current));
  return b;
}

START_TEST(stats_match_cpu) {
  const char *names[] = {"float8_e4m3fn", "float4_e2m1fn", "bfloat16"};
  const size_t n = 1000003;
  float *x = test_tensor(n, 11), *y = malloc(n * 4);
  float *dx = dev_from(x, n * 4), *dy = dev_alloc(n * 4);
  exmy_tensor_stats *dst = dev_alloc(sizeof(exmy_tensor_stats));
  int bad = 0;
  for (int k = 0; k < 3; k++) {
    exmy_format f;
    ck_assert_int_eq(exmy_format_parse(names[k], &f), 0);
    exmy_rounding_opts o = {0};
    exmy_quantize_f32(&f, &o, x, y, n);
    CU(cudaMemcpy(dy, y, n * 4, cudaMemcpyHostToDevice));
    exmy_tensor_stats c, g;
    exmy_tensor_stats_f32(&f, x, y, n, &c);
    CU(exmy_cuda_tensor_stats_f32(&f, dx, dy, n, dst, 0));
    to_host(&g, dst, sizeof g);
    const int b = stats_differ(&g, &c);
    printf("stats %-14s gpu: amax %g under %g sub %g over %g mse %.17g sqnr %.17g | cpu: mse %.17g sqnr %.17g\n",
           f.name, g.amax, g.underflow_ratio, g.subnormal_ratio, g.overflow_ratio, g.mse, g.sqnr_db,
           c.mse, c.sqnr_db);
    bad += b;
  }
  free(x); free(y);
  CU(cudaFree(dx)); CU(cudaFree(dy)); CU(cudaFree(dst));
  ck_assert_msg(bad == 0, "%d statistics differ", bad);
}
END_TEST

/* X' (rows x cols) of a stored x (leading dimension ld, trans: X' = x^T),
 * dense: what the GEMM's gather gives the MX encoder. */
static void logical(const float *x, size_t ld, int trans, size_t rows, size_t cols, float *out) {
  for (size_t r = 0; r < rows; r++)
    for (size_t c = 0; c < cols; c++) out[r * cols + c] = trans ? x[c * ld + r] : x[r * ld + c];
}

/* The MX values of X' on the CPU (cpu/mx.c), blocks of 32 along cols. */
static void cpu_mx_values(const exmy_format *f, const exmy_rounding_opts *o, const float *xl,
                          size_t rows, size_t cols, float *y) {
  const size_t n = rows * cols, nb = rows * ((cols + 31) / 32);
  uint8_t *codes = malloc(n), *scales = malloc(nb);
  ck_assert_int_eq(exmy_mx_encode_f32(f, o, 32, xl, rows, cols, codes, scales), 0);
  exmy_mx_decode_f32(f, 32, codes, scales, rows, cols, y);
  free(codes);
  free(scales);
}

/* bf16 bits of a float32 value, round to nearest even (the value itself when
 * its low 16 bits are zero); NaN: its top bits, quiet. */
static uint16_t bf16_rne(float v) {
  const uint32_t u = bits(v);
  if (v != v) return (uint16_t)((u >> 16) | 0x40u);
  return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

/* How many of the image's rows x cols bf16 values differ from the CPU's MX
 * values y (its value where a bf16 value, its bf16 rounding where not), plus
 * 1 if the flag is not `tag` exactly when some value is not a bf16 value
 * (`before`, its value before the call, where none is); the first few
 * printed.  *inexact: how many are not. */
static size_t image_differences(const exmy_format *f, const exmy_rounding_opts *o, const float *y,
                                const uint16_t *img, size_t rows, size_t cols, int trans,
                                unsigned flag, unsigned before, unsigned tag, size_t *inexact) {
  size_t b = 0;
  *inexact = 0;
  for (size_t i = 0; i < rows * cols; i++) {
    const bool exact = y[i] != y[i] || (bits(y[i]) & 0xFFFFu) == 0;
    *inexact += !exact;
    if (img[i] != bf16_rne(y[i]) && b++ < 3)
      printf("  %s [%zu] of %zux%zu%s %s differs: bf16 0x%04x, cpu value 0x%08x (%s)\n", f->name,
             i, rows, cols, trans ? " (transposed)" : "", exmy_rounding_name(o->mode), img[i],
             bits(y[i]), exact ? "a bf16 value" : "not a bf16 value");
  }
  if (flag != (*inexact ? tag : before) && b++ < 3)
    printf("  %s %zux%zu: flag %u differs, %zu values outside bf16 (want %u)\n", f->name, rows,
           cols, flag, *inexact, *inexact ? tag : before);
  return b;
}

/* exmy_cuda_mx_quantize_bf16 against the CPU's MX encode and decode of the
 * gathered operand: every element's bf16 bits are the CPU's value where that
 * value is a bf16 value, and its bf16 rounding where not, which must be
 * flagged (with the tag) exactly when some value is not. */
START_TEST(mx_bf16_image_matches_cpu) {
  const char *names[] = {"float8_e4m3fn", "float8_e5m2", "float6_e2m3fn", "float6_e3m2fn",
                         "float4_e2m1fn"};
  /* rows, cols, ld, trans: the row kernel (cols % 32 == 0, ld % 4 == 0;
   * transposed also rows % 4 == 0) untransposed, with a tail of rows and ld >
   * cols, transposed over tiles of 64 rows and a tail; the tile kernel
   * for a tail block, ld % 4 != 0 and rows % 4 != 0 */
  const size_t shapes[][4] = {{37, 256, 256, 0}, {130, 64, 68, 0}, {260, 96, 264, 1},
                              {132, 64, 136, 1}, {5, 100, 103, 0}, {64, 96, 70, 1},
                              {33, 40, 36, 1}};
  const int n_shapes = (int)(sizeof shapes / sizeof shapes[0]);
  size_t bad = 0, inexact_total = 0;
  for (int k = 0; k < 5; k++)
    for (int s = 0; s < n_shapes; s++)
      for (int mode = EXMY_RNE; mode <= EXMY_SR; mode++) {
        exmy_format f;
        ck_assert_int_eq(exmy_format_parse(names[k], &f), 0);
        const size_t rows = shapes[s][0], cols = shapes[s][1], ld = shapes[s][2];
        const int trans = (int)shapes[s][3];
        const size_t stored = (trans ? cols : rows) * ld, n = rows * cols;
        exmy_rounding_opts o = {0};
        o.mode = (exmy_rounding)mode;
        o.seed = 99;
        o.offset = 1000 + 17 * s;
        float *x = test_tensor(stored, 11 + s + 5 * k), *xl = malloc(n * 4), *y = malloc(n * 4);
        logical(x, ld, trans, rows, cols, xl);
        cpu_mx_values(&f, &o, xl, rows, cols, y);
        float *dx = dev_from(x, stored * 4);
        uint16_t *dimg = dev_alloc(n * 2), *img = malloc(n * 2);
        unsigned *dflag = dev_alloc(sizeof(unsigned)), flag = 5;
        CU(cudaMemcpy(dflag, &flag, sizeof flag, cudaMemcpyHostToDevice));
        CU(exmy_cuda_mx_quantize_bf16(&f, &o, 32, dx, ld, trans, rows, cols, dimg, dflag, 9, 0));
        to_host(img, dimg, n * 2);
        to_host(&flag, dflag, sizeof flag);
        size_t inexact = 0;
        bad += image_differences(&f, &o, y, img, rows, cols, trans, flag, 5, 9, &inexact);
        inexact_total += inexact;
        free(x); free(xl); free(y); free(img);
        CU(cudaFree(dx)); CU(cudaFree(dimg)); CU(cudaFree(dflag));
      }
  printf("MX bf16 images: %zu values outside bf16's grid (flagged) in the tiny blocks\n",
         inexact_total);
  ck_assert_msg(inexact_total > 0, "the test tensors must reach the fallback case");
  ck_assert_msg(bad == 0, "%zu MX bf16 image differences", bad);
}
END_TEST

/* exmy_cuda_mx_quantize_bf16_pair: X's image and X^T's from one call, each
 * against the CPU's MX values of X and of X^T as above (values and flags), on
 * shapes of the one-pass kernel (rows and cols multiples of 64, ld > cols)
 * and shapes it leaves to the two single calls, in each mode; the tensors
 * hold infinities, NaN and blocks whose values fall below bf16's grid. */
START_TEST(mx_bf16_image_pair_matches_cpu) {
  const char *names[] = {"float8_e4m3fn", "float8_e5m2", "float4_e2m1fn"};
  const size_t shapes[][3] = {{128, 192, 196}, {64, 64, 64}, {320, 128, 132}, {96, 96, 100},
                              {37, 64, 64}};
  const int n_shapes = (int)(sizeof shapes / sizeof shapes[0]);
  size_t bad = 0, inexact_total = 0;
  for (int k = 0; k < 3; k++)
    for (int s = 0; s < n_shapes; s++)
      for (int mode = EXMY_RNE; mode <= EXMY_SR; mode++) {
        exmy_format f;
        ck_assert_int_eq(exmy_format_parse(names[k], &f), 0);
        const size_t rows = shapes[s][0], cols = shapes[s][1], ld = shapes[s][2], n = rows * cols;
        exmy_rounding_opts o = {0};
        o.mode = (exmy_rounding)mode;
        o.seed = 77;
        o.offset = 300 + 13 * s;
        float *x = test_tensor(rows * ld, 61 + s + 7 * k), *xl = malloc(n * 4),
              *y = malloc(n * 4), *yt = malloc(n * 4);
        /* column 7's first block of 32 rows tiny, as test_tensor's row block:
         * X^T's image holds values below bf16's grid there too */
        for (size_t r = 0; r < 32; r++) x[r * ld + 7] = ldexpf(1.0f, -140) * (float)(r + 1);
        logical(x, ld, 0, rows, cols, xl);
        cpu_mx_values(&f, &o, xl, rows, cols, y);
        logical(x, ld, 1, cols, rows, xl);
        cpu_mx_values(&f, &o, xl, cols, rows, yt);
        float *dx = dev_from(x, rows * ld * 4);
        uint16_t *dimg = dev_alloc(n * 2), *dimgt = dev_alloc(n * 2), *img = malloc(n * 2),
                 *imgt = malloc(n * 2);
        unsigned *dflag = dev_alloc(2 * sizeof(unsigned)), flag[2] = {5, 6};
        CU(cudaMemcpy(dflag, flag, sizeof flag, cudaMemcpyHostToDevice));
        CU(exmy_cuda_mx_quantize_bf16_pair(&f, &o, 32, dx, ld, rows, cols, dimg, dflag, 9, dimgt,
                                           dflag + 1, 10, 0));
        to_host(img, dimg, n * 2);
        to_host(imgt, dimgt, n * 2);
        to_host(flag, dflag, sizeof flag);
        size_t inexact = 0, inexact_t = 0;
        bad += image_differences(&f, &o, y, img, rows, cols, 0, flag[0], 5, 9, &inexact);
        bad += image_differences(&f, &o, yt, imgt, cols, rows, 1, flag[1], 6, 10, &inexact_t);
        inexact_total += inexact + inexact_t;
        free(x); free(xl); free(y); free(yt); free(img); free(imgt);
        CU(cudaFree(dx)); CU(cudaFree(dimg)); CU(cudaFree(dimgt)); CU(cudaFree(dflag));
      }
  printf("MX bf16 image pairs: %zu values outside bf16's grid (flagged)\n", inexact_total);
  ck_assert_msg(inexact_total > 0, "the test tensors must reach the fallback case");
  ck_assert_msg(bad == 0, "%zu MX bf16 image pair differences", bad);
}
END_TEST

/* exmy_cuda_mx_gemm_f32_if: with the flag at its tag or a carry word set,
 * r = alpha op(A) op(B) + beta C from the CPU's MX values of op(A) and
 * op(B)^T, fmaf in k order, bit for bit, and the flag at the tag; with
 * another flag and zero carry words, r untouched. */
START_TEST(mx_gemm_fallback_matches_cpu) {
  exmy_format fa, fb;
  ck_assert_int_eq(exmy_format_parse("float8_e4m3fn", &fa), 0);
  ck_assert_int_eq(exmy_format_parse("float8_e5m2", &fb), 0);
  /* m, n, k, trans_a, trans_b */
  const int shapes[][5] = {{40, 72, 96, 0, 1}, {37, 33, 70, 0, 0}, {72, 40, 96, 1, 0}};
  size_t bad = 0;
  for (int s = 0; s < 3; s++)
    for (int mode = EXMY_RNE; mode <= EXMY_SR; mode += 2) {
      const size_t m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
      const int ta = shapes[s][3], tb = shapes[s][4];
      const size_t lda = (ta ? m : k) + 3, ldb = (tb ? k : n) + 1, ldc = n + 2;
      const size_t sa = (ta ? k : m) * lda, sb = (tb ? n : k) * ldb;
      exmy_rounding_opts oa = {0}, ob = {0};
      oa.mode = ob.mode = (exmy_rounding)mode;
      oa.seed = ob.seed = 5;
      oa.offset = 100;
      ob.offset = 100 + m * k;
      float *a = test_tensor(sa, 21 + s), *b = test_tensor(sb, 31 + s), *c = test_tensor(m * ldc, 41);
      for (size_t i = 0; i < sa; i++) if (!isfinite(a[i])) a[i] = 1.0f; /* finite sums */
      for (size_t i = 0; i < sb; i++) if (!isfinite(b[i])) b[i] = 1.0f;
      for (size_t i = 0; i < m * ldc; i++) if (!isfinite(c[i])) c[i] = 0.5f;
      float *al = malloc(m * k * 4), *bl = malloc(n * k * 4), *qa = malloc(m * k * 4),
            *qb = malloc(n * k * 4), *want = malloc(m * n * 4), *got = malloc(m * n * 4);
      logical(a, lda, ta, m, k, al);
      logical(b, ldb, !tb, n, k, bl);
      cpu_mx_values(&fa, &oa, al, m, k, qa);
      cpu_mx_values(&fb, &ob, bl, n, k, qb);
      const float alpha = 0.75f, beta = s == 1 ? 0.0f : 1.0f;
      for (size_t i = 0; i < m; i++)
        for (size_t j = 0; j < n; j++) {
          float acc = 0.0f;
          for (size_t t = 0; t < k; t++) acc = fmaf(qa[i * k + t], qb[j * k + t], acc);
          volatile float p = alpha * acc, q = beta * c[i * ldc + j]; /* no contraction */
          want[i * n + j] = beta == 0.0f ? p : p + q;
        }
      float *da = dev_from(a, sa * 4), *db = dev_from(b, sb * 4), *dc = dev_from(c, m * ldc * 4),
            *dr = dev_alloc(m * n * 4);
      unsigned *dflag = dev_alloc(sizeof(unsigned)), flag = 3, one = 1;
      unsigned *dzero = dev_alloc(sizeof(unsigned)), *dset = dev_alloc(sizeof(unsigned));
      CU(cudaMemset(dzero, 0, sizeof(unsigned)));
      CU(cudaMemcpy(dset, &one, sizeof one, cudaMemcpyHostToDevice));
      unsigned long long *dcount = dev_alloc(8), count = 0;
      CU(cudaMemcpy(dflag, &flag, sizeof flag, cudaMemcpyHostToDevice));
      CU(cudaMemcpy(dcount, &count, 8, cudaMemcpyHostToDevice));
      CU(cudaMemset(dr, 0xFF, m * n * 4));
      /* another tag, carry words zero: nothing happens */
      CU(exmy_cuda_mx_gemm_f32_if(dflag, 4, dzero, dzero, ta, tb, m, n, k, alpha, da, lda, &fa,
                                  &oa, db, ldb, &fb, &ob, beta, dc, ldc, dr, n, dcount, 0));
      to_host(got, dr, m * n * 4);
      to_host(&count, dcount, 8);
      size_t b0 = 0;
      for (size_t i = 0; i < m * n; i++) b0 += bits(got[i]) != 0xFFFFFFFFu;
      if (b0 || count)
        printf("  fallback ran with another tag: %zu values differ, count %llu\n", b0, count);
      bad += b0 + count;
      /* the flag at its tag (s 0), or another tag and a carry word set (s 1:
       * A's, s 2: B's), r dense or strided */
      const size_t ldr = s == 0 ? n : n + 5;
      float *dr2 = dev_alloc(m * ldr * 4), *got2 = malloc(m * ldr * 4);
      CU(exmy_cuda_mx_gemm_f32_if(dflag, s == 0 ? 3 : 6, s == 1 ? dset : NULL,
                                  s == 2 ? dset : NULL, ta, tb, m, n, k, alpha, da, lda, &fa, &oa,
                                  db, ldb, &fb, &ob, beta, dc, ldc, dr2, ldr, dcount, 0));
      to_host(got2, dr2, m * ldr * 4);
      for (size_t i = 0; i < m; i++) memcpy(got + i * n, got2 + i * ldr, n * 4);
      to_host(&count, dcount, 8);
      to_host(&flag, dflag, sizeof flag);
      size_t b1 = diff_floats(got, want, m * n, "mx fallback gemm");
      if (count != 1) printf("  fallback count %llu differs from 1\n", count), b1++;
      if (flag != (s == 0 ? 3u : 6u)) printf("  flag %u not set to the tag\n", flag), b1++;
      free(got2);
      CU(cudaFree(dr2));
      if (b1) printf("  ^ %zux%zux%zu ta %d tb %d %s\n", m, n, k, ta, tb, exmy_rounding_name(oa.mode));
      bad += b1;
      free(a); free(b); free(c); free(al); free(bl); free(qa); free(qb); free(want); free(got);
      CU(cudaFree(da)); CU(cudaFree(db)); CU(cudaFree(dc)); CU(cudaFree(dr));
      CU(cudaFree(dflag)); CU(cudaFree(dcount)); CU(cudaFree(dzero)); CU(cudaFree(dset));
    }
  ck_assert_msg(bad == 0, "%zu MX fallback GEMM differences", bad);
}
END_TEST

/* NVFP4 (1-D and 16 x 16 blocks, with and without the Hadamard transform,
 * rne and sr) and DeepSeek-V3's GROUP blocks (1 x 128 and 128 x 128, E4M3):
 * exmy_cuda_quantize_blocks_f32 against exmy_quantize_scaled_f32, bit for
 * bit, on shapes whose blocks fit and shapes with partial blocks; and
 * exmy_cuda_quantize_blocks_stats_f32's values (the same bits) and
 * statistics against the CPU's (stats_differ). */
START_TEST(blocks_match_cpu) {
  const size_t shapes[][2] = {{64, 256}, {37, 100}, {300, 260}};
  struct {
    const char *format;
    exmy_scaling_kind kind;
    int group, block_rows, hadamard, mode;
  } cases[] = {
      {"e2m1", EXMY_SCALING_NVFP4, 16, 0, 0, EXMY_RNE},
      {"e2m1", EXMY_SCALING_NVFP4, 16, 16, 0, EXMY_RNE},
      {"e2m1", EXMY_SCALING_NVFP4, 16, 0, 0, EXMY_SR},
      {"e2m1", EXMY_SCALING_NVFP4, 16, 0, 16, EXMY_SR},
      {"e2m1", EXMY_SCALING_NVFP4, 16, 0, 16, EXMY_RNE},
      {"e4m3", EXMY_SCALING_GROUP, 128, 128, 0, EXMY_RNE},
      {"e4m3", EXMY_SCALING_GROUP, 128, 16, 0, EXMY_SR},
      {"e4m3", EXMY_SCALING_GROUP, 128, 0, 0, EXMY_RNE},
  };
  size_t bad = 0;
  int stats_bad = 0;
  exmy_tensor_stats *dst = dev_alloc(sizeof(exmy_tensor_stats));
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
    for (int s = 0; s < 3; s++) {
      const size_t rows = shapes[s][0], cols = shapes[s][1], n = rows * cols;
      exmy_format f;
      ck_assert_int_eq(exmy_format_parse(cases[c].format, &f), 0);
      exmy_rounding_opts o = {0};
      o.mode = (exmy_rounding)cases[c].mode;
      o.seed = 41;
      o.offset = 1000003;
      exmy_scaling sc = {0};
      sc.kind = cases[c].kind;
      sc.group = cases[c].group;
      sc.block_rows = cases[c].block_rows;
      sc.hadamard = cases[c].hadamard;
      sc.hadamard_seed = 7;
      float *x = test_tensor(n, 11 + s), *y = malloc(n * 4), *gy = malloc(n * 4);
      exmy_tensor_stats cs, gs;
      ck_assert_int_eq(exmy_quantize_scaled_f32(&f, &o, &sc, NULL, x, y, rows, cols, &cs), 0);
      float *dx = dev_from(x, n * 4), *dy = dev_alloc(n * 4);
      CU(exmy_cuda_quantize_blocks_stats_f32(&f, &o, &sc, dx, dy, rows, cols, dst, 0));
      to_host(gy, dy, n * 4);
      to_host(&gs, dst, sizeof gs);
      size_t b = diff_floats(gy, y, n, "blocks y (with statistics)");
      const int sb = stats_differ(&gs, &cs);
      if (sb || (c == 0 && s == 0))
        printf("blocks stats case %zu: gpu n %llu amax %g under %g sub %g over %g mse %.17g | "
               "cpu n %llu amax %g under %g sub %g over %g mse %.17g\n", c,
               (unsigned long long)gs.n, gs.amax, gs.underflow_ratio, gs.subnormal_ratio,
               gs.overflow_ratio, gs.mse, (unsigned long long)cs.n, cs.amax, cs.underflow_ratio,
               cs.subnormal_ratio, cs.overflow_ratio, cs.mse);
      stats_bad += sb;
      CU(exmy_cuda_quantize_blocks_f32(&f, &o, &sc, dx, dy, rows, cols, 0));
      to_host(gy, dy, n * 4);
      b += diff_floats(gy, y, n, "blocks y");
      /* and in place, as exmy_cuda_qgemm calls it */
      CU(exmy_cuda_quantize_blocks_f32(&f, &o, &sc, dx, dx, rows, cols, 0));
      to_host(gy, dx, n * 4);
      b += diff_floats(gy, y, n, "blocks y in place");
      if (b)
        printf("  ^ case %zu (%s, block %d x %d, rht %d, %s), %zu x %zu\n", c, f.name,
               cases[c].block_rows, cases[c].group, cases[c].hadamard,
               exmy_rounding_name(o.mode), rows, cols);
      bad += b;
      free(x); free(y); free(gy);
      CU(cudaFree(dx)); CU(cudaFree(dy));
    }
  CU(cudaFree(dst));
  ck_assert_msg(bad == 0, "%zu block-scaling differences", bad);
  ck_assert_msg(stats_bad == 0, "%d block-scaling statistics differ from the CPU's", stats_bad);
}
END_TEST

/* exmy_cuda_nvfp4_quantize_bf16 (NVFP4's bf16 images of q · s_b) against the
 * reference's dequantized values of the gathered operand, those of
 * exmy_cuda_quantize_blocks_f32 (exmy_cuda_qgemm's kernel) and of the CPU's
 * exmy_quantize_scaled_f32: S_enc is exmy_core_nvfp4_tensor_scale of the
 * (transformed) tensor's finite amax, each block's s_b is
 * exmy_core_nvfp4_block_scale of its finite amax, and every element's image
 * v is q · s_b for an E2M1 value q with q · exmy_core_nvfp4_decode_factor(s_b,
 * S_enc) equal, bit for bit, to both references' value.  1-D and 16 x 16
 * blocks, rne and sr, with and without the Hadamard transform; dense,
 * strided and transposed operands with partial blocks. */
START_TEST(nvfp4_bf16_image_matches_reference) {
  /* rows, cols, ld, trans */
  const size_t shapes[][4] = {{64, 256, 256, 0}, {37, 100, 103, 0}, {48, 96, 70, 1},
                              {33, 40, 33, 1}};
  const struct { int block_rows, hadamard, mode; } cases[] = {
      {0, 0, EXMY_RNE}, {16, 0, EXMY_RNE}, {0, 0, EXMY_SR}, {0, 16, EXMY_SR}, {0, 16, EXMY_RNE},
      {16, 0, EXMY_SR}};
  exmy_format f;
  ck_assert_int_eq(exmy_format_parse("e2m1", &f), 0);
  ck_assert(exmy_cuda_nvfp4_bf16_exact(&f));
  size_t bad = 0, checked = 0, zero_blocks = 0;
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
    for (int s = 0; s < 4; s++) {
      const size_t rows = shapes[s][0], cols = shapes[s][1], ld = shapes[s][2];
      const int trans = (int)shapes[s][3];
      const size_t stored = (trans ? cols : rows) * ld, n = rows * cols;
      exmy_rounding_opts o = {0};
      o.mode = (exmy_rounding)cases[c].mode;
      o.seed = 41;
      o.offset = 1000003 + 101 * s;
      exmy_scaling sc = {0};
      sc.kind = EXMY_SCALING_NVFP4;
      sc.group = 16;
      sc.block_rows = cases[c].block_rows;
      sc.hadamard = cases[c].hadamard;
      sc.hadamard_seed = 7;
      const size_t br = sc.block_rows > 1 ? (size_t)sc.block_rows : 1, per_row = (cols + 15) / 16;
      const size_t nblocks = ((rows + br - 1) / br) * per_row;
      float *x = test_tensor(stored, 23 + s + 7 * c), *xl = malloc(n * 4), *xt = malloc(n * 4),
            *y_cpu = malloc(n * 4), *y_gpu = malloc(n * 4), *scales = malloc(nblocks * 4);
      logical(x, ld, trans, rows, cols, xl);
      ck_assert_int_eq(exmy_quantize_scaled_f32(&f, &o, &sc, NULL, xl, y_cpu, rows, cols, NULL),
                       0);
      /* the reference path's kernel on the gathered operand */
      float *dxl = dev_from(xl, n * 4);
      CU(exmy_cuda_quantize_blocks_f32(&f, &o, &sc, dxl, dxl, rows, cols, 0));
      to_host_free(y_gpu, dxl, n * 4);
      /* the images, from the stored operand */
      float *dx = dev_from(x, stored * 4), *dwork = dev_alloc(n * 4), *dsenc = dev_alloc(4),
            *dscales = dev_alloc(nblocks * 4), s_enc;
      uint16_t *dimg = dev_alloc(n * 2), *img = malloc(n * 2);
      CU(exmy_cuda_nvfp4_quantize_bf16(&f, &o, &sc, dx, ld, trans, rows, cols, dwork, dimg,
                                       dsenc, dscales, 0));
      to_host(img, dimg, n * 2);
      to_host(&s_enc, dsenc, 4);
      to_host(scales, dscales, nblocks * 4);
      size_t b = 0;
      if (!trans && ld == cols && !sc.hadamard) { /* read in place: no scratch needed */
        uint16_t *img2 = malloc(n * 2);
        CU(cudaMemset(dimg, 0xFF, n * 2));
        CU(exmy_cuda_nvfp4_quantize_bf16(&f, &o, &sc, dx, ld, trans, rows, cols, NULL, dimg,
                                         NULL, NULL, 0));
        to_host(img2, dimg, n * 2);
        if (memcmp(img, img2, n * 2) && b++ < 3)
          printf("  NVFP4 image without scratch differs (%zux%zu)\n", rows, cols);
        free(img2);
      }
      /* the transformed tensor the scales are taken from, on the host */
      memcpy(xt, xl, n * 4);
      if (sc.hadamard)
        for (size_t r = 0; r < rows; r++)
          for (size_t c0 = 0; c0 + 16 <= cols; c0 += 16)
            exmy_core_rht16(xl + r * cols + c0, xt + r * cols + c0,
                            exmy_core_rht16_signs(sc.hadamard_seed));
      float amax = 0.0f;
      for (size_t i = 0; i < n; i++)
        if (fabsf(xt[i]) <= 3.40282347e38f && fabsf(xt[i]) > amax) amax = fabsf(xt[i]);
      const float s_enc_want = exmy_core_nvfp4_tensor_scale(amax);
      if (bits(s_enc) != bits(s_enc_want) && b++ < 3)
        printf("  S_enc %a, want %a (amax %a)\n", s_enc, s_enc_want, amax);
      for (size_t t = 0; t < nblocks; t++) {
        const size_t r0 = (t / per_row) * br, c0 = (t % per_row) * 16;
        float bmax = 0.0f;
        for (size_t r = r0; r < r0 + br && r < rows; r++)
          for (size_t cc = c0; cc < c0 + 16 && cc < cols; cc++) {
            const float a = fabsf(xt[r * cols + cc]);
            if (a <= 3.40282347e38f && a > bmax) bmax = a;
          }
        const float s_b = scales[t], want = exmy_core_nvfp4_block_scale(bmax, s_enc_want);
        if (bits(s_b) != bits(want) && b++ < 3)
          printf("  block %zu: s_b %a, want %a\n", t, s_b, want);
        zero_blocks += s_b == 0.0f;
        const float df = exmy_core_nvfp4_decode_factor(s_b, s_enc);
        for (size_t r = r0; r < r0 + br && r < rows; r++)
          for (size_t cc = c0; cc < c0 + 16 && cc < cols; cc++) {
            const size_t i = r * cols + cc;
            const uint32_t vb = (uint32_t)img[i] << 16;
            float v;
            memcpy(&v, &vb, 4);
            /* q = v / s_b exactly (v = q s_b); a zero scale leaves q's sign in v */
            const float q = s_b != 0.0f ? v / s_b : v;
            const float aq = fabsf(q), w = q * df;
            const int e2m1 = aq == 0.0f || aq == 0.5f || aq == 1.0f || aq == 1.5f || aq == 2.0f ||
                             aq == 3.0f || aq == 4.0f || aq == 6.0f;
            checked++;
            if ((!e2m1 || bits(w) != bits(y_cpu[i]) || bits(w) != bits(y_gpu[i])) && b++ < 3)
              printf("  [%zu,%zu] of %zux%zu%s: image %a = q %a x s_b %a, q x decode %a; "
                     "reference %a (gpu), %a (cpu)\n", r, cc, rows, cols,
                     trans ? " (transposed)" : "", v, q, s_b, w, y_gpu[i], y_cpu[i]);
          }
      }
      if (b)
        printf("  ^ NVFP4 image case %zu (block %d x 16, rht %d, %s), %zu x %zu\n", c,
               cases[c].block_rows, cases[c].hadamard, exmy_rounding_name(o.mode), rows, cols);
      bad += b;
      free(x); free(xl); free(xt); free(y_cpu); free(y_gpu); free(scales); free(img);
      CU(cudaFree(dx)); CU(cudaFree(dwork)); CU(cudaFree(dsenc)); CU(cudaFree(dscales));
      CU(cudaFree(dimg));
    }
  printf("NVFP4 bf16 images: %zu values, each q s_b with q x decode factor equal to the "
         "reference's bits; %zu all-zero blocks; %zu differences\n", checked, zero_blocks, bad);
  ck_assert_msg(bad == 0, "%zu NVFP4 image differences", bad);
}
END_TEST

/* The BF16 path's element-wise image (exmy_cuda_quantize_scaled_bf16: the
 * bf16 bits of Q(x s), the pass that the trainer's producers' image kernels
 * share) against the CPU's quantization of x s: OCP E4M3 and E5M2 (whose
 * saturating rne takes the hardware's conversion on finite values), E8M3,
 * E8M6 and bf16 (whose rz and rne are float32 bit arithmetic with a mask on
 * finite values), saturating and not, rne, rz and sr, unscaled and under
 * scales 1.7 and 3000 (most values overflow there), on values over many
 * binades with zeros, subnormals, infinities and NaN, and with groups of 8
 * that the masks serve holding an overflow by rounding, ties and float32
 * subnormals that round up to E8Mx's subnormals and to the smallest normal.
 * Bit for bit (NaN as NaN). */
START_TEST(bf16_image_matches_cpu) {
  const char *names[] = {"float8_e4m3fn", "float8_e5m2", "e8m3", "e8m6", "bfloat16"};
  const float scales[3] = {0.0f, 1.7f, 3000.0f}; /* 0: unscaled */
  const size_t n = 300008;
  float *x = test_tensor(n, 11), *xs = malloc(n * 4), *y = malloc(n * 4);
  x[5] = -INFINITY, x[6] = 3.3e38f, x[7] = -2.5e-42f;
  /* finite groups of 8 (elements 8-15, 16-23): rounding up past the largest
   * value; E8M3's ties 1.0625 and -1.1875; 3 x 2^-130 (rne up to E8M3's
   * subnormal 2^-128), 2^-130 (a tie to 0 in E8M3), 9 x 2^-133, and float32's
   * largest subnormal (rne up to the smallest normal) */
  x[8] = 3.39e38f, x[9] = -3.4e38f;
  x[16] = 1.0625f, x[17] = -1.1875f, x[18] = ldexpf(3, -130), x[19] = ldexpf(1, -130);
  x[20] = ldexpf(9, -133), x[21] = -ldexpf(0x7FFFFF, -149);
  float *dx = dev_from(x, n * 4), *dsi = dev_alloc(8);
  uint16_t *dimg = dev_alloc(n * 2), *img = malloc(n * 2);
  size_t bad = 0, cases = 0, hw_cases = 0, mask_cases = 0;
  for (int k = 0; k < 5; k++)
    for (int sat = 0; sat < 2; sat++)
      for (int mode = EXMY_RNE; mode <= EXMY_SR; mode++) {
        if (mode != EXMY_RNE && mode != EXMY_RZ && mode != EXMY_SR) continue;
        for (int si = 0; si < 3; si++) {
          exmy_format f;
          ck_assert_int_eq(exmy_format_parse(names[k], &f), 0);
          exmy_rounding_opts o = {0};
          o.mode = (exmy_rounding)mode;
          o.saturate = sat;
          o.seed = 9;
          o.offset = 1000;
          const float s = scales[si], pair[2] = {s, s ? 1.0f / s : 0.0f};
          for (size_t i = 0; i < n; i++) xs[i] = s && x[i] == x[i] ? x[i] * s : x[i];
          exmy_quantize_f32(&f, &o, xs, y, n);
          CU(cudaMemcpy(dsi, pair, 8, cudaMemcpyHostToDevice));
          CU(exmy_cuda_quantize_scaled_bf16(&f, &o, s ? dsi : NULL, dx, dimg, n, 0));
          to_host(img, dimg, n * 2);
          size_t b = 0;
          for (size_t i = 0; i < n; i++) {
            const uint32_t w = (uint32_t)img[i] << 16;
            float v;
            memcpy(&v, &w, 4);
            const bool same = y[i] != y[i] ? v != v : bits(v) == bits(y[i]);
            if (!same && b++ < 3)
              printf("  [%zu] x %a s %g: image %a, cpu %a\n", i, x[i], s, v, y[i]);
          }
          if (b)
            printf("  ^ bf16 image %s sat %d %s scale %g\n", f.name, sat,
                   exmy_rounding_name(o.mode), s);
          bad += b;
          cases++;
          hw_cases += k < 2 && sat && mode == EXMY_RNE;
          mask_cases += k >= 2 && mode != EXMY_SR;
        }
      }
  printf("bf16 images: %zu cases (%zu on the hardware's conversion, %zu rz or rne by masks), %zu values "
         "each: %zu differences\n", cases, hw_cases, mask_cases, n, bad);
  free(x); free(xs); free(y); free(img);
  CU(cudaFree(dx)); CU(cudaFree(dsi)); CU(cudaFree(dimg));
  ck_assert_msg(bad == 0, "%zu bf16 image differences", bad);
}
END_TEST

int main(void) {
  const TTest *const tests[] = {mx_matches_cpu, tensor_scaling_matches_cpu,
                                group_scaling_matches_cpu, delayed_scaling_matches_cpu,
                                stats_match_cpu, mx_bf16_image_matches_cpu,
                                mx_gemm_fallback_matches_cpu, blocks_match_cpu,
                                nvfp4_bf16_image_matches_reference,
                                mx_bf16_image_pair_matches_cpu, bf16_image_matches_cpu, NULL};
  return run_suite(suite_of("cuda_recipes", 300, tests), false);
}
