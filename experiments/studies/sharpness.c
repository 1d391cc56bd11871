/* Logit-based sharpness of a checkpoint (sharpness.h). */
#include "experiments/studies/sharpness.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { T_WTE, T_RMS1, T_WQ, T_WK, T_WV, T_WO, T_RMS2, T_W1, T_W3, T_W2, T_RMSF, T_LM_HEAD };

unsigned sharpness_default_mask(void) {
  return ((1u << NUM_PARAM_TENSORS) - 1) & ~((1u << T_RMS1) | (1u << T_RMS2) | (1u << T_RMSF));
}

unsigned sharpness_parse_mask(const char *spec) {
  if (!strcmp(spec, "matrices")) return sharpness_default_mask();
  if (!strcmp(spec, "all")) return (1u << NUM_PARAM_TENSORS) - 1;
  unsigned mask = 0;
  char buf[512];
  snprintf(buf, sizeof buf, "%s", spec);
  for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    int i = 0;
    while (i < NUM_PARAM_TENSORS && strcmp(tok, param_tensor_names[i])) i++;
    if (i == NUM_PARAM_TENSORS) return 0;
    mask |= 1u << i;
  }
  return mask;
}

static uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

/* A standard normal value that is a pure function of (key, i): Box-Muller on
 * two counter-based uniforms, so any thread count draws the same direction. */
static double gaussian(uint64_t key, uint64_t i) {
  uint64_t a = splitmix64(key ^ splitmix64(2 * i)), b = splitmix64(key ^ splitmix64(2 * i + 1));
  double u1 = ((a >> 11) + 0.5) * 0x1.0p-53, u2 = (b >> 11) * 0x1.0p-53;
  return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

void sharpness_direction(const model *m, unsigned tensor_mask, uint64_t seed, int k, float *dir) {
  const model_config *c = &m->cfg;
  const uint64_t key = splitmix64(splitmix64(seed) ^ (uint64_t)k);
  size_t off = 0;
  for (int t = 0; t < NUM_PARAM_TENSORS; t++) {
    const size_t n = m->param_sizes[t];
    /* rows are the last dimension: the input width of every matrix (w2's is H) */
    const size_t row = t == T_W2 ? (size_t)c->hidden : (size_t)c->dim;
    if (!(tensor_mask & (1u << t))) {
      memset(dir + off, 0, n * sizeof(float));
      off += n;
      continue;
    }
#pragma omp parallel for schedule(static)
    for (size_t r0 = 0; r0 < n; r0 += row) {
      double dn = 0, pn = 0;
      float *d = dir + off + r0;
      const float *p = m->params_mem + off + r0;
      for (size_t j = 0; j < row; j++) {
        double g = gaussian(key, off + r0 + j);
        d[j] = (float)g;
        dn += g * g;
        pn += (double)p[j] * p[j];
      }
      const double s = dn > 0 ? sqrt(pn / dn) : 0;
      for (size_t j = 0; j < row; j++) d[j] = (float)(d[j] * s);
    }
    off += n;
  }
}

/* KL(p || q) of token t, p and q (N, V) probabilities. */
static double token_kl(const float *p, const float *q, int t, int V) {
  double kl = 0;
  for (int v = 0; v < V; v++) {
    const double pv = p[(size_t)t * V + v], qv = q[(size_t)t * V + v];
    if (pv > 0) kl += pv * (log(pv) - log(qv > 1e-38 ? qv : 1e-38));
  }
  return kl;
}

/* Mean over the tokens of KL(p || q): the tokens' KLs added in token order,
 * so that the result is the same bits for any number of threads. */
static double mean_kl(const float *p, const float *q, int N, int V) {
  double *kl = malloc((size_t)N * sizeof *kl), sum = 0;
  if (kl) {
#pragma omp parallel for schedule(static)
    for (int t = 0; t < N; t++) kl[t] = token_kl(p, q, t, V);
    for (int t = 0; t < N; t++) sum += kl[t];
    free(kl);
  } else { /* no memory for the per-token values: the same sum on one thread */
    for (int t = 0; t < N; t++) sum += token_kl(p, q, t, V);
  }
  return sum / N;
}

int logit_sharpness(model *m, const int *tokens, const int *targets, int batches, int B, int T,
                    const sharpness_opts *o, sharpness_result *r) {
  const size_t n = m->num_params, N = (size_t)B * T, V = (size_t)m->cfg.vocab;
  if (batches < 1 || N * V > SIZE_MAX / sizeof(float) / (size_t)batches) return -1;
  float *theta = malloc(n * sizeof(float)), *dir = malloc(n * sizeof(float));
  float *ref = malloc((size_t)batches * N * V * sizeof(float));
  if (!theta || !dir || !ref || model_reserve(m, B, T)) {
    free(theta);
    free(dir);
    free(ref);
    return -1;
  }
  tq_site *sites = m->sites;
  m->sites = NULL; /* float32 forward */
  memcpy(theta, m->params_mem, n * sizeof(float));
  memset(r, 0, sizeof *r);
  r->tokens = (int)(batches * N);
  for (int b = 0; b < batches; b++) {
    model_forward(m, tokens + b * N, targets + b * N, B, T);
    memcpy(ref + b * N * V, m->acts.probs, N * V * sizeof(float));
    r->loss += m->loss / batches;
  }
  for (int k = 0; k < o->directions; k++) {
    sharpness_direction(m, o->tensor_mask, o->seed, k, dir);
    double kl = 0;
    for (int s = -1; s <= 1; s += 2) {
      const float step = (float)(s * o->rho);
#pragma omp parallel for schedule(static)
      for (size_t i = 0; i < n; i++) m->params_mem[i] = theta[i] + step * dir[i];
      for (int b = 0; b < batches; b++) {
        model_forward(m, tokens + b * N, targets + b * N, B, T);
        kl += mean_kl(ref + b * N * V, m->acts.probs, (int)N, (int)V) / (2.0 * batches);
        r->loss_perturbed += m->loss / (2.0 * batches * o->directions);
      }
    }
    r->kl_mean += kl / o->directions;
    if (kl > r->kl_max) r->kl_max = kl;
  }
  r->sharpness = 2.0 * r->kl_mean / (o->rho * o->rho);
  memcpy(m->params_mem, theta, n * sizeof(float));
  m->sites = sites;
  free(theta);
  free(dir);
  free(ref);
  return 0;
}
