/*
 * train: a LLaMA language model trained with emulated low-precision GEMMs.
 *
 *   bazel run //experiments/trainer:train -- --config experiments/configs/<recipe>.cfg [--set key=value]...
 *   ... --resume [RUN_DIR]      continue from RUN_DIR/ckpt.bin bit-identically
 *   ... --recipe FILE           replace the precision recipe (every recipe key reset, then
 *                               FILE): e.g. a bf16 continuation of an FP8 checkpoint
 *   ... --set device=gpu        the same run on a CUDA GPU (experiments/gpu/)
 *   ... --overwrite             start a new run in a directory that holds one
 *
 * Writes into the run directory: config.cfg (as resolved), log.jsonl (one line
 * per step, validation and statistics lines), ckpt.bin, summary.json.
 * Bad input (unknown key, value out of range, missing file, a checkpoint that
 * fails its checks): a one-line error, exit status 2, and the run directory
 * unchanged.  A write that fails (full disk): a one-line error, exit status 1;
 * the last checkpoint written stays intact.
 */
#include <errno.h>
#include <math.h>
#include <omp.h>
#include <dirent.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "experiments/trainer/checkpoint.h"
#include "experiments/trainer/config.h"
#include "experiments/trainer/data.h"
#include "experiments/trainer/json_out.h"
#include "experiments/trainer/logit_sharpness.h"
#include "experiments/trainer/mkdir_p.h"
#include "experiments/gpu/model_gpu.h"
#include "experiments/trainer/model.h"
#include "experiments/trainer/optim.h"
#include "experiments/trainer/qgemm.h"
#include "experiments/trainer/recipe.h"
#include "lib/one_line.h"

static void die(int code, const char *fmt, ...) __attribute__((noreturn, format(printf, 2, 3)));
static void die(int code, const char *fmt, ...) {
  fflush(stdout);
  va_list ap;
  va_start(ap, fmt);
  exmy_vprint_line("train", fmt, ap);
  va_end(ap);
  exit(code);
}

/* Relative paths are relative to the workspace under `bazel run`. */
static const char *in_workspace(const char *path, char *buf, size_t len) {
  const char *ws = getenv("BUILD_WORKSPACE_DIRECTORY");
  if (!path[0] || path[0] == '/' || !ws) return path;
  snprintf(buf, len, "%s/%s", ws, path);
  return buf;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static volatile sig_atomic_t interrupted = 0;
static void on_sigint(int sig) {
  (void)sig;
  interrupted = 1;
}

/* One JSONL line with the statistics of every quantized operand use. */
static void log_stats(FILE *log, int step, const model_config *mc, const tq_site *sites, int n) {
  fprintf(log, "{\"step\":%d,\"stats\":[", step);
  int first = 1;
  for (int i = 0; i < n; i++)
    for (int u = 0; u < USES_PER_SITE; u++) {
      const exmy_operand_quant *q = &sites[i].op[u];
      const exmy_tensor_stats *s = &sites[i].stats[u];
      if (!q->enabled || s->n == 0) continue;
      char name[64];
      site_name(mc, i, name, sizeof name);
      fprintf(log, "%s{\"site\":\"%s\",\"use\":\"%s\",\"format\":\"%s\",", first ? "" : ",", name,
              tq_use_names[u], q->format.name);
      const json_field fields[] = {
          {"amax", s->amax},   {"underflow", s->underflow_ratio}, {"overflow", s->overflow_ratio},
          {"mse", s->mse},     {"cosine", s->cosine},             {"scale", s->scale},
          {"delayed_over_current", s->delayed_over_current},
      };
      json_nums(log, fields, sizeof fields / sizeof *fields);
      fputc('}', log);
      first = 0;
    }
  fprintf(log, "]}\n");
}

typedef struct {
  char *buf;
  size_t len;
} state_snapshot;

/* Validation must not touch the delayed-scaling histories of training. */
static state_snapshot snapshot_states(const tq_site *sites, int n) {
  state_snapshot s = {0};
  FILE *f = open_memstream(&s.buf, &s.len);
  sites_state_write(sites, n, f);
  fclose(f);
  return s;
}
static void restore_states(tq_site *sites, int n, state_snapshot *s) {
  char err[256];
  if (sites_state_load(sites, n, s->buf, s->len, err, sizeof err)) {
    fprintf(stderr, "train: internal error: %s\n", err);
    exit(1);
  }
  free(s->buf);
}

/* One micro-batch forward and backward on the run's device; returns its loss. */
static float forward_backward(model *m, gpu_model *gpu, const int *in, const int *tg, int B,
                              int T, float loss_scale) {
  if (gpu) {
    const float loss = gpu_model_forward(gpu, in, tg);
    gpu_model_backward(gpu, loss_scale);
    return loss;
  }
  model_forward(m, in, tg, B, T);
  model_backward(m, in, tg, loss_scale);
  return m->loss;
}

/* The mean validation loss over `batches` batches, and the means over them of
 * the logits' epsilon-sharpness (logit_sharpness.h) at the final positions
 * (last) and at all positions (all). */
static double validate(model *m, gpu_model *gpu, dataset *val, int B, int T, int batches,
                       int *in, int *tg, tq_site *sites, int n_sites,
                       double last[LOGIT_SHARPNESS_NUM_EPS], double all[LOGIT_SHARPNESS_NUM_EPS]) {
  if (gpu) gpu_model_states_download(gpu); /* the host sites now hold the training states */
  state_snapshot snap = snapshot_states(sites, n_sites);
  uint64_t sr = tq_sr_counter;
  bool stats = tq_collect_stats;
  tq_collect_stats = false;
  tq_sr_counter = (uint64_t)1 << 62;
  if (gpu) gpu_model_begin_step(gpu, tq_sr_counter, false);
  dataset_seek(val, 0, 0);
  float *gpu_phi = gpu ? malloc(sizeof(float) * LOGIT_SHARPNESS_NUM_EPS * B * T) : NULL;
  if (gpu && !gpu_phi) die(1, "%s", "train: out of memory");
  if (gpu) gpu_model_set_logit_sharpness(gpu, true);
  m->logit_sharpness = 1;
  double sum = 0;
  for (int k = 0; k < LOGIT_SHARPNESS_NUM_EPS; k++) last[k] = all[k] = 0;
  for (int i = 0; i < batches; i++) {
    dataset_next_batch(val, B, in, tg);
    if (gpu) {
      sum += gpu_model_forward(gpu, in, tg);
      gpu_model_logit_phi(gpu, gpu_phi);
    } else {
      model_forward(m, in, tg, B, T);
      sum += m->loss;
    }
    double batch_last[LOGIT_SHARPNESS_NUM_EPS], batch_all[LOGIT_SHARPNESS_NUM_EPS];
    logit_sharpness_means(gpu ? gpu_phi : m->logit_phi, B, T, batch_last, batch_all);
    for (int k = 0; k < LOGIT_SHARPNESS_NUM_EPS; k++)
      last[k] += batch_last[k] / batches, all[k] += batch_all[k] / batches;
  }
  m->logit_sharpness = 0;
  if (gpu) gpu_model_set_logit_sharpness(gpu, false);
  free(gpu_phi);
  restore_states(sites, n_sites, &snap);
  if (gpu) gpu_model_states_upload(gpu);
  tq_sr_counter = sr;
  tq_collect_stats = stats;
  return sum / batches;
}

/* Closes f, the temporary file tmp (written without error so far when ok),
 * and renames it over path; on any failure removes tmp and keeps path.  0, or
 * -1 with errno set (from the first call that failed). */
static int close_and_replace(FILE *f, bool ok, const char *tmp, const char *path) {
  int saved = errno;
  if (fclose(f) != 0 && ok) ok = false, saved = errno;
  if (ok && rename(tmp, path) != 0) ok = false, saved = errno;
  if (!ok) {
    unlink(tmp);
    errno = saved;
    return -1;
  }
  return 0;
}

/* summary.json, replaced atomically; 0, or -1 with errno set (the old one kept). */
static int write_summary(const char *run_dir, const char *status, int steps_done,
                         int diverged_at, double last_loss, double min_loss, double val_loss,
                         double tok_s, double wall) {
  char path[4200], tmp[4300];
  snprintf(path, sizeof path, "%s/summary.json", run_dir);
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE *f = fopen(tmp, "w");
  if (!f) return -1;
  fprintf(f, "{\"status\":\"%s\",\"steps\":%d,", status, steps_done);
  if (diverged_at) fprintf(f, "\"diverged_at\":%d,", diverged_at);
  const json_field fields[] = {{"last_loss", last_loss}, {"min_loss", min_loss},
                               {"val_loss", val_loss},   {"tokens_per_s", tok_s},
                               {"wall_s", wall}};
  json_nums(f, fields, sizeof fields / sizeof *fields);
  fprintf(f, "}\n");
  return close_and_replace(f, fflush(f) == 0 && !ferror(f), tmp, path);
}

/* Writes text to path through a temporary file and a rename.  0, or -1 with errno set. */
static int write_file_atomic(const char *path, const char *text) {
  char tmp[4300];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE *f = fopen(tmp, "w");
  if (!f) return -1;
  return close_and_replace(f, fputs(text, f) >= 0 && fflush(f) == 0 && fsync(fileno(f)) == 0,
                           tmp, path);
}

/* The files a run writes into its directory (and their temporaries). */
static bool is_run_file(const char *name) {
  static const char *const names[] = {"config.cfg", "log.jsonl", "ckpt.bin", "summary.json"};
  char base[256];
  snprintf(base, sizeof base, "%s", name);
  size_t n = strlen(base);
  if (n > 4 && !strcmp(base + n - 4, ".tmp")) base[n -= 4] = 0;
  for (size_t i = 0; i < sizeof names / sizeof *names; i++)
    if (!strcmp(base, names[i])) return true;
  /* ckpt-STEP.bin */
  return n > 9 && !strncmp(base, "ckpt-", 5) && !strcmp(base + n - 4, ".bin") &&
         strspn(base + 5, "0123456789") == n - 9;
}

/* The first run file in dir (a static buffer), or NULL (also when dir does not exist). */
static const char *find_run_file(const char *dir) {
  static char found[256];
  DIR *d = opendir(dir);
  if (!d) return NULL;
  const char *r = NULL;
  for (struct dirent *e; !r && (e = readdir(d));)
    if (is_run_file(e->d_name)) r = found, snprintf(found, sizeof found, "%s", e->d_name);
  closedir(d);
  return r;
}

/* Removes dir's run files, or only their temporaries; 0 or -1 with errno set. */
static int remove_run_files(const char *dir, bool only_temporaries) {
  DIR *d = opendir(dir);
  if (!d) return -1;
  int rc = 0;
  for (struct dirent *e; (e = readdir(d));) {
    const size_t n = strlen(e->d_name);
    if (!is_run_file(e->d_name) || (only_temporaries && (n < 4 || strcmp(e->d_name + n - 4, ".tmp"))))
      continue;
    char path[4400];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    if (unlink(path) && errno != ENOENT) rc = -1;
  }
  closedir(d);
  return rc;
}

static void usage(void) {
  fprintf(stderr,
          "usage: train --config FILE [--recipe FILE] [--set key=value]... [--resume [RUN_DIR]]\n"
          "             [--overwrite]\n"
          "  recipes: experiments/configs/*.cfg; keys and defaults: experiments/trainer/config.c\n"
          "  a new run refuses a run directory that holds a run, unless --overwrite\n"
          "  Unless OMP_WAIT_POLICY is set, train restarts itself once with\n"
          "  OMP_WAIT_POLICY=PASSIVE (OpenMP threads that spin starve OpenBLAS's threads);\n"
          "  without /proc it goes on without the restart.\n");
}

/* ------------------------------------------------------------ the steps of main */

/* The command line. */
typedef struct {
  const char *config_path, *resume_dir, *recipe_path;
  bool resume, overwrite;
  const char *sets[256];
  int n_sets;
} options;

/* Reads the command line into o; false after --help (the usage printed). */
static bool parse_args(int argc, char **argv, options *o) {
  memset(o, 0, sizeof *o);
  for (int i = 1; i < argc; i++) {
    const bool has_value = i + 1 < argc;
    if (!strcmp(argv[i], "--config") && has_value) o->config_path = argv[++i];
    else if (!strcmp(argv[i], "--recipe") && has_value) o->recipe_path = argv[++i];
    else if (!strcmp(argv[i], "--set") && has_value) {
      if (o->n_sets == 256) die(2, "%s", "more than 256 --set");
      o->sets[o->n_sets++] = argv[++i];
    } else if (!strcmp(argv[i], "--resume")) {
      o->resume = true;
      if (i + 1 < argc && strncmp(argv[i + 1], "--", 2)) o->resume_dir = argv[++i];
    } else if (!strcmp(argv[i], "--overwrite")) {
      o->overwrite = true;
    } else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      usage();
      return false;
    } else if (!strcmp(argv[i], "--config") || !strcmp(argv[i], "--recipe") ||
               !strcmp(argv[i], "--set")) {
      die(2, "%s needs a value (see train --help)", argv[i]);
    } else {
      die(2, "unknown argument '%s' (see train --help)", argv[i]);
    }
  }
  if (o->resume && o->overwrite) die(2, "%s", "--overwrite starts a new run; it cannot resume one");
  return true;
}

/* The configuration: the defaults, then the resumed run's config.cfg (--resume
 * RUN_DIR without --config), --config, --recipe (every recipe key reset
 * first), the --set assignments, and run_dir = RUN_DIR when resuming one. */
static void load_config(const options *o, config *cfg) {
  char err[512] = "", pbuf[4400], pbuf2[4096];
  if (o->resume_dir && !o->config_path) {
    snprintf(pbuf2, sizeof pbuf2, "%s/config.cfg", o->resume_dir);
    if (config_load_file(cfg, in_workspace(pbuf2, pbuf, sizeof pbuf), err, sizeof err))
      die(2, "%s", err);
  }
  if (o->config_path && config_load_file(cfg, in_workspace(o->config_path, pbuf, sizeof pbuf),
                                         err, sizeof err))
    die(2, "%s", err);
  if (o->recipe_path) {
    config_reset_recipe(cfg);
    if (config_load_file(cfg, in_workspace(o->recipe_path, pbuf, sizeof pbuf), err, sizeof err))
      die(2, "%s", err);
  }
  for (int i = 0; i < o->n_sets; i++)
    if (config_set_assignment(cfg, o->sets[i], err, sizeof err)) die(2, "%s", err);
  if (o->resume_dir && config_set(cfg, "run_dir", o->resume_dir, err, sizeof err))
    die(2, "%s", err);
}

/* The training settings of the configuration. */
typedef struct {
  int B, T, accum, steps, warmup, val_every, val_batches, ckpt_every, stats_every, threads,
      progress, interrupt_at, ckpt_keep, stop_at, crash_at, cuda_graph, lean_activations;
  float lr, min_frac;
  adamw_hparams hp; /* hp.lr: the base rate; the schedule sets each step's */
  double clip, diverge_delta;
  uint64_t seed;
  bool on_gpu;
  const char *attn; /* attention_kernel */
} settings;

/* The model's shape and the training settings, checked. */
static void read_settings(config *cfg, model_config *mc, settings *s) {
  char err[512] = "";
  if (model_named_size(config_str(cfg, "size"), mc))
    die(2, "unknown size '%s' (test, tiny, small, 120m, 120m-32k, 350m, 1b)", config_str(cfg, "size"));
  static const char *const shape_keys[7] = {"vocab",      "dim",    "n_layers", "n_heads",
                                            "n_kv_heads", "hidden", "seq_len"};
  int *shape[7] = {&mc->vocab, &mc->dim, &mc->n_layers, &mc->n_heads, &mc->n_kv_heads,
                   &mc->hidden, &mc->seq_len};
  for (int i = 0; i < 7; i++) {
    long v = config_int(cfg, shape_keys[i], err, sizeof err);
    if (v > 0) *shape[i] = (int)v;
  }
  const char *bad = model_config_check(mc);
  if (bad) die(2, "%s", bad);

  s->B = (int)config_int(cfg, "batch_size", err, sizeof err);
  s->accum = (int)config_int(cfg, "grad_accum", err, sizeof err);
  s->steps = (int)config_int(cfg, "steps", err, sizeof err);
  s->warmup = (int)config_int(cfg, "warmup", err, sizeof err);
  s->lr = (float)config_double(cfg, "lr", err, sizeof err);
  s->min_frac = (float)config_double(cfg, "min_lr_frac", err, sizeof err);
  s->hp = (adamw_hparams){s->lr, (float)config_double(cfg, "beta1", err, sizeof err),
                          (float)config_double(cfg, "beta2", err, sizeof err),
                          (float)config_double(cfg, "adam_eps", err, sizeof err),
                          (float)config_double(cfg, "weight_decay", err, sizeof err)};
  s->clip = config_double(cfg, "grad_clip", err, sizeof err);
  s->seed = (uint64_t)config_int(cfg, "seed", err, sizeof err);
  s->val_every = (int)config_int(cfg, "val_every", err, sizeof err);
  s->val_batches = (int)config_int(cfg, "val_batches", err, sizeof err);
  s->ckpt_every = (int)config_int(cfg, "ckpt_every", err, sizeof err);
  s->stats_every = (int)config_int(cfg, "stats_every", err, sizeof err);
  s->diverge_delta = config_double(cfg, "diverge_delta", err, sizeof err);
  s->threads = (int)config_int(cfg, "threads", err, sizeof err);
  s->progress = (int)config_int(cfg, "progress", err, sizeof err);
  s->interrupt_at = (int)config_int(cfg, "interrupt_at", err, sizeof err);
  s->ckpt_keep = (int)config_int(cfg, "ckpt_keep", err, sizeof err);
  s->stop_at = (int)config_int(cfg, "stop_at", err, sizeof err);
  s->crash_at = (int)config_int(cfg, "crash_at", err, sizeof err);
  s->cuda_graph = (int)config_int(cfg, "cuda_graph", err, sizeof err);
  s->lean_activations = (int)config_int(cfg, "lean_activations", err, sizeof err);
  if (*err) die(2, "%s", err);
  const char *device = config_str(cfg, "device");
  s->attn = config_str(cfg, "attention_kernel");
  s->on_gpu = !strcmp(device, "gpu");
  if (!s->on_gpu && strcmp(device, "cpu")) die(2, "device must be cpu or gpu, not '%s'", device);
  if (strcmp(s->attn, "materialized") && strcmp(s->attn, "flash"))
    die(2, "attention_kernel must be materialized or flash, not '%s'", s->attn);
  if (s->B < 1 || s->accum < 1 || s->steps < 1 || s->val_batches < 1)
    die(2, "%s", "batch_size, grad_accum, steps and val_batches must be >= 1");
  s->T = mc->seq_len;
  /* the model indexes a micro-batch's rows (tokens x width, heads x T x T) with int */
  long long widest = mc->dim;
  if (mc->hidden > widest) widest = mc->hidden;
  if (mc->vocab > widest) widest = mc->vocab;
  if ((long long)mc->n_heads * s->T > widest) widest = (long long)mc->n_heads * s->T;
  if ((long long)s->B * s->T * widest > INT_MAX)
    die(2, "%s", "batch_size x seq_len x max(dim, hidden, vocab, n_heads x seq_len) must be "
                 "below 2^31");
}

/* Everything a run holds between its steps. */
typedef struct {
  const settings *s;
  model_config mc;
  recipe rc;
  dataset train, val;
  model m;
  tq_site *sites;
  int n_sites;
  float *mom1, *mom2; /* AdamW moments (host copies; the GPU keeps its own) */
  int *in, *tg;       /* one micro-batch of inputs and targets */
  gpu_model *gpu;     /* NULL on the CPU */
  int profile_step;   /* the GPU step the profiler collects (EXMY_GPU_PROFILE_STEP), or 0 */
  char run_dir[4096], ckpt_path[4200], log_path[4200], cfg_path[4200];
  char *config_text; /* config.cfg as written, and as the checkpoints carry it */
  FILE *log;
  ckpt_header hdr;
  int start, last; /* the steps this invocation runs: start .. last - 1 */
  int done, last_saved; /* last_saved: the step of the newest checkpoint on disk, or -1 */
  double running_min, tokens_seen;
  uint64_t log_bytes;
  double t_start, loss, val_loss, step_time_avg, tok_s, gpu_mem_gib;
  const char *status;
  int diverged_at;
} run;

/* The recipe and the training and validation data. */
static void open_data(run *r, const config *cfg) {
  char err[512] = "", pbuf[4400];
  const settings *s = r->s;
  if (recipe_from_config(&r->rc, cfg, s->seed, err, sizeof err)) die(2, "%s", err);
  if (dataset_load(&r->train, in_workspace(config_str(cfg, "data"), pbuf, sizeof pbuf),
                   r->mc.vocab, err, sizeof err))
    die(2, "%s", err);
  if (*config_str(cfg, "val_data")) {
    if (dataset_load(&r->val, in_workspace(config_str(cfg, "val_data"), pbuf, sizeof pbuf),
                     r->mc.vocab, err, sizeof err))
      die(2, "%s", err);
  } else {
    dataset_split_tail(&r->train, &r->val, 0.05);
  }
  if (dataset_start(&r->train, s->T, s->seed, 1, err, sizeof err) ||
      dataset_start(&r->val, s->T, s->seed, 0, err, sizeof err))
    die(2, "%s", err);
}

/* The model, the optimizer state, the recipe's sites and, on the GPU, the device model. */
static void build_model(run *r) {
  char err[512] = "";
  const settings *s = r->s;
  if (model_init(&r->m, &r->mc, s->seed))
    die(1, "out of memory for a model of %zu parameters",
        model_param_sizes(&r->mc, (size_t[NUM_PARAM_TENSORS]){0}));
  r->n_sites = model_num_sites(&r->mc);
  r->sites = recipe_make_sites(&r->rc, &r->mc);
  r->m.sites = r->sites;
  r->m.swiglu_row_scale = r->rc.swiglu_row_scale;
  r->m.bf16_activations = r->rc.bf16_activations;
  r->mom1 = calloc(r->m.num_params, sizeof(float));
  r->mom2 = calloc(r->m.num_params, sizeof(float));
  r->in = malloc(sizeof(int) * s->B * s->T);
  r->tg = malloc(sizeof(int) * s->B * s->T);
  if (!r->sites || !r->mom1 || !r->mom2 || !r->in || !r->tg) die(1, "%s", "out of memory");
  if (s->on_gpu) {
    r->gpu = gpu_model_new_lean(&r->m, &r->rc, r->sites, r->n_sites, s->B, s->T,
                                strcmp(s->attn, "flash") ? GPU_ATTENTION_MATERIALIZED
                                                         : GPU_ATTENTION_FLASH,
                                s->lean_activations, err, sizeof err);
    if (!r->gpu) die(2, "%s", err);
    gpu_model_set_cuda_graph(r->gpu, s->cuda_graph);
    /* for a profiler started with collection off (experiments/gpu/profile_gpu.sh) */
    const char *profile = getenv("EXMY_GPU_PROFILE_STEP");
    r->profile_step = profile ? atoi(profile) : 0;
  } else if (model_reserve(&r->m, s->B, s->T)) {
    die(1, "%s", "out of memory for the activations of a micro-batch");
  }
}

/* The run directory (run_dir, or experiments/runs/RECIPE-SIZE-sSEED, which
 * then goes into the configuration) and the text of config.cfg. */
static void name_run_dir(run *r, config *cfg) {
  char err[512] = "", pbuf[4400], pbuf2[4096];
  if (*config_str(cfg, "run_dir")) {
    snprintf(r->run_dir, sizeof r->run_dir, "%s",
             in_workspace(config_str(cfg, "run_dir"), pbuf, sizeof pbuf));
  } else {
    snprintf(pbuf2, sizeof pbuf2, "experiments/runs/%s-%s-s%llu", config_str(cfg, "recipe"),
             config_str(cfg, "size"), (unsigned long long)r->s->seed);
    snprintf(r->run_dir, sizeof r->run_dir, "%s", in_workspace(pbuf2, pbuf, sizeof pbuf));
    if (config_set(cfg, "run_dir", pbuf2, err, sizeof err)) die(2, "%s", err);
  }
  size_t config_len = 0;
  FILE *f = open_memstream(&r->config_text, &config_len);
  if (!f) die(1, "%s", "out of memory");
  config_write(cfg, f);
  if (fclose(f)) die(1, "%s", "out of memory");
  snprintf(r->ckpt_path, sizeof r->ckpt_path, "%s/ckpt.bin", r->run_dir);
  snprintf(r->log_path, sizeof r->log_path, "%s/log.jsonl", r->run_dir);
  snprintf(r->cfg_path, sizeof r->cfg_path, "%s/config.cfg", r->run_dir);
}

/* --resume: the checkpoint's state into the model, the moments, the sites and
 * the data position.  A new run: refuses a directory that holds a run, unless
 * --overwrite.  Nothing in the run directory changes here. */
static void resume_or_check(run *r, const config *cfg, const options *o) {
  char err[512] = "";
  if (o->resume) {
    /* Under another recipe the checkpoint's delayed-scaling states belong to
     * other operands: they are not read, the new recipe's start fresh. */
    ckpt_header h;
    char *saved_text = NULL;
    config saved;
    config_defaults(&saved);
    if (checkpoint_read_config(r->ckpt_path, &h, &saved_text, err, sizeof err) ||
        config_load_text(&saved, saved_text, err, sizeof err))
      die(2, "%s", err);
    free(saved_text);
    const char *changed = config_recipe_diff(&saved, cfg);
    if (checkpoint_load(r->ckpt_path, &h, &r->m, r->mom1, r->mom2, r->sites,
                        changed ? 0 : r->n_sites, err, sizeof err) ||
        checkpoint_check_position(&h, r->s->steps, r->train.n_windows, r->s->T, err, sizeof err))
      die(2, "%s", err);
    if (changed)
      fprintf(stderr, "train: resuming under another recipe (%s: %s -> %s): the checkpoint's "
              "delayed-scaling states are dropped\n", changed, config_str(&saved, changed),
              config_str(cfg, changed));
    r->start = r->last_saved = (int)h.step;
    if (r->gpu) gpu_model_upload(r->gpu, r->m.params_mem, r->mom1, r->mom2);
    dataset_seek(&r->train, h.data_epoch, h.data_index);
    r->running_min = h.running_min;
    r->tokens_seen = h.tokens_seen;
    r->log_bytes = h.log_bytes;
  } else {
    const char *found = find_run_file(r->run_dir);
    if (found && !o->overwrite)
      die(2, "run directory '%s' already holds a run (%s): continue it with --resume, or start "
          "over with --overwrite", r->run_dir, found);
  }
}

/* Every check has passed: the run directory may change now.  Creates it,
 * clears it (a new run: the old one's files; a resumed one: stale
 * temporaries), writes config.cfg and opens the log (resumed: cut back to
 * the checkpoint's length). */
static void prepare_run_dir(run *r, bool resume) {
  if (mkdir_p(r->run_dir, 0755)) die(2, "cannot create run directory '%s'", r->run_dir);
  if (remove_run_files(r->run_dir, resume))
    die(1, "cannot clear the run directory '%s'", r->run_dir);
  if (write_file_atomic(r->cfg_path, r->config_text))
    die(1, "cannot write '%s': %s", r->cfg_path, strerror(errno));
  r->log = fopen(r->log_path, resume ? "r+" : "w");
  if (!r->log && resume && errno == ENOENT) r->log = fopen(r->log_path, "w"); /* e.g. a shadow run's copy */
  if (!r->log) die(1, "cannot write '%s': %s", r->log_path, strerror(errno));
  if (resume) {
    /* a crash after the checkpoint left the log ahead of it: those steps are redone */
    struct stat st;
    char last = '\n';
    if (fstat(fileno(r->log), &st) == 0 && (uint64_t)st.st_size > r->log_bytes &&
        (r->log_bytes == 0 || (fseeko(r->log, (off_t)r->log_bytes - 1, SEEK_SET) == 0 &&
                               fread(&last, 1, 1, r->log) == 1)) &&
        last == '\n' && ftruncate(fileno(r->log), (off_t)r->log_bytes) != 0)
      die(1, "cannot truncate '%s' to its checkpoint's length", r->log_path);
    if (fseeko(r->log, 0, SEEK_END) != 0) die(1, "cannot write '%s'", r->log_path);
  }
}

/* A write the run cannot do without (log, checkpoint, summary): the run
 * stops with exit 1 and says which checkpoint survives (summary.json says
 * "failed" where it can still be written). */
static void fail_write(const run *r, const char *path) __attribute__((noreturn));
static void fail_write(const run *r, const char *path) {
  const int e = errno;
  if (r->s->progress) fputc('\n', stderr);
  write_summary(r->run_dir, "failed", r->done, r->diverged_at, r->loss, r->running_min,
                r->val_loss, 0, now_s() - r->t_start);
  if (r->last_saved < 0) die(1, "cannot write %s: %s; no checkpoint was saved", path, strerror(e));
  die(1, "cannot write %s: %s; the last checkpoint is of step %d (continue with --resume %s)",
      path, strerror(e), r->last_saved, r->run_dir);
}

/* The log flushed, then ckpt.bin of step `done`. */
static void save_checkpoint(run *r, int done) {
  if (fflush(r->log) != 0 || ferror(r->log)) fail_write(r, r->log_path);
  r->hdr.step = done;
  r->hdr.data_epoch = r->train.epoch;
  r->hdr.data_index = r->train.index;
  r->hdr.running_min = r->running_min;
  r->hdr.tokens_seen = r->tokens_seen;
  r->hdr.log_bytes = (uint64_t)ftello(r->log);
  if (r->gpu) gpu_model_download(r->gpu, r->m.params_mem, r->mom1, r->mom2);
  if (checkpoint_save(r->ckpt_path, &r->hdr, r->config_text, &r->m, r->mom1, r->mom2, r->sites,
                      r->n_sites))
    fail_write(r, r->ckpt_path);
  r->last_saved = done;
}

/* ckpt-STEP.bin: a hard link to the checkpoint just written (a later save
 * renames a new file over ckpt.bin, so the link keeps this one) */
static void keep_checkpoint(run *r, int done) {
  char keep_path[4300];
  snprintf(keep_path, sizeof keep_path, "%s/ckpt-%d.bin", r->run_dir, done);
  unlink(keep_path);
  if (link(r->ckpt_path, keep_path)) fail_write(r, keep_path);
}

/* Step `step` (0-based): forward and backward over the micro-batches, the
 * update, the log line, validation and checkpoints when due.  false when the
 * run stops here (diverged, interrupted). */
static bool train_step(run *r, int step) {
  const settings *s = r->s;
  const int B = s->B, T = s->T, accum = s->accum;
  const double t0 = now_s();
  tq_sr_counter = (uint64_t)step << 36;
  tq_collect_stats = s->stats_every > 0 && (step + 1) % s->stats_every == 0;
  const bool profiled = r->gpu && step + 1 == r->profile_step;
  if (profiled) gpu_model_profile(r->gpu, true);
  if (r->gpu) gpu_model_begin_step(r->gpu, tq_sr_counter, tq_collect_stats);

  /* forward and backward over the micro-batches */
  if (r->gpu) gpu_model_zero_grad(r->gpu);
  else model_zero_grad(&r->m);
  r->loss = 0;
  for (int micro = 0; micro < accum; micro++) {
    dataset_next_batch(&r->train, B, r->in, r->tg);
    r->loss += forward_backward(&r->m, r->gpu, r->in, r->tg, B, T, 1.0f / accum) / accum;
  }

  /* divergence: stop cleanly, with the statistics of this step */
  if (!isfinite(r->loss) ||
      (s->diverge_delta > 0 && r->loss > r->running_min + s->diverge_delta)) {
    if (!tq_collect_stats) { /* the last micro-batch again, now with statistics */
      tq_collect_stats = true;
      tq_sr_counter = ((uint64_t)step << 36) + ((uint64_t)1 << 35);
      if (r->gpu) gpu_model_begin_step(r->gpu, tq_sr_counter, true);
      forward_backward(&r->m, r->gpu, r->in, r->tg, B, T, 1.0f / accum);
    }
    if (r->gpu) gpu_model_fetch_stats(r->gpu);
    fprintf(r->log, "{\"step\":%d,\"event\":\"diverged\",", step + 1);
    const json_field fields[] = {{"loss", r->loss}, {"running_min", r->running_min}};
    json_nums(r->log, fields, sizeof fields / sizeof *fields);
    fprintf(r->log, "}\n");
    log_stats(r->log, step + 1, &r->mc, r->sites, r->n_sites);
    r->diverged_at = step + 1;
    r->status = "diverged";
    return false;
  }
  if (r->loss < r->running_min) r->running_min = r->loss;

  /* update */
  adamw_hparams hp = s->hp;
  hp.lr = lr_schedule(step, s->steps, s->warmup, s->lr, s->min_frac);
  double norm;
  if (r->gpu) {
    norm = gpu_model_update(r->gpu, &hp, step + 1, s->clip);
    if (profiled) gpu_model_profile(r->gpu, false);
  } else {
    recipe_round_grads(&r->rc, &r->m); /* MS-AMP O1: gradients stored in FP8 */
    norm = grad_global_norm(r->m.grads_mem, r->m.num_params);
    grad_clip(r->m.grads_mem, r->m.num_params, norm, s->clip);
    adamw_update(&r->m, r->mom1, r->mom2, &hp, step + 1);
    recipe_store_moments(&r->rc, &r->m.cfg, r->m.param_sizes, r->mom1, r->mom2,
                         r->m.num_params);
  }
  const int done = r->done = step + 1;
  r->tokens_seen += (double)B * T * accum;
  if (r->gpu && step == r->start) r->gpu_mem_gib = gpu_memory_in_use_gib(); /* activations, caches, states */

  /* log */
  const double dt = now_s() - t0;
  r->step_time_avg = step == r->start ? dt : 0.9 * r->step_time_avg + 0.1 * dt;
  r->tok_s = B * T * accum / dt;
  fprintf(r->log, "{\"step\":%d,\"loss\":%.9g,\"lr\":%.6g,\"grad_norm\":%.6g,\"tokens_per_s\":%.1f,\"ms\":%.2f}\n",
          done, r->loss, hp.lr, norm, r->tok_s, dt * 1e3);
  if (tq_collect_stats) {
    if (r->gpu) gpu_model_fetch_stats(r->gpu);
    log_stats(r->log, done, &r->mc, r->sites, r->n_sites);
  }
  if ((s->val_every > 0 && done % s->val_every == 0) || done == s->steps) {
    double last[LOGIT_SHARPNESS_NUM_EPS], all[LOGIT_SHARPNESS_NUM_EPS];
    r->val_loss = validate(&r->m, r->gpu, &r->val, B, T, s->val_batches, r->in, r->tg, r->sites,
                           r->n_sites, last, all);
    json_field fields[1 + 2 * LOGIT_SHARPNESS_NUM_EPS] = {{"val_loss", r->val_loss}};
    for (int k = 0; k < LOGIT_SHARPNESS_NUM_EPS; k++) {
      fields[1 + k] = (json_field){logit_sharpness_last_key(k), last[k]};
      fields[1 + LOGIT_SHARPNESS_NUM_EPS + k] = (json_field){logit_sharpness_all_key(k), all[k]};
    }
    fprintf(r->log, "{\"step\":%d,", done);
    json_nums(r->log, fields, sizeof fields / sizeof *fields);
    fprintf(r->log, "}\n");
  }
  if (fflush(r->log) != 0 || ferror(r->log)) fail_write(r, r->log_path);
  if (s->progress) {
    double eta = r->step_time_avg * (s->steps - done);
    char val_s[32] = "-"; /* "-" until the first validation */
    if (!isnan(r->val_loss)) snprintf(val_s, sizeof val_s, "%.4f", r->val_loss);
    fprintf(stderr, "\rstep %d/%d  loss %.4f  val %s  %.0f tok/s  ETA %dm%02ds   ", done,
            s->steps, r->loss, val_s, r->tok_s, (int)eta / 60, (int)eta % 60);
    if (done == s->steps) fputc('\n', stderr);
  }

  /* checkpoints */
  if (s->interrupt_at > 0 && done == s->interrupt_at) raise(SIGINT);
  if (interrupted) {
    save_checkpoint(r, done);
    r->status = "interrupted";
    if (s->progress) fputc('\n', stderr);
    return false;
  }
  const bool periodic = s->ckpt_every > 0 && done % s->ckpt_every == 0;
  if (periodic || done == r->last) save_checkpoint(r, done);
  if (periodic && s->ckpt_keep) keep_checkpoint(r, done);
  if (s->crash_at > 0 && done == s->crash_at) raise(SIGKILL);
  return true;
}

/* summary.json and the last line on stdout. */
static void finish(run *r) {
  const settings *s = r->s;
  if (!strcmp(r->status, "completed") && r->done < s->steps) r->status = "stopped"; /* stop_at */
  const double wall = now_s() - r->t_start;
  double avg_tok_s =
      wall > 0 ? (r->done - r->start) * (double)s->B * s->T * s->accum / wall : 0;
  if (fflush(r->log) != 0 || ferror(r->log)) fail_write(r, r->log_path);
  if (write_summary(r->run_dir, r->status, r->done, r->diverged_at, r->loss, r->running_min,
                    r->val_loss, avg_tok_s, wall))
    fail_write(r, "summary.json");
  fclose(r->log);
  const int done = r->done;
  if (r->gpu) printf("train: GPU memory in use after the first step: %.2f GiB\n", r->gpu_mem_gib);
  if (r->gpu)
    printf("train: GPU activation arena: %.1f MiB\n",
           (double)gpu_model_arena_bytes(r->gpu) / (1024.0 * 1024.0));
  if (r->gpu) printf("train: CUDA graphs: %s\n", gpu_model_cuda_graph(r->gpu) ? "on" : "off");
  if (r->gpu && r->rc.bf16_activations)
    printf("train: stored in bf16: SwiGLU's tensors %s, the attention output %s\n",
           gpu_model_bf16_storage(r->gpu) & 1 ? "yes" : "no",
           gpu_model_bf16_storage(r->gpu) & 2 ? "yes" : "no");
  if (r->gpu) {
    unsigned long long fast, ineligible, scale_range, not_codes, block_scaled, block_one_call;
    gpu_model_accum_paths(r->gpu, &fast, &ineligible, &scale_range, &not_codes, &block_scaled,
                          &block_one_call);
    if (fast + ineligible + scale_range + not_codes)
      printf("train: GEMMs under the accumulation model: %llu on cuBLASLt's FP8 GEMM, %llu "
             "emulated (%llu not eligible, %llu scales beyond the FP8 path's bounds, %llu values "
             "not FP8 codes)\n", fast, ineligible + scale_range + not_codes, ineligible,
             scale_range, not_codes);
    if (block_scaled)
      printf("train: block-scaled GEMMs on cuBLASLt: %llu, %llu of them in one call of its "
             "block-scaled GEMM, %llu per slice of K\n", block_scaled, block_one_call,
             block_scaled - block_one_call);
    unsigned long long mx_images, nvfp4_images, reference;
    gpu_model_along_k_paths(r->gpu, &mx_images, &nvfp4_images, &reference);
    if (mx_images + nvfp4_images + reference)
      printf("train: GEMMs of operands quantized along K: %llu on MX bf16 images, %llu on NVFP4 "
             "bf16 images, %llu on the reference (exmy_cuda_qgemm)\n", mx_images, nvfp4_images,
             reference);
  }
  if (r->diverged_at) printf("train: diverged at step %d (loss %g, running min %g)\n", r->diverged_at, r->loss, r->running_min);
  else if (!strcmp(r->status, "interrupted"))
    printf("train: interrupted after step %d; checkpoint written, continue with --resume %s\n", done, r->run_dir);
  else if (!strcmp(r->status, "stopped"))
    printf("train: stopped after step %d (stop_at), loss %.4f; continue with --resume %s --set stop_at=0\n", done, r->loss, r->run_dir);
  else printf("train: completed %d steps, loss %.4f, val loss %.4f, %.0f tokens/s\n", done, r->loss, r->val_loss, avg_tok_s);
}

static void free_run(run *r) {
  gpu_model_free(r->gpu);
  recipe_free_sites(r->sites, r->n_sites);
  model_free(&r->m);
  free(r->mom1);
  free(r->mom2);
  free(r->in);
  free(r->tg);
  free(r->config_text);
  dataset_free(&r->train);
  dataset_free(&r->val);
}

int main(int argc, char **argv) {
  /* OpenMP threads that spin after each parallel region starve OpenBLAS's
   * threads on a small machine (steps 5-10x slower on 2 cores): unless the
   * user chose a policy, restart once with passive waiting (libgomp reads the
   * variable only at load time). */
  if (!getenv("OMP_WAIT_POLICY")) {
    setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
    if (access("/proc/self/exe", X_OK) == 0) execv("/proc/self/exe", argv);
    /* no /proc, or exec refused: the default policy costs speed, not results */
  }
  /* past RLIMIT_FSIZE a write fails (EFBIG), as on a full disk, instead of killing us */
  signal(SIGXFSZ, SIG_IGN);
  options opt;
  if (!parse_args(argc, argv, &opt)) return 0;
  static config cfg;
  config_defaults(&cfg);
  load_config(&opt, &cfg);
  settings s;
  static run r; /* large (paths), and zeroed */
  r.s = &s;
  read_settings(&cfg, &r.mc, &s);
  if (s.threads > 0) omp_set_num_threads(s.threads);
  open_data(&r, &cfg);
  build_model(&r);
  name_run_dir(&r, &cfg);
  r.last_saved = -1;
  r.running_min = INFINITY;
  resume_or_check(&r, &cfg, &opt);
  prepare_run_dir(&r, opt.resume);
  signal(SIGINT, on_sigint);
  signal(SIGTERM, on_sigint);

  const model_config *mc = &r.mc;
  printf("train: %s, %zu parameters (L=%d C=%d NH=%d NKV=%d H=%d T=%d V=%d), recipe %s, %s\n"
         "train: run directory %s%s\n",
         config_str(&cfg, "size"), r.m.num_params, mc->n_layers, mc->dim, mc->n_heads,
         mc->n_kv_heads, mc->hidden, s.T, mc->vocab, config_str(&cfg, "recipe"),
         s.on_gpu ? "GPU" : "CPU", r.run_dir, opt.resume ? " (resumed)" : "");
  fflush(stdout);

  r.t_start = now_s();
  r.loss = r.val_loss = r.gpu_mem_gib = NAN;
  r.status = "completed";
  r.done = r.start;
  r.hdr = (ckpt_header){.model_cfg = {mc->vocab, mc->dim, mc->n_layers, mc->n_heads,
                                      mc->n_kv_heads, mc->hidden, mc->seq_len}};
  if (s.ckpt_keep && r.start == 0) { /* the initial model, step 0 */
    save_checkpoint(&r, 0);
    keep_checkpoint(&r, 0);
  }
  r.last = s.stop_at > 0 && s.stop_at < s.steps ? s.stop_at : s.steps;
  for (int step = r.start; step < r.last && train_step(&r, step); step++) {
  }
  finish(&r);
  free_run(&r);
  return 0;
}
