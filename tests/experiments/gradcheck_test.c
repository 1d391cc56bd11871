/* Finite-difference gradient check of every layer and of the whole model, in
 * double precision (experiments/trainer/model.c compiled with MODEL_DOUBLE). */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "experiments/trainer/model.h"
#include "tests/check_suite.h"
#include "tests/test_rng.h"

static uint64_t rng = 12345;
static double urand(void) { /* uniform in [-1, 1) */
  return test_rng_uniform(&rng) * 2 - 1;
}
static double *rand_array(size_t n, double scale) {
  double *a = malloc(n * sizeof(double));
  for (size_t i = 0; i < n; i++) a[i] = scale * urand();
  return a;
}
static double *zeros(size_t n) { return calloc(n, sizeof(double)); }

/* Compares analytic gradient g of f with respect to x[0..n) against central
 * differences, printing the worst relative error. */
typedef double (*loss_fn)(void *ctx);
static double check_grad(const char *name, loss_fn f, void *ctx, double *x, const double *g,
                         size_t n, size_t max_checks) {
  const double eps = 1e-6;
  double worst = 0, gmax = 0;
  for (size_t i = 0; i < n; i++) gmax = fmax(gmax, fabs(g[i]));
  size_t stride = n > max_checks ? n / max_checks : 1;
  size_t worst_i = 0;
  double worst_num = 0;
  for (size_t i = 0; i < n; i += stride) {
    double old = x[i];
    x[i] = old + eps;
    double lp = f(ctx);
    x[i] = old - eps;
    double lm = f(ctx);
    x[i] = old;
    double num = (lp - lm) / (2 * eps);
    /* relative to the tensor's largest gradient: tiny entries are noise-level */
    double rel = fabs(num - g[i]) / fmax(gmax, 1e-12);
    if (rel > worst) {
      worst = rel;
      worst_i = i;
      worst_num = num;
    }
  }
  printf("gradcheck %-22s n=%-6zu worst rel err %.3e (at %zu: analytic %.9g numeric %.9g)\n",
         name, n, worst, worst_i, g[worst_i], worst_num);
  return worst;
}
#define TOL 1e-6

/* ---- a layer's loss is sum(out * R) for a fixed random R ---- */
static double dotp(const double *a, const double *b, size_t n) {
  double s = 0;
  for (size_t i = 0; i < n; i++) s += a[i] * b[i];
  return s;
}

enum { N = 12, C = 8, OC = 6, B = 2, T = 5, NH = 4, NKV = 2, HS = 4, V = 11 };

typedef struct { double *inp, *w, *out, *rstd, *R; } rms_ctx;
static double rms_loss(void *p) {
  rms_ctx *c = p;
  rmsnorm_forward(c->out, c->rstd, c->inp, c->w, N, C);
  return dotp(c->out, c->R, N * C);
}
START_TEST(test_rmsnorm) {
  rms_ctx c = {rand_array(N * C, 1), rand_array(C, 1), zeros(N * C), zeros(N), rand_array(N * C, 1)};
  double *dinp = zeros(N * C), *dw = zeros(C);
  rms_loss(&c);
  rmsnorm_backward(dinp, dw, c.R, c.inp, c.w, c.rstd, N, C);
  ck_assert(check_grad("rmsnorm.inp", rms_loss, &c, c.inp, dinp, N * C, 1000) < TOL);
  ck_assert(check_grad("rmsnorm.w", rms_loss, &c, c.w, dw, C, 1000) < TOL);
}
END_TEST

typedef struct { double *inp, *w, *out, *R; } lin_ctx;
static double lin_loss(void *p) {
  lin_ctx *c = p;
  linear_forward(c->out, c->inp, c->w, N, C, OC, NULL);
  return dotp(c->out, c->R, N * OC);
}
START_TEST(test_linear) {
  lin_ctx c = {rand_array(N * C, 1), rand_array(OC * C, 1), zeros(N * OC), rand_array(N * OC, 1)};
  double *dinp = zeros(N * C), *dw = zeros(OC * C);
  lin_loss(&c);
  linear_backward(dinp, dw, c.R, c.inp, c.w, N, C, OC, NULL, 1);
  ck_assert(check_grad("linear.inp", lin_loss, &c, c.inp, dinp, N * C, 1000) < TOL);
  ck_assert(check_grad("linear.w", lin_loss, &c, c.w, dw, OC * C, 1000) < TOL);
}
END_TEST

typedef struct { double *x, *y, *cs, *sn, *R; } rope_ctx;
static double rope_loss(void *p) {
  rope_ctx *c = p;
  memcpy(c->y, c->x, sizeof(double) * B * T * NH * HS);
  rope_forward(c->y, c->cs, c->sn, B, T, NH, HS);
  return dotp(c->y, c->R, B * T * NH * HS);
}
START_TEST(test_rope) {
  rope_ctx c = {rand_array(B * T * NH * HS, 1), zeros(B * T * NH * HS), zeros(T * HS / 2),
                zeros(T * HS / 2), rand_array(B * T * NH * HS, 1)};
  rope_tables(c.cs, c.sn, T, HS, 10000.0);
  double *dx = malloc(sizeof(double) * B * T * NH * HS);
  memcpy(dx, c.R, sizeof(double) * B * T * NH * HS);
  rope_backward(dx, c.cs, c.sn, B, T, NH, HS);
  ck_assert(check_grad("rope.x", rope_loss, &c, c.x, dx, B * T * NH * HS, 1000) < TOL);
}
END_TEST

typedef struct { double *q, *k, *v, *out, *att, *R; } att_ctx;
static double att_loss(void *p) {
  att_ctx *c = p;
  attention_forward(c->out, c->att, c->q, c->k, c->v, B, T, NH, NKV, HS, NULL, NULL);
  return dotp(c->out, c->R, B * T * NH * HS);
}
START_TEST(test_attention) {
  const int C_ = NH * HS, KVC = NKV * HS;
  att_ctx c = {rand_array(B * T * C_, 1), rand_array(B * T * KVC, 1), rand_array(B * T * KVC, 1),
               zeros(B * T * C_), zeros(B * NH * T * T), rand_array(B * T * C_, 1)};
  double *dq = zeros(B * T * C_), *dk = zeros(B * T * KVC), *dv = zeros(B * T * KVC),
         *datt = zeros(B * NH * T * T);
  att_loss(&c);
  attention_backward(dq, dk, dv, datt, c.R, c.att, c.q, c.k, c.v, B, T, NH, NKV, HS, NULL, NULL);
  ck_assert(check_grad("attention.q", att_loss, &c, c.q, dq, B * T * C_, 1000) < TOL);
  ck_assert(check_grad("attention.k (GQA)", att_loss, &c, c.k, dk, B * T * KVC, 1000) < TOL);
  ck_assert(check_grad("attention.v (GQA)", att_loss, &c, c.v, dv, B * T * KVC, 1000) < TOL);
}
END_TEST

typedef struct { double *h1, *h3, *out, *R; } swi_ctx;
static double swi_loss(void *p) {
  swi_ctx *c = p;
  swiglu_forward(c->out, c->h1, c->h3, N * C);
  return dotp(c->out, c->R, N * C);
}
START_TEST(test_swiglu) {
  swi_ctx c = {rand_array(N * C, 3), rand_array(N * C, 1), zeros(N * C), rand_array(N * C, 1)};
  double *dh1 = zeros(N * C), *dh3 = zeros(N * C);
  swiglu_backward(dh1, dh3, c.R, c.h1, c.h3, N * C);
  ck_assert(check_grad("swiglu.h1", swi_loss, &c, c.h1, dh1, N * C, 1000) < TOL);
  ck_assert(check_grad("swiglu.h3", swi_loss, &c, c.h3, dh3, N * C, 1000) < TOL);
}
END_TEST

typedef struct { double *logits, *probs, *losses; int *targets; } ce_ctx;
static double ce_loss(void *p) {
  ce_ctx *c = p;
  memcpy(c->probs, c->logits, sizeof(double) * N * V);
  crossentropy_softmax_forward(c->probs, c->losses, c->targets, N, V);
  double s = 0;
  for (int i = 0; i < N; i++) s += c->losses[i];
  return s / N;
}
START_TEST(test_crossentropy) {
  ce_ctx c = {rand_array(N * V, 2), zeros(N * V), zeros(N), malloc(sizeof(int) * N)};
  for (int i = 0; i < N; i++) c.targets[i] = (i * 7) % V;
  ce_loss(&c);
  double *dl = zeros(N * V);
  crossentropy_softmax_backward(dl, c.probs, c.targets, N, V, 1.0 / N);
  ck_assert(check_grad("crossentropy.logits", ce_loss, &c, c.logits, dl, N * V, 1000) < TOL);
}
END_TEST

typedef struct { double *wte, *out, *R; int *tokens; } enc_ctx;
static double enc_loss(void *p) {
  enc_ctx *c = p;
  encoder_forward(c->out, c->tokens, c->wte, N, C);
  return dotp(c->out, c->R, N * C);
}
START_TEST(test_encoder) {
  enc_ctx c = {rand_array(V * C, 1), zeros(N * C), rand_array(N * C, 1), malloc(sizeof(int) * N)};
  for (int i = 0; i < N; i++) c.tokens[i] = (i * 5) % V; /* repeats on purpose */
  double *dwte = zeros(V * C);
  encoder_backward(dwte, c.R, c.tokens, N, C);
  ck_assert(check_grad("encoder.wte", enc_loss, &c, c.wte, dwte, V * C, 1000) < TOL);
}
END_TEST

/* ---- the whole model on the `test` size (GQA on) ---- */
typedef struct { model *m; int *tok, *tgt; int B, T; } model_ctx;
static double model_loss(void *p) {
  model_ctx *c = p;
  model_forward(c->m, c->tok, c->tgt, c->B, c->T);
  return c->m->loss;
}
START_TEST(test_model) {
  model_config cfg = {.vocab = 256, .dim = 16, .n_layers = 2, .n_heads = 2, .n_kv_heads = 1,
                      .hidden = 32, .seq_len = 8};
  model m;
  model_init(&m, &cfg, 7);
  /* larger weights than the 0.02 init so that every path carries gradient */
  for (size_t i = 0; i < m.num_params; i++) m.params_mem[i] += 0.3 * urand();
  model_ctx c = {&m, malloc(sizeof(int) * 16), malloc(sizeof(int) * 16), 2, 8};
  for (int i = 0; i < 16; i++) {
    c.tok[i] = (i * 37 + 11) % 256;
    c.tgt[i] = (i * 53 + 3) % 256;
  }
  model_loss(&c);
  model_zero_grad(&m);
  model_backward(&m, c.tok, c.tgt, 1.0);
  double worst = 0;
  for (int t = 0; t < NUM_PARAM_TENSORS; t++) {
    size_t off = (size_t)((&m.params.wte)[t] - m.params_mem);
    char name[64];
    snprintf(name, sizeof name, "model.%s", param_tensor_names[t]);
    double e = check_grad(name, model_loss, &c, m.params_mem + off, m.grads_mem + off,
                          m.param_sizes[t], 60);
    worst = fmax(worst, e);
  }
  ck_assert_msg(worst < 1e-5, "worst %g", worst);
  model_free(&m);
}
END_TEST

int main(void) {
  const TTest *const tests[] = {test_rmsnorm, test_linear, test_rope, test_attention, test_swiglu,
                                test_crossentropy, test_encoder, test_model, NULL};
  return run_suite(suite_of("gradcheck", 120, tests), false);
}
