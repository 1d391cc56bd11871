/* Recipes: the fp32 recipe equals the unquantized path bit for bit, and on the
 * `test` size the operands a layer's GEMMs actually receive (spied on at the
 * float32 GEMM under exmy_qgemm, which this test replaces through
 * exmy_qgemm_set_sgemm) equal the format's rounding of the float inputs. */
#include <check.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/exmy_cpu.h"
#include "lib/accum_core.h"
#include "experiments/trainer/config.h"
#include "experiments/trainer/model.h"
#include "experiments/trainer/recipe.h"
#include "tests/check_suite.h"

/* ---------------- the spy: every sgemm call's operands, copied ---------------- */
typedef struct {
  int ta, tb, m, n, k;
  float *a, *b; /* op(A) as m x k, op(B) as k x n, dense */
} seen_call;
static seen_call seen[16];
static int n_seen = 0;

static float op_at(const float *x, int ld, int trans, int i, int j) {
  return trans ? x[(size_t)j * ld + i] : x[(size_t)i * ld + j];
}

static int spy_sgemm(bool ta, bool tb, size_t m, size_t n, size_t k, float alpha, const float *a,
                     size_t lda, const float *b, size_t ldb, float beta, float *c, size_t ldc) {
  if (n_seen < 16) {
    seen_call *s = &seen[n_seen++];
    s->ta = ta, s->tb = tb, s->m = (int)m, s->n = (int)n, s->k = (int)k;
    s->a = malloc(sizeof(float) * m * k);
    s->b = malloc(sizeof(float) * k * n);
    for (int i = 0; i < s->m; i++)
      for (int j = 0; j < s->k; j++) s->a[i * k + j] = op_at(a, (int)lda, s->ta, i, j);
    for (int i = 0; i < s->k; i++)
      for (int j = 0; j < s->n; j++) s->b[i * n + j] = op_at(b, (int)ldb, s->tb, i, j);
  }
  return exmy_sgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

/* The operands' sr stream offsets, per quantized GEMM (tq_spy). */
static uint64_t seen_offset[16][2];
static int n_gemms = 0;
static void spy_gemm(bool ta, bool tb, int m, int n, int k, const float *a, int lda,
                     const exmy_operand_quant *qa, const float *b, int ldb,
                     const exmy_operand_quant *qb, const float *c, int ldc) {
  (void)ta, (void)tb, (void)m, (void)n, (void)k, (void)a, (void)lda, (void)b, (void)ldb;
  (void)c, (void)ldc;
  if (n_gemms < 16) {
    seen_offset[n_gemms][0] = qa ? qa->round.offset : 0;
    seen_offset[n_gemms][1] = qb ? qb->round.offset : 0;
  }
  n_gemms++;
}

static void reset_spy(void) {
  n_gemms = 0;
  for (int i = 0; i < n_seen; i++) {
    free(seen[i].a);
    free(seen[i].b);
  }
  n_seen = 0;
}

/* ---------------- helpers ---------------- */
static recipe load_recipe(const char *name) {
  config c;
  config_defaults(&c);
  char path[256], err[256] = "";
  snprintf(path, sizeof path, "experiments/configs/%s.cfg", name);
  ck_assert_msg(config_load_file(&c, path, err, sizeof err) == 0, "%s", err);
  recipe r;
  ck_assert_msg(recipe_from_config(&r, &c, 1, err, sizeof err) == 0, "%s", err);
  return r;
}

/* The sites of model c under the named recipe of experiments/configs. */
static tq_site *recipe_sites(const char *name, const model_config *c) {
  const recipe r = load_recipe(name);
  return recipe_make_sites(&r, c);
}

/* The test model's sites under the named recipe; *c gets the model. */
static tq_site *test_model_sites(const char *name, model_config *c) {
  ck_assert(!model_named_size("test", c));
  return recipe_sites(name, c);
}

enum { B = 2 };
static void batch(int *in, int *tg, int n) {
  for (int i = 0; i < n; i++) {
    in[i] = (i * 37 + 11) % 256;
    tg[i] = (i * 53 + 3) % 256;
  }
}

static void run_model(model *m, tq_site *sites, float *loss, float *grads) {
  int T = m->cfg.seq_len, in[B * 64], tg[B * 64];
  batch(in, tg, B * T);
  m->sites = sites;
  model_forward(m, in, tg, B, T);
  model_zero_grad(m);
  model_backward(m, in, tg, 1.0f);
  *loss = m->loss;
  memcpy(grads, m->grads_mem, m->num_params * sizeof(float));
}

/* The `test` model from seed, its unquantized loss in *l0 and gradients in
 * *g0, and room in *g1 for a second run's gradients. */
static void baseline(model_config *c, model *m, uint64_t seed, float *l0, float **g0, float **g1) {
  model_named_size("test", c);
  ck_assert_int_eq(model_init(m, c, seed), 0);
  *g0 = malloc(m->num_params * sizeof(float));
  *g1 = malloc(m->num_params * sizeof(float));
  ck_assert(*g0 && *g1);
  run_model(m, NULL, l0, *g0);
}

START_TEST(test_fp32_recipe_is_unquantized_path) {
  model_config c;
  model m;
  float *g0, *g1, l0, l1;
  baseline(&c, &m, 3, &l0, &g0, &g1);
  tq_site *sites = recipe_sites("fp32", &c);
  run_model(&m, sites, &l1, g1);
  ck_assert_msg(memcmp(&l0, &l1, sizeof l0) == 0, "fp32 loss %.9g vs unquantized %.9g", l1, l0);
  ck_assert_msg(memcmp(g0, g1, m.num_params * sizeof(float)) == 0, "fp32 gradients differ");
  printf("recipe fp32: loss %.9g and all %zu gradients bit-identical to the unquantized path\n", l1,
         m.num_params);
  /* and a real recipe does change them */
  tq_site *sb = recipe_sites("bf16", &c);
  run_model(&m, sb, &l1, g1);
  ck_assert_msg(memcmp(g0, g1, m.num_params * sizeof(float)) != 0, "bf16 changed nothing");
  printf("recipe bf16: loss %.9g (fp32 %.9g)\n", l1, l0);
  recipe_free_sites(sites, model_num_sites(&c));
  recipe_free_sites(sb, model_num_sites(&c));
  model_free(&m);
  free(g0);
  free(g1);
}
END_TEST

/* seen op(X) must equal round(op(orig)) element for element, bit for bit */
static long mismatches(const float *seen_op, const float *orig, int ld, int trans, int rows,
                       int cols, const exmy_operand_quant *q, float scale, long *changed) {
  long bad = 0;
  exmy_rounding_opts o = q->round;
  for (int i = 0; i < rows; i++)
    for (int j = 0; j < cols; j++) {
      float x = op_at(orig, ld, trans, i, j);
      float want = exmy_ref_quantize(&q->format, &o, x * scale, 0) * (1.0f / scale);
      float got = seen_op[i * cols + j];
      if (memcmp(&want, &got, sizeof want)) bad++;
      if (got != x) (*changed)++;
    }
  return bad;
}

/* Layer 1's w1 (X: N x C, its input from a model step; W: OC x C; a fixed
 * dY: N x OC) through linear_forward and linear_backward under the named
 * recipe, with the spies on: seen[] holds what the three sgemm calls read,
 * seen_offset[] the operands' sr offsets. */
/* One operand of a spied layer: its sgemm call (0: Y = X W^T, 1: dX = dY W,
 * 2: dW = dY^T X), side (0: op(A), 1: op(B)), and op() of the float tensor
 * it came from. */
typedef struct {
  const char *what;
  int call, side;
  const float *orig;
  int ld, trans, rows, cols, use;
} spied_operand;

typedef struct {
  model_config c;
  model m;
  tq_site *sites, *site;
  int N, C, OC, l;
  const float *x, *w;
  float *g, *y, *dy, *dx, *dw;
  spied_operand ops[6];
} spied_layer;

static void spy_on_layer(spied_layer *s, const char *recipe_name) {
  ck_assert(!model_named_size("test", &s->c));
  model_init(&s->m, &s->c, 5);
  s->sites = recipe_sites(recipe_name, &s->c);
  /* the operands only: an accumulation model's GEMMs bypass the spied sgemm
   * (test_accumulate_key checks those) */
  for (int i = 0; i < model_num_sites(&s->c); i++) s->sites[i].accum = (exmy_accum_model){0};
  float loss;
  s->g = malloc(s->m.num_params * sizeof(float));
  run_model(&s->m, s->sites, &loss, s->g); /* real activations in m.acts */
  const int N = s->N = B * s->c.seq_len, C = s->C = s->c.dim, OC = s->OC = s->c.hidden,
            l = s->l = 1;
  s->site = &s->sites[l * SITES_PER_LAYER + SITE_W1];
  s->x = s->m.acts.ln2 + (size_t)l * N * C;
  s->w = s->m.params.w1 + (size_t)l * OC * C;
  s->y = malloc(sizeof(float) * N * OC), s->dy = malloc(sizeof(float) * N * OC);
  s->dx = calloc((size_t)N * C, sizeof(float)), s->dw = calloc((size_t)OC * C, sizeof(float));
  for (int i = 0; i < N * OC; i++) s->dy[i] = 1e-3f * (float)((i * 7919) % 2001 - 1000);
  reset_spy();
  tq_sr_counter = 12345;
  exmy_qgemm_set_sgemm(spy_sgemm);
  tq_spy = spy_gemm;
  linear_forward(s->y, s->x, s->w, N, C, OC, s->site);
  linear_backward(s->dx, s->dw, s->dy, s->x, s->w, N, C, OC, s->site, 1);
  exmy_qgemm_set_sgemm(NULL);
  tq_spy = NULL;
  ck_assert_int_eq(n_seen, 3);
  ck_assert_int_eq(n_gemms, 3);
  const spied_operand ops[6] = {
      {"fwd X", 0, 0, s->x, C, 0, N, C, USE_FWD_X},
      {"fwd W^T", 0, 1, s->w, C, 1, C, OC, USE_FWD_W},
      {"dX: dY", 1, 0, s->dy, OC, 0, N, OC, USE_DX_DY},
      {"dX: W", 1, 1, s->w, C, 0, OC, C, USE_DX_W},
      {"dW: dY^T", 2, 0, s->dy, OC, 1, OC, N, USE_DW_DY},
      {"dW: X", 2, 1, s->x, C, 0, N, C, USE_DW_X}};
  memcpy(s->ops, ops, sizeof ops);
}

static void spied_layer_free(spied_layer *s) {
  reset_spy();
  recipe_free_sites(s->sites, model_num_sites(&s->c));
  model_free(&s->m);
  free(s->g), free(s->y), free(s->dy), free(s->dx), free(s->dw);
}

static void spy_layer(const char *recipe_name, int scaled) {
  spied_layer s;
  spy_on_layer(&s, recipe_name);
  const spied_operand *ops = s.ops;
  for (int i = 0; i < 6; i++) {
    const exmy_operand_quant *q = &s.site->op[ops[i].use];
    ck_assert(q->enabled);
    const float *seen_op = ops[i].side ? seen[ops[i].call].b : seen[ops[i].call].a;
    float scale = 1.0f;
    if (scaled) { /* current scaling: s from this tensor's amax */
      float amax = 0;
      for (int r = 0; r < ops[i].rows; r++)
        for (int cc = 0; cc < ops[i].cols; cc++)
          amax = fmaxf(amax, fabsf(op_at(ops[i].orig, ops[i].ld, ops[i].trans, r, cc)));
      scale = exmy_scale_from_amax(&q->format, amax, q->scaling.margin, q->scaling.pow2);
    }
    long changed = 0;
    long bad = mismatches(seen_op, ops[i].orig, ops[i].ld, ops[i].trans, ops[i].rows,
                          ops[i].cols, q, scale, &changed);
    printf("spy %-12s l%d.w1 %-9s %s: %d x %d seen by sgemm, %ld differ from the rounding, "
           "%ld changed by it\n",
           recipe_name, s.l, ops[i].what, q->format.name, ops[i].rows, ops[i].cols, bad, changed);
    ck_assert_msg(bad == 0, "%s: %ld elements differ from the format's rounding", ops[i].what, bad);
    ck_assert_msg(changed > 0, "%s: rounding changed nothing", ops[i].what);
  }
  spied_layer_free(&s);
}

START_TEST(test_spy_e8m3) { spy_layer("e8m3", 0); }
END_TEST
START_TEST(test_spy_bf16) { spy_layer("bf16", 0); }
END_TEST
START_TEST(test_spy_fp8_current) { spy_layer("fp8-current", 1); }
END_TEST

/* ---------------- block-scaled recipes (MX, NVFP4, GROUP) ----------------
 * The operand image the sgemm sees (op(X) as rows x K for A, op(B) as K x
 * cols for B) against a scalar reference written here from the specs, with
 * exmy_ref_quantize for every rounding: OCP MX v1.0's shared exponent
 * floor(log2 amax) - emax (by frexpf); Transformer Engine's NVFP4 scales; the
 * 16-point Hadamard matrix by Sylvester's construction; current scales per
 * block for GROUP. */

/* x (rows x K, K contiguous) -> its reference quantization, in place. */
static void reference_blocks(const exmy_operand_quant *q, float *x, int rows, int K,
                             uint64_t sr_offset) {
  const exmy_scaling *sc = &q->scaling;
  if (sc->hadamard) {
    int H[16][16];
    H[0][0] = 1;
    for (int n = 1; n < 16; n *= 2) /* [[H, H], [H, -H]] */
      for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
          H[i][j + n] = H[i][j];
          H[i + n][j] = H[i][j];
          H[i + n][j + n] = -H[i][j];
        }
    const uint32_t signs = exmy_sr_random(sc->hadamard_seed, 0);
    for (int r = 0; r < rows; r++)
      for (int c0 = 0; c0 + 16 <= K; c0 += 16) {
        float in[16], *v = x + (size_t)r * K + c0;
        memcpy(in, v, sizeof in);
        for (int i = 0; i < 16; i++) {
          float acc = 0.0f;
          for (int j = 0; j < 16; j++) {
            const int sgn = H[i][j] * ((signs >> j) & 1 ? -1 : 1);
            acc += sgn > 0 ? in[j] : -in[j];
          }
          v[i] = acc * 0.25f;
        }
      }
  }
  const int mx = sc->kind == EXMY_SCALING_MX, nv = sc->kind == EXMY_SCALING_NVFP4;
  const int g = sc->group > 0 ? sc->group : mx ? 32 : nv ? 16 : K;
  const int br = !mx && sc->block_rows > 1 ? sc->block_rows : 1;
  exmy_format_info info;
  exmy_format_get_info(&q->format, &info);
  exmy_format e4m3;
  exmy_format_parse("e4m3", &e4m3);
  const exmy_rounding_opts scale_rne = {.mode = EXMY_RNE, .saturate = true};
  float tensor_amax = 0;
  for (size_t i = 0; i < (size_t)rows * K; i++)
    if (isfinite(x[i])) tensor_amax = fmaxf(tensor_amax, fabsf(x[i]));
  float s_enc = tensor_amax > 0 ? 2688.0f / tensor_amax : 1.0f;
  if (isinf(s_enc)) s_enc = FLT_MAX;
  exmy_rounding_opts o = q->round;
  if (mx || nv) o.saturate = true;
  for (int r0 = 0; r0 < rows; r0 += br)
    for (int c0 = 0; c0 < K; c0 += g) {
      const int nr = rows - r0 < br ? rows - r0 : br, len = K - c0 < g ? K - c0 : g;
      float amax = 0;
      for (int rr = 0; rr < nr; rr++)
        for (int i = 0; i < len; i++) {
          const float v = x[(size_t)(r0 + rr) * K + c0 + i];
          if (isfinite(v)) amax = fmaxf(amax, fabsf(v));
        }
      float enc, dec;
      if (mx) {
        int e2 = 0;
        if (amax > 0) frexpf(amax, &e2); /* amax = m 2^e2, m in [1/2, 1) */
        int X = amax > 0 ? e2 - 1 - q->format.emax : -127;
        X = X < -127 ? -127 : X > 127 ? 127 : X;
        enc = ldexpf(1.0f, -X);
        dec = ldexpf(1.0f, X);
      } else if (nv) {
        const float s_b = exmy_ref_quantize(&e4m3, &scale_rne, amax * (s_enc * (1.0f / 6.0f)), 0);
        dec = s_b * (1.0f / s_enc);
        enc = 1.0f / dec;
        if (isinf(enc)) enc = FLT_MAX;
      } else {
        enc = amax > 0 ? info.max / amax : 1.0f;
        if (!isfinite(enc) || !(enc > 0)) enc = 1.0f;
        dec = 1.0f / enc;
      }
      for (int rr = 0; rr < nr; rr++)
        for (int i = 0; i < len; i++) {
          const size_t at = (size_t)(r0 + rr) * K + c0 + i;
          const uint32_t rnd = o.mode == EXMY_SR ? exmy_sr_random(o.seed, sr_offset + at) : 0;
          x[at] = exmy_ref_quantize(&q->format, &o, x[at] * enc, rnd) * dec;
        }
    }
}

/* Each of l1.w1's six operands as its GEMM saw it against reference_blocks of
 * the float tensor it came from, bit for bit, and changed by the recipe. */
static void spy_blocked(const char *recipe_name) {
  spied_layer s;
  spy_on_layer(&s, recipe_name);
  const spied_operand *ops = s.ops;
  /* the reference takes op(B) as op(B)^T (K contiguous) */
  const int N = s.N, OC = s.OC;
  float *want = malloc(sizeof(float) * (size_t)N * OC);
  for (int i = 0; i < 6; i++) {
    const exmy_operand_quant *q = &s.site->op[ops[i].use];
    ck_assert(q->enabled);
    const seen_call *sc = &seen[ops[i].call];
    const int rows = ops[i].rows, cols = ops[i].cols, side = ops[i].side;
    /* K-contiguous image: op(A) itself, or op(B)^T */
    const int kr = side ? cols : rows, kc = side ? rows : cols;
    for (int a = 0; a < kr; a++)
      for (int b = 0; b < kc; b++)
        want[(size_t)a * kc + b] = side ? op_at(ops[i].orig, ops[i].ld, ops[i].trans, b, a)
                                        : op_at(ops[i].orig, ops[i].ld, ops[i].trans, a, b);
    reference_blocks(q, want, kr, kc, seen_offset[ops[i].call][side]);
    long bad = 0, changed = 0;
    for (int a = 0; a < kr; a++)
      for (int b = 0; b < kc; b++) {
        const float got = side ? sc->b[(size_t)b * cols + a] : sc->a[(size_t)a * cols + b];
        const float orig = side ? op_at(ops[i].orig, ops[i].ld, ops[i].trans, b, a)
                                : op_at(ops[i].orig, ops[i].ld, ops[i].trans, a, b);
        if (memcmp(&want[(size_t)a * kc + b], &got, sizeof got)) bad++;
        if (got != orig) changed++;
      }
    printf("spy %-12s l%d.w1 %-9s %s %s%s: %d x %d seen by sgemm, %ld differ from the reference, "
           "%ld changed by the recipe\n", recipe_name, s.l, ops[i].what, q->format.name,
           exmy_rounding_name(q->round.mode), q->scaling.hadamard ? " rht16" : "", rows, cols,
           bad, changed);
    ck_assert_msg(bad == 0, "%s %s: %ld elements differ from the reference", recipe_name,
                  ops[i].what, bad);
    ck_assert_msg(changed > 0, "%s: rounding changed nothing", ops[i].what);
  }
  spied_layer_free(&s);
  free(want);
}

START_TEST(test_spy_mxfp4) { spy_blocked("mxfp4"); }
END_TEST
/* nvfp4's choices, as the recipe gives them to the operands: two-level
 * scales on every operand, 16 x 16 weight blocks, sr only on dY, the
 * Hadamard transform only on both inputs of dW. */
START_TEST(test_spy_nvfp4) {
  model_config c;
  tq_site *sites = test_model_sites("nvfp4", &c);
  const tq_site *site = &sites[SITE_W1];
  for (int u = 0; u < USES_PER_SITE; u++) {
    const exmy_operand_quant *q = &site->op[u];
    const bool weight = u == USE_FWD_W || u == USE_DX_W, dy = u == USE_DX_DY || u == USE_DW_DY;
    ck_assert_int_eq(q->scaling.kind, EXMY_SCALING_NVFP4);
    ck_assert_int_eq(q->scaling.group, 16);
    ck_assert_int_eq(q->scaling.block_rows, weight ? 16 : 0);
    ck_assert_int_eq(q->round.mode, dy ? EXMY_SR : EXMY_RNE);
    ck_assert_int_eq(q->scaling.hadamard, u == USE_DW_DY || u == USE_DW_X ? 16 : 0);
  }
  recipe_free_sites(sites, model_num_sites(&c));
  spy_blocked("nvfp4");
}
END_TEST

/* fp8-deepseek: current scales per 1 x 128 tile (activations, gradients) and
 * 128 x 128 block (weights), E4M3 everywhere; AdamW moments stored as bf16. */
START_TEST(test_spy_fp8_deepseek) {
  model_config c;
  tq_site *sites = test_model_sites("fp8-deepseek", &c);
  for (int u = 0; u < USES_PER_SITE; u++) {
    const exmy_operand_quant *q = &sites[SITE_W1].op[u];
    ck_assert_int_eq(q->scaling.kind, EXMY_SCALING_GROUP);
    ck_assert_int_eq(q->scaling.group, 128);
    ck_assert_int_eq(q->scaling.block_rows, u == USE_FWD_W || u == USE_DX_W ? 128 : 0);
    ck_assert_str_eq(q->format.name, "float8_e4m3fn");
  }
  recipe_free_sites(sites, model_num_sites(&c));
  spy_blocked("fp8-deepseek");
  /* the moments: each rounded rne to bf16, in place */
  enum { n = 1000 };
  float m[n], v[n], m0[n], v0[n];
  for (int i = 0; i < n; i++) {
    m0[i] = m[i] = 1e-3f * sinf((float)i) * (float)(i % 37);
    v0[i] = v[i] = 1e-6f * (float)(i * i % 101) + 1e-9f;
  }
  const recipe r = load_recipe("fp8-deepseek");
  ck_assert(r.moments_bf16);
  /* 3.3.2's promotion to float32 every 128 products */
  exmy_accum_model split;
  memset(&split, 0, sizeof split);
  ck_assert(!exmy_accum_model_parse("hopper-split", &split));
  ck_assert(!memcmp(&r.accum, &split, sizeof split));
  recipe_store_moments(&r, &c, NULL, m, v, n);
  exmy_format bf16;
  exmy_format_parse("bfloat16", &bf16);
  const exmy_rounding_opts rne = {.mode = EXMY_RNE};
  long bad = 0, changed = 0;
  for (int i = 0; i < n; i++) {
    const float wm = exmy_ref_quantize(&bf16, &rne, m0[i], 0), wv = exmy_ref_quantize(&bf16, &rne, v0[i], 0);
    bad += memcmp(&wm, &m[i], 4) != 0 || memcmp(&wv, &v[i], 4) != 0;
    changed += m[i] != m0[i] || v[i] != v0[i];
  }
  printf("fp8-deepseek moments: %ld of %d pairs differ from bf16 rne, %ld changed\n", bad, n, changed);
  ck_assert_int_eq(bad, 0);
  ck_assert(changed > 0);
}
END_TEST

/* MS-AMP O1: each quantized linear layer's weight gradient, per layer, is the
 * format's rounding of the float gradient under its own current scale; the
 * embedding, the RMSNorm gains and the float32 LM head are left bit for bit. */
static void round_grads_check(int high_first_last) {
  model_config c;
  model_named_size("test", &c);
  model m;
  model_init(&m, &c, 11);
  config cfg;
  config_defaults(&cfg);
  char err[256] = "";
  ck_assert_msg(config_load_file(&cfg, "experiments/configs/msamp-o1.cfg", err, sizeof err) == 0,
                "%s", err);
  config_set(&cfg, "high_precision_first_last", high_first_last ? "1" : "0", err, sizeof err);
  config_set(&cfg, "high_format", "bf16", err, sizeof err);
  recipe r;
  ck_assert_msg(recipe_from_config(&r, &cfg, 1, err, sizeof err) == 0, "%s", err);
  ck_assert(r.grad_quant);
  float loss, *g = malloc(m.num_params * sizeof(float));
  run_model(&m, NULL, &loss, g); /* float gradients in g and m.grads_mem */
  recipe_round_grads(&r, &m);
  exmy_format_info info;
  exmy_format_get_info(&r.grad_format, &info);
  const exmy_rounding_opts o = {.mode = EXMY_RNE, .saturate = true};
  const int L = c.n_layers;
  long bad = 0, changed = 0, untouched_changed = 0, slices = 0;
  size_t off = 0;
  for (int t = 0; t < NUM_PARAM_TENSORS; t++) {
    const size_t n = m.param_sizes[t];
    const int linear = t == 2 || t == 3 || t == 4 || t == 5 || t == 7 || t == 8 || t == 9;
    for (int l = 0; l < (linear ? L : 1); l++) {
      const size_t len = linear ? n / L : n, base = off + (size_t)l * len;
      const float *x = g + base, *got = m.grads_mem + base;
      if (!linear || high_first_last) { /* L = 2: both blocks are first or last */
        untouched_changed += memcmp(x, got, len * sizeof(float)) != 0;
        continue;
      }
      float amax = 0;
      for (size_t i = 0; i < len; i++) amax = fmaxf(amax, fabsf(x[i]));
      const float s = info.max / amax; /* TENSOR scaling, margin 0: amax -> the format's max */
      for (size_t i = 0; i < len; i++) {
        float want = exmy_ref_quantize(&r.grad_format, &o, x[i] * s, 0) * (1.0f / s);
        if (memcmp(&want, &got[i], sizeof want)) bad++;
        if (got[i] != x[i]) changed++;
      }
      slices++;
    }
    off += n;
  }
  printf("msamp-o1 grad_format %s%s: %ld per-layer gradient slices, %ld elements differ from "
         "the scaled rounding, %ld changed by it; %ld other tensors changed\n", r.grad_format.name,
         high_first_last ? " (first/last blocks in bf16)" : "", slices, bad, changed,
         untouched_changed);
  ck_assert_msg(bad == 0, "%ld gradient elements differ from the per-layer scaled rounding", bad);
  ck_assert_msg(untouched_changed == 0, "%ld tensors outside the recipe were changed", untouched_changed);
  ck_assert_int_eq(slices, high_first_last ? 0 : 7 * L);
  if (!high_first_last) ck_assert_msg(changed > 0, "rounding changed nothing");
  model_free(&m);
  free(g);
}

START_TEST(test_msamp_grads_rounded) { round_grads_check(0); }
END_TEST
START_TEST(test_msamp_grads_high_first_last) { round_grads_check(1); }
END_TEST

/* The `accumulate` key: parsed into the recipe and the quantized sites only;
 * bad values refused; a layer's Y = X W^T under it equals exmy_accum_dot over
 * the rounded operands, bit for bit, and differs from float32 accumulation;
 * the loss changes. */
static int make_recipe(recipe *r, const char *const *sets, char *err, size_t errlen) {
  config c;
  config_defaults(&c);
  for (int i = 0; sets[i]; i++)
    if (config_set_assignment(&c, sets[i], err, errlen)) return -1;
  return recipe_from_config(r, &c, 1, err, errlen);
}

START_TEST(test_accumulate_key) {
  char err[256];
  recipe r;
  const char *hop[] = {"format_w=e4m3", "format_a=e4m3", "format_g=e5m2", "accumulate=hopper", NULL};
  ck_assert_msg(make_recipe(&r, hop, err, sizeof err) == 0, "%s", err);
  const exmy_accum_model hopper = {32, 14, 14, EXMY_ACCUM_TRUNCATE, 0, 1, EXMY_ACCUM_ALIGN_INPUTS,
                                   0, 0, 0};
  ck_assert(!memcmp(&r.accum, &hopper, sizeof hopper));
  const char *split[] = {"accumulate=group:32,bits:14,sum:14,round:trunc,promote:128", NULL};
  ck_assert_msg(make_recipe(&r, split, err, sizeof err) == 0, "%s", err);
  ck_assert_int_eq(r.accum.promote_every, 128);
  const char *dflt[] = {NULL};
  ck_assert_msg(make_recipe(&r, dflt, err, sizeof err) == 0, "%s", err);
  ck_assert_int_eq(r.accum.group, EXMY_ACCUM_FP32);
  const char *bad[][2] = {{"accumulate=fp16", NULL}, {"accumulate=group:33,promote:128", NULL},
                          {"accumulate=bits:99", NULL}, {"accumulate=", NULL},
                          {"accumulate=align_to:operands", NULL}};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    err[0] = 0;
    ck_assert_msg(make_recipe(&r, bad[i], err, sizeof err) == -1, "%s accepted", bad[i][0]);
    ck_assert_msg(strstr(err, "accumulate"), "message without the key: %s", err);
  }

  model_config c;
  model_named_size("test", &c);
  model m;
  model_init(&m, &c, 5);
  recipe rh, rf;
  const char *fp32acc[] = {"format_w=e4m3", "format_a=e4m3", "format_g=e5m2", NULL};
  ck_assert_msg(make_recipe(&rh, hop, err, sizeof err) == 0, "%s", err);
  ck_assert_msg(make_recipe(&rf, fp32acc, err, sizeof err) == 0, "%s", err);
  tq_site *sh = recipe_make_sites(&rh, &c), *sf = recipe_make_sites(&rf, &c);
  /* the linear sites accumulate as the recipe says; the unquantized ones
   * (attention, LM head here) in float32 */
  for (int i = 0; i < model_num_sites(&c); i++) {
    const int kind = i % SITES_PER_LAYER;
    const bool linear = i / SITES_PER_LAYER < c.n_layers && kind != SITE_ATT_QK &&
                        kind != SITE_ATT_PV;
    ck_assert_int_eq(sh[i].accum.group, linear ? 32 : EXMY_ACCUM_FP32);
    ck_assert_int_eq(sf[i].accum.group, EXMY_ACCUM_FP32);
  }
  float lh, lf, *g = malloc(m.num_params * sizeof(float)), *gf = malloc(m.num_params * sizeof(float));
  run_model(&m, sf, &lf, gf);
  run_model(&m, sh, &lh, g); /* real activations in m.acts */

  const int N = B * c.seq_len, C = c.dim, OC = c.hidden, l = 1;
  const float *x = m.acts.ln2 + (size_t)l * N * C, *w = m.params.w1 + (size_t)l * OC * C;
  float *yh = malloc(sizeof(float) * N * OC), *yf = malloc(sizeof(float) * N * OC);
  linear_forward(yh, x, w, N, C, OC, &sh[l * SITES_PER_LAYER + SITE_W1]);
  linear_forward(yf, x, w, N, C, OC, &sf[l * SITES_PER_LAYER + SITE_W1]);
  float *xq = malloc(sizeof(float) * N * C), *wq = malloc(sizeof(float) * OC * C);
  const exmy_operand_quant *qx = &sh[l * SITES_PER_LAYER + SITE_W1].op[USE_FWD_X];
  const exmy_operand_quant *qw = &sh[l * SITES_PER_LAYER + SITE_W1].op[USE_FWD_W];
  exmy_quantize_f32(&qx->format, &qx->round, x, xq, (size_t)N * C);
  exmy_quantize_f32(&qw->format, &qw->round, w, wq, (size_t)OC * C);
  /* the GEMM counts the subnormals of X's and W's format, E4M3, at its emin */
  exmy_accum_model hopper_e4m3 = hopper;
  hopper_e4m3.emin_a = hopper_e4m3.emin_b = -6;
  long differ = 0;
  for (int i = 0; i < N; i++)
    for (int j = 0; j < OC; j++) {
      const float want = exmy_accum_dot(&hopper_e4m3, xq + (size_t)i * C, 1, wq + (size_t)j * C, 1, C);
      ck_assert_msg(!memcmp(&want, &yh[(size_t)i * OC + j], sizeof want),
                    "Y[%d][%d] = %.9g, exmy_accum_dot %.9g", i, j, yh[(size_t)i * OC + j], want);
      differ += yh[(size_t)i * OC + j] != yf[(size_t)i * OC + j];
    }
  ck_assert_msg(differ > 0, "hopper and float32 accumulation gave the same Y");
  /* a subnormal E4M3 input counts at E4M3's emin, -6: with X = (2^-9, 2^-9, 0, ...)
   * and W = (256, 2^-4, 0, ...) the group aligns at 2^(-6 + 8), and 14 bits from
   * there drop the product 2^-13; aligned at 2^(-9 + 8) (float32's emin) they
   * would keep it */
  float xs[32] = {0}, ws[32] = {0}, ys;
  xs[0] = xs[1] = 0x1p-9f, ws[0] = 256.0f, ws[1] = 0x1p-4f;
  linear_forward(&ys, xs, ws, 1, 32, 1, &sh[l * SITES_PER_LAYER + SITE_W1]);
  ck_assert_msg(ys == 0.5f, "Y = %.9g, want 0.5 (2^-13 dropped: E4M3's emin)", ys);
  size_t gdiffer = 0;
  for (size_t i = 0; i < m.num_params; i++) gdiffer += g[i] != gf[i];
  ck_assert_msg(gdiffer > 0, "accumulate=hopper changed no gradient");
  printf("accumulate=hopper: l%d.w1 Y = exmy_accum_dot bit for bit, %ld of %d elements differ "
         "from float32 accumulation; %zu of %zu gradients differ; loss %.9g (fp32 accumulation "
         "%.9g)\n", l, differ, N * OC, gdiffer, m.num_params, lh, lf);
  recipe_free_sites(sh, model_num_sites(&c));
  recipe_free_sites(sf, model_num_sites(&c));
  model_free(&m);
  free(g), free(gf), free(yh), free(yf), free(xq), free(wq);
}
END_TEST

/* ---------------- Fishman et al. 2024: Smooth-SwiGLU and FP8 moments ---------------- */

/* W2's forward GEMMs, in layer order: op(A) = the operand it received (N x H)
 * and its output C (N x C), copied. */
static float *w2_in[8], *w2_out[8];
static int n_w2 = 0, w2_N, w2_C, w2_H;
static void spy_w2(bool ta, bool tb, int m, int n, int k, const float *a, int lda,
                   const exmy_operand_quant *qa, const float *b, int ldb,
                   const exmy_operand_quant *qb, const float *c, int ldc) {
  (void)b, (void)ldb, (void)qb, (void)qa;
  if (ta || !tb || m != w2_N || n != w2_C || k != w2_H || n_w2 >= 8) return;
  w2_in[n_w2] = malloc(sizeof(float) * m * k);
  w2_out[n_w2] = malloc(sizeof(float) * m * n);
  for (int i = 0; i < m; i++) {
    memcpy(w2_in[n_w2] + (size_t)i * k, a + (size_t)i * lda, sizeof(float) * k);
    memcpy(w2_out[n_w2] + (size_t)i * n, c + (size_t)i * ldc, sizeof(float) * n);
  }
  n_w2++;
}

/* fp8-smooth-swiglu's forward, layer by layer: s_t = max_j |h3[t, j]|; the
 * SwiGLU output kept for the backward is silu(h1) (h3 / s_t); the W2 GEMM
 * receives its E4M3 (largest value 240) rne rounding under W2's first delayed
 * scale (1); and the block's output is that GEMM's output times s_t plus the
 * residual, each bit for bit. */
START_TEST(test_smooth_swiglu_forward) {
  model_config c;
  model_named_size("test", &c);
  model m;
  model_init(&m, &c, 5);
  recipe r = load_recipe("fp8-smooth-swiglu");
  ck_assert(r.swiglu_row_scale);
  ck_assert_str_eq(r.role[ROLE_A].format.name, "float8_e4m3");
  tq_site *sites = recipe_make_sites(&r, &c);
  m.swiglu_row_scale = 1;
  const int T = c.seq_len, N = B * T, C = c.dim, H = c.hidden, L = c.n_layers;
  int in[B * 64], tg[B * 64];
  batch(in, tg, N);
  w2_N = N, w2_C = C, w2_H = H, n_w2 = 0;
  m.sites = sites;
  tq_spy = spy_w2;
  model_forward(&m, in, tg, B, T);
  tq_spy = NULL;
  ck_assert_int_eq(n_w2, L);
  const exmy_rounding_opts o = {.mode = EXMY_RNE, .saturate = true};
  long bad_hg = 0, bad_op = 0, bad_out = 0, scaled_rows = 0, rounded = 0;
  for (int l = 0; l < L; l++) {
    const float *h1 = m.acts.h1 + (size_t)l * N * H, *h3 = m.acts.h3 + (size_t)l * N * H,
                *hg = m.acts.hg + (size_t)l * N * H;
    const float *res_mid = m.acts.res_mid + (size_t)l * N * C,
                *res_out = m.acts.res + (size_t)(l + 1) * N * C;
    for (int t = 0; t < N; t++) {
      float s = 0;
      for (int j = 0; j < H; j++) s = fmaxf(s, fabsf(h3[(size_t)t * H + j]));
      if (!(s > 0)) s = 1;
      scaled_rows += s != 1;
      for (int j = 0; j < H; j++) {
        const size_t i = (size_t)t * H + j;
        const float a = h1[i], sig = (float)(1.0 / (1.0 + exp(-(double)a)));
        const float want = a * sig * (h3[i] / s);
        const float q = exmy_ref_quantize(&r.role[ROLE_A].format, &o, want, 0);
        bad_hg += memcmp(&want, &hg[i], 4) != 0;
        bad_op += memcmp(&q, &w2_in[l][i], 4) != 0;
        rounded += q != want;
      }
      for (int j = 0; j < C; j++) {
        const size_t i = (size_t)t * C + j;
        const float want = w2_out[l][i] * s + res_mid[i];
        bad_out += memcmp(&want, &res_out[i], 4) != 0;
      }
    }
    free(w2_in[l]), free(w2_out[l]);
  }
  printf("fp8-smooth-swiglu forward: %d layers, %ld of %d rows scaled, %ld SwiGLU outputs, %ld W2 "
         "operands, %ld block outputs differ (%ld operands changed by E4M3)\n", L, scaled_rows,
         L * N, bad_hg, bad_op, bad_out, rounded);
  ck_assert_int_eq(bad_hg, 0);
  ck_assert_int_eq(bad_op, 0);
  ck_assert_int_eq(bad_out, 0);
  ck_assert(scaled_rows > 0 && rounded > 0);
  recipe_free_sites(sites, model_num_sites(&c));
  model_free(&m);
}
END_TEST

/* Smooth-SwiGLU changes the rounding, never the function: unquantized, its
 * loss and every gradient (the scale held constant in the backward, W2's
 * output gradient times s_t, dh3 / s_t, h3 / s_t in dh1) equal plain SwiGLU's
 * up to float32 rounding. */
START_TEST(test_smooth_swiglu_same_function) {
  model_config c;
  model m;
  float *g0, *g1, l0, l1;
  baseline(&c, &m, 7, &l0, &g0, &g1);
  m.swiglu_row_scale = 1;
  run_model(&m, NULL, &l1, g1);
  double num = 0, den = 0, worst = 0;
  for (size_t i = 0; i < m.num_params; i++) {
    const double d = (double)g1[i] - g0[i];
    num += d * d, den += (double)g0[i] * g0[i];
    if (fabs(d) > worst) worst = fabs(d);
  }
  const double rel = sqrt(num / den);
  printf("smooth-swiglu unquantized: loss %.9g (plain %.9g), gradients' relative difference %.3g, "
         "largest %.3g\n", l1, l0, rel, worst);
  ck_assert(fabsf(l1 - l0) <= 1e-6f * fabsf(l0));
  ck_assert_msg(rel < 1e-5, "gradients differ by %.3g relative", rel);
  ck_assert(memcmp(g0, g1, m.num_params * sizeof(float)) != 0); /* it did take the other path */
  model_free(&m);
  free(g0), free(g1);
}
END_TEST

/* fp8-adam's moments: each parameter matrix (the embedding, every layer's
 * seven, the LM head) rounded rne, m to E4M3 (largest 240), v to E5M2, under
 * its own current scale s = fmax / amax, y = Q(x s) (1/s); the RMSNorm gains'
 * moments untouched; all bit for bit. */
START_TEST(test_fp8_adam_moments) {
  model_config c;
  model_named_size("test", &c);
  size_t sizes[NUM_PARAM_TENSORS];
  const size_t n = model_param_sizes(&c, sizes);
  recipe r = load_recipe("fp8-adam");
  ck_assert(r.moments_fp8 && r.swiglu_row_scale);
  ck_assert_str_eq(r.moment_format[0].name, "float8_e4m3");
  ck_assert_str_eq(r.moment_format[1].name, "float8_e5m2");
  float *mv[2], *orig[2];
  for (int k = 0; k < 2; k++) {
    mv[k] = malloc(n * sizeof(float)), orig[k] = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) {
      /* a different magnitude per stretch of 40, so that per-tensor scales differ */
      const float mag = ldexpf(1.0f, -(int)((i / 40) % 23) - 3);
      orig[k][i] = mv[k][i] = k ? mag * mag * (float)(1 + i % 13) : mag * sinf((float)i);
    }
  }
  recipe_store_moments(&r, &c, sizes, mv[0], mv[1], n);
  const exmy_rounding_opts o = {.mode = EXMY_RNE, .saturate = true};
  const int L = c.n_layers;
  long bad = 0, changed = 0, norms_changed = 0, tensors = 0;
  size_t off = 0;
  for (int t = 0; t < NUM_PARAM_TENSORS; t++) {
    const int layered = t != PARAM_WTE && t != PARAM_LM_HEAD && t != PARAM_RMSF;
    const size_t len = layered ? sizes[t] / L : sizes[t];
    for (int l = 0; l < (layered ? L : 1); l++, off += len) {
      for (int k = 0; k < 2; k++) {
        const float *x = orig[k] + off, *got = mv[k] + off;
        if (param_is_norm(t)) {
          norms_changed += memcmp(x, got, len * sizeof(float)) != 0;
          continue;
        }
        exmy_format_info info;
        exmy_format_get_info(&r.moment_format[k], &info);
        float amax = 0;
        for (size_t i = 0; i < len; i++) amax = fmaxf(amax, fabsf(x[i]));
        const float s = (float)info.max / amax;
        for (size_t i = 0; i < len; i++) {
          const float want = exmy_ref_quantize(&r.moment_format[k], &o, x[i] * s, 0) * (1.0f / s);
          bad += memcmp(&want, &got[i], 4) != 0;
          changed += got[i] != x[i];
        }
        tensors += k == 0;
      }
    }
  }
  ck_assert_int_eq(off, n);
  printf("fp8-adam moments: %ld matrices, %ld elements differ from the per-tensor scaled rounding, "
         "%ld changed; %ld norm tensors changed\n", tensors, bad, changed, norms_changed);
  ck_assert_int_eq(tensors, 7 * L + 2);
  ck_assert_int_eq(recipe_moment_stretches(&c, sizes, NULL, NULL), 7 * L + 2);
  ck_assert_int_eq(bad, 0);
  ck_assert_int_eq(norms_changed, 0);
  ck_assert(changed > 0);
  for (int k = 0; k < 2; k++) free(mv[k]), free(orig[k]);
}
END_TEST

/* activations = bf16 (experiments/README.md, "bf16 activations"): after a
 * forward and backward of the bf16 recipe on the `test` size, the tensors the
 * definition makes bf16 hold bf16 values only, those it keeps float32 do not
 * (and under activations = f32 neither do the former); SwiGLU's output is
 * bf16(bf16(silu(h1)) h3) bit for bit by the scalar reference rounding. */
static bool all_bf16(const float *x, size_t n) {
  for (size_t i = 0; i < n; i++) {
    uint32_t u;
    memcpy(&u, &x[i], 4);
    if (u & 0xFFFF) return false;
  }
  return true;
}

START_TEST(test_bf16_activations_rounding_points) {
  model_config c;
  model_named_size("test", &c);
  const int T = c.seq_len, N = B * T, C = c.dim, H = c.hidden, L = c.n_layers, V = c.vocab,
            NH = c.n_heads, KVC = c.n_kv_heads * (C / NH);
  const size_t BTC = (size_t)N * C, BTH = (size_t)N * H;
  int in[B * 64], tg[B * 64];
  batch(in, tg, N);
  config cfg;
  config_defaults(&cfg);
  char err[256] = "";
  ck_assert(config_load_file(&cfg, "experiments/configs/bf16.cfg", err, sizeof err) == 0);
  for (int bf16 = 0; bf16 < 2; bf16++) {
    ck_assert(config_set(&cfg, "activations", bf16 ? "bf16" : "f32", err, sizeof err) == 0);
    recipe r;
    ck_assert_msg(recipe_from_config(&r, &cfg, 1, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(r.bf16_activations, bf16);
    model m;
    model_init(&m, &c, 9);
    m.sites = recipe_make_sites(&r, &c);
    m.bf16_activations = r.bf16_activations;
    model_forward(&m, in, tg, B, T);
    model_zero_grad(&m);
    model_backward(&m, in, tg, 1);
    const activation_tensors *a = &m.acts;
    const grad_act_tensors *d = &m.grad_acts;
    /* bf16 under activations = bf16: every layer's GEMM outputs and element-wise
     * layers' results; the backward's last layer (0) gradients of bf16 tensors;
     * the linear layers' weight gradients */
    const struct { const char *name; const float *x; size_t n; } bf16_tensors[] = {
        {"q", a->q, L * BTC}, {"k", a->k, (size_t)L * N * KVC}, {"v", a->v, (size_t)L * N * KVC},
        {"atty", a->atty, L * BTC}, {"h1", a->h1, L * BTH}, {"h3", a->h3, L * BTH},
        {"hg", a->hg, L * BTH}, {"dq", d->dq, BTC}, {"dk", d->dk, (size_t)N * KVC},
        {"dv", d->dv, (size_t)N * KVC}, {"datt (dS)", d->datt, (size_t)B * NH * T * T},
        {"dhg", d->dhg, BTH}, {"dh1", d->dh1, BTH}, {"dh3", d->dh3, BTH},
        {"dwq", m.grads.wq, (size_t)L * C * C}, {"dwk", m.grads.wk, (size_t)L * KVC * C},
        {"dw1", m.grads.w1, (size_t)L * H * C}, {"dw2", m.grads.w2, (size_t)L * C * H},
        {"dwo", m.grads.wo, (size_t)L * C * C}, {"dlm_head", m.grads.lm_head, (size_t)V * C}};
    /* float32 under both: the residual stream past the embedding, the RMSNorms'
     * outputs, the attention probabilities, the float32 tensors' gradients */
    const struct { const char *name; const float *x; size_t n; } f32_tensors[] = {
        {"res", a->res + BTC, L * BTC}, {"res_mid", a->res_mid, L * BTC},
        {"ln1", a->ln1, L * BTC}, {"ln2", a->ln2, L * BTC}, {"lnf", a->lnf, BTC},
        {"att (P)", a->att, (size_t)L * B * NH * T * T}, {"dres", d->dres, BTC},
        {"dln", d->dln, BTC}, {"drms1", m.grads.rms1, (size_t)L * C},
        {"dwte", m.grads.wte, (size_t)V * C}};
    for (size_t i = 0; i < sizeof bf16_tensors / sizeof *bf16_tensors; i++)
      ck_assert_msg(all_bf16(bf16_tensors[i].x, bf16_tensors[i].n) == (bool)bf16,
                    "activations = %s: %s %s", bf16 ? "bf16" : "f32", bf16_tensors[i].name,
                    bf16 ? "has values that are not bf16" : "has bf16 values only");
    for (size_t i = 0; i < sizeof f32_tensors / sizeof *f32_tensors; i++)
      ck_assert_msg(!all_bf16(f32_tensors[i].x, f32_tensors[i].n),
                    "activations = %s: %s has bf16 values only", bf16 ? "bf16" : "f32",
                    f32_tensors[i].name);
    if (bf16) {
      exmy_format f;
      exmy_format_parse("bf16", &f);
      const exmy_rounding_opts rne = {.mode = EXMY_RNE};
      long bad = 0;
      for (size_t i = 0; i < L * BTH; i++) {
        const float x = a->h1[i], sig = (float)(1.0 / (1.0 + exp(-(double)x)));
        const float s = exmy_ref_quantize(&f, &rne, x * sig, 0);
        const float want = exmy_ref_quantize(&f, &rne, s * a->h3[i], 0);
        bad += memcmp(&want, &a->hg[i], 4) != 0;
      }
      ck_assert_int_eq(bad, 0);
    }
    printf("activations = %s: the %zu tensors the definition rounds %s bf16 values only, the %zu "
           "it keeps float32 do not\n", bf16 ? "bf16" : "f32",
           sizeof bf16_tensors / sizeof *bf16_tensors, bf16 ? "hold" : "do not hold",
           sizeof f32_tensors / sizeof *f32_tensors);
    recipe_free_sites(m.sites, model_num_sites(&c));
    model_free(&m);
  }
}
END_TEST

int main(void) {
  const TTest *const tests[] = {test_fp32_recipe_is_unquantized_path, test_spy_e8m3, test_spy_bf16,
                                test_spy_fp8_current, test_spy_mxfp4, test_spy_nvfp4,
                                test_spy_fp8_deepseek,
                                test_msamp_grads_rounded,
                                test_msamp_grads_high_first_last, test_accumulate_key,
                                test_smooth_swiglu_forward, test_smooth_swiglu_same_function,
                                test_fp8_adam_moments, test_bf16_activations_rounding_points,
                                NULL};
  return run_suite(suite_of("recipes", 60, tests), false);
}
