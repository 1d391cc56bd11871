/* Each GPU layer of experiments/gpu/layers.h against its CPU twin in
 * experiments/trainer/model.c and optim.c, on random inputs of three shapes (the tiny
 * model, a grouped-query shape with sizes that are not multiples of a warp,
 * and a 120M-model slice), plus the reductions at full 120M scale for
 * determinism and speed.
 *
 * Criterion: max |gpu - cpu| / max |cpu| < 1e-5 for every output.
 * Elementwise layers do the CPU's float operations in its order and come out
 * bit-identical; the row and column sums differ from the CPU only in the order
 * of their additions.  Every reduction is also run twice and must repeat bit
 * for bit.  Needs a GPU (tag "gpu"). */
#include <check.h>
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cuda/exmy_cuda.h"
#include "experiments/gpu/layers.h"
#include "experiments/trainer/logit_sharpness.h"
#include "experiments/trainer/model.h"
#include "experiments/trainer/optim.h"
#include "experiments/trainer/splitmix64.h"
#include "tests/check_suite.h"
#include "tests/cuda/gpu_check.h"

/* ------------------------------------------------------------ helpers */

/* after every launch: the launch itself, then its execution */
#define LAUNCHED()                    \
  do {                                \
    CU(cudaGetLastError());           \
    CU(cudaDeviceSynchronize());      \
  } while (0)

static void to_dev(void *dev, const void *host, size_t bytes) {
  CU(cudaMemcpy(dev, host, bytes, cudaMemcpyHostToDevice));
}

static double uniform01(uint64_t *s) { return (splitmix64(s) >> 11) * (1.0 / 9007199254740992.0); }

/* n floats uniform in [lo, hi) */
static float *rand_floats(size_t n, double lo, double hi, uint64_t seed) {
  float *x = malloc(n * sizeof *x);
  for (size_t i = 0; i < n; i++) x[i] = (float)(lo + (hi - lo) * uniform01(&seed));
  return x;
}
static float *copy_floats(const float *x, size_t n) {
  float *y = malloc(n * sizeof *y);
  memcpy(y, x, n * sizeof *y);
  return y;
}
/* Ids in [0, V), a third of them one frequent id (a byte vocabulary's space),
 * so that one bucket of the embedding gradient is long. */
static int *rand_tokens(size_t n, int V, uint64_t seed) {
  int *t = malloc(n * sizeof *t);
  for (size_t i = 0; i < n; i++)
    t[i] = uniform01(&seed) < 1.0 / 3 ? V / 8 : (int)(uniform01(&seed) * V) % V;
  return t;
}

/* The worst relative error seen per function, for the summary in main. */
static struct {
  const char *fn;
  double worst;
} worst_table[32];
static int n_worst;

/* max |gpu - cpu| / max |cpu|, printed, recorded, and held under 1e-5. */
static void check_close(const char *fn, const char *what, const char *shape, const float *gpu,
                        const float *cpu, size_t n) {
  double d = 0, m = 0;
  size_t differ = 0;
  for (size_t i = 0; i < n; i++) {
    double e = fabs((double)gpu[i] - cpu[i]);
    if (!(e <= d)) d = e; /* NaN too */
    m = fmax(m, fabs((double)cpu[i]));
    differ += memcmp(&gpu[i], &cpu[i], sizeof(float)) != 0;
  }
  const double rel = m > 0 ? d / m : d;
  printf("  %-26s %-8s %-28s rel err %.3g (%zu of %zu differ)\n", fn, what, shape, rel, differ, n);
  int k = 0;
  while (k < n_worst && strcmp(worst_table[k].fn, fn)) k++;
  if (k == n_worst && n_worst < 32) {
    worst_table[k].fn = fn;
    worst_table[k].worst = 0;
    n_worst++;
  }
  if (k < n_worst && !(rel <= worst_table[k].worst)) worst_table[k].worst = rel;
  ck_assert_msg(rel < 1e-5, "%s %s (%s): relative error %g", fn, what, shape, rel);
}

/* After a launch: its error, then n floats of dev copied into g and compared
 * with cpu (check_close). */
static void check_launch(const char *fn, const char *what, const char *shape, float *g,
                         const float *dev, const float *cpu, size_t n) {
  LAUNCHED();
  to_host(g, dev, n * sizeof(float));
  check_close(fn, what, shape, g, cpu, n);
}

static void check_same_bits(const char *fn, const char *what, const void *a, const void *b,
                            size_t bytes) {
  ck_assert_msg(!memcmp(a, b, bytes), "%s %s: two runs differ", fn, what);
}

typedef struct {
  const char *name;
  int B, T, C, NH, NKV, H, V;
} shape;

static const shape shapes[] = {
    {"tiny B4 T64 C128 H384", 4, 64, 128, 4, 4, 384, 256},
    {"gqa B3 T50 C96 NH6 NKV2", 3, 50, 96, 6, 2, 260, 100},
    {"120m slice B2 T1024 C768", 2, 1024, 768, 12, 12, 2048, 256},
};
enum { NSHAPES = sizeof shapes / sizeof shapes[0] };

/* ------------------------------------------------------------- encoder */

START_TEST(encoder) {
  for (int si = 0; si < NSHAPES; si++) {
    const shape *sh = &shapes[si];
    const int N = sh->B * sh->T, C = sh->C, V = sh->V;
    const size_t NC = (size_t)N * C, VC = (size_t)V * C;
    int *tokens = rand_tokens(N, V, 1 + si);
    float *wte = rand_floats(VC, -1, 1, 2), *out = malloc(NC * sizeof(float)),
          *g = malloc(NC * sizeof(float));
    encoder_forward(out, tokens, wte, N, C);
    int *d_tokens = dev_from(tokens, N * sizeof(int));
    float *d_wte = dev_from(wte, VC * sizeof(float)), *d_out = dev_alloc(NC * sizeof(float));
    gpu_encoder_forward(d_out, d_tokens, d_wte, N, C, 0);
    check_launch("encoder_forward", "out", sh->name, g, d_out, out, NC);

    /* backward into a gradient that is not zero: the GPU must add, as the CPU does */
    float *dout = rand_floats(NC, -1, 1, 3), *dwte0 = rand_floats(VC, -1, 1, 4);
    float *dwte = copy_floats(dwte0, VC), *g1 = malloc(VC * sizeof(float)),
          *g2 = malloc(VC * sizeof(float));
    encoder_backward(dwte, dout, tokens, N, C);
    int *start = malloc((V + 1) * sizeof(int)), *pos = malloc(N * sizeof(int));
    gpu_token_buckets(tokens, N, V, start, pos);
    ck_assert_int_eq(start[0], 0);
    ck_assert_int_eq(start[V], N);
    for (int v = 0; v < V; v++)
      for (int k = start[v]; k < start[v + 1]; k++) {
        ck_assert_int_eq(tokens[pos[k]], v);
        if (k > start[v]) ck_assert_int_lt(pos[k - 1], pos[k]);
      }
    int *d_start = dev_from(start, (V + 1) * sizeof(int)), *d_pos = dev_from(pos, N * sizeof(int));
    float *d_dout = dev_from(dout, NC * sizeof(float)), *d_dwte = dev_from(dwte0, VC * sizeof(float));
    gpu_encoder_backward(d_dwte, d_dout, d_start, d_pos, V, C, 0);
    LAUNCHED();
    to_host(g1, d_dwte, VC * sizeof(float));
    check_close("encoder_backward", "dwte+=", sh->name, g1, dwte, VC);
    to_dev(d_dwte, dwte0, VC * sizeof(float));
    gpu_encoder_backward(d_dwte, d_dout, d_start, d_pos, V, C, 0);
    LAUNCHED();
    to_host(g2, d_dwte, VC * sizeof(float));
    check_same_bits("encoder_backward", "dwte", g1, g2, VC * sizeof(float));

    CU(cudaFree(d_tokens)); CU(cudaFree(d_wte)); CU(cudaFree(d_out)); CU(cudaFree(d_start));
    CU(cudaFree(d_pos)); CU(cudaFree(d_dout)); CU(cudaFree(d_dwte));
    free(tokens); free(wte); free(out); free(g); free(dout); free(dwte0); free(dwte); free(g1);
    free(g2); free(start); free(pos);
  }
}
END_TEST

/* ------------------------------------------------------------- RMSNorm */

static size_t bf16_images_differ(const uint16_t *a, const uint16_t *b, size_t m);

static void rmsnorm_case(const char *name, int N, int C, uint64_t seed) {
  const size_t NC = (size_t)N * C;
  float *inp = rand_floats(NC, -2, 2, seed), *w = rand_floats(C, 0.5, 1.5, seed + 1);
  float *out = malloc(NC * sizeof(float)), *rstd = malloc(N * sizeof(float));
  float *g_out = malloc(NC * sizeof(float)), *g_rstd = malloc(N * sizeof(float));
  float *g_out2 = malloc(NC * sizeof(float)), *g_rstd2 = malloc(N * sizeof(float));
  rmsnorm_forward(out, rstd, inp, w, N, C);
  float *d_inp = dev_from(inp, NC * sizeof(float)), *d_w = dev_from(w, C * sizeof(float));
  float *d_out = dev_alloc(NC * sizeof(float)), *d_rstd = dev_alloc(N * sizeof(float));
  gpu_rmsnorm_forward(d_out, d_rstd, d_inp, d_w, N, C, NULL, 0);
  LAUNCHED();
  to_host(g_out, d_out, NC * sizeof(float));
  to_host(g_rstd, d_rstd, N * sizeof(float));
  check_close("rmsnorm_forward", "out", name, g_out, out, NC);
  check_close("rmsnorm_forward", "rstd", name, g_rstd, rstd, N);
  /* again with every row read from memory at each pass (the kernels for any
   * C): the same bits as rows held in registers, and as a second run */
  gpu_rmsnorm_set_rows_in_registers(false);
  gpu_rmsnorm_forward(d_out, d_rstd, d_inp, d_w, N, C, NULL, 0);
  LAUNCHED();
  to_host(g_out2, d_out, NC * sizeof(float));
  to_host(g_rstd2, d_rstd, N * sizeof(float));
  check_same_bits("rmsnorm_forward", "out", g_out, g_out2, NC * sizeof(float));
  check_same_bits("rmsnorm_forward", "rstd", g_rstd, g_rstd2, N * sizeof(float));
  gpu_rmsnorm_set_rows_in_registers(true);

  /* the residual add in RMSNorm's pass (gpu_add_rmsnorm_forward) against
   * gpu_add_inplace, then the RMSNorm: the sums, out and rstd bit for bit,
   * rows in registers and not */
  {
    float *add = rand_floats(NC, -3, 3, seed + 5), *s1 = malloc(NC * sizeof(float)),
          *s2 = malloc(NC * sizeof(float));
    float *d_add = dev_from(add, NC * sizeof(float)), *d_x1 = dev_from(inp, NC * sizeof(float)),
          *d_x2 = dev_from(inp, NC * sizeof(float)), *d_o2 = dev_alloc(NC * sizeof(float)),
          *d_r2 = dev_alloc(N * sizeof(float));
    gpu_add_inplace(d_x1, d_add, NC, 0);
    gpu_rmsnorm_forward(d_out, d_rstd, d_x1, d_w, N, C, NULL, 0);
    for (int regs = 1; regs >= 0; regs--) {
      gpu_rmsnorm_set_rows_in_registers(regs);
      to_dev(d_x2, inp, NC * sizeof(float));
      gpu_add_rmsnorm_forward(d_o2, d_r2, d_x2, d_add, d_w, N, C, NULL, 0);
      LAUNCHED();
      to_host(s1, d_x1, NC * sizeof(float));
      to_host(s2, d_x2, NC * sizeof(float));
      check_same_bits("add_rmsnorm_forward", "sum", s1, s2, NC * sizeof(float));
      to_host(s1, d_out, NC * sizeof(float));
      to_host(s2, d_o2, NC * sizeof(float));
      check_same_bits("add_rmsnorm_forward", "out", s1, s2, NC * sizeof(float));
      to_host(s1, d_rstd, N * sizeof(float));
      to_host(s2, d_r2, N * sizeof(float));
      check_same_bits("add_rmsnorm_forward", "rstd", s1, s2, N * sizeof(float));
    }
    gpu_rmsnorm_set_rows_in_registers(true);
    CU(cudaFree(d_add)); CU(cudaFree(d_x1)); CU(cudaFree(d_x2)); CU(cudaFree(d_o2));
    CU(cudaFree(d_r2));
    free(add); free(s1); free(s2);
  }

  /* backward from the CPU's rstd, into nonzero dinp and dw: both accumulate */
  float *dout = rand_floats(NC, -1, 1, seed + 2), *dinp0 = rand_floats(NC, -1, 1, seed + 3);
  float *dw0 = rand_floats(C, -1, 1, seed + 4);
  float *dinp = copy_floats(dinp0, NC), *dw = copy_floats(dw0, C);
  rmsnorm_backward(dinp, dw, dout, inp, w, rstd, N, C);
  float *d_dout = dev_from(dout, NC * sizeof(float)), *d_dinp = dev_from(dinp0, NC * sizeof(float));
  float *d_dw = dev_from(dw0, C * sizeof(float));
  to_dev(d_rstd, rstd, N * sizeof(float));
  float *g_dw = malloc(C * sizeof(float)), *g_dw2 = malloc(C * sizeof(float));
  gpu_rmsnorm_backward(d_dinp, d_dw, d_dout, d_inp, d_w, d_rstd, N, C, NULL, 0);
  LAUNCHED();
  to_host(g_out, d_dinp, NC * sizeof(float));
  to_host(g_dw, d_dw, C * sizeof(float));
  check_close("rmsnorm_backward", "dinp+=", name, g_out, dinp, NC);
  check_close("rmsnorm_backward", "dw+=", name, g_dw, dw, C);
  to_dev(d_dinp, dinp0, NC * sizeof(float));
  to_dev(d_dw, dw0, C * sizeof(float));
  gpu_rmsnorm_set_rows_in_registers(false);
  gpu_rmsnorm_backward(d_dinp, d_dw, d_dout, d_inp, d_w, d_rstd, N, C, NULL, 0);
  LAUNCHED();
  gpu_rmsnorm_set_rows_in_registers(true);
  to_host(g_out2, d_dinp, NC * sizeof(float));
  to_host(g_dw2, d_dw, C * sizeof(float));
  check_same_bits("rmsnorm_backward", "dinp", g_out, g_out2, NC * sizeof(float));
  check_same_bits("rmsnorm_backward", "dw", g_dw, g_dw2, C * sizeof(float));
  /* with dinp's bf16 image (gpu_rmsnorm_backward_bf16), rows in registers
   * and not: dinp and dw as above, the image the bf16 rne fill's pass over
   * dinp, bit for bit (NaN, infinity and overflow planted in dout's rows),
   * the amax folded that of the image's values */
  {
    float *dout2 = copy_floats(dout, NC);
    dout2[1] = NAN, dout2[C + 2] = INFINITY, dout2[2 * C + 3] = 3e38f;
    float *d_dout2 = dev_from(dout2, NC * sizeof(float));
    uint16_t *d_img = dev_alloc(NC * 2), *d_ref = dev_alloc(NC * 2);
    unsigned *d_amax2 = dev_alloc(2 * sizeof(unsigned));
    float *g_out3 = malloc(NC * sizeof(float)), *g_dw3 = malloc(C * sizeof(float));
    exmy_format bf;
    ck_assert_int_eq(exmy_format_parse("bf16", &bf), 0);
    const exmy_rounding_opts rne = {0};
    for (int regs = 1; regs >= 0; regs--) {
      gpu_rmsnorm_set_rows_in_registers(regs);
      to_dev(d_dinp, dinp0, NC * sizeof(float));
      to_dev(d_dw, dw0, C * sizeof(float));
      gpu_rmsnorm_backward(d_dinp, d_dw, d_dout2, d_inp, d_w, d_rstd, N, C, NULL, 0);
      CU(exmy_cuda_quantize_bf16(&bf, &rne, d_dinp, d_ref, NC, 0));
      LAUNCHED();
      to_host(g_out2, d_dinp, NC * sizeof(float));
      to_host(g_dw2, d_dw, C * sizeof(float));
      to_dev(d_dinp, dinp0, NC * sizeof(float));
      to_dev(d_dw, dw0, C * sizeof(float));
      CU(cudaMemset(d_amax2, 0, 2 * sizeof(unsigned)));
      gpu_rmsnorm_backward_bf16(d_dinp, d_img, d_dw, d_dout2, d_inp, d_w, d_rstd, N, C, d_amax2,
                                0);
      CU(gpu_bf16_storage_amax(d_ref, NC, d_amax2 + 1, 0)); /* of the reference image */
      LAUNCHED();
      to_host(g_out3, d_dinp, NC * sizeof(float));
      to_host(g_dw3, d_dw, C * sizeof(float));
      check_same_bits("rmsnorm_backward_bf16", "dinp", g_out2, g_out3, NC * sizeof(float));
      check_same_bits("rmsnorm_backward_bf16", "dw", g_dw2, g_dw3, C * sizeof(float));
      unsigned amaxes[2];
      to_host(amaxes, d_amax2, sizeof amaxes);
      ck_assert_msg(amaxes[0] == amaxes[1], "rmsnorm_backward_bf16 amax %08x, the image's %08x",
                    amaxes[0], amaxes[1]);
      const size_t d = bf16_images_differ(d_img, d_ref, NC);
      printf("  %-26s %-12s rows in registers %d: %zu of %zu image values differ\n",
             "rmsnorm_backward_bf16", name, regs, d, NC);
      ck_assert_msg(d == 0, "rmsnorm_backward_bf16 %s (registers %d): %zu images differ", name,
                    regs, d);
    }
    gpu_rmsnorm_set_rows_in_registers(true);
    CU(cudaFree(d_dout2)); CU(cudaFree(d_img)); CU(cudaFree(d_ref)); CU(cudaFree(d_amax2));
    free(dout2); free(g_out3); free(g_dw3);
  }

  CU(cudaFree(d_inp)); CU(cudaFree(d_w)); CU(cudaFree(d_out)); CU(cudaFree(d_rstd));
  CU(cudaFree(d_dout)); CU(cudaFree(d_dinp)); CU(cudaFree(d_dw));
  free(inp); free(w); free(out); free(rstd); free(g_out); free(g_rstd); free(g_out2);
  free(g_rstd2); free(dout); free(dinp0); free(dw0); free(dinp); free(dw); free(g_dw); free(g_dw2);
}

START_TEST(rmsnorm) {
  for (int si = 0; si < NSHAPES; si++)
    rmsnorm_case(shapes[si].name, shapes[si].B * shapes[si].T, shapes[si].C, 10 + 10 * si);
  /* many row chunks of the weight gradient, the last one partial */
  rmsnorm_case("N4100 C768", 4100, 768, 100);
  /* rows in registers of each size (C 256: 8 a lane; 1000: 32, a partial
   * last column), and beyond them (C 2048: the loop kernels both times) */
  rmsnorm_case("N300 C256", 300, 256, 110);
  rmsnorm_case("N300 C1000", 300, 1000, 120);
  rmsnorm_case("N300 C2048", 300, 2048, 130);
}
END_TEST

/* ---------------------------------------------------------------- RoPE */

/* RoPE's tables (base 10000) for T positions and head size hs, on the host
 * (cs, sn) and copied to the device (d_cs, d_sn). */
typedef struct {
  float *cs, *sn, *d_cs, *d_sn;
} rope_table_pair;

static rope_table_pair rope_tables_on_both(int T, int hs) {
  const size_t bytes = (size_t)T * hs / 2 * sizeof(float);
  rope_table_pair t = {malloc(bytes), malloc(bytes), NULL, NULL};
  rope_tables(t.cs, t.sn, T, hs, 10000.0);
  t.d_cs = dev_from(t.cs, bytes);
  t.d_sn = dev_from(t.sn, bytes);
  return t;
}

static void rope_tables_free(rope_table_pair t) {
  CU(cudaFree(t.d_cs));
  CU(cudaFree(t.d_sn));
  free(t.cs);
  free(t.sn);
}

START_TEST(rope) {
  for (int si = 0; si < NSHAPES; si++) {
    const shape *sh = &shapes[si];
    const int B = sh->B, T = sh->T, hs = sh->C / sh->NH;
    const rope_table_pair rt = rope_tables_on_both(T, hs);
    const float *cs = rt.cs, *sn = rt.sn, *d_cs = rt.d_cs, *d_sn = rt.d_sn;
    const int heads[2] = {sh->NH, sh->NKV}; /* q, then k */
    for (int q = 0; q < 2; q++) {
      const int nh = heads[q];
      const size_t n = (size_t)B * T * nh * hs;
      float *x = rand_floats(n, -2, 2, 20 + si), *cpu = copy_floats(x, n), *g = malloc(n * sizeof(float));
      float *d_x = dev_from(x, n * sizeof(float));
      rope_forward(cpu, cs, sn, B, T, nh, hs);
      gpu_rope_forward(d_x, d_cs, d_sn, B, T, nh, hs, 0);
      LAUNCHED();
      to_host(g, d_x, n * sizeof(float));
      check_close("rope_forward", q ? "k" : "q", sh->name, g, cpu, n);
      memcpy(cpu, x, n * sizeof(float));
      to_dev(d_x, x, n * sizeof(float));
      rope_backward(cpu, cs, sn, B, T, nh, hs);
      gpu_rope_backward(d_x, d_cs, d_sn, B, T, nh, hs, NULL, 0);
      LAUNCHED();
      to_host(g, d_x, n * sizeof(float));
      check_close("rope_backward", q ? "dk" : "dq", sh->name, g, cpu, n);
      CU(cudaFree(d_x));
      free(x); free(cpu); free(g);
    }
    rope_tables_free(rt);
  }
}
END_TEST

/* ----------------------------------------- amaxes folded by the producers */

/* NaN at i, +inf at i + 1, -inf at i + 2, for x[0..n) with n > i + 2. */
static void plant_specials(float *x, size_t n, size_t i) {
  ck_assert(i + 2 < n);
  x[i] = NAN;
  x[i + 1] = INFINITY;
  x[i + 2] = -INFINITY;
}

/* The layers that fold their output's amax as they write it (layers.h's
 * `amax`): RMSNorm's forward (out) and backward (dinp after +=), RoPE's
 * backward (dx), SwiGLU's forward (out), each launched twice from the same
 * inputs, without and with the word: the outputs bit-identical, and the word
 * the finite amax of the output (NaN and infinities planted in the inputs,
 * which the output carries and the amax must leave out).  Shapes: the three
 * of this file, odd sizes and whole 120m rows included. */
enum { FOLD_RMSNORM_FWD, FOLD_RMSNORM_BWD, FOLD_ROPE_BWD, FOLD_SWIGLU_FWD, FOLD_LAYERS };
static const char *const fold_names[FOLD_LAYERS] = {"rmsnorm_forward", "rmsnorm_backward",
                                                    "rope_backward", "swiglu_forward"};

START_TEST(producers_fold_amax) {
  unsigned *d_amax = dev_alloc(sizeof(unsigned));
  for (int si = 0; si < NSHAPES; si++) {
    const shape *sh = &shapes[si];
    const int B = sh->B, T = sh->T, C = sh->C, N = B * T, hs = C / sh->NH;
    const size_t NC = (size_t)N * C, NH_ = (size_t)N * sh->H;
    /* inputs: RMSNorm's (inp, w, dout, dinp0, rstd), RoPE's (x, tables), SwiGLU's (h1, h3) */
    float *inp = rand_floats(NC, -2, 2, 300 + si), *w = rand_floats(C, 0.5, 1.5, 310 + si);
    float *dout = rand_floats(NC, -1, 1, 320 + si), *dinp0 = rand_floats(NC, -1, 1, 330 + si);
    float *h1 = rand_floats(NH_, -10, 10, 340 + si), *h3 = rand_floats(NH_, -2, 2, 350 + si);
    plant_specials(inp, NC, (size_t)C + 5);    /* a NaN row and an inf row of ln */
    plant_specials(dinp0, NC, NC / 2);         /* carried through dinp += */
    plant_specials(dout, NC, NC - 7);          /* RoPE's input */
    plant_specials(h3, NH_, NH_ / 3);          /* out = silu(h1) h3 */
    float *cs = malloc((size_t)T * hs / 2 * sizeof(float)),
          *sn = malloc((size_t)T * hs / 2 * sizeof(float));
    rope_tables(cs, sn, T, hs, 10000.0);
    float *d_inp = dev_from(inp, NC * sizeof(float)), *d_w = dev_from(w, C * sizeof(float));
    float *d_dout = dev_from(dout, NC * sizeof(float)), *d_out = dev_alloc(NH_ * sizeof(float));
    float *d_rstd = dev_alloc(N * sizeof(float)), *d_dw = dev_alloc(C * sizeof(float));
    float *d_h1 = dev_from(h1, NH_ * sizeof(float)), *d_h3 = dev_from(h3, NH_ * sizeof(float));
    float *d_cs = dev_from(cs, (size_t)T * hs / 2 * sizeof(float)),
          *d_sn = dev_from(sn, (size_t)T * hs / 2 * sizeof(float));
    float *got[2] = {malloc(NH_ * sizeof(float)), malloc(NH_ * sizeof(float))};
    gpu_rmsnorm_forward(d_out, d_rstd, d_inp, d_w, N, C, NULL, 0); /* rstd for the backward */
    LAUNCHED();
    for (int k = 0; k < FOLD_LAYERS; k++) {
      const size_t n = k == FOLD_SWIGLU_FWD ? NH_ : NC;
      for (int with = 0; with < 2; with++) {
        unsigned *amax = with ? d_amax : NULL;
        CU(cudaMemset(d_amax, 0, sizeof(unsigned)));
        CU(cudaMemset(d_dw, 0, C * sizeof(float)));
        switch (k) {
          case FOLD_RMSNORM_FWD:
            gpu_rmsnorm_forward(d_out, d_rstd, d_inp, d_w, N, C, amax, 0);
            break;
          case FOLD_RMSNORM_BWD:
            to_dev(d_out, dinp0, NC * sizeof(float));
            gpu_rmsnorm_backward(d_out, d_dw, d_dout, d_inp, d_w, d_rstd, N, C, amax, 0);
            break;
          case FOLD_ROPE_BWD:
            to_dev(d_out, dout, NC * sizeof(float));
            gpu_rope_backward(d_out, d_cs, d_sn, B, T, sh->NH, hs, amax, 0);
            break;
          default:
            gpu_swiglu_forward(d_out, d_h1, d_h3, NH_, amax, 0);
            break;
        }
        LAUNCHED();
        to_host(got[with], d_out, n * sizeof(float));
      }
      unsigned word;
      to_host(&word, d_amax, sizeof word);
      const unsigned want = finite_amax_bits(got[1], n);
      float wf, gf;
      memcpy(&wf, &want, sizeof wf);
      memcpy(&gf, &word, sizeof gf);
      printf("  %-26s %-28s amax folded %.9g, of the output %.9g\n", fold_names[k], sh->name, gf,
             wf);
      check_same_bits(fold_names[k], "output with and without the amax", got[0], got[1],
                      n * sizeof(float));
      ck_assert_msg(word == want, "%s (%s): folded amax %08x, the output's finite amax %08x",
                    fold_names[k], sh->name, word, want);
    }
    CU(cudaFree(d_inp)); CU(cudaFree(d_w)); CU(cudaFree(d_dout)); CU(cudaFree(d_out));
    CU(cudaFree(d_rstd)); CU(cudaFree(d_dw)); CU(cudaFree(d_h1)); CU(cudaFree(d_h3));
    CU(cudaFree(d_cs)); CU(cudaFree(d_sn));
    free(inp); free(w); free(dout); free(dinp0); free(h1); free(h3); free(cs); free(sn);
    free(got[0]); free(got[1]);
  }
  CU(cudaFree(d_amax));
}
END_TEST

/* ------------------------------------------------- SwiGLU, residual add */

START_TEST(swiglu_and_add) {
  for (int si = 0; si < NSHAPES; si++) {
    const shape *sh = &shapes[si];
    const size_t n = (size_t)sh->B * sh->T * sh->H;
    /* wide enough for the sigmoid's tails */
    float *h1 = rand_floats(n, -10, 10, 30 + si), *h3 = rand_floats(n, -2, 2, 40 + si);
    float *dout = rand_floats(n, -1, 1, 50 + si);
    float *out = malloc(n * sizeof(float)), *dh1 = malloc(n * sizeof(float)),
          *dh3 = malloc(n * sizeof(float)), *g = malloc(n * sizeof(float));
    float *d_h1 = dev_from(h1, n * sizeof(float)), *d_h3 = dev_from(h3, n * sizeof(float));
    float *d_dout = dev_from(dout, n * sizeof(float)), *d_out = dev_alloc(n * sizeof(float));
    float *d_dh1 = dev_alloc(n * sizeof(float)), *d_dh3 = dev_alloc(n * sizeof(float));
    swiglu_forward(out, h1, h3, n);
    swiglu_backward(dh1, dh3, dout, h1, h3, n);
    gpu_swiglu_forward(d_out, d_h1, d_h3, n, NULL, 0);
    check_launch("swiglu_forward", "out", sh->name, g, d_out, out, n);
    gpu_swiglu_backward(d_dh1, d_dh3, d_dout, d_h1, d_h3, n, 0);
    check_launch("swiglu_backward", "dh1", sh->name, g, d_dh1, dh1, n);
    to_host(g, d_dh3, n * sizeof(float));
    check_close("swiglu_backward", "dh3", sh->name, g, dh3, n);

    /* Smooth-SwiGLU per token row (model.h): the row scales are exact maxima,
     * so the GPU's differ from the CPU's only through the sigmoid, as above */
    {
      const int N = sh->B * sh->T, H = sh->H, C = sh->C;
      float *dres = rand_floats((size_t)N * C, -1, 1, 70 + si), *dy = malloc((size_t)N * C * sizeof(float));
      float *d_dres = dev_from(dres, (size_t)N * C * sizeof(float)), *d_dy = dev_alloc((size_t)N * C * sizeof(float));
      float *gc = malloc((size_t)N * C * sizeof(float));
      h3[5] *= 64.0f; /* one row with an outlier */
      CU(cudaMemcpy(d_h3, h3, n * sizeof(float), cudaMemcpyHostToDevice));
      smooth_swiglu_forward(out, h1, h3, N, H);
      smooth_swiglu_backward(dh1, dh3, dout, h1, h3, N, H);
      smooth_swiglu_scale_rows(dy, dres, h3, N, C, H);
      gpu_smooth_swiglu_forward(d_out, d_h1, d_h3, N, H, 0);
      check_launch("smooth_swiglu_forward", "out", sh->name, g, d_out, out, n);
      gpu_smooth_swiglu_backward(d_dh1, d_dh3, d_dout, d_h1, d_h3, N, H, 0);
      check_launch("smooth_swiglu_backward", "dh1", sh->name, g, d_dh1, dh1, n);
      to_host(g, d_dh3, n * sizeof(float));
      check_close("smooth_swiglu_backward", "dh3", sh->name, g, dh3, n);
      /* the row scaling alone involves no sigmoid: bit for bit */
      gpu_smooth_swiglu_scale_rows(d_dy, d_dres, d_h3, N, C, H, 0);
      check_launch("smooth_swiglu_scale_rows", "dy", sh->name, gc, d_dy, dy, (size_t)N * C);
      ck_assert_msg(!memcmp(gc, dy, (size_t)N * C * sizeof(float)), "scale_rows differs (%s)", sh->name);
      CU(cudaFree(d_dres)); CU(cudaFree(d_dy));
      free(dres); free(dy); free(gc);
    }

    /* y += x (the residual add of model_forward) */
    gpu_add_inplace(d_h1, d_h3, n, 0);
    LAUNCHED();
    for (size_t i = 0; i < n; i++) h1[i] += h3[i];
    to_host(g, d_h1, n * sizeof(float));
    check_close("add_inplace", "y", sh->name, g, h1, n);

    CU(cudaFree(d_h1)); CU(cudaFree(d_h3)); CU(cudaFree(d_dout)); CU(cudaFree(d_out));
    CU(cudaFree(d_dh1)); CU(cudaFree(d_dh3));
    free(h1); free(h3); free(dout); free(out); free(dh1); free(dh3); free(g);
  }
}
END_TEST

/* y = a + x with x in bf16, and y = x (a NULL), on the vector path (every
 * pointer 16-byte aligned, n % 8 == 0) and the scalar one (pointers one
 * element in), out of place and in place: each output the host's float32
 * sum of the widened value (bits << 16), bit for bit, NaN for NaN.  x and a
 * hold both zeros (a bf16 -0 widened is -0; only a sum may make it +0),
 * infinities, NaN, subnormals and the largest finite values. */
static float widen_bf16(uint16_t b) {
  const uint32_t u = (uint32_t)b << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}
START_TEST(add_bf16) {
  enum { N = 4096 + 8 };
  static const uint16_t special_x[] = {0x0000, 0x8000, 0x7f80, 0xff80, 0x7fc0, 0x0001,
                                       0x8001, 0x7f7f, 0xff7f, 0x3f80, 0xbf80};
  static const float special_a[] = {0.0f, -0.0f, 1.0f, -1.0f, 3.4e38f, -3.4e38f, 1e-40f};
  uint16_t *x = malloc(N * sizeof(uint16_t));
  float *a = malloc(N * sizeof(float)), *want = malloc(N * sizeof(float)),
        *got = malloc(N * sizeof(float));
  uint64_t seed = 77;
  for (size_t i = 0; i < N; i++) {
    const uint64_t r = splitmix64(&seed);
    x[i] = i % 3 == 0 ? special_x[r % (sizeof special_x / sizeof *special_x)] : (uint16_t)r;
    a[i] = i % 5 == 0 ? special_a[(r >> 20) % (sizeof special_a / sizeof *special_a)]
                      : (float)(uniform01(&seed) * 8 - 4);
  }
  uint16_t *d_x = dev_alloc((N + 8) * sizeof(uint16_t));
  float *d_a = dev_alloc((N + 8) * sizeof(float)), *d_y = dev_alloc((N + 8) * sizeof(float));
  size_t negative_zeros = 0;
  for (int offset = 0; offset <= 1; offset++) {   /* 0: vector path, 1: scalar path */
    const size_t n = N - offset;                   /* n % 8 != 0 on the scalar path too */
    for (int mode = 0; mode < 3; mode++) {         /* 0: a NULL, 1: y = a + x, 2: in place */
      to_dev(d_x + offset, x, n * sizeof(uint16_t));
      to_dev(d_a + offset, a, n * sizeof(float));
      float *y = mode == 2 ? d_a + offset : d_y + offset;
      gpu_add_bf16(y, mode ? d_a + offset : NULL, d_x + offset, n, 0);
      LAUNCHED();
      to_host(got, y, n * sizeof(float));
      size_t bad = 0;
      for (size_t i = 0; i < n; i++) {
        want[i] = mode ? a[i] + widen_bf16(x[i]) : widen_bf16(x[i]);
        const bool same = isnan(want[i]) ? isnan(got[i]) : !memcmp(&want[i], &got[i], sizeof(float));
        bad += !same;
        if (!mode && x[i] == 0x8000) negative_zeros += !!signbit(got[i]);
      }
      ck_assert_msg(bad == 0, "add_bf16 (%s path, %s): %zu of %zu differ", offset ? "scalar" : "vector",
                    mode == 0 ? "a NULL" : mode == 1 ? "y = a + x" : "in place", bad, n);
    }
  }
  /* the property itself, counted: -0 widened stays -0 on both paths */
  ck_assert_msg(negative_zeros > 0, "no bf16 -0 among the inputs");
  printf("add_bf16: vector and scalar paths bit for bit; %zu bf16 -0 widened to -0\n", negative_zeros);
  CU(cudaFree(d_x)); CU(cudaFree(d_a)); CU(cudaFree(d_y));
  free(x); free(a); free(want); free(got);
}
END_TEST

/* gpu_sum_bf16 against gpu_add_bf16 chained (y = x0, then y += x1, y += x2):
 * one, two and three terms, vector and scalar paths, specials (NaN,
 * infinities of both signs, -0, subnormals, the largest finite values, so
 * that sums overflow): bit for bit. */
START_TEST(sum_bf16) {
  enum { N = 4096 + 8 };
  static const uint16_t special[] = {0x0000, 0x8000, 0x7f80, 0xff80, 0x7fc0, 0x0001,
                                     0x8001, 0x7f7f, 0xff7f, 0x3f80, 0xbf80};
  uint16_t *x[3];
  uint16_t *d_x[3];
  uint64_t seed = 91;
  for (int t = 0; t < 3; t++) {
    x[t] = malloc(N * sizeof(uint16_t));
    for (size_t i = 0; i < N; i++) {
      const uint64_t r = splitmix64(&seed);
      x[t][i] = i % 4 == (size_t)t ? special[r % (sizeof special / sizeof *special)] : (uint16_t)r;
    }
    d_x[t] = dev_alloc((N + 8) * sizeof(uint16_t));
  }
  float *want = malloc(N * sizeof(float)), *got = malloc(N * sizeof(float));
  float *d_w = dev_alloc((N + 8) * sizeof(float)), *d_y = dev_alloc((N + 8) * sizeof(float));
  for (int offset = 0; offset <= 1; offset++) { /* 0: vector path, 1: scalar path */
    const size_t n = N - offset;
    for (int t = 0; t < 3; t++) to_dev(d_x[t] + offset, x[t], n * sizeof(uint16_t));
    for (int terms = 1; terms <= 3; terms++) {
      gpu_add_bf16(d_w + offset, NULL, d_x[0] + offset, n, 0);
      for (int t = 1; t < terms; t++) gpu_add_bf16(d_w + offset, d_w + offset, d_x[t] + offset, n, 0);
      gpu_sum_bf16(d_y + offset, d_x[0] + offset, terms > 1 ? d_x[1] + offset : NULL,
                   terms > 2 ? d_x[2] + offset : NULL, n, 0);
      LAUNCHED();
      to_host(want, d_w + offset, n * sizeof(float));
      to_host(got, d_y + offset, n * sizeof(float));
      size_t bad = 0;
      for (size_t i = 0; i < n; i++)
        bad += isnan(want[i]) ? !isnan(got[i]) : memcmp(&want[i], &got[i], sizeof(float)) != 0;
      printf("  %-26s %s path, %d terms: %zu of %zu differ\n", "sum_bf16",
             offset ? "scalar" : "vector", terms, bad, n);
      ck_assert_msg(bad == 0, "sum_bf16 (%s path, %d terms): %zu of %zu differ",
                    offset ? "scalar" : "vector", terms, bad, n);
    }
  }
  for (int t = 0; t < 3; t++) {
    CU(cudaFree(d_x[t]));
    free(x[t]);
  }
  CU(cudaFree(d_w)); CU(cudaFree(d_y));
  free(want); free(got);
}
END_TEST

/* The fused SwiGLU backward's inputs for shape si: n elements (the shape's
 * N x H + 3, a ragged tail), with NaN, infinities, overflow and subnormals in
 * dout, on the host and on the device. */
static size_t swiglu_bf16_length(const shape *sh) { return (size_t)sh->B * sh->T * sh->H + 3; }
static void swiglu_bf16_inputs(int si, size_t n, float **h1, float **h3, float **dout,
                               float **d_h1, float **d_h3, float **d_dout) {
  *h1 = rand_floats(n, -10, 10, 80 + si), *h3 = rand_floats(n, -2, 2, 90 + si);
  *dout = rand_floats(n, -300, 300, 100 + si);
  float *d = *dout;
  d[0] = NAN, d[1] = INFINITY, d[2] = -3e38f, d[3] = 1e-40f, d[4] = -1e-42f;
  d[5] = 1e-8f, d[6] = 0.0f, (*h1)[7] = NAN, (*h3)[8] = -INFINITY;
  *d_h1 = dev_from(*h1, (n + 1) * sizeof(float)), *d_h3 = dev_from(*h3, (n + 1) * sizeof(float));
  *d_dout = dev_from(*dout, (n + 1) * sizeof(float));
}

/* How many of the m bf16 images at the device pointers a and b differ. */
static size_t bf16_images_differ(const uint16_t *a, const uint16_t *b, size_t m) {
  uint16_t *x = malloc(m * 2), *y = malloc(m * 2);
  to_host(x, a, m * 2);
  to_host(y, b, m * 2);
  size_t d = 0;
  for (size_t i = 0; i < m; i++) d += x[i] != y[i];
  free(x), free(y);
  return d;
}

/* The fills a producer's own image is tested against: the bf16 operand
 * path's formats in the modes the trainer fuses (rne, rz, sr, and a run-time
 * mode), saturating and flushing, unscaled and under delayed scaling. */
typedef struct {
  const char *format;
  exmy_rounding mode;
  bool saturate, flush, delayed;
} producer_case;
static const producer_case producer_cases[] = {
    {"bf16", EXMY_RNE, false, false, false}, {"e8m3", EXMY_RZ, false, false, false},
    {"e4m3", EXMY_RNE, true, false, false},  {"e5m2", EXMY_SR, false, false, false},
    {"e8m5", EXMY_SR, true, true, false},    {"e4m3", EXMY_RNA, false, false, false},
    {"e4m3", EXMY_RNE, true, false, true},   {"e5m2", EXMY_SR, true, false, true},
};
enum { N_PRODUCER_CASES = sizeof producer_cases / sizeof producer_cases[0] };

/* Case c's format (parsed) and rounding options, with its own seed and
 * offset. */
static exmy_rounding_opts producer_case_opts(size_t c, uint64_t seed, uint64_t offset,
                                             exmy_format *format) {
  ck_assert_int_eq(exmy_format_parse(producer_cases[c].format, format), 0);
  exmy_rounding_opts o = {0};
  o.mode = producer_cases[c].mode;
  o.saturate = producer_cases[c].saturate;
  o.flush_subnormals = producer_cases[c].flush;
  o.seed = seed;
  o.offset = offset;
  return o;
}

/* The fused SwiGLU backward's bf16 operand images against the unfused path
 * (the float32 gradients, then exmy_cuda_quantize_bf16 of each, the pass the
 * trainer's GEMM fill makes): bit for bit, in each rounding mode the trainer
 * fuses (rne, rz, sr with offsets that are not multiples of 4, a run-time
 * mode), on vector-aligned and unaligned tensors whose length is not a
 * multiple of 8, with NaN, infinities, overflow and subnormals in dout. */
START_TEST(swiglu_backward_bf16) {
  const producer_case *cases = producer_cases;
  for (int si = 0; si < NSHAPES; si++) {
    const shape *sh = &shapes[si];
    const size_t n = swiglu_bf16_length(sh);
    float *h1, *h3, *dout, *d_h1, *d_h3, *d_dout;
    swiglu_bf16_inputs(si, n, &h1, &h3, &dout, &d_h1, &d_h3, &d_dout);
    float *d_dh1 = dev_alloc(n * sizeof(float)), *d_dh3 = dev_alloc(n * sizeof(float));
    uint16_t *d_r1 = dev_alloc(n * 2), *d_r3 = dev_alloc(n * 2);
    uint16_t *d_y1 = dev_alloc((n + 8) * 2), *d_y3 = dev_alloc((n + 8) * 2);
    for (size_t c = 0; c < N_PRODUCER_CASES; c++) {
      if (cases[c].delayed) continue; /* scaled: swiglu_backward_bf16_scaled */
      exmy_format f;
      exmy_rounding_opts o1 = producer_case_opts(c, 0x5eed + c, 1001 + si, &f), o3 = o1;
      ck_assert(gpu_bf16_operand_serves(&f));
      o3.offset = o1.offset + n;
      /* aligned, then every tensor one element in (no 16-byte access) */
      for (int shift = 0; shift < 2; shift++) {
        const size_t m = n - shift;
        gpu_swiglu_backward(d_dh1, d_dh3, d_dout + shift, d_h1 + shift, d_h3 + shift, m, 0);
        CU(exmy_cuda_quantize_bf16(&f, &o1, d_dh1, d_r1, m, 0));
        CU(exmy_cuda_quantize_bf16(&f, &o3, d_dh3, d_r3, m, 0));
        CU(gpu_swiglu_backward_bf16(d_y1 + shift, d_y3 + shift, d_dout + shift, d_h1 + shift,
                                    d_h3 + shift, m, &f, &o1, &o3, NULL, NULL, 0));
        LAUNCHED();
        const size_t d1 = bf16_images_differ(d_y1 + shift, d_r1, m),
                     d3 = bf16_images_differ(d_y3 + shift, d_r3, m);
        printf("  %-26s %-8s %-28s %s mode %d shift %d: %zu, %zu of %zu differ\n",
               "swiglu_backward_bf16", "dh1 dh3", sh->name, cases[c].format, (int)cases[c].mode,
               shift, d1, d3, m);
        ck_assert_msg(d1 == 0 && d3 == 0, "swiglu_backward_bf16 %s mode %d (%s, shift %d): "
                      "%zu and %zu images differ from the unfused path",
                      cases[c].format, (int)cases[c].mode, sh->name, shift, d1, d3);
      }
    }
    /* what it does not serve: refused, nothing launched */
    {
      exmy_format g;
      exmy_rounding_opts o = {0}, o3 = {0};
      ck_assert_int_eq(exmy_format_parse("e3m2", &g), 0);
      ck_assert(!gpu_bf16_operand_serves(&g));
      ck_assert_int_eq(
          gpu_swiglu_backward_bf16(d_y1, d_y3, d_dout, d_h1, d_h3, n, &g, &o, &o, NULL, NULL, 0),
          cudaErrorInvalidValue);
      ck_assert_int_eq(exmy_format_parse("bf16", &g), 0);
      o3.mode = EXMY_RZ; /* options that differ beyond the offset */
      ck_assert_int_eq(
          gpu_swiglu_backward_bf16(d_y1, d_y3, d_dout, d_h1, d_h3, n, &g, &o, &o3, NULL, NULL, 0),
          cudaErrorInvalidValue);
    }
    CU(cudaFree(d_h1)); CU(cudaFree(d_h3)); CU(cudaFree(d_dout)); CU(cudaFree(d_dh1));
    CU(cudaFree(d_dh3)); CU(cudaFree(d_r1)); CU(cudaFree(d_r3)); CU(cudaFree(d_y1));
    CU(cudaFree(d_y3));
    free(h1); free(h3); free(dout);
  }
}
END_TEST

/* The delayed-scaling cases' states: n of them, each from one start whose
 * scale is not a power of two, with a history of DELAYED_HIST (2: it wraps
 * within three steps). */
enum { DELAYED_HIST = 2 };
static void delayed_states_start(exmy_cuda_delayed_state **st, int n) {
  float hist[DELAYED_HIST] = {0.5f, 3e3f};
  exmy_delayed_state start = {DELAYED_HIST, DELAYED_HIST, 1, hist, 0.37f, 1.0f / 0.37f};
  for (int k = 0; k < n; k++) {
    st[k] = exmy_cuda_delayed_state_new(DELAYED_HIST);
    ck_assert(st[k] != NULL);
    CU(exmy_cuda_delayed_state_upload(st[k], &start));
  }
}
/* Whether two states differ anywhere: history, counters, scale and 1/s. */
static int delayed_states_differ(exmy_cuda_delayed_state *a, exmy_cuda_delayed_state *b) {
  float ha[DELAYED_HIST], hb[DELAYED_HIST];
  exmy_delayed_state sa = {DELAYED_HIST, 0, 0, ha, 0, 0}, sb = {DELAYED_HIST, 0, 0, hb, 0, 0};
  CU(exmy_cuda_delayed_state_download(a, &sa));
  CU(exmy_cuda_delayed_state_download(b, &sb));
  return sa.count != sb.count || sa.latest != sb.latest ||
         memcmp(&sa.scale, &sb.scale, sizeof(float)) ||
         memcmp(&sa.scale_inv, &sb.scale_inv, sizeof(float)) || memcmp(ha, hb, sizeof ha);
}

/* The fused SwiGLU forward's bf16 operand image (W2's X) against the
 * unfused path (gpu_swiglu_forward's float32 hg, then the fill's pass):
 * unscaled in the backward test's modes (exmy_cuda_quantize_bf16), and under
 * delayed scaling over three steps from a state whose scale is not a power
 * of two (exmy_cuda_quantize_delayed_bf16 against exmy_cuda_delayed_begin,
 * the fused kernel folding the amax, exmy_cuda_delayed_end): images, scales
 * and whole states bit for bit, aligned and one element in, with NaN,
 * infinities, an overflowing product and subnormal outputs planted. */
START_TEST(swiglu_forward_bf16) {
  const producer_case *cases = producer_cases;
  enum { STEPS = 3 };
  for (int si = 0; si < NSHAPES; si++) {
    const shape *sh = &shapes[si];
    const size_t n = swiglu_bf16_length(sh);
    float *h1, *h3, *dout, *d_h1, *d_h3, *d_dout;
    swiglu_bf16_inputs(si, n, &h1, &h3, &dout, &d_h1, &d_h3, &d_dout);
    /* an overflowing product and subnormal outputs */
    h1[9] = 5.0f, h3[9] = 3e38f, h1[10] = 1.0f, h3[10] = 1e-40f, h1[11] = -3.0f, h3[11] = -1e-39f;
    to_dev(d_h1, h1, n * sizeof(float));
    to_dev(d_h3, h3, n * sizeof(float));
    float *d_hg = dev_alloc(n * sizeof(float)), *d_s = dev_alloc(2 * sizeof(float));
    uint16_t *d_r = dev_alloc(n * 2), *d_y = dev_alloc((n + 8) * 2);
    for (size_t c = 0; c < N_PRODUCER_CASES; c++) {
      exmy_format f;
      const exmy_rounding_opts o = producer_case_opts(c, 0x5eed + c, 3001 + si, &f);
      for (int shift = 0; shift < 2; shift++) {
        const size_t m = n - shift;
        const float *a = d_h1 + shift, *b = d_h3 + shift;
        uint16_t *y = d_y + shift;
        exmy_cuda_delayed_state *st[2] = {NULL, NULL};
        if (cases[c].delayed) delayed_states_start(st, 2);
        for (int step = 0; step < (cases[c].delayed ? STEPS : 1); step++) {
          gpu_swiglu_forward(d_hg, a, b, m, NULL, 0);
          int states_differ = 0;
          float used[2] = {0, 0};
          if (!cases[c].delayed) {
            CU(exmy_cuda_quantize_bf16(&f, &o, d_hg, d_r, m, 0));
            CU(gpu_swiglu_forward_bf16(y, a, b, m, &f, &o, NULL, 0));
          } else {
            CU(exmy_cuda_quantize_delayed_bf16(&f, &o, 1, true, false, st[0], d_hg, d_r, m, d_s,
                                               0));
            gpu_bf16_scaling sc = {0};
            CU(exmy_cuda_delayed_begin(st[1], &sc.scale_inv, &sc.amax_bits, 0));
            CU(gpu_swiglu_forward_bf16(y, a, b, m, &f, &o, &sc, 0));
            CU(exmy_cuda_delayed_end(&f, 1, true, false, st[1], d_s + 1, 0));
            LAUNCHED();
            to_host(used, d_s, sizeof used);
            states_differ = delayed_states_differ(st[0], st[1]);
          }
          LAUNCHED();
          const size_t d = bf16_images_differ(y, d_r, m);
          printf("  %-26s %-8s %-28s %s mode %d shift %d step %d: %zu of %zu differ%s\n",
                 "swiglu_forward_bf16", cases[c].delayed ? "delayed" : "plain", sh->name,
                 cases[c].format, (int)cases[c].mode, shift, step, d, m,
                 states_differ ? ", states differ" : "");
          ck_assert_msg(d == 0 && states_differ == 0 && !memcmp(&used[0], &used[1], sizeof(float)),
                        "swiglu_forward_bf16 %s mode %d%s (%s, shift %d, step %d): %zu images "
                        "differ, scales %g / %g, states differ %d",
                        cases[c].format, (int)cases[c].mode, cases[c].delayed ? " delayed" : "",
                        sh->name, shift, step, d, used[0], used[1], states_differ);
        }
        for (int k = 0; k < 2; k++)
          if (st[k]) exmy_cuda_delayed_state_free(st[k]);
      }
    }
    /* what it does not serve: refused, nothing launched */
    exmy_format g;
    exmy_rounding_opts o = {0};
    ck_assert_int_eq(exmy_format_parse("e3m2", &g), 0);
    ck_assert_int_eq(gpu_swiglu_forward_bf16(d_y, d_h1, d_h3, n, &g, &o, NULL, 0),
                     cudaErrorInvalidValue);
    CU(cudaFree(d_h1)); CU(cudaFree(d_h3)); CU(cudaFree(d_dout)); CU(cudaFree(d_hg));
    CU(cudaFree(d_s)); CU(cudaFree(d_r)); CU(cudaFree(d_y));
    free(h1); free(h3); free(dout);
  }
}
END_TEST

/* SwiGLU's forward and backward on bf16 storage (their sigmoid looked up
 * in a table of every bf16 value) against the float32-storage kernels of bf16
 * activations (the sigmoid computed), with every bf16 bit pattern as h1 four
 * times over against random bf16 h3 and dout: bit for bit (a NaN for a
 * NaN); the backward with and without its hg output (the forward's); the
 * amaxes they fold (out's; dh1's and dh3's) those of the stored values. */
START_TEST(swiglu_bf16_storage_every_input) {
  enum { N = 4 << 16 };
  uint16_t *h[3];
  float *w[3];
  uint64_t seed = 123;
  for (int t = 0; t < 3; t++) {
    h[t] = malloc(N * 2), w[t] = malloc(N * sizeof(float));
    for (size_t i = 0; i < N; i++) {
      h[t][i] = t == 0 ? (uint16_t)i : (uint16_t)(splitmix64(&seed) & 0xBFFF); /* |x| < 2 */
      const uint32_t u = (uint32_t)h[t][i] << 16;
      memcpy(&w[t][i], &u, 4);
    }
  }
  uint16_t *d_h[3], *d_o[3];
  float *d_w[3], *d_f[3];
  for (int t = 0; t < 3; t++) d_h[t] = dev_from(h[t], N * 2), d_w[t] = dev_from(w[t], N * 4);
  for (int t = 0; t < 3; t++) d_o[t] = dev_alloc(N * 2), d_f[t] = dev_alloc(N * 4);
  uint16_t *got = malloc(N * 2);
  float *want = malloc(N * 4);
  unsigned *d_amax = dev_alloc(2 * sizeof(unsigned));
  /* pass 0 the forward; 1 the backward; 2 the backward writing hg too */
  for (int pass = 0; pass < 3; pass++) {
    const int backward = pass > 0, outs = pass == 0 ? 1 : pass == 1 ? 2 : 3;
    for (int t = 0; t < 3; t++) CU(cudaMemset(d_o[t], 0xFF, N * 2)); /* NaN: none left over */
    CU(cudaMemset(d_amax, 0, 2 * sizeof(unsigned)));
    if (backward) {
      gpu_swiglu_backward_act_bf16(d_f[0], d_f[1], d_w[2], d_w[0], d_w[1], N, 0);
      CU(gpu_swiglu_backward_bf16_storage(d_o[0], d_o[1], pass == 2 ? d_o[2] : NULL, d_h[2],
                                          d_h[0], d_h[1], N, d_amax, d_amax + 1, 0));
      /* hg: the forward's float32-storage kernel */
      gpu_swiglu_forward_act_bf16(d_f[2], d_w[0], d_w[1], N, NULL, 0);
    } else {
      gpu_swiglu_forward_act_bf16(d_f[0], d_w[0], d_w[1], N, NULL, 0);
      CU(gpu_swiglu_forward_bf16_storage(d_o[0], d_h[0], d_h[1], N, d_amax, 0));
    }
    LAUNCHED();
    unsigned folded[2];
    to_host(folded, d_amax, sizeof folded);
    for (int out = 0; out < outs; out++) {
      to_host(got, d_o[out], N * 2);
      to_host(want, d_f[out], N * 4);
      size_t bad = 0;
      float amax = 0.0f; /* the stored values' finite max */
      for (size_t i = 0; i < N; i++) {
        uint32_t u;
        memcpy(&u, &want[i], 4);
        const bool nan_g = (got[i] & 0x7F80) == 0x7F80 && (got[i] & 0x7F);
        bad += isnan(want[i]) ? !nan_g : (u & 0xFFFFu) != 0 || (uint16_t)(u >> 16) != got[i];
        const uint32_t g32 = (uint32_t)got[i] << 16;
        float v;
        memcpy(&v, &g32, 4);
        if (fabsf(v) > amax && fabsf(v) <= 3.40282347e38f) amax = fabsf(v);
      }
      if (out < 2) { /* the folded amax: out's, or dh1's and dh3's */
        uint32_t amax_bits;
        memcpy(&amax_bits, &amax, 4);
        if (folded[out] != amax_bits) bad++;
        printf("  %-26s amax of output %d folded %08x, of the stored values %08x\n",
               "swiglu_bf16_storage", out, folded[out], amax_bits);
      }
      const char *what[3] = {"forward", "backward", "backward with hg"};
      printf("  %-26s %s output %d: %zu of %d differ\n", "swiglu_bf16_storage", what[pass], out,
             bad, (int)N);
      ck_assert_msg(bad == 0, "swiglu bf16 storage %s output %d: %zu of %d differ", what[pass],
                    out, bad, (int)N);
    }
  }
  for (int t = 0; t < 3; t++) {
    CU(cudaFree(d_h[t]));
    CU(cudaFree(d_w[t]));
    free(h[t]);
    free(w[t]);
  }
  for (int t = 0; t < 3; t++) {
    CU(cudaFree(d_o[t]));
    CU(cudaFree(d_f[t]));
  }
  CU(cudaFree(d_amax));
  free(got);
  free(want);
}
END_TEST

/* Images of values stored in bf16 (gpu_bf16_storage_image, and SwiGLU's
 * kernels that write their outputs' images): against the library's fill of
 * the same values widened to float32 (exmy_cuda_quantize_scaled_bf16), bit
 * for bit with the finite amax folded, over every bf16 pattern and random
 * SwiGLU inputs; E8M3, E4M3 saturating, E5M2, bf16 and E8M5 saturating
 * (its rne overflowing into the largest value), rne, rz and sr (at an
 * sr offset not 0, the two gradients at offsets n apart), unscaled and under
 * a scale {s, 1/s} (delayed scaling's form), in place too; the amax pass
 * alone (gpu_bf16_storage_amax, every pattern: NaN and infinities left out);
 * sizes not a multiple of 8, misaligned storage and formats off the bf16
 * path refused. */
START_TEST(bf16_storage_images) {
  enum { N = 4 << 16 };
  uint16_t *h[3];
  uint64_t seed = 321;
  for (int t = 0; t < 3; t++) {
    h[t] = malloc(N * 2);
    for (size_t i = 0; i < N; i++)
      h[t][i] = t == 0 ? (uint16_t)i : (uint16_t)(splitmix64(&seed) & 0xBFFF); /* |x| < 2 */
  }
  uint16_t *d_h[3], *d_s[3], *d_y[3];
  for (int t = 0; t < 3; t++)
    d_h[t] = dev_from(h[t], N * 2), d_s[t] = dev_alloc(N * 2), d_y[t] = dev_alloc(N * 2);
  uint16_t *d_ref = dev_alloc(N * 2);
  float *d_w = dev_alloc(N * 4), *wide = malloc(N * 4);
  unsigned *d_amax = dev_alloc(2 * sizeof(unsigned));
  const float scales[2] = {1.7f, 1.0f / 1.7f}; /* {s, 1/s}, s not a power of two */
  float *d_si = dev_from(scales, sizeof scales);
  uint16_t *got = malloc(N * 2), *want = malloc(N * 2);
  static const char *const formats[] = {"e8m3", "e4m3", "e5m2", "bf16", "e8m5"};
  static const exmy_rounding modes[] = {EXMY_RNE, EXMY_RZ, EXMY_SR};
  static const char *const kernels[4] = {"stored values", "SwiGLU forward",
                                         "SwiGLU backward dh1", "SwiGLU backward dh3"};
  long cases = 0;
  for (int fi = 0; fi < 5; fi++) {
    exmy_format f;
    ck_assert(!exmy_format_parse(formats[fi], &f));
    for (int mi = 0; mi < 3; mi++)
      for (int scaled = 0; scaled < 2; scaled++) {
        exmy_rounding_opts o = {0};
        o.mode = modes[mi];
        o.saturate = fi == 1 || fi == 4;
        o.seed = 77;
        o.offset = modes[mi] == EXMY_SR ? 4096 : 0;
        exmy_rounding_opts o3 = o;
        if (modes[mi] == EXMY_SR) o3.offset += N;
        const gpu_bf16_scaling sc1 = {.scale_inv = scaled ? d_si : NULL, .amax_bits = d_amax},
                               sc3 = {.scale_inv = scaled ? d_si : NULL, .amax_bits = d_amax + 1};
        for (int k = 0; k < 4; k++) {
          CU(cudaMemset(d_amax, 0, 2 * sizeof(unsigned)));
          for (int t = 0; t < 3; t++) CU(cudaMemset(d_y[t], 0xFF, N * 2));
          const uint16_t *stored; /* the bf16 values the image is of */
          const uint16_t *image;
          if (k == 0) {
            CU(gpu_bf16_storage_image(d_y[0], d_h[0], N, &f, &o, &sc1, 0));
            stored = d_h[0], image = d_y[0];
          } else if (k == 1) {
            CU(gpu_swiglu_forward_bf16_storage(d_s[0], d_h[0], d_h[1], N, NULL, 0));
            CU(gpu_swiglu_forward_bf16_storage_image(d_y[0], d_h[0], d_h[1], N, &f, &o, &sc1, 0));
            stored = d_s[0], image = d_y[0];
          } else {
            CU(gpu_swiglu_backward_bf16_storage(d_s[1], d_s[2], NULL, d_h[2], d_h[0], d_h[1], N,
                                                NULL, NULL, 0));
            CU(gpu_swiglu_backward_bf16_storage_image(d_y[1], d_y[2], d_h[2], d_h[0], d_h[1], N,
                                                      &f, &o, &o3, &sc1, &sc3, 0));
            stored = d_s[k - 1], image = d_y[k - 1];
          }
          /* the reference: the stored values widened, the library's fill */
          to_host(got, stored, N * 2);
          float amax = 0.0f;
          for (size_t i = 0; i < N; i++) {
            const uint32_t u = (uint32_t)got[i] << 16;
            memcpy(&wide[i], &u, 4);
            const float a = fabsf(wide[i]);
            if (a > amax && a <= 3.40282347e38f) amax = a;
          }
          to_dev(d_w, wide, N * 4);
          CU(exmy_cuda_quantize_scaled_bf16(&f, k == 3 ? &o3 : &o, scaled ? d_si : NULL, d_w,
                                            d_ref, N, 0));
          to_host(got, image, N * 2);
          to_host(want, d_ref, N * 2);
          size_t bad = 0;
          for (size_t i = 0; i < N; i++) bad += got[i] != want[i];
          if (k == 0 && scaled && mi == 0) { /* current scaling's amax pass */
            CU(cudaMemset(d_amax + 1, 0, sizeof(unsigned)));
            CU(gpu_bf16_storage_amax(d_h[0], N, d_amax + 1, 0));
            unsigned folded_alone;
            to_host(&folded_alone, d_amax + 1, sizeof folded_alone);
            uint32_t want_bits;
            memcpy(&want_bits, &amax, 4);
            ck_assert_msg(folded_alone == want_bits, "gpu_bf16_storage_amax %08x, want %08x",
                          folded_alone, want_bits);
            ck_assert_int_eq(gpu_bf16_storage_amax(d_h[0] + 1, 8, d_amax + 1, 0),
                             cudaErrorInvalidValue); /* not 16-byte aligned */
          }
          if (k == 0) { /* in place: the same image */
            CU(cudaMemcpy(d_s[0], d_h[0], N * 2, cudaMemcpyDeviceToDevice));
            CU(gpu_bf16_storage_image(d_s[0], d_s[0], N, &f, &o, NULL, 0));
            to_host(want, d_s[0], N * 2);
            if (!scaled) bad += memcmp(got, want, N * 2) != 0;
          }
          unsigned folded[2];
          to_host(folded, d_amax, sizeof folded);
          uint32_t amax_bits;
          memcpy(&amax_bits, &amax, 4);
          const unsigned amax_got = folded[k == 3 ? 1 : 0];
          if (bad || amax_got != amax_bits)
            printf("  bf16_storage_images %s %s%s, %s: %zu of %d differ, amax %08x want %08x\n",
                   formats[fi], exmy_rounding_name(modes[mi]), scaled ? " scaled" : "",
                   kernels[k], bad, (int)N, amax_got, amax_bits);
          ck_assert_msg(bad == 0 && amax_got == amax_bits, "%s %s %s: %zu differ", formats[fi],
                        exmy_rounding_name(modes[mi]), kernels[k], bad);
          cases++;
        }
      }
  }
  exmy_format e8m3, e3m4;
  ck_assert(!exmy_format_parse("e8m3", &e8m3) && !exmy_format_parse("e3m4", &e3m4));
  const exmy_rounding_opts rne = {0};
  ck_assert_int_eq(gpu_bf16_storage_image(d_y[0], d_h[0], N - 4, &e8m3, &rne, NULL, 0),
                   cudaErrorInvalidValue); /* n % 8 != 0 */
  ck_assert_int_eq(gpu_bf16_storage_image(d_y[0], d_h[0] + 1, 8, &e8m3, &rne, NULL, 0),
                   cudaErrorInvalidValue); /* not 16-byte aligned */
  if (!gpu_bf16_operand_serves(&e3m4))
    ck_assert_int_eq(gpu_bf16_storage_image(d_y[0], d_h[0], N, &e3m4, &rne, NULL, 0),
                     cudaErrorInvalidValue);
  printf("  %-26s %ld cases (4 formats x 3 modes x scaled or not x 4 outputs): every image and "
         "amax that of the fill of the widened values\n", "bf16_storage_images", cases);
  for (int t = 0; t < 3; t++) {
    CU(cudaFree(d_h[t])); CU(cudaFree(d_s[t])); CU(cudaFree(d_y[t]));
    free(h[t]);
  }
  CU(cudaFree(d_ref)); CU(cudaFree(d_w)); CU(cudaFree(d_amax)); CU(cudaFree(d_si));
  free(wide), free(got), free(want);
}
END_TEST

/* RoPE of bf16 activations on bf16 storage (gpu_rope_bf16_storage) against
 * the float32-storage kernels on the same bf16 values, forward and backward,
 * heads of 8, 32 and 64, in place and not, NaN, infinities and overflowing
 * rotations planted: bit for bit, the amax folded that of the output's
 * values; a head size not a multiple of 8 refused. */
START_TEST(rope_bf16_storage) {
  static const int head_sizes[] = {8, 32, 64};
  enum { B = 2, T = 37, NH = 3 };
  for (size_t hi = 0; hi < sizeof head_sizes / sizeof head_sizes[0]; hi++) {
    const int hs = head_sizes[hi];
    const size_t n = (size_t)B * T * NH * hs;
    rope_table_pair tab = rope_tables_on_both(T, hs);
    float *x = rand_floats(n, -4, 4, 900 + hi), *wide = malloc(n * sizeof(float));
    x[1] = NAN, x[2] = INFINITY, x[5] = 3e38f, x[6] = 3e38f, x[9] = -1e-39f;
    uint16_t *xb = malloc(n * 2), *got = malloc(n * 2);
    for (size_t i = 0; i < n; i++) { /* bf16 values, rne */
      uint32_t u;
      memcpy(&u, &x[i], 4);
      xb[i] = (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
      if (x[i] != x[i]) xb[i] = 0x7FC0;
      u = (uint32_t)xb[i] << 16;
      memcpy(&wide[i], &u, 4);
    }
    float *d_w = dev_alloc(n * sizeof(float));
    uint16_t *d_x = dev_from(xb, n * 2), *d_y = dev_alloc(n * 2);
    unsigned *d_amax = dev_alloc(2 * sizeof(unsigned));
    for (int backward = 0; backward < 2; backward++)
      for (int in_place = 0; in_place < 2; in_place++) {
        to_dev(d_w, wide, n * sizeof(float));
        to_dev(d_x, xb, n * 2);
        if (backward)
          gpu_rope_backward_act_bf16(d_w, tab.d_cs, tab.d_sn, B, T, NH, hs, NULL, 0);
        else
          gpu_rope_forward_act_bf16(d_w, tab.d_cs, tab.d_sn, B, T, NH, hs, 0);
        uint16_t *out = in_place == 1 ? d_x : d_y;
        CU(cudaMemset(d_amax, 0, 2 * sizeof(unsigned)));
        CU(gpu_rope_bf16_storage(out, d_x, tab.d_cs, tab.d_sn, B, T, NH, hs, backward, d_amax,
                                 0));
        CU(gpu_bf16_storage_amax(out, n, d_amax + 1, 0)); /* of the stored values */
        LAUNCHED();
        unsigned amaxes[2];
        to_host(amaxes, d_amax, sizeof amaxes);
        ck_assert_msg(amaxes[0] == amaxes[1], "rope_bf16_storage amax %08x, the output's %08x",
                      amaxes[0], amaxes[1]);
        float *want = malloc(n * sizeof(float));
        to_host(want, d_w, n * sizeof(float));
        to_host(got, out, n * 2);
        size_t d = 0;
        for (size_t i = 0; i < n; i++) {
          uint32_t u;
          memcpy(&u, &want[i], 4);
          const bool nan_w = want[i] != want[i], nan_g = (got[i] & 0x7F80) == 0x7F80 &&
                                                         (got[i] & 0x7F);
          d += nan_w ? !nan_g : (u & 0xFFFFu) != 0 || (uint16_t)(u >> 16) != got[i];
        }
        printf("  %-26s hs %-3d %s%s: %zu of %zu differ\n", "rope_bf16_storage", hs,
               backward ? "backward" : "forward",
               in_place ? " in place" : "", d, n);
        ck_assert_msg(d == 0, "rope_bf16_storage hs %d backward %d in place %d: %zu differ", hs,
                      backward, in_place, d);
        free(want);
      }
    ck_assert_int_eq(gpu_rope_bf16_storage(d_y, d_x, tab.d_cs, tab.d_sn, B, T, NH * 2, hs / 2 + 2,
                                           false, NULL, 0),
                     cudaErrorInvalidValue);
    CU(cudaFree(d_w)); CU(cudaFree(d_x)); CU(cudaFree(d_y)); CU(cudaFree(d_amax));
    rope_tables_free(tab);
    free(x); free(wide); free(xb); free(got);
  }
}
END_TEST

/* RMSNorm's first pass under current scaling (gpu_rmsnorm_forward_amax)
 * against the float32 forward with its amax folded (gpu_rmsnorm_forward,
 * gpu_add_rmsnorm_forward, or gpu_add_bf16 then gpu_rmsnorm_forward): the
 * amax word, rstd and the sums bit for bit, base left as it was, nothing
 * else written; rows with NaN, an infinity and an overflowing sum of squares
 * planted; C 256, 768, 1000 and 1024 (the widest staged), the reference's
 * rows in registers and not; bad arguments, rows wider than 1024 and
 * misaligned tensors refused, nothing launched. */
START_TEST(rmsnorm_forward_amax) {
  static const int widths[] = {256, 768, 1000, 1024};
  enum { N = 45 };
  for (size_t wi = 0; wi < sizeof widths / sizeof widths[0]; wi++)
    for (int regs = 0; regs < 2; regs++) {
      gpu_rmsnorm_set_rows_in_registers(regs);
      const int C = widths[wi];
      const size_t NC = (size_t)N * C;
      float *x = rand_floats(NC, -2, 2, 730 + wi), *add = rand_floats(NC, -3, 3, 740 + wi),
            *w = rand_floats(C, 0.5, 1.5, 750 + wi);
      x[3] = NAN;
      x[C + 5] = INFINITY;
      x[2 * C + 1] = 3e38f, x[2 * C + 2] = -3e38f;
      float *d_x0 = dev_from(x, NC * 4), *d_add = dev_from(add, NC * 4),
            *d_w = dev_from(w, C * 4), *d_x1 = dev_alloc(NC * 4), *d_x2 = dev_alloc(NC * 4),
            *d_sum = dev_alloc(NC * 4), *d_o = dev_alloc(NC * 4), *d_r1 = dev_alloc(N * 4),
            *d_r2 = dev_alloc(N * 4);
      uint16_t *d_addb = dev_alloc(NC * 2);
      unsigned *d_words = dev_alloc(2 * sizeof(unsigned));
      exmy_format bf;
      ck_assert_int_eq(exmy_format_parse("bf16", &bf), 0);
      const exmy_rounding_opts rne = {0};
      CU(exmy_cuda_quantize_bf16(&bf, &rne, d_add, d_addb, NC, 0));
      for (int variant = 0; variant < 3; variant++) { /* no add, float32 add, bf16 add */
        CU(cudaMemcpy(d_x1, d_x0, NC * 4, cudaMemcpyDeviceToDevice));
        CU(cudaMemcpy(d_x2, d_x0, NC * 4, cudaMemcpyDeviceToDevice));
        CU(cudaMemset(d_sum, 0xA5, NC * 4));
        CU(cudaMemset(d_words, 0, 2 * sizeof(unsigned)));
        if (variant == 0) {
          gpu_rmsnorm_forward(d_o, d_r1, d_x1, d_w, N, C, d_words, 0);
          CU(gpu_rmsnorm_forward_amax(d_r2, d_x2, NULL, NULL, NULL, d_w, N, C, d_words + 1, 0));
        } else if (variant == 1) {
          gpu_add_rmsnorm_forward(d_o, d_r1, d_x1, d_add, d_w, N, C, d_words, 0);
          CU(gpu_rmsnorm_forward_amax(d_r2, d_x2, d_add, NULL, NULL, d_w, N, C, d_words + 1, 0));
        } else {
          gpu_add_bf16(d_x1, d_x1, d_addb, NC, 0);
          gpu_rmsnorm_forward(d_o, d_r1, d_x1, d_w, N, C, d_words, 0);
          CU(gpu_rmsnorm_forward_amax(d_r2, d_sum, NULL, d_x2, d_addb, d_w, N, C, d_words + 1,
                                      0));
        }
        LAUNCHED();
        unsigned words[2];
        to_host(words, d_words, sizeof words);
        float *h1 = malloc(NC * 4), *h2 = malloc(NC * 4);
        printf("  rmsnorm_forward_amax C %-5d registers %d %s: amax %08x (float32 forward's "
               "%08x)\n", C, regs, variant == 0 ? "no add" : variant == 1 ? "add" : "bf16 add",
               words[1], words[0]);
        ck_assert_msg(words[0] == words[1] && words[0] != 0, "rmsnorm_forward_amax C %d: %08x, "
                      "want %08x", C, words[1], words[0]);
        to_host(h1, d_r1, N * 4);
        to_host(h2, d_r2, N * 4);
        check_same_bits("rmsnorm_forward_amax", "rstd", h1, h2, N * 4);
        to_host(h1, d_x1, NC * 4);
        to_host(h2, variant == 2 ? d_sum : d_x2, NC * 4);
        check_same_bits("rmsnorm_forward_amax", "sum", h1, h2, NC * 4);
        if (variant == 2) { /* base as it was */
          to_host(h1, d_x0, NC * 4);
          to_host(h2, d_x2, NC * 4);
          check_same_bits("rmsnorm_forward_amax", "base", h1, h2, NC * 4);
        }
        free(h1), free(h2);
      }
      /* refused, nothing launched */
      ck_assert_int_eq(gpu_rmsnorm_forward_amax(d_r2, d_x2, NULL, NULL, NULL, d_w, N, C, NULL, 0),
                       cudaErrorInvalidValue);
      ck_assert_int_eq(gpu_rmsnorm_forward_amax(d_r2, d_sum, d_add, d_x2, d_addb, d_w, N, C,
                                                d_words, 0),
                       cudaErrorInvalidValue);
      ck_assert_int_eq(gpu_rmsnorm_forward_amax(d_r2, d_sum, NULL, NULL, d_addb, d_w, N, C,
                                                d_words, 0),
                       cudaErrorInvalidValue);
      ck_assert_int_eq(gpu_rmsnorm_forward_amax(d_r2, d_x2, NULL, NULL, NULL, d_w, N / 2, 1032,
                                                d_words, 0),
                       cudaErrorInvalidValue);
      ck_assert_int_eq(gpu_rmsnorm_forward_amax(d_r2, d_x2 + 1, NULL, NULL, NULL, d_w, N, C - 8,
                                                d_words, 0),
                       cudaErrorInvalidValue);
      CU(cudaFree(d_x0)); CU(cudaFree(d_add)); CU(cudaFree(d_w)); CU(cudaFree(d_x1));
      CU(cudaFree(d_x2)); CU(cudaFree(d_sum)); CU(cudaFree(d_o)); CU(cudaFree(d_r1));
      CU(cudaFree(d_r2)); CU(cudaFree(d_addb)); CU(cudaFree(d_words));
      free(x), free(add), free(w);
    }
  gpu_rmsnorm_set_rows_in_registers(true);
}
END_TEST

/* RMSNorm written straight into its bf16 operand image (ln1, ln2, lnf: the X
 * of the GEMMs that read them) against the unfused path (gpu_rmsnorm_forward
 * or gpu_add_rmsnorm_forward, then the fill's pass): in the fill's modes and
 * under delayed scaling (three steps), with and without the residual add and
 * the float32 output, at C of 256, 768, 1000 (lanes with fewer elements)
 * and 1024 (the widest staged), rows with NaN, an infinity, an overflowing
 * sum of squares and subnormal outputs planted: images, float32 outputs,
 * rstd, the sums and the states bit for bit; C not a multiple of 8, or
 * wider than 1024, refused. */
START_TEST(rmsnorm_forward_bf16) {
  const producer_case *cases = producer_cases;
  static const int widths[] = {256, 768, 1000, 1024};
  enum { N = 37, STEPS = 3 };
  for (size_t wi = 0; wi < sizeof widths / sizeof widths[0]; wi++) {
    const int C = widths[wi];
    const size_t NC = (size_t)N * C;
    float *x = rand_floats(NC, -2, 2, 700 + wi), *add = rand_floats(NC, -3, 3, 710 + wi),
          *w = rand_floats(C, 0.5, 1.5, 720 + wi);
    x[3] = NAN;                                          /* row 0: NaN */
    x[C + 5] = INFINITY;                                 /* row 1: inf */
    x[2 * C + 1] = 3e38f, x[2 * C + 2] = -3e38f;         /* row 2: sum of squares overflows */
    for (int c = 0; c < C; c++) x[3 * C + c] = 1e-37f * (c % 7 - 3), add[3 * C + c] = 0.0f;
    w[C - 1] = 1e-20f; /* row 3's last column: subnormal outputs */
    float *d_x0 = dev_from(x, NC * sizeof(float)), *d_add = dev_from(add, NC * sizeof(float)),
          *d_w = dev_from(w, C * sizeof(float)), *d_x1 = dev_alloc(NC * sizeof(float)),
          *d_x2 = dev_alloc(NC * sizeof(float)), *d_o1 = dev_alloc(NC * sizeof(float)),
          *d_o2 = dev_alloc(NC * sizeof(float)), *d_r1 = dev_alloc(N * sizeof(float)),
          *d_r2 = dev_alloc(N * sizeof(float)), *d_s = dev_alloc(2 * sizeof(float));
    uint16_t *d_img1 = dev_alloc(NC * 2), *d_img2 = dev_alloc(NC * 2), *d_addb = dev_alloc(NC * 2);
    float *d_s2 = dev_alloc(NC * sizeof(float));
    {
      exmy_format bf;
      ck_assert_int_eq(exmy_format_parse("bf16", &bf), 0);
      const exmy_rounding_opts rne = {0};
      CU(exmy_cuda_quantize_bf16(&bf, &rne, d_add, d_addb, NC, 0));
    }
    for (size_t c = 0; c < N_PRODUCER_CASES; c++) {
      exmy_format f;
      const exmy_rounding_opts o = producer_case_opts(c, 0x7eed + c, 5003 + wi, &f);
      for (int variant = 0; variant < 6; variant++) {
        /* 4, 5: the addend in bf16 (its bf16 image, d_addb), the sum elsewhere */
        const bool with_add = variant & 1 || variant >= 4, with_f32 = variant & 2,
                   add16 = variant >= 4;
        exmy_cuda_delayed_state *st[2] = {NULL, NULL};
        if (cases[c].delayed) delayed_states_start(st, 2);
        for (int step = 0; step < (cases[c].delayed ? STEPS : 1); step++) {
          CU(cudaMemcpy(d_x1, d_x0, NC * sizeof(float), cudaMemcpyDeviceToDevice));
          CU(cudaMemcpy(d_x2, d_x0, NC * sizeof(float), cudaMemcpyDeviceToDevice));
          CU(cudaMemset(d_o2, 0xA5, NC * sizeof(float)));
          if (add16) {
            gpu_add_bf16(d_x1, d_x1, d_addb, NC, 0);
            gpu_rmsnorm_forward(d_o1, d_r1, d_x1, d_w, N, C, NULL, 0);
          } else if (with_add) {
            gpu_add_rmsnorm_forward(d_o1, d_r1, d_x1, d_add, d_w, N, C, NULL, 0);
          } else {
            gpu_rmsnorm_forward(d_o1, d_r1, d_x1, d_w, N, C, NULL, 0);
          }
          float *o2 = with_f32 || variant == 5 ? d_o2 : NULL;
          const float *a2 = with_add && !add16 ? d_add : NULL;
          int states_differ = 0;
          float used[2] = {0, 0};
          if (!cases[c].delayed) {
            CU(exmy_cuda_quantize_bf16(&f, &o, d_o1, d_img1, NC, 0));
            if (add16)
              CU(gpu_add_bf16_rmsnorm_forward_bf16(d_img2, o2, d_r2, d_s2, d_x2, d_addb, d_w, N,
                                                   C, &f, &o, NULL, 0));
            else
              CU(gpu_rmsnorm_forward_bf16(d_img2, o2, d_r2, d_x2, a2, d_w, N, C, &f, &o, NULL,
                                          0));
          } else {
            CU(exmy_cuda_quantize_delayed_bf16(&f, &o, 1, true, false, st[0], d_o1, d_img1, NC,
                                               d_s, 0));
            gpu_bf16_scaling sc = {0};
            CU(exmy_cuda_delayed_begin(st[1], &sc.scale_inv, &sc.amax_bits, 0));
            if (add16)
              CU(gpu_add_bf16_rmsnorm_forward_bf16(d_img2, o2, d_r2, d_s2, d_x2, d_addb, d_w, N,
                                                   C, &f, &o, &sc, 0));
            else
              CU(gpu_rmsnorm_forward_bf16(d_img2, o2, d_r2, d_x2, a2, d_w, N, C, &f, &o, &sc,
                                          0));
            CU(exmy_cuda_delayed_end(&f, 1, true, false, st[1], d_s + 1, 0));
            LAUNCHED();
            to_host(used, d_s, sizeof used);
            states_differ = delayed_states_differ(st[0], st[1]);
          }
          LAUNCHED();
          const size_t d = bf16_images_differ(d_img1, d_img2, NC);
          printf("  %-26s %-8s C %-5d %s mode %d%s%s step %d: %zu of %zu differ%s\n",
                 "rmsnorm_forward_bf16", cases[c].delayed ? "delayed" : "plain", C,
                 cases[c].format, (int)cases[c].mode, with_add ? " add" : "",
                 with_f32 ? " f32" : "", step, d, NC, states_differ ? ", states differ" : "");
          ck_assert_msg(d == 0 && states_differ == 0 && !memcmp(&used[0], &used[1], sizeof(float)),
                        "rmsnorm_forward_bf16 %s mode %d (C %d, variant %d, step %d): %zu "
                        "images differ, scales %g / %g, states differ %d",
                        cases[c].format, (int)cases[c].mode, C, variant, step, d, used[0],
                        used[1], states_differ);
          float *h1 = malloc(NC * sizeof(float)), *h2 = malloc(NC * sizeof(float));
          to_host(h1, d_r1, N * sizeof(float));
          to_host(h2, d_r2, N * sizeof(float));
          check_same_bits("rmsnorm_forward_bf16", "rstd", h1, h2, N * sizeof(float));
          to_host(h1, d_x1, NC * sizeof(float));
          to_host(h2, add16 ? d_s2 : d_x2, NC * sizeof(float));
          check_same_bits("rmsnorm_forward_bf16", "sum", h1, h2, NC * sizeof(float));
          if (add16) { /* inp left as it was */
            to_host(h1, d_x0, NC * sizeof(float));
            to_host(h2, d_x2, NC * sizeof(float));
            check_same_bits("rmsnorm_forward_bf16", "inp", h1, h2, NC * sizeof(float));
          }
          to_host(h2, d_o2, NC * sizeof(float));
          if (with_f32 || variant == 5) {
            to_host(h1, d_o1, NC * sizeof(float));
            check_same_bits("rmsnorm_forward_bf16", "out", h1, h2, NC * sizeof(float));
          } else { /* not written */
            uint32_t b;
            memcpy(&b, &h2[NC - 1], 4);
            ck_assert_uint_eq(b, 0xA5A5A5A5u);
          }
          free(h1), free(h2);
        }
        for (int k = 0; k < 2; k++)
          if (st[k]) exmy_cuda_delayed_state_free(st[k]);
      }
    }
    /* what it does not serve: refused, nothing launched */
    exmy_format g;
    exmy_rounding_opts o = {0};
    ck_assert_int_eq(exmy_format_parse("bf16", &g), 0);
    ck_assert_int_eq(gpu_rmsnorm_forward_bf16(d_img2, NULL, d_r2, d_x2, NULL, d_w, N, C - 4, &g,
                                              &o, NULL, 0),
                     cudaErrorInvalidValue);
    ck_assert_int_eq(gpu_rmsnorm_forward_bf16(d_img2, NULL, d_r2, d_x2, NULL, d_w, N / 2, 1032,
                                              &g, &o, NULL, 0),
                     cudaErrorInvalidValue);
    ck_assert_int_eq(exmy_format_parse("e3m2", &g), 0);
    ck_assert_int_eq(gpu_rmsnorm_forward_bf16(d_img2, NULL, d_r2, d_x2, NULL, d_w, N, C, &g, &o,
                                              NULL, 0),
                     cudaErrorInvalidValue);
    CU(cudaFree(d_x0)); CU(cudaFree(d_add)); CU(cudaFree(d_w)); CU(cudaFree(d_x1));
    CU(cudaFree(d_x2)); CU(cudaFree(d_o1)); CU(cudaFree(d_o2)); CU(cudaFree(d_r1));
    CU(cudaFree(d_r2)); CU(cudaFree(d_s)); CU(cudaFree(d_img1)); CU(cudaFree(d_img2));
    CU(cudaFree(d_addb)); CU(cudaFree(d_s2));
    free(x); free(add); free(w);
  }
}
END_TEST

/* RoPE rotating straight into a bf16 operand image (the fused attention's
 * q and k, and Q's and K's dY) against the unfused path (the in-place
 * rotation, then the fill's pass): forward and backward, q's and k's heads,
 * in the fill's modes and under delayed scaling (two steps), the output
 * aligned and one element in, with NaN, infinities and overflow planted:
 * images and states bit for bit, x left as it was. */
START_TEST(rope_bf16) {
  static const struct {
    const char *format;
    exmy_rounding mode;
    bool saturate, delayed;
  } cases[] = {
      {"bf16", EXMY_RNE, false, false}, {"e8m3", EXMY_RZ, false, false},
      {"e8m5", EXMY_SR, false, false},  {"e4m3", EXMY_RNE, true, false},
      {"e5m2", EXMY_RNE, true, true},   {"e4m3", EXMY_SR, true, true},
  };
  for (int si = 0; si < NSHAPES; si++) {
    const shape *sh = &shapes[si];
    const int B = sh->B, T = sh->T, hs = sh->C / sh->NH;
    const rope_table_pair rt = rope_tables_on_both(T, hs);
    const int heads[2] = {sh->NH, sh->NKV};
    for (int q = 0; q < 2; q++) {
      const int nh = heads[q];
      const size_t n = (size_t)B * T * nh * hs;
      float *x = rand_floats(n, -2, 2, 120 + si);
      x[3] = NAN, x[10] = INFINITY, x[17] = -3.3e38f, x[24] = 3e38f, x[25] = 3e38f;
      float *d_x = dev_from(x, n * sizeof(float)), *d_w = dev_alloc(n * sizeof(float));
      float *d_s = dev_alloc(2 * sizeof(float)), *back = malloc(n * sizeof(float));
      uint16_t *d_r = dev_alloc(n * 2), *d_y = dev_alloc((n + 8) * 2);
      for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        exmy_format f;
        ck_assert_int_eq(exmy_format_parse(cases[c].format, &f), 0);
        exmy_rounding_opts o = {0};
        o.mode = cases[c].mode;
        o.saturate = cases[c].saturate;
        o.seed = 0xa11 + c;
        o.offset = 4001 + si;
        for (int dir = 0; dir < 2; dir++)
          for (int shift = 0; shift < 2; shift++) {
            uint16_t *y = d_y + shift;
            exmy_cuda_delayed_state *st[2] = {NULL, NULL};
            if (cases[c].delayed) delayed_states_start(st, 2);
            for (int step = 0; step < (cases[c].delayed ? 2 : 1); step++) {
              CU(cudaMemcpy(d_w, d_x, n * sizeof(float), cudaMemcpyDeviceToDevice));
              if (dir)
                gpu_rope_backward(d_w, rt.d_cs, rt.d_sn, B, T, nh, hs, NULL, 0);
              else
                gpu_rope_forward(d_w, rt.d_cs, rt.d_sn, B, T, nh, hs, 0);
              int states_differ = 0;
              float used[2] = {0, 0};
              if (!cases[c].delayed) {
                CU(exmy_cuda_quantize_bf16(&f, &o, d_w, d_r, n, 0));
                CU(gpu_rope_bf16(y, d_x, rt.d_cs, rt.d_sn, B, T, nh, hs, dir, &f, &o, NULL, 0));
              } else {
                CU(exmy_cuda_quantize_delayed_bf16(&f, &o, 0, false, false, st[0], d_w, d_r, n,
                                                   d_s, 0));
                gpu_bf16_scaling sc = {0};
                CU(exmy_cuda_delayed_begin(st[1], &sc.scale_inv, &sc.amax_bits, 0));
                CU(gpu_rope_bf16(y, d_x, rt.d_cs, rt.d_sn, B, T, nh, hs, dir, &f, &o, &sc, 0));
                CU(exmy_cuda_delayed_end(&f, 0, false, false, st[1], d_s + 1, 0));
                LAUNCHED();
                to_host(used, d_s, sizeof used);
                states_differ = delayed_states_differ(st[0], st[1]);
              }
              LAUNCHED();
              const size_t d = bf16_images_differ(y, d_r, n);
              to_host(back, d_x, n * sizeof(float));
              const bool x_kept = !memcmp(back, x, n * sizeof(float));
              printf("  %-26s %-8s %-28s %s mode %d %s shift %d step %d: %zu of %zu differ\n",
                     "rope_bf16", q ? "k" : "q", sh->name, cases[c].format, (int)cases[c].mode,
                     dir ? "backward" : "forward", shift, step, d, n);
              ck_assert_msg(d == 0 && states_differ == 0 && x_kept &&
                                !memcmp(&used[0], &used[1], sizeof(float)),
                            "rope_bf16 %s mode %d %s (%s, %s, shift %d): %zu images differ, "
                            "states differ %d, x kept %d",
                            cases[c].format, (int)cases[c].mode, dir ? "backward" : "forward",
                            sh->name, q ? "k" : "q", shift, d, states_differ, x_kept);
            }
            for (int k = 0; k < 2; k++)
              if (st[k]) exmy_cuda_delayed_state_free(st[k]);
          }
      }
      /* current scaling: the amax alone (out NULL), its scale, then the
       * image, against exmy_cuda_quantize_tensor_bf16 of the rotated tensor */
      exmy_format f;
      exmy_rounding_opts o = {0};
      for (int dir = 0; dir < 2; dir++) {
        ck_assert_int_eq(exmy_format_parse("e4m3", &f), 0);
        o.mode = EXMY_SR, o.saturate = true, o.seed = 77, o.offset = 5003;
        CU(cudaMemcpy(d_w, d_x, n * sizeof(float), cudaMemcpyDeviceToDevice));
        if (dir)
          gpu_rope_backward(d_w, rt.d_cs, rt.d_sn, B, T, nh, hs, NULL, 0);
        else
          gpu_rope_forward(d_w, rt.d_cs, rt.d_sn, B, T, nh, hs, 0);
        CU(exmy_cuda_quantize_tensor_bf16(&f, &o, 1, true, d_w, d_r, n, d_s, 0));
        unsigned int *d_amax = dev_alloc(sizeof(unsigned int));
        float *d_si = dev_alloc(2 * sizeof(float));
        CU(cudaMemset(d_amax, 0, sizeof(unsigned int)));
        const gpu_bf16_scaling first = {.amax_bits = d_amax};
        CU(gpu_rope_bf16(NULL, d_x, rt.d_cs, rt.d_sn, B, T, nh, hs, dir, &f, &o, &first, 0));
        CU(exmy_cuda_scale_from_amax(&f, 1, true, d_amax, d_si, 0));
        const gpu_bf16_scaling sc = {.scale_inv = d_si};
        CU(gpu_rope_bf16(d_y, d_x, rt.d_cs, rt.d_sn, B, T, nh, hs, dir, &f, &o, &sc, 0));
        LAUNCHED();
        const size_t d = bf16_images_differ(d_y, d_r, n);
        float sref, sfused;
        to_host(&sref, d_s, sizeof sref);
        to_host(&sfused, d_si, sizeof sfused);
        printf("  %-26s %-8s %-28s e4m3 sr current %s: s %g / %g, %zu of %zu differ\n",
               "rope_bf16", q ? "k" : "q", sh->name, dir ? "backward" : "forward", sref, sfused,
               d, n);
        ck_assert_msg(d == 0 && !memcmp(&sref, &sfused, sizeof(float)),
                      "rope_bf16 current (%s, %s): %zu images differ, scales %g / %g", sh->name,
                      dir ? "backward" : "forward", d, sref, sfused);
        CU(cudaFree(d_amax)); CU(cudaFree(d_si));
      }
      /* a head size not a multiple of 8: refused */
      o = (exmy_rounding_opts){0};
      ck_assert_int_eq(exmy_format_parse("bf16", &f), 0);
      ck_assert_int_eq(gpu_rope_bf16(d_y, d_x, rt.d_cs, rt.d_sn, 1, 2, 2, 12, false, &f, &o,
                                     NULL, 0),
                       cudaErrorInvalidValue);
      CU(cudaFree(d_x)); CU(cudaFree(d_w)); CU(cudaFree(d_s)); CU(cudaFree(d_r));
      CU(cudaFree(d_y));
      free(x); free(back);
    }
    rope_tables_free(rt);
  }
}
END_TEST

/* A per-tensor scaled case of the tests below: format, rounding,
 * saturation, scale a power of two, margin. */
typedef struct {
  const char *format;
  exmy_rounding mode;
  bool saturate, pow2;
  int margin;
} scaled_case;

/* The same for per-tensor scaled images, the trainer's fills under delayed
 * scaling (exmy_cuda_quantize_delayed_bf16 of each float32 gradient, against
 * exmy_cuda_delayed_begin, the fused kernel folding the amaxes, then
 * exmy_cuda_delayed_end) and current scaling (exmy_cuda_quantize_tensor_bf16,
 * against gpu_swiglu_backward_amax, exmy_cuda_scale_from_amax, then the fused
 * kernel with those scales): images, the scales the GEMMs read and, for
 * delayed scaling, the whole state (history, counters, next scale) bit for
 * bit, over three steps from a state whose scale is not a power of two (the
 * history of 2 wraps), E4M3 and E5M2, aligned and not. */
START_TEST(swiglu_backward_bf16_scaled) {
  static const scaled_case cases[] = {
      {"e4m3", EXMY_RNE, true, false, 0},
      {"e5m2", EXMY_RNE, true, false, 0},
      {"e5m2", EXMY_SR, true, true, 1},
      {"e4m3", EXMY_RZ, false, true, 0},
  };
  enum { STEPS = 3 };
  for (int si = 0; si < NSHAPES; si++) {
    const shape *sh = &shapes[si];
    const size_t n = swiglu_bf16_length(sh);
    float *h1, *h3, *dout, *d_h1, *d_h3, *d_dout;
    swiglu_bf16_inputs(si, n, &h1, &h3, &dout, &d_h1, &d_h3, &d_dout);
    float *d_dh1 = dev_alloc(n * sizeof(float)), *d_dh3 = dev_alloc(n * sizeof(float));
    uint16_t *d_r1 = dev_alloc(n * 2), *d_r3 = dev_alloc(n * 2);
    uint16_t *d_y1 = dev_alloc((n + 8) * 2), *d_y3 = dev_alloc((n + 8) * 2);
    /* per gradient: the reference's s, the fused path's {s, 1/s}, amax words */
    float *d_sr = dev_alloc(2 * sizeof(float)), *d_si = dev_alloc(4 * sizeof(float));
    unsigned int *d_amax = dev_alloc(4 * sizeof(unsigned int));
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
      exmy_format f;
      ck_assert_int_eq(exmy_format_parse(cases[c].format, &f), 0);
      exmy_rounding_opts o1 = {0}, o3;
      o1.mode = cases[c].mode;
      o1.saturate = cases[c].saturate;
      o1.seed = 0x5eed + c;
      o1.offset = 2001 + si;
      o3 = o1;
      o3.offset = o1.offset + n;
      const int margin = cases[c].margin;
      const bool pow2 = cases[c].pow2;
      for (int shift = 0; shift < 2; shift++) {
        const size_t m = n - shift;
        const float *dy = d_dout + shift, *a = d_h1 + shift, *b = d_h3 + shift;
        uint16_t *y1 = d_y1 + shift, *y3 = d_y3 + shift;
        /* delayed: reference states [0, 1], fused [2, 3], all from one state */
        exmy_cuda_delayed_state *st[4];
        delayed_states_start(st, 4);
        for (int step = 0; step < STEPS; step++) {
          gpu_swiglu_backward(d_dh1, d_dh3, dy, a, b, m, 0);
          CU(exmy_cuda_quantize_delayed_bf16(&f, &o1, margin, pow2, false, st[0], d_dh1, d_r1, m,
                                             d_sr, 0));
          CU(exmy_cuda_quantize_delayed_bf16(&f, &o3, margin, pow2, false, st[1], d_dh3, d_r3, m,
                                             d_sr + 1, 0));
          gpu_bf16_scaling sc1 = {0}, sc3 = {0};
          CU(exmy_cuda_delayed_begin(st[2], &sc1.scale_inv, &sc1.amax_bits, 0));
          CU(exmy_cuda_delayed_begin(st[3], &sc3.scale_inv, &sc3.amax_bits, 0));
          CU(gpu_swiglu_backward_bf16(y1, y3, dy, a, b, m, &f, &o1, &o3, &sc1, &sc3, 0));
          CU(exmy_cuda_delayed_end(&f, margin, pow2, false, st[2], d_si, 0));
          CU(exmy_cuda_delayed_end(&f, margin, pow2, false, st[3], d_si + 1, 0));
          LAUNCHED();
          const size_t d1 = bf16_images_differ(y1, d_r1, m), d3 = bf16_images_differ(y3, d_r3, m);
          float used[4];
          to_host(used, d_sr, 2 * sizeof(float));
          to_host(used + 2, d_si, 2 * sizeof(float));
          int states_differ = 0;
          for (int k = 0; k < 2; k++) states_differ += delayed_states_differ(st[k], st[k + 2]);
          printf("  %-26s %-8s %-28s %s mode %d shift %d step %d: s %g %g, %zu, %zu of %zu "
                 "differ, %d states differ\n",
                 "swiglu_backward_bf16", "delayed", sh->name, cases[c].format,
                 (int)cases[c].mode, shift, step, used[0], used[1], d1, d3, m, states_differ);
          ck_assert_msg(d1 == 0 && d3 == 0 && !memcmp(used, used + 2, 2 * sizeof(float)) &&
                            states_differ == 0,
                        "swiglu_backward_bf16 delayed %s mode %d (%s, shift %d, step %d): %zu "
                        "and %zu images, scales %g %g / %g %g, %d states differ",
                        cases[c].format, (int)cases[c].mode, sh->name, shift, step, d1, d3,
                        used[0], used[1], used[2], used[3], states_differ);
        }
        for (int k = 0; k < 4; k++) exmy_cuda_delayed_state_free(st[k]);

        /* current: the amax kernel's amaxes, and the image kernel's folds of
         * the same gradients, must agree too */
        gpu_swiglu_backward(d_dh1, d_dh3, dy, a, b, m, 0);
        CU(exmy_cuda_quantize_tensor_bf16(&f, &o1, margin, pow2, d_dh1, d_r1, m, d_sr, 0));
        CU(exmy_cuda_quantize_tensor_bf16(&f, &o3, margin, pow2, d_dh3, d_r3, m, d_sr + 1, 0));
        CU(cudaMemset(d_amax, 0, 4 * sizeof(unsigned int)));
        CU(gpu_swiglu_backward_amax(dy, a, b, m, d_amax, d_amax + 1, 0));
        CU(exmy_cuda_scale_from_amax(&f, margin, pow2, d_amax, d_si, 0));
        CU(exmy_cuda_scale_from_amax(&f, margin, pow2, d_amax + 1, d_si + 2, 0));
        const gpu_bf16_scaling sc1 = {.scale_inv = d_si, .amax_bits = d_amax + 2},
                               sc3 = {.scale_inv = d_si + 2, .amax_bits = d_amax + 3};
        CU(gpu_swiglu_backward_bf16(y1, y3, dy, a, b, m, &f, &o1, &o3, &sc1, &sc3, 0));
        LAUNCHED();
        const size_t d1 = bf16_images_differ(y1, d_r1, m), d3 = bf16_images_differ(y3, d_r3, m);
        float sr[2], si4[4];
        unsigned int amax[4];
        to_host(sr, d_sr, sizeof sr);
        to_host(si4, d_si, sizeof si4);
        to_host(amax, d_amax, sizeof amax);
        printf("  %-26s %-8s %-28s %s mode %d shift %d: s %g %g, %zu, %zu of %zu differ\n",
               "swiglu_backward_bf16", "current", sh->name, cases[c].format, (int)cases[c].mode,
               shift, sr[0], sr[1], d1, d3, m);
        ck_assert_msg(d1 == 0 && d3 == 0 && !memcmp(&sr[0], &si4[0], sizeof(float)) &&
                          !memcmp(&sr[1], &si4[2], sizeof(float)) && amax[0] == amax[2] &&
                          amax[1] == amax[3] && amax[0] != 0,
                      "swiglu_backward_bf16 current %s mode %d (%s, shift %d): %zu and %zu "
                      "images differ, scales %g %g / %g %g, amax %08x %08x / %08x %08x",
                      cases[c].format, (int)cases[c].mode, sh->name, shift, d1, d3, sr[0], sr[1],
                      si4[0], si4[2], amax[0], amax[1], amax[2], amax[3]);
      }
    }
    CU(cudaFree(d_h1)); CU(cudaFree(d_h3)); CU(cudaFree(d_dout)); CU(cudaFree(d_dh1));
    CU(cudaFree(d_dh3)); CU(cudaFree(d_r1)); CU(cudaFree(d_r3)); CU(cudaFree(d_y1));
    CU(cudaFree(d_y3)); CU(cudaFree(d_sr)); CU(cudaFree(d_si)); CU(cudaFree(d_amax));
    free(h1); free(h3); free(dout);
  }
}
END_TEST

/* ------------------------------------------------------ causal softmax */

START_TEST(causal_softmax) {
  for (int si = 0; si < NSHAPES; si++) {
    const shape *sh = &shapes[si];
    const int T = sh->T, hs = sh->C / sh->NH;
    const long rows = (long)sh->B * sh->NH * T;
    const size_t n = (size_t)rows * T;
    const float scale = (float)(1.0 / sqrt((double)hs));
    float *att0 = rand_floats(n, -6, 6, 60 + si), *att = copy_floats(att0, n);
    float *g = malloc(n * sizeof(float)), *g2 = malloc(n * sizeof(float));
    causal_softmax_forward(att, rows, T); /* model.c */
    float *d_att = dev_from(att0, n * sizeof(float));
    gpu_causal_softmax_forward(d_att, rows, T, 0);
    check_launch("causal_softmax_forward", "P", sh->name, g, d_att, att, n);
    to_dev(d_att, att0, n * sizeof(float));
    gpu_causal_softmax_forward(d_att, rows, T, 0);
    LAUNCHED();
    to_host(g2, d_att, n * sizeof(float));
    check_same_bits("causal_softmax_forward", "P", g, g2, n * sizeof(float));

    /* backward from the CPU's P */
    float *dp0 = rand_floats(n, -1, 1, 70 + si), *dp = copy_floats(dp0, n);
    causal_softmax_backward(dp, att, rows, T, scale);
    to_dev(d_att, att, n * sizeof(float));
    float *d_datt = dev_from(dp0, n * sizeof(float));
    gpu_causal_softmax_backward(d_datt, d_att, rows, T, scale, 0);
    check_launch("causal_softmax_backward", "dS", sh->name, g, d_datt, dp, n);
    to_dev(d_datt, dp0, n * sizeof(float));
    gpu_causal_softmax_backward(d_datt, d_att, rows, T, scale, 0);
    LAUNCHED();
    to_host(g2, d_datt, n * sizeof(float));
    check_same_bits("causal_softmax_backward", "dS", g, g2, n * sizeof(float));

    CU(cudaFree(d_att)); CU(cudaFree(d_datt));
    free(att0); free(att); free(g); free(g2); free(dp0); free(dp);
  }
}
END_TEST

/* -------------------------------------------------------- cross-entropy */

START_TEST(crossentropy) {
  for (int si = 0; si < NSHAPES; si++) {
    const shape *sh = &shapes[si];
    const int N = sh->B * sh->T, V = sh->V;
    const size_t NV = (size_t)N * V;
    const float scale = 1.0f / N;
    float *logits = rand_floats(NV, -8, 8, 80 + si), *probs = copy_floats(logits, NV);
    float *losses = malloc(N * sizeof(float)), *g = malloc(NV * sizeof(float)),
          *g2 = malloc(NV * sizeof(float)), *g_losses = malloc(N * sizeof(float)),
          *g_losses2 = malloc(N * sizeof(float));
    int *targets = rand_tokens(N, V, 90 + si);
    crossentropy_softmax_forward(probs, losses, targets, N, V);
    int *d_targets = dev_from(targets, N * sizeof(int));
    float *d_probs = dev_from(logits, NV * sizeof(float)), *d_losses = dev_alloc(N * sizeof(float));
    gpu_crossentropy_forward(d_probs, d_losses, d_targets, N, V, 0);
    LAUNCHED();
    to_host(g, d_probs, NV * sizeof(float));
    to_host(g_losses, d_losses, N * sizeof(float));
    check_close("crossentropy_forward", "probs", sh->name, g, probs, NV);
    check_close("crossentropy_forward", "losses", sh->name, g_losses, losses, N);
    to_dev(d_probs, logits, NV * sizeof(float));
    gpu_crossentropy_forward(d_probs, d_losses, d_targets, N, V, 0);
    LAUNCHED();
    to_host(g2, d_probs, NV * sizeof(float));
    to_host(g_losses2, d_losses, N * sizeof(float));
    check_same_bits("crossentropy_forward", "probs", g, g2, NV * sizeof(float));
    check_same_bits("crossentropy_forward", "losses", g_losses, g_losses2, N * sizeof(float));

    /* the logits' epsilon-sharpness: close to the CPU's, same bits twice, the
     * logits left as they were */
    const size_t NP = (size_t)LOGIT_SHARPNESS_NUM_EPS * N;
    float *phi = malloc(NP * sizeof(float)), *g_phi = malloc(NP * sizeof(float)),
          *g_phi2 = malloc(NP * sizeof(float)), *d_phi = dev_alloc(NP * sizeof(float));
    logit_sharpness_forward(phi, logits, targets, N, V);
    to_dev(d_probs, logits, NV * sizeof(float));
    gpu_logit_sharpness_forward(d_phi, d_probs, d_targets, N, V, 0);
    check_launch("logit_sharpness_forward", "phi", sh->name, g_phi, d_phi, phi, NP);
    gpu_logit_sharpness_forward(d_phi, d_probs, d_targets, N, V, 0);
    LAUNCHED();
    to_host(g_phi2, d_phi, NP * sizeof(float));
    check_same_bits("logit_sharpness_forward", "phi", g_phi, g_phi2, NP * sizeof(float));
    to_host(g2, d_probs, NV * sizeof(float));
    check_same_bits("logit_sharpness_forward", "logits kept", g2, logits, NV * sizeof(float));
    CU(cudaFree(d_phi));
    free(phi); free(g_phi); free(g_phi2);

    /* the mean loss, as model_forward sums it (double, in order) */
    double sum = 0, mean[2];
    for (int i = 0; i < N; i++) sum += losses[i];
    const float cpu_mean = (float)(sum / N);
    double *d_mean = dev_alloc(sizeof(double));
    to_dev(d_losses, losses, N * sizeof(float));
    for (int rep = 0; rep < 2; rep++) {
      gpu_mean(d_losses, N, d_mean, 0);
      LAUNCHED();
      to_host(&mean[rep], d_mean, sizeof(double));
    }
    const float gpu_mean_f = (float)mean[0];
    check_close("mean", "loss", sh->name, &gpu_mean_f, &cpu_mean, 1);
    check_same_bits("mean", "loss", &mean[0], &mean[1], sizeof(double));

    /* backward from the CPU's probabilities, out of place and in place */
    float *dlogits = malloc(NV * sizeof(float));
    crossentropy_softmax_backward(dlogits, probs, targets, N, V, scale);
    to_dev(d_probs, probs, NV * sizeof(float));
    float *d_dlogits = dev_alloc(NV * sizeof(float));
    gpu_crossentropy_backward(d_dlogits, d_probs, d_targets, N, V, scale, 0);
    check_launch("crossentropy_backward", "dlogits", sh->name, g, d_dlogits, dlogits, NV);
    gpu_crossentropy_backward(d_probs, d_probs, d_targets, N, V, scale, 0);
    check_launch("crossentropy_backward", "in place", sh->name, g, d_probs, dlogits, NV);

    CU(cudaFree(d_targets)); CU(cudaFree(d_probs)); CU(cudaFree(d_losses)); CU(cudaFree(d_mean));
    CU(cudaFree(d_dlogits));
    free(logits); free(probs); free(losses); free(g); free(g2); free(g_losses); free(g_losses2);
    free(targets); free(dlogits);
  }
}
END_TEST

/* ------------------------------------------------- gradient norm, AdamW */

START_TEST(sumsq) {
  const size_t sizes[] = {1, 1000, 3000017};
  for (int k = 0; k < 3; k++) {
    const size_t n = sizes[k];
    float *x = rand_floats(n, -0.1, 0.1, 110 + k);
    const double norm = grad_global_norm(x, n);
    float *d_x = dev_from(x, n * sizeof(float));
    double *d_scratch = dev_alloc(gpu_sumsq_scratch(n) * sizeof(double)),
           *d_out = dev_alloc(sizeof(double)), s[2];
    for (int rep = 0; rep < 2; rep++) {
      gpu_sumsq(d_x, n, d_scratch, d_out, 0);
      LAUNCHED();
      to_host(&s[rep], d_out, sizeof(double));
    }
    const double rel = fabs(s[0] - norm * norm) / (norm * norm);
    char name[32];
    snprintf(name, sizeof name, "n=%zu", n);
    printf("  %-26s %-8s %-28s rel err %.3g\n", "sumsq", "norm^2", name, rel);
    ck_assert_msg(rel < 1e-9, "sumsq n=%zu: %.17g vs %.17g", n, s[0], norm * norm);
    check_same_bits("sumsq", "norm^2", &s[0], &s[1], sizeof(double));
    CU(cudaFree(d_x)); CU(cudaFree(d_scratch)); CU(cudaFree(d_out));
    free(x);
  }
}
END_TEST

/* gpu_sumsq + gpu_adamw per tensor against grad_global_norm + grad_clip +
 * adamw_update on the tiny model: clipping active, inactive, and off. */
START_TEST(adamw) {
  model_config cfg;
  ck_assert_int_eq(model_named_size("tiny", &cfg), 0);
  const double max_norms[3] = {1e-3, 1e9, 0};
  const char *names[3] = {"clip on", "clip off", "no clip"};
  const adamw_hparams h = {6e-4f, 0.9f, 0.95f, 1e-8f, 0.1f};
  const int t = 7;
  for (int c = 0; c < 3; c++) {
    model m;
    model_init(&m, &cfg, 5);
    const size_t n = m.num_params;
    uint64_t seed = 120;
    for (size_t i = 0; i < n; i++) m.grads_mem[i] = (float)(0.02 * (uniform01(&seed) - 0.5));
    float *m1 = rand_floats(n, -0.01, 0.01, 121), *m2 = rand_floats(n, 0, 1e-4, 122);
    float *d_p = dev_from(m.params_mem, n * sizeof(float)), *d_g = dev_from(m.grads_mem, n * sizeof(float));
    float *d_m = dev_from(m1, n * sizeof(float)), *d_v = dev_from(m2, n * sizeof(float));
    double *d_scratch = dev_alloc(gpu_sumsq_scratch(n) * sizeof(double)),
           *d_sumsq = dev_alloc(sizeof(double));

    gpu_sumsq(d_g, n, d_scratch, d_sumsq, 0);
    LAUNCHED();
    size_t off = 0;
    for (int ti = 0; ti < NUM_PARAM_TENSORS; ti++) {
      const adamw_coefs coefs = adamw_step_coefs(&h, t, ti);
      const size_t k = m.param_sizes[ti];
      gpu_adamw(d_p + off, d_g + off, d_m + off, d_v + off, k, d_sumsq, max_norms[c], &coefs, 0);
      LAUNCHED();
      off += k;
    }

    const double norm = grad_global_norm(m.grads_mem, n);
    grad_clip(m.grads_mem, n, norm, max_norms[c]);
    adamw_update(&m, m1, m2, &h, t);
    float *g = malloc(n * sizeof(float));
    to_host(g, d_p, n * sizeof(float));
    check_close("adamw", "p", names[c], g, m.params_mem, n);
    to_host(g, d_g, n * sizeof(float));
    check_close("adamw", "g (clip)", names[c], g, m.grads_mem, n);
    to_host(g, d_m, n * sizeof(float));
    check_close("adamw", "m", names[c], g, m1, n);
    to_host(g, d_v, n * sizeof(float));
    check_close("adamw", "v", names[c], g, m2, n);

    CU(cudaFree(d_p)); CU(cudaFree(d_g)); CU(cudaFree(d_m)); CU(cudaFree(d_v));
    CU(cudaFree(d_scratch)); CU(cudaFree(d_sumsq));
    free(g); free(m1); free(m2);
    model_free(&m);
  }
}
END_TEST

/* gpu_adamw_fold against gpu_adamw: p, g, m, v bit for bit, and each
 * matrix's word (amax_stride apart) the finite max |p| of its new values as
 * the host finds it, NaN, infinities and a near-overflow value planted
 * (clipping on: g written too); matrices of 1 to 300007 elements, some
 * longer than their blocks' stride. */
START_TEST(adamw_fold) {
  static const struct { size_t matrices, len, stride; } cases[] = {
      {1, 1, 1}, {3, 1000, 9}, {12, 4099, 9}, {5, 300007, 2}, {1, 3000017, 1}};
  const adamw_hparams h = {6e-4f, 0.9f, 0.95f, 1e-8f, 0.1f};
  const adamw_coefs coefs = adamw_step_coefs(&h, 3, PARAM_W1);
  for (int c = 0; c < (int)(sizeof cases / sizeof cases[0]); c++) {
    const size_t M = cases[c].matrices, len = cases[c].len, stride = cases[c].stride, n = M * len;
    float *p = rand_floats(n, -0.1, 0.1, 130 + c), *g = rand_floats(n, -0.02, 0.02, 140 + c),
          *m1 = rand_floats(n, -0.01, 0.01, 150 + c), *m2 = rand_floats(n, 0, 1e-4, 160 + c);
    if (n > 2) p[n / 2 + 1] = NAN, p[n / 3] = INFINITY, p[n - 1] = -INFINITY;
    if (M > 1) p[len + len / 2] = -3e38f; /* matrix 1's amax */
    float *d[2][4];
    for (int k = 0; k < 2; k++) {
      d[k][0] = dev_from(p, n * sizeof(float)), d[k][1] = dev_from(g, n * sizeof(float));
      d[k][2] = dev_from(m1, n * sizeof(float)), d[k][3] = dev_from(m2, n * sizeof(float));
    }
    double *d_scratch = dev_alloc(gpu_sumsq_scratch(n) * sizeof(double)),
           *d_sumsq = dev_alloc(sizeof(double));
    unsigned int *d_words = dev_alloc(M * stride * sizeof(unsigned int));
    CU(cudaMemset(d_words, 0, M * stride * sizeof(unsigned int)));
    gpu_sumsq(d[0][1], n, d_scratch, d_sumsq, 0);
    LAUNCHED();
    gpu_adamw(d[0][0], d[0][1], d[0][2], d[0][3], n, d_sumsq, 1e-3, &coefs, 0);
    LAUNCHED();
    gpu_adamw_fold(d[1][0], d[1][1], d[1][2], d[1][3], n, d_sumsq, 1e-3, &coefs, M, d_words,
                   stride, 0);
    LAUNCHED();
    float *a = malloc(n * sizeof(float)), *b = malloc(n * sizeof(float));
    static const char *const what[4] = {"p", "g", "m", "v"};
    for (int i = 0; i < 4; i++) {
      to_host(a, d[0][i], n * sizeof(float));
      to_host(b, d[1][i], n * sizeof(float));
      check_same_bits("adamw_fold", what[i], a, b, n * sizeof(float));
    }
    unsigned int *words = malloc(M * stride * sizeof(unsigned int));
    to_host(words, d_words, M * stride * sizeof(unsigned int));
    to_host(b, d[1][0], n * sizeof(float)); /* the new parameters (b held v after the loop) */
    size_t wrong = 0;
    for (size_t j = 0; j < M; j++) {
      wrong += words[j * stride] != finite_amax_bits(b + j * len, len);
      for (size_t k = 1; k < stride; k++)
        wrong += words[j * stride + k] != 0; /* the words between: untouched */
    }
    printf("  %-26s %zu x %zu (stride %zu): p, g, m, v bit-identical, %zu words wrong\n",
           "adamw_fold", M, len, stride, wrong);
    ck_assert_msg(wrong == 0, "adamw_fold %zu x %zu: %zu words wrong", M, len, wrong);
    for (int k = 0; k < 2; k++)
      for (int i = 0; i < 4; i++) CU(cudaFree(d[k][i]));
    CU(cudaFree(d_scratch)); CU(cudaFree(d_sumsq)); CU(cudaFree(d_words));
    free(p); free(g); free(m1); free(m2); free(a); free(b); free(words);
  }
}
END_TEST

/* ------------------------------------------- AdamW with COAT's moments */

/* n values of awkward magnitudes, in stretches of 64 that each take one
 * kind: log-uniform over a span of 2^-40..2^0 times `scale` (the common
 * case), zeros, float32 subnormals, huge values (their squares overflow), one
 * value repeated (a group without span), values within 1% of each other (a
 * group with a large exponent k), a NaN among ordinary values; signs random
 * unless `positive`. */
static void awkward_fill(float *x, size_t n, double scale, bool positive, uint64_t seed) {
  for (size_t i0 = 0; i0 < n; i0 += 64) {
    const int kind = (int)(uniform01(&seed) * 10);
    const double base = scale * exp2(-40 * uniform01(&seed));
    for (size_t i = i0; i < n && i < i0 + 64; i++) {
      const double u = uniform01(&seed);
      double v;
      switch (kind) {
        case 0: v = 0; break;
        case 1: v = 1e-40 * u; break;
        case 2: v = 1e25 * (1 + u); break;
        case 3: v = base; break;
        case 4: v = base * (1 + 0.01 * u); break;
        case 5: v = i == i0 + 7 ? NAN : base * u; break;
        default: v = scale * exp2(-40 * u); break;
      }
      if (!positive && uniform01(&seed) < 0.5) v = -v;
      x[i] = (float)v;
    }
  }
}

/* gpu_adamw_coat against gpu_adamw per tensor followed by
 * exmy_cuda_quantize_group_scaled_f32 on m and on v (the unfused path), bit
 * for bit in p, g, m and v, over several steps that carry the moments: tensors
 * and groups of lengths that are no multiple of 128 or of 32 (groups
 * straddling tensors), awkward values (awkward_fill), clipping on, off and
 * none, both moment formats, expansion on and off, groups of 128, 200, 32, 1;
 * formats the hardware's conversion rounds (E4M3, E5M2) and others, whose
 * exponents fit a warp's table (E3M2) or not (E6M2, E8M3). */
START_TEST(adamw_coat) {
  static const size_t lengths[] = {1, 37, 128, 129, 1000, 4099, 300, 77};
  const int nt = (int)(sizeof lengths / sizeof *lengths);
  size_t n = 0;
  for (int i = 0; i < nt; i++) n += lengths[i];
  const adamw_hparams h = {6e-4f, 0.9f, 0.95f, 1e-8f, 0.1f};
  static const struct {
    const char *m_format, *v_format;
    int group;
    bool dre;
    double max_norm;
  } cases[] = {
      {"e4m3", "e4m3", 128, true, 1e-3}, {"e4m3", "e4m3", 128, true, 1e30},
      {"e4m3", "e4m3", 128, true, 0},    {"e4m3", "e5m2", 128, true, 0},
      {"e4m3", "e4m3", 200, true, 0},    {"e4m3", "e4m3", 32, true, 1e-3},
      {"e4m3", "e4m3", 1, true, 0},      {"e4m3", "e4m3", 128, false, 0},
      {"e5m2", "e4m3", 77, false, 1e-3}, {"e3m2", "e6m2", 128, true, 1e-3},
      {"e8m3", "e5m2", 128, true, 0},
  };
  float *p = malloc(n * sizeof(float)), *g = malloc(n * sizeof(float));
  float *m = malloc(n * sizeof(float)), *v = malloc(n * sizeof(float));
  float *a = malloc(n * sizeof(float)), *b = malloc(n * sizeof(float));
  float *d_p[2], *d_g[2], *d_m[2], *d_v[2];
  for (int k = 0; k < 2; k++) {
    d_p[k] = dev_alloc(n * sizeof(float)), d_g[k] = dev_alloc(n * sizeof(float));
    d_m[k] = dev_alloc(n * sizeof(float)), d_v[k] = dev_alloc(n * sizeof(float));
  }
  double *d_scratch = dev_alloc(gpu_sumsq_scratch(n) * sizeof(double)),
         *d_sumsq = dev_alloc(sizeof(double));
  for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
    exmy_format formats[2];
    ck_assert(!exmy_format_parse(cases[c].m_format, &formats[0]));
    ck_assert(!exmy_format_parse(cases[c].v_format, &formats[1]));
    awkward_fill(p, n, 0.05, false, 300 + c);
    awkward_fill(m, n, 1e-3, false, 400 + c);
    awkward_fill(v, n, 1e-6, true, 500 + c);
    for (int k = 0; k < 2; k++) {
      to_dev(d_p[k], p, n * sizeof(float));
      to_dev(d_m[k], m, n * sizeof(float));
      to_dev(d_v[k], v, n * sizeof(float));
    }
    char shape[64];
    snprintf(shape, sizeof shape, "%s/%s g%d%s clip %g", cases[c].m_format, cases[c].v_format,
             cases[c].group, cases[c].dre ? " dre" : "", cases[c].max_norm);
    for (int step = 1; step <= 3; step++) {
      awkward_fill(g, n, 1e-2, false, 600 + 10 * c + step);
      /* a gradient norm that is a number (a NaN gradient would turn clipping off) */
      for (size_t i = 0; i < n; i++)
        if (g[i] != g[i]) g[i] = 0.5f;
      for (int k = 0; k < 2; k++) to_dev(d_g[k], g, n * sizeof(float));
      gpu_sumsq(d_g[0], n, d_scratch, d_sumsq, 0);
      adamw_coefs coefs[8];
      for (int ti = 0; ti < nt; ti++) coefs[ti] = adamw_step_coefs(&h, step, ti % NUM_PARAM_TENSORS);
      /* the unfused path */
      size_t off = 0;
      for (int ti = 0; ti < nt; ti++) {
        gpu_adamw(d_p[0] + off, d_g[0] + off, d_m[0] + off, d_v[0] + off, lengths[ti], d_sumsq,
                  cases[c].max_norm, &coefs[ti], 0);
        off += lengths[ti];
      }
      exmy_rounding_opts o = {0};
      o.mode = EXMY_RNE;
      o.saturate = true;
      for (int k = 0; k < 2; k++)
        CU(exmy_cuda_quantize_group_scaled_f32(&formats[k], &o, cases[c].group, 0, false,
                                               cases[c].dre, k ? d_v[0] : d_m[0],
                                               k ? d_v[0] : d_m[0], 1, n, 0));
      LAUNCHED();
      /* the fused one */
      CU(gpu_adamw_coat(d_p[1], d_g[1], d_m[1], d_v[1], lengths, coefs, nt, d_sumsq,
                        cases[c].max_norm, formats, cases[c].group, cases[c].dre, 0));
      LAUNCHED();
      float *const dev[4][2] = {{d_p[0], d_p[1]}, {d_g[0], d_g[1]}, {d_m[0], d_m[1]},
                                {d_v[0], d_v[1]}};
      static const char *const what[4] = {"p", "g", "m", "v"};
      for (int w = 0; w < 4; w++) {
        to_host(a, dev[w][0], n * sizeof(float));
        to_host(b, dev[w][1], n * sizeof(float));
        size_t differ = 0, first = n;
        for (size_t i = 0; i < n; i++)
          if (memcmp(&a[i], &b[i], sizeof(float))) differ++, first = first < n ? first : i;
        printf("  %-26s %-8s %-28s step %d: %zu of %zu differ\n", "adamw_coat", what[w], shape,
               step, differ, n);
        ck_assert_msg(!differ, "adamw_coat %s (%s) step %d: %zu of %zu differ, first at %zu: "
                      "%a (unfused) vs %a (fused)", what[w], shape, step, differ, n, first,
                      differ ? a[first] : 0.0f, differ ? b[first] : 0.0f);
      }
    }
  }
  for (int k = 0; k < 2; k++) {
    CU(cudaFree(d_p[k])); CU(cudaFree(d_g[k])); CU(cudaFree(d_m[k])); CU(cudaFree(d_v[k]));
  }
  CU(cudaFree(d_scratch)); CU(cudaFree(d_sumsq));
  free(p); free(g); free(m); free(v); free(a); free(b);
}
END_TEST

/* ------------------------- current scaling of many matrices in one launch */

/* gpu_amax_matrices and gpu_quantize_matrices_scaled (the weight gradients'
 * grad_format) against exmy_cuda_quantize_tensor_scaled_f32 on each matrix
 * alone: every word the finite amax of its matrix, every value bit for bit
 * and the gaps between the matrices untouched; matrices of 0 to 300007
 * elements at unaligned starts, awkward values with NaN and infinities
 * planted and a matrix with no finite value; E4M3, E5M2 (margin 1, pow2, not
 * saturating), E2M1; what is not served refused. */
START_TEST(quantize_matrices) {
  static const size_t lengths[] = {1000, 1, 0, 37, 4099, 300007, 64, 5};
  enum { M = sizeof lengths / sizeof *lengths };
  static const struct {
    const char *format;
    int margin;
    bool pow2, saturate;
  } cases[] = {{"e4m3", 0, false, true}, {"e5m2", 1, true, false}, {"e2m1", 0, false, true}};
  size_t offset[M], n = 0, max_n = 0;
  for (int j = 0; j < M; j++) { /* one float of gap before each */
    offset[j] = n + 1, n += lengths[j] + 1;
    if (lengths[j] > max_n) max_n = lengths[j];
  }
  float *x = malloc(n * sizeof(float)), *a = malloc(n * sizeof(float)),
        *b = malloc(n * sizeof(float));
  awkward_fill(x, n, 1.0, false, 170);
  x[offset[0] + 10] = NAN, x[offset[0] + 11] = INFINITY, x[offset[4] + 7] = -INFINITY;
  x[offset[5] + 123456] = -3e38f;
  for (size_t i = 0; i < lengths[7]; i++) x[offset[7] + i] = i % 2 ? NAN : -INFINITY;
  float *d_ref = dev_alloc(n * sizeof(float)), *d_x = dev_alloc(n * sizeof(float));
  gpu_matrix mats[M];
  for (int j = 0; j < M; j++) mats[j] = (gpu_matrix){d_x + offset[j], lengths[j]};
  gpu_matrix *d_mats = dev_from(mats, sizeof mats);
  unsigned int *d_words = dev_alloc(M * sizeof(unsigned int)), words[M];
  for (int c = 0; c < (int)(sizeof cases / sizeof cases[0]); c++) {
    exmy_format f;
    ck_assert(!exmy_format_parse(cases[c].format, &f));
    const exmy_rounding_opts o = {.mode = EXMY_RNE, .saturate = cases[c].saturate};
    ck_assert(gpu_quantize_matrices_serves(&f, &o));
    to_dev(d_ref, x, n * sizeof(float));
    to_dev(d_x, x, n * sizeof(float));
    for (int j = 0; j < M; j++)
      CU(exmy_cuda_quantize_tensor_scaled_f32(&f, &o, cases[c].margin, cases[c].pow2,
                                              d_ref + offset[j], d_ref + offset[j], lengths[j],
                                              NULL, 0));
    LAUNCHED();
    CU(cudaMemset(d_words, 0, M * sizeof(unsigned int)));
    gpu_amax_matrices(d_mats, M, max_n, d_words, 0);
    LAUNCHED();
    CU(gpu_quantize_matrices_scaled(&f, &o, cases[c].margin, cases[c].pow2, d_mats, M, max_n,
                                    d_words, 0));
    LAUNCHED();
    to_host(a, d_ref, n * sizeof(float));
    to_host(b, d_x, n * sizeof(float));
    to_host(words, d_words, sizeof words);
    size_t differ = 0, wrong = 0, rounded = 0;
    for (size_t i = 0; i < n; i++) {
      differ += memcmp(&a[i], &b[i], sizeof(float)) != 0;
      rounded += memcmp(&x[i], &b[i], sizeof(float)) != 0;
    }
    for (int j = 0; j < M; j++) wrong += words[j] != finite_amax_bits(x + offset[j], lengths[j]);
    printf("  %-26s %s: %d matrices, %zu of %zu values rounded, %zu differ, %zu words wrong\n",
           "quantize_matrices", cases[c].format, M, rounded, n, differ, wrong);
    ck_assert_msg(differ == 0 && wrong == 0, "quantize_matrices %s: %zu values, %zu words wrong",
                  cases[c].format, differ, wrong);
    ck_assert_msg(rounded > n / 4, "quantize_matrices %s: too few values rounded (%zu)",
                  cases[c].format, rounded);
  }
  /* not served: a format without float32 scaled kernels, sr */
  exmy_format e3m4, e4m3;
  ck_assert(!exmy_format_parse("float8_e3m4", &e3m4) && !exmy_format_parse("e4m3", &e4m3));
  const exmy_rounding_opts rne = {.mode = EXMY_RNE}, sr = {.mode = EXMY_SR, .sr_bits = 32};
  ck_assert(!gpu_quantize_matrices_serves(&e3m4, &rne) && !gpu_quantize_matrices_serves(&e4m3, &sr));
  ck_assert(gpu_quantize_matrices_scaled(&e3m4, &rne, 0, false, d_mats, M, max_n, d_words, 0) ==
            cudaErrorInvalidValue);
  CU(cudaFree(d_ref)); CU(cudaFree(d_x)); CU(cudaFree(d_mats)); CU(cudaFree(d_words));
  free(x); free(a); free(b);
}
END_TEST

/* ---------------------------------------------- 120M scale: repeat, time */

/* Fills a device buffer of n floats with a random pattern (16M random values
 * tiled) in [lo, hi). */
static void dev_fill(float *d, size_t n, double lo, double hi, uint64_t seed) {
  const size_t tile = (size_t)1 << 24;
  float *r = rand_floats(n < tile ? n : tile, lo, hi, seed);
  for (size_t i = 0; i < n; i += tile)
    to_dev(d + i, r, (n - i < tile ? n - i : tile) * sizeof(float));
  free(r);
}

static cudaEvent_t ev0, ev1;
static void timer_start(void) { CU(cudaEventRecord(ev0, 0)); }
/* milliseconds per call over `reps` calls, and the bandwidth of `bytes` per call */
static void timer_report(const char *fn, int reps, double bytes) {
  float ms;
  CU(cudaEventRecord(ev1, 0));
  LAUNCHED();
  CU(cudaEventElapsedTime(&ms, ev0, ev1));
  ms /= reps;
  printf("  %-26s %8.3f ms  %7.0f GB/s\n", fn, ms, bytes / (ms * 1e6));
}

START_TEST(scale_120m) {
  model_config cfg;
  ck_assert_int_eq(model_named_size("120m", &cfg), 0);
  const int B = 32, T = cfg.seq_len, C = cfg.dim, H = cfg.hidden, V = cfg.vocab, NH = cfg.n_heads,
            hs = C / NH, N = B * T;
  const size_t NC = (size_t)N * C, NH_ = (size_t)N * H, NV = (size_t)N * V;
  const long rows = (long)B * NH * T;
  const size_t natt = (size_t)rows * T;
  size_t psizes[NUM_PARAM_TENSORS];
  const size_t P = model_param_sizes(&cfg, psizes);
  printf("  B=%d T=%d C=%d H=%d V=%d NH=%d, %zu parameters\n", B, T, C, H, V, NH, P);
  CU(cudaEventCreate(&ev0));
  CU(cudaEventCreate(&ev1));
  const int R = 5;

  /* parameters, gradients, moments */
  float *d_p = dev_alloc(P * sizeof(float)), *d_g = dev_alloc(P * sizeof(float));
  float *d_m = dev_alloc(P * sizeof(float)), *d_v = dev_alloc(P * sizeof(float));
  dev_fill(d_p, P, -0.05, 0.05, 1); dev_fill(d_g, P, -1e-3, 1e-3, 2);
  dev_fill(d_m, P, -1e-3, 1e-3, 3); dev_fill(d_v, P, 0, 1e-6, 4);
  double *d_scratch = dev_alloc(gpu_sumsq_scratch(P) * sizeof(double)),
         *d_sumsq = dev_alloc(sizeof(double)), s[2];
  for (int rep = 0; rep < 2; rep++) {
    gpu_sumsq(d_g, P, d_scratch, d_sumsq, 0);
    LAUNCHED();
    to_host(&s[rep], d_sumsq, sizeof(double));
  }
  check_same_bits("sumsq", "120m grads", &s[0], &s[1], sizeof(double));
  timer_start();
  for (int r = 0; r < R; r++) gpu_sumsq(d_g, P, d_scratch, d_sumsq, 0);
  timer_report("sumsq (all grads)", R, 4.0 * P);
  const adamw_coefs coefs = {.beta1 = 0.9f, .beta2 = 0.95f, .one_minus_beta1 = 1.0f - 0.9f,
                             .one_minus_beta2 = 1.0f - 0.95f, .eps = 1e-8f, .step_size = 1e-3f,
                             .bc2_sqrt = 0.5f, .decay = 0.9999f};
  timer_start();
  for (int r = 0; r < R; r++) gpu_adamw(d_p, d_g, d_m, d_v, P, d_sumsq, 1e9, &coefs, 0);
  timer_report("adamw (all params)", R, 7.0 * 4 * P);
  /* fp8-coat's optimizer: AdamW, then each moment group-quantized (e4m3,
   * groups of 128, dynamic range expansion), against the fused pass */
  exmy_format e4m3[2];
  ck_assert(!exmy_format_parse("e4m3", &e4m3[0]));
  e4m3[1] = e4m3[0];
  exmy_rounding_opts rne_sat = {0};
  rne_sat.mode = EXMY_RNE;
  rne_sat.saturate = true;
  adamw_coefs coefs_all[NUM_PARAM_TENSORS];
  for (int ti = 0; ti < NUM_PARAM_TENSORS; ti++) coefs_all[ti] = coefs;
  timer_start();
  for (int r = 0; r < R; r++) {
    gpu_adamw(d_p, d_g, d_m, d_v, P, d_sumsq, 1e9, &coefs, 0);
    for (int k = 0; k < 2; k++)
      CU(exmy_cuda_quantize_group_scaled_f32(&e4m3[k], &rne_sat, 128, 0, false, true,
                                             k ? d_v : d_m, k ? d_v : d_m, 1, P, 0));
  }
  timer_report("adamw + coat moments", R, 7.0 * 4 * P + 4.0 * 4 * P);
  timer_start();
  for (int r = 0; r < R; r++)
    CU(gpu_adamw_coat(d_p, d_g, d_m, d_v, psizes, coefs_all, NUM_PARAM_TENSORS, d_sumsq, 1e9,
                      e4m3, 128, true, 0));
  timer_report("adamw_coat (fused)", R, 7.0 * 4 * P);
  { /* one more step of each from the same state, compared bit for bit */
    float *src[4] = {d_p, d_g, d_m, d_v}, *twin[4];
    for (int k = 0; k < 4; k++) {
      twin[k] = dev_alloc(P * sizeof(float));
      CU(cudaMemcpy(twin[k], src[k], P * sizeof(float), cudaMemcpyDeviceToDevice));
    }
    gpu_adamw(d_p, d_g, d_m, d_v, P, d_sumsq, 1e9, &coefs, 0);
    for (int k = 0; k < 2; k++)
      CU(exmy_cuda_quantize_group_scaled_f32(&e4m3[k], &rne_sat, 128, 0, false, true,
                                             k ? d_v : d_m, k ? d_v : d_m, 1, P, 0));
    CU(gpu_adamw_coat(twin[0], twin[1], twin[2], twin[3], psizes, coefs_all, NUM_PARAM_TENSORS,
                      d_sumsq, 1e9, e4m3, 128, true, 0));
    LAUNCHED();
    float *a = malloc(P * sizeof(float)), *b = malloc(P * sizeof(float));
    static const char *const what[4] = {"p", "g", "m", "v"};
    for (int k = 0; k < 4; k++) {
      to_host(a, src[k], P * sizeof(float));
      to_host(b, twin[k], P * sizeof(float));
      size_t differ = 0;
      for (size_t i = 0; i < P; i++) differ += memcmp(&a[i], &b[i], sizeof(float)) != 0;
      printf("  %-26s %-8s %-28s %zu of %zu differ\n", "adamw_coat", what[k], "120m", differ, P);
      ck_assert_msg(!differ, "adamw_coat %s at 120m: %zu of %zu differ", what[k], differ, P);
      CU(cudaFree(twin[k]));
    }
    free(a); free(b);
  }
  CU(cudaFree(d_p)); CU(cudaFree(d_g)); CU(cudaFree(d_m)); CU(cudaFree(d_v));
  CU(cudaFree(d_scratch)); CU(cudaFree(d_sumsq));

  /* the layers of one block */
  float *a = dev_alloc(NH_ * sizeof(float)), *b = dev_alloc(NH_ * sizeof(float));
  float *c = dev_alloc(NH_ * sizeof(float)), *d = dev_alloc(NH_ * sizeof(float));
  float *w = dev_alloc(C * sizeof(float)), *rstd = dev_alloc(N * sizeof(float));
  float *dw = dev_alloc(C * sizeof(float)), *wte = dev_alloc((size_t)V * C * sizeof(float));
  dev_fill(a, NH_, -3, 3, 5); dev_fill(b, NH_, -1, 1, 6); dev_fill(c, NH_, -1, 1, 7);
  dev_fill(w, C, 0.5, 1.5, 8); dev_fill(wte, (size_t)V * C, -1, 1, 9);
  int *tokens = rand_tokens(N, V, 10), *start = malloc((V + 1) * sizeof(int)),
      *pos = malloc(N * sizeof(int));
  int *d_tokens = dev_from(tokens, N * sizeof(int));
  gpu_token_buckets(tokens, N, V, start, pos);
  int *d_start = dev_from(start, (V + 1) * sizeof(int)), *d_pos = dev_from(pos, N * sizeof(int));

  timer_start();
  for (int r = 0; r < R; r++) gpu_encoder_forward(d, d_tokens, wte, N, C, 0);
  timer_report("encoder_forward", R, 8.0 * NC);
  float *wte1 = malloc((size_t)V * C * sizeof(float)), *wte2 = malloc((size_t)V * C * sizeof(float));
  CU(cudaMemset(dw, 0, C * sizeof(float)));
  for (int rep = 0; rep < 2; rep++) {
    dev_fill(wte, (size_t)V * C, -1, 1, 9);
    gpu_encoder_backward(wte, b, d_start, d_pos, V, C, 0);
    LAUNCHED();
    to_host(rep ? wte2 : wte1, wte, (size_t)V * C * sizeof(float));
  }
  check_same_bits("encoder_backward", "120m", wte1, wte2, (size_t)V * C * sizeof(float));
  timer_start();
  for (int r = 0; r < R; r++) gpu_encoder_backward(wte, b, d_start, d_pos, V, C, 0);
  timer_report("encoder_backward", R, 4.0 * NC);

  timer_start();
  for (int r = 0; r < R; r++) gpu_rmsnorm_forward(d, rstd, a, w, N, C, NULL, 0);
  timer_report("rmsnorm_forward", R, 8.0 * NC);
  float dw1[768], dw2[768];
  ck_assert_int_le(C, 768);
  for (int rep = 0; rep < 2; rep++) {
    CU(cudaMemset(dw, 0, C * sizeof(float)));
    gpu_rmsnorm_backward(c, dw, b, a, w, rstd, N, C, NULL, 0);
    LAUNCHED();
    to_host(rep ? dw2 : dw1, dw, C * sizeof(float));
  }
  check_same_bits("rmsnorm_backward", "120m dw", dw1, dw2, C * sizeof(float));
  timer_start();
  for (int r = 0; r < R; r++) gpu_rmsnorm_backward(c, dw, b, a, w, rstd, N, C, NULL, 0);
  timer_report("rmsnorm_backward", R, 4.0 * 5 * NC);

  float *cs = dev_alloc((size_t)T * hs / 2 * sizeof(float)),
        *sn = dev_alloc((size_t)T * hs / 2 * sizeof(float));
  dev_fill(cs, (size_t)T * hs / 2, -1, 1, 11); dev_fill(sn, (size_t)T * hs / 2, -1, 1, 12);
  timer_start();
  for (int r = 0; r < R; r++) gpu_rope_forward(d, cs, sn, B, T, NH, hs, 0);
  timer_report("rope_forward (q)", R, 8.0 * NC);

  timer_start();
  for (int r = 0; r < R; r++) gpu_swiglu_forward(d, a, b, NH_, NULL, 0);
  timer_report("swiglu_forward", R, 12.0 * NH_);
  timer_start();
  for (int r = 0; r < R; r++) gpu_swiglu_backward(c, d, b, a, b, NH_, 0);
  timer_report("swiglu_backward", R, 20.0 * NH_);
  {
    /* the trainer's bf16 operands of dh1 and dh3: float32 then two passes,
     * against the fused kernel (bytes: 20 + 2 x 6 per element, against 16) */
    exmy_format bf;
    ck_assert_int_eq(exmy_format_parse("bf16", &bf), 0);
    const exmy_rounding_opts rne = {0};
    uint16_t *q1 = dev_alloc(NH_ * 2), *q3 = dev_alloc(NH_ * 2);
    timer_start();
    for (int r = 0; r < R; r++) {
      gpu_swiglu_backward(c, d, b, a, b, NH_, 0);
      CU(exmy_cuda_quantize_bf16(&bf, &rne, c, q1, NH_, 0));
      CU(exmy_cuda_quantize_bf16(&bf, &rne, d, q3, NH_, 0));
    }
    timer_report("swiglu_backward + 2 bf16", R, 32.0 * NH_);
    timer_start();
    for (int r = 0; r < R; r++)
      CU(gpu_swiglu_backward_bf16(q1, q3, b, a, b, NH_, &bf, &rne, &rne, NULL, NULL, 0));
    timer_report("swiglu_backward_bf16", R, 16.0 * NH_);
    /* the same under fp8-te's delayed scaling (bytes as above) and
     * fp8-current's current scaling (20 + 2 x (4 + 6) per element, against 12
     * for the amax kernel and 16 for the images) */
    exmy_format e5;
    ck_assert_int_eq(exmy_format_parse("e5m2", &e5), 0);
    exmy_rounding_opts sat = {0};
    sat.saturate = true;
    exmy_cuda_delayed_state *st1 = exmy_cuda_delayed_state_new(16),
                            *st3 = exmy_cuda_delayed_state_new(16);
    float *used = dev_alloc(2 * sizeof(float)), *si = dev_alloc(4 * sizeof(float));
    unsigned int *amax = dev_alloc(2 * sizeof(unsigned int));
    timer_start();
    for (int r = 0; r < R; r++) {
      gpu_swiglu_backward(c, d, b, a, b, NH_, 0);
      CU(exmy_cuda_quantize_delayed_bf16(&e5, &sat, 0, false, false, st1, c, q1, NH_, used, 0));
      CU(exmy_cuda_quantize_delayed_bf16(&e5, &sat, 0, false, false, st3, d, q3, NH_, used + 1,
                                         0));
    }
    timer_report("swiglu_backward + 2 delayed", R, 32.0 * NH_);
    timer_start();
    for (int r = 0; r < R; r++) {
      gpu_bf16_scaling sc1 = {0}, sc3 = {0};
      CU(exmy_cuda_delayed_begin(st1, &sc1.scale_inv, &sc1.amax_bits, 0));
      CU(exmy_cuda_delayed_begin(st3, &sc3.scale_inv, &sc3.amax_bits, 0));
      CU(gpu_swiglu_backward_bf16(q1, q3, b, a, b, NH_, &e5, &sat, &sat, &sc1, &sc3, 0));
      CU(exmy_cuda_delayed_end(&e5, 0, false, false, st1, used, 0));
      CU(exmy_cuda_delayed_end(&e5, 0, false, false, st3, used + 1, 0));
    }
    timer_report("swiglu_backward_bf16 delayed", R, 16.0 * NH_);
    timer_start();
    for (int r = 0; r < R; r++) {
      gpu_swiglu_backward(c, d, b, a, b, NH_, 0);
      CU(exmy_cuda_quantize_tensor_bf16(&e5, &sat, 0, false, c, q1, NH_, used, 0));
      CU(exmy_cuda_quantize_tensor_bf16(&e5, &sat, 0, false, d, q3, NH_, used + 1, 0));
    }
    timer_report("swiglu_backward + 2 current", R, 40.0 * NH_);
    timer_start();
    for (int r = 0; r < R; r++) {
      CU(cudaMemsetAsync(amax, 0, 2 * sizeof(unsigned int), 0));
      CU(gpu_swiglu_backward_amax(b, a, b, NH_, amax, amax + 1, 0));
      CU(exmy_cuda_scale_from_amax(&e5, 0, false, amax, si, 0));
      CU(exmy_cuda_scale_from_amax(&e5, 0, false, amax + 1, si + 2, 0));
      const gpu_bf16_scaling sc1 = {.scale_inv = si}, sc3 = {.scale_inv = si + 2};
      CU(gpu_swiglu_backward_bf16(q1, q3, b, a, b, NH_, &e5, &sat, &sat, &sc1, &sc3, 0));
    }
    timer_report("swiglu_backward_bf16 current", R, 28.0 * NH_);
    exmy_cuda_delayed_state_free(st1);
    exmy_cuda_delayed_state_free(st3);
    CU(cudaFree(used)); CU(cudaFree(si)); CU(cudaFree(amax));
    CU(cudaFree(q1)); CU(cudaFree(q3));
  }
  timer_start();
  for (int r = 0; r < R; r++) gpu_add_inplace(c, d, NC, 0);
  timer_report("add_inplace (N*C)", R, 12.0 * NC);
  {
    /* a producer and the current-scaled E4M3 fill of its output: the amax
     * pass (exmy_cuda_quantize_tensor_bf16; 4 + 4 + 2 bytes per element
     * after the producer's), against the producer folding the amax and the
     * rounding pass alone (4 + 2) */
    exmy_format e4;
    ck_assert_int_eq(exmy_format_parse("e4m3", &e4), 0);
    exmy_rounding_opts sat = {0};
    sat.saturate = true;
    uint16_t *img = dev_alloc(NH_ * 2);
    float *si = dev_alloc(2 * sizeof(float));
    unsigned int *amax = dev_alloc(sizeof(unsigned int));
    static const char *const names[3][2] = {
        {"rmsnorm_forward + current", "rmsnorm_forward amax + scaled"},
        {"rope_backward + current", "rope_backward amax + scaled"},
        {"swiglu_forward + current", "swiglu_forward amax + scaled"}};
    const size_t n[3] = {NC, NC, NH_};
    const double producer_bytes[3] = {8.0, 8.0, 12.0};
    for (int k = 0; k < 3; k++)
      for (int fold = 0; fold < 2; fold++) {
        timer_start();
        for (int r = 0; r < R; r++) {
          unsigned int *word = fold ? amax : NULL;
          if (fold) CU(cudaMemsetAsync(amax, 0, sizeof(unsigned int), 0));
          if (k == 0) gpu_rmsnorm_forward(d, rstd, a, w, N, C, word, 0);
          else if (k == 1) gpu_rope_backward(d, cs, sn, B, T, NH, hs, word, 0);
          else gpu_swiglu_forward(d, a, b, NH_, word, 0);
          if (fold) {
            CU(exmy_cuda_scale_from_amax(&e4, 0, false, amax, si, 0));
            CU(exmy_cuda_quantize_scaled_bf16(&e4, &sat, si, d, img, n[k], 0));
          } else {
            CU(exmy_cuda_quantize_tensor_bf16(&e4, &sat, 0, false, d, img, n[k], si, 0));
          }
        }
        timer_report(names[k][fold], R, (producer_bytes[k] + (fold ? 6.0 : 10.0)) * n[k]);
      }
    CU(cudaFree(img)); CU(cudaFree(si)); CU(cudaFree(amax));
  }

  int *d_targets = d_tokens;
  float *losses = dev_alloc(N * sizeof(float));
  double *d_mean = dev_alloc(sizeof(double)), mean[2];
  dev_fill(d, NV, -8, 8, 13);
  timer_start(); /* later calls see probabilities as logits: as good an input */
  for (int r = 0; r < R; r++) gpu_crossentropy_forward(d, losses, d_targets, N, V, 0);
  timer_report("crossentropy_forward", R, 8.0 * NV);
  for (int rep = 0; rep < 2; rep++) {
    gpu_mean(losses, N, d_mean, 0);
    LAUNCHED();
    to_host(&mean[rep], d_mean, sizeof(double));
  }
  check_same_bits("mean", "120m losses", &mean[0], &mean[1], sizeof(double));
  timer_start();
  for (int r = 0; r < R; r++) gpu_mean(losses, N, d_mean, 0);
  timer_report("mean (N losses)", R, 4.0 * N);
  timer_start();
  for (int r = 0; r < R; r++) gpu_crossentropy_backward(c, d, d_targets, N, V, 1.0f / N, 0);
  timer_report("crossentropy_backward", R, 8.0 * NV);
  CU(cudaFree(a)); CU(cudaFree(b)); CU(cudaFree(c)); CU(cudaFree(d)); CU(cudaFree(w));
  CU(cudaFree(rstd)); CU(cudaFree(dw)); CU(cudaFree(wte)); CU(cudaFree(d_tokens));
  CU(cudaFree(d_start)); CU(cudaFree(d_pos)); CU(cudaFree(cs)); CU(cudaFree(sn));
  CU(cudaFree(losses)); CU(cudaFree(d_mean));

  /* the materialised attention's softmax: B * NH * T rows of T */
  float *att = dev_alloc(natt * sizeof(float)), *datt = dev_alloc(natt * sizeof(float));
  dev_fill(att, natt, -6, 6, 14); dev_fill(datt, natt, -1, 1, 15);
  timer_start();
  gpu_causal_softmax_forward(att, rows, T, 0);
  timer_report("causal_softmax_forward", 1, 8.0 * natt);
  timer_start();
  gpu_causal_softmax_backward(datt, att, rows, T, 0.125f, 0);
  timer_report("causal_softmax_backward", 1, 12.0 * natt);
  CU(cudaFree(att)); CU(cudaFree(datt));
  CU(cudaEventDestroy(ev0)); CU(cudaEventDestroy(ev1));
  free(tokens); free(start); free(pos); free(wte1); free(wte2);
}
END_TEST

/* ------------------------------------------- activations = bf16: RoPE, SwiGLU */

/* Bit for bit, or the first difference.  A NaN matches any NaN: the sign of
 * a NaN that arithmetic makes is each device's own (x86 makes inf - inf and
 * 0 inf a negative NaN, the GPU a positive one), and bf16 rounding keeps it. */
static void check_bits_equal(const char *fn, const char *what, const char *shape,
                             const float *gpu, const float *cpu, size_t n) {
  size_t differ = 0, first = n;
  for (size_t i = 0; i < n; i++)
    if (memcmp(&gpu[i], &cpu[i], sizeof(float)) && !(isnan(gpu[i]) && isnan(cpu[i]))) {
      if (!differ) first = i;
      differ++;
    }
  uint32_t g = 0, c = 0;
  if (differ) memcpy(&g, &gpu[first], 4), memcpy(&c, &cpu[first], 4);
  ck_assert_msg(!differ, "%s %s (%s): %zu of %zu differ, first at %zu: gpu %08x cpu %08x", fn,
                what, shape, differ, n, first, g, c);
}

/* Every value of x[0..n) a bf16 value (NaN counted as one). */
static bool all_bf16_values(const float *x, size_t n) {
  for (size_t i = 0; i < n; i++) {
    uint32_t u;
    memcpy(&u, &x[i], 4);
    if ((u & 0xFFFFu) && !isnan(x[i])) return false;
  }
  return true;
}

/* activations = bf16's element-wise layers (layers.h's *_act_bf16) against
 * model.c's, bit for bit: RoPE forward and backward (q and k heads), SwiGLU
 * forward and backward; inputs from awkward_fill (zeros, float32 subnormals,
 * 1e25, near-equal runs, NaN) plus infinities, large h1 whose exp overflows,
 * and a length that is not a multiple of a block.  The amax the kernels fold
 * must be the output's finite amax, and every output a bf16 value. */
START_TEST(act_bf16_elementwise) {
  unsigned *d_amax = dev_alloc(sizeof(unsigned));
  for (int si = 0; si < NSHAPES; si++) {
    const shape *sh = &shapes[si];
    const int B = sh->B, T = sh->T, hs = sh->C / sh->NH;
    const rope_table_pair rt = rope_tables_on_both(T, hs);
    const float *cs = rt.cs, *sn = rt.sn, *d_cs = rt.d_cs, *d_sn = rt.d_sn;
    const int heads[2] = {sh->NH, sh->NKV};
    for (int q = 0; q < 2; q++) {
      const size_t n = (size_t)B * T * heads[q] * hs;
      float *x = malloc(n * sizeof(float)), *cpu = malloc(n * sizeof(float)),
            *g = malloc(n * sizeof(float));
      awkward_fill(x, n, 4.0, false, 400 + 2 * si + q);
      plant_specials(x, n, n / 2 + 1);
      float *d_x = dev_alloc(n * sizeof(float));
      for (int back = 0; back < 2; back++) {
        memcpy(cpu, x, n * sizeof(float));
        to_dev(d_x, x, n * sizeof(float));
        CU(cudaMemset(d_amax, 0, sizeof(unsigned)));
        if (back) {
          rope_backward_act_bf16(cpu, cs, sn, B, T, heads[q], hs);
          gpu_rope_backward_act_bf16(d_x, d_cs, d_sn, B, T, heads[q], hs, d_amax, 0);
        } else {
          rope_forward_act_bf16(cpu, cs, sn, B, T, heads[q], hs);
          gpu_rope_forward_act_bf16(d_x, d_cs, d_sn, B, T, heads[q], hs, 0);
        }
        LAUNCHED();
        to_host(g, d_x, n * sizeof(float));
        const char *fn = back ? "rope_backward_act_bf16" : "rope_forward_act_bf16";
        check_bits_equal(fn, q ? "k" : "q", sh->name, g, cpu, n);
        ck_assert_msg(all_bf16_values(g, n), "%s (%s): a value not bf16", fn, sh->name);
        if (back) {
          unsigned word;
          to_host(&word, d_amax, sizeof word);
          ck_assert_msg(word == finite_amax_bits(cpu, n), "%s (%s): folded amax %08x", fn,
                        sh->name, word);
        }
      }
      CU(cudaFree(d_x));
      free(x); free(cpu); free(g);
    }
    rope_tables_free(rt);

    const size_t n = (size_t)B * T * sh->H + 5;
    float *h1 = malloc(n * sizeof(float)), *h3 = malloc(n * sizeof(float)),
          *dout = malloc(n * sizeof(float));
    awkward_fill(h1, n, 16.0, false, 500 + si);
    awkward_fill(h3, n, 4.0, false, 510 + si);
    awkward_fill(dout, n, 1.0, false, 520 + si);
    plant_specials(h1, n, 11);
    plant_specials(h3, n, n / 3);
    plant_specials(dout, n, n - 4);
    h1[20] = 100.0f, h1[21] = -100.0f, h1[22] = 3e38f, h1[23] = -3e38f; /* exp over/underflows */
    h1[24] = 0.0f, h1[25] = -0.0f, h3[26] = 3e38f, dout[27] = -3e38f;   /* bf16 overflow */
    float *out = malloc(n * sizeof(float)), *dh1 = malloc(n * sizeof(float)),
          *dh3 = malloc(n * sizeof(float)), *g = malloc(n * sizeof(float));
    swiglu_forward_act_bf16(out, h1, h3, n);
    swiglu_backward_act_bf16(dh1, dh3, dout, h1, h3, n);
    float *d_h1 = dev_from(h1, n * sizeof(float)), *d_h3 = dev_from(h3, n * sizeof(float)),
          *d_dout = dev_from(dout, n * sizeof(float)), *d_out = dev_alloc(n * sizeof(float)),
          *d_dh1 = dev_alloc(n * sizeof(float)), *d_dh3 = dev_alloc(n * sizeof(float));
    CU(cudaMemset(d_amax, 0, sizeof(unsigned)));
    gpu_swiglu_forward_act_bf16(d_out, d_h1, d_h3, n, d_amax, 0);
    LAUNCHED();
    to_host(g, d_out, n * sizeof(float));
    check_bits_equal("swiglu_forward_act_bf16", "out", sh->name, g, out, n);
    ck_assert(all_bf16_values(g, n));
    unsigned word;
    to_host(&word, d_amax, sizeof word);
    ck_assert_msg(word == finite_amax_bits(out, n), "swiglu_forward_act_bf16 (%s): amax %08x",
                  sh->name, word);
    gpu_swiglu_backward_act_bf16(d_dh1, d_dh3, d_dout, d_h1, d_h3, n, 0);
    LAUNCHED();
    to_host(g, d_dh1, n * sizeof(float));
    check_bits_equal("swiglu_backward_act_bf16", "dh1", sh->name, g, dh1, n);
    ck_assert(all_bf16_values(g, n));
    to_host(g, d_dh3, n * sizeof(float));
    check_bits_equal("swiglu_backward_act_bf16", "dh3", sh->name, g, dh3, n);
    ck_assert(all_bf16_values(g, n));
    CU(cudaFree(d_h1)); CU(cudaFree(d_h3)); CU(cudaFree(d_dout)); CU(cudaFree(d_out));
    CU(cudaFree(d_dh1)); CU(cudaFree(d_dh3));
    free(h1); free(h3); free(dout); free(out); free(dh1); free(dh3); free(g);
  }
  CU(cudaFree(d_amax));
}
END_TEST

/* Current scaling's scale worked out by the rounding kernel
 * (exmy_cuda_amax_scale: gpu_bf16_storage_image, the RMSNorm image kernels,
 * exmy_cuda_quantize_amax_scaled_bf16) against the one-thread kernel before
 * it (exmy_cuda_scale_from_amax, then the same kernel with that scale): the
 * images and the {s, 1/s} left for the GEMM's alpha bit for bit; E4M3 and
 * E5M2 saturating by rne, E8M3 by rz, margins 0 and 2, powers of two or
 * not; sizes of one block, of many and of a last block part full; an amax
 * of 0 (s = 1); the kernels that take only a given scale refuse one. */
START_TEST(scale_of_amax) {
  static const scaled_case cases[] = {
      {"e4m3", EXMY_RNE, true, false, 0},
      {"e5m2", EXMY_RNE, true, true, 2},
      {"e8m3", EXMY_RZ, false, false, 2},
  };
  static const size_t sizes[] = {2048, 8 * 3001, 1 << 20};
  enum { C = 768, N = 41 };
  const size_t most = 1 << 20;
  float *x = rand_floats(most, -3, 3, 901);
  for (size_t i = 0; i < most; i += 997) x[i] *= 1e3f; /* a wide range: s far from 1 */
  x[most / 2] = NAN;
  float *d_x = dev_from(x, most * 4), *d_zero = dev_alloc(most * 4);
  CU(cudaMemset(d_zero, 0, most * 4));
  uint16_t *d_b = dev_alloc(most * 2), *d_ref = dev_alloc(most * 2), *d_got = dev_alloc(most * 2);
  uint16_t *ref = malloc(most * 2), *got = malloc(most * 2);
  unsigned *d_amax = dev_alloc(sizeof(unsigned));
  float *d_si = dev_alloc(4 * sizeof(float)); /* [0..1] reference, [2..3] the kernel's */
  exmy_format bf;
  ck_assert_int_eq(exmy_format_parse("bf16", &bf), 0);
  const exmy_rounding_opts rne = {0};
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    exmy_format f;
    ck_assert_int_eq(exmy_format_parse(cases[c].format, &f), 0);
    exmy_rounding_opts o = {0};
    o.mode = cases[c].mode, o.saturate = cases[c].saturate;
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++)
      for (int zero = 0; zero < 2; zero++) {
        const size_t n = sizes[si];
        const float *src = zero ? d_zero : d_x;
        for (int kernel = 0; kernel < 3; kernel++) {
          const char *name = kernel == 0 ? "bf16_storage_image"
                             : kernel == 1 ? "quantize_amax_scaled_bf16"
                                           : "rmsnorm_forward_bf16";
          const size_t m = kernel == 2 ? (size_t)N * C : n;
          if (kernel == 2 && si) continue; /* RMSNorm: one shape */
          float *d_rows = NULL, *d_w = NULL, *d_r = NULL;
          CU(cudaMemset(d_amax, 0, sizeof(unsigned)));
          CU(cudaMemset(d_si, 0xFF, 4 * sizeof(float)));
          CU(cudaMemset(d_ref, 0xFF, m * 2));
          CU(cudaMemset(d_got, 0xFF, m * 2));
          if (kernel == 0) {
            CU(exmy_cuda_quantize_bf16(&bf, &rne, src, d_b, n, 0));
            CU(gpu_bf16_storage_amax(d_b, n, d_amax, 0));
          } else if (kernel == 1) {
            CU(exmy_cuda_amax_fold(src, n, d_amax, 0));
          } else {
            float *w = rand_floats(C, 0.5, 1.5, 902);
            d_w = dev_from(w, C * 4), d_r = dev_alloc(N * 4), d_rows = dev_alloc(m * 4);
            free(w);
            CU(cudaMemcpy(d_rows, src, m * 4, cudaMemcpyDeviceToDevice));
            CU(gpu_rmsnorm_forward_amax(d_r, d_rows, NULL, NULL, NULL, d_w, N, C, d_amax, 0));
          }
          CU(exmy_cuda_scale_from_amax(&f, cases[c].margin, cases[c].pow2, d_amax, d_si, 0));
          const gpu_bf16_scaling given = {.scale_inv = d_si};
          gpu_bf16_scaling own = {0};
          own.of_amax = exmy_cuda_amax_scale_of(&f, cases[c].margin, cases[c].pow2, d_amax,
                                                d_si + 2);
          if (kernel == 0) {
            CU(gpu_bf16_storage_image(d_ref, d_b, n, &f, &o, &given, 0));
            CU(gpu_bf16_storage_image(d_got, d_b, n, &f, &o, &own, 0));
          } else if (kernel == 1) {
            CU(exmy_cuda_quantize_scaled_bf16(&f, &o, d_si, src, d_ref, n, 0));
            CU(exmy_cuda_quantize_amax_scaled_bf16(&f, &o, &own.of_amax, src, d_got, n, 0));
          } else {
            CU(gpu_rmsnorm_forward_bf16(d_ref, NULL, d_r, d_rows, NULL, d_w, N, C, &f, &o, &given,
                                        0));
            CU(gpu_rmsnorm_forward_bf16(d_got, NULL, d_r, d_rows, NULL, d_w, N, C, &f, &o, &own,
                                        0));
          }
          LAUNCHED();
          float pair[4];
          to_host(pair, d_si, sizeof pair);
          to_host(ref, d_ref, m * 2);
          to_host(got, d_got, m * 2);
          size_t bad = 0;
          for (size_t i = 0; i < m; i++) bad += ref[i] != got[i];
          printf("  %-26s %-4s mode %d margin %d pow2 %d n %-8zu%s: s %g (given %g), %zu of %zu "
                 "differ\n", name, cases[c].format, (int)cases[c].mode, cases[c].margin,
                 (int)cases[c].pow2, m, zero ? " zeros" : "", pair[2], pair[0], bad, m);
          ck_assert_msg(bad == 0 && !memcmp(pair, pair + 2, 2 * sizeof(float)),
                        "%s %s n %zu: %zu differ, {s, 1/s} {%g, %g} given {%g, %g}", name,
                        cases[c].format, m, bad, pair[2], pair[3], pair[0], pair[1]);
          ck_assert(zero ? pair[0] == 1.0f : pair[0] != 1.0f);
          if (d_rows) {
            CU(cudaFree(d_rows)); CU(cudaFree(d_w)); CU(cudaFree(d_r));
          }
        }
      }
    /* the kernels that take only a given scale refuse one worked out */
    gpu_bf16_scaling own = {0};
    own.of_amax = exmy_cuda_amax_scale_of(&f, 0, false, d_amax, d_si + 2);
    ck_assert_int_eq(gpu_swiglu_forward_bf16(d_got, d_x, d_x, 64, &f, &o, &own, 0),
                     cudaErrorInvalidValue);
    ck_assert_int_eq(gpu_swiglu_forward_bf16_storage_image(d_got, d_b, d_b, 64, &f, &o, &own, 0),
                     cudaErrorInvalidValue);
    ck_assert_int_eq(exmy_cuda_quantize_amax_scaled_bf16(&f, &o, NULL, d_x, d_got, 64, 0),
                     cudaErrorInvalidValue);
  }
  CU(cudaFree(d_x)); CU(cudaFree(d_zero)); CU(cudaFree(d_b)); CU(cudaFree(d_ref));
  CU(cudaFree(d_got)); CU(cudaFree(d_amax)); CU(cudaFree(d_si));
  free(x); free(ref); free(got);
}
END_TEST

/* act_bf16 on the GPU (the conversion instruction) against the reference
 * core on every float32 input: the same bits, NaN for NaN. */
START_TEST(act_bf16_matches_core) {
  const long long bad = gpu_act_bf16_core_mismatches();
  printf("act_bf16: the GPU's conversion against the core on all 2^32 inputs: %lld differ\n",
         bad);
  ck_assert_int_eq(bad, 0);
}
END_TEST

int main(void) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    fprintf(stderr, "layers_gpu_test: no GPU\n");
    return 1;
  }
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  const TTest *const tests[] = {encoder,        rmsnorm,      rope,  producers_fold_amax,
                                swiglu_and_add, swiglu_backward_bf16, swiglu_backward_bf16_scaled,
                                causal_softmax, crossentropy, sumsq,  adamw,
                                adamw_coat,     scale_120m,   add_bf16,     swiglu_forward_bf16,
                                rope_bf16,      rmsnorm_forward_bf16, rope_bf16_storage,
                                sum_bf16,       swiglu_bf16_storage_every_input,
                                bf16_storage_images, rmsnorm_forward_amax, scale_of_amax, NULL};
  Suite *s = suite_of("gpu_layers", 300, tests);
  /* after the others; on its own: CK_RUN_CASE=adamw_fold */
  TCase *tc = tcase_create("adamw_fold");
  tcase_set_timeout(tc, 300);
  tcase_add_test(tc, adamw_fold);
  suite_add_tcase(s, tc);
  /* on its own: CK_RUN_CASE=act_bf16 */
  tc = tcase_create("act_bf16");
  tcase_set_timeout(tc, 300);
  tcase_add_test(tc, act_bf16_matches_core);
  tcase_add_test(tc, act_bf16_elementwise);
  suite_add_tcase(s, tc);
  /* on its own: CK_RUN_CASE=quantize_matrices */
  tc = tcase_create("quantize_matrices");
  tcase_set_timeout(tc, 300);
  tcase_add_test(tc, quantize_matrices);
  suite_add_tcase(s, tc);
  const int failed = run_suite(s, false);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  printf("worst max|gpu - cpu| / max|cpu| per function (criterion < 1e-5):\n");
  for (int k = 0; k < n_worst; k++) printf("  %-26s %.3g\n", worst_table[k].fn, worst_table[k].worst);
  printf("total %.1f s\n", (t1.tv_sec - t0.tv_sec) + 1e-9 * (t1.tv_nsec - t0.tv_nsec));
  return failed;
}
