/*
 * Shared I/O of the exmy command-line tool: the one error path, chunked
 * reading of raw little-endian element files, and output files that appear
 * only when complete.
 *
 * Error contract: every failure prints ONE line "exmy: ..." on
 * stderr, exits with status 2, and leaves no output file behind.  Output to a
 * path goes to a temporary file in the same directory, renamed into place by
 * cli_output_commit(); cli_fail() removes that temporary file, so an OUT that
 * existed before a failed run is left untouched.  "-" means stdin / stdout;
 * stdout is written as the data comes (it cannot be taken back).
 */
#ifndef EXMY_CLI_IO_H
#define EXMY_CLI_IO_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Elements per chunk: bounds memory (a few MiB) whatever the file size. */
#define CLI_CHUNK_ELEMENTS ((size_t)1 << 20)

/* Prints "exmy: <message>" on stderr, removes the pending temporary output
 * file if any, exits with status 2.  The message must be a single line. */
void cli_fail(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));

/* malloc that fails through cli_fail. */
void *cli_alloc(size_t bytes);

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
} cli_output;

/* "-": stdout.  Otherwise creates the temporary file next to `path`
 * (so that rename() stays within one file system). */
void cli_output_open(cli_output *out, const char *path);
void cli_output_write(cli_output *out, const void *buf, size_t bytes);
/* Flushes and closes; for a path, renames the temporary file onto it. */
void cli_output_commit(cli_output *out);

/* Converts n elements of `width` bytes between file order (little-endian)
 * and host order, in place; a no-op on little-endian hosts. */
void cli_le_swap(void *buf, size_t n, size_t width);

/* Flushes stdout and fails if anything written to it was lost. */
void cli_stdout_finish(void);

#endif /* EXMY_CLI_IO_H */
