/* mkdir -p: path and every missing parent, with mode (less the umask).  0,
 * or -1 with errno set (ENAMETOOLONG for a path longer than PATH_MAX, which
 * a truncated copy would turn into another directory). */
#ifndef EXPERIMENTS_TRAINER_MKDIR_P_H
#define EXPERIMENTS_TRAINER_MKDIR_P_H

#include <errno.h>
#include <limits.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>

static inline int mkdir_p(const char *path, mode_t mode) {
  char buf[PATH_MAX];
  const size_t n = strlen(path);
  if (n >= sizeof buf) {
    errno = ENAMETOOLONG;
    return -1;
  }
  memcpy(buf, path, n + 1);
  for (char *p = buf + 1; *p; p++)
    if (*p == '/') {
      *p = 0;
      if (mkdir(buf, mode) && errno != EEXIST) return -1;
      *p = '/';
    }
  return mkdir(buf, mode) && errno != EEXIST ? -1 : 0;
}

#endif /* EXPERIMENTS_TRAINER_MKDIR_P_H */
