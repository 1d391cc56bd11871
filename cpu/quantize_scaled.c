/* Fake quantization under a scaling recipe: y = Q(x·s)·(1/s) with s per
 * tensor, per group, or per MX block (see exmy_scaling_kind).  Work runs in
 * chunks small enough for the cache: x·s goes to a stack buffer, the bulk
 * kernel rounds it, the statistics see x, x·s, Q(x·s) and y in the same pass. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/stats_acc.h"
#include "cpu/exmy_cpu.h"
#include "lib/scale_core.h"

enum { CHUNK = 2048 };

/* Finite max |x| (NaN and inf are skipped: they would poison the scale). */
static float amax_of(const float *x, size_t n) {
  float m = 0.0f;
#pragma omp parallel for reduction(max : m) schedule(static) if (n > 262144)
  for (size_t i = 0; i < n; i++) {
    float a = fabsf(x[i]);
    if (a > m && a <= 3.40282347e38f) m = a;
  }
  return m;
}

/* One segment with a single scale: x[0..len) is element `index0` of the
 * tensor (for sr's stream).  dre_k != 1: COAT's expansion with exponent k. */
static void quantize_segment(const exmy_format *f, const exmy_rounding_opts *o,
                             const float *x, float *y, float *codes, size_t len,
                             size_t index0, float s, float inv, double dre_k,
                             exmy_stats_acc *acc) {
  float xs[CHUNK], q[CHUNK];
  for (size_t c0 = 0; c0 < len; c0 += CHUNK) {
    size_t cn = len - c0 < CHUNK ? len - c0 : CHUNK;
    const float *xc = x + c0;
    if (dre_k != 1.0) {
      for (size_t i = 0; i < cn; i++) {
        xs[i] = exmy_core_dre_expand(xc[i], dre_k) * s;
      }
    } else {
      for (size_t i = 0; i < cn; i++) xs[i] = xc[i] * s;
    }
    exmy_rounding_opts oc = *o;
    oc.offset = o->offset + index0 + c0;
    exmy_quantize_f32(f, &oc, xs, q, cn);
    float *yc = y + c0;
    for (size_t i = 0; i < cn; i++) {
      float xi = xc[i]; /* read before y (which may alias x) is written */
      float w = q[i] * inv;
      if (dre_k != 1.0) w = exmy_core_dre_contract(w, dre_k);
      yc[i] = w;
      if (codes) codes[c0 + i] = q[i];
      if (acc) exmy_stats_acc_add(acc, xi, xs[i], q[i], w);
    }
  }
}

/* A whole tensor with one scale, chunks spread over the threads.  Statistics
 * in a fixed order, whatever the number of threads: each chunk sums into its
 * own accumulator, merged in chunk order (without memory for those: one
 * thread, the same order). */
static void quantize_uniform(const exmy_format *f, const exmy_rounding_opts *o,
                             const float *x, float *y, size_t n, float s,
                             float inv, exmy_stats_acc *total) {
  if (!total && s == 1.0f && inv == 1.0f) {
    exmy_quantize_f32(f, o, x, y, n); /* x·1 = x: the plain kernel is exact */
    return;
  }
  const size_t nchunks = (n + CHUNK - 1) / CHUNK;
  exmy_stats_acc *part = total && nchunks ? malloc(nchunks * sizeof *part) : NULL;
#pragma omp parallel for schedule(static) if (n > 65536 && (part || !total))
  for (size_t c = 0; c < nchunks; c++) {
    size_t start = c * CHUNK, len = n - start < CHUNK ? n - start : CHUNK;
    exmy_stats_acc one, *acc = total ? (part ? &part[c] : &one) : NULL;
    if (acc) exmy_stats_acc_init(acc, f);
    quantize_segment(f, o, x + start, y + start, NULL, len, start, s, inv, 1.0, acc);
    if (acc == &one) exmy_stats_sums_merge(&total->sums, &one.sums);
  }
  for (size_t c = 0; part && c < nchunks; c++) exmy_stats_sums_merge(&total->sums, &part[c].sums);
  free(part);
}

/* COAT's expansion exponent for a group with these extremes. */
static double dre_exponent(const exmy_format *f, float amax, float amin) {
  exmy_format_info info;
  exmy_format_get_info(f, &info);
  return exmy_core_dre_exponent(log((double)info.max / (double)info.min_subnormal), amax, amin);
}

/* Per-group (GROUP), per-block (MX) or two-level (NVFP4) scales: one task
 * per block of block_rows rows x g columns (block_rows 1: a stretch of a row).
 * codes (or NULL): each element's Q(x·s); block_scales (or NULL): each
 * block's dequantization factor (block t = its row of blocks · blocks per
 * row + its column of blocks). */
static void quantize_grouped(const exmy_format *f, const exmy_rounding_opts *o,
                             const exmy_scaling *sc, const float *x, float *y, float *codes,
                             float *block_scales, size_t rows, size_t cols,
                             exmy_stats_acc *total) {
  const int mx = sc->kind == EXMY_SCALING_MX, nvfp4 = sc->kind == EXMY_SCALING_NVFP4;
  size_t g = mx ? (sc->group > 0 ? (size_t)sc->group : 32)
           : nvfp4 ? (sc->group > 0 ? (size_t)sc->group : 16)
                   : (sc->group > 0 ? (size_t)sc->group : cols);
  if (g == 0) g = 1;
  const size_t br = !mx && sc->block_rows > 1 ? (size_t)sc->block_rows : 1;
  exmy_rounding_opts oe = *o;
  /* MX elements clamp to +-max (OCP reference); NVFP4's conversion is satfinite */
  if (mx || nvfp4) oe.saturate = true;
  const float s_enc = nvfp4 ? exmy_core_nvfp4_tensor_scale(amax_of(x, rows * cols)) : 1.0f;
  const size_t per_row = (cols + g - 1) / g, tasks = ((rows + br - 1) / br) * per_row;
  /* the tasks in blocks of about CHUNK elements, one statistics accumulator
   * each, merged in block order (as in quantize_uniform) */
  const size_t per_block = g * br >= CHUNK ? 1 : CHUNK / (g * br);
  const size_t blocks = (tasks + per_block - 1) / per_block;
  exmy_stats_acc *part = total && blocks ? malloc(blocks * sizeof *part) : NULL;
#pragma omp parallel for schedule(static) if (rows * cols > 65536 && (part || !total))
  for (size_t bk = 0; bk < blocks; bk++) {
    exmy_stats_acc one, *acc = total ? (part ? &part[bk] : &one) : NULL;
    if (acc) exmy_stats_acc_init(acc, f);
    const size_t t_end = (bk + 1) * per_block < tasks ? (bk + 1) * per_block : tasks;
    for (size_t t = bk * per_block; t < t_end; t++) {
      const size_t r0 = (t / per_row) * br, c0 = (t % per_row) * g;
      const size_t len = cols - c0 < g ? cols - c0 : g, nr = rows - r0 < br ? rows - r0 : br;
      float amax = 0.0f, amin = INFINITY;
      for (size_t rr = 0; rr < nr; rr++) {
        const float *xg = x + (r0 + rr) * cols + c0;
        for (size_t i = 0; i < len; i++) {
          float a = fabsf(xg[i]);
          if (a <= 3.40282347e38f) {
            if (a > amax) amax = a;
            if (a > 0 && a < amin) amin = a;
          }
        }
      }
      float s, inv;
      double k = 1.0;
      if (mx) {
        int e = exmy_core_mx_exponent(f->emax, amax);
        s = exmy_pow2f(-e);
        inv = exmy_pow2f(e);
      } else if (nvfp4) {
        const float s_b = exmy_core_nvfp4_block_scale(amax, s_enc);
        s = exmy_core_nvfp4_encode_factor(s_b, s_enc);
        inv = exmy_core_nvfp4_decode_factor(s_b, s_enc);
      } else {
        if (sc->dynamic_range_expansion) {
          k = dre_exponent(f, amax, amin);
          if (k != 1.0) amax = exmy_core_dre_expand(amax, k);
        }
        s = exmy_scale_from_amax(f, amax, sc->margin, sc->pow2);
        inv = 1.0f / s;
      }
      if (block_scales) block_scales[t] = inv;
      for (size_t rr = 0; rr < nr; rr++) {
        const size_t start = (r0 + rr) * cols + c0;
        quantize_segment(f, &oe, x + start, y + start, codes ? codes + start : NULL, len, start,
                         s, inv, k, acc);
      }
    }
    if (acc == &one) exmy_stats_sums_merge(&total->sums, &one.sums);
  }
  for (size_t bk = 0; part && bk < blocks; bk++) exmy_stats_sums_merge(&total->sums, &part[bk].sums);
  free(part);
}

/* y = the random Hadamard transform of x along its rows (EXMY_SCALING_NVFP4's
 * `hadamard`): each run of 16 elements; a shorter tail of a row is copied. */
static void hadamard_rows(const float *x, float *y, size_t rows, size_t cols, uint64_t seed) {
  const uint32_t signs = exmy_core_rht16_signs(seed);
#pragma omp parallel for schedule(static) if (rows * cols > 65536)
  for (size_t r = 0; r < rows; r++) {
    float in[16];
    size_t c = 0;
    for (; c + 16 <= cols; c += 16) {
      memcpy(in, x + r * cols + c, sizeof in); /* y may alias x */
      exmy_core_rht16(in, y + r * cols + c, signs);
    }
    if (y != x) memcpy(y + r * cols + c, x + r * cols + c, (cols - c) * sizeof(float));
  }
}

int exmy_quantize_scaled_f32(const exmy_format *f, const exmy_rounding_opts *o,
                             const exmy_scaling *sc, exmy_delayed_state *state,
                             const float *x, float *y, size_t rows, size_t cols,
                             exmy_tensor_stats *stats) {
  return exmy_quantize_scaled_f32_used(f, o, sc, state, x, y, rows, cols, stats, NULL);
}

int exmy_quantize_scaled_f32_used(const exmy_format *f, const exmy_rounding_opts *o,
                                  const exmy_scaling *sc, exmy_delayed_state *state,
                                  const float *x, float *y, size_t rows, size_t cols,
                                  exmy_tensor_stats *stats, float *scale) {
  static const exmy_scaling none = {0};
  if (!sc) sc = &none;
  if (sc->group < 0) return -1;
  if (sc->kind == EXMY_SCALING_DELAYED && !state) return -1;
  if ((unsigned)sc->kind > EXMY_SCALING_NVFP4 || sc->block_rows < 0) return -1;
  if (sc->hadamard && (sc->hadamard != 16 || sc->kind != EXMY_SCALING_NVFP4)) return -1;
  const size_t n = rows * cols;
  exmy_stats_acc total;
  if (stats) exmy_stats_acc_init(&total, f);
  double scale_used = NAN, ratio = NAN;

  switch (sc->kind) {
    case EXMY_SCALING_NONE:
      quantize_uniform(f, o, x, y, n, 1.0f, 1.0f, stats ? &total : NULL);
      scale_used = 1.0;
      break;
    case EXMY_SCALING_TENSOR: {
      float s = exmy_scale_from_amax(f, amax_of(x, n), sc->margin, sc->pow2);
      quantize_uniform(f, o, x, y, n, s, 1.0f / s, stats ? &total : NULL);
      scale_used = s;
      break;
    }
    case EXMY_SCALING_DELAYED: {
      /* amax first: y may alias x */
      float amax = amax_of(x, n);
      float s = state->scale, inv = state->scale_inv;
      quantize_uniform(f, o, x, y, n, s, inv, stats ? &total : NULL);
      scale_used = s;
      ratio = s / exmy_scale_from_amax(f, amax, sc->margin, sc->pow2);
      exmy_delayed_state_update(state, f, sc, amax);
      break;
    }
    case EXMY_SCALING_NVFP4:
      if (sc->hadamard && cols) {
        hadamard_rows(x, y, rows, cols, sc->hadamard_seed);
        x = y; /* the transformed tensor is the one quantized (and described) */
      }
      /* fall through */
    case EXMY_SCALING_MX:
    case EXMY_SCALING_GROUP:
      if (cols) quantize_grouped(f, o, sc, x, y, NULL, NULL, rows, cols, stats ? &total : NULL);
      break;
  }
  if (scale) *scale = (float)scale_used;
  if (stats) {
    exmy_stats_sums_finish(&total.sums, stats);
    stats->scale = scale_used;
    stats->delayed_over_current = ratio;
  }
  return 0;
}

int exmy_quantize_group_codes_f32(const exmy_format *f, const exmy_rounding_opts *o,
                                  const exmy_scaling *sc, const float *x, float *y,
                                  float *codes, float *block_scales, size_t rows, size_t cols,
                                  exmy_tensor_stats *stats) {
  if (!sc || sc->kind != EXMY_SCALING_GROUP || sc->group < 0 || sc->block_rows < 0 ||
      sc->dynamic_range_expansion || sc->hadamard)
    return -1;
  exmy_stats_acc total;
  if (stats) exmy_stats_acc_init(&total, f);
  if (cols)
    quantize_grouped(f, o, sc, x, y, codes, block_scales, rows, cols, stats ? &total : NULL);
  if (stats) {
    exmy_stats_sums_finish(&total.sums, stats);
    stats->scale = NAN;
    stats->delayed_over_current = NAN;
  }
  return 0;
}
