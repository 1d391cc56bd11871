/*
 * Test-only shared library: the C side that the Python package is compared
 * with, called through ctypes by the tests/python scripts.  Every entry point takes
 * plain values and names (never exmy structs built by Python), so that a
 * mistake in the package's struct mirror cannot cancel out.
 *
 *  - shim_ref_*: the scalar reference (exmy_ref_encode / exmy_ref_decode),
 *    element by element, with exmy_sr_random's word for element i;
 *  - shim_scaled: exmy_quantize_scaled_f32 over `calls` successive tensors
 *    (a delayed state carried between them), with statistics;
 *  - shim_linear: the trainer's linear layer (experiments/trainer/model.c's
 *    linear_forward / linear_backward, i.e. tq_operand_for_gemm and tq_gemm)
 *    with the operands of a recipe file as experiments/trainer/recipe.c builds them,
 *    over `steps` steps, the sr counter at step << 36 as in train.c;
 *  - shim_recipe: a recipe file through config.c and recipe_from_config;
 *  - shim_layout: sizeof / offsetof of lib/exmy.h's structs.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "experiments/trainer/config.h"
#include "experiments/trainer/model.h"
#include "experiments/trainer/qgemm.h"
#include "experiments/trainer/recipe.h"
#include "cpu/exmy_cpu.h"

static int opts_of(const char *mode, int saturate, int flush, uint64_t seed, uint64_t offset,
                   int sr_bits, exmy_rounding_opts *o) {
  memset(o, 0, sizeof *o);
  if (exmy_rounding_parse(mode, &o->mode)) return -1;
  o->saturate = saturate != 0;
  o->flush_subnormals = flush != 0;
  o->seed = seed;
  o->offset = offset;
  o->sr_bits = sr_bits;
  return exmy_rounding_opts_check(o);
}

/* y[i] = exmy_ref_quantize, codes[i] = exmy_ref_encode (uint32 each). */
int shim_ref_quantize(const char *fmt, const char *mode, int saturate, int flush, uint64_t seed,
                      uint64_t offset, int sr_bits, const float *x, float *y, uint32_t *codes,
                      size_t n) {
  exmy_format f;
  exmy_rounding_opts o;
  if (exmy_format_parse(fmt, &f) || opts_of(mode, saturate, flush, seed, offset, sr_bits, &o))
    return -1;
  for (size_t i = 0; i < n; i++) {
    uint32_t r = o.mode == EXMY_SR ? exmy_sr_random(seed, offset + i) : 0;
    codes[i] = exmy_ref_encode(&f, &o, x[i], r);
    y[i] = exmy_ref_decode(&f, codes[i]);
  }
  return 0;
}

int shim_ref_decode(const char *fmt, const uint32_t *codes, float *y, size_t n) {
  exmy_format f;
  if (exmy_format_parse(fmt, &f)) return -1;
  for (size_t i = 0; i < n; i++) y[i] = exmy_ref_decode(&f, codes[i]);
  return 0;
}

/* exmy_quantize_scaled_f32 on `calls` tensors of rows x cols (x and y hold
 * them one after the other), one delayed state carried across the calls;
 * stats: 12 doubles per call in exmy_tensor_stats' field order. */
int shim_scaled(const char *fmt, const char *mode, int saturate, int flush, uint64_t seed,
                uint64_t offset, int sr_bits, const char *kind, int group, int margin, int pow2,
                int dre, int block_rows, int hadamard, uint64_t hadamard_seed, int history_len,
                int most_recent, int calls, const float *x, float *y, size_t rows, size_t cols,
                double *stats) {
  exmy_format f;
  exmy_rounding_opts o;
  if (exmy_format_parse(fmt, &f) || opts_of(mode, saturate, flush, seed, offset, sr_bits, &o))
    return -1;
  static const char *const kinds[] = {"none", "tensor", "delayed", "mx", "group", "nvfp4"};
  exmy_scaling sc = {.margin = margin, .pow2 = pow2 != 0, .group = group,
                     .history_len = history_len, .history_most_recent = most_recent != 0,
                     .dynamic_range_expansion = dre != 0, .block_rows = block_rows,
                     .hadamard = hadamard, .hadamard_seed = hadamard_seed};
  int k = -1;
  for (int i = 0; i < (int)(sizeof kinds / sizeof kinds[0]); i++)
    if (!strcmp(kind, kinds[i])) k = i;
  if (k < 0) return -1;
  sc.kind = (exmy_scaling_kind)k;
  exmy_delayed_state *st = k == EXMY_SCALING_DELAYED ? exmy_delayed_state_new(history_len) : NULL;
  const size_t n = rows * cols;
  for (int c = 0; c < calls; c++) {
    exmy_tensor_stats s;
    if (exmy_quantize_scaled_f32(&f, &o, &sc, st, x + c * n, y + c * n, rows, cols, &s)) {
      exmy_delayed_state_free(st);
      return -1;
    }
    double *d = stats + 12 * c;
    d[0] = (double)s.n, d[1] = s.amax, d[2] = s.min_nonzero, d[3] = s.underflow_ratio;
    d[4] = s.subnormal_ratio, d[5] = s.overflow_ratio, d[6] = s.mse, d[7] = s.rel_l2;
    d[8] = s.cosine, d[9] = s.sqnr_db, d[10] = s.scale, d[11] = s.delayed_over_current;
  }
  exmy_delayed_state_free(st);
  return 0;
}

static int load_recipe(const char *path, uint64_t seed, recipe *r, char *err, size_t errlen) {
  static config c; /* large: not on the stack */
  config_defaults(&c);
  if (config_load_file(&c, path, err, errlen)) return -1;
  return recipe_from_config(r, &c, seed, err, errlen);
}

/* The resolved recipe keys of a file (config_write's "key = value" lines,
 * from `recipe` on) into out; 0, or -1 with recipe_from_config's message. */
int shim_recipe(const char *path, char *out, size_t len) {
  static config c;
  char err[512] = "";
  recipe r;
  config_defaults(&c);
  int rc = config_load_file(&c, path, err, sizeof err);
  if (!rc) rc = recipe_from_config(&r, &c, 1337, err, sizeof err);
  if (rc) {
    snprintf(out, len, "%s", err);
    return -1;
  }
  char *text = NULL;
  size_t size = 0;
  FILE *f = open_memstream(&text, &size);
  config_write(&c, f);
  fclose(f);
  const char *start = strstr(text, "\nrecipe = ");
  snprintf(out, len, "%s", start ? start + 1 : "");
  free(text);
  return 0;
}

/* The trainer's linear layer, `steps` times: x (steps, N, C), w (steps, OC,
 * C), dy (steps, N, OC) -> y (steps, N, OC), dx (steps, N, C), dw (steps, OC,
 * C); qx, qw, qdy: the trainer's rounded copies of X, W, dY (element-wise
 * recipes; left untouched for MX and unquantized operands).  Returns 0, or
 * -1 with a message on stderr. */
int shim_linear(const char *cfg_path, uint64_t seed, int steps, int N, int C, int OC,
                const float *x, const float *w, const float *dy, float *y, float *dx, float *dw,
                float *qx, float *qw, float *qdy) {
  recipe r;
  char err[512];
  if (load_recipe(cfg_path, seed, &r, err, sizeof err)) {
    fprintf(stderr, "shim_linear: %s\n", err);
    return -1;
  }
  model_config mc = {.n_layers = 1};
  tq_site *sites = recipe_make_sites(&r, &mc);
  tq_site *s = &sites[0]; /* layer 0, kind q: a linear layer */
  const size_t nx = (size_t)N * C, nw = (size_t)OC * C, ny = (size_t)N * OC;
  for (int t = 0; t < steps; t++) {
    tq_sr_counter = (uint64_t)t << 36;
    linear_forward(y + t * ny, x + t * nx, w + t * nw, N, C, OC, s);
    memset(dx + t * nx, 0, nx * sizeof(float));
    memset(dw + t * nw, 0, nw * sizeof(float));
    linear_backward(dx + t * nx, dw + t * nw, dy + t * ny, x + t * nx, w + t * nw, N, C, OC, s, 1);
    const float *cache[3] = {s->cache[SLOT_X].data, s->cache[SLOT_W].data, s->cache[SLOT_DY].data};
    float *outs[3] = {qx + t * nx, qw + t * nw, qdy + t * ny};
    const size_t sizes[3] = {nx, nw, ny};
    for (int i = 0; i < 3; i++)
      if (cache[i]) memcpy(outs[i], cache[i], sizes[i] * sizeof(float));
  }
  recipe_free_sites(sites, model_num_sites(&mc));
  return 0;
}

/* sizeof and offsetof of lib/exmy.h's structs, in the order tests/python
 * lists them; returns the count written. */
size_t shim_layout(size_t *out) {
  size_t v[] = {
      sizeof(exmy_format), offsetof(exmy_format, name), offsetof(exmy_format, exp_bits),
      offsetof(exmy_format, man_bits), offsetof(exmy_format, bias),
      offsetof(exmy_format, specials), offsetof(exmy_format, is_signed),
      offsetof(exmy_format, bits), offsetof(exmy_format, emin), offsetof(exmy_format, emax),
      offsetof(exmy_format, max_code), offsetof(exmy_format, sign_mask),
      offsetof(exmy_format, nan_code), offsetof(exmy_format, inf_code),
      sizeof(exmy_format_info), offsetof(exmy_format_info, max),
      offsetof(exmy_format_info, min_normal), offsetof(exmy_format_info, min_subnormal),
      offsetof(exmy_format_info, epsilon), offsetof(exmy_format_info, finite_codes),
      offsetof(exmy_format_info, finite_values), offsetof(exmy_format_info, has_inf),
      offsetof(exmy_format_info, has_nan), offsetof(exmy_format_info, has_negative_zero),
      offsetof(exmy_format_info, has_subnormals),
      sizeof(exmy_rounding_opts), offsetof(exmy_rounding_opts, mode),
      offsetof(exmy_rounding_opts, saturate), offsetof(exmy_rounding_opts, flush_subnormals),
      offsetof(exmy_rounding_opts, seed), offsetof(exmy_rounding_opts, offset),
      offsetof(exmy_rounding_opts, sr_bits),
      sizeof(exmy_scaling), offsetof(exmy_scaling, kind), offsetof(exmy_scaling, margin),
      offsetof(exmy_scaling, pow2), offsetof(exmy_scaling, group),
      offsetof(exmy_scaling, history_len), offsetof(exmy_scaling, history_most_recent),
      offsetof(exmy_scaling, dynamic_range_expansion), offsetof(exmy_scaling, block_rows),
      offsetof(exmy_scaling, hadamard), offsetof(exmy_scaling, hadamard_seed),
      sizeof(exmy_delayed_state), offsetof(exmy_delayed_state, history_len),
      offsetof(exmy_delayed_state, count), offsetof(exmy_delayed_state, latest),
      offsetof(exmy_delayed_state, amax_history), offsetof(exmy_delayed_state, scale),
      offsetof(exmy_delayed_state, scale_inv),
      sizeof(exmy_tensor_stats), offsetof(exmy_tensor_stats, n),
      offsetof(exmy_tensor_stats, amax), offsetof(exmy_tensor_stats, min_nonzero),
      offsetof(exmy_tensor_stats, underflow_ratio), offsetof(exmy_tensor_stats, subnormal_ratio),
      offsetof(exmy_tensor_stats, overflow_ratio), offsetof(exmy_tensor_stats, mse),
      offsetof(exmy_tensor_stats, rel_l2), offsetof(exmy_tensor_stats, cosine),
      offsetof(exmy_tensor_stats, sqnr_db), offsetof(exmy_tensor_stats, scale),
      offsetof(exmy_tensor_stats, delayed_over_current),
      sizeof(exmy_operand_quant), offsetof(exmy_operand_quant, enabled),
      offsetof(exmy_operand_quant, format), offsetof(exmy_operand_quant, round),
      offsetof(exmy_operand_quant, scaling), offsetof(exmy_operand_quant, delayed),
      offsetof(exmy_operand_quant, stats),
  };
  memcpy(out, v, sizeof v);
  return sizeof v / sizeof v[0];
}
