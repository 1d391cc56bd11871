/*
 * Checkpoints: a header (magic, version, model config, step, data position,
 * running loss minimum, section lengths and checksums), then five sections:
 * the resolved config text, the parameter block, the two AdamW moment blocks
 * and the delayed-scaling states.  Each section and the header carry a CRC32C
 * (crc32c.h); the file's length must be exactly the header's sum.
 *
 * A checkpoint is untrusted input (people share them): a reader checks the
 * header's checksum, every length against the model, the file's size, every
 * section's checksum and every field's range before it hands back anything.
 *
 * Written atomically: a temporary file (PATH.tmp), fsync, rename, fsync of the
 * directory, so that a crash or a full disk leaves the previous checkpoint
 * intact; every write is checked.
 */
#ifndef EXPERIMENTS_CHECKPOINT_H
#define EXPERIMENTS_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "experiments/trainer/model.h"
#include "experiments/trainer/qgemm.h"

#define CKPT_MAGIC "EXMYCKPT"
#define CKPT_VERSION 2
/* Bounds on the sections that are not sized by the model. */
#define CKPT_MAX_CONFIG_TEXT ((uint32_t)1 << 20)
#define CKPT_MAX_STATES_BYTES ((uint64_t)1 << 30)

enum { CKPT_TEXT, CKPT_PARAMS, CKPT_MOM1, CKPT_MOM2, CKPT_STATES, CKPT_SECTIONS };

typedef struct {
  char magic[8];
  uint32_t version;
  uint32_t config_text_len;
  int32_t model_cfg[7]; /* vocab, dim, n_layers, n_heads, n_kv_heads, hidden, seq_len */
  uint32_t header_crc;  /* CRC32C of this header with header_crc = 0 */
  uint64_t num_params;
  int64_t step;         /* optimizer steps done */
  uint64_t data_epoch, data_index;
  double running_min;   /* of the training loss, for divergence detection */
  double tokens_seen;
  uint64_t states_bytes; /* length of the delayed-scaling section */
  uint64_t log_bytes;    /* length of log.jsonl when the checkpoint was taken */
  uint32_t section_crc[CKPT_SECTIONS];
  uint32_t reserved;     /* 0 */
} ckpt_header;
_Static_assert(sizeof(ckpt_header) == 136, "ckpt_header has no padding");

/* Fills h's magic, version, lengths and checksums and writes the checkpoint;
 * the caller sets model_cfg, num_params, step, data position, running_min,
 * tokens_seen and log_bytes.  0, or -1 with errno set (PATH untouched, its
 * temporary file removed). */
int checkpoint_save(const char *path, ckpt_header *h, const char *config_text,
                    const model *m, const float *mom1, const float *mom2, const tq_site *sites,
                    int n_sites);

/* Loads into an initialised model/moments/sites of the same configuration.
 * The delayed-scaling states are read into `sites` (n_sites 0: not read, the
 * sites keep theirs: how a run resumes under another recipe); their section's
 * checksum is verified either way.  0, or -1 with a one-line message: then
 * the sites and *h are as before, the parameters and moments undefined (the
 * caller stops). */
int checkpoint_load(const char *path, ckpt_header *h, model *m, float *mom1, float *mom2,
                    tq_site *sites, int n_sites, char *err, size_t errlen);

/* The header and the resolved config text stored in a checkpoint (*text:
 * malloc'd, NUL-terminated), with the header's checksum, the file's length
 * and the text's checksum verified.  0, or -1 with a message. */
int checkpoint_read_config(const char *path, ckpt_header *h, char **text, char *err,
                           size_t errlen);

/* The header's training position against the run resuming it: step within
 * 0..steps, the data position within the data set (n_windows windows of T + 1
 * tokens) and no further than tokens_seen allows, running_min not NaN.
 * 0, or -1 with a message. */
int checkpoint_check_position(const ckpt_header *h, int steps, uint64_t n_windows, int T,
                              char *err, size_t errlen);

#endif /* EXPERIMENTS_CHECKPOINT_H */
