/*
 * The GPU model of a build made without the CUDA Toolkit: gpu_model_new says
 * so, and nothing else can be reached (every other function needs the model it
 * would have returned).  The trainer links this instead of model_gpu.cu when
 * third_party/cuda_configure.bzl found no toolkit.
 */
#include <stdio.h>
#include <stdlib.h>

#include "experiments/gpu/model_gpu.h"

gpu_model *gpu_model_new(const model *m, const recipe *rc, tq_site *sites, int n_sites, int B,
                         int T, gpu_attention_kind attention, char *err, size_t errlen) {
  (void)m, (void)rc, (void)sites, (void)n_sites, (void)B, (void)T, (void)attention;
  snprintf(err, errlen,
           "device = gpu: this build of exmy has no CUDA (no CUDA Toolkit was found when it "
           "was built; see README, 'With and without CUDA')");
  return NULL;
}

gpu_model *gpu_model_new_lean(const model *m, const recipe *rc, tq_site *sites, int n_sites,
                              int B, int T, gpu_attention_kind attention, int lean_activations,
                              char *err, size_t errlen) {
  (void)lean_activations;
  return gpu_model_new(m, rc, sites, n_sites, B, T, attention, err, errlen);
}

void gpu_model_free(gpu_model *g) {
  if (g) abort();
}

static void unreachable(void) {
  fprintf(stderr, "train: internal error: a GPU function was called in a build without CUDA\n");
  abort();
}

void gpu_model_upload(gpu_model *g, const float *params, const float *mom1, const float *mom2) {
  (void)g, (void)params, (void)mom1, (void)mom2;
  unreachable();
}
void gpu_model_download(gpu_model *g, float *params, float *mom1, float *mom2) {
  (void)g, (void)params, (void)mom1, (void)mom2;
  unreachable();
}
void gpu_model_states_download(gpu_model *g) { (void)g, unreachable(); }
void gpu_model_states_upload(gpu_model *g) { (void)g, unreachable(); }
void gpu_model_begin_step(gpu_model *g, uint64_t sr_counter, bool collect_stats) {
  (void)g, (void)sr_counter, (void)collect_stats;
  unreachable();
}
void gpu_model_fetch_stats(gpu_model *g) { (void)g, unreachable(); }
void gpu_model_set_cuda_graph(gpu_model *g, bool on) { (void)g, (void)on, unreachable(); }
bool gpu_model_cuda_graph(const gpu_model *g) {
  (void)g, unreachable();
  return false;
}
unsigned long long gpu_model_graph_launches(const gpu_model *g) {
  (void)g, unreachable();
  return 0;
}
int gpu_model_bf16_storage(const gpu_model *g) {
  (void)g, unreachable();
  return 0;
}
void gpu_model_bf16_storage_for_new(bool on) { (void)on; }
void gpu_model_profile(gpu_model *g, bool on) { (void)g, (void)on, unreachable(); }
void gpu_model_accum_paths(gpu_model *g, unsigned long long *fast, unsigned long long *ineligible,
                           unsigned long long *scale_range, unsigned long long *not_codes,
                           unsigned long long *block_scaled, unsigned long long *block_one_call) {
  (void)g, (void)fast, (void)ineligible, (void)scale_range, (void)not_codes, (void)block_scaled,
      (void)block_one_call, unreachable();
}
void gpu_model_along_k_paths(const gpu_model *g, unsigned long long *mx_images,
                             unsigned long long *nvfp4_images, unsigned long long *reference) {
  (void)g, (void)mx_images, (void)nvfp4_images, (void)reference, unreachable();
}
void gpu_model_set_logit_sharpness(gpu_model *g, bool on) { (void)g, (void)on, unreachable(); }
void gpu_model_logit_phi(gpu_model *g, float *phi) { (void)g, (void)phi, unreachable(); }
float gpu_model_forward(gpu_model *g, const int *tokens, const int *targets) {
  (void)g, (void)tokens, (void)targets;
  unreachable();
  return 0;
}
void gpu_model_zero_grad(gpu_model *g) { (void)g, unreachable(); }
void gpu_model_backward(gpu_model *g, float loss_scale) { (void)g, (void)loss_scale, unreachable(); }
double gpu_model_update(gpu_model *g, const adamw_hparams *h, int t, double max_norm) {
  (void)g, (void)h, (void)t, (void)max_norm;
  unreachable();
  return 0;
}
size_t gpu_model_arena_bytes(const gpu_model *g) {
  (void)g;
  unreachable();
  return 0;
}
double gpu_memory_in_use_gib(void) {
  unreachable();
  return 0;
}
