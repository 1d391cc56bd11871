/*
 * export_ref: writes the state that the independent PyTorch model
 * (experiments/reference/llama_torch.py) must reproduce: a `test`-size model's
 * initial weights, the batches, the forward loss and every parameter gradient
 * of the first batch, then the losses, learning rates and gradient norms of
 * 10 AdamW steps (warmup + cosine, clipping, weight decay on matrices), all
 * computed here in float32 with the fp32 recipe (plain sgemm), or with the
 * recipe of the arguments after OUT.bin: config files (their recipe keys) and
 * KEY=VALUE assignments, in order (tests/experiments/torch_ref_bf16_test.py:
 * configs/bf16.cfg with activations = bf16 or f32).
 *
 *   export_ref OUT.bin [RECIPE.cfg | KEY=VALUE]...
 *
 * Layout (little-endian): int32 header[16] = {magic 0x46455258, version 1, V, C,
 * L, NH, NKV, H, T, B, steps, warmup, 0...}; float hp[8] = {lr, beta1, beta2,
 * eps, weight_decay, grad_clip, min_lr_frac, 0}; float params[P]; int32
 * inputs[steps][B][T]; int32 targets[steps][B][T]; float loss0; float
 * grads0[P]; float losses[steps]; float lrs[steps]; float norms[steps];
 * float params_final[P].
 */
#include <stdio.h>
#include <stdlib.h>

#include <string.h>

#include "experiments/trainer/config.h"
#include "experiments/trainer/model.h"
#include "experiments/trainer/optim.h"
#include "experiments/trainer/recipe.h"

enum { STEPS = 10, BATCH = 4 };

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: export_ref OUT.bin [RECIPE.cfg | KEY=VALUE]...\n");
    return 2;
  }
  static config cfg;
  char err[512] = "";
  config_defaults(&cfg);
  for (int i = 2; i < argc; i++) {
    const size_t len = strlen(argv[i]);
    const int is_file = len > 4 && !strcmp(argv[i] + len - 4, ".cfg");
    if (is_file ? config_load_file(&cfg, argv[i], err, sizeof err)
                : config_set_assignment(&cfg, argv[i], err, sizeof err)) {
      fprintf(stderr, "export_ref: %s\n", err);
      return 2;
    }
  }
  recipe rc;
  if (recipe_from_config(&rc, &cfg, 1337, err, sizeof err)) {
    fprintf(stderr, "export_ref: %s\n", err);
    return 2;
  }
  model_config c;
  model_named_size("test", &c);
  const int B = BATCH, T = c.seq_len, warmup = 3;
  const float lr = 3e-3f, min_frac = 0.1f, clip = 1.0f;
  adamw_hparams hp = {lr, 0.9f, 0.95f, 1e-8f, 0.1f};
  model m;
  model_init(&m, &c, 42);
  tq_site *sites = argc > 2 ? recipe_make_sites(&rc, &c) : NULL; /* none: plain sgemm */
  m.sites = sites;
  m.swiglu_row_scale = rc.swiglu_row_scale;
  m.bf16_activations = rc.bf16_activations;
  const size_t P = m.num_params;
  float *mom1 = calloc(P, sizeof(float)), *mom2 = calloc(P, sizeof(float));
  int *in = malloc(sizeof(int) * STEPS * B * T), *tg = malloc(sizeof(int) * STEPS * B * T);
  uint64_t s = 2024;
  for (int i = 0; i < STEPS * B * T; i++) { /* text-like: a few bytes repeat often */
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    in[i] = (int)((s >> 33) % 64) + 32;
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    tg[i] = (int)((s >> 33) % 64) + 32;
  }
  FILE *f = fopen(argv[1], "wb");
  if (!f) {
    perror(argv[1]);
    return 2;
  }
  int32_t hdr[16] = {0x46455258, 1, c.vocab, c.dim, c.n_layers, c.n_heads, c.n_kv_heads,
                     c.hidden, c.seq_len, B, STEPS, warmup};
  float h[8] = {lr, hp.beta1, hp.beta2, hp.eps, hp.weight_decay, clip, min_frac, 0};
  fwrite(hdr, sizeof hdr, 1, f);
  fwrite(h, sizeof h, 1, f);
  fwrite(m.params_mem, sizeof(float), P, f);
  fwrite(in, sizeof(int), (size_t)STEPS * B * T, f);
  fwrite(tg, sizeof(int), (size_t)STEPS * B * T, f);
  float losses[STEPS], lrs[STEPS], norms[STEPS];
  for (int step = 0; step < STEPS; step++) {
    model_forward(&m, in + step * B * T, tg + step * B * T, B, T);
    model_zero_grad(&m);
    model_backward(&m, in + step * B * T, tg + step * B * T, 1.0f);
    if (step == 0) {
      float loss0 = m.loss;
      fwrite(&loss0, sizeof loss0, 1, f);
      fwrite(m.grads_mem, sizeof(float), P, f);
    }
    losses[step] = m.loss;
    double norm = grad_global_norm(m.grads_mem, P);
    norms[step] = (float)norm;
    grad_clip(m.grads_mem, P, norm, clip);
    hp.lr = lrs[step] = lr_schedule(step, STEPS, warmup, lr, min_frac);
    adamw_update(&m, mom1, mom2, &hp, step + 1);
  }
  fwrite(losses, sizeof losses, 1, f);
  fwrite(lrs, sizeof lrs, 1, f);
  fwrite(norms, sizeof norms, 1, f);
  fwrite(m.params_mem, sizeof(float), P, f);
  fclose(f);
  printf("export_ref: %zu parameters, loss0 %.6f, loss after %d steps %.6f\n", P, losses[0], STEPS,
         losses[STEPS - 1]);
  if (sites) recipe_free_sites(sites, model_num_sites(&c));
  model_free(&m);
  return 0;
}
