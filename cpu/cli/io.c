/* Shared I/O of the exmy CLI: see io.h for the error and output contract. */
#define _XOPEN_SOURCE 700 /* realpath, mkstemp, fchown */

#include "cpu/cli/io.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lib/one_line.h"

/* The temporary output file not yet renamed into place, if any.  A process
 * writes at most one output, so one slot suffices; it is a fixed array so that
 * the signal handler may unlink it (unlink is async-signal-safe). */
static char pending_temp[4096];
static volatile sig_atomic_t have_pending_temp;
/* The file the temporary one replaces (OUT, or where OUT links to). */
static char pending_target[4096];
/* What cli_fail closes and frees: the open input and output streams, and the
 * blocks of cli_alloc. */
static FILE *open_streams[2];
static void *blocks[8];

void (*cli_fail_hook)(void);

static void remove_pending_temp(void) {
  if (have_pending_temp) {
    have_pending_temp = 0;
    unlink(pending_temp);
  }
}

static void track_stream(FILE *f, int on) {
  for (size_t i = 0; i < sizeof open_streams / sizeof *open_streams; i++)
    if (on ? !open_streams[i] : open_streams[i] == f) {
      open_streams[i] = on ? f : NULL;
      return;
    }
}

void cli_fail(const char *fmt, ...) {
  fflush(stdout);
  va_list ap;
  va_start(ap, fmt);
  exmy_vprint_line("exmy", fmt, ap);
  va_end(ap);
  for (size_t i = 0; i < sizeof open_streams / sizeof *open_streams; i++)
    if (open_streams[i]) {
      fclose(open_streams[i]);
      open_streams[i] = NULL;
    }
  remove_pending_temp();
  for (size_t i = 0; i < sizeof blocks / sizeof *blocks; i++) {
    free(blocks[i]);
    blocks[i] = NULL;
  }
  if (cli_fail_hook) cli_fail_hook();
  exit(2);
}

static void **block_slot(void *p) {
  for (size_t i = 0; i < sizeof blocks / sizeof *blocks; i++)
    if (blocks[i] == p) return &blocks[i];
  return NULL;
}

void *cli_alloc(size_t bytes) { return cli_realloc(NULL, bytes); }

void *cli_realloc(void *p, size_t bytes) {
  void **slot = block_slot(p);
  if (!slot) cli_fail("internal error: more than 8 blocks");
  void *q = realloc(p, bytes ? bytes : 1);
  if (!q) cli_fail("out of memory (%zu bytes)", bytes);
  *slot = q;
  return q;
}

void cli_free(void *p) {
  void **slot = p ? block_slot(p) : NULL;
  if (slot) *slot = NULL;
  free(p);
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
    track_stream(in->fp, 1);
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
  if (in->fp && in->fp != stdin) {
    track_stream(in->fp, 0);
    fclose(in->fp);
  }
  in->fp = NULL;
}

/* ----------------------------------------------------------------- output */

/* Whether we may replace the regular file st: write permission for us, and
 * (since root passes every access check) at least one write bit set. */
static int may_replace(const char *target, const struct stat *st) {
  return access(target, W_OK) == 0 && (st->st_mode & 0222);
}

void cli_output_open(cli_output *out, const char *path) {
  out->path = path;
  out->direct = 0;
  if (strcmp(path, "-") == 0) {
    out->path = "stdout"; /* as errors name it */
    out->fp = stdout;
    out->direct = 1;
    return;
  }
  struct stat lst, st;
  int exists = lstat(path, &lst) == 0;
  if (!exists && errno != ENOENT) cli_fail("cannot write %s: %s", path, strerror(errno));
  if (exists && stat(path, &st) != 0) {
    if (S_ISLNK(lst.st_mode) && errno == ENOENT)
      cli_fail("cannot write %s: a symbolic link to nothing", path);
    cli_fail("cannot write %s: %s", path, strerror(errno));
  }
  if (exists && S_ISDIR(st.st_mode)) cli_fail("cannot write %s: is a directory", path);
  if (exists && (S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode))) {
    /* a device or a pipe: written in place, never replaced */
    int fd = open(path, O_WRONLY | O_NOCTTY);
    if (fd < 0) cli_fail("cannot write %s: %s", path, strerror(errno));
    out->fp = fdopen(fd, "wb");
    if (!out->fp) {
      close(fd);
      cli_fail("cannot write %s: %s", path, strerror(errno));
    }
    track_stream(out->fp, 1);
    out->direct = 1;
    return;
  }
  if (exists && !S_ISREG(st.st_mode))
    cli_fail("cannot write %s: not a regular file, character device or FIFO", path);

  /* a regular file, or none yet: the target is where a symbolic link points */
  char *target = pending_target;
  const size_t target_size = sizeof pending_target;
  if (exists && S_ISLNK(lst.st_mode)) {
    char *real = realpath(path, NULL);
    if (!real || strlen(real) >= target_size) {
      free(real);
      cli_fail("cannot write %s: cannot resolve the symbolic link", path);
    }
    snprintf(target, target_size, "%s", real);
    free(real);
  } else if (snprintf(target, target_size, "%s", path) >= (int)target_size) {
    cli_fail("cannot write %s: path too long", path);
  }
  if (exists && st.st_nlink > 1)
    cli_fail("cannot write %s: it has %lu hard links, which replacing it would split (remove it "
             "first, or write elsewhere)", path, (unsigned long)st.st_nlink);
  if (exists && !may_replace(target, &st))
    cli_fail("cannot write %s: permission denied (the file is read-only)", path);
  /* The temporary file lives in the target's directory: rename() is then
   * atomic and never crosses file systems. */
  const char *slash = strrchr(target, '/');
  int dir_len = slash ? (int)(slash - target) : 1;
  const char *dir = slash ? target : ".";
  if (slash == target) dir_len = 1; /* "/name" lives in "/" */
  if (snprintf(pending_temp, sizeof pending_temp, "%.*s/.exmy-tmp-XXXXXX",
               dir_len, dir) >= (int)sizeof pending_temp)
    cli_fail("cannot write %s: path too long", path);
  catch_fatal_signals();
  int fd = mkstemp(pending_temp);
  if (fd < 0) cli_fail("cannot write %s: %s", path, strerror(errno));
  have_pending_temp = 1;
  if (exists) {
    /* the replacement keeps the file's permission bits (and, for root, its owner) */
    if (fchmod(fd, st.st_mode & 07777) != 0 ||
        (geteuid() == 0 && fchown(fd, st.st_uid, st.st_gid) != 0))
      cli_fail("cannot write %s: %s", path, strerror(errno));
  } else {
    /* mkstemp makes the file 0600; give it the mode a plain creat() would. */
    mode_t mask = umask(0);
    umask(mask);
    fchmod(fd, 0666 & ~mask);
  }
  out->fp = fdopen(fd, "wb");
  if (!out->fp) {
    close(fd);
    cli_fail("cannot write %s: %s", path, strerror(errno));
  }
  track_stream(out->fp, 1);
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
  track_stream(out->fp, 0);
  if (fclose(out->fp) != 0 && !failed) {
    failed = 1;
    err = errno;
  }
  out->fp = NULL;
  if (failed) cli_fail("cannot write %s: %s", out->path, strerror(err));
  if (out->direct) return;
  /* onto the target: a symbolic link's destination (the link stays) */
  if (rename(pending_temp, pending_target) != 0)
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
