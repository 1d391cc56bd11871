/*
 * How the sweep starts its runs and evaluations: a launcher starts a program
 * for one of the sweep's slots (0..jobs-1: the runs that go on at once) and
 * reports when one ends.  Now: launcher_local, fork/exec/waitpid on this
 * machine.  A launcher for GPUs sets CUDA_VISIBLE_DEVICES from the slot (spec
 * env); a Slurm launcher submits the same argv and files as a job (start) and
 * polls for the ends of jobs (wait_any): the sweep's schedule, skip, resume
 * and accounting do not change.
 */
#ifndef EXPERIMENTS_STUDIES_LAUNCHER_H
#define EXPERIMENTS_STUDIES_LAUNCHER_H

#include <stdbool.h>

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
   * program could not be found, 126 when it could not be run).  -1 when none
   * is running, or when a signal interrupted the wait (errno EINTR). */
  long (*wait_any)(launcher *self, int *status);
  /* Sends signal sig to a started program. */
  void (*signal)(launcher *self, long handle, int sig);
};

launcher *launcher_local(void);

/* Runs spec with l and waits for it: its status as wait_any gives it. */
int launch_and_wait(launcher *l, const launch_spec *spec);

#endif /* EXPERIMENTS_STUDIES_LAUNCHER_H */
