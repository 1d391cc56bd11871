/*
 * sharpness: the logit-based sharpness (sharpness.h) of a checkpoint.
 *
 *   bazel run //experiments/studies:sharpness -- RUN_DIR [--ckpt FILE] [--rho R] [--directions K]
 *                                        [--batches N] [--seed S] [--tensors matrices|all|NAME,...]
 *
 * Reads RUN_DIR/ckpt.bin (or FILE: e.g. RUN_DIR/ckpt-500.bin, kept by
 * ckpt_keep = 1); the model, the data and the batch size are those of the
 * configuration stored in the checkpoint.  Evaluates on the first N
 * validation micro-batches (the ones validation uses) and prints one JSON
 * line: step, rho, directions, tokens, loss, loss_perturbed, kl_mean, kl_max,
 * sharpness.  Bad input: one line on stderr, exit 2.
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "experiments/trainer/checkpoint.h"
#include "experiments/trainer/config.h"
#include "experiments/trainer/data.h"
#include "experiments/trainer/json_out.h"
#include "experiments/trainer/model.h"
#include "experiments/studies/sharpness.h"

static void die(const char *fmt, const char *arg) {
  char msg[1024]; /* one line, whatever the paths and values quoted in it hold */
  snprintf(msg, sizeof msg, fmt, arg);
  for (char *p = msg; *p; p++)
    if ((unsigned char)*p < 0x20 || *p == 0x7f) *p = '?';
  fprintf(stderr, "sharpness: %s\n", msg);
  exit(2);
}

/* Relative paths are relative to the workspace under `bazel run`. */
static const char *in_workspace(const char *path, char *buf, size_t len) {
  const char *ws = getenv("BUILD_WORKSPACE_DIRECTORY");
  if (!path[0] || path[0] == '/' || !ws) return path;
  snprintf(buf, len, "%s/%s", ws, path);
  return buf;
}

static double real_arg(const char *opt, const char *s) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (end == s || *end || isspace((unsigned char)s[0]) || errno || !isfinite(v))
    die("%s wants a finite number", opt);
  return v;
}

/* A base-10 integer in lo..hi: digits only. */
static long long int_arg(const char *opt, const char *s, long long lo, long long hi) {
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (!isdigit((unsigned char)s[0]) || *end || errno || v < lo || v > hi) {
    char msg[600];
    snprintf(msg, sizeof msg, "%s wants an integer in %lld..%lld, got '%.500s'", opt, lo, hi, s);
    die("%s", msg);
  }
  return v;
}

int main(int argc, char **argv) {
  /* as train.c: spinning OpenMP threads starve OpenBLAS's on a small machine */
  if (!getenv("OMP_WAIT_POLICY")) {
    setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
    execv("/proc/self/exe", argv);
  }
  const char *run_dir = NULL, *ckpt = NULL, *tensors = "matrices";
  sharpness_opts o = {.rho = 0.05, .directions = 4, .seed = 1};
  int batches = 4;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      fprintf(stderr, "usage: sharpness RUN_DIR [--ckpt FILE] [--rho R] [--directions K] "
                      "[--batches N] [--seed S] [--tensors matrices|all|NAME,...]\n");
      return 0;
    }
    if (a[0] == '-' && i + 1 >= argc) die("%s needs a value", a);
    if (!strcmp(a, "--ckpt")) ckpt = argv[++i];
    else if (!strcmp(a, "--rho")) o.rho = real_arg(a, argv[++i]);
    else if (!strcmp(a, "--directions")) o.directions = (int)int_arg(a, argv[++i], 1, 1 << 20);
    else if (!strcmp(a, "--batches")) batches = (int)int_arg(a, argv[++i], 1, 1 << 20);
    else if (!strcmp(a, "--seed")) o.seed = (uint64_t)int_arg(a, argv[++i], 0, INT64_MAX);
    else if (!strcmp(a, "--tensors")) tensors = argv[++i];
    else if (a[0] == '-') die("unknown option '%s'", a);
    else if (run_dir) die("more than one run directory ('%s')", a);
    else run_dir = a;
  }
  if (!run_dir && !ckpt) die("%s", "usage: sharpness RUN_DIR [--ckpt FILE] [options]");
  if (!(o.rho > 0) || o.directions < 1 || batches < 1)
    die("%s", "--rho must be > 0, --directions and --batches >= 1");
  if (!(o.tensor_mask = sharpness_parse_mask(tensors))) die("unknown tensors '%s'", tensors);

  char pbuf[4400], path[4400], err[512] = "";
  if (ckpt) snprintf(path, sizeof path, "%s", in_workspace(ckpt, pbuf, sizeof pbuf));
  else snprintf(path, sizeof path, "%s/ckpt.bin", in_workspace(run_dir, pbuf, sizeof pbuf));

  /* the run's configuration, as stored in the checkpoint */
  ckpt_header h;
  char *text;
  config cfg;
  config_defaults(&cfg);
  if (checkpoint_read_config(path, &h, &text, err, sizeof err) ||
      config_load_text(&cfg, text, err, sizeof err))
    die("%s", err);
  free(text);
  model_config mc = {h.model_cfg[0], h.model_cfg[1], h.model_cfg[2], h.model_cfg[3],
                     h.model_cfg[4], h.model_cfg[5], h.model_cfg[6]};
  const char *bad = model_config_check(&mc);
  if (bad) die("%s", bad);
  const int B = (int)config_int(&cfg, "batch_size", err, sizeof err), T = mc.seq_len;
  const uint64_t seed = (uint64_t)config_int(&cfg, "seed", err, sizeof err);
  if (*err) die("%s", err);

  dataset train, val;
  if (dataset_load(&train, in_workspace(config_str(&cfg, "data"), pbuf, sizeof pbuf), mc.vocab,
                   err, sizeof err))
    die("%s", err);
  if (*config_str(&cfg, "val_data")) {
    if (dataset_load(&val, in_workspace(config_str(&cfg, "val_data"), pbuf, sizeof pbuf),
                     mc.vocab, err, sizeof err))
      die("%s", err);
  } else {
    dataset_split_tail(&train, &val, 0.05);
  }
  if (dataset_start(&val, T, seed, 0, err, sizeof err)) die("%s", err);
  if (B < 1 || (double)batches * B * T * mc.vocab > (double)(SIZE_MAX / 8))
    die("%s", "--batches x batch_size x seq_len x vocab is too large");
  const size_t tokens = (size_t)batches * B * T;
  int *in = malloc(sizeof(int) * tokens), *tg = malloc(sizeof(int) * tokens);
  if (!in || !tg) die("out of memory for %s", "the evaluation batches");
  dataset_seek(&val, 0, 0);
  for (int b = 0; b < batches; b++)
    dataset_next_batch(&val, B, in + (size_t)b * B * T, tg + (size_t)b * B * T);

  model m;
  if (model_init(&m, &mc, seed)) die("out of memory for %s", "the model");
  float *mom1 = malloc(m.num_params * sizeof(float)), *mom2 = malloc(m.num_params * sizeof(float));
  if (!mom1 || !mom2) die("out of memory for %s", "the model");
  if (checkpoint_load(path, &h, &m, mom1, mom2, NULL, 0, err, sizeof err)) die("%s", err);

  sharpness_result r;
  if (logit_sharpness(&m, in, tg, batches, B, T, &o, &r))
    die("out of memory for %s", "the evaluation (fewer --batches?)");
  printf("{\"step\":%lld,\"rho\":%g,\"directions\":%d,\"tensors\":\"%s\",\"tokens\":%d,",
         (long long)h.step, o.rho, o.directions, tensors, r.tokens);
  const json_field results[] = {{"loss", r.loss},       {"loss_perturbed", r.loss_perturbed},
                                {"kl_mean", r.kl_mean}, {"kl_max", r.kl_max},
                                {"sharpness", r.sharpness}};
  json_nums(stdout, results, sizeof results / sizeof results[0]);
  printf("}\n");

  model_free(&m);
  free(mom1);
  free(mom2);
  free(in);
  free(tg);
  dataset_free(&train);
  dataset_free(&val);
  return 0;
}
