/* The logit sharpness of experiments/studies/sharpness.h on the `test` size:
 *  - deterministic for a seed, different for another, parameters restored bit for bit;
 *  - with only the LM head perturbed the logits move linearly, dz = rho lnf d^T, so
 *    the measure must equal its second-order closed form (1/2) Var_p(dz) averaged
 *    over the tokens (the two signs cancel the third-order term);
 *  - near initialisation (near-uniform softmax) doubling the LM head doubles every
 *    logit and its perturbation (filter-normalised directions scale with the
 *    weights), so the sharpness must grow about 4x;
 *  - moving a factor 2 from the LM head into the final RMSNorm gain leaves the
 *    function unchanged, and the filter-normalised sharpness must not change. */
#include <check.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "experiments/trainer/model.h"
#include "experiments/studies/sharpness.h"
#include "tests/check_suite.h"

enum { B = 2, NB = 2 };

static void tokens(int *in, int *tg, int n) {
  for (int i = 0; i < n; i++) {
    in[i] = (i * 37 + 11) % 256;
    tg[i] = (i * 53 + 3) % 256;
  }
}

static void scale(float *x, size_t n, float s) {
  for (size_t i = 0; i < n; i++) x[i] *= s;
}

static model test_model(float lm_head_scale) {
  model_config c;
  model_named_size("test", &c);
  model m;
  model_init(&m, &c, 7);
  scale(m.params.lm_head, m.param_sizes[PARAM_LM_HEAD], lm_head_scale);
  return m;
}

static sharpness_result measure(model *m, double rho, uint64_t seed, unsigned mask) {
  const int T = m->cfg.seq_len;
  int *in = malloc(sizeof(int) * NB * B * T), *tg = malloc(sizeof(int) * NB * B * T);
  tokens(in, tg, NB * B * T);
  sharpness_opts o = {.rho = rho, .directions = 3, .seed = seed, .tensor_mask = mask};
  sharpness_result r;
  logit_sharpness(m, in, tg, NB, B, T, &o, &r);
  free(in);
  free(tg);
  return r;
}

START_TEST(test_deterministic_and_restoring) {
  model m = test_model(8.0f); /* larger logits: a non-uniform softmax */
  float *before = malloc(m.num_params * sizeof(float));
  memcpy(before, m.params_mem, m.num_params * sizeof(float));
  sharpness_result a = measure(&m, 0.05, 1, sharpness_default_mask());
  ck_assert_msg(memcmp(before, m.params_mem, m.num_params * sizeof(float)) == 0,
                "parameters not restored");
  sharpness_result b = measure(&m, 0.05, 1, sharpness_default_mask());
  sharpness_result c = measure(&m, 0.05, 2, sharpness_default_mask());
  printf("sharpness %.9g (again %.9g; seed 2: %.9g), kl_mean %.3g, kl_max %.3g, loss %.6f -> %.6f\n",
         a.sharpness, b.sharpness, c.sharpness, a.kl_mean, a.kl_max, a.loss, a.loss_perturbed);
  ck_assert_msg(memcmp(&a, &b, sizeof a) == 0, "two evaluations with one seed differ");
  ck_assert_msg(a.sharpness != c.sharpness, "another seed gave the same directions");
  ck_assert(a.kl_mean > 0 && a.kl_max >= a.kl_mean && a.tokens == NB * B * m.cfg.seq_len);
  model_free(&m);
  free(before);
}
END_TEST

START_TEST(test_lm_head_second_order) {
  model m = test_model(8.0f);
  const int T = m.cfg.seq_len, C = m.cfg.dim, V = m.cfg.vocab, N = B * T;
  const double rho = 0.01;
  const unsigned mask = 1u << PARAM_LM_HEAD;
  sharpness_result r = measure(&m, rho, 3, mask);
  /* the closed form: for each direction and token, (rho^2 / 2) Var_p(lnf . d_v) */
  int *in = malloc(sizeof(int) * NB * B * T), *tg = malloc(sizeof(int) * NB * B * T);
  tokens(in, tg, NB * B * T);
  float *dir = malloc(m.num_params * sizeof(float));
  const size_t lm_off = m.num_params - m.param_sizes[PARAM_LM_HEAD];
  double want = 0;
  for (int k = 0; k < 3; k++) {
    sharpness_direction(&m, mask, 3, k, dir);
    for (int b = 0; b < NB; b++) {
      model_forward(&m, in + b * N, tg + b * N, B, T);
      for (int t = 0; t < N; t++) {
        const float *lnf = m.acts.lnf + (size_t)t * C, *p = m.acts.probs + (size_t)t * V;
        double e1 = 0, e2 = 0;
        for (int v = 0; v < V; v++) {
          double dz = 0;
          for (int cc = 0; cc < C; cc++) dz += (double)lnf[cc] * dir[lm_off + (size_t)v * C + cc];
          e1 += p[v] * dz;
          e2 += p[v] * dz * dz;
        }
        want += 0.5 * rho * rho * (e2 - e1 * e1) / (3.0 * NB * N);
      }
    }
  }
  const double rel = fabs(r.kl_mean - want) / want;
  printf("LM head only, rho %g: kl_mean %.9g, second-order closed form %.9g, relative difference %.2e\n",
         rho, r.kl_mean, want, rel);
  ck_assert_msg(rel < 2e-3, "kl_mean %.9g vs closed form %.9g (rel %.2e)", r.kl_mean, want, rel);
  model_free(&m);
  free(in);
  free(tg);
  free(dir);
}
END_TEST

START_TEST(test_scaled_lm_head_is_sharper) {
  model m1 = test_model(1.0f), m2 = test_model(2.0f);
  sharpness_result a = measure(&m1, 0.05, 1, sharpness_default_mask());
  sharpness_result b = measure(&m2, 0.05, 1, sharpness_default_mask());
  const double ratio = b.sharpness / a.sharpness;
  printf("near initialisation: sharpness %.6g, with the LM head doubled %.6g: ratio %.4f (about 4)\n",
         a.sharpness, b.sharpness, ratio);
  ck_assert_msg(ratio > 3.6 && ratio < 4.4, "ratio %.4f, want about 4", ratio);
  model_free(&m1);
  model_free(&m2);
}
END_TEST

START_TEST(test_invariant_to_invisible_rescaling) {
  model m1 = test_model(8.0f), m2 = test_model(8.0f);
  scale(m2.params.lm_head, m2.param_sizes[PARAM_LM_HEAD], 0.5f);
  scale(m2.params.rmsf, m2.param_sizes[PARAM_RMSF], 2.0f); /* same logits */
  sharpness_result a = measure(&m1, 0.05, 1, sharpness_default_mask());
  sharpness_result b = measure(&m2, 0.05, 1, sharpness_default_mask());
  const double rel = fabs(a.sharpness - b.sharpness) / a.sharpness;
  printf("LM head / 2 with the final RMSNorm gain x 2: sharpness %.9g vs %.9g (rel %.2e)\n",
         a.sharpness, b.sharpness, rel);
  ck_assert_msg(rel < 1e-4, "sharpness changed by %.2e under a rescaling the model cannot see", rel);
  model_free(&m1);
  model_free(&m2);
}
END_TEST

START_TEST(test_independent_of_threads) {
  model m = test_model(8.0f);
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  sharpness_result one = measure(&m, 0.05, 1, sharpness_default_mask());
  for (int t = 2; t <= 3; t++) {
    omp_set_num_threads(t);
    sharpness_result r = measure(&m, 0.05, 1, sharpness_default_mask());
    ck_assert_msg(memcmp(&one, &r, sizeof r) == 0,
                  "%d threads: kl_mean %.17g, one thread %.17g", t, r.kl_mean, one.kl_mean);
  }
  omp_set_num_threads(threads);
  model_free(&m);
}
END_TEST

int main(void) {
  const TTest *const tests[] = {test_deterministic_and_restoring, test_lm_head_second_order,
                                test_scaled_lm_head_is_sharper,
                                test_invariant_to_invisible_rescaling, test_independent_of_threads, NULL};
  return run_suite(suite_of("sharpness", 60, tests), false);
}
