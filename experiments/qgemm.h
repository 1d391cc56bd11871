/*
 * The one GEMM of the trainer: C = alpha op(A) op(B) + beta C with each input
 * operand rounded into its recipe's format first (emulating a low-precision
 * tensor-core GEMM with float32 accumulation).  Every linear layer's three
 * GEMMs (Y = X W^T, dX = dY W, dW = dY^T X) and, when the recipe says so, the
 * attention products, call tq_gemm with the operands of their site.
 *
 * Mirrors the exmy_qgemm contract planned in lib/exmy.h (issue 3), implemented
 * here with exmy_quantize_f32 + cblas_sgemm until cpu/ provides it.
 */
#ifndef EXPERIMENTS_QGEMM_H
#define EXPERIMENTS_QGEMM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lib/exmy.h"

typedef enum {
  TQ_SCALING_NONE = 0, /* quantize x as it is */
  TQ_SCALING_TENSOR,   /* per-tensor current scaling: s = fmax / amax * 2^-margin */
  TQ_SCALING_DELAYED,  /* per-tensor delayed scaling (Transformer Engine): s from the amax history */
  TQ_SCALING_MX,       /* OCP MX: blocks of 32 along the reduction dimension share an E8M0 scale */
} tq_scaling_kind;

#define TQ_MAX_HISTORY 1024

/* Delayed-scaling state of one tensor (TE DelayedScaling, amax_compute_algo="max").
 * Plain data, so that checkpoints can hold it. */
typedef struct {
  float scale;       /* the scale used by this step's casts (1 before any history) */
  float step_amax;   /* max |x| seen by this step's casts (folded in by tq_delayed_update) */
  int32_t len;       /* history length, 1..TQ_MAX_HISTORY */
  int32_t count;     /* entries filled so far (<= len) */
  int32_t pos;       /* next slot */
  int32_t pad;
  float history[TQ_MAX_HISTORY];
} tq_delayed;

/* Per-tensor quantization statistics (NVIDIA's FP8 debug numbers). */
typedef struct {
  double n, amax, underflow, overflow, sq_err, sq_ref, dot, sq_q;
  double scale;              /* last scale used */
  double delayed_over_current; /* delayed scale / the current-scaling scale */
  int uses;
} tq_stats;

typedef struct {
  bool enabled;             /* false: the operand stays float32 */
  exmy_format format;
  exmy_rounding_opts round; /* sr: seed from the recipe; offsets are drawn from tq_sr_counter */
  tq_scaling_kind scaling;
  int margin;               /* TENSOR / DELAYED: scale times 2^-margin */
  int block;                /* MX block size (32) */
  tq_delayed *delayed;      /* DELAYED only */
  tq_stats *stats;          /* if non-NULL and tq_collect_stats: accumulated */
} tq_operand;

/* The operands of one GEMM site: x (activations / first input), w (weights /
 * second input), dy (output gradients). */
typedef struct {
  tq_operand x, w, dy;
} tq_site;

/* Global knobs of the emulation: whether statistics are gathered, and the
 * running element counter that gives stochastic rounding fresh random bits
 * (reset to a function of the step at each step, so that resume is exact). */
extern bool tq_collect_stats;
extern uint64_t tq_sr_counter;

/* C = alpha op(A) op(B) + beta C, row-major as cblas_sgemm(CblasRowMajor, ...);
 * op(A) is m x k, op(B) is k x n.  A and B are replaced by their quantized
 * values per qa / qb (NULL or !enabled = untouched, the plain sgemm call). */
void tq_gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha,
             const float *a, int lda, const tq_operand *qa,
             const float *b, int ldb, const tq_operand *qb,
             float beta, float *c, int ldc);

/* Quantizes a rows x cols row-major tensor (leading dimension ld) into the
 * contiguous y (rows x cols), blocks (MX) running along rows when
 * `blocks_along_rows`, else along columns. */
void tq_quantize_tensor(const tq_operand *q, const float *x, int ld, float *y,
                        int rows, int cols, bool blocks_along_rows);

/* Delayed scaling: starts a state; folds the step's amax into the history and
 * computes the next scale = fmax / max(history) * 2^-margin. */
void tq_delayed_init(tq_delayed *d, int history_len);
void tq_delayed_update(tq_delayed *d, const exmy_format *f, int margin);

/* A spy for tests: when set, called with every quantized operand as the GEMM sees it. */
extern void (*tq_spy)(const tq_operand *q, const float *orig, int ld, const float *quant,
                      int rows, int cols);

#endif /* EXPERIMENTS_QGEMM_H */
