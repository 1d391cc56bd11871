/*
 * The one GEMM of the trainer and the recipes it is called with.
 *
 * Every linear layer's three GEMMs (Y = X W^T, dX = dY W, dW = dY^T X) and,
 * when the recipe says so, the attention products, call tq_gemm with the
 * operands of their site.  tq_gemm is exmy_qgemm (cpu/exmy_cpu.h): each
 * input rounded into its format under its scaling, then float32 GEMM, i.e. a
 * low-precision tensor-core GEMM with float32 accumulation, emulated.  The
 * float32 GEMM is exmy_sgemm (one order of operations: the same losses on any
 * CPU and thread count) unless tq_select_gemm chose OpenBLAS.
 *
 * A site holds one exmy_operand_quant per operand *use*, each with its own
 * delayed-scaling state and statistics, so that every state sees exactly one
 * tensor per step, as Transformer Engine's fp8_meta does (the weight of the
 * forward and of dX = dY W see the same values, hence the same scale).
 */
#ifndef EXPERIMENTS_QGEMM_H
#define EXPERIMENTS_QGEMM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lib/accum_core.h"
#include "lib/exmy.h"

enum { USE_FWD_X, USE_FWD_W, USE_DX_DY, USE_DX_W, USE_DW_DY, USE_DW_X, USES_PER_SITE };
extern const char *const tq_use_names[USES_PER_SITE];

/* A quantized copy of an operand, in its storage layout, kept for the later
 * GEMMs of the same step that read the same tensor: as Transformer Engine
 * casts X and W once in the forward and reuses the casts in the backward, and
 * casts dY once for both backward GEMMs.  Used only for element-wise recipes
 * (no scaling, per-tensor current or delayed scaling); MX, GROUP and NVFP4
 * blocks follow the reduction dimension, which differs between the uses, so
 * those operands are quantized by exmy_qgemm at every use. */
typedef struct {
  float *data;
  size_t cap;
  /* the per-tensor scale the copy was quantized with (1 unscaled): the
   * accumulation model's emin of a power-of-two-scaled operand follows it */
  float scale;
} tq_cache;
enum { SLOT_X, SLOT_W, SLOT_DY, SLOTS_PER_SITE };
/* The slot each use reads: X for fwd_x and dw_x, W for fwd_w and dx_w, dY
 * for dx_dy and dw_dy (model.c's linear and attention products). */
extern const int tq_use_slot[USES_PER_SITE];

/* The operands of one GEMM site (a linear layer, or an attention product:
 * for S = Q K^T, x = Q and w = K; for O = P V, x = P and w = V). */
typedef struct {
  exmy_operand_quant op[USES_PER_SITE];
  exmy_tensor_stats stats[USES_PER_SITE];
  tq_cache cache[SLOTS_PER_SITE];
  /* how its GEMMs accumulate: float32 (group 0, calloc's zeros) unless the
   * recipe's `accumulate` key names a model and an operand is quantized */
  exmy_accum_model accum;
} tq_site;

/* Whether q's scales follow the reduction dimension K (MX, GROUP and NVFP4
 * blocks), so that the operand is quantized by the GEMM at every use rather
 * than once per tensor into a cache. */
bool tq_along_k(const exmy_operand_quant *q);

/* The operand `use` of a site as a GEMM should receive it.  fill: quantize x
 * (rows x cols, leading dimension *ld) into the site's cache slot; !fill: take
 * the slot filled by an earlier use of the same tensor.  Returns the cached
 * copy (and sets *ld, *q = NULL: nothing left to quantize), or x itself with
 * *q = the operand (for exmy_qgemm to quantize: MX), or x with *q = NULL
 * (site NULL or operand not quantized). */
const float *tq_operand_for_gemm(tq_site *site, int use, int slot, bool fill, const float *x,
                                 int *ld, int rows, int cols, const exmy_operand_quant **q);
void tq_site_free_caches(tq_site *site);

/* Global knobs: whether this step gathers statistics, and the running element
 * counter that gives stochastic rounding fresh random bits (set from the step
 * at each step, so that a resumed run draws the same bits). */
extern bool tq_collect_stats;
extern uint64_t tq_sr_counter;

/* C = alpha op(A) op(B) + beta C (row-major, as cblas_sgemm) with A and B
 * rounded per qa / qb (NULL or !enabled: float32, the plain sgemm), each dot
 * product accumulated per `accum` (exmy_qgemm_accum; NULL or group 0: the
 * float32 GEMM, exmy_qgemm), emin_a / emin_b included (model.c sets them
 * to the formats of the site's operands: qa and qb are NULL for a cached
 * operand).  The recipe's models have k_slice 0: cuBLASLt's split-K
 * depends on the shape. */
void tq_gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha,
             const float *a, int lda, const exmy_operand_quant *qa,
             const float *b, int ldb, const exmy_operand_quant *qb,
             float beta, float *c, int ldc, const exmy_accum_model *accum);

/* The accumulation model of the site's GEMM of its uses ua and ub: the
 * site's `accum`, with emin_a / emin_b those of the two operands' formats
 * (exmy_accum_operand_emin), as both trainers pass it to their GEMMs; for an
 * operand cached with a power-of-two per-tensor scale s (TENSOR or DELAYED
 * with pow2), its format's emin - log2 s (exmy_accum_operand_emin_scaled,
 * s of the slot's last fill: call it after the operands of this GEMM are
 * prepared), where the tensor core clamps the codes. */
exmy_accum_model tq_site_accum(const tq_site *site, int ua, int ub);

/* The float32 GEMM under tq_gemm, for the whole process (the `gemm` key):
 * "exmy" (exmy_sgemm, the default) or "openblas" (cblas_sgemm: to compare
 * speed; its bits depend on the CPU and the thread count).  0, or -1 for
 * another name. */
int tq_select_gemm(const char *name);

/* For tests: called after every quantized GEMM with its arguments. */
typedef void (*tq_spy_fn)(bool trans_a, bool trans_b, int m, int n, int k,
                          const float *a, int lda, const exmy_operand_quant *qa,
                          const float *b, int ldb, const exmy_operand_quant *qb,
                          const float *c, int ldc);
extern tq_spy_fn tq_spy;

#endif /* EXPERIMENTS_QGEMM_H */
