/* What the libFuzzer harnesses of files share: the input as a file the code
 * under test opens by name, and the property every refusal must have. */
#ifndef EXMY_TESTS_FUZZ_FUZZ_FILE_H
#define EXMY_TESTS_FUZZ_FUZZ_FILE_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* The path of a file that holds exactly data[0..size): one memory file
 * (memfd_create, `name`) per process, rewritten at each call. */
static inline const char *as_file(const char *name, const void *data, size_t size) {
  static int fd = -1;
  static char path[64];
  if (fd < 0) {
    fd = memfd_create(name, 0);
    if (fd < 0) abort();
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  }
  if (ftruncate(fd, 0) || pwrite(fd, data, size, 0) != (ssize_t)size) abort();
  return path;
}

/* A refused input gets a message of one line, not empty: a finding otherwise. */
static inline void one_line(const char *err) {
  if (!err[0] || strchr(err, '\n')) {
    fprintf(stderr, "refused without a one-line message: '%s'\n", err);
    abort();
  }
}

#endif /* EXMY_TESTS_FUZZ_FUZZ_FILE_H */
