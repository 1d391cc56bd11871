/*
 * Checkpoints: the parameter block, the two AdamW moment blocks and the
 * delayed-scaling states written out behind a small header (magic, version,
 * model config, step, data position, running loss minimum, resolved config
 * text).  Written atomically: a temporary file, fsync, rename, fsync of the
 * directory, so that a crash leaves the previous checkpoint intact.
 */
#ifndef EXPERIMENTS_CHECKPOINT_H
#define EXPERIMENTS_CHECKPOINT_H

#include <stdint.h>

#include "experiments/model.h"
#include "experiments/qgemm.h"

#define CKPT_MAGIC "EXMYCKPT"
#define CKPT_VERSION 1

typedef struct {
  char magic[8];
  uint32_t version;
  uint32_t config_text_len;
  int32_t model_cfg[7]; /* vocab, dim, n_layers, n_heads, n_kv_heads, hidden, seq_len */
  int32_t pad;
  uint64_t num_params;
  int64_t step;         /* optimizer steps done */
  uint64_t data_epoch, data_index;
  double running_min;   /* of the training loss, for divergence detection */
  double tokens_seen;
} ckpt_header;

int checkpoint_save(const char *path, const ckpt_header *h, const char *config_text,
                    const model *m, const float *mom1, const float *mom2, const tq_site *sites,
                    int n_sites);
/* Loads into an initialised model/moments/sites of the same configuration.
 * The delayed-scaling states are read into `sites` (n_sites 0: not read, the
 * sites keep theirs: how a run resumes under another recipe).
 * 0, or -1 with a message. */
int checkpoint_load(const char *path, ckpt_header *h, model *m, float *mom1, float *mom2,
                    tq_site *sites, int n_sites, char *err, size_t errlen);

/* The header and the resolved config text stored in a checkpoint (*text:
 * malloc'd, NUL-terminated).  0, or -1 with a message. */
int checkpoint_read_config(const char *path, ckpt_header *h, char **text, char *err,
                           size_t errlen);

#endif /* EXPERIMENTS_CHECKPOINT_H */
