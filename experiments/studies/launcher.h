/*
 * How the sweep starts its runs and evaluations: a launcher starts a program
 * for one of the sweep's slots (0..jobs-1: the runs that go on at once) and
 * reports when one ends.  launcher_local: fork/exec/waitpid on this machine
 * (sweep --gpus sets CUDA_VISIBLE_DEVICES per slot through spec env).
 * launcher_slurm: the same argv, env and files as the tasks of a Slurm job
 * array, polled for their ends.  The sweep's schedule, skip, resume and
 * accounting are the same with both.
 */
#ifndef EXPERIMENTS_STUDIES_LAUNCHER_H
#define EXPERIMENTS_STUDIES_LAUNCHER_H

#include <stdbool.h>
#include <stddef.h>

typedef struct {
  char *const *argv;       /* argv[0]: the program's path */
  const char *const *env;  /* "NAME=VALUE" set for the program, NULL-terminated (or NULL) */
  const char *out, *err;   /* files for stdout and stderr (NULL: the sweep's own) */
  bool append;             /* append to them (a resumed run), else truncate */
  int slot;                /* which of the jobs slots runs it */
} launch_spec;

typedef struct launcher launcher;
struct launcher {
  /* Starts spec: a handle > 0, or -1 (nothing started). */
  long (*start)(launcher *self, const launch_spec *spec);
  /* Waits until a started program ends: its handle and its status as a shell
   * gives it (the exit code, 128 + N when killed by signal N; 127 when the
   * program could not be found, 126 when it could not be run; -1 when it
   * never started: a queued one cancelled by signal()).  -1 when none
   * is running, or when a signal interrupted the wait (errno EINTR), or when
   * nothing ended within one poll of a launcher that polls (errno ETIMEDOUT:
   * the caller may look at the results so far and wait again). */
  long (*wait_any)(launcher *self, int *status);
  /* Sends signal sig to a started program. */
  void (*signal)(launcher *self, long handle, int sig);
};

launcher *launcher_local(void);

/* Slurm: start() writes the program's command into dir/task-K.sh (K counts
 * the starts from 0); the first wait_any after starts submits those tasks as
 * one job array, `sbatch --array=FIRST-LAST[%max_running] SBATCH_ARGS
 * dir/array.sh`, whose task K sources task-K.sh and writes the program's
 * exit status into dir/task-K.end.  wait_any then reports the tasks whose
 * .end appeared, polling every poll_s seconds; a task that squeue no longer
 * lists without having written its .end (cancelled while pending, killed by
 * the node's end) ends with 137 and a line in its err file.  signal()
 * cancels the array's pending tasks (they end with status -1, never started)
 * and sends sig to its running ones (scancel --full: the program gets it,
 * saves a checkpoint, and its exit status is still written).  The folder must be on a file system the
 * cluster's nodes share. */
typedef struct {
  const char *dir;                  /* the array's files (created; emptied) */
  const char *job_name;             /* sbatch --job-name */
  int max_running;                  /* %max_running; 0: as many as Slurm allows */
  const char *const *sbatch_args;   /* more sbatch arguments, NULL-terminated */
  int poll_s;                       /* seconds between polls */
} slurm_options;

/* NULL, with one line in err, when dir cannot be prepared. */
launcher *launcher_slurm(const slurm_options *options, char *err, size_t errlen);

/* The job id of the array an earlier sweep left in dir/job when squeue still
 * lists a task of it (malloc'ed), else NULL. */
char *slurm_array_still_queued(const char *dir);

/* Runs spec with l and waits for it: its status as wait_any gives it. */
int launch_and_wait(launcher *l, const launch_spec *spec);

#endif /* EXPERIMENTS_STUDIES_LAUNCHER_H */
