/* Precision recipes -> per-site GEMM operands. */
#include "experiments/trainer/recipe.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/exmy_cpu.h"

static bool is_fp32(const char *name) {
  return !strcmp(name, "fp32") || !strcmp(name, "float32") || !strcmp(name, "none") || !*name;
}

static int parse_operand(exmy_operand_quant *q, const char *format, const char *rounding,
                         const char *scaling, int margin, bool pow2, int mx_block, int sr_bits,
                         bool saturate, bool flush, uint64_t seed, char *err, size_t errlen) {
  memset(q, 0, sizeof *q);
  if (is_fp32(format)) return 0;
  q->enabled = true;
  if (exmy_format_parse(format, &q->format)) {
    snprintf(err, errlen, "unknown format '%s'", format);
    return -1;
  }
  if (exmy_rounding_parse(rounding, &q->round.mode)) {
    snprintf(err, errlen, "unknown rounding '%s'", rounding);
    return -1;
  }
  q->round.saturate = saturate;
  q->round.flush_subnormals = flush;
  q->round.seed = seed;
  q->round.sr_bits = sr_bits;
  if (exmy_rounding_opts_check(&q->round)) {
    snprintf(err, errlen, "invalid rounding options (sr_bits %d)", sr_bits);
    return -1;
  }
  if (!strcmp(scaling, "none")) q->scaling.kind = EXMY_SCALING_NONE;
  else if (!strcmp(scaling, "tensor")) q->scaling.kind = EXMY_SCALING_TENSOR;
  else if (!strcmp(scaling, "delayed")) q->scaling.kind = EXMY_SCALING_DELAYED;
  else if (!strcmp(scaling, "mx")) q->scaling.kind = EXMY_SCALING_MX;
  else if (!strcmp(scaling, "group")) q->scaling.kind = EXMY_SCALING_GROUP;
  else if (!strcmp(scaling, "nvfp4")) q->scaling.kind = EXMY_SCALING_NVFP4;
  else {
    snprintf(err, errlen, "unknown scaling '%s' (none, tensor, delayed, mx, group, nvfp4)",
             scaling);
    return -1;
  }
  q->scaling.margin = margin;
  q->scaling.pow2 = pow2;
  q->scaling.group = tq_along_k(q) ? mx_block : 0;
  return 0;
}

int recipe_from_config(recipe *r, const config *c, uint64_t seed, char *err, size_t errlen) {
  memset(r, 0, sizeof *r);
  err[0] = 0;
  int margin = (int)config_int(c, "margin", err, errlen);
  bool pow2 = config_int(c, "pow2_scale", err, errlen) != 0;
  int mx_block = (int)config_int(c, "mx_block", err, errlen);
  int sr_bits = (int)config_int(c, "sr_bits", err, errlen);
  bool saturate = config_int(c, "saturate", err, errlen) != 0;
  bool flush = config_int(c, "flush_subnormals", err, errlen) != 0;
  r->amax_history = (int)config_int(c, "amax_history", err, errlen);
  r->quant_attention = config_int(c, "quant_attention", err, errlen) != 0;
  r->quant_lm_head = config_int(c, "quant_lm_head", err, errlen) != 0;
  r->high_first_last = config_int(c, "high_precision_first_last", err, errlen) != 0;
  r->moment_group = (int)config_int(c, "moment_group", err, errlen);
  r->moment_dre = config_int(c, "moment_dre", err, errlen) != 0;
  const int weight_block_rows = (int)config_int(c, "weight_block_rows", err, errlen);
  r->wgrad_hadamard = (int)config_int(c, "wgrad_hadamard", err, errlen);
  r->hadamard_seed = (uint64_t)config_int(c, "hadamard_seed", err, errlen);
  if (*err) return -1;
  if (r->amax_history < 1 || r->amax_history > 1024) {
    snprintf(err, errlen, "amax_history must be in 1..1024");
    return -1;
  }
  /* every format and rounding key is checked, whether or not this recipe uses it */
  static const char *const format_keys[] = {"format_w", "format_a", "format_g", "high_format",
                                            "grad_format", "moment1_format", "moment2_format"};
  static const char *const rounding_keys[] = {"rounding", "rounding_w", "rounding_a",
                                              "rounding_g"};
  for (size_t i = 0; i < sizeof format_keys / sizeof *format_keys; i++) {
    const char *v = config_str(c, format_keys[i]);
    exmy_format f;
    if (!is_fp32(v) && exmy_format_parse(v, &f)) {
      snprintf(err, errlen, "%s: unknown format '%s'", format_keys[i], v);
      return -1;
    }
  }
  for (size_t i = 0; i < sizeof rounding_keys / sizeof *rounding_keys; i++) {
    const char *v = config_str(c, rounding_keys[i]);
    exmy_rounding mode;
    if ((i == 0 || *v) && exmy_rounding_parse(v, &mode)) {
      snprintf(err, errlen, "%s: unknown rounding '%s' (rne, rna, rz, ru, rd, ro, sr)",
               rounding_keys[i], v);
      return -1;
    }
  }
  const char *scaling = config_str(c, "scaling");
  static const char *const fmt_keys[NUM_ROLES] = {"format_w", "format_a", "format_g"};
  static const char *const rnd_keys[NUM_ROLES] = {"rounding_w", "rounding_a", "rounding_g"};
  for (int i = 0; i < NUM_ROLES; i++) {
    const char *rnd = config_str(c, rnd_keys[i]);
    if (!*rnd) rnd = config_str(c, "rounding");
    char msg[200];
    if (parse_operand(&r->role[i], config_str(c, fmt_keys[i]), rnd, scaling, margin, pow2,
                      mx_block, sr_bits, saturate, flush, seed + 1 + i, msg, sizeof msg)) {
      snprintf(err, errlen, "%s: %s", fmt_keys[i], msg);
      return -1;
    }
    if (parse_operand(&r->high[i], config_str(c, "high_format"), "rne", "none", 0, false, 32, 0,
                      false, false, 0, msg, sizeof msg)) {
      snprintf(err, errlen, "high_format: %s", msg);
      return -1;
    }
  }
  const bool blocked = !strcmp(scaling, "group") || !strcmp(scaling, "nvfp4");
  if (weight_block_rows > 1 && !blocked) {
    snprintf(err, errlen, "weight_block_rows needs scaling = group or nvfp4");
    return -1;
  }
  /* the transform cancels in dW = dY^T X only when both inputs take it */
  if (r->wgrad_hadamard &&
      (strcmp(scaling, "nvfp4") || !r->role[ROLE_A].enabled || !r->role[ROLE_G].enabled)) {
    snprintf(err, errlen, "wgrad_hadamard needs scaling = nvfp4 and format_a, format_g quantized");
    return -1;
  }
  r->role[ROLE_W].scaling.block_rows = weight_block_rows;
  const char *grad_format = config_str(c, "grad_format");
  r->grad_quant = !is_fp32(grad_format);
  r->grad_margin = margin;
  if (r->grad_quant && exmy_format_parse(grad_format, &r->grad_format)) {
    snprintf(err, errlen, "grad_format: unknown format '%s'", grad_format);
    return -1;
  }
  if (exmy_accum_model_parse(config_str(c, "accumulate"), &r->accum)) {
    snprintf(err, errlen, "accumulate: '%s' is not fp32, hopper, hopper-split or "
             "group:N,bits:N,sum:N,round:trunc|nearest,promote:N,align:0|1,"
             "align_to:product|inputs,kslice:N (a valid model)",
             config_str(c, "accumulate"));
    return -1;
  }
  /* exmy or openblas: the key table (config.c) refuses anything else */
  snprintf(r->gemm, sizeof r->gemm, "%s", config_str(c, "gemm"));
  const char *moments = config_str(c, "moments");
  if (!strcmp(moments, "coat")) {
    r->coat = true;
    if (exmy_format_parse(config_str(c, "moment1_format"), &r->moment_format[0]) ||
        exmy_format_parse(config_str(c, "moment2_format"), &r->moment_format[1])) {
      snprintf(err, errlen, "unknown moment format");
      return -1;
    }
    if (r->moment_group < 1) {
      snprintf(err, errlen, "moment_group must be >= 1");
      return -1;
    }
  } else if (!strcmp(moments, "bf16")) {
    r->moments_bf16 = true;
  } else if (!strcmp(moments, "fp8")) {
    r->moments_fp8 = true;
    if (exmy_format_parse(config_str(c, "moment1_format"), &r->moment_format[0]) ||
        exmy_format_parse(config_str(c, "moment2_format"), &r->moment_format[1])) {
      snprintf(err, errlen, "unknown moment format");
      return -1;
    }
  } else if (strcmp(moments, "fp32")) {
    snprintf(err, errlen, "moments must be fp32, coat, bf16 or fp8, not '%s'", moments);
    return -1;
  }
  /* none | row (the key table refuses anything else) */
  r->swiglu_row_scale = !strcmp(config_str(c, "swiglu_scale"), "row");
  /* f32 | bf16 (the key table refuses anything else) */
  r->bf16_activations = !strcmp(config_str(c, "activations"), "bf16");
  if (r->bf16_activations && r->swiglu_row_scale) {
    snprintf(err, errlen, "activations = bf16 with swiglu_scale = row is not defined (where "
             "the row scale's division would round is not chosen yet)");
    return -1;
  }
  return 0;
}

/* Which role each use of a linear layer plays. */
static const int linear_roles[USES_PER_SITE] = {ROLE_A, ROLE_W, ROLE_G, ROLE_W, ROLE_G, ROLE_A};
/* In the attention products both inputs are activations. */
static const int attention_roles[USES_PER_SITE] = {ROLE_A, ROLE_A, ROLE_G, ROLE_A, ROLE_G, ROLE_A};

tq_site *recipe_make_sites(const recipe *r, const model_config *mc) {
  int n = model_num_sites(mc), L = mc->n_layers;
  tq_site *sites = calloc((size_t)n, sizeof *sites);
  if (!sites) return NULL;
  tq_select_gemm(r->gemm);
  for (int i = 0; i < n; i++) {
    int layer = i / SITES_PER_LAYER, kind = i % SITES_PER_LAYER;
    bool lm_head = layer == L;
    bool attention = !lm_head && (kind == SITE_ATT_QK || kind == SITE_ATT_PV);
    bool on = lm_head ? r->quant_lm_head : attention ? r->quant_attention : true;
    bool high = r->high_first_last && (layer == 0 || layer >= L - 1);
    for (int u = 0; u < USES_PER_SITE; u++) {
      exmy_operand_quant *q = &sites[i].op[u];
      int role = attention ? attention_roles[u] : linear_roles[u];
      if (!on) continue;
      *q = high ? r->high[role] : r->role[role];
      /* both inputs of dW = dY^T X, transformed alike along K (the tokens) */
      if (q->enabled && !attention && (u == USE_DW_DY || u == USE_DW_X) && r->wgrad_hadamard &&
          q->scaling.kind == EXMY_SCALING_NVFP4) {
        q->scaling.hadamard = r->wgrad_hadamard;
        q->scaling.hadamard_seed = r->hadamard_seed;
      }
      if (q->enabled && q->scaling.kind == EXMY_SCALING_DELAYED) {
        q->scaling.history_len = r->amax_history;
        if (!(q->delayed = exmy_delayed_state_new(r->amax_history))) {
          recipe_free_sites(sites, n);
          return NULL;
        }
      }
      q->stats = &sites[i].stats[u];
      /* a site with a quantized operand accumulates as the recipe says */
      if (q->enabled) sites[i].accum = r->accum;
    }
  }
  return sites;
}

void recipe_free_sites(tq_site *sites, int n) {
  if (!sites) return;
  for (int i = 0; i < n; i++) {
    for (int u = 0; u < USES_PER_SITE; u++) exmy_delayed_state_free(sites[i].op[u].delayed);
    tq_site_free_caches(&sites[i]);
  }
  free(sites);
}

void site_name(const model_config *mc, int i, char *buf, size_t len) {
  int layer = i / SITES_PER_LAYER;
  if (layer == mc->n_layers) snprintf(buf, len, "lm_head");
  else snprintf(buf, len, "l%d.%s", layer, site_kind_names[i % SITES_PER_LAYER]);
}

int sites_state_write(const tq_site *sites, int n, FILE *f) {
  for (int i = 0; i < n; i++)
    for (int u = 0; u < USES_PER_SITE; u++) {
      const exmy_delayed_state *d = sites[i].op[u].delayed;
      if (!d) continue;
      int32_t hdr[3] = {d->history_len, d->count, d->latest};
      float sc[2] = {d->scale, d->scale_inv};
      if (fwrite(hdr, sizeof hdr, 1, f) != 1 || fwrite(sc, sizeof sc, 1, f) != 1 ||
          fwrite(d->amax_history, sizeof(float), (size_t)d->history_len, f) != (size_t)d->history_len)
        return -1;
    }
  return 0;
}

/* One state as sites_state_write lays it out: int32 history_len, count,
 * latest; float scale, scale_inv; float amax_history[history_len]. */
static int state_check(const exmy_delayed_state *d, const unsigned char *p, size_t left,
                       size_t *used, char *err, size_t errlen) {
  int32_t hdr[3];
  float sc[2];
  const size_t head = sizeof hdr + sizeof sc, len = (size_t)d->history_len;
  if (left < head || left - head < len * sizeof(float)) {
    snprintf(err, errlen, "delayed-scaling states are truncated");
    return -1;
  }
  memcpy(hdr, p, sizeof hdr);
  memcpy(sc, p + sizeof hdr, sizeof sc);
  if (hdr[0] != d->history_len) {
    snprintf(err, errlen, "a delayed-scaling state has history length %d, the recipe %d",
             (int)hdr[0], d->history_len);
    return -1;
  }
  const int32_t count = hdr[1], latest = hdr[2], L = hdr[0];
  /* updates fill slots 0, 1, ... in turn: until the history is full, the
   * latest is slot count - 1 and the slots after it are empty */
  if (count < 0 || count > L || latest < 0 || latest >= L ||
      (count < L && latest != (count + L - 1) % L)) {
    snprintf(err, errlen, "a delayed-scaling state's position is out of range (count %d, "
             "latest %d, history length %d)", (int)count, (int)latest, (int)L);
    return -1;
  }
  if (!(sc[0] > 0) || !isfinite(sc[0]) || sc[1] != 1.0f / sc[0]) {
    snprintf(err, errlen, "a delayed-scaling state's scale is invalid (%g, inverse %g)",
             (double)sc[0], (double)sc[1]);
    return -1;
  }
  for (int32_t i = 0; i < L; i++) {
    float a;
    memcpy(&a, p + head + (size_t)i * sizeof a, sizeof a);
    if (!(a >= 0) || !isfinite(a) || (i >= count && a != 0)) {
      snprintf(err, errlen, "a delayed-scaling state's amax history is invalid (slot %d: %g)",
               (int)i, (double)a);
      return -1;
    }
  }
  *used = head + len * sizeof(float);
  return 0;
}

int sites_state_load(tq_site *sites, int n, const void *buf, size_t len, char *err,
                     size_t errlen) {
  const unsigned char *p = buf;
  for (int apply = 0; apply < 2; apply++) { /* check every state, then apply them all */
    size_t off = 0, used;
    for (int i = 0; i < n; i++)
      for (int u = 0; u < USES_PER_SITE; u++) {
        exmy_delayed_state *d = sites[i].op[u].delayed;
        if (!d) continue;
        if (state_check(d, p + off, len - off, &used, err, errlen)) return -1;
        if (apply) {
          int32_t hdr[3];
          float sc[2];
          memcpy(hdr, p + off, sizeof hdr);
          memcpy(sc, p + off + sizeof hdr, sizeof sc);
          d->count = hdr[1];
          d->latest = hdr[2];
          d->scale = sc[0];
          d->scale_inv = sc[1];
          memcpy(d->amax_history, p + off + sizeof hdr + sizeof sc,
                 (size_t)d->history_len * sizeof(float));
        }
        off += used;
      }
    if (off != len) {
      snprintf(err, errlen, "%zu bytes of delayed-scaling states, the recipe's take %zu", len,
               off);
      return -1;
    }
  }
  return 0;
}

int recipe_moment_stretches(const model_config *c, const size_t *param_sizes, size_t *offset,
                            size_t *length) {
  static const int layered[7] = {PARAM_WQ, PARAM_WK, PARAM_WV, PARAM_WO,
                                 PARAM_W1, PARAM_W3, PARAM_W2};
  size_t start[NUM_PARAM_TENSORS], at = 0;
  for (int t = 0; t < NUM_PARAM_TENSORS; t++) start[t] = at, at += param_sizes[t];
  int n = 0;
#define STRETCH(o, len)              \
  do {                               \
    if (offset) offset[n] = (o);     \
    if (length) length[n] = (len);   \
    n++;                             \
  } while (0)
  STRETCH(start[PARAM_WTE], param_sizes[PARAM_WTE]);
  for (int i = 0; i < 7; i++) {
    const size_t per_layer = param_sizes[layered[i]] / (size_t)c->n_layers;
    for (int l = 0; l < c->n_layers; l++)
      STRETCH(start[layered[i]] + (size_t)l * per_layer, per_layer);
  }
  STRETCH(start[PARAM_LM_HEAD], param_sizes[PARAM_LM_HEAD]);
#undef STRETCH
  return n;
}

void recipe_store_moments(const recipe *r, const model_config *c, const size_t *param_sizes,
                          float *m, float *v, size_t n) {
  if (r->moments_fp8) {
    /* Fishman et al. 2024's FP8 moments: each matrix's m and v rounded rne
     * under a current per-tensor scale s = fmax / amax (not a power of two),
     * v itself (not its square root), as the reference's QuantDequant does */
    const int k = recipe_moment_stretches(c, param_sizes, NULL, NULL);
    size_t *offset = malloc(2 * (size_t)k * sizeof *offset), *length = offset + k;
    if (!offset) {
      fprintf(stderr, "train: out of memory\n");
      exit(1);
    }
    recipe_moment_stretches(c, param_sizes, offset, length);
    const exmy_rounding_opts o = {.mode = EXMY_RNE, .saturate = true};
    const exmy_scaling sc = {.kind = EXMY_SCALING_TENSOR};
    for (int i = 0; i < k; i++) {
      exmy_quantize_scaled_f32(&r->moment_format[0], &o, &sc, NULL, m + offset[i], m + offset[i],
                               1, length[i], NULL);
      exmy_quantize_scaled_f32(&r->moment_format[1], &o, &sc, NULL, v + offset[i], v + offset[i],
                               1, length[i], NULL);
    }
    free(offset);
    return;
  }
  if (r->moments_bf16) {
    exmy_format bf16;
    exmy_format_parse("bf16", &bf16);
    const exmy_rounding_opts rne = {.mode = EXMY_RNE};
    exmy_quantize_f32(&bf16, &rne, m, m, n);
    exmy_quantize_f32(&bf16, &rne, v, v, n);
    return;
  }
  if (!r->coat) return;
  exmy_rounding_opts o = {.mode = EXMY_RNE, .saturate = true};
  exmy_scaling sc = {.kind = EXMY_SCALING_GROUP, .group = r->moment_group,
                     .dynamic_range_expansion = r->moment_dre};
  exmy_quantize_scaled_f32(&r->moment_format[0], &o, &sc, NULL, m, m, 1, n, NULL);
  exmy_quantize_scaled_f32(&r->moment_format[1], &o, &sc, NULL, v, v, 1, n, NULL);
}

int recipe_grad_stretches(const recipe *r, const model_config *c, const size_t *param_sizes,
                          size_t *offset, size_t *length) {
  if (!r->grad_quant) return 0;
  static const int linear[7] = {PARAM_WQ, PARAM_WK, PARAM_WV, PARAM_WO,
                                PARAM_W1, PARAM_W3, PARAM_W2};
  size_t start[NUM_PARAM_TENSORS], at = 0;
  for (int t = 0; t < NUM_PARAM_TENSORS; t++) start[t] = at, at += param_sizes[t];
  const int L = c->n_layers;
  int n = 0;
  for (int l = 0; l < L; l++) {
    if (r->high_first_last && (l == 0 || l >= L - 1)) continue; /* kept in high_format */
    for (int i = 0; i < 7; i++, n++) {
      const size_t per_layer = param_sizes[linear[i]] / (size_t)L;
      if (offset) offset[n] = start[linear[i]] + (size_t)l * per_layer;
      if (length) length[n] = per_layer;
    }
  }
  if (r->quant_lm_head) {
    if (offset) offset[n] = start[PARAM_LM_HEAD];
    if (length) length[n] = param_sizes[PARAM_LM_HEAD];
    n++;
  }
  return n;
}

void recipe_round_grads(const recipe *r, model *m) {
  const int n = recipe_grad_stretches(r, &m->cfg, m->param_sizes, NULL, NULL);
  if (!n) return;
  size_t *offset = malloc(2 * (size_t)n * sizeof *offset), *length = offset + n;
  if (!offset) {
    fprintf(stderr, "train: out of memory\n");
    exit(1);
  }
  recipe_grad_stretches(r, &m->cfg, m->param_sizes, offset, length);
  const exmy_rounding_opts o = {.mode = EXMY_RNE, .saturate = true};
  const exmy_scaling sc = {.kind = EXMY_SCALING_TENSOR, .margin = r->grad_margin};
  for (int i = 0; i < n; i++) {
    float *x = m->grads_mem + offset[i];
    exmy_quantize_scaled_f32(&r->grad_format, &o, &sc, NULL, x, x, 1, length[i], NULL);
  }
  free(offset);
}
