/* Atomic checkpoints of the whole training state. */
#include "experiments/checkpoint.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "experiments/recipe.h"

int checkpoint_save(const char *path, const ckpt_header *h, const char *config_text,
                    const model *m, const float *mom1, const float *mom2, const tq_site *sites,
                    int n_sites) {
  char tmp[4200];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE *f = fopen(tmp, "wb");
  if (!f) return -1;
  size_t n = m->num_params;
  int ok = fwrite(h, sizeof *h, 1, f) == 1 &&
           fwrite(config_text, 1, h->config_text_len, f) == h->config_text_len &&
           fwrite(m->params_mem, sizeof(float), n, f) == n &&
           fwrite(mom1, sizeof(float), n, f) == n && fwrite(mom2, sizeof(float), n, f) == n &&
           sites_state_write(sites, n_sites, f) == 0;
  ok = ok && fflush(f) == 0 && fsync(fileno(f)) == 0;
  ok = (fclose(f) == 0) && ok;
  if (!ok || rename(tmp, path) != 0) {
    unlink(tmp);
    return -1;
  }
  char dir[4200];
  snprintf(dir, sizeof dir, "%s", path);
  int fd = open(dirname(dir), O_RDONLY);
  if (fd >= 0) {
    fsync(fd);
    close(fd);
  }
  return 0;
}

int checkpoint_load(const char *path, ckpt_header *h, model *m, float *mom1, float *mom2,
                    tq_site *sites, int n_sites, char *err, size_t errlen) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    snprintf(err, errlen, "cannot open checkpoint '%s': %s", path, strerror(errno));
    return -1;
  }
  int rc = -1;
  if (fread(h, sizeof *h, 1, f) != 1 || memcmp(h->magic, CKPT_MAGIC, 8) ||
      h->version != CKPT_VERSION) {
    snprintf(err, errlen, "'%s' is not an exmy checkpoint (version %d)", path, CKPT_VERSION);
    goto out;
  }
  const model_config *c = &m->cfg;
  int32_t cfg[7] = {c->vocab, c->dim, c->n_layers, c->n_heads, c->n_kv_heads, c->hidden,
                    c->seq_len};
  if (memcmp(cfg, h->model_cfg, sizeof cfg) || h->num_params != m->num_params) {
    snprintf(err, errlen, "checkpoint '%s' is of another model configuration", path);
    goto out;
  }
  size_t n = m->num_params;
  if (fseek(f, h->config_text_len, SEEK_CUR) ||
      fread(m->params_mem, sizeof(float), n, f) != n || fread(mom1, sizeof(float), n, f) != n ||
      fread(mom2, sizeof(float), n, f) != n || sites_state_read(sites, n_sites, f)) {
    snprintf(err, errlen, "checkpoint '%s' is truncated or of another recipe", path);
    goto out;
  }
  rc = 0;
out:
  fclose(f);
  return rc;
}

int checkpoint_read_config(const char *path, ckpt_header *h, char **text, char *err,
                           size_t errlen) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    snprintf(err, errlen, "cannot open checkpoint '%s': %s", path, strerror(errno));
    return -1;
  }
  *text = NULL;
  if (fread(h, sizeof *h, 1, f) != 1 || memcmp(h->magic, CKPT_MAGIC, 8) ||
      h->version != CKPT_VERSION) {
    snprintf(err, errlen, "'%s' is not an exmy checkpoint (version %d)", path, CKPT_VERSION);
    fclose(f);
    return -1;
  }
  *text = malloc((size_t)h->config_text_len + 1);
  if (!*text || fread(*text, 1, h->config_text_len, f) != h->config_text_len) {
    snprintf(err, errlen, "checkpoint '%s' is truncated", path);
    free(*text);
    *text = NULL;
    fclose(f);
    return -1;
  }
  (*text)[h->config_text_len] = 0;
  fclose(f);
  return 0;
}
