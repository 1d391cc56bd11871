/* The quantized GEMM of the trainer: round the operands, then cblas_sgemm. */
#include "experiments/qgemm.h"

#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool tq_collect_stats = false;
uint64_t tq_sr_counter = 0;
void (*tq_spy)(const tq_operand *, const float *, int, const float *, int, int) = NULL;

static float format_max(const exmy_format *f) {
  exmy_format_info info;
  exmy_format_get_info(f, &info);
  return info.max;
}

void tq_delayed_init(tq_delayed *d, int history_len) {
  memset(d, 0, sizeof *d);
  d->scale = 1.0f; /* Transformer Engine starts from scale 1 */
  d->len = history_len < 1 ? 1 : history_len > TQ_MAX_HISTORY ? TQ_MAX_HISTORY : history_len;
}

void tq_delayed_update(tq_delayed *d, const exmy_format *f, int margin) {
  d->history[d->pos] = d->step_amax;
  d->pos = (d->pos + 1) % d->len;
  if (d->count < d->len) d->count++;
  d->step_amax = 0.0f;
  float amax = 0.0f;
  for (int i = 0; i < d->count; i++) amax = fmaxf(amax, d->history[i]);
  /* TE: scale = (fp8_max / amax) / 2^margin, kept when amax is 0 or not finite */
  if (amax > 0.0f && isfinite(amax)) {
    float s = (format_max(f) / amax) / ldexpf(1.0f, margin);
    if (isfinite(s)) d->scale = s;
  }
}

static float amax_of(const float *y, size_t n) {
  float amax = 0.0f;
#pragma omp parallel for reduction(max : amax) if (n > 65536)
  for (size_t i = 0; i < n; i++) amax = fmaxf(amax, fabsf(y[i]));
  return amax;
}

static void scale_by(float *y, size_t n, float s) {
#pragma omp parallel for if (n > 65536)
  for (size_t i = 0; i < n; i++) y[i] *= s;
}

/* MX (OCP v1.0 section 6.3): X = 2^(floor(log2 amax) - emax_elem), elements
 * x / X rounded (saturating) into the element format.  Scales y in place by
 * 1/X and records each block's exponent. */
static int mx_block_exponent(float amax, const exmy_format *f) {
  if (!(amax > 0.0f) || !isfinite(amax)) return 0;
  int e = ilogbf(amax) - f->emax;
  if (e < -127) e = -127;
  if (e > 127) e = 127;
  return e;
}

static void mx_apply(float *y, int rows, int cols, int block, bool along_rows,
                     const exmy_format *f, int sign /* -1 divide, +1 multiply */,
                     int *exps) {
  if (along_rows) {
    int nb = (cols + block - 1) / block;
#pragma omp parallel for if ((size_t)rows * cols > 65536)
    for (int r = 0; r < rows; r++) {
      float *row = y + (size_t)r * cols;
      for (int b = 0; b < nb; b++) {
        int j0 = b * block, j1 = j0 + block < cols ? j0 + block : cols;
        int *e = exps + (size_t)r * nb + b;
        if (sign < 0) {
          float amax = 0.0f;
          for (int j = j0; j < j1; j++) amax = fmaxf(amax, fabsf(row[j]));
          *e = mx_block_exponent(amax, f);
        }
        for (int j = j0; j < j1; j++) row[j] = ldexpf(row[j], sign * *e);
      }
    }
  } else {
    int nb = (rows + block - 1) / block;
#pragma omp parallel for if ((size_t)rows * cols > 65536)
    for (int c = 0; c < cols; c++) {
      for (int b = 0; b < nb; b++) {
        int i0 = b * block, i1 = i0 + block < rows ? i0 + block : rows;
        int *e = exps + (size_t)c * nb + b;
        if (sign < 0) {
          float amax = 0.0f;
          for (int i = i0; i < i1; i++) amax = fmaxf(amax, fabsf(y[(size_t)i * cols + c]));
          *e = mx_block_exponent(amax, f);
        }
        for (int i = i0; i < i1; i++) {
          float *p = y + (size_t)i * cols + c;
          *p = ldexpf(*p, sign * *e);
        }
      }
    }
  }
}

static void add_stats(const tq_operand *q, const float *x, int ld, const float *y, int rows,
                      int cols, float scale, float current_scale) {
  tq_stats *s = q->stats;
  const float fmax = format_max(&q->format);
  double amax = 0, under = 0, over = 0, se = 0, sr = 0, dot = 0, sq = 0;
#pragma omp parallel for reduction(max : amax) reduction(+ : under, over, se, sr, dot, sq)
  for (int r = 0; r < rows; r++) {
    for (int c = 0; c < cols; c++) {
      double xv = x[(size_t)r * ld + c], yv = y[(size_t)r * cols + c];
      amax = fmax(amax, fabs(xv));
      if (xv != 0 && yv == 0) under += 1;
      if (fabs(xv) * scale > fmax) over += 1;
      se += (xv - yv) * (xv - yv);
      sr += xv * xv;
      dot += xv * yv;
      sq += yv * yv;
    }
  }
  s->n += (double)rows * cols;
  s->amax = fmax(s->amax, amax);
  s->underflow += under;
  s->overflow += over;
  s->sq_err += se;
  s->sq_ref += sr;
  s->dot += dot;
  s->sq_q += sq;
  s->scale = scale;
  s->delayed_over_current = current_scale > 0 ? scale / current_scale : 0;
  s->uses++;
}

void tq_quantize_tensor(const tq_operand *q, const float *x, int ld, float *y,
                        int rows, int cols, bool blocks_along_rows) {
  const size_t n = (size_t)rows * cols;
  for (int r = 0; r < rows; r++) memcpy(y + (size_t)r * cols, x + (size_t)r * ld, sizeof(float) * cols);
  exmy_rounding_opts ro = q->round;
  ro.offset = tq_sr_counter;
  if (ro.mode == EXMY_SR) tq_sr_counter += n;
  float scale = 1.0f, current = 0.0f;
  const bool stats = tq_collect_stats && q->stats;
  switch (q->scaling) {
    case TQ_SCALING_NONE:
      exmy_quantize_f32(&q->format, &ro, y, y, n);
      break;
    case TQ_SCALING_TENSOR:
    case TQ_SCALING_DELAYED: {
      float amax = amax_of(y, n);
      if (amax > 0.0f && isfinite(amax))
        current = (format_max(&q->format) / amax) / ldexpf(1.0f, q->margin);
      if (q->scaling == TQ_SCALING_TENSOR) {
        scale = current > 0.0f && isfinite(current) ? current : 1.0f;
      } else {
        scale = q->delayed->scale;
        if (amax > q->delayed->step_amax || !isfinite(amax)) q->delayed->step_amax = amax;
      }
      scale_by(y, n, scale);
      exmy_quantize_f32(&q->format, &ro, y, y, n);
      scale_by(y, n, 1.0f / scale);
      break;
    }
    case TQ_SCALING_MX: {
      int block = q->block > 0 ? q->block : 32;
      size_t nb = blocks_along_rows ? (size_t)rows * ((cols + block - 1) / block)
                                    : (size_t)cols * ((rows + block - 1) / block);
      int *exps = malloc(nb * sizeof(int));
      mx_apply(y, rows, cols, block, blocks_along_rows, &q->format, -1, exps);
      ro.saturate = true; /* OCP MX: element conversion clamps to the largest normal */
      exmy_quantize_f32(&q->format, &ro, y, y, n);
      mx_apply(y, rows, cols, block, blocks_along_rows, &q->format, +1, exps);
      free(exps);
      break;
    }
  }
  if (stats) add_stats(q, x, ld, y, rows, cols, scale, current);
  if (tq_spy) tq_spy(q, x, ld, y, rows, cols);
}

static float *scratch_get(int which, size_t n) {
  static float *buf[2];
  static size_t cap[2];
  if (n > cap[which]) {
    free(buf[which]);
    buf[which] = malloc(n * sizeof(float));
    if (!buf[which]) {
      fprintf(stderr, "tq_gemm: out of memory\n");
      exit(1);
    }
    cap[which] = n;
  }
  return buf[which];
}

void tq_gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha,
             const float *a, int lda, const tq_operand *qa,
             const float *b, int ldb, const tq_operand *qb,
             float beta, float *c, int ldc) {
  if (qa && qa->enabled) {
    int rows = trans_a ? k : m, cols = trans_a ? m : k;
    float *buf = scratch_get(0, (size_t)rows * cols);
    /* blocks run along the reduction dimension k */
    tq_quantize_tensor(qa, a, lda, buf, rows, cols, !trans_a);
    a = buf;
    lda = cols;
  }
  if (qb && qb->enabled) {
    int rows = trans_b ? n : k, cols = trans_b ? k : n;
    float *buf = scratch_get(1, (size_t)rows * cols);
    tq_quantize_tensor(qb, b, ldb, buf, rows, cols, trans_b);
    b = buf;
    ldb = cols;
  }
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b, ldb,
              beta, c, ldc);
}
