/* Token data: files, directories, llm.c shards; seeded window order. */
#include "experiments/trainer/data.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "experiments/trainer/splitmix64.h"

#define LLMC_MAGIC 20240520

static int append_file(dataset *d, const char *path, int vocab, size_t *cap, char *err,
                       size_t errlen) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    snprintf(err, errlen, "cannot open data '%s': %s", path, strerror(errno));
    return -1;
  }
  fseek(f, 0, SEEK_END);
  long size = ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *buf = malloc(size > 0 ? (size_t)size : 1);
  if (!buf || fread(buf, 1, (size_t)size, f) != (size_t)size) {
    snprintf(err, errlen, "cannot read data '%s'", path);
    fclose(f);
    free(buf);
    return -1;
  }
  fclose(f);
  int32_t header[256];
  size_t n;
  const unsigned char *body;
  int u16 = 0;
  if (size >= 1024 && (memcpy(header, buf, sizeof header), header[0] == LLMC_MAGIC)) {
    n = (size_t)header[2];
    if (1024 + 2 * n > (size_t)size) {
      snprintf(err, errlen, "llm.c shard '%s' is truncated", path);
      free(buf);
      return -1;
    }
    body = buf + 1024;
    u16 = 1;
  } else {
    n = (size_t)size;
    body = buf;
  }
  if (d->n_tokens + n > *cap) {
    *cap = 2 * (d->n_tokens + n);
    d->tokens = realloc(d->tokens, *cap * sizeof(uint16_t));
  }
  for (size_t i = 0; i < n; i++) {
    uint16_t t;
    if (u16) memcpy(&t, body + 2 * i, 2);
    else t = body[i];
    if (t >= vocab) {
      snprintf(err, errlen, "data '%s': token %u >= vocab %d (set vocab)", path, t, vocab);
      free(buf);
      return -1;
    }
    d->tokens[d->n_tokens + i] = t;
  }
  d->n_tokens += n;
  free(buf);
  return 0;
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

int dataset_load(dataset *d, const char *path, int vocab, char *err, size_t errlen) {
  memset(d, 0, sizeof *d);
  struct stat st;
  if (stat(path, &st)) {
    snprintf(err, errlen, "data '%s' not found (for Brown: run experiments/data/prepare_brown.sh)", path);
    return -1;
  }
  size_t cap = 0;
  if (!S_ISDIR(st.st_mode)) return append_file(d, path, vocab, &cap, err, errlen);
  DIR *dir = opendir(path);
  if (!dir) {
    snprintf(err, errlen, "cannot open directory '%s'", path);
    return -1;
  }
  char **names = NULL;
  size_t n = 0;
  struct dirent *e;
  while ((e = readdir(dir))) {
    if (e->d_name[0] == '.') continue;
    char full[4096];
    snprintf(full, sizeof full, "%s/%s", path, e->d_name);
    if (stat(full, &st) || !S_ISREG(st.st_mode)) continue;
    names = realloc(names, (n + 1) * sizeof *names);
    names[n++] = strdup(full);
  }
  closedir(dir);
  qsort(names, n, sizeof *names, cmp_str);
  int rc = n ? 0 : -1;
  if (!n) snprintf(err, errlen, "directory '%s' has no files", path);
  for (size_t i = 0; i < n; i++) {
    if (!rc) rc = append_file(d, names[i], vocab, &cap, err, errlen);
    free(names[i]);
  }
  free(names);
  return rc;
}

void dataset_split_tail(dataset *d, dataset *tail, double frac) {
  memset(tail, 0, sizeof *tail);
  size_t n = (size_t)(d->n_tokens * frac);
  tail->tokens = malloc((n ? n : 1) * sizeof(uint16_t));
  memcpy(tail->tokens, d->tokens + d->n_tokens - n, n * sizeof(uint16_t));
  tail->n_tokens = n;
  d->n_tokens -= n;
}

static void make_order(dataset *d) {
  for (size_t i = 0; i < d->n_windows; i++) d->order[i] = (uint32_t)i;
  if (!d->shuffle) return;
  uint64_t s = d->seed * 0x100000001B3ull + d->epoch;
  for (size_t i = d->n_windows; i > 1; i--) { /* Fisher-Yates */
    size_t j = splitmix64(&s) % i;
    uint32_t t = d->order[i - 1];
    d->order[i - 1] = d->order[j];
    d->order[j] = t;
  }
}

int dataset_start(dataset *d, int T, uint64_t seed, int shuffle, char *err, size_t errlen) {
  d->T = T;
  d->n_windows = d->n_tokens > (size_t)T ? (d->n_tokens - 1) / T : 0;
  if (d->n_windows == 0) {
    snprintf(err, errlen, "data too short: %zu tokens for windows of %d", d->n_tokens, T + 1);
    return -1;
  }
  free(d->order);
  d->order = malloc(d->n_windows * sizeof(uint32_t));
  if (!d->order) {
    snprintf(err, errlen, "out of memory for %zu data windows", d->n_windows);
    return -1;
  }
  d->seed = seed;
  d->shuffle = shuffle;
  dataset_seek(d, 0, 0);
  return 0;
}

void dataset_seek(dataset *d, uint64_t epoch, uint64_t index) {
  d->epoch = epoch;
  d->index = index;
  make_order(d);
}

void dataset_next_batch(dataset *d, int B, int *inputs, int *targets) {
  const int T = d->T;
  for (int b = 0; b < B; b++) {
    if (d->index >= d->n_windows) dataset_seek(d, d->epoch + 1, 0);
    const uint16_t *w = d->tokens + (size_t)d->order[d->index++] * T;
    for (int t = 0; t < T; t++) {
      inputs[b * T + t] = w[t];
      targets[b * T + t] = w[t + 1];
    }
  }
}

void dataset_free(dataset *d) {
  free(d->tokens);
  free(d->order);
  memset(d, 0, sizeof *d);
}
