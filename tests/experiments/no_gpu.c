/* The GPU model's interface without CUDA, for the trainer's sanitizer build
 * (AddressSanitizer and the CUDA runtime do not mix): device = gpu is refused
 * with one line; nothing else is reachable. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "experiments/gpu/model_gpu.h"

gpu_model *gpu_model_new(const model *m, const recipe *rc, tq_site *sites, int n_sites, int B,
                         int T, gpu_attention_kind attention, char *err, size_t errlen) {
  (void)m, (void)rc, (void)sites, (void)n_sites, (void)B, (void)T, (void)attention;
  snprintf(err, errlen, "this build of the trainer has no GPU support (device = gpu)");
  return NULL;
}

static void unreachable(void) {
  fprintf(stderr, "no_gpu: a GPU function was called without a GPU model\n");
  abort();
}

void gpu_model_free(gpu_model *g) {
  if (g) unreachable();
}
void gpu_model_upload(gpu_model *g, const float *p, const float *m1, const float *m2) {
  (void)g, (void)p, (void)m1, (void)m2;
  unreachable();
}
void gpu_model_download(gpu_model *g, float *p, float *m1, float *m2) {
  (void)g, (void)p, (void)m1, (void)m2;
  unreachable();
}
void gpu_model_states_download(gpu_model *g) { (void)g, unreachable(); }
void gpu_model_states_upload(gpu_model *g) { (void)g, unreachable(); }
void gpu_model_begin_step(gpu_model *g, uint64_t sr_counter, bool collect_stats) {
  (void)g, (void)sr_counter, (void)collect_stats;
  unreachable();
}
void gpu_model_fetch_stats(gpu_model *g) { (void)g, unreachable(); }
float gpu_model_forward(gpu_model *g, const int *tokens, const int *targets) {
  (void)g, (void)tokens, (void)targets;
  unreachable();
  return NAN;
}
void gpu_model_zero_grad(gpu_model *g) { (void)g, unreachable(); }
void gpu_model_backward(gpu_model *g, float loss_scale) { (void)g, (void)loss_scale, unreachable(); }
double gpu_model_update(gpu_model *g, const adamw_hparams *h, int t, double max_norm) {
  (void)g, (void)h, (void)t, (void)max_norm;
  unreachable();
  return NAN;
}
double gpu_memory_in_use_gib(void) { return NAN; }
