/* Atomic, checksummed checkpoints of the whole training state (checkpoint.h). */
#include "experiments/trainer/checkpoint.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "experiments/trainer/crc32c.h"
#include "experiments/trainer/recipe.h"

static const char *const section_names[CKPT_SECTIONS] = {
    "config text", "parameters", "first moments", "second moments", "delayed-scaling states"};

static uint32_t header_crc(const ckpt_header *h) {
  ckpt_header c = *h;
  c.header_crc = 0;
  return crc32c(0, &c, sizeof c);
}

static int write_all(FILE *f, const void *p, size_t n) {
  return n == 0 || fwrite(p, 1, n, f) == n ? 0 : -1;
}

int checkpoint_save(const char *path, ckpt_header *h, const char *config_text,
                    const model *m, const float *mom1, const float *mom2, const tq_site *sites,
                    int n_sites) {
  char *states = NULL;
  size_t states_len = 0;
  FILE *ms = open_memstream(&states, &states_len);
  if (!ms) return -1;
  int ok = sites_state_write(sites, n_sites, ms) == 0;
  ok = fclose(ms) == 0 && ok;
  if (!ok) {
    free(states);
    errno = ENOMEM;
    return -1;
  }
  const size_t n = m->num_params, text_len = strlen(config_text);
  memcpy(h->magic, CKPT_MAGIC, 8);
  h->version = CKPT_VERSION;
  h->config_text_len = (uint32_t)text_len;
  h->num_params = n;
  h->states_bytes = states_len;
  h->reserved = 0;
  h->section_crc[CKPT_TEXT] = crc32c(0, config_text, text_len);
  h->section_crc[CKPT_PARAMS] = crc32c(0, m->params_mem, n * sizeof(float));
  h->section_crc[CKPT_MOM1] = crc32c(0, mom1, n * sizeof(float));
  h->section_crc[CKPT_MOM2] = crc32c(0, mom2, n * sizeof(float));
  h->section_crc[CKPT_STATES] = crc32c(0, states, states_len);
  h->header_crc = header_crc(h);

  char tmp[4200];
  if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp) {
    free(states);
    errno = ENAMETOOLONG;
    return -1;
  }
  FILE *f = fopen(tmp, "wb");
  if (!f) {
    free(states);
    return -1;
  }
  ok = write_all(f, h, sizeof *h) == 0 && write_all(f, config_text, text_len) == 0 &&
       write_all(f, m->params_mem, n * sizeof(float)) == 0 &&
       write_all(f, mom1, n * sizeof(float)) == 0 && write_all(f, mom2, n * sizeof(float)) == 0 &&
       write_all(f, states, states_len) == 0 && fflush(f) == 0 && fsync(fileno(f)) == 0;
  int saved = errno;
  if (fclose(f) != 0 && ok) {
    ok = 0;
    saved = errno;
  }
  free(states);
  if (ok && rename(tmp, path) != 0) {
    ok = 0;
    saved = errno;
  }
  if (!ok) {
    unlink(tmp);
    errno = saved;
    return -1;
  }
  /* the rename itself must reach the disk before the run goes on */
  char dir[4200];
  snprintf(dir, sizeof dir, "%s", path);
  int fd = open(dirname(dir), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return -1;
  ok = fsync(fd) == 0;
  saved = errno;
  close(fd);
  errno = saved;
  return ok ? 0 : -1;
}

/* Opens PATH and checks its header: magic, version, checksum, the section
 * lengths within bounds and the file's size exactly their sum. */
static FILE *open_checked(const char *path, ckpt_header *h, char *err, size_t errlen) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    snprintf(err, errlen, "cannot open checkpoint '%s': %s", path, strerror(errno));
    return NULL;
  }
  struct stat st;
  if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
    snprintf(err, errlen, "checkpoint '%s' is not a regular file", path);
    goto fail;
  }
  if (fread(h, sizeof *h, 1, f) != 1 || memcmp(h->magic, CKPT_MAGIC, 8)) {
    snprintf(err, errlen, "'%s' is not an exmy checkpoint", path);
    goto fail;
  }
  if (h->version != CKPT_VERSION) {
    snprintf(err, errlen, "checkpoint '%s' has format version %u; this trainer reads version %d "
             "(earlier versions carry no checksums and are not read)", path, h->version,
             CKPT_VERSION);
    goto fail;
  }
  if (h->header_crc != header_crc(h) || h->reserved != 0) {
    snprintf(err, errlen, "checkpoint '%s' is corrupt: its header fails its checksum", path);
    goto fail;
  }
  /* the header is as written; the lengths it holds must still be sane */
  const uint64_t size = (uint64_t)st.st_size, head = sizeof *h;
  if (h->config_text_len > CKPT_MAX_CONFIG_TEXT || h->states_bytes > CKPT_MAX_STATES_BYTES ||
      h->num_params > size / (3 * sizeof(float)) ||
      size != head + h->config_text_len + 3 * sizeof(float) * h->num_params + h->states_bytes) {
    snprintf(err, errlen, "checkpoint '%s' is corrupt: %llu bytes, not the length its header "
             "gives (truncated or extended)", path, (unsigned long long)size);
    goto fail;
  }
  return f;
fail:
  fclose(f);
  return NULL;
}

/* The config text section, checked: its checksum, no NUL byte inside. */
static char *read_text(FILE *f, const ckpt_header *h, const char *path, char *err,
                       size_t errlen) {
  char *text = malloc((size_t)h->config_text_len + 1);
  if (!text) {
    snprintf(err, errlen, "out of memory reading checkpoint '%s'", path);
    return NULL;
  }
  if (fread(text, 1, h->config_text_len, f) != h->config_text_len) {
    snprintf(err, errlen, "cannot read checkpoint '%s'", path);
  } else if (crc32c(0, text, h->config_text_len) != h->section_crc[CKPT_TEXT] ||
             memchr(text, 0, h->config_text_len)) {
    snprintf(err, errlen, "checkpoint '%s' is corrupt: %s fails its checksum", path,
             section_names[CKPT_TEXT]);
  } else {
    text[h->config_text_len] = 0;
    return text;
  }
  free(text);
  return NULL;
}

/* Reads n floats into dst, verifying the section's checksum. */
static int read_section(FILE *f, float *dst, size_t n, uint32_t want, const char *path,
                        const char *name, char *err, size_t errlen) {
  uint32_t crc = 0;
  const size_t chunk = (size_t)1 << 20;
  for (size_t i = 0; i < n; i += chunk) {
    const size_t k = n - i < chunk ? n - i : chunk;
    if (fread(dst + i, sizeof(float), k, f) != k) {
      snprintf(err, errlen, "cannot read checkpoint '%s'", path);
      return -1;
    }
    crc = crc32c(crc, dst + i, k * sizeof(float));
  }
  if (crc != want) {
    snprintf(err, errlen, "checkpoint '%s' is corrupt: %s fail their checksum", path, name);
    return -1;
  }
  return 0;
}

static int check_scalars(const ckpt_header *h, const char *path, char *err, size_t errlen) {
  if (h->step < 0 || h->step > INT32_MAX || !(h->tokens_seen >= 0) || !isfinite(h->tokens_seen) ||
      isnan(h->running_min)) {
    snprintf(err, errlen, "checkpoint '%s' holds an invalid position (step %lld, tokens %g, "
             "running minimum %g)", path, (long long)h->step, h->tokens_seen, h->running_min);
    return -1;
  }
  return 0;
}

int checkpoint_load(const char *path, ckpt_header *hout, model *m, float *mom1, float *mom2,
                    tq_site *sites, int n_sites, char *err, size_t errlen) {
  ckpt_header h;
  FILE *f = open_checked(path, &h, err, errlen);
  if (!f) return -1;
  int rc = -1;
  char *text = NULL;
  unsigned char *states = NULL;
  const model_config *c = &m->cfg;
  const int32_t cfg[7] = {c->vocab, c->dim, c->n_layers, c->n_heads, c->n_kv_heads, c->hidden,
                          c->seq_len};
  if (memcmp(cfg, h.model_cfg, sizeof cfg) || h.num_params != m->num_params) {
    snprintf(err, errlen, "checkpoint '%s' is of another model configuration", path);
    goto out;
  }
  if (check_scalars(&h, path, err, errlen)) goto out;
  const size_t n = m->num_params;
  if (!(text = read_text(f, &h, path, err, errlen)) ||
      read_section(f, m->params_mem, n, h.section_crc[CKPT_PARAMS], path,
                   section_names[CKPT_PARAMS], err, errlen) ||
      read_section(f, mom1, n, h.section_crc[CKPT_MOM1], path, section_names[CKPT_MOM1], err,
                   errlen) ||
      read_section(f, mom2, n, h.section_crc[CKPT_MOM2], path, section_names[CKPT_MOM2], err,
                   errlen))
    goto out;
  states = malloc(h.states_bytes ? h.states_bytes : 1);
  if (!states) {
    snprintf(err, errlen, "out of memory reading checkpoint '%s'", path);
    goto out;
  }
  if (fread(states, 1, h.states_bytes, f) != h.states_bytes) {
    snprintf(err, errlen, "cannot read checkpoint '%s'", path);
    goto out;
  }
  if (crc32c(0, states, h.states_bytes) != h.section_crc[CKPT_STATES]) {
    snprintf(err, errlen, "checkpoint '%s' is corrupt: %s fail their checksum", path,
             section_names[CKPT_STATES]);
    goto out;
  }
  char msg[256];
  if (n_sites > 0 && sites_state_load(sites, n_sites, states, h.states_bytes, msg, sizeof msg)) {
    snprintf(err, errlen, "checkpoint '%s': %s", path, msg);
    goto out;
  }
  *hout = h;
  rc = 0;
out:
  free(text);
  free(states);
  fclose(f);
  return rc;
}

int checkpoint_read_config(const char *path, ckpt_header *h, char **text, char *err,
                           size_t errlen) {
  *text = NULL;
  FILE *f = open_checked(path, h, err, errlen);
  if (!f) return -1;
  int rc = -1;
  if (!check_scalars(h, path, err, errlen) && (*text = read_text(f, h, path, err, errlen)))
    rc = 0;
  fclose(f);
  return rc;
}

int checkpoint_check_position(const ckpt_header *h, int steps, uint64_t n_windows, int T,
                              char *err, size_t errlen) {
  if (h->step < 0 || h->step > steps) {
    snprintf(err, errlen, "the checkpoint is at step %lld, outside this run's 0..%d (steps)",
             (long long)h->step, steps);
    return -1;
  }
  /* every epoch begun took at least one window of T tokens */
  if (h->data_index > n_windows || !(h->tokens_seen >= 0) ||
      (double)h->data_epoch > h->tokens_seen / T) {
    snprintf(err, errlen, "the checkpoint's data position (epoch %llu, window %llu) is outside "
             "the data (%llu windows, %.0f tokens seen)", (unsigned long long)h->data_epoch,
             (unsigned long long)h->data_index, (unsigned long long)n_windows, h->tokens_seen);
    return -1;
  }
  return 0;
}
