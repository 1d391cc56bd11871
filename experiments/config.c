/* The configuration keys, their defaults and meanings. */
#include "experiments/config.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  const char *key, *def, *help;
} config_key;

static const config_key keys[] = {
    /* model */
    {"size", "tiny", "named size: test | tiny | small | 120m | 120m-32k (the fields below override it when > 0)"},
    {"vocab", "0", "vocabulary size (256 for byte-level data)"},
    {"dim", "0", "model width C"},
    {"n_layers", "0", "number of blocks L"},
    {"n_heads", "0", "attention heads"},
    {"n_kv_heads", "0", "key/value heads (< n_heads: grouped-query attention)"},
    {"hidden", "0", "SwiGLU hidden size"},
    {"seq_len", "0", "context length T"},
    /* data */
    {"data", "data/brown/train.u8", "training data: a text/byte file, a directory of them, or llm.c .bin shards"},
    {"val_data", "data/brown/val.u8", "validation data (empty: the last 5% of the training data)"},
    /* training */
    {"batch_size", "16", "sequences per micro-batch"},
    {"grad_accum", "1", "micro-batches per optimizer step"},
    {"steps", "1000", "optimizer steps"},
    {"lr", "1e-3", "peak learning rate"},
    {"warmup", "100", "linear warmup steps"},
    {"min_lr_frac", "0.1", "cosine decay ends at lr * min_lr_frac"},
    {"weight_decay", "0.1", "AdamW weight decay, on matrices only"},
    {"beta1", "0.9", "AdamW beta1"},
    {"beta2", "0.95", "AdamW beta2"},
    {"adam_eps", "1e-8", "AdamW epsilon"},
    {"grad_clip", "1.0", "global gradient-norm clipping (0: off)"},
    {"seed", "1337", "seed of the initialisation, the data order and stochastic rounding"},
    {"val_every", "100", "validation every K steps (0: only at the end)"},
    {"val_batches", "8", "micro-batches of validation"},
    {"ckpt_every", "200", "checkpoint every K steps (0: only at the end and on SIGINT)"},
    {"ckpt_keep", "0", "also keep each periodic checkpoint, and the initial model, as ckpt-STEP.bin (hard links: for sharpness and shadow checks)"},
    {"stop_at", "0", "stop after this optimizer step (0: run to `steps`); the schedule still follows `steps` (a shadow check's continuation)"},
    {"stats_every", "100", "quantization statistics in the log every K steps (0: never)"},
    {"diverge_delta", "2.0", "divergence: loss above its running minimum by this many nats (0: only non-finite)"},
    {"threads", "0", "OpenMP threads (0: default)"},
    {"run_dir", "", "output directory (default experiments/runs/<recipe>-<size>-s<seed>)"},
    {"progress", "1", "live progress line on stderr"},
    {"interrupt_at", "0", "testing: raise SIGINT after this step"},
    {"device", "cpu", "cpu | gpu (CUDA: the same model, recipes, logs and checkpoints)"},
    {"attention_kernel", "materialized", "gpu: materialized (scores stored, every product through the recipe, as on the CPU) | flash (fused bf16 kernel)"},
    /* precision recipe: every key from here to the end of the table (`--recipe FILE` resets them) */
    {"recipe", "fp32", "recipe name (informational)"},
    {"format_w", "fp32", "format of weights in GEMMs (fp32: not quantized)"},
    {"format_a", "fp32", "format of activations in GEMMs"},
    {"format_g", "fp32", "format of output gradients in GEMMs"},
    {"rounding", "rne", "rounding of all roles: rne | rna | rz | ru | rd | ro | sr"},
    {"rounding_w", "", "rounding of weights (empty: `rounding`)"},
    {"rounding_a", "", "rounding of activations (empty: `rounding`)"},
    {"rounding_g", "", "rounding of gradients (empty: `rounding`)"},
    {"sr_bits", "0", "stochastic rounding: random bits (0: 32)"},
    {"saturate", "0", "out-of-range values become +-max instead of inf/NaN"},
    {"flush_subnormals", "0", "treat the formats as having no subnormals"},
    {"scaling", "none", "none | tensor (current) | delayed | mx"},
    {"margin", "0", "tensor/delayed: scale times 2^-margin"},
    {"amax_history", "16", "delayed: amax history length (1..1024)"},
    {"pow2_scale", "0", "tensor/delayed: scale rounded down to a power of two"},
    {"mx_block", "32", "mx: block size along the reduction dimension"},
    {"quant_attention", "0", "also quantize the attention products Q K^T and P V (activation format)"},
    {"quant_lm_head", "0", "also quantize the LM head's GEMMs"},
    {"high_precision_first_last", "0", "keep the first and last blocks in format `high_format`"},
    {"high_format", "fp32", "format of the first and last blocks when kept in higher precision"},
    {"grad_format", "fp32", "weight gradients of the quantized linear layers (each layer's matrix, the LM head if quantized) rounded rne into this format with per-tensor current scaling before clipping and AdamW, as MS-AMP O1 stores them (fp32: off; CPU only)"},
    /* optimizer states */
    {"moments", "fp32", "AdamW moments: fp32 | coat (stored quantized, per-group scaling)"},
    {"moment1_format", "e4m3", "coat: format of the first moment"},
    {"moment2_format", "e4m3", "coat: format of the second moment (e4m3 or e5m2)"},
    {"moment_group", "128", "coat: group size"},
    {"moment_dre", "1", "coat: dynamic range expansion"},
};
enum { NKEYS = sizeof keys / sizeof keys[0] };
_Static_assert(NKEYS <= CONFIG_MAX_KEYS, "raise CONFIG_MAX_KEYS");

static int key_index(const char *key) {
  for (int i = 0; i < NKEYS; i++)
    if (!strcmp(keys[i].key, key)) return i;
  return -1;
}

void config_defaults(config *c) {
  memset(c, 0, sizeof *c);
  for (int i = 0; i < NKEYS; i++) snprintf(c->values[i], CONFIG_VALUE_LEN, "%s", keys[i].def);
}

int config_set(config *c, const char *key, const char *value, char *err, size_t errlen) {
  int i = key_index(key);
  if (i < 0) {
    snprintf(err, errlen, "unknown config key '%s'", key);
    return -1;
  }
  if (strlen(value) >= CONFIG_VALUE_LEN) {
    snprintf(err, errlen, "value of '%s' too long", key);
    return -1;
  }
  snprintf(c->values[i], CONFIG_VALUE_LEN, "%s", value);
  return 0;
}

static char *trim(char *s) {
  while (isspace((unsigned char)*s)) s++;
  char *e = s + strlen(s);
  while (e > s && isspace((unsigned char)e[-1])) *--e = 0;
  return s;
}

int config_set_assignment(config *c, const char *assignment, char *err, size_t errlen) {
  char buf[2 * CONFIG_VALUE_LEN];
  snprintf(buf, sizeof buf, "%s", assignment);
  char *eq = strchr(buf, '=');
  if (!eq) {
    snprintf(err, errlen, "expected key=value, got '%s'", assignment);
    return -1;
  }
  *eq = 0;
  return config_set(c, trim(buf), trim(eq + 1), err, errlen);
}

static int load_stream(config *c, FILE *f, const char *name, char *err, size_t errlen) {
  char line[2 * CONFIG_VALUE_LEN];
  int lineno = 0;
  while (fgets(line, sizeof line, f)) {
    lineno++;
    char *hash = strchr(line, '#');
    if (hash) *hash = 0;
    char *s = trim(line);
    if (!*s) continue;
    char msg[256];
    if (config_set_assignment(c, s, msg, sizeof msg)) {
      snprintf(err, errlen, "%s:%d: %s", name, lineno, msg);
      return -1;
    }
  }
  return 0;
}

int config_load_file(config *c, const char *path, char *err, size_t errlen) {
  FILE *f = fopen(path, "r");
  if (!f) {
    snprintf(err, errlen, "cannot open config '%s': %s", path, strerror(errno));
    return -1;
  }
  int rc = load_stream(c, f, path, err, errlen);
  fclose(f);
  return rc;
}

int config_load_text(config *c, const char *text, char *err, size_t errlen) {
  FILE *f = fmemopen((void *)text, strlen(text) ? strlen(text) : 1, "r");
  if (!f) {
    snprintf(err, errlen, "cannot read config text");
    return -1;
  }
  int rc = load_stream(c, f, "(checkpoint config)", err, errlen);
  fclose(f);
  return rc;
}

void config_write(const config *c, FILE *f) {
  for (int i = 0; i < NKEYS; i++) fprintf(f, "%s = %s\n", keys[i].key, c->values[i]);
}

static int first_recipe_key(void) {
  for (int i = 0; i < NKEYS; i++)
    if (!strcmp(keys[i].key, "recipe")) return i;
  return NKEYS;
}

void config_reset_recipe(config *c) {
  for (int i = first_recipe_key(); i < NKEYS; i++)
    snprintf(c->values[i], CONFIG_VALUE_LEN, "%s", keys[i].def);
}

const char *config_recipe_diff(const config *a, const config *b) {
  for (int i = first_recipe_key() + 1; i < NKEYS; i++) /* + 1: the name is informational */
    if (strcmp(a->values[i], b->values[i])) return keys[i].key;
  return NULL;
}

const char *config_str(const config *c, const char *key) {
  int i = key_index(key);
  if (i < 0) {
    fprintf(stderr, "internal error: config key '%s'\n", key);
    exit(1);
  }
  return c->values[i];
}

static int only_space(const char *s) {
  while (isspace((unsigned char)*s)) s++;
  return *s == 0;
}

long config_int(const config *c, const char *key, char *err, size_t errlen) {
  const char *s = config_str(c, key);
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || end == s || !only_space(end)) {
    if (!*err) snprintf(err, errlen, "config key '%s': not an integer: '%s'", key, s);
    return 0;
  }
  return v;
}

double config_double(const config *c, const char *key, char *err, size_t errlen) {
  const char *s = config_str(c, key);
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || end == s || !only_space(end)) {
    if (!*err) snprintf(err, errlen, "config key '%s': not a number: '%s'", key, s);
    return 0;
  }
  return v;
}
