/* Calibration, not a test: cuBLASLt's own block-scaled FP8 GEMM (Hopper,
 * CUDA >= 12.9: CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F, one float32 scale
 * per 1 x 128 tile along K, and ..._BLK128x128_32F, one per 128 x 128 block)
 * against the accumulation model fp8-deepseek runs under (hopper-split with
 * block scales, exmy_accum_dot_scaled in lib/accum_core.h: each 128-slice
 * of K accumulated as the H100's fast accumulation does, promoted with
 * acc = fmaf(fl(sa * sb), partial, acc)).  Whether cuBLASLt's arithmetic is
 * that model bit for bit decides whether the trainer may call it instead of
 * block_fp8_gemm (experiments/gpu/gemm.cu); this program measures it and
 * says which promotion order the hardware seems to use where it is not.
 *
 * The operands are made as the trainer makes them: float32 values quantized
 * by the library's GROUP quantizer (exmy_quantize_group_codes_f32, E4M3 rne
 * saturating, the scale of each block from its own amax, not a power of
 * two), in one of two pairings (--pairing; both by default):
 *   vec-blk  X (M x K) per 1 x 128 tile, the activation or gradient; W
 *            (N x K) per 128 x 128 block, the weight; C = X W^T (the
 *            forward and data-gradient GEMMs);
 *   vec-vec  X and G (N x K) both per 1 x 128 tile along K; C = X G^T (the
 *            weight gradient dW = dY^T X, K the tokens: cuBLASLt's VEC128
 *            scale mode on both operands).
 * Below, W stands for the second operand, G in vec-vec.  The model's C comes from the
 * GPU emulation (exmy_cuda_qgemm_accum on the same float32 values under the
 * same recipes, the trainer's own path; bit for bit the CPU's
 * exmy_qgemm_accum).  On a sample of outputs the CPU also computes, from
 * the codes and scales the quantizer gave:
 *   M  the model itself (exmy_accum_dot_scaled over all of K);
 *   A..F alternative promotions of the same per-slice partials P (the model
 *      called on one 128-slice of codes at a time, unscaled: its running sum
 *      rounded to float32), sx and sw the slice's two scales:
 *   A  acc + fl(sx * fl(sw * P))      B  acc + fl(sw * fl(sx * P))
 *   C  fmaf(sx, fl(sw * P), acc)      D  acc + fl(fl(sx * sw) * P) (unfused)
 *   E  fl(acc + sx * sw * P), the product unrounded (long double; exact,
 *      the sum rounded twice, to long double and to float32)
 *   F  the model's promotion every 64 elements instead of 128 (P per half)
 *   G  float32 partials: each slice's codes accumulated in float32, promoted
 *      as the model does (the library's "fp32" model with promote_every 128)
 * and a double-precision reference (the exact products, summed in double).
 *
 * Each configuration (pairing, shape, formats, data, which cuBLASLt operand
 * X is, fast accumulation on or off, each algorithm the heuristic
 * returned, up to --algos) prints one line: the share of outputs
 * bit-identical to the model, zeros of opposite signs, the largest
 * difference in float32 units in the last place and relative, and the
 * share of the sample each of M, A..G reproduces bit for bit.
 *
 * The descriptors and scale layouts are the trainer's own
 * (experiments/gpu/blockscaled_lt.h, block_fp8_gemm's; vec-vec's VEC128 on
 * both operands not yet called by the trainer); --vec-kmajor and
 * --blk-unpadded try other readings of the scales, should the double
 * reference say they were misread.
 *
 * --cpu-only: no GPU, no cuBLASLt: the data, the quantizer and the CPU's
 * hypotheses alone, exit status 1 where the per-slice partials do not
 * reassemble into the model's result (a check of this program wherever it
 * builds).
 *
 * Exit status: 0 when it ran (mismatches included), 2 on bad usage, 1 when
 * there is no GPU or cuBLASLt refused every configuration. */
#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/exmy_cpu.h"
#include "cuda/exmy_cuda.h"
#include "experiments/gpu/blockscaled_lt.h"
#include "lib/accum_core.h"
#include "lib/exmy.h"
#include "tests/test_rng.h"

#define CU(call)                                                                    \
  do {                                                                              \
    const cudaError_t e_ = (call);                                                  \
    if (e_ != cudaSuccess) {                                                        \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call,                  \
              cudaGetErrorString(e_));                                              \
      exit(1);                                                                      \
    }                                                                               \
  } while (0)

enum { BLOCK = 128, MAX_ALGOS = 8 };

/* ----------------------------------------------------------------- data */

static uint64_t rng_state = 2024;
static double urand(void) { return test_rng_uniform(&rng_state); }
static double gauss(void) { return test_rng_gauss(&rng_state); }

enum { DATA_NORMAL, DATA_WIDE, DATA_CANCEL, DATA_ZERO, DATA_TINY, N_DATA };
static const char *const data_names[N_DATA] = {"normal", "wide", "cancel", "zero", "tiny"};

/* rows x cols values of one kind; second: the operand W (or G), else X;
 * block_rows: its scales' tiles are block_rows x 128.  NORMAL: N(0, 1) (W:
 * 0.05 times that).  WIDE: sign 2^U(-30..30) [1, 2) per element: within a
 * block most codes far below its amax, subnormal or zero.  CANCEL: in
 * every other column tile, odd columns the even neighbour negated (X) or
 * repeated (W), so that those slices' products cancel exactly (zero
 * partials); the rest NORMAL.  ZERO: one tile in four all zeros (zero
 * scales' promotions), the rest NORMAL.  TINY: X's tiles of
 * magnitude 2^U(-118..-100) (dequantization factors near float32's
 * smallest normals: promotions that underflow), W NORMAL; in both, a third
 * of the elements 2^-12 .. 2^-20 of their neighbours (E4M3 subnormal
 * codes). */
static void gen(float *x, int rows, int cols, int kind, int second, int block_rows) {
  for (int r = 0; r < rows; r++)
    for (int c = 0; c < cols; c++) {
      const unsigned tr = (unsigned)(r / block_rows), tc = (unsigned)(c / BLOCK);
      const unsigned h = (tr * 73856093u) ^ (tc * 19349663u) ^ (second ? 0x5bd1e995u : 0u);
      double v = (second ? 0.05 : 1.0) * gauss();
      if (kind == DATA_WIDE) {
        v = (urand() < 0.5 ? -1.0 : 1.0) * ldexp(1.0 + urand(), -30 + (int)(urand() * 61));
      } else if (kind == DATA_CANCEL) {
        if (tc % 2 == 0 && c % 2) v = (second ? 1.0 : -1.0) * x[(size_t)r * cols + c - 1];
      } else if (kind == DATA_ZERO) {
        if (h % 4 == 1) v = 0.0;
      } else if (kind == DATA_TINY) {
        if (!second) v = gauss() * ldexp(1.0, -118 + (int)(h % 19));
        if (urand() < 1.0 / 3) v *= ldexp(1.0, -12 - (int)(urand() * 9));
      }
      x[(size_t)r * cols + c] = (float)v;
    }
}

/* One operand as the trainer quantizes it: GROUP scaling, 128 along K,
 * block_rows rows per block. */
static exmy_scaling group_scaling(int block_rows) {
  exmy_scaling s;
  memset(&s, 0, sizeof s);
  s.kind = EXMY_SCALING_GROUP;
  s.group = BLOCK;
  s.block_rows = block_rows;
  return s;
}

typedef struct {
  int rows, k, kb;       /* R x K values, kb = ceil(K / 128) blocks along K */
  int block_rows;        /* 1 (X, G) or 128 (W) */
  exmy_format fmt;
  float *values;         /* R x K float32 inputs */
  float *codes;          /* R x K codes (their values) */
  float *scales;         /* ceil(R / block_rows) x kb dequantization factors */
  uint8_t *bytes;        /* R x K codes as FP8 bytes */
} operand;

static void quantize(operand *o) {
  const exmy_rounding_opts ro = {.mode = EXMY_RNE, .saturate = true};
  const exmy_scaling sc = group_scaling(o->block_rows);
  const size_t n = (size_t)o->rows * o->k;
  float *y = malloc(sizeof(float) * n);
  o->codes = malloc(sizeof(float) * n);
  o->scales = malloc(sizeof(float) * (size_t)((o->rows + o->block_rows - 1) / o->block_rows) *
                     o->kb);
  o->bytes = malloc(n);
  if (exmy_quantize_group_codes_f32(&o->fmt, &ro, &sc, o->values, y, o->codes, o->scales,
                                    (size_t)o->rows, (size_t)o->k, NULL)) {
    fprintf(stderr, "exmy_quantize_group_codes_f32 refused the recipe\n");
    exit(1);
  }
  for (size_t i = 0; i < n; i++) o->bytes[i] = (uint8_t)exmy_ref_encode(&o->fmt, &ro, o->codes[i], 0);
  free(y);
}

/* The scales as cuBLASLt reads them (experiments/gpu/blockscaled_lt.h), or
 * the other readings --vec-kmajor / --blk-unpadded try. */
static float *lt_scales(const operand *o, int vec_kmajor, int blk_unpadded, size_t *count) {
  const size_t k = (size_t)o->k;
  if (o->block_rows == 1) {
    float *s = malloc(sizeof(float) * (size_t)o->rows * o->kb);
    for (int r = 0; r < o->rows; r++)
      for (int b = 0; b < o->kb; b++)
        s[vec_kmajor ? (size_t)r * o->kb + b : exmy_blockscaled_vec_at(r, b, o->rows)] =
            o->scales[(size_t)r * o->kb + b];
    *count = exmy_blockscaled_count(0, o->rows, k);
    return s;
  }
  const int rb = (o->rows + BLOCK - 1) / BLOCK;
  *count = blk_unpadded ? (size_t)rb * o->kb : exmy_blockscaled_count(1, o->rows, k);
  float *s = calloc(*count, sizeof(float));
  for (int r = 0; r < rb; r++)
    for (int b = 0; b < o->kb; b++)
      s[blk_unpadded ? (size_t)r * o->kb + b : exmy_blockscaled_blk_at(r, b, k)] =
          o->scales[(size_t)r * o->kb + b];
  return s;
}

/* --------------------------------------------------- the model's result */

/* C = X W^T (or X G^T) under hopper-split with block-scaled operands, by
 * the GPU emulation the trainer uses (row-major M x N). */
static float *model_gpu(exmy_cuda_gemm *g, const operand *x, const operand *w,
                        const exmy_accum_model *model) {
  const int m = x->rows, n = w->rows, k = x->k;
  const exmy_cuda_operand_quant qa = {.enabled = true,
                                      .format = x->fmt,
                                      .round = {.mode = EXMY_RNE, .saturate = true},
                                      .scaling = group_scaling(1)};
  exmy_cuda_operand_quant qb = qa;
  qb.format = w->fmt;
  qb.scaling = group_scaling(w->block_rows);
  float *dx, *dw, *dc;
  CU(cudaMalloc((void **)&dx, sizeof(float) * (size_t)m * k));
  CU(cudaMalloc((void **)&dw, sizeof(float) * (size_t)n * k));
  CU(cudaMalloc((void **)&dc, sizeof(float) * (size_t)m * n));
  CU(cudaMemcpy(dx, x->values, sizeof(float) * (size_t)m * k, cudaMemcpyHostToDevice));
  CU(cudaMemcpy(dw, w->values, sizeof(float) * (size_t)n * k, cudaMemcpyHostToDevice));
  CU(exmy_cuda_qgemm_accum(g, false, true, (size_t)m, (size_t)n, (size_t)k, 1.0f, dx,
                           (size_t)k, &qa, dw, (size_t)k, &qb, 0.0f, dc, (size_t)n, NULL,
                           model, 0));
  float *c = malloc(sizeof(float) * (size_t)m * n);
  CU(cudaMemcpy(c, dc, sizeof(float) * (size_t)m * n, cudaMemcpyDeviceToHost));
  CU(cudaFree(dx));
  CU(cudaFree(dw));
  CU(cudaFree(dc));
  return c;
}

enum { H_MODEL, H_A, H_B, H_C, H_D, H_E, H_F, H_G, N_HYP };
static const char hyp_names[N_HYP] = {'M', 'A', 'B', 'C', 'D', 'E', 'F', 'G'};

/* The hypotheses at output (i, j) (see the top of the file), and the
 * double reference; *reassembled: whether fmaf(fl(sx sw), P, acc) over the
 * per-slice partials gave the model's own result (else P is not the
 * model's partial and A..F mean nothing). */
static void hypotheses(const exmy_accum_model *m, const exmy_accum_model *m32, const operand *x,
                       const operand *w, int i, int j, float h[N_HYP], double *ref,
                       int *reassembled) {
  const int k = x->k;
  const float *a = x->codes + (size_t)i * k, *b = w->codes + (size_t)j * k;
  const float *sx = x->scales + (size_t)i * x->kb, *sw = w->scales + (size_t)(j / w->block_rows) * w->kb;
  h[H_MODEL] = exmy_accum_dot_scaled(m, a, 1, sx, b, 1, sw, k);
  h[H_G] = exmy_accum_dot_scaled(m32, a, 1, sx, b, 1, sw, k);
  float acc[N_HYP] = {0};
  double exact = 0.0;
  for (int kb = 0; kb * BLOCK < k; kb++) {
    const int p0 = kb * BLOCK, len = k - p0 < BLOCK ? k - p0 : BLOCK;
    const float P = exmy_accum_dot_scaled(m, a + p0, 1, NULL, b + p0, 1, NULL, len);
    const float s = sx[kb] * sw[kb];
    acc[H_MODEL] = fmaf(s, P, acc[H_MODEL]);
    acc[H_A] = acc[H_A] + sx[kb] * (sw[kb] * P);
    acc[H_B] = acc[H_B] + sw[kb] * (sx[kb] * P);
    acc[H_C] = fmaf(sx[kb], sw[kb] * P, acc[H_C]);
    acc[H_D] = acc[H_D] + s * P;
    acc[H_E] = (float)((long double)acc[H_E] + (long double)sx[kb] * sw[kb] * P);
    for (int half = 0; half < len; half += 64) {
      const int hl = len - half < 64 ? len - half : 64;
      acc[H_F] = fmaf(s, exmy_accum_dot_scaled(m, a + p0 + half, 1, NULL, b + p0 + half, 1,
                                               NULL, hl), acc[H_F]);
    }
    double part = 0.0;
    for (int p = p0; p < p0 + len; p++) part += (double)a[p] * b[p];
    exact += part * sx[kb] * sw[kb];
  }
  for (int t = H_A; t <= H_F; t++) h[t] = acc[t];
  *reassembled = !memcmp(&acc[H_MODEL], &h[H_MODEL], sizeof(float));
  *ref = exact;
}

/* ------------------------------------------------------------ cuBLASLt */

typedef struct {
  cublasLtHandle_t lt;
  void *workspace;
  size_t workspace_bytes;
} lt_ctx;

enum { ACT_IS_A, ACT_IS_B }; /* which cuBLASLt operand X is */

enum { PAIR_BLK, PAIR_VEC, N_PAIR }; /* vec-blk, vec-vec (the top of the file) */
static const char *const pair_names[N_PAIR] = {"vec-blk", "vec-vec"};
/* how each pairing's lines name the configuration, by ACT_IS_A / ACT_IS_B */
static const char *const pair_where[N_PAIR][2] = {
    {"X=A(VEC128) W=B(BLK)", "W=A(BLK) X=B(VEC128)"},
    {"X=A(VEC128) G=B(VEC128)", "G=A(VEC128) X=B(VEC128)"}};

static void describe_algo(const cublasLtMatmulHeuristicResult_t *r, char *buf, size_t len) {
  int32_t id = -1, splits = -1, swizzle = -1, custom = -1;
  uint32_t tile = 0, stages = 0, reduction = 0;
  uint16_t cluster = 0;
  size_t w;
  const cublasLtMatmulAlgo_t *a = &r->algo;
  cublasLtMatmulAlgoConfigGetAttribute(a, CUBLASLT_ALGO_CONFIG_ID, &id, sizeof id, &w);
  cublasLtMatmulAlgoConfigGetAttribute(a, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof tile, &w);
  cublasLtMatmulAlgoConfigGetAttribute(a, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages, sizeof stages,
                                       &w);
  cublasLtMatmulAlgoConfigGetAttribute(a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splits,
                                       sizeof splits, &w);
  cublasLtMatmulAlgoConfigGetAttribute(a, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &reduction,
                                       sizeof reduction, &w);
  cublasLtMatmulAlgoConfigGetAttribute(a, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, &swizzle,
                                       sizeof swizzle, &w);
  cublasLtMatmulAlgoConfigGetAttribute(a, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, &custom,
                                       sizeof custom, &w);
  cublasLtMatmulAlgoConfigGetAttribute(a, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &cluster,
                                       sizeof cluster, &w);
  snprintf(buf, len,
           "algo %d tile %u stages %u split-K %d reduction %u swizzle %d custom %d cluster %u "
           "workspace %zu waves %.2f",
           id, tile, stages, splits, reduction, swizzle, custom, (unsigned)cluster,
           r->workspaceSize, (double)r->wavesCount);
}

/* Asks the heuristic for algorithms computing C = X W^T with X's bytes and
 * scales dx, dsx (VEC128) and W's dw, dsw (BLK128x128, or VEC128 for G),
 * act: which operand X is; *st: why not, when none came.  The descriptors stay in p->d. */
typedef struct {
  exmy_blockscaled_desc d;
  cublasLtMatmulHeuristicResult_t heur[MAX_ALGOS];
  int found;
} lt_plan;

static cublasStatus_t lt_plan_make(lt_ctx *c, lt_plan *p, int act, int fast, const operand *x,
                                   const operand *w, const void *dsx, const void *dsw) {
  memset(p, 0, sizeof *p);
  const operand *oa = act == ACT_IS_A ? x : w, *ob = act == ACT_IS_A ? w : x;
  const void *sa = act == ACT_IS_A ? dsx : dsw, *sb = act == ACT_IS_A ? dsw : dsx;
  const cudaDataType ta = oa->fmt.exp_bits == 4 ? CUDA_R_8F_E4M3 : CUDA_R_8F_E5M2;
  const cudaDataType tb = ob->fmt.exp_bits == 4 ? CUDA_R_8F_E4M3 : CUDA_R_8F_E5M2;
  cublasStatus_t st;
  cublasLtMatmulPreference_t pref = NULL;
  /* column-major: D (ra x rb) = (A stored k x ra)^T (B stored k x rb) */
  if ((st = exmy_blockscaled_desc_make(&p->d, ta, oa->block_rows != 1, tb, ob->block_rows != 1,
                                       (uint64_t)x->k, (uint64_t)oa->rows, (uint64_t)ob->rows,
                                       oa->rows, sa, sb, fast)) ||
      (st = cublasLtMatmulPreferenceCreate(&pref)) ||
      (st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                 &c->workspace_bytes,
                                                 sizeof c->workspace_bytes))) {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    return st;
  }
  st = cublasLtMatmulAlgoGetHeuristic(c->lt, p->d.op, p->d.la, p->d.lb, p->d.ld, p->d.ld, pref,
                                      MAX_ALGOS, p->heur, &p->found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (st) p->found = 0;
  return st ? st : p->found ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_SUPPORTED;
}

static void lt_plan_free(lt_plan *p) { exmy_blockscaled_desc_free(&p->d); }

/* Runs algorithm i of p; C row-major M x N into c (NaN where it wrote
 * nothing).  Returns its status. */
static cublasStatus_t lt_run(lt_ctx *c, lt_plan *p, int i, int act, const operand *x,
                             const operand *w, const void *dbx, const void *dbw, float *dd,
                             float *out) {
  const int m = x->rows, n = w->rows;
  const float one = 1.0f, zero = 0.0f;
  const void *da = act == ACT_IS_A ? dbx : dbw, *db = act == ACT_IS_A ? dbw : dbx;
  CU(cudaMemset(dd, 0xff, sizeof(float) * (size_t)m * n));
  const cublasStatus_t st =
      cublasLtMatmul(c->lt, p->d.op, &one, da, p->d.la, db, p->d.lb, &zero, dd, p->d.ld, dd,
                     p->d.ld, &p->heur[i].algo, c->workspace, c->workspace_bytes, 0);
  if (st) return st;
  CU(cudaDeviceSynchronize());
  float *d = malloc(sizeof(float) * (size_t)m * n);
  CU(cudaMemcpy(d, dd, sizeof(float) * (size_t)m * n, cudaMemcpyDeviceToHost));
  for (int r = 0; r < m; r++)
    for (int q = 0; q < n; q++)
      out[(size_t)r * n + q] = act == ACT_IS_A ? d[r + (size_t)q * m] : d[q + (size_t)r * n];
  free(d);
  return CUBLAS_STATUS_SUCCESS;
}

/* ----------------------------------------------------------- comparison */

static int same_bits(float a, float b) { return !memcmp(&a, &b, sizeof a); }

/* Distance in float32 units in the last place (the ordered integers of the
 * two values); NaN against anything else: UINT32_MAX. */
static uint32_t ulps(float a, float b) {
  if (isnan(a) || isnan(b)) return isnan(a) && isnan(b) ? 0 : UINT32_MAX;
  int32_t ia, ib;
  memcpy(&ia, &a, 4);
  memcpy(&ib, &b, 4);
  const int64_t oa = ia < 0 ? -(int64_t)(ia & 0x7fffffff) : ia,
                ob = ib < 0 ? -(int64_t)(ib & 0x7fffffff) : ib;
  const int64_t d = oa > ob ? oa - ob : ob - oa;
  return d > UINT32_MAX ? UINT32_MAX : (uint32_t)d;
}

static double rel(double a, double b) {
  const double d = fabs(a - b), s = fmax(fabs(a), fabs(b));
  return d == 0.0 ? 0.0 : s == 0.0 || isnan(d) ? INFINITY : d / s;
}

/* ---------------------------------------------------------------- main */

typedef struct {
  int m, n, k, pairing;
} shape;

static const shape default_shapes[] = {
    {256, 768, 2048, PAIR_BLK},  /* a linear site's Y at the trainer's small sizes */
    {4096, 2048, 768, PAIR_BLK}, /* the MLP's up projection */
    {2048, 768, 768, PAIR_BLK},  /* Y and dX at 768 */
    {768, 2048, 4096, PAIR_BLK}, /* a dW-like shape: long K */
    {128, 128, 128, PAIR_BLK},   /* one block */
    {768, 2048, 4096, PAIR_VEC}, /* dW of the MLP's down projection, 4096 tokens */
    {2048, 768, 4096, PAIR_VEC}, /* dW of its up projection */
    {768, 768, 4096, PAIR_VEC},  /* dW of an attention projection */
    {128, 128, 128, PAIR_VEC},   /* one tile each */
};

/* The GPU, cuBLASLt and the emulation's context, and a line on what they
 * are; 0, or -1 after saying why not. */
static int gpu_open(lt_ctx *lc, exmy_cuda_gemm **g) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices < 1) {
    printf("no GPU: nothing calibrated\n");
    return -1;
  }
  struct cudaDeviceProp prop;
  CU(cudaGetDeviceProperties(&prop, 0));
  char err[600];
  if (exmy_cuda_cublas_load(err, sizeof err)) {
    printf("%s\n", err);
    return -1;
  }
  int runtime = 0;
  CU(cudaRuntimeGetVersion(&runtime));
  printf("device: %s (sm_%d%d); CUDA runtime %d; cuBLASLt %zu\n", prop.name, prop.major,
         prop.minor, runtime, cublasLtGetVersion());
  if (cublasLtCreate(&lc->lt)) {
    printf("cublasLtCreate failed\n");
    return -1;
  }
  CU(cudaMalloc(&lc->workspace, lc->workspace_bytes));
  if (!(*g = exmy_cuda_gemm_new())) {
    printf("no GEMM context\n");
    return -1;
  }
  return 0;
}

static void usage(const char *argv0) {
  fprintf(stderr,
          "usage: %s [--pairing vec-blk|vec-vec|both] [--quick] [--sample N] [--algos N] "
          "[--shape MxNxK]... [--vec-kmajor] [--blk-unpadded] [--cpu-only]\n"
          "  --pairing P    X (1 x 128) against W (128 x 128, vec-blk) or against G (1 x 128,\n"
          "                 vec-vec, the weight gradient's); both (default)\n"
          "  --quick        vec-blk 128^3 and 256 x 768 x 2048, vec-vec 128^3; E4M3 only\n"
          "  --sample N     outputs per case on which the CPU tests the hypotheses (4096)\n"
          "  --algos N      heuristic algorithms run per configuration (1..%d, default 4)\n"
          "  --shape MxNxK  instead of the default shapes, for each pairing run (repeatable;\n"
          "                 multiples of 128 advised)\n"
          "  --vec-kmajor   read the 1 x 128 scales K-contiguous instead of M-contiguous\n"
          "  --blk-unpadded 128 x 128 scales with ld ceil(K/128) instead of a multiple of 4\n"
          "  --cpu-only     the CPU's side alone (no GPU): the hypotheses' own check\n",
          argv0, MAX_ALGOS);
}

int main(int argc, char **argv) {
  int cpu_only = 0, quick = 0, sample = 4096, algos = 4, vec_kmajor = 0, blk_unpadded = 0,
      n_shapes = 0, n_given = 0;
  int pairs[N_PAIR] = {1, 1}; /* which pairings run */
  shape shapes[2 * 16], given[16];
  for (int a = 1; a < argc; a++) {
    if (!strcmp(argv[a], "--quick")) {
      quick = 1;
    } else if (!strcmp(argv[a], "--sample") && a + 1 < argc) {
      sample = atoi(argv[++a]);
      if (sample < 1) return usage(argv[0]), 2;
    } else if (!strcmp(argv[a], "--algos") && a + 1 < argc) {
      algos = atoi(argv[++a]);
      if (algos < 1 || algos > MAX_ALGOS) return usage(argv[0]), 2;
    } else if (!strcmp(argv[a], "--pairing") && a + 1 < argc) {
      const char *p = argv[++a];
      pairs[PAIR_BLK] = !strcmp(p, pair_names[PAIR_BLK]) || !strcmp(p, "both");
      pairs[PAIR_VEC] = !strcmp(p, pair_names[PAIR_VEC]) || !strcmp(p, "both");
      if (!pairs[PAIR_BLK] && !pairs[PAIR_VEC]) return usage(argv[0]), 2;
    } else if (!strcmp(argv[a], "--shape") && a + 1 < argc && n_given < 16) {
      shape s;
      if (sscanf(argv[++a], "%dx%dx%d", &s.m, &s.n, &s.k) != 3 || s.m < 1 || s.n < 1 || s.k < 1)
        return usage(argv[0]), 2;
      given[n_given++] = s;
    } else if (!strcmp(argv[a], "--cpu-only")) {
      cpu_only = 1;
    } else if (!strcmp(argv[a], "--vec-kmajor")) {
      vec_kmajor = 1;
    } else if (!strcmp(argv[a], "--blk-unpadded")) {
      blk_unpadded = 1;
    } else {
      usage(argv[0]);
      return 2;
    }
  }
  for (int p = 0; p < N_PAIR; p++)
    if (pairs[p] && n_given)
      for (int s = 0; s < n_given; s++) {
        shapes[n_shapes] = given[s];
        shapes[n_shapes++].pairing = p;
      }
    else if (pairs[p])
      for (size_t s = 0; s < sizeof default_shapes / sizeof *default_shapes; s++)
        if (default_shapes[s].pairing == p &&
            (!quick || default_shapes[s].k == 128 || default_shapes[s].m == 256))
          shapes[n_shapes++] = default_shapes[s];

  exmy_accum_model model, model32;
  if (exmy_accum_model_parse("hopper-split", &model) || exmy_accum_model_parse("fp32", &model32)) {
    fprintf(stderr, "no hopper-split model\n");
    return 1;
  }
  model32.promote_every = BLOCK;
  exmy_format e4m3, e5m2;
  exmy_format_parse("e4m3", &e4m3);
  exmy_format_parse("e5m2", &e5m2);
  const exmy_format *fmts[2][2] = {{&e4m3, &e4m3}, {&e5m2, &e4m3}}; /* X's, W's */
  int configs = 0, configs_ran = 0, ran = 0, unassembled = 0;
  lt_ctx lc = {.workspace_bytes = 64u << 20};
  exmy_cuda_gemm *g = NULL;

  if (cpu_only)
    printf("CPU only: no GPU, no cuBLASLt\n");
  else if (gpu_open(&lc, &g))
    return 1;
  printf("scales: VEC128 %s, BLK128x128 ld %s; sample %d outputs per case; up to %d "
         "algorithms\n", vec_kmajor ? "K-contiguous" : "M-contiguous",
         blk_unpadded ? "ceil(K/128)" : "ceil(K/128) rounded up to 4", sample, algos);
  printf("hypotheses: M model fmaf(fl(sx*sw),P,acc); A acc+sx*(sw*P); B acc+sw*(sx*P); "
         "C fmaf(sx,sw*P,acc); D acc+(sx*sw)*P unfused; E acc+sx*sw*P product unrounded; "
         "F M promoted every 64; G float32 partials promoted as M\n");

  for (int si = 0; si < n_shapes; si++)
    for (int fi = 0; fi < (quick ? 1 : 2); fi++)
      for (int kind = 0; kind < N_DATA; kind++) {
        const shape sh = shapes[si];
        const int vv = sh.pairing == PAIR_VEC;
        operand x = {.rows = sh.m, .k = sh.k, .kb = (sh.k + BLOCK - 1) / BLOCK,
                     .block_rows = 1, .fmt = *fmts[fi][0]};
        operand w = {.rows = sh.n, .k = sh.k, .kb = x.kb, .block_rows = vv ? 1 : BLOCK,
                     .fmt = *fmts[fi][1]};
        rng_state = 2024 + 7919u * (unsigned)(si * N_DATA + kind) + 104729u * (unsigned)fi;
        x.values = malloc(sizeof(float) * (size_t)sh.m * sh.k);
        w.values = malloc(sizeof(float) * (size_t)sh.n * sh.k);
        gen(x.values, sh.m, sh.k, kind, 0, x.block_rows);
        gen(w.values, sh.n, sh.k, kind, 1, w.block_rows);
        quantize(&x);
        quantize(&w);
        model.emin_a = x.fmt.emin;
        model.emin_b = w.fmt.emin;
        const size_t mn = (size_t)sh.m * sh.n;
        float *want = cpu_only ? NULL : model_gpu(g, &x, &w, &model);

        /* the sample: spread over the output, the same for every configuration */
        const int ns = (size_t)sample < mn ? sample : (int)mn;
        size_t *at = malloc(sizeof(size_t) * ns);
        float(*hyp)[N_HYP] = malloc(sizeof *hyp * ns);
        double *ref = malloc(sizeof(double) * ns);
        int reassembled = 0, cpu_gpu = 0;
#pragma omp parallel for schedule(dynamic, 16) reduction(+ : reassembled, cpu_gpu)
        for (int s = 0; s < ns; s++) {
          at[s] = ns == (int)mn ? (size_t)s : (size_t)((s * 2654435761ull + 12345) % mn);
          int ok;
          hypotheses(&model, &model32, &x, &w, (int)(at[s] / sh.n), (int)(at[s] % sh.n), hyp[s],
                     &ref[s], &ok);
          reassembled += ok;
          cpu_gpu += want && same_bits(hyp[s][H_MODEL], want[at[s]]);
        }
        /* distances to the double reference relative to its largest magnitude
         * on the sample (cancellations make elementwise ones meaningless) */
        double ref_max = 0.0, model_vs_ref = 0.0;
        for (int s = 0; s < ns; s++) ref_max = fmax(ref_max, fabs(ref[s]));
        if (ref_max == 0.0) ref_max = 1.0;
        for (int s = 0; s < ns; s++)
          model_vs_ref = fmax(model_vs_ref, fabs(hyp[s][H_MODEL] - ref[s]) / ref_max);
        printf("\n== %s %dx%dx%d %s x %s, %s: the model on the sample: CPU = GPU %s%d/%d, per-slice "
               "reassembly %d/%d, max |model - double| / max |double| %.3g\n",
               pair_names[sh.pairing], sh.m, sh.n, sh.k, x.fmt.name, w.fmt.name, data_names[kind],
               cpu_only ? "(not run) " : "", cpu_gpu, ns, reassembled, ns, model_vs_ref);
        unassembled += ns - reassembled;
        if (cpu_only) {
          free(at), free(hyp), free(ref);
          free(x.values), free(x.codes), free(x.scales), free(x.bytes);
          free(w.values), free(w.codes), free(w.scales), free(w.bytes);
          continue;
        }

        size_t nsx, nsw;
        float *hsx = lt_scales(&x, vec_kmajor, blk_unpadded, &nsx),
              *hsw = lt_scales(&w, vec_kmajor, blk_unpadded, &nsw);
        void *dbx, *dbw, *dsx, *dsw;
        float *dd, *got = malloc(sizeof(float) * mn);
        CU(cudaMalloc(&dbx, (size_t)sh.m * sh.k));
        CU(cudaMalloc(&dbw, (size_t)sh.n * sh.k));
        CU(cudaMalloc(&dsx, sizeof(float) * nsx));
        CU(cudaMalloc(&dsw, sizeof(float) * nsw));
        CU(cudaMalloc((void **)&dd, sizeof(float) * mn));
        CU(cudaMemcpy(dbx, x.bytes, (size_t)sh.m * sh.k, cudaMemcpyHostToDevice));
        CU(cudaMemcpy(dbw, w.bytes, (size_t)sh.n * sh.k, cudaMemcpyHostToDevice));
        CU(cudaMemcpy(dsx, hsx, sizeof(float) * nsx, cudaMemcpyHostToDevice));
        CU(cudaMemcpy(dsw, hsw, sizeof(float) * nsw, cudaMemcpyHostToDevice));

        for (int act = 0; act < 2; act++)
          for (int fast = 0; fast < 2; fast++) {
            configs++;
            lt_plan p;
            const char *where = pair_where[sh.pairing][act];
            const cublasStatus_t st = lt_plan_make(&lc, &p, act, fast, &x, &w, dsx, dsw);
            if (st) {
              printf("%s fast=%d: refused: %s (%d)\n", where, fast, cublasGetStatusString(st),
                     (int)st);
              lt_plan_free(&p);
              continue;
            }
            const int ran_before = ran;
            for (int i = 0; i < p.found && i < algos; i++) {
              char desc[256];
              describe_algo(&p.heur[i], desc, sizeof desc);
              /* a candidate the heuristic itself marks unusable is not run */
              const cublasStatus_t rs =
                  p.heur[i].state ? p.heur[i].state
                                  : lt_run(&lc, &p, i, act, &x, &w, dbx, dbw, dd, got);
              if (rs) {
                printf("%s fast=%d #%d/%d [%s]: cublasLtMatmul: %s (%d)\n", where, fast, i,
                       p.found, desc, cublasGetStatusString(rs), (int)rs);
                continue;
              }
              ran++;
              size_t same = 0, zeros = 0, shown = 0;
              uint32_t worst_ulp = 0;
              double worst_rel = 0.0;
              for (size_t e = 0; e < mn; e++) {
                if (same_bits(got[e], want[e])) {
                  same++;
                  continue;
                }
                zeros += got[e] == 0.0f && want[e] == 0.0f;
                const uint32_t u = ulps(got[e], want[e]);
                if (u > worst_ulp) worst_ulp = u;
                worst_rel = fmax(worst_rel, rel(got[e], want[e]));
              }
              int match[N_HYP] = {0};
              double lt_vs_ref = 0.0;
              for (int s = 0; s < ns; s++) {
                for (int t = 0; t < N_HYP; t++) match[t] += same_bits(got[at[s]], hyp[s][t]);
                lt_vs_ref = fmax(lt_vs_ref, fabs(got[at[s]] - ref[s]) / ref_max);
              }
              /* rounded down: 100% only where every output is */
              printf("%s fast=%d #%d/%d [%s]: identical %s%.4f%% (%zu of %zu), opposite zeros "
                     "%zu, max ulp %u, max rel %.3g; vs double %.3g (normwise); sample:",
                     where, fast, i, p.found, desc, same == mn ? "all " : "",
                     floor(1e6 * same / mn) / 1e4, same, mn, zeros, worst_ulp, worst_rel,
                     lt_vs_ref);
              for (int t = 0; t < N_HYP; t++)
                printf(" %c %.1f%%", hyp_names[t], 100.0 * match[t] / ns);
              printf("\n");
              if (lt_vs_ref > 1e-2 && lt_vs_ref > 10 * model_vs_ref)
                printf("  far from the double reference where the model is not: the scales may "
                       "be misread (try --vec-kmajor / --blk-unpadded)\n");
              for (int s = 0; s < ns && shown < 3; s++) {
                const float gv = got[at[s]];
                if (same_bits(gv, hyp[s][H_MODEL])) continue;
                uint32_t bg, bm;
                memcpy(&bg, &gv, 4);
                memcpy(&bm, &hyp[s][H_MODEL], 4);
                printf("  (%zu, %zu): cuBLASLt %.9g (0x%08x), model %.9g (0x%08x), double %.9g; "
                       "equal to:", at[s] / sh.n, at[s] % sh.n, gv, bg, hyp[s][H_MODEL], bm,
                       ref[s]);
                for (int t = 1; t < N_HYP; t++)
                  if (same_bits(gv, hyp[s][t])) printf(" %c", hyp_names[t]);
                printf("\n");
                shown++;
              }
              fflush(stdout);
            }
            configs_ran += ran > ran_before;
            lt_plan_free(&p);
          }
        CU(cudaFree(dbx));
        CU(cudaFree(dbw));
        CU(cudaFree(dsx));
        CU(cudaFree(dsw));
        CU(cudaFree(dd));
        free(hsx), free(hsw), free(got), free(want), free(at), free(hyp), free(ref);
        free(x.values), free(x.codes), free(x.scales), free(x.bytes);
        free(w.values), free(w.codes), free(w.scales), free(w.bytes);
      }
  if (cpu_only) {
    printf("\nper-slice partials %s the model's result\n",
           unassembled ? "do NOT reassemble into" : "reassemble into");
    return unassembled ? 1 : 0;
  }
  exmy_cuda_gemm_free(g);
  CU(cudaFree(lc.workspace));
  cublasLtDestroy(lc.lt);
  printf("\n%d of %d configurations ran (%d algorithm runs)\n", configs_ran, configs, ran);
  if (!ran) {
    printf("cuBLASLt refused every configuration (statuses above)\n");
    return 1;
  }
  return 0;
}
