/* Bazel runfiles (runfiles.h). */
#include "experiments/studies/runfiles.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char *in_tree(const char *root, const char *rel) {
  if (!root || !*root) return NULL;
  const size_t n = strlen(root) + strlen(rel) + 2;
  char *p = malloc(n);
  if (!p) return NULL;
  snprintf(p, n, "%s/%s", root, rel);
  if (access(p, F_OK) == 0) return p;
  free(p);
  return NULL;
}

static char *in_manifest(const char *manifest, const char *rel) {
  FILE *f = manifest && *manifest ? fopen(manifest, "r") : NULL;
  if (!f) return NULL;
  char *line = NULL, *found = NULL;
  size_t cap = 0, n = strlen(rel);
  ssize_t len;
  while (!found && (len = getline(&line, &cap, f)) > 0) {
    if (line[len - 1] == '\n') line[--len] = 0;
    if ((size_t)len > n && !strncmp(line, rel, n) && line[n] == ' ') found = strdup(line + n + 1);
  }
  free(line);
  fclose(f);
  return found;
}

char *runfile(const char *argv0, const char *rel) {
  char *p = in_tree(getenv("RUNFILES_DIR"), rel);
  char exe[PATH_MAX + 16];
  const char *binaries[2] = {argv0, NULL};
  const ssize_t n = readlink("/proc/self/exe", exe, PATH_MAX);
  if (n > 0) exe[n] = 0, binaries[1] = exe;
  for (int i = 0; !p && i < 2; i++) {
    if (!binaries[i] || !strchr(binaries[i], '/')) continue;
    char tree[PATH_MAX + 16];
    snprintf(tree, sizeof tree, "%s.runfiles", binaries[i]);
    p = in_tree(tree, rel);
  }
  return p ? p : in_manifest(getenv("RUNFILES_MANIFEST_FILE"), rel);
}
