/* The configuration keys: type, range, default and meaning of each. */
#include "experiments/trainer/config.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "lib/one_line.h"

typedef enum { K_STR, K_INT, K_REAL, K_CHOICE } key_type;

typedef struct {
  const char *key, *def;
  key_type type;
  double lo, hi;       /* K_INT, K_REAL: the range (K_INT: the integers within it) */
  bool open_lo, open_hi; /* K_REAL: lo < v (not <=), v < hi (not <=) */
  const char *choices; /* K_CHOICE: "a|b|c" */
  bool recipe;         /* part of the precision recipe (`--recipe FILE` resets these) */
  const char *help;
} config_key;

/* Rows: a string; an integer in [lo, hi]; a real in [lo, hi], (lo, hi] or
 * [lo, hi); a boolean (0 or 1); one of a list.  R_: a key of the precision
 * recipe. */
#define STR(k, d, h) {k, d, K_STR, 0, 0, false, false, NULL, false, h}
#define INT(k, d, lo, hi, h) {k, d, K_INT, lo, hi, false, false, NULL, false, h}
#define REAL(k, d, lo, hi, h) {k, d, K_REAL, lo, hi, false, false, NULL, false, h}
#define REAL_ABOVE(k, d, lo, hi, h) {k, d, K_REAL, lo, hi, true, false, NULL, false, h}
#define REAL_BELOW(k, d, lo, hi, h) {k, d, K_REAL, lo, hi, false, true, NULL, false, h}
#define BOOL(k, d, h) INT(k, d, 0, 1, h)
#define CHOICE(k, d, c, h) {k, d, K_CHOICE, 0, 0, false, false, c, false, h}
#define R_STR(k, d, h) {k, d, K_STR, 0, 0, false, false, NULL, true, h}
#define R_INT(k, d, lo, hi, h) {k, d, K_INT, lo, hi, false, false, NULL, true, h}
#define R_BOOL(k, d, h) R_INT(k, d, 0, 1, h)
#define R_CHOICE(k, d, c, h) {k, d, K_CHOICE, 0, 0, false, false, c, true, h}
#define STEPS_MAX 1e9 /* steps, and every count of steps */

static const config_key keys[] = {
    /* model */
    STR("size", "tiny", "named size: test | tiny | small | 120m | 120m-32k | 350m | 1b (the fields below override it when > 0)"),
    INT("vocab", "0", 0, 65536, "vocabulary size (256 for byte-level data; tokens are 16-bit)"),
    INT("dim", "0", 0, 65536, "model width C"),
    INT("n_layers", "0", 0, 4096, "number of blocks L"),
    INT("n_heads", "0", 0, 32768, "attention heads"),
    INT("n_kv_heads", "0", 0, 32768, "key/value heads (< n_heads: grouped-query attention)"),
    INT("hidden", "0", 0, 1 << 20, "SwiGLU hidden size"),
    INT("seq_len", "0", 0, 65536, "context length T"),
    /* data */
    STR("data", "data/brown/train.u8", "training data: a text/byte file, a directory of them, or llm.c .bin shards"),
    STR("val_data", "data/brown/val.u8", "validation data (empty: the last 5% of the training data)"),
    /* training */
    INT("batch_size", "16", 1, 1 << 20, "sequences per micro-batch"),
    INT("grad_accum", "1", 1, 1 << 20, "micro-batches per optimizer step"),
    INT("steps", "1000", 1, STEPS_MAX, "optimizer steps"),
    REAL("lr", "1e-3", 0, 1e6, "peak learning rate"),
    INT("warmup", "100", 0, STEPS_MAX, "linear warmup steps"),
    REAL("min_lr_frac", "0.1", 0, 1, "cosine decay ends at lr * min_lr_frac"),
    REAL("weight_decay", "0.1", 0, 1e6, "AdamW weight decay, on matrices only"),
    REAL_BELOW("beta1", "0.9", 0, 1, "AdamW beta1"),
    REAL_BELOW("beta2", "0.95", 0, 1, "AdamW beta2"),
    REAL_ABOVE("adam_eps", "1e-8", 0, 1, "AdamW epsilon"),
    REAL("grad_clip", "1.0", 0, 1e30, "global gradient-norm clipping (0: off)"),
    INT("seed", "1337", 0, 9007199254740992.0, "seed of the initialisation, the data order and stochastic rounding (0..2^53)"),
    INT("val_every", "100", 0, STEPS_MAX, "validation every K steps (0: only at the end)"),
    INT("val_batches", "8", 1, 1 << 20, "micro-batches of validation"),
    INT("ckpt_every", "200", 0, STEPS_MAX, "checkpoint every K steps (0: only at the end and on SIGINT)"),
    BOOL("ckpt_keep", "0", "also keep each periodic checkpoint, and the initial model, as ckpt-STEP.bin (hard links: for sharpness and shadow checks)"),
    INT("stop_at", "0", 0, STEPS_MAX, "stop after this optimizer step (0: run to `steps`); the schedule still follows `steps` (a shadow check's continuation)"),
    INT("stats_every", "100", 0, STEPS_MAX, "quantization statistics in the log every K steps (0: never)"),
    REAL("diverge_delta", "2.0", 0, 1e30, "divergence: loss above its running minimum by this many nats (0: only non-finite)"),
    INT("threads", "0", 0, 4096, "OpenMP threads (0: default)"),
    CHOICE("gemm", "exmy", "exmy|openblas", "float32 GEMM under the CPU trainer's products: exmy (one order of operations: the same losses on any AVX2+ x86-64 CPU and thread count) | openblas (for speed comparisons; its bits depend on the CPU and the thread count)"),
    STR("run_dir", "", "output directory (default experiments/runs/<recipe>-<size>-s<seed>)"),
    BOOL("progress", "1", "live progress line on stderr"),
    INT("interrupt_at", "0", 0, STEPS_MAX, "testing: raise SIGINT after this step"),
    INT("crash_at", "0", 0, STEPS_MAX, "testing: die by SIGKILL after this step (as a crash: nothing saved)"),
    CHOICE("device", "cpu", "cpu|gpu", "cpu | gpu (CUDA: the same model, recipes, logs and checkpoints)"),
    CHOICE("attention_kernel", "materialized", "materialized|flash", "gpu: materialized (scores stored, every product through the recipe, as on the CPU) | flash (fused bf16 kernel)"),
    INT("lean_activations", "1", 0, 2, "gpu, attention_kernel = flash: 1 keeps q, k and v for one layer, not all, ln1, ln2 and hg too where no backward GEMM reads them in float32 (MX, NVFP4, group-scaled and unquantized sites read them), and one buffer for every GEMM site's quantized dY: the same bits, less memory; under activations = bf16 hg in bf16 for one layer too, SwiGLU's backward making it again in the pass it makes anyway where hg is W2's operand as stored (one write of hg more a layer), and nothing remade where SwiGLU writes W2's operand image itself (E8Mx recipes: that image is kept); 2 keeps ln1, ln2 and hg for one layer always, recomputed in the backward where a GEMM reads them (the least memory, slower); 0 keeps every layer's"),
    BOOL("cuda_graph", "1", "gpu: replay each step's forward and backward launches from a CUDA graph (the same bits; recipes with sr, group or NVFP4 scaling, accumulation models or a few other operand kinds run eagerly, as do statistics steps: the 'CUDA graphs:' line says which)"),
    /* precision recipe (`--recipe FILE` resets these keys) */
    R_STR("recipe", "fp32", "recipe name (informational)"),
    R_STR("format_w", "fp32", "format of weights in GEMMs (fp32: not quantized)"),
    R_STR("format_a", "fp32", "format of activations in GEMMs"),
    R_STR("format_g", "fp32", "format of output gradients in GEMMs"),
    R_STR("rounding", "rne", "rounding of all roles: rne | rna | rz | ru | rd | ro | sr"),
    R_STR("rounding_w", "", "rounding of weights (empty: `rounding`)"),
    R_STR("rounding_a", "", "rounding of activations (empty: `rounding`)"),
    R_STR("rounding_g", "", "rounding of gradients (empty: `rounding`)"),
    R_INT("sr_bits", "0", 0, 32, "stochastic rounding: random bits (0: 32)"),
    R_BOOL("saturate", "0", "out-of-range values become +-max instead of inf/NaN"),
    R_BOOL("flush_subnormals", "0", "treat the formats as having no subnormals"),
    R_CHOICE("scaling", "none", "none|tensor|delayed|mx|group|nvfp4", "none | tensor (current) | delayed | mx | group (current scales per block along the reduction dimension) | nvfp4 (E4M3 block scales under a float32 tensor scale)"),
    R_INT("margin", "0", -64, 64, "tensor/delayed: scale times 2^-margin"),
    R_INT("amax_history", "16", 1, 1024, "delayed: amax history length (1..1024)"),
    R_BOOL("pow2_scale", "0", "tensor/delayed: scale rounded down to a power of two"),
    R_INT("mx_block", "32", 1, 1 << 20, "mx, group, nvfp4: block length along the reduction dimension"),
    R_INT("weight_block_rows", "1", 1, 1 << 20, "group, nvfp4: rows of the weights' blocks (1: blocks along the reduction dimension only; = mx_block: square blocks, the same values in every GEMM)"),
    R_CHOICE("wgrad_hadamard", "0", "0|16", "nvfp4: random Hadamard transform of this size along the reduction dimension of both inputs of the weight-gradient GEMM (0: off)"),
    R_INT("hadamard_seed", "1", 0, 9007199254740992.0, "nvfp4: seed of the Hadamard transform's random signs (fixed for the run)"),
    R_BOOL("quant_attention", "0", "also quantize the attention products Q K^T and P V (activation format)"),
    R_BOOL("quant_lm_head", "0", "also quantize the LM head's GEMMs"),
    R_BOOL("high_precision_first_last", "0", "keep the first and last blocks in format `high_format`"),
    R_STR("high_format", "fp32", "format of the first and last blocks when kept in higher precision"),
    R_STR("accumulate", "fp32", "how the quantized sites' GEMMs accumulate (lib/accum_core.h): fp32 | hopper (the H100's FP8 GEMM with fast accumulation: groups of 32 products aligned by their inputs' exponents, 14 bits kept, truncation) | hopper-split (the same, promoted to float32 every 128 products) | keys group:32,bits:14,sum:14,round:trunc|nearest,promote:128,align:0|1,align_to:product|inputs,kslice:N"),
    R_CHOICE("swiglu_scale", "none", "none|row", "Smooth-SwiGLU: none | row (each token's SwiGLU output divided by that row's max |h3|, the W3 branch, before the W2 GEMM, and W2's output row multiplied back by it, the scale held constant in the backward: the reference code of Fishman et al. 2024)"),
    R_CHOICE("activations", "f32", "f32|bf16", "the tensors between the GEMMs: f32 (only GEMM inputs rounded, by the formats above; every GEMM output and element-wise layer float32) | bf16 (PyTorch autocast's bf16: every GEMM output, q and k after RoPE, SwiGLU's silu and product, the attention scores and the gradients of those tensors rounded rne to bfloat16; the residual stream, the RMSNorms, the softmax and the loss float32: experiments/README.md, 'bf16 activations'); CPU and GPU"),
    R_STR("grad_format", "fp32", "weight gradients of the quantized linear layers (each layer's matrix, the LM head if quantized) rounded rne into this format with per-tensor current scaling before clipping and AdamW, as MS-AMP O1 stores them (fp32: off)"),
    /* optimizer states */
    R_CHOICE("moments", "fp32", "fp32|coat|bf16|fp8", "AdamW moments: fp32 | coat (stored quantized, per-group scaling) | bf16 (stored as bfloat16, rne) | fp8 (each parameter matrix's m and v stored in moment1_format / moment2_format, rne, under a current per-tensor scale fmax / amax; the RMSNorm gains' moments float32: Fishman et al. 2024)"),
    R_STR("moment1_format", "e4m3", "coat, fp8: format of the first moment"),
    R_STR("moment2_format", "e4m3", "coat, fp8: format of the second moment (e4m3 or e5m2)"),
    R_INT("moment_group", "128", 1, 1 << 30, "coat: group size"),
    R_BOOL("moment_dre", "1", "coat: dynamic range expansion"),
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

/* Base-10 integer: an optional '-', then digits, nothing else. */
static int parse_integer(const char *s, long long *v) {
  const char *d = s[0] == '-' ? s + 1 : s;
  if (!isdigit((unsigned char)d[0])) return -1;
  char *end;
  errno = 0;
  *v = strtoll(s, &end, 10);
  return errno || *end ? -1 : 0;
}

static int parse_real(const char *s, double *v) {
  if (!*s || isspace((unsigned char)s[0])) return -1;
  char *end;
  errno = 0;
  *v = strtod(s, &end);
  return *end || !isfinite(*v) || (errno == ERANGE && *v != 0) ? -1 : 0;
}

static bool in_choices(const char *choices, const char *v) {
  const size_t n = strlen(v);
  for (const char *p = choices; *p;) {
    const char *bar = strchr(p, '|');
    const size_t len = bar ? (size_t)(bar - p) : strlen(p);
    if (len == n && !strncmp(p, v, n)) return true;
    p += len + (bar != NULL);
  }
  return false;
}

/* Whether v is a valid value of key k; else a message in err. */
static int check_value(const config_key *k, const char *v, char *err, size_t errlen) {
  long long i;
  double r;
  switch (k->type) {
    case K_STR:
      return 0;
    case K_CHOICE:
      if (in_choices(k->choices, v)) return 0;
      snprintf(err, errlen, "config key '%s' must be one of %s, not '%s'", k->key, k->choices, v);
      return -1;
    case K_INT:
      if (!parse_integer(v, &i) && i >= k->lo && i <= k->hi) return 0;
      if (k->lo == 0 && k->hi == 1)
        snprintf(err, errlen, "config key '%s' must be 0 or 1, not '%s'", k->key, v);
      else
        snprintf(err, errlen, "config key '%s' must be an integer in %.0f..%.0f, not '%s'", k->key,
                 k->lo, k->hi, v);
      return -1;
    case K_REAL:
      if (!parse_real(v, &r) && (k->open_lo ? r > k->lo : r >= k->lo) &&
          (k->open_hi ? r < k->hi : r <= k->hi))
        return 0;
      snprintf(err, errlen, "config key '%s' must be a number in %s%g, %g%s, not '%s'", k->key,
               k->open_lo ? "(" : "[", k->lo, k->hi, k->open_hi ? ")" : "]", v);
      return -1;
  }
  return -1;
}

/* Messages quote what they were given: one line whatever it holds. */
static int one_line(char *err) {
  exmy_one_line(err);
  return -1;
}

int config_set(config *c, const char *key, const char *value, char *err, size_t errlen) {
  int i = key_index(key);
  if (i < 0) {
    snprintf(err, errlen, "unknown config key '%s'", key);
    return one_line(err);
  }
  if (strlen(value) >= CONFIG_VALUE_LEN) {
    snprintf(err, errlen, "value of '%s' too long (at most %d characters)", key,
             CONFIG_VALUE_LEN - 1);
    return -1;
  }
  if (check_value(&keys[i], value, err, errlen)) return one_line(err);
  snprintf(c->values[i], CONFIG_VALUE_LEN, "%s", value);
  return 0;
}

/* [s, e) without the blanks at either end. */
static void trim(const char **s, const char **e) {
  while (*s < *e && isspace((unsigned char)**s)) (*s)++;
  while (*e > *s && isspace((unsigned char)(*e)[-1])) (*e)--;
}

/* "key = value" (blanks around either ignored); the key's index in *index. */
static int assign(config *c, const char *a, size_t len, int *index, char *err, size_t errlen) {
  const char *end = a + len, *eq = memchr(a, '=', len);
  if (!eq) {
    snprintf(err, errlen, "expected key=value, got '%.*s'", len > 200 ? 200 : (int)len, a);
    return -1;
  }
  const char *k = a, *ke = eq, *v = eq + 1, *ve = end;
  trim(&k, &ke);
  trim(&v, &ve);
  char key[64], value[CONFIG_VALUE_LEN];
  if ((size_t)(ke - k) >= sizeof key) {
    snprintf(err, errlen, "unknown config key '%.*s...'", 60, k);
    return -1;
  }
  memcpy(key, k, (size_t)(ke - k));
  key[ke - k] = 0;
  *index = key_index(key);
  if ((size_t)(ve - v) >= sizeof value) {
    snprintf(err, errlen, "value of '%s' too long (at most %d characters)", key,
             CONFIG_VALUE_LEN - 1);
    return -1;
  }
  memcpy(value, v, (size_t)(ve - v));
  value[ve - v] = 0;
  return config_set(c, key, value, err, errlen);
}

int config_set_assignment(config *c, const char *assignment, char *err, size_t errlen) {
  int index;
  return assign(c, assignment, strlen(assignment), &index, err, errlen) ? one_line(err) : 0;
}

/* The `name = value` lines of f (config.h: config_read_lines). */
static int read_lines(FILE *f, const char *name, config_line_fn fn, void *ctx, char *err,
                      size_t errlen) {
  char *line = NULL;
  size_t cap = 0;
  ssize_t len;
  int lineno = 0, rc = 0;
  char msg[CONFIG_VALUE_LEN + 128];
  while (rc == 0 && (len = getline(&line, &cap, f)) >= 0) {
    lineno++;
    if (memchr(line, 0, (size_t)len)) {
      snprintf(err, errlen, "%s:%d: a NUL byte (not a text file)", name, lineno);
      rc = -1;
      break;
    }
    char *hash = strchr(line, '#');
    const char *s = line, *e = hash ? hash : line + len;
    trim(&s, &e);
    if (s == e) continue;
    char *eq = memchr(s, '=', (size_t)(e - s));
    if (!eq) {
      snprintf(err, errlen, "%s:%d: expected key=value, got '%.*s'", name, lineno,
               e - s > 200 ? 200 : (int)(e - s), s);
      rc = -1;
      break;
    }
    const char *k = s, *ke = eq, *v = eq + 1, *ve = e;
    trim(&k, &ke);
    trim(&v, &ve);
    *(char *)ke = 0; /* within line: the name and the value end in place */
    *(char *)ve = 0;
    msg[0] = 0;
    if (fn(ctx, (char *)k, (char *)v, lineno, msg, sizeof msg)) {
      snprintf(err, errlen, "%s:%d: %s", name, lineno, msg);
      rc = -1;
    }
  }
  if (rc == 0 && ferror(f)) {
    snprintf(err, errlen, "cannot read %s: %s", name, strerror(errno));
    rc = -1;
  }
  free(line);
  return rc ? one_line(err) : 0;
}

/* Opens a config file for reading: not a directory; NULL with a message in err. */
static FILE *open_config(const char *path, char *err, size_t errlen) {
  FILE *f = fopen(path, "r");
  if (!f) {
    snprintf(err, errlen, "cannot open config '%s': %s", path, strerror(errno));
    one_line(err);
    return NULL;
  }
  struct stat st;
  if (fstat(fileno(f), &st) || S_ISDIR(st.st_mode)) {
    snprintf(err, errlen, "cannot read config '%s': is a directory", path);
    one_line(err);
    fclose(f);
    return NULL;
  }
  return f;
}

int config_read_lines(const char *path, config_line_fn fn, void *ctx, char *err, size_t errlen) {
  FILE *f = open_config(path, err, errlen);
  if (!f) return -1;
  int rc = read_lines(f, path, fn, ctx, err, errlen);
  fclose(f);
  return rc;
}

/* A config's line: a key of the table, at most once. */
typedef struct {
  config *c;
  int seen[NKEYS];
} load_state;

static int load_line(void *ctx, char *key, char *value, int lineno, char *err, size_t errlen) {
  load_state *st = ctx;
  const int k = key_index(key);
  if (strlen(key) >= 64) {
    snprintf(err, errlen, "unknown config key '%.60s...'", key);
    return -1;
  }
  if (config_set(st->c, key, value, err, errlen)) return -1;
  if (st->seen[k]) {
    snprintf(err, errlen, "key '%s' already set on line %d", keys[k].key, st->seen[k]);
    return -1;
  }
  st->seen[k] = lineno;
  return 0;
}

static int load_stream(config *c, FILE *f, const char *name, char *err, size_t errlen) {
  load_state st = {.c = c};
  return read_lines(f, name, load_line, &st, err, errlen);
}

int config_load_file(config *c, const char *path, char *err, size_t errlen) {
  FILE *f = open_config(path, err, errlen);
  if (!f) return -1;
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

void config_reset_recipe(config *c) {
  for (int i = 0; i < NKEYS; i++)
    if (keys[i].recipe) snprintf(c->values[i], CONFIG_VALUE_LEN, "%s", keys[i].def);
}

const char *config_recipe_diff(const config *a, const config *b) {
  for (int i = 0; i < NKEYS; i++)
    if (keys[i].recipe && strcmp(keys[i].key, "recipe") && strcmp(a->values[i], b->values[i]))
      return keys[i].key; /* the name is informational */
  return NULL;
}

int config_has_key(const char *key) { return key_index(key) >= 0; }

const char *config_str(const config *c, const char *key) {
  int i = key_index(key);
  if (i < 0) {
    fprintf(stderr, "internal error: config key '%s'\n", key);
    exit(1);
  }
  return c->values[i];
}

long config_int(const config *c, const char *key, char *err, size_t errlen) {
  const char *s = config_str(c, key);
  long long v;
  if (parse_integer(s, &v) || v < LONG_MIN || v > LONG_MAX) {
    if (!*err) snprintf(err, errlen, "config key '%s': not an integer: '%s'", key, s);
    return 0;
  }
  return (long)v;
}

double config_double(const config *c, const char *key, char *err, size_t errlen) {
  const char *s = config_str(c, key);
  double v;
  if (parse_real(s, &v)) {
    if (!*err) snprintf(err, errlen, "config key '%s': not a number: '%s'", key, s);
    return 0;
  }
  return v;
}
