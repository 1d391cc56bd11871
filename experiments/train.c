/*
 * train: a LLaMA language model trained with emulated low-precision GEMMs.
 *
 *   bazel run //experiments:train -- --config experiments/configs/<recipe>.cfg [--set key=value]...
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

#include "experiments/checkpoint.h"
#include "experiments/config.h"
#include "experiments/data.h"
#include "experiments/gpu/model_gpu.h"
#include "experiments/model.h"
#include "experiments/optim.h"
#include "experiments/qgemm.h"
#include "experiments/recipe.h"

static void die(int code, const char *fmt, ...) __attribute__((noreturn, format(printf, 2, 3)));
static void die(int code, const char *fmt, ...) {
  fflush(stdout);
  char msg[1024]; /* one line, whatever the paths and values quoted in it hold */
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  for (char *p = msg; *p; p++)
    if ((unsigned char)*p < 0x20 || *p == 0x7f) *p = '?';
  fprintf(stderr, "train: %s\n", msg);
  exit(code);
}

/* Relative paths are relative to the workspace under `bazel run`. */
static const char *in_workspace(const char *path, char *buf, size_t len) {
  const char *ws = getenv("BUILD_WORKSPACE_DIRECTORY");
  if (!path[0] || path[0] == '/' || !ws) return path;
  snprintf(buf, len, "%s/%s", ws, path);
  return buf;
}

static int mkdir_p(const char *path) {
  char buf[4096];
  snprintf(buf, sizeof buf, "%s", path);
  for (char *p = buf + 1; *p; p++)
    if (*p == '/') {
      *p = 0;
      if (mkdir(buf, 0755) && errno != EEXIST) return -1;
      *p = '/';
    }
  return mkdir(buf, 0755) && errno != EEXIST ? -1 : 0;
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

static void json_num(FILE *f, const char *key, double v) {
  if (isfinite(v)) fprintf(f, "\"%s\":%.9g", key, v);
  else fprintf(f, "\"%s\":null", key);
}

/* "key":value pairs separated by commas (json_num each). */
typedef struct {
  const char *key;
  double value;
} json_field;
static void json_nums(FILE *f, const json_field *fields, size_t n) {
  for (size_t i = 0; i < n; i++) {
    if (i) fputc(',', f);
    json_num(f, fields[i].key, fields[i].value);
  }
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

static double validate(model *m, gpu_model *gpu, dataset *val, int B, int T, int batches,
                       int *in, int *tg, tq_site *sites, int n_sites) {
  if (gpu) gpu_model_states_download(gpu); /* the host sites now hold the training states */
  state_snapshot snap = snapshot_states(sites, n_sites);
  uint64_t sr = tq_sr_counter;
  bool stats = tq_collect_stats;
  tq_collect_stats = false;
  tq_sr_counter = (uint64_t)1 << 62;
  if (gpu) gpu_model_begin_step(gpu, tq_sr_counter, false);
  dataset_seek(val, 0, 0);
  double sum = 0;
  for (int i = 0; i < batches; i++) {
    dataset_next_batch(val, B, in, tg);
    if (gpu) {
      sum += gpu_model_forward(gpu, in, tg);
    } else {
      model_forward(m, in, tg, B, T);
      sum += m->loss;
    }
  }
  restore_states(sites, n_sites, &snap);
  if (gpu) gpu_model_states_upload(gpu);
  tq_sr_counter = sr;
  tq_collect_stats = stats;
  return sum / batches;
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
  int ok = fflush(f) == 0 && !ferror(f), saved = errno;
  if (fclose(f) != 0 && ok) ok = 0, saved = errno;
  if (ok && rename(tmp, path) != 0) ok = 0, saved = errno;
  if (!ok) {
    unlink(tmp);
    errno = saved;
    return -1;
  }
  return 0;
}

/* Writes text to path through a temporary file and a rename.  0, or -1 with errno set. */
static int write_file_atomic(const char *path, const char *text) {
  char tmp[4300];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE *f = fopen(tmp, "w");
  if (!f) return -1;
  int ok = fputs(text, f) >= 0 && fflush(f) == 0 && fsync(fileno(f)) == 0, saved = errno;
  if (fclose(f) != 0 && ok) ok = 0, saved = errno;
  if (ok && rename(tmp, path) != 0) ok = 0, saved = errno;
  if (!ok) {
    unlink(tmp);
    errno = saved;
    return -1;
  }
  return 0;
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
          "  recipes: experiments/configs/*.cfg; keys and defaults: experiments/config.c\n"
          "  a new run refuses a run directory that holds a run, unless --overwrite\n"
          "  Unless OMP_WAIT_POLICY is set, train restarts itself once with\n"
          "  OMP_WAIT_POLICY=PASSIVE (OpenMP threads that spin starve OpenBLAS's threads);\n"
          "  without /proc it goes on without the restart.\n");
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
  char err[512] = "", pbuf[4400], pbuf2[4096];
  config cfg;
  config_defaults(&cfg);
  const char *config_path = NULL, *resume_dir = NULL, *recipe_path = NULL;
  int resume = 0, overwrite = 0;
  const char *sets[256];
  int n_sets = 0;
  for (int i = 1; i < argc; i++) {
    const bool has_value = i + 1 < argc;
    if (!strcmp(argv[i], "--config") && has_value) config_path = argv[++i];
    else if (!strcmp(argv[i], "--recipe") && has_value) recipe_path = argv[++i];
    else if (!strcmp(argv[i], "--set") && has_value) {
      if (n_sets == 256) die(2, "%s", "more than 256 --set");
      sets[n_sets++] = argv[++i];
    } else if (!strcmp(argv[i], "--resume")) {
      resume = 1;
      if (i + 1 < argc && strncmp(argv[i + 1], "--", 2)) resume_dir = argv[++i];
    } else if (!strcmp(argv[i], "--overwrite")) {
      overwrite = 1;
    } else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      usage();
      return 0;
    } else if (!strcmp(argv[i], "--config") || !strcmp(argv[i], "--recipe") ||
               !strcmp(argv[i], "--set")) {
      die(2, "%s needs a value (see train --help)", argv[i]);
    } else {
      die(2, "unknown argument '%s' (see train --help)", argv[i]);
    }
  }
  if (resume && overwrite) die(2, "%s", "--overwrite starts a new run; it cannot resume one");
  if (resume_dir && !config_path) {
    snprintf(pbuf2, sizeof pbuf2, "%s/config.cfg", resume_dir);
    if (config_load_file(&cfg, in_workspace(pbuf2, pbuf, sizeof pbuf), err, sizeof err))
      die(2, "%s", err);
  }
  if (config_path && config_load_file(&cfg, in_workspace(config_path, pbuf, sizeof pbuf), err,
                                      sizeof err))
    die(2, "%s", err);
  if (recipe_path) {
    config_reset_recipe(&cfg);
    if (config_load_file(&cfg, in_workspace(recipe_path, pbuf, sizeof pbuf), err, sizeof err))
      die(2, "%s", err);
  }
  for (int i = 0; i < n_sets; i++)
    if (config_set_assignment(&cfg, sets[i], err, sizeof err)) die(2, "%s", err);
  if (resume_dir && config_set(&cfg, "run_dir", resume_dir, err, sizeof err)) die(2, "%s", err);

  /* ---- the model's shape ---- */
  model_config mc;
  if (model_named_size(config_str(&cfg, "size"), &mc))
    die(2, "unknown size '%s' (test, tiny, small, 120m, 120m-32k)", config_str(&cfg, "size"));
  static const char *const shape_keys[7] = {"vocab",      "dim",    "n_layers", "n_heads",
                                            "n_kv_heads", "hidden", "seq_len"};
  int *shape[7] = {&mc.vocab, &mc.dim, &mc.n_layers, &mc.n_heads, &mc.n_kv_heads, &mc.hidden,
                   &mc.seq_len};
  for (int i = 0; i < 7; i++) {
    long v = config_int(&cfg, shape_keys[i], err, sizeof err);
    if (v > 0) *shape[i] = (int)v;
  }
  const char *bad = model_config_check(&mc);
  if (bad) die(2, "%s", bad);

  /* ---- training settings ---- */
  const int B = (int)config_int(&cfg, "batch_size", err, sizeof err);
  const int accum = (int)config_int(&cfg, "grad_accum", err, sizeof err);
  const int steps = (int)config_int(&cfg, "steps", err, sizeof err);
  const int warmup = (int)config_int(&cfg, "warmup", err, sizeof err);
  const float lr = (float)config_double(&cfg, "lr", err, sizeof err);
  const float min_frac = (float)config_double(&cfg, "min_lr_frac", err, sizeof err);
  adamw_hparams hp = {lr, (float)config_double(&cfg, "beta1", err, sizeof err),
                      (float)config_double(&cfg, "beta2", err, sizeof err),
                      (float)config_double(&cfg, "adam_eps", err, sizeof err),
                      (float)config_double(&cfg, "weight_decay", err, sizeof err)};
  const double clip = config_double(&cfg, "grad_clip", err, sizeof err);
  const uint64_t seed = (uint64_t)config_int(&cfg, "seed", err, sizeof err);
  const int val_every = (int)config_int(&cfg, "val_every", err, sizeof err);
  const int val_batches = (int)config_int(&cfg, "val_batches", err, sizeof err);
  const int ckpt_every = (int)config_int(&cfg, "ckpt_every", err, sizeof err);
  const int stats_every = (int)config_int(&cfg, "stats_every", err, sizeof err);
  const double diverge_delta = config_double(&cfg, "diverge_delta", err, sizeof err);
  const int threads = (int)config_int(&cfg, "threads", err, sizeof err);
  const int progress = (int)config_int(&cfg, "progress", err, sizeof err);
  const int interrupt_at = (int)config_int(&cfg, "interrupt_at", err, sizeof err);
  const int ckpt_keep = (int)config_int(&cfg, "ckpt_keep", err, sizeof err);
  const int stop_at = (int)config_int(&cfg, "stop_at", err, sizeof err);
  const int crash_at = (int)config_int(&cfg, "crash_at", err, sizeof err);
  if (*err) die(2, "%s", err);
  const char *device = config_str(&cfg, "device"), *attn = config_str(&cfg, "attention_kernel");
  const bool on_gpu = !strcmp(device, "gpu");
  if (!on_gpu && strcmp(device, "cpu")) die(2, "device must be cpu or gpu, not '%s'", device);
  if (strcmp(attn, "materialized") && strcmp(attn, "flash"))
    die(2, "attention_kernel must be materialized or flash, not '%s'", attn);
  if (B < 1 || accum < 1 || steps < 1 || val_batches < 1)
    die(2, "%s", "batch_size, grad_accum, steps and val_batches must be >= 1");
  const int T = mc.seq_len;
  {
    /* the model indexes a micro-batch's rows (tokens x width, heads x T x T) with int */
    long long widest = mc.dim;
    if (mc.hidden > widest) widest = mc.hidden;
    if (mc.vocab > widest) widest = mc.vocab;
    if ((long long)mc.n_heads * T > widest) widest = (long long)mc.n_heads * T;
    if ((long long)B * T * widest > INT_MAX)
      die(2, "%s", "batch_size x seq_len x max(dim, hidden, vocab, n_heads x seq_len) must be "
                   "below 2^31");
  }
  if (threads > 0) omp_set_num_threads(threads);

  recipe rc;
  if (recipe_from_config(&rc, &cfg, seed, err, sizeof err)) die(2, "%s", err);

  /* ---- data ---- */
  dataset train, val;
  if (dataset_load(&train, in_workspace(config_str(&cfg, "data"), pbuf, sizeof pbuf), mc.vocab,
                   err, sizeof err))
    die(2, "%s", err);
  if (*config_str(&cfg, "val_data")) {
    if (dataset_load(&val, in_workspace(config_str(&cfg, "val_data"), pbuf, sizeof pbuf),
                     mc.vocab, err, sizeof err))
      die(2, "%s", err);
  } else {
    dataset_split_tail(&train, &val, 0.05);
  }
  if (dataset_start(&train, T, seed, 1, err, sizeof err) ||
      dataset_start(&val, T, seed, 0, err, sizeof err))
    die(2, "%s", err);

  /* ---- model, optimizer state, recipe sites ---- */
  model m;
  if (model_init(&m, &mc, seed))
    die(1, "out of memory for a model of %zu parameters",
        model_param_sizes(&mc, (size_t[NUM_PARAM_TENSORS]){0}));
  const int n_sites = model_num_sites(&mc);
  tq_site *sites = recipe_make_sites(&rc, &mc);
  m.sites = sites;
  float *mom1 = calloc(m.num_params, sizeof(float)), *mom2 = calloc(m.num_params, sizeof(float));
  int *in = malloc(sizeof(int) * B * T), *tg = malloc(sizeof(int) * B * T);
  if (!sites || !mom1 || !mom2 || !in || !tg) die(1, "%s", "out of memory");
  gpu_model *gpu = NULL;
  if (on_gpu) {
    gpu = gpu_model_new(&m, &rc, sites, n_sites, B, T,
                        strcmp(attn, "flash") ? GPU_ATTENTION_MATERIALIZED : GPU_ATTENTION_FLASH,
                        err, sizeof err);
    if (!gpu) die(2, "%s", err);
  } else if (model_reserve(&m, B, T)) {
    die(1, "%s", "out of memory for the activations of a micro-batch");
  }

  /* ---- the run directory: nothing in it changes until every check has passed ---- */
  char run_dir[4096];
  if (*config_str(&cfg, "run_dir")) {
    snprintf(run_dir, sizeof run_dir, "%s", in_workspace(config_str(&cfg, "run_dir"), pbuf, sizeof pbuf));
  } else {
    snprintf(pbuf2, sizeof pbuf2, "experiments/runs/%s-%s-s%llu", config_str(&cfg, "recipe"),
             config_str(&cfg, "size"), (unsigned long long)seed);
    snprintf(run_dir, sizeof run_dir, "%s", in_workspace(pbuf2, pbuf, sizeof pbuf));
    if (config_set(&cfg, "run_dir", pbuf2, err, sizeof err)) die(2, "%s", err);
  }
  char *config_text = NULL;
  size_t config_len = 0;
  {
    FILE *f = open_memstream(&config_text, &config_len);
    if (!f) die(1, "%s", "out of memory");
    config_write(&cfg, f);
    if (fclose(f)) die(1, "%s", "out of memory");
  }

  int start = 0, last_saved = -1; /* the step of the newest checkpoint on disk */
  double running_min = INFINITY, tokens_seen = 0;
  uint64_t log_bytes = 0;
  char ckpt_path[4200], log_path[4200], cfg_path[4200];
  snprintf(ckpt_path, sizeof ckpt_path, "%s/ckpt.bin", run_dir);
  snprintf(log_path, sizeof log_path, "%s/log.jsonl", run_dir);
  snprintf(cfg_path, sizeof cfg_path, "%s/config.cfg", run_dir);
  if (resume) {
    /* Under another recipe the checkpoint's delayed-scaling states belong to
     * other operands: they are not read, the new recipe's start fresh. */
    ckpt_header h;
    char *saved_text = NULL;
    config saved;
    config_defaults(&saved);
    if (checkpoint_read_config(ckpt_path, &h, &saved_text, err, sizeof err) ||
        config_load_text(&saved, saved_text, err, sizeof err))
      die(2, "%s", err);
    free(saved_text);
    const char *changed = config_recipe_diff(&saved, &cfg);
    if (checkpoint_load(ckpt_path, &h, &m, mom1, mom2, sites, changed ? 0 : n_sites, err,
                        sizeof err) ||
        checkpoint_check_position(&h, steps, train.n_windows, T, err, sizeof err))
      die(2, "%s", err);
    if (changed)
      fprintf(stderr, "train: resuming under another recipe (%s: %s -> %s): the checkpoint's "
              "delayed-scaling states are dropped\n", changed, config_str(&saved, changed),
              config_str(&cfg, changed));
    start = last_saved = (int)h.step;
    if (gpu) gpu_model_upload(gpu, m.params_mem, mom1, mom2);
    dataset_seek(&train, h.data_epoch, h.data_index);
    running_min = h.running_min;
    tokens_seen = h.tokens_seen;
    log_bytes = h.log_bytes;
  } else {
    const char *found = find_run_file(run_dir);
    if (found && !overwrite)
      die(2, "run directory '%s' already holds a run (%s): continue it with --resume, or start "
          "over with --overwrite", run_dir, found);
  }
  /* every check has passed: the run directory may change now */
  if (mkdir_p(run_dir)) die(2, "cannot create run directory '%s'", run_dir);
  if (remove_run_files(run_dir, resume)) /* a new run: the old one's files; a resumed one: stale temporaries */
    die(1, "cannot clear the run directory '%s'", run_dir);
  if (write_file_atomic(cfg_path, config_text))
    die(1, "cannot write '%s': %s", cfg_path, strerror(errno));
  FILE *log = fopen(log_path, resume ? "r+" : "w");
  if (!log && resume && errno == ENOENT) log = fopen(log_path, "w"); /* e.g. a shadow run's copy */
  if (!log) die(1, "cannot write '%s': %s", log_path, strerror(errno));
  if (resume) {
    /* a crash after the checkpoint left the log ahead of it: those steps are redone */
    struct stat st;
    char last = '\n';
    if (fstat(fileno(log), &st) == 0 && (uint64_t)st.st_size > log_bytes &&
        (log_bytes == 0 || (fseeko(log, (off_t)log_bytes - 1, SEEK_SET) == 0 &&
                            fread(&last, 1, 1, log) == 1)) &&
        last == '\n' && ftruncate(fileno(log), (off_t)log_bytes) != 0)
      die(1, "cannot truncate '%s' to its checkpoint's length", log_path);
    if (fseeko(log, 0, SEEK_END) != 0) die(1, "cannot write '%s'", log_path);
  }
  signal(SIGINT, on_sigint);
  signal(SIGTERM, on_sigint);

  printf("train: %s, %zu parameters (L=%d C=%d NH=%d NKV=%d H=%d T=%d V=%d), recipe %s, %s\n"
         "train: run directory %s%s\n",
         config_str(&cfg, "size"), m.num_params, mc.n_layers, mc.dim, mc.n_heads, mc.n_kv_heads,
         mc.hidden, T, mc.vocab, config_str(&cfg, "recipe"), on_gpu ? "GPU" : "CPU", run_dir,
         resume ? " (resumed)" : "");
  fflush(stdout);

  const double t_start = now_s();
  double loss = NAN, val_loss = NAN, step_time_avg = 0, tok_s = 0;
  const char *status = "completed";
  int diverged_at = 0, done = start;
  double gpu_mem_gib = NAN;

  /* A write the run cannot do without (log, checkpoint, summary): the run
   * stops with exit 1 and says which checkpoint survives (summary.json says
   * "failed" where it can still be written). */
#define FAIL_WRITE(path)                                                                    \
  do {                                                                                      \
    const int e_ = errno;                                                                   \
    if (progress) fputc('\n', stderr);                                                      \
    write_summary(run_dir, "failed", done, diverged_at, loss, running_min, val_loss, 0,     \
                  now_s() - t_start);                                                       \
    if (last_saved < 0) die(1, "cannot write %s: %s; no checkpoint was saved", (path),      \
                            strerror(e_));                                                  \
    die(1, "cannot write %s: %s; the last checkpoint is of step %d (continue with --resume %s)", \
        (path), strerror(e_), last_saved, run_dir);                                         \
  } while (0)
  ckpt_header hdr = {.model_cfg = {mc.vocab, mc.dim, mc.n_layers, mc.n_heads, mc.n_kv_heads,
                                   mc.hidden, mc.seq_len}};
#define SAVE_CHECKPOINT(done)                                                               \
  do {                                                                                      \
    if (fflush(log) != 0 || ferror(log)) FAIL_WRITE(log_path);                              \
    hdr.step = (done);                                                                      \
    hdr.data_epoch = train.epoch;                                                           \
    hdr.data_index = train.index;                                                           \
    hdr.running_min = running_min;                                                          \
    hdr.tokens_seen = tokens_seen;                                                          \
    hdr.log_bytes = (uint64_t)ftello(log);                                                  \
    if (gpu) gpu_model_download(gpu, m.params_mem, mom1, mom2);                             \
    if (checkpoint_save(ckpt_path, &hdr, config_text, &m, mom1, mom2, sites, n_sites))      \
      FAIL_WRITE(ckpt_path);                                                                \
    last_saved = (done);                                                                    \
  } while (0)
  /* ckpt-STEP.bin: a hard link to the checkpoint just written (a later save
   * renames a new file over ckpt.bin, so the link keeps this one) */
#define KEEP_CHECKPOINT(done)                                                               \
  do {                                                                                      \
    char keep_path[4300];                                                                   \
    snprintf(keep_path, sizeof keep_path, "%s/ckpt-%d.bin", run_dir, (done));              \
    unlink(keep_path);                                                                      \
    if (link(ckpt_path, keep_path)) FAIL_WRITE(keep_path);                                  \
  } while (0)

  if (ckpt_keep && start == 0) { /* the initial model, step 0 */
    SAVE_CHECKPOINT(0);
    KEEP_CHECKPOINT(0);
  }
  const int last = stop_at > 0 && stop_at < steps ? stop_at : steps;
  for (int step = start; step < last; step++) {
    const double t0 = now_s();
    tq_sr_counter = (uint64_t)step << 36;
    tq_collect_stats = stats_every > 0 && (step + 1) % stats_every == 0;
    if (gpu) gpu_model_begin_step(gpu, tq_sr_counter, tq_collect_stats);

    /* forward and backward over the micro-batches */
    if (gpu) gpu_model_zero_grad(gpu);
    else model_zero_grad(&m);
    loss = 0;
    for (int micro = 0; micro < accum; micro++) {
      dataset_next_batch(&train, B, in, tg);
      loss += forward_backward(&m, gpu, in, tg, B, T, 1.0f / accum) / accum;
    }

    /* divergence: stop cleanly, with the statistics of this step */
    if (!isfinite(loss) || (diverge_delta > 0 && loss > running_min + diverge_delta)) {
      if (!tq_collect_stats) { /* the last micro-batch again, now with statistics */
        tq_collect_stats = true;
        tq_sr_counter = ((uint64_t)step << 36) + ((uint64_t)1 << 35);
        if (gpu) gpu_model_begin_step(gpu, tq_sr_counter, true);
        forward_backward(&m, gpu, in, tg, B, T, 1.0f / accum);
      }
      if (gpu) gpu_model_fetch_stats(gpu);
      fprintf(log, "{\"step\":%d,\"event\":\"diverged\",", step + 1);
      const json_field fields[] = {{"loss", loss}, {"running_min", running_min}};
      json_nums(log, fields, sizeof fields / sizeof *fields);
      fprintf(log, "}\n");
      log_stats(log, step + 1, &mc, sites, n_sites);
      diverged_at = step + 1;
      status = "diverged";
      break;
    }
    if (loss < running_min) running_min = loss;

    /* update */
    hp.lr = lr_schedule(step, steps, warmup, lr, min_frac);
    double norm;
    if (gpu) {
      norm = gpu_model_update(gpu, &hp, step + 1, clip);
    } else {
      recipe_round_grads(&rc, &m); /* MS-AMP O1: gradients stored in FP8 */
      norm = grad_global_norm(m.grads_mem, m.num_params);
      grad_clip(m.grads_mem, m.num_params, norm, clip);
      adamw_update(&m, mom1, mom2, &hp, step + 1);
      recipe_store_moments(&rc, mom1, mom2, m.num_params);
    }
    done = step + 1;
    tokens_seen += (double)B * T * accum;
    if (gpu && step == start) gpu_mem_gib = gpu_memory_in_use_gib(); /* activations, caches, states */

    /* log */
    const double dt = now_s() - t0;
    step_time_avg = step == start ? dt : 0.9 * step_time_avg + 0.1 * dt;
    tok_s = B * T * accum / dt;
    fprintf(log, "{\"step\":%d,\"loss\":%.9g,\"lr\":%.6g,\"grad_norm\":%.6g,\"tokens_per_s\":%.1f,\"ms\":%.2f}\n",
            done, loss, hp.lr, norm, tok_s, dt * 1e3);
    if (tq_collect_stats) {
      if (gpu) gpu_model_fetch_stats(gpu);
      log_stats(log, done, &mc, sites, n_sites);
    }
    if ((val_every > 0 && done % val_every == 0) || done == steps) {
      val_loss = validate(&m, gpu, &val, B, T, val_batches, in, tg, sites, n_sites);
      fprintf(log, "{\"step\":%d,\"val_loss\":%.9g}\n", done, val_loss);
    }
    if (fflush(log) != 0 || ferror(log)) FAIL_WRITE(log_path);
    if (progress) {
      double eta = step_time_avg * (steps - done);
      char val_s[32] = "-"; /* "-" until the first validation */
      if (!isnan(val_loss)) snprintf(val_s, sizeof val_s, "%.4f", val_loss);
      fprintf(stderr, "\rstep %d/%d  loss %.4f  val %s  %.0f tok/s  ETA %dm%02ds   ", done, steps,
              loss, val_s, tok_s, (int)eta / 60, (int)eta % 60);
      if (done == steps) fputc('\n', stderr);
    }
    if (interrupt_at > 0 && done == interrupt_at) raise(SIGINT);
    if (interrupted) {
      SAVE_CHECKPOINT(done);
      status = "interrupted";
      if (progress) fputc('\n', stderr);
      break;
    }
    const bool periodic = ckpt_every > 0 && done % ckpt_every == 0;
    if (periodic || done == last) SAVE_CHECKPOINT(done);
    if (periodic && ckpt_keep) KEEP_CHECKPOINT(done);
    if (crash_at > 0 && done == crash_at) raise(SIGKILL);
  }
  if (!strcmp(status, "completed") && done < steps) status = "stopped"; /* stop_at */
  const double wall = now_s() - t_start;
  double avg_tok_s = wall > 0 ? (done - start) * (double)B * T * accum / wall : 0;
  if (fflush(log) != 0 || ferror(log)) FAIL_WRITE(log_path);
  if (write_summary(run_dir, status, done, diverged_at, loss, running_min, val_loss, avg_tok_s,
                    wall))
    FAIL_WRITE("summary.json");
  fclose(log);
  if (gpu) printf("train: GPU memory in use after the first step: %.2f GiB\n", gpu_mem_gib);
  if (diverged_at) printf("train: diverged at step %d (loss %g, running min %g)\n", diverged_at, loss, running_min);
  else if (!strcmp(status, "interrupted"))
    printf("train: interrupted after step %d; checkpoint written, continue with --resume %s\n", done, run_dir);
  else if (!strcmp(status, "stopped"))
    printf("train: stopped after step %d (stop_at), loss %.4f; continue with --resume %s --set stop_at=0\n", done, loss, run_dir);
  else printf("train: completed %d steps, loss %.4f, val loss %.4f, %.0f tokens/s\n", done, loss, val_loss, avg_tok_s);

  gpu_model_free(gpu);
  recipe_free_sites(sites, n_sites);
  model_free(&m);
  free(mom1);
  free(mom2);
  free(in);
  free(tg);
  free(config_text);
  dataset_free(&train);
  dataset_free(&val);
  return 0;
}
