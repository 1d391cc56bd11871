/* The Slurm launcher (launcher.h): a job array of the started programs,
 * polled for the files its tasks write when they end.
 *
 * Why files and not squeue/sacct for the exit status: sacct needs the
 * cluster's accounting database (not every cluster has one, the test cluster
 * has none), squeue forgets a job MinJobAge seconds after it ends, and
 * neither survives a restarted sweep; a file beside the run's own files is on
 * the file system the runs already need, holds the program's own status
 * (128 + N for a signal, as the local launcher gives it) and outlives both
 * the controller and the sweep.  squeue is asked only which tasks are still
 * queued or running, to notice one that ended without writing its file. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "experiments/studies/launcher.h"

typedef struct {
  char *err;      /* the program's stderr file (NULL: the task's Slurm log) */
  char job[32];   /* the array's job id ("" until submitted) */
  bool ended;
  int missing;    /* polls in a row in which squeue did not list it */
  bool cancelled; /* pending when signal() cancelled the pending tasks */
} slurm_task;

typedef struct {
  launcher base;  /* first: the launcher is this struct */
  slurm_options o;
  char **sbatch_args;
  slurm_task *t;
  int n, cap, submitted; /* tasks [submitted, n) wait for sbatch */
  char signalled[32];    /* the last job signal() went to */
} slurm_launcher;

static char *sfmt(const char *f, ...) {
  va_list ap;
  va_start(ap, f);
  char *s;
  if (vasprintf(&s, f, ap) < 0) abort();
  va_end(ap);
  return s;
}

/* Runs argv (found on PATH) with stdout and stderr into out: its exit status
 * (127 when it could not be run). */
static int run_capture(char *const argv[], char *out, size_t outlen) {
  int fd[2];
  out[0] = 0;
  if (pipe(fd)) return 127;
  fflush(NULL);
  const pid_t pid = fork();
  if (pid < 0) {
    close(fd[0]), close(fd[1]);
    return 127;
  }
  if (pid == 0) {
    dup2(fd[1], 1), dup2(fd[1], 2);
    close(fd[0]), close(fd[1]);
    execvp(argv[0], argv);
    dprintf(2, "cannot run %s: %s\n", argv[0], strerror(errno));
    _exit(127);
  }
  close(fd[1]);
  size_t len = 0;
  for (ssize_t got; (got = read(fd[0], out + len, outlen - 1 - len)) != 0;) {
    if (got < 0) {
      if (errno == EINTR) continue;
      break;
    }
    len += (size_t)got;
    if (len == outlen - 1) { /* the rest is not kept */
      char sink[4096];
      while (read(fd[0], sink, sizeof sink) > 0) {}
      break;
    }
  }
  out[len] = 0;
  close(fd[0]);
  int ws;
  while (waitpid(pid, &ws, 0) < 0)
    if (errno != EINTR) return 127;
  return WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
}

/* s as one word for sh: in single quotes. */
static void put_quoted(FILE *f, const char *s) {
  fputc('\'', f);
  for (; *s; s++)
    if (*s == '\'') fputs("'\\''", f);
    else fputc(*s, f);
  fputc('\'', f);
}

static void append_line(const char *path, const char *line) {
  if (!path) return;
  FILE *f = fopen(path, "a");
  if (!f) return;
  fprintf(f, "%s\n", line);
  fclose(f);
}

static long slurm_start(launcher *self, const launch_spec *spec) {
  slurm_launcher *l = (slurm_launcher *)self;
  const int k = l->n;
  char *path = sfmt("%s/task-%d.sh", l->o.dir, k);
  FILE *f = fopen(path, "w");
  free(path);
  if (!f) return -1;
  fprintf(f, "# task %d of the sweep's Slurm array, sourced by array.sh\n", k);
  for (const char *const *e = spec->env; e && *e; e++) fputs("export ", f), put_quoted(f, *e), fputc('\n', f);
  for (char *const *a = spec->argv; *a; a++) {
    if (a != spec->argv) fputc(' ', f);
    put_quoted(f, *a);
  }
  const char *redirect = spec->append ? ">>" : ">";
  if (spec->out) fprintf(f, " %s", redirect), put_quoted(f, spec->out);
  if (spec->err) fprintf(f, " 2%s", redirect), put_quoted(f, spec->err);
  fputc('\n', f);
  if (ferror(f) | fclose(f)) return -1;
  if (l->n == l->cap) {
    l->cap = l->cap ? 2 * l->cap : 64;
    l->t = realloc(l->t, (size_t)l->cap * sizeof *l->t);
  }
  l->t[k] = (slurm_task){.err = spec->err ? strdup(spec->err) : NULL};
  l->n++;
  return k + 1;
}

/* sbatch for the tasks not yet submitted; on failure they end with 126 and
 * sbatch's message in their err files. */
static void submit(slurm_launcher *l) {
  const int first = l->submitted, last = l->n - 1;
  l->submitted = l->n;
  char array[64], *out_log = sfmt("--output=%s/task-%%a.log", l->o.dir);
  if (l->o.max_running > 0) snprintf(array, sizeof array, "--array=%d-%d%%%d", first, last, l->o.max_running);
  else snprintf(array, sizeof array, "--array=%d-%d", first, last);
  char *name = sfmt("--job-name=%s", l->o.job_name), *script = sfmt("%s/array.sh", l->o.dir);
  int nargs = 0;
  while (l->sbatch_args[nargs]) nargs++;
  char **argv = calloc((size_t)nargs + 8, sizeof *argv);
  int a = 0;
  argv[a++] = "sbatch", argv[a++] = "--parsable", argv[a++] = array, argv[a++] = name, argv[a++] = out_log;
  for (int k = 0; k < nargs; k++) argv[a++] = l->sbatch_args[k];
  argv[a++] = script;
  char out[4096];
  const int rc = run_capture(argv, out, sizeof out);
  free(argv), free(out_log), free(name), free(script);
  char job[32] = "";
  if (rc == 0) sscanf(out, "%31[0-9]", job);
  if (job[0]) {
    char *path = sfmt("%s/job", l->o.dir);
    append_line(path, job);
    free(path);
    printf("sweep: Slurm job %s: tasks %d-%d (%s/task-K.log)\n", job, first, last, l->o.dir);
    fflush(stdout);
    for (int k = first; k <= last; k++) snprintf(l->t[k].job, sizeof l->t[k].job, "%s", job);
    return;
  }
  for (char *p = out; *p; p++)
    if (*p == '\n' && p[1]) *p = ' ';
  out[strcspn(out, "\n")] = 0;
  for (int k = first; k <= last; k++) {
    char *line = sfmt("sweep: sbatch failed (exit %d): %s", rc, out);
    append_line(l->t[k].err, line);
    free(line);
    snprintf(l->t[k].job, sizeof l->t[k].job, "-"); /* ends at once */
  }
}

/* The exit status in task k's .end file, or -1. */
static int end_status(slurm_launcher *l, int k) {
  char *path = sfmt("%s/task-%d.end", l->o.dir, k);
  FILE *f = fopen(path, "r");
  free(path);
  int rc = -1;
  if (f) {
    if (fscanf(f, "%d", &rc) != 1) rc = -1;
    fclose(f);
  }
  return rc;
}

/* squeue's "JOB TASK" lines of the queued and running tasks of the jobs of
 * the tasks still out; false when squeue failed. */
static bool queued_tasks(slurm_launcher *l, char *out, size_t outlen) {
  char jobs[4096] = "";
  for (int k = 0; k < l->submitted; k++) {
    slurm_task *t = &l->t[k];
    if (t->ended || t->job[0] == '-' || strstr(jobs, t->job)) continue;
    if (strlen(jobs) + strlen(t->job) + 2 >= sizeof jobs) break;
    if (jobs[0]) strcat(jobs, ",");
    strcat(jobs, t->job);
  }
  if (!jobs[0]) return out[0] = 0, true;
  char *argv[] = {"squeue", "--noheader", "--array", "--jobs", jobs, "--format=%F %K", NULL};
  if (run_capture(argv, out, outlen) == 0) return true;
  /* the controller forgot the jobs (MinJobAge after their end): none queued */
  if (strstr(out, "Invalid job id")) return out[0] = 0, true;
  return false;
}

static bool listed(const char *squeue, const char *job, int k) {
  char want[64];
  snprintf(want, sizeof want, "%s %d\n", job, k);
  const size_t n = strlen(want);
  for (const char *p = squeue; *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : p + strlen(p))
    if (!strncmp(p, want, n) || (!strncmp(p, want, n - 1) && !p[n - 1])) return true;
  return false;
}

static long slurm_wait_any(launcher *self, int *status) {
  slurm_launcher *l = (slurm_launcher *)self;
  if (l->submitted < l->n) submit(l);
  bool out_there = false;
  for (int k = 0; k < l->submitted; k++) {
    slurm_task *t = &l->t[k];
    if (t->ended) continue;
    if (t->job[0] == '-') {
      t->ended = true, *status = 126;
      return k + 1;
    }
    const int rc = end_status(l, k);
    if (rc >= 0) {
      t->ended = true, *status = rc;
      return k + 1;
    }
    out_there = true;
  }
  if (!out_there) {
    errno = ECHILD;
    return -1;
  }
  static char squeue[1 << 20];
  if (queued_tasks(l, squeue, sizeof squeue))
    for (int k = 0; k < l->submitted; k++) {
      slurm_task *t = &l->t[k];
      if (t->ended) continue;
      t->missing = listed(squeue, t->job, k) ? 0 : t->missing + 1;
      /* twice: its .end may have been written between the look and squeue */
      if (t->missing >= 2 && end_status(l, k) < 0) {
        if (t->cancelled) {
          t->ended = true, *status = -1;
          return k + 1;
        }
        char *line = sfmt("sweep: Slurm task %s_%d ended without writing its exit status "
                          "(cancelled, out of time, or its node failed); its log: %s/task-%d.log",
                          t->job, k, l->o.dir, k);
        append_line(t->err, line);
        free(line);
        t->ended = true, *status = 128 + SIGKILL;
        return k + 1;
      }
    }
  const struct timespec poll = {.tv_sec = l->o.poll_s > 0 ? l->o.poll_s : 1};
  if (nanosleep(&poll, NULL)) return -1; /* EINTR: a signal */
  errno = ETIMEDOUT;
  return -1;
}

static void slurm_signal(launcher *self, long handle, int sig) {
  slurm_launcher *l = (slurm_launcher *)self;
  if (handle < 1 || handle > l->n) return;
  if (l->submitted < l->n) submit(l);
  const slurm_task *t = &l->t[handle - 1];
  if (t->ended || t->job[0] == '-' || !strcmp(t->job, l->signalled)) return;
  snprintf(l->signalled, sizeof l->signalled, "%s", t->job);
  char job[32], sigopt[32], out[4096];
  snprintf(job, sizeof job, "%s", t->job);
  const char *abbrev = sigabbrev_np(sig);
  snprintf(sigopt, sizeof sigopt, "--signal=%s", abbrev ? abbrev : "INT");
  /* the tasks still pending: those the first scancel cancels, unless one
   * starts meanwhile (then the second signals it, and it writes its .end) */
  char *query[] = {"squeue", "--noheader", "--array", "--states=PENDING", "--jobs", job, "--format=%K", NULL};
  static char listed_pending[1 << 20];
  if (run_capture(query, listed_pending, sizeof listed_pending) == 0)
    for (char *save = NULL, *w = strtok_r(listed_pending, "\n", &save); w; w = strtok_r(NULL, "\n", &save)) {
      char *end;
      const long k = strtol(w, &end, 10);
      if (end != w && k >= 0 && k < l->submitted && !strcmp(l->t[k].job, job)) l->t[k].cancelled = true;
    }
  char *pending[] = {"scancel", "--state=PENDING", job, NULL};
  char *running[] = {"scancel", "--state=RUNNING", "--full", sigopt, job, NULL};
  run_capture(pending, out, sizeof out);
  run_capture(running, out, sizeof out);
}

static const char array_script[] =
    "#!/bin/bash\n"
    "# One task of a sweep's Slurm array (experiments/studies/launcher.h): the\n"
    "# command in task-K.sh (K: SLURM_ARRAY_TASK_ID), then its exit status into\n"
    "# task-K.end, which the sweep polls for.\n"
    "k=$SLURM_ARRAY_TASK_ID\n"
    "d=\n"
    "# OpenMP on the CPUs Slurm gave the task (the points run with threads=0)\n"
    "export OMP_NUM_THREADS=${SLURM_CPUS_PER_TASK:-${SLURM_CPUS_ON_NODE:-${OMP_NUM_THREADS:-1}}}\n"
    "# scancel (the sweep's Ctrl-C: --signal=INT --full) and the time limit signal\n"
    "# all of the task's processes: the program saves a checkpoint and exits (or\n"
    "# dies of it), this script lives on to write its status\n"
    "trap 'echo \"sweep: task $k: signalled\" >&2' INT TERM\n"
    ". \"$d/task-$k.sh\"\n"
    "rc=$?\n"
    "echo \"$rc\" >\"$d/task-$k.end.tmp\" && mv -f \"$d/task-$k.end.tmp\" \"$d/task-$k.end\"\n";

launcher *launcher_slurm(const slurm_options *o, char *err, size_t errlen) {
  if (mkdir(o->dir, 0777) && errno != EEXIST) {
    snprintf(err, errlen, "cannot create %s: %s", o->dir, strerror(errno));
    return NULL;
  }
  DIR *d = opendir(o->dir); /* an earlier sweep's tasks */
  for (struct dirent *e; d && (e = readdir(d));)
    if (e->d_name[0] != '.') {
      char *p = sfmt("%s/%s", o->dir, e->d_name);
      unlink(p);
      free(p);
    }
  if (d) closedir(d);
  char *path = sfmt("%s/array.sh", o->dir);
  FILE *f = fopen(path, "w");
  bool ok = f != NULL;
  if (f) { /* the script with the folder, quoted, after "d=" */
    const char *at = strstr(array_script, "d=\n");
    fwrite(array_script, 1, (size_t)(at - array_script) + 2, f);
    put_quoted(f, o->dir);
    fputs(at + 2, f);
    ok = !(ferror(f) | fclose(f)) && !chmod(path, 0755);
  }
  free(path);
  if (!ok) {
    snprintf(err, errlen, "cannot write %s/array.sh", o->dir);
    return NULL;
  }
  slurm_launcher *l = calloc(1, sizeof *l);
  l->base = (launcher){slurm_start, slurm_wait_any, slurm_signal};
  l->o = *o;
  l->o.dir = strdup(o->dir), l->o.job_name = strdup(o->job_name);
  int n = 0;
  while (o->sbatch_args && o->sbatch_args[n]) n++;
  l->sbatch_args = calloc((size_t)n + 1, sizeof *l->sbatch_args);
  for (int k = 0; k < n; k++) l->sbatch_args[k] = strdup(o->sbatch_args[k]);
  return &l->base;
}

char *slurm_array_still_queued(const char *dir) {
  char *path = sfmt("%s/job", dir);
  FILE *f = fopen(path, "r");
  free(path);
  char job[32], *found = NULL;
  while (f && !found && fscanf(f, "%31s", job) == 1) {
    if (strspn(job, "0123456789") != strlen(job)) continue;
    char *argv[] = {"squeue", "--noheader", "--jobs", job, "--format=%i", NULL}, out[4096];
    if (run_capture(argv, out, sizeof out) == 0 && out[strspn(out, " \n")]) found = strdup(job);
  }
  if (f) fclose(f);
  return found;
}
