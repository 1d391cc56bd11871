/* Shared I/O of the exmy CLI: see io.h for the error and output contract. */
#define _POSIX_C_SOURCE 200809L

#include "lib/cli/io.h"

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The temporary output file not yet renamed into place, if any.  A process
 * writes at most one output, so one slot suffices; it is a fixed array so that
 * the signal handler may unlink it (unlink is async-signal-safe). */
static char pending_temp[4096];
static volatile sig_atomic_t have_pending_temp;

static void remove_pending_temp(void) {
  if (have_pending_temp) {
    have_pending_temp = 0;
    unlink(pending_temp);
  }
}

void cli_fail(const char *fmt, ...) {
  fflush(stdout);
  fputs("exmy: ", stderr);
  va_list ap;
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  remove_pending_temp();
  exit(2);
}

void *cli_alloc(size_t bytes) {
  void *p = malloc(bytes ? bytes : 1);
  if (!p) cli_fail("out of memory (%zu bytes)", bytes);
  return p;
}

/* An interrupted run must not leave its temporary file behind either. */
static void on_fatal_signal(int sig) {
  remove_pending_temp();
  signal(sig, SIG_DFL);
  raise(sig);
}

static void catch_fatal_signals(void) {
  static const int sigs[] = {SIGINT, SIGTERM, SIGHUP};
  for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_fatal_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(sigs[i], &sa, NULL);
  }
}

/* ------------------------------------------------------------------ input */

void cli_input_open(cli_input *in, const char *path, size_t width,
                    const char *what) {
  in->path = strcmp(path, "-") == 0 ? "stdin" : path; /* as errors name it */
  in->what = what;
  in->width = width;
  in->elements = 0;
  if (strcmp(path, "-") == 0) {
    in->fp = stdin;
  } else {
    in->fp = fopen(path, "rb");
    if (!in->fp) cli_fail("cannot open %s: %s", path, strerror(errno));
  }
  struct stat st;
  if (fstat(fileno(in->fp), &st) != 0)
    cli_fail("cannot read %s: %s", path, strerror(errno));
  if (S_ISDIR(st.st_mode)) cli_fail("cannot read %s: is a directory", path);
  if (S_ISREG(st.st_mode) && (uint64_t)st.st_size % width != 0)
    cli_fail("%s: truncated input: %lld bytes is not a whole number of "
             "%zu-byte %s", path, (long long)st.st_size, width, what);
}

size_t cli_input_read(cli_input *in, void *buf, size_t max) {
  const size_t want = max * in->width;
  const size_t got = fread(buf, 1, want, in->fp);
  if (got < want && ferror(in->fp))
    cli_fail("cannot read %s: %s", in->path, strerror(errno));
  if (got % in->width != 0)
    cli_fail("%s: truncated input: %llu bytes is not a whole number of "
             "%zu-byte %s", in->path,
             (unsigned long long)(in->elements * in->width + got), in->width,
             in->what);
  in->elements += got / in->width;
  return got / in->width;
}

void cli_input_close(cli_input *in) {
  if (in->fp && in->fp != stdin) fclose(in->fp);
  in->fp = NULL;
}

/* ----------------------------------------------------------------- output */

void cli_output_open(cli_output *out, const char *path) {
  out->path = path;
  if (strcmp(path, "-") == 0) {
    out->path = "stdout"; /* as errors name it */
    out->fp = stdout;
    return;
  }
  struct stat st;
  if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
    cli_fail("cannot write %s: is a directory", path);
  /* The temporary file lives in OUT's directory: rename() is then atomic and
   * never crosses file systems. */
  const char *slash = strrchr(path, '/');
  int dir_len = slash ? (int)(slash - path) : 1;
  const char *dir = slash ? path : ".";
  if (slash == path) dir_len = 1; /* "/name" lives in "/" */
  if (snprintf(pending_temp, sizeof pending_temp, "%.*s/.exmy-tmp-XXXXXX",
               dir_len, dir) >= (int)sizeof pending_temp)
    cli_fail("cannot write %s: path too long", path);
  catch_fatal_signals();
  int fd = mkstemp(pending_temp);
  if (fd < 0) cli_fail("cannot write %s: %s", path, strerror(errno));
  have_pending_temp = 1;
  /* mkstemp makes the file 0600; give it the mode a plain creat() would. */
  mode_t mask = umask(0);
  umask(mask);
  fchmod(fd, 0666 & ~mask);
  out->fp = fdopen(fd, "wb");
  if (!out->fp) {
    close(fd);
    cli_fail("cannot write %s: %s", path, strerror(errno));
  }
}

void cli_output_write(cli_output *out, const void *buf, size_t bytes) {
  if (bytes && fwrite(buf, 1, bytes, out->fp) != bytes)
    cli_fail("cannot write %s: %s", out->path, strerror(errno));
}

void cli_output_commit(cli_output *out) {
  if (out->fp == stdout) {
    cli_stdout_finish();
    return;
  }
  /* fclose reports write errors (e.g. a full disk) that fwrite buffered. */
  int failed = fflush(out->fp) != 0 || ferror(out->fp);
  int err = errno;
  if (fclose(out->fp) != 0 && !failed) {
    failed = 1;
    err = errno;
  }
  out->fp = NULL;
  if (failed) cli_fail("cannot write %s: %s", out->path, strerror(err));
  if (rename(pending_temp, out->path) != 0)
    cli_fail("cannot write %s: %s", out->path, strerror(errno));
  have_pending_temp = 0;
}

void cli_stdout_finish(void) {
  if (fflush(stdout) != 0 || ferror(stdout))
    cli_fail("cannot write to stdout: %s", strerror(errno));
}

/* ------------------------------------------------------------ byte order */

void cli_le_swap(void *buf, size_t n, size_t width) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  unsigned char *p = buf;
  for (size_t i = 0; i < n; i++, p += width)
    for (size_t a = 0, b = width - 1; a < b; a++, b--) {
      unsigned char t = p[a];
      p[a] = p[b];
      p[b] = t;
    }
#else
  (void)buf, (void)n, (void)width; /* file order is host order */
#endif
}
