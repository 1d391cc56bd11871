/*
 * Shared I/O of the exmy command-line tool: the one error path, chunked
 * reading of raw little-endian element files, and output files that appear
 * only when complete.
 *
 * Error contract: every failure prints ONE line "exmy: ..." on stderr, exits
 * with status 2, and leaves no output file behind.  "-" means stdin / stdout.
 * What OUT names decides how it is written:
 *   - nothing yet, or a regular file: a temporary file in the same directory,
 *     renamed into place by cli_output_commit() (an existing file keeps its
 *     permission bits); cli_fail() removes the temporary file, so an OUT that
 *     existed before a failed run is left untouched.  A read-only file, or
 *     one with other hard links (a rename would split them), is refused;
 *   - a symbolic link: what it points to, by these same rules (the link
 *     stays); a link to nothing is refused;
 *   - a character device or a FIFO (/dev/null, a pipe): written directly, as
 *     the data comes (like stdout, it cannot be taken back);
 *   - a directory, a block device or a socket: refused.
 */
#ifndef EXMY_CLI_IO_H
#define EXMY_CLI_IO_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Elements per chunk: bounds memory (a few MiB) whatever the file size.
 * (A fuzzing build sets it small, so that short inputs cross chunks.) */
#ifndef CLI_CHUNK_ELEMENTS
#define CLI_CHUNK_ELEMENTS ((size_t)1 << 20)
#endif

/* Prints "exmy: <message>" on stderr, removes the pending temporary output
 * file if any, closes the open files, frees what cli_alloc gave, and exits
 * with status 2.  The message must be a single line. */
void cli_fail(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));

/* For tests and fuzzing: when set, cli_fail calls it instead of exit(2) after
 * its cleanup; it must not return (e.g. longjmp). */
extern void (*cli_fail_hook)(void);

/* malloc / realloc that fail through cli_fail; what they give is freed by
 * cli_free, or by cli_fail.  At most 8 blocks at a time. */
void *cli_alloc(size_t bytes);
void *cli_realloc(void *p, size_t bytes);
void cli_free(void *p);

/* A file of fixed-width little-endian elements (4-byte floats or 1/2/4-byte
 * codes).  `what` names its contents in errors ("values", "codes"). */
typedef struct {
  FILE *fp;
  const char *path;   /* as given, for errors; "stdin" for "-" */
  const char *what;
  size_t width;       /* bytes per element */
  uint64_t elements;  /* elements read so far */
} cli_input;

/* Opens IN; for a regular file, checks up front that its size is a multiple
 * of `width`, so that a truncated file fails before any output is made. */
void cli_input_open(cli_input *in, const char *path, size_t width,
                    const char *what);
/* Reads up to `max` whole elements into buf (raw bytes, file order); returns
 * how many, 0 at the end.  A trailing partial element is an error. */
size_t cli_input_read(cli_input *in, void *buf, size_t max);
void cli_input_close(cli_input *in);

typedef struct {
  FILE *fp;
  const char *path;   /* as given, for errors; "stdout" for "-" */
  int direct;         /* written in place (stdout, a device, a FIFO): no rename */
} cli_output;

/* Opens OUT by the rules at the top of this file: for a regular file, creates
 * the temporary file next to its target (so that rename() stays within one
 * file system). */
void cli_output_open(cli_output *out, const char *path);
void cli_output_write(cli_output *out, const void *buf, size_t bytes);
/* Flushes and closes; for a regular file, renames the temporary file onto it. */
void cli_output_commit(cli_output *out);

/* Converts n elements of `width` bytes between file order (little-endian)
 * and host order, in place; a no-op on little-endian hosts. */
void cli_le_swap(void *buf, size_t n, size_t width);

/* Flushes stdout and fails if anything written to it was lost. */
void cli_stdout_finish(void);

#endif /* EXMY_CLI_IO_H */
