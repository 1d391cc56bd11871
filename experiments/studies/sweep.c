/*
 * sweep: run a study's grid with the trainer, then aggregate CSVs and draw plots.
 *
 *   bazel run //experiments/studies:sweep -- experiments/studies/sweeps/<study>.cfg [--quick] [--jobs N] [--publish]
 *       [--gpus 0,1,... [--per-gpu K]] [--backend slurm [--partition P] [--time T] [--gpus-per-task N] [--sbatch-arg A]...]
 *
 * The grid is recipes x variants x lrs x seeds x every `vary` axis (format:
 * experiments/studies/sweeps/README.md; read with the trainer's config syntax, every
 * trainer key checked against the trainer's key table). Everything a sweep
 * writes goes to the git-ignored experiments/runs/sweeps/<study>[-quick]/: a
 * folder per point, the CSVs (collect.h), the plots (sweep_plot.sh, gnuplot).
 * --publish then refreshes the published copy in experiments/results/<study>[-quick]/
 * (the CSVs and plots the repository keeps), and only when every point finished.
 * A point whose run finished (completed or diverged) with the same arguments is
 * skipped, an interrupted one is resumed from its checkpoint: an interrupted sweep
 * continues where it stopped. A diverged run is a result, not an error. A run that
 * exits non-zero (the trainer cannot start, crashes, is killed, rejects its config)
 * is a failed point: reported with the end of its stderr, left out of the plots.
 * Then the evaluations of kept checkpoints the config asks for (sharpness, shadow
 * check) run on every finished point; they too are not repeated.
 * --jobs N runs N points at once, each with nproc/N OpenMP threads. Ctrl-C (or
 * SIGTERM): no new point starts, the running ones are interrupted (they save a
 * checkpoint) and accounted, the CSVs are written.
 * Exit status: 0 every point finished; 1 a point failed or is unfinished, or an
 * evaluation failed; 2 bad input (one line on stderr, nothing created; a run that
 * rejected its config stops the sweep and counts too). SWEEP_TRAIN /
 * SWEEP_SHARPNESS name the binaries, else they are the runfiles of this one.
 *
 * Runs and evaluations start through a launcher (launcher.h): each run gets a
 * slot 0..N-1; --gpus maps a slot to a GPU (gpus.h: CUDA_VISIBLE_DEVICES in
 * the run's environment).  --backend slurm starts the runs through
 * launcher_slurm instead, as one job array with a slot per point (Slurm keeps
 * --jobs of them running), and each poll in which a run ended rewrites the
 * CSVs and plots; the evaluations and the plots run here with launcher_local.
 */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "experiments/trainer/config.h"
#include "experiments/trainer/mkdir_p.h"
#include "experiments/studies/collect.h"
#include "experiments/studies/gpus.h"
#include "experiments/studies/launcher.h"
#include "experiments/studies/runfiles.h"
#include "experiments/studies/study.h"

#define PATH_LEN 8192

static void die(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char msg[4096];
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  for (char *p = msg; *p; p++)
    if ((unsigned char)*p < 0x20) *p = '?'; /* one line whatever it quotes */
  fflush(stdout);
  fprintf(stderr, "sweep: %s\n", msg);
  exit(2);
}

static char ws[PATH_LEN]; /* the workspace: paths are printed relative to it */

/* path without the workspace's prefix */
static const char *rel(const char *path) {
  const size_t n = strlen(ws);
  return !strncmp(path, ws, n) && path[n] == '/' ? path + n + 1 : path;
}

static char *fmt(const char *f, ...) {
  va_list ap;
  va_start(ap, f);
  char *s;
  if (vasprintf(&s, f, ap) < 0) {
    fprintf(stderr, "sweep: out of memory\n");
    exit(1);
  }
  va_end(ap);
  return s;
}

static bool is_file(const char *p) {
  struct stat st;
  return !stat(p, &st) && S_ISREG(st.st_mode);
}

static bool exists(const char *p) { return access(p, F_OK) == 0; }

/* The text of a file without its trailing newlines ("" when unreadable). */
static char *text_of(const char *path) {
  char *t = read_text(path);
  if (!t) return strdup("");
  size_t n = strlen(t);
  while (n && t[n - 1] == '\n') t[--n] = 0;
  return t;
}

static int write_text(const char *path, const char *text, const char *mode) {
  FILE *f = fopen(path, mode);
  if (!f) return -1;
  fputs(text, f);
  return ferror(f) | fclose(f) ? -1 : 0;
}

/* rm -rf */
static int remove_tree(const char *path) {
  struct stat st;
  if (lstat(path, &st)) return errno == ENOENT ? 0 : -1;
  if (S_ISDIR(st.st_mode)) {
    DIR *d = opendir(path);
    if (!d) return -1;
    struct dirent *e;
    int rc = 0;
    while ((e = readdir(d)))
      if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
        char *p = fmt("%s/%s", path, e->d_name);
        rc |= remove_tree(p);
        free(p);
      }
    closedir(d);
    return rc | rmdir(path);
  }
  return unlink(path);
}

/* The processors this process may use, as nproc counts them. */
static int nproc(void) {
  cpu_set_t set;
  int n = sched_getaffinity(0, sizeof set, &set) ? (int)sysconf(_SC_NPROCESSORS_ONLN)
                                                  : CPU_COUNT(&set);
  const char *omp = getenv("OMP_NUM_THREADS"), *limit = getenv("OMP_THREAD_LIMIT");
  if (omp && atoi(omp) > 0) n = atoi(omp);
  if (limit && atoi(limit) > 0 && atoi(limit) < n) n = atoi(limit);
  return n > 0 ? n : 1;
}

/* ---- outcomes ------------------------------------------------------------ */

/* Why a program that exited with status rc gave no result. */
static char *exit_reason(int rc) {
  if (rc == 2) return fmt("bad input (exit 2)");
  if (rc == 126) return fmt("could not be started (exit 126: not executable)");
  if (rc == 127) return fmt("could not be started (exit 127: a program or shared library not found)");
  if (rc > 128 && rc <= 128 + 64) {
    const char *abbrev = sigabbrev_np(rc - 128);
    return abbrev ? fmt("killed by SIG%s (exit %d)", abbrev, rc) : fmt("killed by signal %d (exit %d)", rc - 128, rc);
  }
  return fmt("exit %d", rc);
}

/* The status in a run's summary.json ("" when none). */
static char *run_status(const char *dir) {
  char *path = fmt("%s/summary.json", dir), *text = read_text(path);
  free(path);
  const char *key = "\"status\":\"", *s = text ? strstr(text, key) : NULL;
  char out[32] = "";
  if (s) {
    s += strlen(key);
    size_t n = 0;
    while (n + 1 < sizeof out && islower((unsigned char)s[n])) out[n] = s[n], n++;
    out[n] = 0;
    if (s[n] != '"') out[0] = 0;
  }
  free(text);
  return strdup(out);
}

/* What one run of the trainer came to, from its exit status and its
 * summary.json; the one place that decides it.  The trainer exits 0 when it
 * stopped by itself (summary.json says how) and 2 on bad input.
 *   completed | diverged     finished: a result (a divergence is one)
 *   interrupted | stopped    exit 0 before the last step (Ctrl-C, interrupt_at,
 *                            stop_at): unfinished, the next sweep resumes it
 *   failed: WHY              anything else: no result */
static char *classify(int rc, const char *dir) {
  if (rc != 0) {
    char *why = exit_reason(rc), *o = fmt("failed: %s", why);
    free(why);
    return o;
  }
  char *st = run_status(dir);
  if (!strcmp(st, "completed") || !strcmp(st, "diverged") || !strcmp(st, "interrupted") ||
      !strcmp(st, "stopped"))
    return st;
  free(st);
  return fmt("failed: exit 0 without a status in summary.json");
}

/* On stderr: one line with the file and its last line, or a line and the
 * file's last three lines. */
static void report_failure(const char *what, const char *why, const char *err) {
  char *text = read_text(err), *last[3] = {0};
  int n = 0;
  for (char *line = text ? strtok(text, "\n") : NULL; line; line = strtok(NULL, "\n")) {
    if (strspn(line, " \t\r\v\f") == strlen(line)) continue;
    if (n == 3) last[0] = last[1], last[1] = last[2], n = 2;
    last[n++] = line;
  }
  fflush(stdout);
  if (isatty(2)) fputc('\n', stderr); /* below the live progress line */
  if (n == 0) fprintf(stderr, "sweep: FAILED %s: %s; nothing on stderr (%s)\n", what, why, rel(err));
  else if (n == 1) fprintf(stderr, "sweep: FAILED %s: %s; %s: %s\n", what, why, rel(err), last[0]);
  else {
    fprintf(stderr, "sweep: FAILED %s: %s; %s ends:\n", what, why, rel(err));
    for (int i = 0; i < n; i++) fprintf(stderr, "    %s\n", last[i]);
  }
  free(text);
}

/* ---- the sweep ------------------------------------------------------------ */

typedef struct {
  const char *train, *sharpness, *shadow, *plot; /* programs */
  const char *work, *published;                  /* folders */
  int threads, all_threads, jobs;
  char **slot_env;                               /* per slot: CUDA_VISIBLE_DEVICES=N (--gpus), or NULL */
  const study *st;
  launcher *local;                               /* the plots (and evaluations) run here */
  const char *tmp;                               /* a temporary folder */
  int collected;                                 /* points settled at the last partial collect */
  sweep_point *p;
  int n;
  char **outcome;                                /* per point; NULL: not run */
  int done, diverged, failed, unfinished, ran, eval_failed;
  bool bad_input;
  time_t start;
  char last_line[256];
} sweep;

static volatile sig_atomic_t stop_requested;
static void on_stop(int sig) { (void)sig, stop_requested = 1; }

static void account(sweep *s, int i, char *outcome) {
  s->outcome[i] = outcome;
  if (!strcmp(outcome, "completed")) s->done++;
  else if (!strcmp(outcome, "diverged")) s->done++, s->diverged++;
  else if (!strcmp(outcome, "interrupted") || !strcmp(outcome, "stopped")) s->unfinished++;
  else s->failed++;
}

static void progress(sweep *s) {
  const int settled = s->done + s->failed + s->unfinished;
  const long el = (long)(time(NULL) - s->start);
  char eta[32] = "?";
  long e = -1;
  if (s->ran > 0) e = el * (s->n - settled) / s->ran;
  if (settled == s->n) e = 0;
  if (e >= 0) snprintf(eta, sizeof eta, "%ldm%02lds", e / 60, e % 60);
  char line[256];
  snprintf(line, sizeof line, "sweep: %d/%d done, %d diverged, %d failed, elapsed %ldm%02lds, ETA %s",
           s->done, s->n, s->diverged, s->failed, el / 60, el % 60, eta);
  /* one live line on a terminal; a line per change in a log (stderr stays for errors) */
  if (isatty(2)) fprintf(stderr, "\r%s   ", line);
  else if (strcmp(line, s->last_line)) printf("%s\n", line), fflush(stdout);
  snprintf(s->last_line, sizeof s->last_line, "%s", line);
}

/* The trainer's command for point i: resumed from its checkpoint when it ran
 * before with the same arguments, else afresh in an emptied folder.  Sets
 * *append; NULL when the folder cannot be prepared. */
static char **run_command(sweep *s, int i, bool *append) {
  const sweep_point *p = &s->p[i];
  char *dir = fmt("%s/%s", s->work, p->name), *fp = point_fingerprint(p);
  char *args_path = fmt("%s/sweep_args", dir), *ckpt = fmt("%s/ckpt.bin", dir);
  char *had = text_of(args_path);
  strlist argv = {0};
  strlist_push(&argv, s->train);
  char *threads = fmt("threads=%d", s->threads);
  if (is_file(args_path) && fingerprint_matches(had, fp) && is_file(ckpt)) {
    char *failed = fmt("%s/sweep_failed", dir);
    unlink(failed);
    free(failed);
    const char *a[] = {"--resume", dir, "--set", "progress=0", "--set", threads};
    for (size_t k = 0; k < sizeof a / sizeof *a; k++) strlist_push(&argv, a[k]);
    *append = true;
  } else {
    char *line = fmt("%s\n", fp);
    if (remove_tree(dir) || mkdir_p(dir, 0777) || write_text(args_path, line, "w")) {
      free(line);
      strlist_free(&argv);
      argv.v = NULL;
      goto out;
    }
    free(line);
    char *cfg = fmt("%s/experiments/configs/%s.cfg", ws, p->recipe);
    strlist_push(&argv, "--config");
    strlist_push(&argv, cfg);
    free(cfg);
    /* threads before the study's sets: a study may fix threads */
    strlist_push(&argv, "--set");
    strlist_push(&argv, threads);
    strlist words = {0};
    strlist_split(&words, p->args);
    for (int k = 0; k < words.n; k++) strlist_push(&argv, "--set"), strlist_push(&argv, words.v[k]);
    strlist_free(&words);
    char *run_dir = fmt("run_dir=%s", dir);
    const char *a[] = {"--set", run_dir, "--set", "progress=0"};
    for (size_t k = 0; k < sizeof a / sizeof *a; k++) strlist_push(&argv, a[k]);
    free(run_dir);
    *append = false;
  }
  strlist_push(&argv, ""); /* becomes the NULL */
  free(argv.v[argv.n - 1]);
  argv.v[argv.n - 1] = NULL;
out:
  free(threads), free(dir), free(fp), free(args_path), free(ckpt), free(had);
  return argv.v;
}

static void free_argv(char **argv) {
  for (char **a = argv; a && *a; a++) free(*a);
  free(argv);
}

static bool ends_with(const char *s, const char *suffix) {
  const size_t n = strlen(s), m = strlen(suffix);
  return n >= m && !strcmp(s + n - m, suffix);
}

/* The CSVs and the plots of the points settled so far (a point not settled:
 * the outcome `unsettled`); the plots show the finished points only.  The
 * names of the plots drawn into *written, the plot script's status into
 * *plot_rc; say: print what is missing.  0, or -1 when collecting failed. */
static int collect_and_plot(sweep *s, const char *unsettled, bool say, strlist *written, int *plot_rc) {
  const char **outcomes = calloc((size_t)s->n + 1, sizeof *outcomes);
  for (int i = 0; i < s->n; i++) {
    const char *o = s->outcome[i] ? s->outcome[i] : unsettled;
    outcomes[i] = strncmp(o, "failed: ", 8) ? o : "failed";
  }
  *plot_rc = 0;
  if (collect_csvs(s->work, s->p, s->n, outcomes)) {
    free(outcomes);
    return -1;
  }
  DIR *d = opendir(s->work); /* an earlier invocation's plots: the folder shows this one */
  for (struct dirent *e; d && (e = readdir(d));)
    if ((ends_with(e->d_name, ".png") || ends_with(e->d_name, ".svg")) && e->d_name[0] != '.') {
      char *p = fmt("%s/%s", s->work, e->d_name);
      unlink(p);
      free(p);
    }
  if (d) closedir(d);
  if (s->done == 0) {
    if (say) printf("sweep: no plots: no point finished\n");
  } else {
    char *names = fmt("%s/plotted", s->tmp);
    char *pargv[] = {(char *)s->plot, (char *)s->work, s->st->plots, NULL};
    launch_spec spec = {.argv = pargv, .out = names};
    *plot_rc = launch_and_wait(s->local, &spec);
    char *text = text_of(names);
    for (char *save = NULL, *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save))
      strlist_push(written, line);
    free(text), free(names);
    if (say && s->done < s->n) {
      strlist missing = {0};
      for (int i = 0; i < s->n; i++)
        if (!outcome_finished(outcomes[i])) strlist_push(&missing, s->p[i].name);
      char *list = strlist_join(&missing, " ");
      printf("sweep: the plots show %d of %d points; missing: %s\n", s->done, s->n, list);
      free(list);
      strlist_free(&missing);
    }
  }
  free(outcomes);
  return 0;
}

/* Runs the grid: up to jobs points at once. */
static void run_grid(sweep *s, launcher *l) {
  long *handle = calloc((size_t)s->jobs, sizeof *handle);
  int *point_of = calloc((size_t)s->jobs, sizeof *point_of), running = 0;
  bool signalled = false;
  int next = 0;
  for (;;) {
    if (stop_requested && !signalled) { /* the trainers save a checkpoint on SIGINT */
      for (int k = 0; k < s->jobs; k++)
        if (handle[k]) l->signal(l, handle[k], SIGINT);
      signalled = true;
    }
    /* skip the finished points, then start one in a free slot */
    while (next < s->n && !stop_requested && !s->bad_input) {
      const sweep_point *p = &s->p[next];
      char *dir = fmt("%s/%s", s->work, p->name), *st = run_status(dir);
      char *failed = fmt("%s/sweep_failed", dir), *args_path = fmt("%s/sweep_args", dir);
      char *fp = point_fingerprint(p), *had = text_of(args_path);
      const bool skip = (!strcmp(st, "completed") || !strcmp(st, "diverged")) && !exists(failed) &&
                        fingerprint_matches(had, fp);
      free(dir), free(failed), free(args_path), free(fp), free(had);
      if (!skip) {
        free(st);
        break;
      }
      account(s, next++, st);
    }
    int slot = -1;
    for (int k = 0; k < s->jobs && slot < 0; k++)
      if (!handle[k]) slot = k;
    if (slot >= 0 && next < s->n && !stop_requested && !s->bad_input) {
      bool append = false;
      char **argv = run_command(s, next, &append);
      char *out = fmt("%s/%s/train.out", s->work, s->p[next].name);
      char *err = fmt("%s/%s/train.err", s->work, s->p[next].name);
      long h = -1;
      if (argv) {
        const char *env[] = {s->slot_env ? s->slot_env[slot] : NULL, NULL};
        launch_spec spec = {.argv = argv, .env = env, .out = out, .err = err, .append = append, .slot = slot};
        h = l->start(l, &spec);
      }
      free_argv(argv), free(out), free(err);
      if (h < 0) { /* the folder or the process could not be made */
        account(s, next, fmt("failed: exit 1"));
        fprintf(stderr, "sweep: FAILED %s: cannot prepare %s/%s\n", s->p[next].name, rel(s->work),
                s->p[next].name);
        s->ran++, next++;
        continue;
      }
      handle[slot] = h, point_of[slot] = next++, running++;
      progress(s);
      continue;
    }
    if (!running) break;
    int rc;
    const long h = l->wait_any(l, &rc);
    if (h < 0 && errno == ETIMEDOUT) { /* a launcher that polls (Slurm): the results so far */
      const int settled = s->done + s->failed + s->unfinished;
      if (settled != s->collected) {
        strlist written = {0};
        int plot_rc;
        collect_and_plot(s, "queued", false, &written, &plot_rc);
        strlist_free(&written);
        s->collected = settled;
      }
    }
    if (h < 0) continue; /* a signal (see stop_requested), or a poll */
    for (int k = 0; k < s->jobs; k++)
      if (handle[k] == h) {
        const int i = point_of[k];
        handle[k] = 0, running--;
        if (rc < 0) break; /* never started (cancelled in the queue): not run */
        char *dir = fmt("%s/%s", s->work, s->p[i].name), *o = classify(rc, dir);
        account(s, i, o);
        s->ran++;
        if (!strncmp(o, "failed: ", 8)) {
          /* a run can fail after writing a "completed" summary.json: this
           * marks it failed for the next sweep */
          char *mark = fmt("%s/sweep_failed", dir), *why = fmt("%s\n", o + 8);
          char *err = fmt("%s/train.err", dir);
          write_text(mark, why, "w");
          report_failure(s->p[i].name, o + 8, err);
          if (rc == 2) s->bad_input = true; /* the same config would fail the other points too */
          free(mark), free(why), free(err);
        }
        free(dir);
        progress(s);
      }
  }
  free(handle), free(point_of);
}

/* The kept checkpoints of a run folder (ckpt-STEP.bin), ascending. */
static int kept_steps(const char *dir, long long **steps) {
  DIR *d = opendir(dir);
  int n = 0, cap = 0;
  *steps = NULL;
  for (struct dirent *e; d && (e = readdir(d));) {
    const char *name = e->d_name;
    size_t len = strlen(name), digits = strspn(name + 5, "0123456789");
    if (len > 9 && !strncmp(name, "ckpt-", 5) && digits == len - 9 && !strcmp(name + len - 4, ".bin")) {
      if (n == cap) *steps = realloc(*steps, (size_t)(cap = cap ? 2 * cap : 16) * sizeof **steps);
      (*steps)[n++] = strtoll(name + 5, NULL, 10);
    }
  }
  if (d) closedir(d);
  for (int i = 1; i < n; i++) /* insertion sort: tens of checkpoints */
    for (int j = i; j > 0 && (*steps)[j - 1] > (*steps)[j]; j--) {
      const long long t = (*steps)[j];
      (*steps)[j] = (*steps)[j - 1], (*steps)[j - 1] = t;
    }
  return n;
}

static void eval_failed(sweep *s, const char *what, int rc, const char *err) {
  char *why = exit_reason(rc);
  report_failure(what, why, err);
  free(why);
  s->eval_failed++;
  if (rc == 2) s->bad_input = true;
}

/* Whether the step has a line in a sharpness.jsonl text. */
static bool has_step(const char *jsonl, long long step) {
  char *copy = strdup(jsonl ? jsonl : ""), *save = NULL;
  bool found = false;
  for (char *line = strtok_r(copy, "\n", &save); line && !found; line = strtok_r(NULL, "\n", &save))
    found = sharpness_line_step(line) == step;
  free(copy);
  return found;
}

/* The sharpness of every kept checkpoint of point i not yet computed with these arguments. */
static void sharpness_of(sweep *s, launcher *l, const study *st, int i, const char *tmp,
                         long long *steps, int nsteps) {
  const char *name = s->p[i].name;
  char *dir = fmt("%s/%s", s->work, name), *args_path = fmt("%s/sharpness_args", dir);
  char *jsonl = fmt("%s/sharpness.jsonl", dir), *err = fmt("%s/sharpness.err", dir);
  char *had = text_of(args_path);
  if (!is_file(args_path) || strcmp(had, st->sharpness)) { /* computed again when they change */
    unlink(jsonl);
    char *line = fmt("%s\n", st->sharpness);
    write_text(args_path, line, "w");
    free(line);
  }
  int new = 0;
  char *omp = fmt("OMP_NUM_THREADS=%d", s->all_threads), *out = fmt("%s/sharpness.line", tmp);
  const char *env[] = {omp, NULL};
  for (int k = 0; k < nsteps; k++) {
    char *text = read_text(jsonl);
    const bool done = text && has_step(text, steps[k]);
    free(text);
    if (done) continue;
    strlist argv = {0};
    char *ckpt = fmt("%s/ckpt-%lld.bin", dir, steps[k]);
    strlist_push(&argv, s->sharpness), strlist_push(&argv, dir);
    strlist_push(&argv, "--ckpt"), strlist_push(&argv, ckpt);
    strlist_split(&argv, st->sharpness);
    strlist_push(&argv, "");
    free(argv.v[argv.n - 1]), argv.v[argv.n - 1] = NULL;
    launch_spec spec = {.argv = argv.v, .env = env, .out = out, .err = err};
    const int rc = launch_and_wait(l, &spec);
    free_argv(argv.v), free(ckpt);
    if (rc != 0) {
      char *what = fmt("sharpness of %s at step %lld", name, steps[k]);
      eval_failed(s, what, rc, err);
      free(what);
      break;
    }
    char *line = text_of(out), *with_nl = fmt("%s\n", line);
    write_text(jsonl, with_nl, "a");
    free(line), free(with_nl);
    new ++;
  }
  if (new) printf("sweep: sharpness of %s: %d checkpoint(s)\n", name, new);
  free(dir), free(args_path), free(jsonl), free(err), free(had), free(omp), free(out);
}

static void shadow_of(sweep *s, launcher *l, const study *st, int i) {
  const char *name = s->p[i].name;
  char *dir = fmt("%s/%s", s->work, name), *out = fmt("%s/shadow.out", dir);
  char *err = fmt("%s/shadow.err", dir), *threads = fmt("%d", s->all_threads);
  strlist argv = {0};
  strlist_push(&argv, s->shadow);
  strlist_push(&argv, "--train"), strlist_push(&argv, s->train);
  strlist_push(&argv, dir);
  strlist_split(&argv, st->shadow);
  strlist_push(&argv, "--threads"), strlist_push(&argv, threads);
  strlist_push(&argv, "");
  free(argv.v[argv.n - 1]), argv.v[argv.n - 1] = NULL;
  launch_spec spec = {.argv = argv.v, .out = out, .err = err};
  const int rc = launch_and_wait(l, &spec);
  if (rc == 0) {
    char *text = text_of(out), *last = strrchr(text, '\n');
    last = last ? last + 1 : text;
    char *cut = strstr(last, "; ");
    if (cut) *cut = 0;
    printf("sweep: %s (%s)\n", last, name);
    free(text);
  } else {
    char *what = fmt("shadow check of %s", name);
    eval_failed(s, what, rc, err);
    free(what);
  }
  free_argv(argv.v), free(dir), free(out), free(err), free(threads);
}

/* The evaluations of the kept checkpoints (ckpt_keep = 1) of the finished points. */
static void evaluate(sweep *s, launcher *l, const study *st, const char *tmp) {
  if (!*st->sharpness && !*st->shadow) return;
  for (int i = 0; i < s->n && !stop_requested; i++) {
    if (!s->outcome[i] || !outcome_finished(s->outcome[i])) continue;
    char *dir = fmt("%s/%s", s->work, s->p[i].name);
    long long *steps;
    const int n = kept_steps(dir, &steps);
    free(dir);
    if (!n) die("%s: no kept checkpoints (the study needs 'set ckpt_keep = 1')", s->p[i].name);
    if (*st->sharpness) sharpness_of(s, l, st, i, tmp, steps, n);
    if (*st->shadow) shadow_of(s, l, st, i);
    free(steps);
    fflush(stdout);
  }
}

/* Copies src onto dst: beside it, then renamed over it. */
static int copy_over(const char *src, const char *dir, const char *name) {
  char *text = NULL, *tmp = fmt("%s/.%s.tmp", dir, name), *dst = fmt("%s/%s", dir, name);
  FILE *in = fopen(src, "rb"), *out = in ? fopen(tmp, "wb") : NULL;
  int rc = in && out ? 0 : -1;
  char buf[1 << 16];
  for (size_t got; !rc && (got = fread(buf, 1, sizeof buf, in)) > 0;)
    if (fwrite(buf, 1, got, out) != got) rc = -1;
  if (in && ferror(in)) rc = -1;
  if (in) fclose(in);
  if (out && (ferror(out) | fclose(out))) rc = -1;
  if (!rc && rename(tmp, dst)) rc = -1;
  if (rc) unlink(tmp);
  free(text), free(tmp), free(dst);
  return rc;
}

/* The repository's copy, only of a sweep without gaps: replaces the published
 * files of the kinds a sweep writes (the CSVs, grid.txt, the plots). */
static int publish(sweep *s, const strlist *plots) {
  if (mkdir_p(s->published, 0777)) return -1;
  strlist files = {0};
  const char *always[] = {"grid.txt", "summary.csv", "curves.csv"};
  for (int k = 0; k < 3; k++) strlist_push(&files, always[k]);
  const char *evals[] = {"sharpness.csv", "shadow.csv"};
  for (int k = 0; k < 2; k++) {
    char *p = fmt("%s/%s", s->work, evals[k]);
    if (is_file(p)) strlist_push(&files, evals[k]);
    free(p);
  }
  for (int k = 0; k < plots->n; k++) {
    char *png = fmt("%s.png", plots->v[k]), *svg = fmt("%s.svg", plots->v[k]);
    strlist_push(&files, png), strlist_push(&files, svg);
    free(png), free(svg);
  }
  int rc = 0;
  for (int k = 0; !rc && k < files.n; k++) {
    char *src = fmt("%s/%s", s->work, files.v[k]);
    rc = copy_over(src, s->published, files.v[k]);
    free(src);
  }
  DIR *d = rc ? NULL : opendir(s->published);
  for (struct dirent *e; d && (e = readdir(d));) {
    const char *f = e->d_name;
    const bool kind = !strcmp(f, "grid.txt") || !strcmp(f, "summary.csv") ||
                      !strcmp(f, "curves.csv") || !strcmp(f, "sharpness.csv") ||
                      !strcmp(f, "shadow.csv") || ((ends_with(f, ".png") || ends_with(f, ".svg")) && f[0] != '.');
    bool keep = !kind;
    for (int k = 0; !keep && k < files.n; k++) keep = !strcmp(f, files.v[k]);
    char *p = fmt("%s/%s", s->published, f);
    if (!keep && is_file(p)) unlink(p);
    free(p);
  }
  if (d) closedir(d);
  if (!rc) {
    char *list = strlist_join(&files, " ");
    printf("sweep: published %s/: %s\n", rel(s->published), list);
    free(list);
  }
  strlist_free(&files);
  return rc;
}

static bool on_path(const char *program) {
  const char *path = getenv("PATH");
  char *copy = strdup(path ? path : "/usr/bin:/bin"), *save = NULL;
  bool found = false;
  for (char *d = strtok_r(copy, ":", &save); d && !found; d = strtok_r(NULL, ":", &save)) {
    char *p = fmt("%s/%s", *d ? d : ".", program);
    found = access(p, X_OK) == 0;
    free(p);
  }
  free(copy);
  return found;
}

/* A binary: the environment's override, else this binary's runfile. */
static char *binary(const char *env, const char *argv0, const char *runfile_path) {
  const char *v = getenv(env);
  if (v && *v) return strdup(v);
  return runfile(argv0, runfile_path);
}

#define USAGE                                                                              \
  "usage: sweep STUDY.cfg [--quick] [--jobs N] [--gpus 0,1,... [--per-gpu K]] [--publish]\n" \
  "       sweep STUDY.cfg --backend slurm [--jobs N] [--partition P] [--time T]\n"           \
  "             [--gpus-per-task N] [--sbatch-arg ARG]... [--quick] [--publish]\n"

static void usage_exit(void) {
  fputs(USAGE
        "  runs a study's grid with the trainer into experiments/runs/sweeps/<study>[-quick]/,\n"
        "  then the CSVs and plots; --publish also into experiments/results/ when every\n"
        "  point finished (experiments/studies/sweeps/README.md)\n"
        "  --jobs N         N points at once (nproc/N OpenMP threads each)\n"
        "  --gpus 0,1,...   runs on these GPUs: each running point sees one of them as\n"
        "                   CUDA_VISIBLE_DEVICES (slot k on the (k mod count)-th);\n"
        "                   --jobs defaults to count x K.  Only points whose config\n"
        "                   says device = gpu use it; with device = cpu the variable\n"
        "                   is set all the same and changes nothing\n"
        "  --per-gpu K      K points at once on each GPU (default 1)\n"
        "  --backend slurm  the points as the tasks of one Slurm job array (sbatch;\n"
        "                   squeue polled, CSVs and plots refreshed as tasks end;\n"
        "                   --jobs N: at most N tasks at once); the folder must be on\n"
        "                   a file system the nodes share.  --partition, --time,\n"
        "                   --gpus-per-task and each --sbatch-arg go to sbatch\n",
        stdout);
  exit(0);
}

/* The value of option `name` at argv[*i] ("--name V" or "--name=V"; *i moves
 * past it), or NULL when argv[*i] is another option. */
static const char *option(int argc, char **argv, int *i, const char *name) {
  const char *a = argv[*i];
  const size_t n = strlen(name);
  if (strncmp(a, name, n)) return NULL;
  if (a[n] == '=') return a + n + 1;
  if (a[n]) return NULL;
  if (*i + 1 >= argc) die("%s needs a value", name);
  return argv[++*i];
}

static bool positive(const char *s) {
  return s && s[0] >= '1' && s[0] <= '9' && strspn(s, "0123456789") == strlen(s) && strlen(s) < 7;
}

int main(int argc, char **argv) {
  const char *cfg_arg = NULL;
  bool quick = false, publish_asked = false, slurm = false, jobs_asked = false;
  int jobs = 1, gpus[GPUS_MAX], ngpus = 0, per_gpu = 0;
  strlist sbatch_args = {0};
  char err[2048];
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v;
    if (!strcmp(a, "--quick")) quick = true;
    else if ((v = option(argc, argv, &i, "--gpus"))) {
      if ((ngpus = gpus_parse(v, gpus, err, sizeof err)) < 0) die("%s", err);
    } else if ((v = option(argc, argv, &i, "--per-gpu"))) {
      if (!positive(v)) die("--per-gpu needs a positive integer, not '%s'", v);
      per_gpu = atoi(v);
    } else if ((v = option(argc, argv, &i, "--backend"))) {
      if (strcmp(v, "local") && strcmp(v, "slurm")) die("--backend '%s': want local or slurm", v);
      slurm = !strcmp(v, "slurm");
    } else if ((v = option(argc, argv, &i, "--partition"))) strlist_push(&sbatch_args, "--partition"), strlist_push(&sbatch_args, v);
    else if ((v = option(argc, argv, &i, "--time"))) strlist_push(&sbatch_args, "--time"), strlist_push(&sbatch_args, v);
    else if ((v = option(argc, argv, &i, "--gpus-per-task"))) {
      if (!positive(v)) die("--gpus-per-task needs a positive integer, not '%s'", v);
      strlist_push(&sbatch_args, "--gpus-per-task"), strlist_push(&sbatch_args, v);
    } else if ((v = option(argc, argv, &i, "--sbatch-arg"))) strlist_push(&sbatch_args, v);
    else if (!strcmp(a, "--publish")) publish_asked = true;
    else if (!strcmp(a, "--jobs")) {
      if (!positive(i + 1 < argc ? argv[i + 1] : NULL)) die("--jobs needs a positive integer");
      jobs = atoi(argv[++i]), jobs_asked = true;
    } else if (!strncmp(a, "--jobs=", 7)) {
      if (!positive(a + 7)) die("--jobs needs a positive integer");
      jobs = atoi(a + 7), jobs_asked = true;
    } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) usage_exit();
    else if (a[0] == '-') die("unknown option '%s'", a);
    else if (cfg_arg) die("more than one sweep config ('%s', '%s')", cfg_arg, a);
    else cfg_arg = a;
  }
  const char *bwd = getenv("BUILD_WORKSPACE_DIRECTORY");
  if (bwd && *bwd) snprintf(ws, sizeof ws, "%s", bwd);
  else if (!getcwd(ws, sizeof ws)) die("cannot tell the current directory");
  if (!cfg_arg) die("usage: sweep STUDY.cfg [--quick] [--jobs N] [--publish] (--help: more)");
  if (per_gpu && !ngpus) die("--per-gpu needs --gpus");
  if (ngpus && slurm) die("--gpus is for the local backend; on Slurm ask with --gpus-per-task");
  if (sbatch_args.n && !slurm) die("--partition, --time, --gpus-per-task and --sbatch-arg need --backend slurm");
  if (ngpus && !jobs_asked) jobs = ngpus * (per_gpu ? per_gpu : 1);
  if (slurm && (!on_path("sbatch") || !on_path("squeue") || !on_path("scancel")))
    die("--backend slurm needs sbatch, squeue and scancel on PATH");
  char *cfg = cfg_arg[0] == '/' ? strdup(cfg_arg) : fmt("%s/%s", ws, cfg_arg);
  if (access(cfg, R_OK)) die("cannot read sweep config '%s'", cfg);
  char *train = binary("SWEEP_TRAIN", argv[0], "exmy/experiments/trainer/train");
  if (!train) die("trainer binary not found (set SWEEP_TRAIN)");
  if (!is_file(train) || access(train, X_OK)) die("trainer '%s' is not an executable file", train);
  /* a published figure must not go stale beside its refreshed CSVs */
  if (publish_asked && !on_path("gnuplot")) die("--publish needs gnuplot (apt-get install gnuplot-nox)");

  study st;
  if (study_load(&st, cfg, quick, err, sizeof err)) die("%s", err);
  strlist recipes = {0};
  strlist_split(&recipes, st.recipes);
  for (int r = 0; r < recipes.n; r++) {
    char *p = fmt("%s/experiments/configs/%s.cfg", ws, recipes.v[r]);
    if (access(p, R_OK)) die("%s: no recipe config experiments/configs/%s.cfg", cfg, recipes.v[r]);
    free(p);
  }
  char *sharpness = NULL, *shadow = NULL, *plot = runfile(argv[0], "exmy/experiments/studies/sweep_plot.sh");
  if (*st.sharpness && !(sharpness = binary("SWEEP_SHARPNESS", argv[0], "exmy/experiments/studies/sharpness")))
    die("sharpness binary not found (set SWEEP_SHARPNESS)");
  if (*st.shadow && !(shadow = runfile(argv[0], "exmy/experiments/studies/shadow.sh")))
    die("shadow check not found in the runfiles (experiments/shadow.sh)");
  if (!plot) die("sweep_plot.sh not found in the runfiles");

  sweep s = {.train = train, .sharpness = sharpness, .shadow = shadow, .plot = plot, .jobs = jobs};
  s.n = study_expand(&st, &s.p);
  /* evaluations of kept checkpoints need them: each point's resolved
   * configuration (its recipe file, then its assignments) keeps them */
  for (int i = 0; (*st.sharpness || *st.shadow) && i < s.n; i++) {
    static config c;
    config_defaults(&c);
    char *p = fmt("%s/experiments/configs/%s.cfg", ws, s.p[i].recipe);
    if (config_load_file(&c, p, err, sizeof err)) die("%s", err);
    free(p);
    strlist words = {0};
    strlist_split(&words, s.p[i].args);
    for (int k = 0; k < words.n; k++) config_set_assignment(&c, words.v[k], err, sizeof err);
    strlist_free(&words);
    if (strcmp(config_str(&c, "ckpt_keep"), "1"))
      die("%s: %s: the evaluations need kept checkpoints (the study needs 'set ckpt_keep = 1')",
          rel(cfg), s.p[i].name);
  }

  char *work = fmt("%s/experiments/runs/sweeps/%s", ws, st.study);
  char *published = fmt("%s/experiments/results/%s", ws, st.study);
  s.work = work, s.published = published;
  char *slurm_dir = fmt("%s/slurm", work);
  if (slurm) { /* two arrays on one folder would run a point twice at once */
    char *job = slurm_array_still_queued(slurm_dir);
    if (job) die("Slurm job %s of an earlier sweep of %s is still queued or running (wait for it, or scancel %s)", job, st.study, job);
  }
  if (mkdir_p(work, 0777)) die("cannot create %s", work);
  s.all_threads = nproc();
  s.threads = s.all_threads / jobs > 0 ? s.all_threads / jobs : 1;
  if (ngpus) {
    s.slot_env = calloc((size_t)jobs, sizeof *s.slot_env);
    for (int k = 0; k < jobs; k++) s.slot_env[k] = fmt("CUDA_VISIBLE_DEVICES=%d", slot_gpu(k, gpus, ngpus));
  }
  launcher *runs = launcher_local();
  if (slurm) { /* every point to run is a task at once; Slurm throttles them to --jobs */
    strlist_push(&sbatch_args, "");
    free(sbatch_args.v[sbatch_args.n - 1]), sbatch_args.v[sbatch_args.n - 1] = NULL;
    const char *poll = getenv("SWEEP_SLURM_POLL");
    slurm_options o = {.dir = slurm_dir, .job_name = fmt("sweep-%s", st.study),
                       .max_running = jobs_asked ? jobs : 0,
                       .sbatch_args = (const char *const *)sbatch_args.v,
                       .poll_s = poll && positive(poll) ? atoi(poll) : 15};
    if (!(runs = launcher_slurm(&o, err, sizeof err))) die("%s", err);
    s.jobs = s.n, s.threads = 0; /* threads=0: the OpenMP threads of the task's CPUs */
  }
  s.outcome = calloc((size_t)s.n + 1, sizeof *s.outcome);
  s.start = time(NULL);

  char *grid_path = fmt("%s/grid.txt", work);
  FILE *grid = fopen(grid_path, "w");
  if (!grid) die("cannot write %s", grid_path);
  for (int i = 0; i < s.n; i++) {
    char *line = point_grid_line(&s.p[i]);
    fprintf(grid, "%s\n", line);
    free(line);
  }
  if (ferror(grid) | fclose(grid)) die("cannot write %s", grid_path);
  if (!slurm)
    printf("sweep: study %s, %d points, %d job(s) x %d thread(s)%s; runs in %s\n", st.study, s.n, jobs,
           s.threads, ngpus ? " on GPUs" : "", rel(work));
  else if (jobs_asked)
    printf("sweep: study %s, %d points, a Slurm job array of at most %d at once; runs in %s\n", st.study, s.n,
           jobs, rel(work));
  else
    printf("sweep: study %s, %d points, a Slurm job array; runs in %s\n", st.study, s.n, rel(work));
  fflush(stdout);

  struct sigaction sa = {.sa_handler = on_stop}; /* no SA_RESTART: a wait returns */
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  char tmp[] = "/tmp/sweep.XXXXXX";
  if (!mkdtemp(tmp)) die("cannot create a temporary folder");
  launcher *l = launcher_local();
  s.local = l, s.st = &st, s.tmp = tmp;
  run_grid(&s, runs);
  progress(&s);
  if (isatty(2)) fputc('\n', stderr);
  const int not_run = s.n - s.done - s.failed - s.unfinished;

  evaluate(&s, l, &st, tmp);

  /* ---- aggregate and plot: the plots show the finished points only ---- */
  strlist written = {0};
  int plot_rc = 0;
  if (collect_and_plot(&s, "not-run", true, &written, &plot_rc)) {
    remove_tree(tmp);
    fprintf(stderr, "sweep: collecting the CSVs failed\n");
    return 1;
  }
  remove_tree(tmp);
  printf("sweep: summary %s/summary.csv\n", rel(work));
  for (int k = 0; k < written.n; k++) printf("sweep: plot %s/%s.png\n", rel(work), written.v[k]);
  fflush(stdout);

  if (publish_asked) {
    if (s.done == s.n && !s.eval_failed && !plot_rc) {
      if (publish(&s, &written)) {
        fprintf(stderr, "sweep: publishing into %s/ failed\n", rel(published));
        return 1;
      }
    } else {
      fflush(stdout);
      fprintf(stderr, "sweep: not published (%s/ unchanged): %d point(s) did not finish, %d evaluation(s) failed\n",
              rel(published), s.n - s.done, s.eval_failed);
    }
  }

  printf("sweep: %d/%d done, %d diverged, %d failed", s.done, s.n, s.diverged, s.failed);
  if (s.unfinished) printf(", %d interrupted (run the same command again to resume)", s.unfinished);
  if (not_run) printf(", %d not run", not_run);
  if (s.eval_failed) printf(", %d evaluation(s) failed", s.eval_failed);
  printf("\n");
  fflush(stdout);
  if (s.bad_input) return 2;
  return s.done < s.n || s.eval_failed || plot_rc ? 1 : 0;
}
