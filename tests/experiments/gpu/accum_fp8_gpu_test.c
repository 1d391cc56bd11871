/* cuBLASLt's own FP8 GEMM for the `hopper` / `hopper-split` accumulation
 * models (experiments/gpu/gemm.cu) against the emulation it replaces
 * (exmy_cuda_qgemm_accum, forced with gtq_set_accum_emulation), bit for bit:
 *  - a linear site's three GEMMs (Y = X W^T: E4M3 x E4M3, beta 0;
 *    dX = dY W and dW += dY^T X: E5M2 x E4M3, beta 0.5 and 1, transposed
 *    operands), fast and split accumulation, unscaled and per-tensor scaled
 *    by powers of two, on normal data, on data spread over the formats'
 *    whole range (subnormals, cancelling pairs) and on data bounded away
 *    from zero, at 256 x 256 x 4096, 2048 x 768 x 768 (the trainer's
 *    32768 x 768 x 768 scaled down), 64 x 64 x 16384 and a dW of 256 x 256 x
 *    16384 (small M x N, large K: where cuBLASLt's heuristic offers only
 *    split-K algorithms, which the fast path runs with the split undone);
 *    the path counters say where cuBLASLt ran, where it must have (scaled
 *    operands with FP8 subnormals included: the model's emin follows the
 *    power-of-two scale);
 *  - what must not take it: scales that are not powers of two, K not a
 *    multiple of 16, other models;
 *  - block-scaled operands (fp8-deepseek: E4M3, a float32 scale per 1 x
 *    128 tile and per 128 x 128 weight block, hopper-split): Y's and dX's
 *    1 x 128 tiles against 128 x 128 blocks in one call of cuBLASLt's
 *    block-scaled GEMM, dW's two tiled operands (and, forced, every GEMM)
 *    per 128-element slice of K promoted with the blocks' scales, against
 *    the emulation on the same site's three GEMMs at 256 x 768 x 2048,
 *    4096 x 2048 x 768 (and its dW, 2048 x 768 x 4096) and 2048 x 768 x
 *    768, on normal, wide and block-structured data (zero tiles and blocks,
 *    tiles that cancel exactly, tiles near float32's smallest scales),
 *    every GEMM on the fast path; an odd 100 x 72 x 256 output; K not a
 *    multiple of 128 emulated;
 *  - the trainer: steps of fp8-te (delayed scaling, power-of-two scales)
 *    and of unscaled E4M3 / E5M2 with accumulate = hopper or hopper-split,
 *    and of fp8-deepseek, losses and gradients bit-identical with the
 *    emulation forced, some GEMMs on cuBLASLt in each; fp8-deepseek's also
 *    with its block-scaled GEMMs per slice of K forced. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "experiments/gpu/gemm.h"
#include "experiments/gpu/model_gpu.h"
#include "experiments/trainer/config.h"
#include "experiments/trainer/model.h"
#include "experiments/trainer/recipe.h"
#include "tests/check_suite.h"
#include "tests/cuda/gpu_check.h"
#include "tests/experiments/gpu/trainer_check.h"
#include "tests/test_rng.h"

static uint64_t rng_state = 2024;
static double urand(void) { return test_rng_uniform(&rng_state); }
static double gauss(void) { return test_rng_gauss(&rng_state); }

enum { DATA_NORMAL, DATA_WIDE, DATA_CLEAN, N_DATA };
/* block-scaled cases only (gen_blocks) */
enum { DATA_BLOCKS = N_DATA };
static const char *const data_names[N_DATA + 1] = {"normal", "wide", "clean", "blocks"};

/* rows x cols values built from 128-column tiles, for block scales: by the
 * tile's column block cb, class cb % 4 is N(0, 1) times 2^U(-20..20) per
 * tile (within a 128 x 128 weight block, rows of far apart magnitudes: codes
 * down to subnormals and zeros), class 1 the same with odd columns pair
 * times their even neighbour (X's pair -1 and W's +1 make Y's slices of
 * those blocks cancel exactly: zero partial sums), class 2 sign 2^U(-118..
 * -100) [1, 2) (scales near float32's largest, dequantization factors near
 * its smallest normal: promotions that underflow), class 3 sign
 * 2^U(-30..30) [1, 2) per element.  One tile in ten is all zeros, for W
 * (pair > 0) whole 128 x 128 blocks. */
static void gen_blocks(float *x, int rows, int cols, int pair) {
  const int zero_rows = pair > 0 ? 128 : 1;
  for (int r = 0; r < rows; r++) {
    double mag = 1.0;
    for (int c = 0; c < cols; c++) {
      const unsigned cb = (unsigned)c / 128, rb = (unsigned)(r / zero_rows);
      if (c % 128 == 0) mag = ldexp(1.0, -20 + (int)(urand() * 41));
      const double sign = urand() < 0.5 ? -1.0 : 1.0;
      double v;
      switch (cb % 4) {
        case 0: v = mag * gauss(); break;
        case 1: v = c % 2 ? pair * x[(size_t)r * cols + c - 1] : mag * gauss(); break;
        case 2: v = sign * ldexp(1.0 + urand(), -118 + (int)(urand() * 19)); break;
        default: v = sign * ldexp(1.0 + urand(), -30 + (int)(urand() * 61)); break;
      }
      if (((rb * 73856093u) ^ (cb * 19349663u)) % 10 == 3) v = 0.0;
      x[(size_t)r * cols + c] = (float)v;
    }
  }
}

/* rows x cols values of one kind.  NORMAL: scale N(0, 1).  WIDE: sign
 * 2^U(lo..hi) [1, 2) (the format's subnormals and largest binades), odd
 * columns the negated (pair < 0) or repeated (pair > 0) even neighbour half
 * of the time, so that products cancel along K.  CLEAN: as WIDE over
 * scale [2^-5, 2), away from any subnormal once scaled to the format's
 * maximum.  2% exact zeros throughout. */
static void gen(float *x, int rows, int cols, int kind, double scale, int lo, int hi, int pair) {
  if (kind == DATA_BLOCKS) {
    gen_blocks(x, rows, cols, pair);
    return;
  }
  for (int r = 0; r < rows; r++)
    for (int c = 0; c < cols; c++) {
      double v;
      if (kind == DATA_NORMAL) {
        v = scale * gauss();
      } else {
        const double sign = urand() < 0.5 ? -1.0 : 1.0;
        v = kind == DATA_WIDE ? sign * ldexp(1.0 + urand(), lo + (int)(urand() * (hi - lo + 1)))
                              : sign * scale * ldexp(1.0 + urand(), -(int)(urand() * 6));
        if (c % 2 && urand() < 0.5) v = pair * x[(size_t)r * cols + c - 1];
      }
      if (urand() < 0.02) v = 0.0;
      x[(size_t)r * cols + c] = (float)v;
    }
}

/* ---------------------------------------------- the three GEMMs of a site */

static const struct {
  int N, C, OC;
  int must_be_fast; /* cuBLASLt has an unsplit algorithm here (a shape of cuda/NOTES.md's) */
} shapes[] = {
    {256, 4096, 256, 1},  /* Y 256 x 256 x 4096 */
    {2048, 768, 768, 1},  /* Y and dX 2048 x 768 x 768, dW 768 x 768 x 2048 */
    {64, 16384, 64, 0},   /* Y 64 x 64 x 16384: the heuristic splits K; whether cuBLASLt takes it undone is its call */
    {16384, 256, 256, 1}, /* dW 256 x 256 x 16384 (a weight gradient's shape): split-K candidates, undone */
};
enum { N_SHAPES = sizeof shapes / sizeof shapes[0] };
static const char *const models[] = {"hopper", "hopper-split"};
static const char *const scalings[][3] = {{"scaling=none", NULL},
                                          {"scaling=tensor", "pow2_scale=1", NULL}};
enum { N_CASES = 2 * 2 * N_DATA * N_SHAPES };

/* Runs Y = X W^T, dX = 0.5 dX + dY W, dW = dW + dY^T X on site W1 of a
 * fresh context, once on the fast path and once with the emulation forced,
 * and returns how many outputs differ; *fast / *emulated: what the first
 * run's counters say, *why (if not NULL): all of them.  dY is scaled by
 * 2^dy_exp (a gradient's small values: large scales).  block_batched: the
 * fast path's block-scaled GEMMs per slice of K (gtq_set_block_batched). */
static size_t run_site_scaled(const char *const *sets, int N, int C, int OC, int kind, int dy_exp,
                              int block_batched, unsigned long long *fast,
                              unsigned long long *emulated, gtq_accum_path_counts *why) {
  recipe rc;
  make_recipe(&rc, sets);
  model_config mc;
  ck_assert(!model_named_size("test", &mc));
  tq_site *sites = recipe_make_sites(&rc, &mc);
  const int n_sites = model_num_sites(&mc), site = SITE_W1;
  gtq_ctx *g = gtq_new(sites, n_sites, 0);
  const size_t nx = (size_t)N * C, nw = (size_t)OC * C, ndy = (size_t)N * OC;
  float *x = malloc(sizeof(float) * nx), *w = malloc(sizeof(float) * nw),
        *dy = malloc(sizeof(float) * ndy), *dx0 = malloc(sizeof(float) * nx),
        *dw0 = malloc(sizeof(float) * nw);
  gen(x, N, C, kind, 1.0, -10, 8, -1);   /* E4M3 */
  gen(w, OC, C, kind, 0.5, -10, 8, 1);   /* E4M3, pairs repeated: x_c w_c - x_c w_c */
  gen(dy, N, OC, kind, 1.0, -17, 15, -1); /* E5M2 */
  for (size_t i = 0; i < ndy; i++) dy[i] = ldexpf(dy[i], dy_exp);
  for (size_t i = 0; i < nx; i++) dx0[i] = (float)gauss();
  for (size_t i = 0; i < nw; i++) dw0[i] = (float)gauss();
  float *d_x = dev_from(x, sizeof(float) * nx), *d_w = dev_from(w, sizeof(float) * nw),
        *d_dy = dev_from(dy, sizeof(float) * ndy);
  gtq_begin_step(g, 0, false);
  const gtq_operand gx = gtq_operand_for_gemm(g, site, USE_FWD_X, SLOT_X, true, d_x, C, N, C);
  const gtq_operand gw = gtq_operand_for_gemm(g, site, USE_FWD_W, SLOT_W, true, d_w, C, OC, C);
  const gtq_operand gdy = gtq_operand_for_gemm(g, site, USE_DX_DY, SLOT_DY, true, d_dy, OC, N, OC);
  const gtq_operand gw2 = gtq_operand_for_gemm(g, site, USE_DX_W, SLOT_W, false, d_w, C, OC, C);
  const gtq_operand gdy2 = gtq_operand_for_gemm(g, site, USE_DW_DY, SLOT_DY, false, d_dy, OC, N, OC);
  const gtq_operand gx2 = gtq_operand_for_gemm(g, site, USE_DW_X, SLOT_X, false, d_x, C, N, C);
  float *out[2][3];
  const size_t n_out[3] = {ndy, nx, nw};
  gtq_set_block_batched(g, block_batched);
  for (int pass = 0; pass < 2; pass++) {
    gtq_set_accum_emulation(g, pass == 1);
    unsigned long long f0, e0, f1, e1;
    gtq_accum_path_counts c0, c1;
    gtq_accum_paths(g, &f0, &e0);
    gtq_accum_counts(g, &c0);
    float *d_y = dev_alloc(sizeof(float) * ndy), *d_dx = dev_from(dx0, sizeof(float) * nx),
          *d_dw = dev_from(dw0, sizeof(float) * nw);
    gtq_gemm(g, false, true, N, OC, C, 1.0f, gx, gw, 0.0f, d_y, OC);
    gtq_gemm(g, false, false, N, C, OC, 1.0f, gdy, gw2, 0.5f, d_dx, C);
    gtq_gemm(g, true, false, OC, C, N, 1.0f, gdy2, gx2, 1.0f, d_dw, C);
    gtq_accum_paths(g, &f1, &e1);
    gtq_accum_counts(g, &c1);
    float *dev[3] = {d_y, d_dx, d_dw};
    for (int o = 0; o < 3; o++) {
      out[pass][o] = malloc(sizeof(float) * n_out[o]);
      to_host_free(out[pass][o], dev[o], sizeof(float) * n_out[o]);
    }
    if (pass == 0) {
      *fast = f1 - f0, *emulated = e1 - e0;
      ck_assert_uint_eq(*fast + *emulated, 3);
      if (why) {
        why->fast = c1.fast - c0.fast, why->ineligible = c1.ineligible - c0.ineligible;
        why->scales_out_of_range = c1.scales_out_of_range - c0.scales_out_of_range;
        why->not_codes = c1.not_codes - c0.not_codes;
        ck_assert_uint_eq(why->fast + why->ineligible + why->scales_out_of_range + why->not_codes,
                          3);
        why->block_scaled = c1.block_scaled - c0.block_scaled;
        why->block_one_call = c1.block_one_call - c0.block_one_call;
      }
    } else { /* forced: never cuBLASLt */
      ck_assert_uint_eq(f1 - f0, 0);
      ck_assert_uint_eq(e1 - e0, 3);
    }
  }
  size_t bad = 0;
  static const char *const what[3] = {"Y", "dX", "dW"};
  for (int o = 0; o < 3; o++) {
    const size_t d = count_bit_diffs(out[0][o], out[1][o], n_out[o]);
    if (d) {
      size_t i = 0;
      while (!memcmp(&out[0][o][i], &out[1][o][i], sizeof(float))) i++;
      uint32_t bf, be;
      memcpy(&bf, &out[0][o][i], sizeof bf);
      memcpy(&be, &out[1][o][i], sizeof be);
      size_t zeros = 0; /* differences only in the sign of a zero */
      for (size_t e = 0; e < n_out[o]; e++)
        zeros += out[0][o][e] == 0.0f && out[1][o][e] == 0.0f &&
                 memcmp(&out[0][o][e], &out[1][o][e], sizeof(float));
      printf("  %s: %zu of %zu differ, %zu of them zeros of opposite signs (first at %zu: fast %.9g "
             "(0x%08x), emulated %.9g (0x%08x))\n", what[o], d, n_out[o], zeros, i, out[0][o][i],
             bf, out[1][o][i], be);
    }
    bad += d;
    free(out[0][o]), free(out[1][o]);
  }
  CU(cudaFree(d_x)); CU(cudaFree(d_w)); CU(cudaFree(d_dy));
  free(x), free(w), free(dy), free(dx0), free(dw0);
  gtq_free(g);
  recipe_free_sites(sites, n_sites);
  return bad;
}

static size_t run_site(const char *const *sets, int N, int C, int OC, int kind,
                       unsigned long long *fast, unsigned long long *emulated) {
  return run_site_scaled(sets, N, C, OC, kind, 0, 0, fast, emulated, NULL);
}

START_TEST(site_gemms_match_emulation) {
  int c = _i;
  const int shape = c % N_SHAPES; c /= N_SHAPES;
  const int kind = c % N_DATA; c /= N_DATA;
  const int scaled = c % 2; c /= 2;
  const int mi = c;
  char acc[64];
  snprintf(acc, sizeof acc, "accumulate=%s", models[mi]);
  const char *sets[12] = {"format_w=e4m3", "format_a=e4m3", "format_g=e5m2", "saturate=1", acc};
  int ns = 5;
  for (int i = 0; scalings[scaled][i]; i++) sets[ns++] = scalings[scaled][i];
  sets[ns] = NULL;
  const int N = shapes[shape].N, C = shapes[shape].C, OC = shapes[shape].OC;
  unsigned long long fast, emulated;
  const size_t bad = run_site(sets, N, C, OC, kind, &fast, &emulated);
  printf("%s, %s, %s data, N %d C %d OC %d: %llu GEMMs on cuBLASLt, %llu emulated, %zu outputs "
         "differ\n", models[mi], scaled ? "pow2 tensor scaling" : "unscaled", data_names[kind], N,
         C, OC, fast, emulated, bad);
  ck_assert_msg(bad == 0, "%zu outputs differ from the emulation", bad);
  /* where the fast path must have run: every value an exact code, unscaled
   * or scaled by a power of two (the model's emin follows the scale, so FP8
   * subnormals of scaled wide data stay on it too), at a shape cuBLASLt does
   * not split; and match the emulation bit for bit (above) */
  if (shapes[shape].must_be_fast)
    ck_assert_msg(fast == 3, "only %llu of 3 GEMMs took cuBLASLt's FP8 GEMM", fast);
}
END_TEST

START_TEST(ineligible_gemms_emulated) {
  static const char *const non_pow2[] = {"format_w=e4m3", "format_a=e4m3", "format_g=e5m2",
                                         "saturate=1", "scaling=tensor", "accumulate=hopper",
                                         NULL};
  static const char *const other_model[] = {"format_w=e4m3", "format_a=e4m3", "format_g=e5m2",
                                            "saturate=1", "accumulate=group:32,bits:14,sum:14,promote:64",
                                            NULL};
  static const char *const unscaled[] = {"format_w=e4m3", "format_a=e4m3", "format_g=e5m2",
                                         "saturate=1", "accumulate=hopper", NULL};
  unsigned long long fast, emulated;
  size_t bad = run_site(non_pow2, 64, 256, 128, DATA_CLEAN, &fast, &emulated);
  ck_assert_uint_eq(bad, 0);
  ck_assert_uint_eq(fast, 0);
  bad = run_site(other_model, 64, 256, 128, DATA_CLEAN, &fast, &emulated);
  ck_assert_uint_eq(bad, 0);
  ck_assert_uint_eq(fast, 0);
  /* K = 72 (dX) and 40 (dW) are not multiples of 16; Y's K = 256 is (a
   * 40 x 72 output: whether cuBLASLt takes it is its heuristic's call) */
  bad = run_site(unscaled, 40, 256, 72, DATA_NORMAL, &fast, &emulated);
  ck_assert_uint_eq(bad, 0);
  ck_assert_uint_le(fast, 1);
  ck_assert_uint_ge(emulated, 2);
  printf("non-power-of-two scales, another model, K %% 16 != 0: emulated, as expected\n");
}
END_TEST

/* Gradients' small values give large power-of-two scales: dY at 2^-36
 * (its scale about 2^49, with W's and X's about 2^7: within
 * fp8_scales_ok's bounds) stays on cuBLASLt and matches the emulation bit
 * for bit, on normal and wide data, fast and split; at 2^-80 (about 2^79
 * or more: beyond them) dX's and dW's GEMMs are flagged on the device for their
 * scales and emulated, Y's stays on cuBLASLt, and still nothing differs. */
START_TEST(gradient_scales) {
  for (int mi = 0; mi < 2; mi++)
    for (int kind = DATA_NORMAL; kind <= DATA_WIDE; kind++) {
      char acc[64];
      snprintf(acc, sizeof acc, "accumulate=%s", models[mi]);
      const char *const sets[] = {"format_w=e4m3", "format_a=e4m3", "format_g=e5m2",
                                  "saturate=1", "scaling=tensor", "pow2_scale=1", acc, NULL};
      const int dy_exps[2] = {-36, -80};
      for (int d = 0; d < 2; d++) {
        unsigned long long fast, emulated;
        gtq_accum_path_counts why;
        const size_t bad =
            run_site_scaled(sets, 2048, 768, 768, kind, dy_exps[d], 0, &fast, &emulated, &why);
        printf("%s, %s data, dY at 2^%d: %llu GEMMs on cuBLASLt, %llu emulated for their "
               "scales, %llu for their values, %llu not eligible; %zu outputs differ\n",
               models[mi], data_names[kind], dy_exps[d], why.fast, why.scales_out_of_range,
               why.not_codes, why.ineligible, bad);
        ck_assert_msg(bad == 0, "%zu outputs differ from the emulation", bad);
        if (d == 0) {
          ck_assert_uint_eq(why.fast, 3);
        } else {
          ck_assert_uint_eq(why.fast, 1);
          ck_assert_uint_eq(why.scales_out_of_range, 2);
        }
      }
    }
}
END_TEST

/* ------------------------------------------- block-scaled (fp8-deepseek) */

/* experiments/configs/fp8-deepseek.cfg's quantization and accumulation */
static const char *const deepseek[] = {"format_w=e4m3", "format_a=e4m3", "format_g=e4m3",
                                       "scaling=group", "mx_block=128",
                                       "weight_block_rows=128", "saturate=1",
                                       "accumulate=hopper-split", NULL};

static const struct {
  int N, C, OC;
} block_shapes[] = {
    {256, 2048, 768},  /* Y 256 x 768 x 2048, dX 256 x 2048 x 768, dW 768 x 2048 x 256 */
    {4096, 768, 2048}, /* Y 4096 x 2048 x 768, dX 4096 x 768 x 2048, dW 2048 x 768 x 4096 */
    {2048, 768, 768},  /* Y and dX 2048 x 768 x 768, dW 768 x 768 x 2048 */
};
enum { N_BLOCK_SHAPES = sizeof block_shapes / sizeof block_shapes[0] };
static const int block_kinds[] = {DATA_NORMAL, DATA_WIDE, DATA_BLOCKS};
enum { N_BLOCK_KINDS = sizeof block_kinds / sizeof block_kinds[0],
       N_BLOCK_CASES = N_BLOCK_SHAPES * N_BLOCK_KINDS };

/* A linear site's three GEMMs under fp8-deepseek against the emulation,
 * bit for bit (both beta 0.5 and 1 among them), all three on the fast path:
 * Y's and dX's (1 x 128 tiles against 128 x 128 blocks) in one call of
 * cuBLASLt's block-scaled GEMM where it has an algorithm with split-K 1
 * (some must), dW's (two tiled operands) per slice of K; then the same
 * with every GEMM per slice of K (block_batched). */
START_TEST(block_site_gemms_match_emulation) {
  const int shape = _i % N_BLOCK_SHAPES, kind = block_kinds[_i / N_BLOCK_SHAPES];
  const int N = block_shapes[shape].N, C = block_shapes[shape].C, OC = block_shapes[shape].OC;
  for (int batched = 0; batched < 2; batched++) {
    unsigned long long fast, emulated;
    gtq_accum_path_counts why;
    const size_t bad =
        run_site_scaled(deepseek, N, C, OC, kind, 0, batched, &fast, &emulated, &why);
    printf("fp8-deepseek (block scales, hopper-split)%s, %s data, N %d C %d OC %d: %llu GEMMs "
           "on cuBLASLt (%llu tried it, %llu of Y's and dX's 2 in one block-scaled call), %llu "
           "emulated (%llu for their scales, %llu for their values, %llu not eligible); %zu "
           "outputs differ\n", batched ? " per slice forced" : "", data_names[kind], N, C, OC,
           why.fast, why.block_scaled, why.block_one_call, emulated, why.scales_out_of_range,
           why.not_codes, why.ineligible, bad);
    ck_assert_msg(bad == 0, "%zu outputs differ from the emulation", bad);
    ck_assert_msg(why.block_scaled == 3 && why.fast == 3,
                  "only %llu of 3 GEMMs took the block-scaled FP8 path (%llu tried it)",
                  why.fast, why.block_scaled);
    if (batched)
      ck_assert_uint_eq(why.block_one_call, 0);
    else
      ck_assert_msg(why.block_one_call > 0 && why.block_one_call <= 2,
                    "%llu GEMMs in one block-scaled call (Y and dX: 1 or 2 expected)",
                    why.block_one_call);
  }
}
END_TEST

/* What the block-scaled path must refuse or may leave: K not a multiple of
 * 128 (dX's 72, dW's 100: emulated), an odd 100 x 72 output at K = 256
 * (Y: cuBLASLt's call), blocks of 64 (not the promotion interval), and the
 * emulation forced; bit for bit in every case. */
START_TEST(block_ineligible_gemms_emulated) {
  unsigned long long fast, emulated;
  gtq_accum_path_counts why;
  size_t bad =
      run_site_scaled(deepseek, 100, 256, 72, DATA_NORMAL, 0, 0, &fast, &emulated, &why);
  printf("fp8-deepseek, N 100 C 256 OC 72: %llu GEMMs on cuBLASLt per slice, %llu emulated; "
         "%zu outputs differ\n", why.fast, emulated, bad);
  ck_assert_uint_eq(bad, 0);
  ck_assert_uint_le(why.block_scaled, 1); /* Y only: K = 256 */
  ck_assert_uint_eq(why.block_one_call, 0); /* m = 100: not a calibrated shape */
  ck_assert_uint_ge(emulated, 2);
  static const char *const blocks64[] = {"format_w=e4m3", "format_a=e4m3", "format_g=e4m3",
                                         "scaling=group", "mx_block=64",
                                         "weight_block_rows=64", "saturate=1",
                                         "accumulate=hopper-split", NULL};
  bad = run_site_scaled(blocks64, 256, 256, 256, DATA_NORMAL, 0, 0, &fast, &emulated, &why);
  ck_assert_uint_eq(bad, 0);
  ck_assert_uint_eq(why.block_scaled, 0);
  ck_assert_uint_eq(fast, 0);
  printf("fp8-deepseek: K %% 128 != 0 and blocks of 64 emulated, as expected\n");
}
END_TEST

/* ------------------------------------------------------------ the trainer */

/* `steps` steps of the model of size `size` with the recipe sets, twice:
 * cuBLASLt's FP8 GEMM where it can run, and then the emulation forced
 * (vs_batched 0) or the block-scaled GEMMs per slice of K forced
 * (vs_batched 1); losses and gradients bit-identical.  Returns the GEMMs
 * the first run gave to cuBLASLt; *counts (if not NULL): each run's
 * counters. */
static unsigned long long trainer_versus(const char *const *sets, const char *size, int steps,
                                         int vs_batched, gtq_accum_path_counts counts[2]) {
  recipe rc;
  make_recipe(&rc, sets);
  model_config mc;
  ck_assert(!model_named_size(size, &mc));
  const int B = 2, T = mc.seq_len, N = B * T, n_sites = model_num_sites(&mc);
  int *tok = malloc(sizeof(int) * N), *tgt = malloc(sizeof(int) * N);
  float losses[2][8];
  float *grads[2] = {NULL, NULL};
  unsigned long long fast = 0, emulated = 0;
  size_t n_params = 0;
  for (int pass = 0; pass < 2; pass++) {
    rng_state = 99;
    model m;
    model_init(&m, &mc, 5);
    m.swiglu_row_scale = rc.swiglu_row_scale;
    tq_site *sites = recipe_make_sites(&rc, &mc);
    char err[256];
    gpu_model *g = gpu_model_new(&m, &rc, sites, n_sites, B, T, GPU_ATTENTION_MATERIALIZED, err,
                                 sizeof err);
    ck_assert_msg(g != NULL, "%s", err);
    gtq_set_accum_emulation(gpu_model_gemm(g), pass == 1 && !vs_batched);
    gtq_set_block_batched(gpu_model_gemm(g), pass == 1 && vs_batched);
    const adamw_hparams h = {6e-4f, 0.9f, 0.95f, 1e-8f, 0.1f};
    for (int s = 0; s < steps; s++) {
      for (int i = 0; i < N; i++)
        tok[i] = (int)(urand() * mc.vocab), tgt[i] = (int)(urand() * mc.vocab);
      gpu_model_begin_step(g, (uint64_t)s << 36, false);
      gpu_model_zero_grad(g);
      losses[pass][s] = gpu_model_forward(g, tok, tgt);
      gpu_model_backward(g, 1.0f);
      if (s + 1 < steps) gpu_model_update(g, &h, s + 1, 1.0);
    }
    n_params = m.num_params;
    grads[pass] = malloc(sizeof(float) * n_params);
    to_host(grads[pass], gpu_model_grads(g), sizeof(float) * n_params);
    unsigned long long f, e;
    gtq_accum_paths(gpu_model_gemm(g), &f, &e);
    if (counts) gtq_accum_counts(gpu_model_gemm(g), &counts[pass]);
    if (pass == 0) fast = f, emulated = e;
    else if (!vs_batched) ck_assert_uint_eq(f, 0);
    gpu_model_free(g);
    recipe_free_sites(sites, n_sites);
    model_free(&m);
  }
  const char *other = vs_batched ? "per slice" : "emulated";
  for (int s = 0; s < steps; s++)
    ck_assert_msg(!memcmp(&losses[0][s], &losses[1][s], sizeof(float)),
                  "step %d: loss %.9g on the fast path, %.9g %s", s, losses[0][s], losses[1][s],
                  other);
  const size_t bad = count_bit_diffs(grads[0], grads[1], n_params);
  printf("trainer %s %s against %s: %d steps, losses bit-identical (last %.7f), %zu of %zu "
         "gradients differ; %llu GEMMs on cuBLASLt, %llu emulated\n", size, sets[4], other,
         steps, losses[0][steps - 1], bad, n_params, fast, emulated);
  ck_assert_msg(bad == 0, "%zu gradients differ", bad);
  free(grads[0]), free(grads[1]), free(tok), free(tgt);
  return fast;
}

static unsigned long long trainer_twice(const char *const *sets, const char *size, int steps) {
  return trainer_versus(sets, size, steps, 0, NULL);
}

START_TEST(trainer_losses_match_emulation) {
  /* fp8-te (experiments/configs/fp8-te.cfg) with power-of-two scales: the
   * scaled operands hold FP8 subnormals, which the model's emin (following
   * the scale) clamps as the tensor core does, so GEMMs take cuBLASLt and
   * must agree with the emulation */
  static const char *const te[] = {"format_w=e4m3", "format_a=e4m3", "format_g=e5m2",
                                   "scaling=delayed", "accumulate=hopper", "amax_history=16",
                                   "margin=0", "saturate=1", "pow2_scale=1", NULL};
  static const char *const te_split[] = {"format_w=e4m3", "format_a=e4m3", "format_g=e5m2",
                                         "scaling=delayed", "accumulate=hopper-split",
                                         "amax_history=16", "margin=0", "saturate=1",
                                         "pow2_scale=1", NULL};
  /* unscaled: every operand value is a code; the linear layers' GEMMs
   * (K = 128, 384, 256) must take cuBLASLt */
  static const char *const plain[] = {"format_w=e4m3", "format_a=e4m3", "format_g=e5m2",
                                      "saturate=1", "accumulate=hopper", NULL};
  ck_assert(trainer_twice(te, "tiny", 4) > 0);
  ck_assert(trainer_twice(te_split, "tiny", 3) > 0);
  ck_assert(trainer_twice(plain, "tiny", 3) > 0);
}
END_TEST

/* fp8-deepseek: tiny's linear layers (K = 128, 384 and the 256 tokens of
 * dW) are all multiples of 128, so their GEMMs take cuBLASLt, the forward
 * and data-gradient ones in one block-scaled call; losses and gradients
 * bit-identical with the emulation forced, and with every block-scaled
 * GEMM per slice of K forced. */
START_TEST(trainer_deepseek_matches_emulation) {
  gtq_accum_path_counts c[2];
  const unsigned long long fast = trainer_versus(deepseek, "tiny", 3, 0, c);
  printf("fp8-deepseek tiny: %llu block-scaled GEMMs on cuBLASLt, %llu of them in one call\n",
         c[0].block_scaled, c[0].block_one_call);
  ck_assert_msg(fast > 0, "no GEMM of fp8-deepseek took the block-scaled FP8 path");
  ck_assert_msg(c[0].block_one_call > 0, "no GEMM of fp8-deepseek made one block-scaled call");
  trainer_versus(deepseek, "tiny", 3, 1, c);
  printf("fp8-deepseek tiny, one call against per slice: %llu and %llu GEMMs in one call, %llu "
         "and %llu block-scaled\n", c[0].block_one_call, c[1].block_one_call,
         c[0].block_scaled, c[1].block_scaled);
  ck_assert_msg(c[0].block_one_call > 0, "no GEMM of fp8-deepseek made one block-scaled call");
  ck_assert_uint_eq(c[1].block_one_call, 0);
}
END_TEST

int main(void) {
  setenv("EXMY_FP8_PLAN_LOG", "1", 1); /* cuBLASLt's choice per shape, in the log */
  const TTest *const tests[] = {ineligible_gemms_emulated, gradient_scales,
                                trainer_losses_match_emulation, NULL};
  Suite *s = suite_of_loop("accum_fp8_gpu", 1800, site_gemms_match_emulation, N_CASES, tests);
  /* the block-scaled path (fp8-deepseek): a test case of its own, so that
   * CK_RUN_CASE=accum_fp8_block runs it alone */
  TCase *tb = tcase_create("accum_fp8_block");
  tcase_set_timeout(tb, 1800);
  tcase_add_loop_test(tb, block_site_gemms_match_emulation, 0, N_BLOCK_CASES);
  tcase_add_test(tb, block_ineligible_gemms_emulated);
  tcase_add_test(tb, trainer_deepseek_matches_emulation);
  suite_add_tcase(s, tb);
  return run_suite(s, false);
}
