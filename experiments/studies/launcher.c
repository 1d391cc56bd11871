/* Launchers (launcher.h): the local one. */
#include "experiments/studies/launcher.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* In the child: fd onto path, or exit 126 with a message on stderr. */
static void redirect(int fd, const char *path, bool append) {
  if (!path) return;
  const int f = open(path, O_WRONLY | O_CREAT | (append ? O_APPEND : O_TRUNC) | O_CLOEXEC, 0644);
  if (f < 0 || dup2(f, fd) < 0) {
    dprintf(2, "sweep: cannot open '%s': %s\n", path, strerror(errno));
    _exit(126);
  }
  close(f);
}

static long local_start(launcher *self, const launch_spec *spec) {
  (void)self;
  fflush(NULL); /* nothing buffered twice */
  const pid_t pid = fork();
  if (pid != 0) return pid > 0 ? pid : -1;
  signal(SIGINT, SIG_DFL);
  signal(SIGTERM, SIG_DFL);
  redirect(2, spec->err, spec->append);
  redirect(1, spec->out, spec->append);
  for (const char *const *e = spec->env; e && *e; e++) putenv((char *)*e);
  execv(spec->argv[0], spec->argv);
  const int e = errno;
  dprintf(2, "sweep: cannot run '%s': %s\n", spec->argv[0], strerror(e));
  _exit(e == ENOENT || e == ENOTDIR ? 127 : 126);
}

static long local_wait_any(launcher *self, int *status) {
  (void)self;
  int ws;
  const pid_t pid = waitpid(-1, &ws, 0);
  if (pid < 0) return -1;
  *status = WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
  return pid;
}

static void local_signal(launcher *self, long handle, int sig) {
  (void)self;
  kill((pid_t)handle, sig);
}

launcher *launcher_local(void) {
  static launcher l = {local_start, local_wait_any, local_signal};
  return &l;
}

int launch_and_wait(launcher *l, const launch_spec *spec) {
  const long h = l->start(l, spec);
  if (h < 0) return 126;
  int status;
  for (;;) {
    const long got = l->wait_any(l, &status);
    if (got == h) return status;
    if (got < 0 && errno != EINTR && errno != ETIMEDOUT) return 126;
  }
}
