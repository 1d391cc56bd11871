/*
 * c_first_step: the C trainer's first step under a precision recipe, on the
 * weights and the first batch that //experiments/trainer:export_ref writes: the
 * forward loss and the global gradient norm (model_forward / model_backward
 * of experiments/trainer/model.c with the recipe's sites, sr counter 0 as at step 0
 * of train.c).  The reference for llama_e8m3.py's PyTorch model.
 *
 *   c_first_step REF.bin RECIPE.cfg   ->   "loss <x> grad_norm <y>" on stdout
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "experiments/trainer/config.h"
#include "experiments/trainer/model.h"
#include "experiments/trainer/optim.h"
#include "experiments/trainer/recipe.h"

static int die(const char *msg, const char *arg) {
  fprintf(stderr, "c_first_step: %s%s\n", msg, arg);
  return 2;
}

int main(int argc, char **argv) {
  if (argc != 3) return die("usage: c_first_step REF.bin RECIPE.cfg", "");
  FILE *f = fopen(argv[1], "rb");
  if (!f) return die("cannot open ", argv[1]);
  int32_t hdr[16];
  float hp[8];
  if (fread(hdr, sizeof hdr, 1, f) != 1 || fread(hp, sizeof hp, 1, f) != 1 ||
      hdr[0] != 0x46455258 || hdr[1] != 1)
    return die("not an export_ref file: ", argv[1]);
  model_config mc = {hdr[2], hdr[3], hdr[4], hdr[5], hdr[6], hdr[7], hdr[8]};
  const int B = hdr[9], T = mc.seq_len;
  const char *bad = model_config_check(&mc);
  if (bad || B < 1 || B > 4096 || T > 1 << 16) return die("bad sizes in ", argv[1]);
  static config cfg;
  char err[512];
  recipe rc;
  config_defaults(&cfg);
  if (config_load_file(&cfg, argv[2], err, sizeof err) ||
      recipe_from_config(&rc, &cfg, (uint64_t)config_int(&cfg, "seed", err, sizeof err), err,
                         sizeof err))
    return die(err, "");
  model m;
  model_init(&m, &mc, 0);
  int *in = malloc(sizeof(int) * (size_t)B * T), *tg = malloc(sizeof(int) * (size_t)B * T);
  if (!in || !tg) return die("out of memory", "");
  const long steps = hdr[10];
  if (steps < 1 || steps > 1 << 20) return die("bad step count in ", argv[1]);
  /* params, then inputs[steps][B][T]: the first batch; targets follow all inputs */
  if (fread(m.params_mem, sizeof(float), m.num_params, f) != m.num_params ||
      fread(in, sizeof(int), (size_t)B * T, f) != (size_t)B * T ||
      fseek(f, (long)sizeof(int) * (steps - 1) * B * T, SEEK_CUR) != 0 ||
      fread(tg, sizeof(int), (size_t)B * T, f) != (size_t)B * T)
    return die("truncated export_ref file: ", argv[1]);
  fclose(f);
  for (int i = 0; i < B * T; i++)
    if (in[i] < 0 || in[i] >= mc.vocab || tg[i] < 0 || tg[i] >= mc.vocab)
      return die("token out of the vocabulary in ", argv[1]);
  m.sites = recipe_make_sites(&rc, &mc);
  tq_sr_counter = 0;
  model_forward(&m, in, tg, B, T);
  model_zero_grad(&m);
  model_backward(&m, in, tg, 1.0f);
  printf("loss %.9g grad_norm %.9g\n", m.loss, grad_global_norm(m.grads_mem, m.num_params));
  recipe_free_sites(m.sites, model_num_sites(&mc));
  m.sites = NULL;
  model_free(&m);
  free(in);
  free(tg);
  return 0;
}
