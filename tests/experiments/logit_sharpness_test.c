/* The epsilon-sharpness of the logits (experiments/trainer/logit_sharpness.h,
 * model.c's logit_sharpness_forward) against independent references:
 *  - cross-entropy is convex in the logits, so its maximum over the box is at
 *    one of the box's 2^V vertices: enumerated for V <= 10;
 *  - projected (sign-)gradient ascent from random points of the box (V = 50),
 *    with its own gradient, never exceeds the closed form and reaches it;
 *    random points of the box stay below it;
 *  - V = 2, z = 0: phi = (log(2 cosh eps) + eps - log 2) / (1 + log 2) x 100;
 *  - the means over final and all positions;
 *  - in the model: the flag changes no loss bit, and the phi it writes is
 *    that of the logits before the softmax overwrote them. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "experiments/trainer/logit_sharpness.h"
#include "experiments/trainer/model.h"
#include "tests/check_suite.h"

/* cross-entropy of w against y, in long double, written apart from the code
 * under test */
static long double xent(const double *w, int V, int y) {
  long double mx = w[0], s = 0;
  for (int j = 1; j < V; j++) mx = w[j] > mx ? w[j] : mx;
  for (int j = 0; j < V; j++) s += expl((long double)w[j] - mx);
  return mx + logl(s) - w[y];
}

static double uniform(unsigned *state) { return rand_r(state) / (RAND_MAX + 1.0); }

/* Logits of mixed scales: small, order one, and a few large ones. */
static void draw_logits(float *z, int V, unsigned *st) {
  for (int j = 0; j < V; j++) {
    const double u = uniform(st) * 2 - 1, kind = uniform(st);
    z[j] = (float)(kind < 0.2 ? 1e-3 * u : kind < 0.9 ? 4 * u : 25 * u);
  }
}

static double phi_of(long double loss, long double loss_max) {
  return (double)((loss_max - loss) / (1 + loss) * 100);
}

START_TEST(test_vertex_enumeration) {
  unsigned st = 12345;
  for (int V = 2; V <= 10; V++)
    for (int trial = 0; trial < 20; trial++) {
      float z[10];
      double w[10], z0[10];
      draw_logits(z, V, &st);
      const int y = rand_r(&st) % V;
      for (int j = 0; j < V; j++) z0[j] = z[j];
      float phi[LOGIT_SHARPNESS_NUM_EPS];
      logit_sharpness_forward(phi, z, &y, 1, V);
      const long double loss = xent(z0, V, y);
      for (int k = 0; k < LOGIT_SHARPNESS_NUM_EPS; k++) {
        const double eps = k == 0 ? 1e-3 : 5e-4; /* Keskar's two values */
        long double best = -INFINITY;
        for (unsigned v = 0; v < 1u << V; v++) {
          for (int j = 0; j < V; j++)
            w[j] = z0[j] + ((v >> j) & 1 ? 1 : -1) * eps * (fabs(z0[j]) + 1);
          const long double f = xent(w, V, y);
          best = f > best ? f : best;
        }
        const double ref = phi_of(loss, best);
        ck_assert_msg(fabs(phi[k] - ref) <= 1e-6 * fabs(ref) + 1e-12,
                      "V %d trial %d eps %g: phi %.9g, vertex maximum %.9g", V, trial, eps,
                      phi[k], ref);
      }
    }
}
END_TEST

START_TEST(test_projected_gradient_ascent) {
  enum { V = 50, STARTS = 5, ITERS = 400 };
  unsigned st = 777;
  for (int trial = 0; trial < 10; trial++) {
    float z[V];
    double z0[V], lo[V], hi[V], w[V];
    draw_logits(z, V, &st);
    const int y = rand_r(&st) % V;
    float phi[LOGIT_SHARPNESS_NUM_EPS];
    logit_sharpness_forward(phi, z, &y, 1, V);
    for (int j = 0; j < V; j++) z0[j] = z[j];
    const long double f0 = xent(z0, V, y);
    for (int k = 0; k < LOGIT_SHARPNESS_NUM_EPS; k++) {
      const double eps = k == 0 ? 1e-3 : 5e-4;
      for (int j = 0; j < V; j++) {
        lo[j] = z0[j] - eps * (fabs(z0[j]) + 1);
        hi[j] = z0[j] + eps * (fabs(z0[j]) + 1);
      }
      double best = -INFINITY;
      for (int s = 0; s < STARTS; s++) {
        for (int j = 0; j < V; j++) w[j] = lo[j] + (hi[j] - lo[j]) * uniform(&st);
        /* a random point of the box is below the closed form */
        ck_assert(phi_of(f0, xent(w, V, y)) <= phi[k] * (1 + 1e-6) + 1e-12);
        for (int it = 0; it < ITERS; it++) {
          long double mx = w[0], sum = 0;
          for (int j = 1; j < V; j++) mx = w[j] > mx ? w[j] : mx;
          for (int j = 0; j < V; j++) sum += expl(w[j] - mx);
          for (int j = 0; j < V; j++) {
            const double grad = (double)(expl(w[j] - mx) / sum) - (j == y);
            w[j] += 0.05 * (hi[j] - lo[j]) * grad / (fabs(grad) + 1e-300);
            w[j] = w[j] < lo[j] ? lo[j] : w[j] > hi[j] ? hi[j] : w[j];
          }
        }
        const double reached = phi_of(f0, xent(w, V, y));
        best = reached > best ? reached : best;
        ck_assert_msg(reached <= phi[k] * (1 + 1e-6) + 1e-12,
                      "trial %d eps %g: ascent found %.9g above the closed form %.9g", trial,
                      eps, reached, phi[k]);
      }
      ck_assert_msg(best >= phi[k] * (1 - 1e-6) - 1e-12,
                    "trial %d eps %g: ascent reached %.9g, closed form %.9g", trial, eps, best,
                    phi[k]);
    }
  }
}
END_TEST

START_TEST(test_two_logits_at_zero) {
  const float z[2] = {0, 0};
  const int y = 0;
  float phi[LOGIT_SHARPNESS_NUM_EPS];
  logit_sharpness_forward(phi, z, &y, 1, 2);
  for (int k = 0; k < LOGIT_SHARPNESS_NUM_EPS; k++) {
    const double eps = k == 0 ? 1e-3 : 5e-4;
    const double ref = (log(2 * cosh(eps)) + eps - log(2.0)) / (1 + log(2.0)) * 100;
    ck_assert_msg(fabs(phi[k] - ref) <= 1e-6 * ref, "eps %g: %.9g, expected %.9g", eps, phi[k],
                  ref);
  }
}
END_TEST

START_TEST(test_means_over_positions) {
  enum { B = 2, T = 3, N = B * T };
  float phi[LOGIT_SHARPNESS_NUM_EPS * N];
  for (int k = 0; k < LOGIT_SHARPNESS_NUM_EPS; k++)
    for (int i = 0; i < N; i++) phi[k * N + i] = (float)((k + 1) * (i + 1)); /* 1..6, 2..12 */
  double last[LOGIT_SHARPNESS_NUM_EPS], all[LOGIT_SHARPNESS_NUM_EPS];
  logit_sharpness_means(phi, B, T, last, all);
  /* final positions: rows 2 and 5 (values 3 and 6) */
  ck_assert(last[0] == 4.5 && all[0] == 3.5);
  ck_assert(last[1] == 9.0 && all[1] == 7.0);
}
END_TEST

START_TEST(test_model_wiring) {
  model_config c;
  model_named_size("test", &c);
  model m;
  ck_assert_int_eq(model_init(&m, &c, 3), 0);
  enum { B = 2 };
  const int T = c.seq_len, N = B * T, V = c.vocab;
  int *in = malloc(sizeof(int) * N), *tg = malloc(sizeof(int) * N);
  for (int i = 0; i < N; i++) in[i] = (i * 37 + 11) % V, tg[i] = (i * 53 + 3) % V;
  /* scale the LM head so that the logits are far from uniform */
  for (size_t i = 0; i < m.param_sizes[PARAM_LM_HEAD]; i++) m.params.lm_head[i] *= 40;
  model_forward(&m, in, NULL, B, T); /* no targets: probs holds the logits */
  float *logits = malloc(sizeof(float) * N * V), *phi = malloc(sizeof(float) * 2 * N);
  memcpy(logits, m.acts.probs, sizeof(float) * N * V);
  logit_sharpness_forward(phi, logits, tg, N, V);
  model_forward(&m, in, tg, B, T);
  const float loss_off = m.loss;
  m.logit_sharpness = 1;
  model_forward(&m, in, tg, B, T);
  ck_assert_msg(memcmp(&loss_off, &m.loss, sizeof loss_off) == 0, "loss %.9g with, %.9g without",
                m.loss, loss_off);
  ck_assert(memcmp(phi, m.logit_phi, sizeof(float) * LOGIT_SHARPNESS_NUM_EPS * N) == 0);
  double last[LOGIT_SHARPNESS_NUM_EPS], all[LOGIT_SHARPNESS_NUM_EPS];
  logit_sharpness_means(m.logit_phi, B, T, last, all);
  for (int k = 0; k < LOGIT_SHARPNESS_NUM_EPS; k++) ck_assert(last[k] > 0 && all[k] > 0);
  /* phi is about linear in eps for small eps: 1e-3 gives about twice 5e-4 */
  ck_assert_msg(fabs(all[0] / all[1] - 2) < 0.01, "ratio %.6g", all[0] / all[1]);
  free(in), free(tg), free(logits), free(phi);
  model_free(&m);
}
END_TEST

int main(void) {
  const TTest *const tests[] = {test_vertex_enumeration, test_projected_gradient_ascent,
                                test_two_logits_at_zero, test_means_over_positions,
                                test_model_wiring, NULL};
  return run_suite(suite_of("logit_sharpness", 60, tests), true);
}
