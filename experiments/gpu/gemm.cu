/* The trainer's GEMM on the GPU (see gemm.h). */
#include "experiments/gpu/gemm.h"

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <map>
#include <tuple>

#include "cpu/exmy_cpu.h"
#include "cuda/accum_gemm.cuh"
#include "cuda/gather.cuh"
#include "cuda/kernel_common.cuh"
#include "experiments/gpu/blockscaled_lt.h"
#include "experiments/gpu/fp8_codes.cuh"

namespace {
using exmy_cuda::grid_for;
using exmy_cuda::k_gather;

struct Slot {
  void *data = nullptr; /* bf16 or float, per the site's path */
  size_t cap = 0;       /* bytes */
  float *scale = nullptr; /* device {s, 1/s} of the slot's quantization (scaled recipes) */
  unsigned int *amax = nullptr; /* device: a producer's amax for current scaling */
  bool scaled = false;
  bool borrowed = false; /* data is another site's slot (a share region's fill) */
  uint64_t fills = 0;    /* how many fills so far: which scale the slot holds */
};

/* The unordered pair of two different slots of a site: 0 {X, W}, 1 {X, dY},
 * 2 {W, dY}. */
static int slot_pair(int a, int b) { return a + b - 1; }

struct Site {
  Slot slot[SLOTS_PER_SITE];
  exmy_cuda_delayed_state *delayed[USES_PER_SITE] = {};
  /* Delayed scaling: two states with the same tag hold the same bits (how
   * tags are given: gtq_states_upload, gtq_operand_for_gemm_amax's fill) */
  uint64_t state_tag[USES_PER_SITE] = {};
  exmy_tensor_stats *stats = nullptr; /* device, USES_PER_SITE */
  bool filled_stats[USES_PER_SITE] = {};
  bool bf16 = false;
  /* A GEMM's alpha for each pair of slots (slot_pair; device), made by the
   * kernel that rounded one of them with a scale it worked out
   * (exmy_cuda_amax_scale's product_alpha), and the two slots' fills (lower
   * slot first) it was made from: it holds while they hold. */
  float *pair_alpha = nullptr;
  uint64_t pair_fills[3][2] = {};
};

__global__ void k_alpha(float alpha, const float *sa, const float *sb, float *out) {
  wait_for_previous_kernel();
  float a = alpha;
  if (sa) a *= __fdiv_rn(1.0f, *sa);
  if (sb) a *= __fdiv_rn(1.0f, *sb);
  *out = a;
}

/* bf16 copy of a dequantized float tensor; with a scale, of the scaled values
 * y s, which lie within a few float ulps of the format's values Q(x s) and so
 * round to them exactly (the formats of this path have <= 8 significant bits). */
__global__ void k_to_bf16(const float *__restrict__ y, const float *scale, __nv_bfloat16 *out,
                          size_t n) {
  const float s = scale ? *scale : 1.0f;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    out[i] = __float2bfloat16_rn(scale ? y[i] * s : y[i]);
}


__global__ void k_batch_pointers(const char *a, long a_sb, long a_sh, int a_div, const char *b,
                                 long b_sb, long b_sh, int b_div, char *c, long c_sb, long c_sh,
                                 int nb, int nh, size_t ea, size_t eb, const void **pa,
                                 const void **pb, void **pc) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= nb * nh) return;
  const long bi = i / nh, h = i % nh;
  pa[i] = a + (bi * a_sb + (h / a_div) * a_sh) * (long)ea;
  pb[i] = b + (bi * b_sb + (h / b_div) * b_sh) * (long)eb;
  pc[i] = c + (bi * c_sb + h * c_sh) * (long)sizeof(float);
}


/* Counts what makes a captured CUDA graph stale: the reallocations of
 * reserve() and the others here (it would read freed memory), and uploads
 * of delayed states (gtq_states_upload).  One count for the process: an
 * event in one context makes every context's graphs stale, which costs a
 * capture, never a wrong replay. */
static uint64_t graph_epoch = 0;

void reserve(void **p, size_t *cap, size_t bytes) {
  if (*cap >= bytes) return;
  graph_epoch++;
  if (*p) gtq_check(cudaFree(*p), "cudaFree");
  *p = nullptr;
  gtq_check(cudaMalloc(p, bytes), "cudaMalloc (operand cache)");
  *cap = bytes;
}

bool elementwise(const exmy_operand_quant &q) {
  return q.scaling.kind == EXMY_SCALING_NONE || q.scaling.kind == EXMY_SCALING_TENSOR ||
         q.scaling.kind == EXMY_SCALING_DELAYED;
}

bool accumulates(const tq_site &s) { return s.accum.group != EXMY_ACCUM_FP32; }

/* Whether every enabled use of the site can feed the BF16 path (not a site
 * with an accumulation model: its GEMM reads dequantized float32). */
bool site_bf16(const tq_site &s) {
  if (accumulates(s)) return false;
  for (int u = 0; u < USES_PER_SITE; u++) {
    const exmy_operand_quant &q = s.op[u];
    if (!q.enabled || !elementwise(q) || !exmy_cuda_bf16_exact(&q.format)) return false;
  }
  return true;
}

/* A tensor as a share region's rounding read it (gtq_share_begin): the same
 * address, layout, format, rounding and sr offset give the same bits, and
 * under per-tensor current scaling the same scale (a function of the
 * tensor's amax, the format, the margin and pow2); under delayed scaling,
 * from the same state, the same scale and the same state after. */
struct ReadKey {
  const void *x = nullptr;
  long ld = 0;
  bool trans = false;
  size_t rows = 0, cols = 0;
  int block = 0; /* MX: the block along K */
  exmy_format format = {};
  exmy_rounding_opts round = {};
  exmy_scaling_kind scaling = EXMY_SCALING_NONE; /* NONE, TENSOR or DELAYED */
  int margin = 0;
  bool pow2 = false;
  bool most_recent = false; /* DELAYED */
  int history_len = 0;      /* DELAYED */
};

static bool same_read(const ReadKey &a, const ReadKey &b) {
  return a.x == b.x && a.ld == b.ld && a.trans == b.trans && a.rows == b.rows &&
         a.cols == b.cols && a.block == b.block && strcmp(a.format.name, b.format.name) == 0 &&
         a.format.exp_bits == b.format.exp_bits && a.format.man_bits == b.format.man_bits &&
         a.format.bias == b.format.bias && a.format.specials == b.format.specials &&
         a.format.max_code == b.format.max_code && a.round.mode == b.round.mode &&
         a.round.saturate == b.round.saturate &&
         a.round.flush_subnormals == b.round.flush_subnormals &&
         /* the random stream only where sr draws from it */
         (a.round.mode != EXMY_SR ||
          (a.round.sr_bits == b.round.sr_bits && a.round.seed == b.round.seed &&
           a.round.offset == b.round.offset)) &&
         a.scaling == b.scaling && a.margin == b.margin &&
         a.pow2 == b.pow2 && a.most_recent == b.most_recent && a.history_len == b.history_len;
}

/* An MX operand's bf16 image kept for the later GEMMs of a share region:
 * what was imaged (rows x K), and a device word that is 1 where the image
 * holds a value outside bf16's grid (the later GEMMs must take the fallback
 * as the first did). */
struct MxKept {
  bool valid = false;
  ReadKey key;
  void *img = nullptr;
  size_t cap = 0;
  unsigned *inexact = nullptr;
  unsigned long long used = 0; /* for least-recently-used replacement */
  bool twin = false;            /* made by a pair for a later read */
};
constexpr int kMxKept = 4;
constexpr int kMxHeld = 512; /* a forward's holds: 4 a layer */

/* An element-wise slot filled inside a share region: whose, and from what;
 * under delayed scaling the use whose state it moved on, and that state's
 * tags before and after.  A later fill of the same tensor the same way
 * borrows a lendable one's slot (slot_shareable); a later delayed pass
 * from an equally tagged state takes any one's tag_after. */
struct SlotFill {
  int site, slot, use;
  ReadKey key;
  uint64_t tag_before, tag_after;
  bool lendable;
};
constexpr int kSlotFills = 8;

/* MX and NVFP4 operands on the BF16 path: the two bf16 images of the GEMM
 * in flight, the images kept for a share region's later GEMMs (and how many
 * were taken), the MX fallback's result, the device flag the MX image kernels
 * set to the GEMM's tag when a value is not a bf16 value, and how many GEMMs
 * fell back; NVFP4's two tensor scales S_enc (A's, B's) on the device; how
 * many GEMMs of operands quantized along K took each path (host counts). */
struct MxImages {
  void *img[2] = {nullptr, nullptr};
  size_t img_cap[2] = {0, 0};
  MxKept kept[kMxKept];
  unsigned long long clock = 0;
  unsigned long long shared_hits = 0;
  float *result = nullptr;
  size_t result_cap = 0;
  unsigned *flag = nullptr;
  unsigned long long *fallbacks = nullptr;
  unsigned tag = 0;
  float *s_enc = nullptr;
  gtq_along_k_path_counts paths = {};
  bool reference = false; /* tests: every MX and NVFP4 GEMM through exmy_cuda_qgemm */
  const void *twin = nullptr; /* gtq_mx_twin_begin's tensor */
  /* gtq_mx_hold_twin: the tensor whose next untransposed image makes its
   * transpose's too, and the images held so for this forward's backward
   * (the i-th hold of a forward in held[i], whose buffers stay; the first
   * n_held are this forward's) */
  const void *hold_next = nullptr;
  MxKept held[kMxHeld];
  int n_held = 0;
  unsigned long long twins_made = 0, twins_taken = 0;
};

/* C (m x n, ldc) = r where the image kernels flagged this GEMM. */
__global__ void k_copy_if(const unsigned *flag, unsigned tag, const float *r, size_t m, size_t n,
                          float *c, size_t ldc) {
  if (*flag != tag) return;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < m * n;
       i += (size_t)gridDim.x * blockDim.x)
    c[(i / n) * ldc + i % n] = r[i];
}

/* cuBLASLt's FP8 GEMM for the hopper models: one plan (descriptors and an
 * algorithm that does not split K) per shape, ok = false where none exists. */
struct LtPlan {
  bool ok = false;
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, ld = nullptr;
  cublasLtMatmulAlgo_t algo = {};
};
/* The shape of one cuBLASLt FP8 call (column-major, cuBLASLt's A our op(B)^T
 * as k x n, its B our op(A)^T as k x m, both with leading dimension ld_ab;
 * D n x m with leading dimension ldd): batch > 1 is a strided batch whose
 * A and B advance by k codes along their rows and D by stride_d floats (the
 * slices of K of the block-scaled path); unit: the scale pointers point at
 * 1, else at the operands' 1/s; align_ab: the alignment of A's and B's
 * pointers in bytes (256: cudaMalloc's, cuBLASLt's default assumption). */
struct LtShape {
  int m, n, k;
  bool e4m3_a, e4m3_b, fast;
  long ldd;
  int align; /* D's alignment in bytes */
  long ld_ab;
  int batch;
  long stride_d;
  bool unit;
  int align_ab;
};
typedef std::tuple<int, int, int, int, int, int, long, int, long, int, long, int, int> LtKey;
/* cuBLASLt's block-scaled FP8 GEMM for one shape (blockscaled_lt.h; made by
 * block_lt_plan): ok = false where it has no algorithm that leaves K
 * unsplit.  Keyed by m, n, k, op(A)'s and op(B)'s E4M3-ness, whether op(A)
 * is the 1 x 128-tiled operand, D's leading dimension and alignment. */
struct BlockLtPlan {
  bool ok = false;
  exmy_blockscaled_desc d = {};
  cublasLtMatmulAlgo_t algo = {};
};
typedef std::tuple<int, int, int, int, int, int, long, int> BlockLtKey;
/* The two scales 256 bytes apart, as PyTorch's separate allocations are:
 * cuBLASLt refused the FP8 call with them 4 bytes apart and in place (C = D);
 * it ran once both were changed, which of the two it needs is not known. */
constexpr int kInvB = 64;

/* The device counters of k_accum_count: GEMMs on cuBLASLt's FP8 GEMM, and
 * those the emulation redid because the scales were out of range or else
 * because a value was not an FP8 code (their sum: the GEMMs it redid). */
enum AccumCount { kCountFast, kCountScalesOutOfRange, kCountNotCodes, kAccumCounts };

struct AccumFast {
  cublasLtHandle_t lt = nullptr;
  void *workspace = nullptr;
  size_t workspace_bytes = 32u << 20;
  void *codes[2] = {nullptr, nullptr}; /* op(A) as m x k, op(B)^T as n x k, K contiguous */
  size_t codes_cap[2] = {0, 0};
  float *result = nullptr; /* alpha op(A) op(B) before beta C is added */
  size_t result_cap = 0;
  float *inv = nullptr;    /* device 1/s of A at inv, of B at inv + kInvB: cuBLASLt's scale pointers */
  float *unit = nullptr;   /* device 1 at unit and at unit + kInvB: the block-scaled path's */
  int *flag = nullptr;     /* device: why the emulation must redo this GEMM (kFp8* bits), or 0 */
  unsigned long long *counts = nullptr; /* device: kAccumCounts of k_accum_count's */
  unsigned long long emulated = 0;      /* host: GEMMs that never tried */
  bool emulate = false;                 /* tests: always the emulation */
  exmy_accum_model hopper = {}, split = {};
  std::map<LtKey, LtPlan> plans;
  /* Block-scaled operands (block_fp8_gemm): op(A) and op(B)^T gathered
   * (then their dequantized values, unused), their codes in float32 and
   * their block scales, as exmy_cuda_qgemm_accum makes them (the
   * emulation's operands, should it redo the GEMM); the partial sums of a
   * chunk of K's slices, and the float32 accumulator between chunks.  The
   * FP8 codes go into codes[] above. */
  float *work[2] = {nullptr, nullptr}, *codes32[2] = {nullptr, nullptr};
  float *bscales[2] = {nullptr, nullptr};
  size_t work_cap[2] = {0, 0}, codes32_cap[2] = {0, 0}, bscales_cap[2] = {0, 0};
  float *part = nullptr, *acc = nullptr;
  size_t part_cap = 0, acc_cap = 0;
  unsigned long long block_gemms = 0; /* host: GEMMs that took block_fp8_gemm */
  /* One 1 x 128-tiled and one 128 x 128-blocked operand: cuBLASLt's
   * block-scaled GEMM in one call (block_fp8_gemm), the scales in its
   * layouts (lt_scales[0] op(A)'s, [1] op(B)^T's), its plans; block_batched:
   * the per-slice path instead (tests, EXMY_FP8_BLOCK_BATCHED); how many
   * GEMMs made that one call (host count). */
  float *lt_scales[2] = {nullptr, nullptr};
  size_t lt_scales_cap[2] = {0, 0};
  std::map<BlockLtKey, BlockLtPlan> block_plans;
  bool block_batched = false;
  unsigned long long block_one_call = 0;
};

}  // namespace

struct gtq_ctx {
  cublasHandle_t blas;
  cudaStream_t stream;
  exmy_cuda_gemm *mx = nullptr;
  tq_site *host = nullptr;
  int n_sites = 0;
  Site *sites = nullptr;
  bool collect = false;
  uint64_t sr_counter = 0;
  void *stage = nullptr; /* float staging: gathered rows, or the dequantized image */
  size_t stage_cap = 0;
  /* gtq_share_dy_slots: one buffer behind every site's dY slot (a slot's
   * data then borrows it, and is not the slot's to free) */
  bool share_dy = false;
  void *dy_shared = nullptr;
  size_t dy_shared_cap = 0;
  float *consts = nullptr; /* {0, 1} */
  float *alphas = nullptr; /* a ring of device alphas for scaled GEMMs */
  int alpha_next = 0;
  void **ptrs = nullptr; /* batched GEMM pointer arrays */
  size_t ptrs_cap = 0;
  void *mx_codes = nullptr, *mx_scales = nullptr; /* MX statistics */
  size_t mx_codes_cap = 0, mx_scales_cap = 0;
  MxImages mx_img; /* the BF16 path of MX operands (mx_gemm_bf16) */
  /* share regions (gtq_share_begin): their depth, the test switch, the
   * element-wise slots filled in the current one; the last delayed state
   * tag given out */
  int share = 0;
  bool share_off = false;
  SlotFill fills[kSlotFills];
  int n_fills = 0;
  uint64_t last_tag = 0;
  unsigned long long slots_borrowed = 0;
  /* gtq_set_scale_nodes (a test switch) and the GEMMs whose alpha a
   * rounding kernel made */
  bool scale_nodes = false;
  unsigned long long alphas_paired = 0;
  AccumFast accum; /* cuBLASLt's FP8 GEMM for the hopper models */
};

enum { kAlphaRing = 4096 };

extern "C" void gtq_check(cudaError_t e, const char *what) {
  if (e == cudaSuccess) return;
  fprintf(stderr, "train: GPU error in %s: %s\n", what, cudaGetErrorString(e));
  exit(1);
}

static void blas_check(cublasStatus_t st, const char *what) {
  if (st == CUBLAS_STATUS_SUCCESS) return;
  fprintf(stderr, "train: cuBLAS error in %s: %s\n", what, cublasGetStatusString(st));
  exit(1);
}

extern "C" gtq_ctx *gtq_new(tq_site *sites, int n_sites, cudaStream_t stream) {
  gtq_ctx *g = new gtq_ctx;
  g->stream = stream;
  blas_check(cublasCreate(&g->blas), "cublasCreate");
  blas_check(cublasSetStream(g->blas, stream), "cublasSetStream");
  g->mx = exmy_cuda_gemm_new();
  g->host = sites;
  g->n_sites = sites ? n_sites : 0;
  g->sites = new Site[g->n_sites > 0 ? g->n_sites : 1];
  for (int i = 0; i < g->n_sites; i++) {
    Site &s = g->sites[i];
    s.bf16 = site_bf16(sites[i]);
    gtq_check(cudaMalloc((void **)&s.stats, sizeof(exmy_tensor_stats) * USES_PER_SITE),
              "cudaMalloc (stats)");
    for (int u = 0; u < USES_PER_SITE; u++) {
      const exmy_operand_quant &q = sites[i].op[u];
      if (q.enabled && q.scaling.kind == EXMY_SCALING_DELAYED) {
        s.delayed[u] = exmy_cuda_delayed_state_new(q.delayed->history_len);
        if (!s.delayed[u]) gtq_check(cudaErrorMemoryAllocation, "delayed state");
        /* fresh states of one history length are equal: tag = the length */
        s.state_tag[u] = (uint64_t)q.delayed->history_len;
      }
    }
    for (int sl = 0; sl < SLOTS_PER_SITE; sl++) {
      gtq_check(cudaMalloc((void **)&s.slot[sl].scale, 2 * sizeof(float)), "cudaMalloc (scale)");
      gtq_check(cudaMalloc((void **)&s.slot[sl].amax, sizeof(unsigned int)), "cudaMalloc (amax)");
    }
    gtq_check(cudaMalloc((void **)&s.pair_alpha, 3 * sizeof(float)), "cudaMalloc (alphas)");
  }
  g->last_tag = (uint64_t)1 << 32; /* above every history length */
  const float consts[2] = {0.0f, 1.0f};
  gtq_check(cudaMalloc((void **)&g->consts, sizeof consts), "cudaMalloc");
  gtq_check(cudaMemcpy(g->consts, consts, sizeof consts, cudaMemcpyHostToDevice), "consts");
  gtq_check(cudaMalloc((void **)&g->alphas, sizeof(float) * kAlphaRing), "cudaMalloc");
  if (exmy_accum_model_parse("hopper", &g->accum.hopper) ||
      exmy_accum_model_parse("hopper-split", &g->accum.split))
    gtq_check(cudaErrorInvalidValue, "the hopper presets");
  /* EXMY_FP8_BLOCK_BATCHED set (and not "0"): block-scaled GEMMs per slice
   * of K even where cuBLASLt's block-scaled GEMM could take them in one call */
  const char *batched = getenv("EXMY_FP8_BLOCK_BATCHED");
  g->accum.block_batched = batched && strcmp(batched, "0") != 0;
  gtq_states_upload(g);
  return g;
}

extern "C" void gtq_free(gtq_ctx *g) {
  if (!g) return;
  for (int i = 0; i < g->n_sites; i++) {
    Site &s = g->sites[i];
    for (int sl = 0; sl < SLOTS_PER_SITE; sl++) {
      if (!(g->share_dy && sl == SLOT_DY) && !s.slot[sl].borrowed) cudaFree(s.slot[sl].data);
      cudaFree(s.slot[sl].scale);
      cudaFree(s.slot[sl].amax);
    }
    for (int u = 0; u < USES_PER_SITE; u++) exmy_cuda_delayed_state_free(s.delayed[u]);
    cudaFree(s.stats);
    cudaFree(s.pair_alpha);
  }
  delete[] g->sites;
  cudaFree(g->dy_shared);
  cudaFree(g->stage);
  cudaFree(g->consts);
  cudaFree(g->alphas);
  cudaFree(g->ptrs);
  cudaFree(g->mx_codes);
  cudaFree(g->mx_scales);
  for (int i = 0; i < 2; i++) cudaFree(g->mx_img.img[i]);
  for (MxKept &e : g->mx_img.kept) {
    cudaFree(e.img);
    cudaFree(e.inexact);
  }
  cudaFree(g->mx_img.result);
  cudaFree(g->mx_img.flag);
  cudaFree(g->mx_img.fallbacks);
  cudaFree(g->mx_img.s_enc);
  AccumFast &f = g->accum;
  for (auto &kv : f.plans) {
    LtPlan &p = kv.second;
    if (p.ld) cublasLtMatrixLayoutDestroy(p.ld);
    if (p.lb) cublasLtMatrixLayoutDestroy(p.lb);
    if (p.la) cublasLtMatrixLayoutDestroy(p.la);
    if (p.op) cublasLtMatmulDescDestroy(p.op);
  }
  for (auto &kv : f.block_plans) exmy_blockscaled_desc_free(&kv.second.d);
  if (f.lt) cublasLtDestroy(f.lt);
  cudaFree(f.workspace);
  for (int i = 0; i < 2; i++) cudaFree(f.codes[i]);
  cudaFree(f.result);
  cudaFree(f.inv);
  cudaFree(f.unit);
  for (int i = 0; i < 2; i++) cudaFree(f.work[i]), cudaFree(f.codes32[i]), cudaFree(f.bscales[i]);
  cudaFree(f.part);
  cudaFree(f.acc);
  for (int i = 0; i < 2; i++) cudaFree(f.lt_scales[i]);
  cudaFree(f.flag);
  cudaFree(f.counts);
  exmy_cuda_gemm_free(g->mx);
  cublasDestroy(g->blas);
  delete g;
}

/* MX GEMMs' tags count from 1 at every forward, on a cleared flag (the
 * memset is one of the forward's launches, so a replayed forward clears it
 * too): a replay's tags are the captured ones, and no tag meets a flag left
 * by another forward of the step (a second micro-batch, a second
 * validation batch) or by its backward. */
extern "C" void gtq_begin_forward(gtq_ctx *g) {
  if (g->mx_img.flag)
    gtq_check(cudaMemsetAsync(g->mx_img.flag, 0, sizeof(unsigned), g->stream), "MX flag");
  g->mx_img.tag = 0;
  /* the last forward's held images are of tensors that may have changed */
  g->mx_img.n_held = 0;
  g->mx_img.hold_next = nullptr;
}

extern "C" void gtq_begin_step(gtq_ctx *g, uint64_t sr_counter, bool collect_stats) {
  g->sr_counter = sr_counter;
  g->collect = collect_stats && g->n_sites > 0;
  gtq_begin_forward(g);
  for (int i = 0; i < g->n_sites; i++)
    memset(g->sites[i].filled_stats, 0, sizeof g->sites[i].filled_stats);
}
extern "C" uint64_t gtq_sr_counter(const gtq_ctx *g) { return g->sr_counter; }
extern "C" uint64_t gtq_sr_reserve(gtq_ctx *g, uint64_t n) {
  const uint64_t first = g->sr_counter;
  g->sr_counter += n;
  return first;
}
extern "C" bool gtq_collecting(const gtq_ctx *g) { return g->collect; }
extern "C" uint64_t gtq_graph_epoch(const gtq_ctx *g) {
  (void)g;
  return graph_epoch;
}
extern "C" bool gtq_site_bf16(const gtq_ctx *g, int site) {
  return site >= 0 && site < g->n_sites && g->sites[site].bf16;
}

extern "C" void gtq_fetch_stats(gtq_ctx *g) {
  for (int i = 0; i < g->n_sites; i++) {
    exmy_tensor_stats st[USES_PER_SITE];
    gtq_check(cudaMemcpyAsync(st, g->sites[i].stats, sizeof st, cudaMemcpyDeviceToHost,
                              g->stream), "stats");
    gtq_check(cudaStreamSynchronize(g->stream), "stats");
    for (int u = 0; u < USES_PER_SITE; u++)
      if (g->sites[i].filled_stats[u]) g->host[i].stats[u] = st[u];
  }
}

extern "C" void gtq_states_download(gtq_ctx *g) {
  gtq_check(cudaStreamSynchronize(g->stream), "sync");
  for (int i = 0; i < g->n_sites; i++)
    for (int u = 0; u < USES_PER_SITE; u++)
      if (g->sites[i].delayed[u])
        gtq_check(exmy_cuda_delayed_state_download(g->sites[i].delayed[u], g->host[i].op[u].delayed),
                  "delayed state download");
}

extern "C" void gtq_states_upload(gtq_ctx *g) {
  gtq_check(cudaStreamSynchronize(g->stream), "sync");
  /* A captured step replays the slot sharing of its capture, which copied
   * one delayed state into another where the two were equal then; uploaded
   * states need not be, so every graph is captured again. */
  graph_epoch++;
  for (int i = 0; i < g->n_sites; i++)
    for (int u = 0; u < USES_PER_SITE; u++) {
      if (!g->sites[i].delayed[u]) continue;
      const exmy_delayed_state *h = g->host[i].op[u].delayed;
      gtq_check(exmy_cuda_delayed_state_upload(g->sites[i].delayed[u], h), "delayed state upload");
      /* the tag of an equal state uploaded before it, else a new one */
      uint64_t tag = ++g->last_tag;
      for (int j = 0; j <= i && tag == g->last_tag; j++)
        for (int v = 0; v < USES_PER_SITE && (j < i || v < u); v++)
          if (g->sites[j].delayed[v] && exmy_delayed_state_equal(g->host[j].op[v].delayed, h)) {
            tag = g->sites[j].state_tag[v];
            break;
          }
      g->sites[i].state_tag[u] = tag;
    }
}

/* The operand's rounding options with its own stretch of the sr stream (n
 * elements), as qgemm.c's prepare() on the CPU. */
static exmy_rounding_opts stream_opts(gtq_ctx *g, const exmy_rounding_opts &round, size_t n) {
  exmy_rounding_opts o = round;
  if (o.mode == EXMY_SR) {
    o.offset = g->sr_counter;
    g->sr_counter += n;
  }
  return o;
}

/* Quantizes x (dense rows x cols) per q into the float image y; records the
 * scale used into *scale (scaled recipes) and the statistics if collecting. */
static void quantize_into(gtq_ctx *g, Site &s, int use, const exmy_operand_quant &q,
                          const float *x, float *y, size_t n, float *scale) {
  const exmy_rounding_opts o = stream_opts(g, q.round, n);
  const exmy_scaling &sc = q.scaling;
  cudaStream_t st = g->stream;
  switch (sc.kind) {
    case EXMY_SCALING_NONE:
      gtq_check(exmy_cuda_quantize_f32(&q.format, &o, x, y, n, st), "quantize");
      break;
    case EXMY_SCALING_TENSOR:
      gtq_check(exmy_cuda_quantize_tensor_scaled_f32(&q.format, &o, sc.margin, sc.pow2, x, y, n,
                                                     scale, st),
                "quantize (tensor scaling)");
      break;
    case EXMY_SCALING_DELAYED:
      /* the scale this call uses: the state moves on to the next one */
      gtq_check(cudaMemcpyAsync(scale, exmy_cuda_delayed_scale(s.delayed[use]), sizeof(float),
                                cudaMemcpyDeviceToDevice, st), "delayed scale");
      gtq_check(exmy_cuda_quantize_delayed_scaled_f32(&q.format, &o, sc.margin, sc.pow2,
                                                      sc.history_most_recent, s.delayed[use], x,
                                                      y, n, st),
                "quantize (delayed scaling)");
      break;
    default:
      gtq_check(cudaErrorNotSupported, "quantize (recipe)");
  }
  if (g->collect) {
    const bool scaled = sc.kind != EXMY_SCALING_NONE;
    gtq_check(exmy_cuda_tensor_stats_scaled_f32(&q.format, x, y, n, scaled ? scale : nullptr,
                                                sc.margin, sc.pow2,
                                                sc.kind == EXMY_SCALING_DELAYED,
                                                &s.stats[use], st),
              "statistics");
    s.filled_stats[use] = true;
  }
}

extern "C" bool gtq_fill_takes_amax_outside_stats(const gtq_ctx *g, int site, int use) {
  if (site < 0 || site >= g->n_sites || !g->sites[site].bf16) return false;
  const exmy_operand_quant &q = g->host[site].op[use];
  return q.enabled && !tq_along_k(&q) && q.scaling.kind == EXMY_SCALING_TENSOR;
}

extern "C" bool gtq_fill_takes_amax(const gtq_ctx *g, int site, int use) {
  return !g->collect && gtq_fill_takes_amax_outside_stats(g, site, use);
}

/* Whether a fill of the X slot of `site` (use q) may borrow, or be
 * borrowed: inside a share region, on the hot BF16 path, unscaled or under
 * per-tensor current or delayed scaling, and not stochastic (so the slot's
 * bits and scale are a function of x, the format, the rounding, the
 * scaling's options and a delayed state alone). */
static bool slot_shareable(const gtq_ctx *g, const Site &s, const exmy_operand_quant &q, int slot) {
  return g->share && !g->share_off && s.bf16 && !g->collect && slot == SLOT_X &&
         (q.scaling.kind == EXMY_SCALING_NONE || q.scaling.kind == EXMY_SCALING_TENSOR ||
          q.scaling.kind == EXMY_SCALING_DELAYED) &&
         q.round.mode != EXMY_SR;
}

/* The fill of this share region from the same tensor the same way (x, its
 * layout, format, rounding and scaling; delayed: from a state with the tag
 * `tag`), a lendable one where `lend`, or NULL. */
static const SlotFill *fill_alike(const gtq_ctx *g, const ReadKey &key, uint64_t tag, bool lend) {
  for (int i = 0; g->share && i < g->n_fills; i++) {
    const SlotFill &f = g->fills[i];
    if (same_read(f.key, key) && (key.scaling != EXMY_SCALING_DELAYED || f.tag_before == tag) &&
        (f.lendable || !lend))
      return &f;
  }
  return nullptr;
}

/* How an element-wise fill with quant q reads x (rows x cols, leading
 * dimension ld): fill_alike's key. */
static ReadKey element_read_key(const exmy_operand_quant &q, const float *x, long ld, long rows,
                                long cols) {
  ReadKey key;
  key.x = x, key.ld = ld, key.rows = (size_t)rows, key.cols = (size_t)cols;
  key.format = q.format, key.round = q.round;
  key.scaling = q.scaling.kind, key.margin = q.scaling.margin, key.pow2 = q.scaling.pow2;
  if (q.scaling.kind == EXMY_SCALING_DELAYED)
    key.most_recent = q.scaling.history_most_recent, key.history_len = q.delayed->history_len;
  return key;
}

/* For the kernel that rounds slot `slot` of site s with a scale it works
 * out (c): the alphas of the GEMMs that pair that slot with the site's other
 * scaled slots, as they stand now, recorded as made from both slots'
 * current fills. */
static void pair_alphas(Site *s, int slot, exmy_cuda_amax_scale *c) {
  int k = 0;
  for (int other = 0; other < SLOTS_PER_SITE; other++) {
    const Slot &o = s->slot[other];
    if (other == slot || !o.scaled || !o.fills) continue;
    const int p = slot_pair(slot, other);
    c->partner[k] = o.scale;
    c->product_alpha[k++] = s->pair_alpha + p;
    const int lo = slot < other ? slot : other, hi = slot < other ? other : slot;
    s->pair_fills[p][0] = s->slot[lo].fills, s->pair_fills[p][1] = s->slot[hi].fills;
  }
}

extern "C" gtq_operand gtq_operand_for_gemm(gtq_ctx *g, int site, int use, int slot, bool fill,
                                            const float *x, long ld, long rows, long cols) {
  return gtq_operand_for_gemm_amax(g, site, use, slot, fill, x, ld, rows, cols, nullptr);
}

extern "C" gtq_operand gtq_operand_for_gemm_amax(gtq_ctx *g, int site, int use, int slot,
                                                 bool fill, const float *x, long ld, long rows,
                                                 long cols, const unsigned int *x_amax) {
  gtq_operand r = {x, ld, false, nullptr, nullptr, site, use, nullptr};
  if (site < 0 || site >= g->n_sites) return r;
  const exmy_operand_quant &q = g->host[site].op[use];
  if (!q.enabled) return r;
  if (tq_along_k(&q)) { /* MX, GROUP, NVFP4: quantized along K by exmy_cuda_qgemm */
    r.mx = &q;
    return r;
  }
  Site &s = g->sites[site];
  Slot &sl = s.slot[slot];
  const size_t n = (size_t)rows * cols;
  if (fill) sl.fills++;
  if (fill && sl.borrowed) { /* a borrow lasts until the slot's next fill */
    sl.data = nullptr;
    sl.cap = 0;
    sl.borrowed = false;
  }
  const bool shareable = fill && slot_shareable(g, s, q, slot);
  const ReadKey key = element_read_key(q, x, ld, rows, cols);
  const bool delayed = q.scaling.kind == EXMY_SCALING_DELAYED;
  const uint64_t tag_before = delayed ? s.state_tag[use] : 0;
  const SlotFill *alike_fill = shareable ? fill_alike(g, key, tag_before, true) : nullptr;
  const Slot *alike = alike_fill ? &g->sites[alike_fill->site].slot[alike_fill->slot] : nullptr;
  if (alike) {
    /* the same bits as a pass of its own would write: borrow them, and give
     * back the slot's own buffer (the memory is the point); a scale is the
     * slot's own, for its GEMMs: the same value, copied; a delayed state
     * becomes the one its pass would have left, the other's */
    if (sl.data) {
      gtq_check(cudaFree(sl.data), "cudaFree");
      graph_epoch++;
    }
    sl.data = alike->data;
    sl.cap = 0;
    sl.borrowed = true;
    sl.scaled = q.scaling.kind != EXMY_SCALING_NONE;
    if (sl.scaled)
      gtq_check(cudaMemcpyAsync(sl.scale, alike->scale, 2 * sizeof(float),
                                cudaMemcpyDeviceToDevice, g->stream),
                "scale (borrowed slot)");
    if (delayed) {
      gtq_check(exmy_cuda_delayed_state_copy(s.delayed[use],
                                             g->sites[alike_fill->site].delayed[alike_fill->use],
                                             g->stream),
                "delayed state (borrowed slot)");
      s.state_tag[use] = alike_fill->tag_after;
    }
    g->slots_borrowed++;
  }
  if (fill && !alike) {
    cudaStream_t st = g->stream;
    const float *src = x;
    const bool need_stage = ld != cols;
    if (need_stage || s.bf16) reserve(&g->stage, &g->stage_cap, n * sizeof(float) * (need_stage && s.bf16 ? 2 : 1));
    if (need_stage) { /* gather the rows; dense tensors are read in place */
      gtq_check(cudaMemcpy2DAsync(g->stage, cols * sizeof(float), x, ld * sizeof(float),
                                  cols * sizeof(float), rows, cudaMemcpyDeviceToDevice, st),
                "gather");
      src = (const float *)g->stage;
    }
    if (slot == SLOT_DY && g->share_dy) {
      reserve(&g->dy_shared, &g->dy_shared_cap, n * (s.bf16 ? 2 : 4));
      sl.data = g->dy_shared;
    } else {
      reserve(&sl.data, &sl.cap, n * (s.bf16 ? 2 : 4));
    }
    sl.scaled = q.scaling.kind != EXMY_SCALING_NONE;
    if (s.bf16 && !g->collect) {
      /* the hot path: round and store as bf16 in one pass (scaled: Q(x s),
       * with the delayed state's amax folded into the same pass; current
       * scaling: after an amax pass, or the amax x's producer folded) */
      const exmy_rounding_opts o = stream_opts(g, q.round, n);
      const exmy_scaling &sc = q.scaling;
      if (sc.kind == EXMY_SCALING_NONE)
        gtq_check(exmy_cuda_quantize_bf16(&q.format, &o, src, sl.data, n, st), "quantize (bf16)");
      else if (sc.kind == EXMY_SCALING_TENSOR) {
        /* the scale of the producer's amax, or of an amax pass into the
         * slot's own word (nothing from the stream's scratch in a step a CUDA
         * graph replays), worked out by the rounding kernel */
        if (!x_amax) {
          gtq_check(cudaMemsetAsync(sl.amax, 0, sizeof(unsigned int), st), "memset (amax)");
          gtq_check(exmy_cuda_amax_fold(src, n, sl.amax, st), "amax");
        }
        exmy_cuda_amax_scale cs = exmy_cuda_amax_scale_of(
            &q.format, sc.margin, sc.pow2, x_amax ? x_amax : sl.amax, sl.scale);
        if (g->scale_nodes) {
          gtq_check(exmy_cuda_scale_from_amax(&q.format, sc.margin, sc.pow2, cs.amax_bits,
                                              sl.scale, st),
                    "tensor scaling (scale)");
          gtq_check(exmy_cuda_quantize_scaled_bf16(&q.format, &o, sl.scale, src, sl.data, n, st),
                    "quantize (bf16, tensor scaling)");
        } else {
          pair_alphas(&s, slot, &cs);
          gtq_check(exmy_cuda_quantize_amax_scaled_bf16(&q.format, &o, &cs, src, sl.data, n, st),
                    "quantize (bf16, tensor scaling)");
        }
      }
      else
        gtq_check(exmy_cuda_quantize_delayed_bf16(&q.format, &o, sc.margin, sc.pow2,
                                                  sc.history_most_recent, s.delayed[use], src,
                                                  sl.data, n, sl.scale, st),
                  "quantize (bf16, delayed scaling)");
    } else if (s.bf16) {
      float *y = (float *)g->stage + (need_stage ? n : 0);
      quantize_into(g, s, use, q, src, y, n, sl.scale);
      k_to_bf16<<<grid_for(n), 256, 0, st>>>(y, sl.scaled ? sl.scale : nullptr,
                                             (__nv_bfloat16 *)sl.data, n);
      gtq_check(cudaGetLastError(), "to bf16");
    } else {
      quantize_into(g, s, use, q, src, (float *)sl.data, n, sl.scale);
    }
    /* a delayed state's tag after the pass: that of an earlier pass of the
     * share region over the same tensor read the same way from an equally
     * tagged state (equal states fed the same tensor stay equal: the
     * statistics steps' passes keep the tags together), else a new one */
    const SlotFill *same_pass = delayed ? fill_alike(g, key, tag_before, false) : nullptr;
    uint64_t tag_after = 0;
    if (delayed) s.state_tag[use] = tag_after = same_pass ? same_pass->tag_after : ++g->last_tag;
    if (g->share && (shareable || (delayed && !same_pass))) /* full: the last one yields */
      g->fills[g->n_fills < kSlotFills ? g->n_fills++ : kSlotFills - 1] = {
          site, slot, use, key, tag_before, tag_after, shareable};
  }
  r.ptr = sl.data;
  r.ld = cols;
  r.bf16 = s.bf16;
  /* the FP32 path holds dequantized values; only the bf16 copies are scaled */
  r.scale = s.bf16 && sl.scaled ? sl.scale : nullptr;
  r.qscale = !s.bf16 && sl.scaled ? sl.scale : nullptr;
  return r;
}

extern "C" void gtq_share_dy_slots(gtq_ctx *g) {
  if (g->share_dy) return;
  for (int i = 0; i < g->n_sites; i++) { /* none filled yet, normally */
    Slot &sl = g->sites[i].slot[SLOT_DY];
    cudaFree(sl.data);
    sl.data = nullptr;
    sl.cap = 0;
  }
  g->share_dy = true;
  graph_epoch++;
}

extern "C" bool gtq_use_bf16_cublas(const gtq_ctx *g, int site, int use) {
  if (site < 0 || site >= g->n_sites || !g->sites[site].bf16) return false;
  const exmy_operand_quant &q = g->host[site].op[use];
  const int scaling = q.scaling.kind;
  return q.enabled && !tq_along_k(&q) && !accumulates(g->host[site]) &&
         (scaling == EXMY_SCALING_NONE || scaling == EXMY_SCALING_DELAYED ||
          scaling == EXMY_SCALING_TENSOR);
}

extern "C" bool gtq_use_bf16_identity(const gtq_ctx *g, int site, int use) {
  if (!gtq_use_bf16_cublas(g, site, use)) return false;
  const exmy_operand_quant &q = g->host[site].op[use];
  if (q.scaling.kind != EXMY_SCALING_NONE) return false;
  const exmy_format &f = q.format;
  /* bf16's own grid, every value kept: inf and NaN as they are, no value
   * flushed, no sr stream taken */
  return f.exp_bits == 8 && f.man_bits == 7 && f.bias == 127 &&
         f.specials == EXMY_SPECIALS_IEEE && f.is_signed && q.round.mode != EXMY_SR &&
         !q.round.saturate && !q.round.flush_subnormals;
}

extern "C" gtq_operand gtq_operand_bf16(int site, int use, const void *x, long ld) {
  gtq_operand r = {x, ld, true, nullptr, nullptr, site, use, nullptr};
  return r;
}

extern "C" bool gtq_use_reads_source(const gtq_ctx *g, int site, int use) {
  /* gtq_operand_for_gemm's cases that return x */
  if (site < 0 || site >= g->n_sites) return true;
  const exmy_operand_quant &q = g->host[site].op[use];
  return !q.enabled || tq_along_k(&q);
}

extern "C" const exmy_operand_quant *gtq_fusable_bf16(const gtq_ctx *g, int site, int use,
                                                     int reuse) {
  if (site < 0 || site >= g->n_sites || g->collect || !g->sites[site].bf16) return nullptr;
  const exmy_operand_quant &q = g->host[site].op[use], &r = g->host[site].op[reuse];
  if (!q.enabled || tq_along_k(&q) || !elementwise(q)) return nullptr;
  if (!r.enabled || tq_along_k(&r)) return nullptr; /* it would read the float32 tensor */
  return &q;
}

extern "C" void gtq_fill_bf16_slot(gtq_ctx *g, int site, int use, int slot, size_t n,
                                   void *spare, gtq_bf16_fill *fill) {
  Site &s = g->sites[site];
  Slot &sl = s.slot[slot];
  sl.fills++;
  if (sl.borrowed) { /* never the owner's buffer */
    sl.data = nullptr;
    sl.cap = 0;
    sl.borrowed = false;
  }
  const exmy_operand_quant &q = g->host[site].op[use];
  if (slot == SLOT_DY && g->share_dy) { /* as gtq_operand_for_gemm's fill, or borrowed */
    if (spare) {
      sl.data = spare;
    } else {
      reserve(&g->dy_shared, &g->dy_shared_cap, n * 2);
      sl.data = g->dy_shared;
    }
  } else {
    reserve(&sl.data, &sl.cap, n * 2);
  }
  sl.scaled = q.scaling.kind != EXMY_SCALING_NONE;
  *fill = {};
  fill->y = sl.data;
  fill->o = stream_opts(g, q.round, n);
  if (q.scaling.kind == EXMY_SCALING_DELAYED) {
    gtq_check(exmy_cuda_delayed_begin(s.delayed[use], &fill->scale_inv, &fill->amax_bits,
                                      g->stream),
              "delayed scaling (begin)");
    s.state_tag[use] = ++g->last_tag; /* moved on by a producer's pass: equal to no other */
  } else if (q.scaling.kind == EXMY_SCALING_TENSOR) {
    gtq_check(cudaMemsetAsync(sl.amax, 0, sizeof(unsigned int), g->stream), "memset (amax)");
    fill->amax_bits = sl.amax;
    fill->current = true;
  }
}

extern "C" void gtq_fill_bf16_slot_lent(gtq_ctx *g, int site, int use, int slot, const float *x,
                                        long rows, long cols, gtq_bf16_fill *fill) {
  const Site &s = g->sites[site];
  const exmy_operand_quant &q = g->host[site].op[use];
  const bool delayed = q.scaling.kind == EXMY_SCALING_DELAYED;
  const uint64_t tag_before = delayed ? s.state_tag[use] : 0;
  gtq_fill_bf16_slot(g, site, use, slot, (size_t)rows * cols, nullptr, fill);
  if (!slot_shareable(g, s, q, slot)) return;
  const ReadKey key = element_read_key(q, x, cols, rows, cols);
  g->fills[g->n_fills < kSlotFills ? g->n_fills++ : kSlotFills - 1] = {
      site, slot, use, key, tag_before, delayed ? s.state_tag[use] : 0, true};
}

extern "C" bool gtq_fill_borrows(const gtq_ctx *g, int site, int use, int slot, const float *x,
                                 long rows, long cols) {
  if (site < 0 || site >= g->n_sites) return false;
  const Site &s = g->sites[site];
  const exmy_operand_quant &q = g->host[site].op[use];
  if (!q.enabled || tq_along_k(&q) || !slot_shareable(g, s, q, slot)) return false;
  const ReadKey key = element_read_key(q, x, cols, rows, cols);
  return fill_alike(g, key, q.scaling.kind == EXMY_SCALING_DELAYED ? s.state_tag[use] : 0,
                    true) != nullptr;
}

/* A current-scaled fill's scale, of the word `amax` or the slot's own:
 * false for other fills; else *c names the word and the slot's scale. */
static bool fill_scale_of_amax(const gtq_ctx *g, int site, int use, int slot,
                               const gtq_bf16_fill *fill, const unsigned int *amax,
                               exmy_cuda_amax_scale *c) {
  if (!fill->current) return false;
  const Slot &sl = g->sites[site].slot[slot];
  const exmy_operand_quant &q = g->host[site].op[use];
  *c = exmy_cuda_amax_scale_of(&q.format, q.scaling.margin, q.scaling.pow2,
                               amax ? amax : sl.amax, sl.scale);
  return true;
}

extern "C" void gtq_fill_bf16_scale(gtq_ctx *g, int site, int use, int slot,
                                    gtq_bf16_fill *fill, const unsigned int *amax) {
  exmy_cuda_amax_scale c;
  if (!fill_scale_of_amax(g, site, use, slot, fill, amax, &c)) return;
  const exmy_operand_quant &q = g->host[site].op[use];
  gtq_check(exmy_cuda_scale_from_amax(&q.format, q.scaling.margin, q.scaling.pow2, c.amax_bits,
                                      c.scale_out, g->stream),
            "tensor scaling (scale)");
  fill->scale_inv = c.scale_out;
  fill->amax_bits = nullptr;
  fill->current = false;
}

extern "C" void gtq_fill_bf16_scale_by_kernel(gtq_ctx *g, int site, int use, int slot,
                                              gtq_bf16_fill *fill, const unsigned int *amax) {
  if (g->scale_nodes) return gtq_fill_bf16_scale(g, site, use, slot, fill, amax);
  exmy_cuda_amax_scale c;
  if (!fill_scale_of_amax(g, site, use, slot, fill, amax, &c)) return;
  pair_alphas(&g->sites[site], slot, &c);
  fill->of_amax = c;
  fill->scale_inv = nullptr;
  fill->amax_bits = nullptr;
  fill->current = false;
}

extern "C" void gtq_set_scale_nodes(gtq_ctx *g, bool on) { g->scale_nodes = on; }
extern "C" unsigned long long gtq_alphas_paired(const gtq_ctx *g) { return g->alphas_paired; }

extern "C" void gtq_fill_bf16_done(gtq_ctx *g, int site, int use, int slot) {
  Site &s = g->sites[site];
  const exmy_operand_quant &q = g->host[site].op[use];
  if (q.scaling.kind != EXMY_SCALING_DELAYED) return;
  const exmy_scaling &sc = q.scaling;
  gtq_check(exmy_cuda_delayed_end(&q.format, sc.margin, sc.pow2, sc.history_most_recent,
                                  s.delayed[use], s.slot[slot].scale, g->stream),
            "delayed scaling (end)");
}

static exmy_cuda_operand_quant mx_operand(gtq_ctx *g, const exmy_operand_quant *q, size_t n) {
  exmy_cuda_operand_quant c = {};
  if (!q) return c;
  c.enabled = true;
  c.format = q->format;
  c.round = stream_opts(g, q->round, n);
  c.scaling = q->scaling;
  return c;
}

/* alpha / (sa sb) (k_alpha; sa, sb device scales or NULL for 1) in the
 * next slot of the device ring, for cuBLAS's device pointer mode: no
 * synchronisation. */
static const float *alpha_on_device(gtq_ctx *g, float alpha, const float *sa, const float *sb) {
  float *slot = g->alphas + g->alpha_next;
  g->alpha_next = (g->alpha_next + 1) % kAlphaRing;
  gtq_check(launch_single_dependent(k_alpha, g->stream, alpha, sa, sb, slot), "alpha");
  return slot;
}

/* beta beside a device alpha: 0 or 1 (g->consts), the only ones the
 * trainer's GEMMs use; any other is refused. */
static const float *beta_on_device(const gtq_ctx *g, float beta) {
  if (beta != 0.0f && beta != 1.0f) gtq_check(cudaErrorInvalidValue, "gemm beta");
  return g->consts + (beta == 0.0f ? 0 : 1);
}

/* The alpha of a GEMM of operands a and b (alpha 1) that a rounding kernel
 * made (Site::pair_alpha), where a and b are two scaled slots of one site
 * and neither has been filled since; else NULL. */
static const float *pair_alpha_made(gtq_ctx *g, float alpha, const gtq_operand &a,
                                    const gtq_operand &b) {
  if (alpha != 1.0f || !a.scale || !b.scale || a.site != b.site || a.site < 0 ||
      a.site >= g->n_sites)
    return nullptr;
  const Site &s = g->sites[a.site];
  int ka = -1, kb = -1;
  for (int k = 0; k < SLOTS_PER_SITE; k++) {
    if (s.slot[k].scale == a.scale) ka = k;
    if (s.slot[k].scale == b.scale) kb = k;
  }
  if (ka < 0 || kb < 0 || ka == kb) return nullptr;
  const int p = slot_pair(ka, kb), lo = ka < kb ? ka : kb, hi = ka < kb ? kb : ka;
  if (!s.pair_fills[p][0] || s.pair_fills[p][0] != s.slot[lo].fills ||
      s.pair_fills[p][1] != s.slot[hi].fills)
    return nullptr;
  g->alphas_paired++;
  return s.pair_alpha + p;
}

/* alpha and beta for one cuBLAS call on operands a and b: the caller's host
 * values, or, where a scale enters alpha, device words (pair_alpha_made or
 * alpha_on_device,
 * beta_on_device: no synchronisation) with cuBLAS in device pointer mode
 * for the object's life. */
struct GemmScalars {
  gtq_ctx *g;
  const float *alpha, *beta;
  bool on_device;
  GemmScalars(gtq_ctx *ctx, const float &alpha_h, const float &beta_h, const gtq_operand &a,
              const gtq_operand &b)
      : g(ctx), alpha(&alpha_h), beta(&beta_h), on_device(a.scale || b.scale) {
    if (!on_device) return;
    alpha = pair_alpha_made(g, alpha_h, a, b);
    if (!alpha) alpha = alpha_on_device(g, alpha_h, a.scale, b.scale);
    beta = beta_on_device(g, beta_h);
    blas_check(cublasSetPointerMode(g->blas, CUBLAS_POINTER_MODE_DEVICE), "pointer mode");
  }
  ~GemmScalars() {
    if (on_device)
      blas_check(cublasSetPointerMode(g->blas, CUBLAS_POINTER_MODE_HOST), "pointer mode");
  }
  GemmScalars(const GemmScalars &) = delete;
  GemmScalars &operator=(const GemmScalars &) = delete;
};

/* Statistics steps: the MX image of an operand as exmy_cuda_qgemm quantizes
 * it (dense, K contiguous: rows x k), again, for its statistics. */
static void mx_stats(gtq_ctx *g, const gtq_operand &o, const exmy_cuda_operand_quant &q,
                     bool transpose, size_t rows, size_t k) {
  const size_t n = rows * k;
  const int block = q.scaling.group > 0 ? q.scaling.group : 32;
  const size_t nb = (k + block - 1) / block;
  reserve(&g->stage, &g->stage_cap, 2 * n * sizeof(float));
  reserve(&g->mx_codes, &g->mx_codes_cap, n);
  reserve(&g->mx_scales, &g->mx_scales_cap, rows * nb);
  float *x = (float *)g->stage, *y = x + n;
  k_gather<<<grid_for(n), 256, 0, g->stream>>>((const float *)o.ptr, o.ld, transpose, rows, k, x);
  gtq_check(cudaGetLastError(), "gather");
  gtq_check(exmy_cuda_mx_encode_f32(&q.format, &q.round, block, x, rows, k,
                                    (uint8_t *)g->mx_codes, (uint8_t *)g->mx_scales, g->stream),
            "MX encode (statistics)");
  gtq_check(exmy_cuda_mx_decode_f32(&q.format, block, (const uint8_t *)g->mx_codes,
                                    (const uint8_t *)g->mx_scales, rows, k, y, g->stream),
            "MX decode (statistics)");
  Site &s = g->sites[o.site];
  gtq_check(exmy_cuda_tensor_stats_mx_f32(&q.format, block, x, y, (const uint8_t *)g->mx_scales,
                                          rows, k, &s.stats[o.use], g->stream),
            "MX statistics");
  s.filled_stats[o.use] = true;
}

/* Whether an operand can be one of the BF16 path's MX images: MX scaling
 * (not group or NVFP4) in a format whose values are bf16 values, a byte a
 * code, blocks of 32 (the image kernel's tile). */
static bool mx_image_operand(const exmy_format &f, const exmy_scaling &sc) {
  return sc.kind == EXMY_SCALING_MX && exmy_cuda_bf16_exact(&f) && exmy_code_bytes(&f) == 1 &&
         (sc.group == 0 || sc.group == 32);
}

/* Whether a GEMM of operands quantized along K can take the BF16 path: both
 * operands MX images. */
static bool mx_bf16_candidate(const gtq_ctx *g, const gtq_operand &a,
                              const exmy_cuda_operand_quant &qa, const gtq_operand &b,
                              const exmy_cuda_operand_quant &qb, int m, int n, int k) {
  if (g->mx_img.reference || !a.mx || !b.mx || m <= 0 || n <= 0 || k <= 0) return false;
  return mx_image_operand(qa.format, qa.scaling) && mx_image_operand(qb.format, qb.scaling);
}

extern "C" bool gtq_replayable(const gtq_ctx *g) {
  if (g->mx_img.reference) return false;
  for (int i = 0; i < g->n_sites; i++) {
    const tq_site &s = g->host[i];
    /* exmy_cuda_qgemm_accum gathers into workspaces it may grow */
    if (accumulates(s)) return false;
    bool mx = false, all_mx = true;
    for (int u = 0; u < USES_PER_SITE; u++) {
      const exmy_operand_quant &q = s.op[u];
      if (q.enabled && q.round.mode == EXMY_SR) return false; /* each step's offsets */
      /* current scaling off the BF16 path: an amax pass in the stream's scratch */
      if (q.enabled && q.scaling.kind == EXMY_SCALING_TENSOR && !g->sites[i].bf16) return false;
      /* element-wise scaling (delayed too: its history and position live
       * on the device) or MX images; anything else (group, NVFP4) is not
       * replayable */
      if (!q.enabled || elementwise(q))
        all_mx = false;
      else if (mx_image_operand(q.format, q.scaling))
        mx = true;
      else
        return false;
    }
    /* a GEMM with one MX operand takes exmy_cuda_qgemm */
    if (mx && !all_mx) return false;
  }
  return true;
}

/* A kept image's buffer for rows x k values and its word, cleared: its own
 * (tag 1), so that the other operand's image does not mark it. */
static void kept_prepare(MxKept *e, size_t rows, size_t k, cudaStream_t st) {
  if (!e->inexact) {
    graph_epoch++;
    gtq_check(cudaMalloc((void **)&e->inexact, sizeof(unsigned)), "cudaMalloc (MX kept)");
  }
  reserve(&e->img, &e->cap, rows * k * 2);
  gtq_check(cudaMemsetAsync(e->inexact, 0, sizeof(unsigned), st), "MX image (kept)");
  e->valid = false;
}

/* A kept image's slot for rows x k values: a free one, else the least
 * recently used other than `keep`, its word cleared. */
static MxKept *kept_slot(MxImages &x, const MxKept *keep, size_t rows, size_t k,
                         cudaStream_t st) {
  MxKept *e = nullptr;
  for (MxKept &c : x.kept) {
    if (&c == keep) continue;
    if (!c.valid) {
      e = &c;
      break;
    }
    if (!e || c.used < e->used) e = &c;
  }
  kept_prepare(e, rows, k, st);
  return e;
}

/* The bf16 image of MX operand o (rows x k of op(o), trans: o is stored k x
 * rows) for the GEMM of tag x.tag: made into image buffer `slot`, or, inside
 * a share region, found among the kept images (the same tensor read the same
 * way under the same format, rounding and stream offset: the same bits) or
 * made into the least recently used one.  A kept image that held a value
 * outside bf16's grid flags every GEMM that takes it: *carry is its word
 * (1: a value outside bf16's grid), which the GEMM's fallback reads, NULL
 * for an image that flags the GEMM itself.  The untransposed read of
 * gtq_mx_twin_begin's tensor makes its transpose's image in the same pass
 * and keeps it (the weight gradient's read); that of gtq_mx_hold_twin's
 * holds it for the backward, where this forward's held images are looked up
 * first. */
static const void *mx_image(gtq_ctx *g, const gtq_operand &o, const exmy_cuda_operand_quant &q,
                            bool trans, size_t rows, size_t k, int slot, const unsigned **carry) {
  MxImages &x = g->mx_img;
  cudaStream_t st = g->stream;
  const int block = q.scaling.group;
  ReadKey key;
  key.x = o.ptr, key.ld = o.ld, key.trans = trans, key.rows = rows, key.cols = k;
  key.block = block, key.format = q.format, key.round = q.round;
  *carry = nullptr;
  for (int i = 0; i < x.n_held; i++) /* made by this forward for this read */
    if (same_read(x.held[i].key, key)) {
      x.twins_taken++;
      *carry = x.held[i].inexact;
      return x.held[i].img;
    }
  const bool share = g->share && !g->share_off;
  MxKept *e = nullptr;
  if (share) {
    for (MxKept &c : x.kept)
      if (c.valid && same_read(c.key, key)) {
        e = &c;
        break;
      }
    if (e) {
      e->used = ++x.clock;
      (e->twin ? x.twins_taken : x.shared_hits)++;
      *carry = e->inexact;
      return e->img;
    }
    e = kept_slot(x, nullptr, rows, k, st);
  } else {
    reserve(&x.img[slot], &x.img_cap[slot], rows * k * 2);
  }
  void *img = share ? e->img : x.img[slot];
  unsigned *word = share ? e->inexact : x.flag;
  const unsigned tag = share ? 1u : x.tag;
  /* the transpose's image too: kept for the region (gtq_mx_twin_begin) or
   * held for the backward (gtq_mx_hold_twin) */
  MxKept *t = nullptr;
  if (!trans && q.round.mode != EXMY_SR) {
    if (share && o.ptr == x.twin) {
      t = kept_slot(x, e, k, rows, st);
    } else if (o.ptr == x.hold_next && x.n_held < kMxHeld) {
      t = &x.held[x.n_held++];
      kept_prepare(t, k, rows, st);
      x.hold_next = nullptr;
    }
  }
  if (t) {
    gtq_check(exmy_cuda_mx_quantize_bf16_pair(&q.format, &q.round, block, (const float *)o.ptr,
                                              o.ld, rows, k, img, word, tag, t->img, t->inexact,
                                              1, st),
              "MX image pair");
    t->key = key;
    t->key.trans = true, t->key.rows = k, t->key.cols = rows;
    t->valid = true;
    t->twin = true;
    t->used = ++x.clock;
    x.twins_made++;
  } else {
    gtq_check(exmy_cuda_mx_quantize_bf16(&q.format, &q.round, block, (const float *)o.ptr, o.ld,
                                         trans, rows, k, img, word, tag, st),
              "MX image");
  }
  if (!share) return img;
  *carry = e->inexact;
  e->valid = true;
  e->twin = false;
  e->key = key;
  e->used = ++x.clock;
  return e->img;
}

extern "C" void gtq_share_begin(gtq_ctx *g) { g->share++; }

extern "C" void gtq_share_end(gtq_ctx *g) {
  if (g->share > 0 && --g->share == 0) {
    for (MxKept &e : g->mx_img.kept) e.valid = false;
    g->n_fills = 0;
  }
}

extern "C" void gtq_set_share_off(gtq_ctx *g, bool off) { g->share_off = off; }

/* Whether uses u and v of `site` (one tensor read along each of its
 * dimensions) may take an image and its transpose's from one pass: both MX
 * images, not sr, sharing on, not a statistics step. */
static bool mx_pair_serves(const gtq_ctx *g, int site, int u, int v) {
  if (site < 0 || site >= g->n_sites || g->share_off || g->mx_img.reference || gtq_collecting(g))
    return false;
  const exmy_operand_quant &a = g->host[site].op[u], &b = g->host[site].op[v];
  return a.enabled && b.enabled && mx_image_operand(a.format, a.scaling) &&
         mx_image_operand(b.format, b.scaling) && a.round.mode != EXMY_SR &&
         b.round.mode != EXMY_SR;
}

extern "C" bool gtq_mx_twin_begin(gtq_ctx *g, int site, const float *dy) {
  if (!mx_pair_serves(g, site, USE_DX_DY, USE_DW_DY)) return false;
  gtq_share_begin(g);
  g->mx_img.twin = dy;
  return true;
}

extern "C" bool gtq_mx_hold_twin(gtq_ctx *g, int site, const float *x) {
  if (!mx_pair_serves(g, site, USE_FWD_X, USE_DW_X)) return false;
  g->mx_img.hold_next = x;
  return true;
}

extern "C" void gtq_mx_twin_end(gtq_ctx *g) {
  g->mx_img.twin = nullptr;
  gtq_share_end(g);
}

extern "C" void gtq_mx_twins(const gtq_ctx *g, unsigned long long *made,
                             unsigned long long *taken) {
  *made = g->mx_img.twins_made;
  *taken = g->mx_img.twins_taken;
}

extern "C" unsigned long long gtq_slots_borrowed(const gtq_ctx *g) { return g->slots_borrowed; }

extern "C" unsigned long long gtq_mx_shared_hits(const gtq_ctx *g) {
  return g->mx_img.shared_hits;
}

/* row-major C = op(A) op(B)  <=>  column-major C^T = op(B)^T op(A)^T: the
 * one cublasGemmEx of gtq_gemm's plain paths, the bf16-out GEMM and the MX
 * and NVFP4 images' GEMMs */
static void row_major_gemm_ex(gtq_ctx *g, bool ta, bool tb, int m, int n, int k, const float *alpha,
                              gtq_operand a, gtq_operand b, cudaDataType in, const float *beta,
                              void *c, cudaDataType out, long ldc, cublasComputeType_t ct,
                              const char *what) {
  blas_check(cublasGemmEx(g->blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N,
                          n, m, k, alpha, b.ptr, in, (int)b.ld, a.ptr, in, (int)a.ld, beta, c, out,
                          (int)ldc, ct, CUBLAS_GEMM_DEFAULT),
             what);
}

/* C = alpha op(A) op(B) + beta C for two MX operands without a host round
 * trip: each operand rounded once, along this GEMM's K, into a bf16 image
 * (exmy_cuda_mx_quantize_bf16: the values of exmy_cuda_qgemm's MX images),
 * cuBLAS on the tensor cores with FP32 accumulation (exact products, as the
 * element-wise BF16 path).  Should an image hold a value that bf16 cannot
 * (a float32 subnormal below bf16's grid), the image kernels set the flag to
 * this GEMM's tag (a kept image's word: carried) and the device takes the
 * FP32 fallback instead: written over cuBLAS's result where beta == 0, else
 * computed from C before cuBLAS overwrites it and copied over cuBLAS's. */
static void mx_gemm_bf16(gtq_ctx *g, bool ta, bool tb, int m, int n, int k, float alpha,
                         const gtq_operand &a, const exmy_cuda_operand_quant &qa,
                         const gtq_operand &b, const exmy_cuda_operand_quant &qb, float beta,
                         float *c, long ldc) {
  MxImages &x = g->mx_img;
  cudaStream_t st = g->stream;
  if (!x.flag) {
    graph_epoch++;
    gtq_check(cudaMalloc((void **)&x.flag, sizeof(unsigned)), "cudaMalloc (MX flag)");
    gtq_check(cudaMalloc((void **)&x.fallbacks, sizeof(unsigned long long)), "cudaMalloc");
    gtq_check(cudaMemsetAsync(x.flag, 0, sizeof(unsigned), st), "MX flag");
    gtq_check(cudaMemsetAsync(x.fallbacks, 0, sizeof(unsigned long long), st), "MX flag");
  }
  if (++x.tag == 0) x.tag = 1; /* 0 is the flag's initial value */
  const size_t M = (size_t)m, N = (size_t)n, K = (size_t)k;
  /* op(A) as m x k and op(B)^T as n x k, K contiguous */
  const unsigned *carry_a, *carry_b;
  const void *img_a = mx_image(g, a, qa, ta, M, K, 0, &carry_a);
  const void *img_b = mx_image(g, b, qb, !tb, N, K, 1, &carry_b);
  /* C = op(A) op(B) with op(B)^T as n x k: the images, K contiguous */
  const auto images_gemm = [&] {
    row_major_gemm_ex(g, false, true, m, n, k, &alpha, gtq_operand_bf16(-1, 0, img_a, k),
                      gtq_operand_bf16(-1, 0, img_b, k), CUDA_R_16BF, &beta, c, CUDA_R_32F, ldc,
                      CUBLAS_COMPUTE_32F, "cublasGemmEx (MX)");
  };
  const auto fallback = [&](float *r, size_t ldr) {
    gtq_check(exmy_cuda_mx_gemm_f32_if(x.flag, x.tag, carry_a, carry_b, ta, tb, M, N, K, alpha,
                                       (const float *)a.ptr, a.ld, &qa.format, &qa.round,
                                       (const float *)b.ptr, b.ld, &qb.format, &qb.round, beta,
                                       c, ldc, r, ldr, x.fallbacks, st),
              "MX fallback GEMM");
  };
  if (beta == 0.0f) { /* C is not read: the fallback overwrites cuBLAS's result itself */
    images_gemm();
    fallback(c, (size_t)ldc);
    return;
  }
  /* from C before cuBLAS overwrites it, copied over cuBLAS's result */
  reserve((void **)&x.result, &x.result_cap, M * N * sizeof(float));
  fallback(x.result, N);
  images_gemm();
  k_copy_if<<<264, 256, 0, st>>>(x.flag, x.tag, x.result, M, N, c, ldc);
  gtq_check(cudaGetLastError(), "MX fallback copy");
}

/* Whether a GEMM of operands quantized along K can take NVFP4's BF16 path:
 * both operands NVFP4 in a format whose products with E4M3 block scales are
 * bf16 values (E2M1). */
static bool nvfp4_bf16_candidate(const gtq_ctx *g, const gtq_operand &a,
                                 const exmy_cuda_operand_quant &qa, const gtq_operand &b,
                                 const exmy_cuda_operand_quant &qb, int m, int n, int k) {
  if (g->mx_img.reference || !a.mx || !b.mx || m <= 0 || n <= 0 || k <= 0) return false;
  for (const exmy_cuda_operand_quant *q : {&qa, &qb})
    if (q->scaling.kind != EXMY_SCALING_NVFP4 || !exmy_cuda_nvfp4_bf16_exact(&q->format))
      return false;
  return true;
}

/* C = alpha op(A) op(B) + beta C for two NVFP4 operands without a host round
 * trip, as NVFP4 tensor cores compute it: each operand rounded once, along
 * this GEMM's K, by the reference's own block kernel
 * (exmy_cuda_nvfp4_quantize_bf16: the same amax, S_enc, E4M3 block scales
 * s_b, rounding, sr indices, Hadamard transform and 16 x 16 weight blocks as
 * exmy_cuda_qgemm's images), written as bf16 images of q · s_b, which are
 * exact (exmy_cuda_nvfp4_bf16_exact: E2M1 times E4M3 has at most 6
 * significant bits, and lies between 2^-10 and 2688); cuBLAS multiplies the
 * images on the tensor cores with FP32 accumulation (exact products) and
 * applies alpha / (S_enc_a S_enc_b), computed on the device, once at the end.
 * The reference multiplies the dequantized values q · (s_b · (1 / S_enc)),
 * each rounded to float32, and accumulates their products in float32: the
 * two agree up to float32 rounding (a few ulps of each product, as a change
 * of the order of additions does), not bit for bit.  No image value can
 * leave bf16's grid, so there is no fallback.  Not guarded: where
 * alpha / (S_enc_a S_enc_b) falls below float32's normal range (operand
 * amaxes whose product is below about 8e-32 / alpha) it is rounded to a
 * subnormal and the result loses relative precision the reference may keep. */
static void nvfp4_gemm_bf16(gtq_ctx *g, bool ta, bool tb, int m, int n, int k, float alpha,
                            const gtq_operand &a, const exmy_cuda_operand_quant &qa,
                            const gtq_operand &b, const exmy_cuda_operand_quant &qb, float beta,
                            float *c, long ldc) {
  MxImages &x = g->mx_img;
  cudaStream_t st = g->stream;
  if (!x.s_enc) gtq_check(cudaMalloc((void **)&x.s_enc, 2 * sizeof(float)), "cudaMalloc (S_enc)");
  const size_t M = (size_t)m, N = (size_t)n, K = (size_t)k;
  /* the gathered (and transformed) operand, one after the other in stream order */
  reserve(&x.img[0], &x.img_cap[0], M * K * 2);
  reserve(&x.img[1], &x.img_cap[1], N * K * 2);
  reserve(&g->stage, &g->stage_cap, (M > N ? M : N) * K * sizeof(float));
  float *work = (float *)g->stage;
  /* op(A) as m x k and op(B)^T as n x k, K contiguous */
  gtq_check(exmy_cuda_nvfp4_quantize_bf16(&qa.format, &qa.round, &qa.scaling,
                                          (const float *)a.ptr, a.ld, ta, M, K, work, x.img[0],
                                          x.s_enc, nullptr, st), "NVFP4 image (A)");
  gtq_check(exmy_cuda_nvfp4_quantize_bf16(&qb.format, &qb.round, &qb.scaling,
                                          (const float *)b.ptr, b.ld, !tb, N, K, work, x.img[1],
                                          x.s_enc + 1, nullptr, st), "NVFP4 image (B)");
  /* C = op(A) op(B) with op(B)^T as n x k: the images, K contiguous; alpha
   * · (1 / S_enc of A) · (1 / S_enc of B), each factor 1 / S_enc rounded as
   * the reference dequantizes with it (k_alpha's __fdiv_rn(1, s) is
   * exmy_core_nvfp4_tensor_decode), the products in that order */
  gtq_operand ia = gtq_operand_bf16(-1, 0, x.img[0], k), ib = gtq_operand_bf16(-1, 0, x.img[1], k);
  ia.scale = x.s_enc, ib.scale = x.s_enc + 1;
  const GemmScalars ab(g, alpha, beta, ia, ib);
  row_major_gemm_ex(g, false, true, m, n, k, ab.alpha, ia, ib, CUDA_R_16BF, ab.beta, c,
                    CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F, "cublasGemmEx (NVFP4)");
}

extern "C" void gtq_set_mx_reference(gtq_ctx *g, bool on) { g->mx_img.reference = on; }

extern "C" void gtq_along_k_paths(const gtq_ctx *g, gtq_along_k_path_counts *counts) {
  *counts = g->mx_img.paths;
}

extern "C" unsigned long long gtq_mx_fallbacks(gtq_ctx *g) {
  unsigned long long n = 0;
  if (g->mx_img.fallbacks) {
    gtq_check(cudaMemcpyAsync(&n, g->mx_img.fallbacks, sizeof n, cudaMemcpyDeviceToHost,
                              g->stream), "MX fallbacks");
    gtq_check(cudaStreamSynchronize(g->stream), "MX fallbacks");
  }
  return n;
}

/* Statistics steps, GROUP and NVFP4 operands: the K-contiguous image
 * (rows x k) quantized again on the device as exmy_cuda_qgemm quantizes it
 * (the same sr offsets), its statistics reduced there too: stream-ordered,
 * no host round trip. */
static void blocks_stats(gtq_ctx *g, const gtq_operand &o, const exmy_cuda_operand_quant &q,
                         bool transpose, size_t rows, size_t k) {
  const size_t n = rows * k;
  reserve(&g->stage, &g->stage_cap, 2 * n * sizeof(float));
  float *x = (float *)g->stage, *y = x + n;
  k_gather<<<grid_for(n), 256, 0, g->stream>>>((const float *)o.ptr, o.ld, transpose, rows, k, x);
  gtq_check(cudaGetLastError(), "gather");
  Site &s = g->sites[o.site];
  gtq_check(exmy_cuda_quantize_blocks_stats_f32(&q.format, &q.round, &q.scaling, x, y, rows, k,
                                                &s.stats[o.use], g->stream),
            "GROUP / NVFP4 statistics");
  s.filled_stats[o.use] = true;
}

/* The statistics of an operand quantized along K, by its kind. */
static void along_k_stats(gtq_ctx *g, const gtq_operand &o, const exmy_cuda_operand_quant &q,
                          bool transpose, size_t rows, size_t k) {
  if (q.scaling.kind == EXMY_SCALING_MX) mx_stats(g, o, q, transpose, rows, k);
  else blocks_stats(g, o, q, transpose, rows, k);
}

/* The emin of operand o of `site` in its model, as tq_site_accum gives it on
 * the CPU: for a slot quantized with a power-of-two per-tensor scale, its
 * format's emin, and *scale = the slot's device scale, from which the
 * kernels take exmy_accum_scaled_emin (format emin - log2 s); else *scale =
 * NULL and exmy_accum_operand_emin. */
static int operand_emin(const gtq_ctx *g, int site, const gtq_operand &o, const float **scale) {
  const exmy_operand_quant *q = o.site == site ? &g->host[site].op[o.use] : nullptr;
  *scale = nullptr;
  if (exmy_accum_pow2_scaled(q) && o.qscale) {
    *scale = o.qscale;
    return q->format.emin;
  }
  return exmy_accum_operand_emin(q);
}

/* What the FP8 plans read of a heuristic candidate: its split-K, which
 * decides, and its id, tile and stages, which their logs print. */
struct AlgoConfig {
  int32_t splits = 0, id = -1;
  uint32_t tile = 0, stages = 0;
};

/* false where the candidate failed or its split-K cannot be read. */
static bool algo_config(const cublasLtMatmulHeuristicResult_t &h, AlgoConfig *c) {
  size_t written = 0, w = 0;
  if (h.state != CUBLAS_STATUS_SUCCESS ||
      cublasLtMatmulAlgoConfigGetAttribute(&h.algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &c->splits,
                                           sizeof c->splits, &written) ||
      written != sizeof c->splits)
    return false;
  cublasLtMatmulAlgoConfigGetAttribute(&h.algo, CUBLASLT_ALGO_CONFIG_ID, &c->id, sizeof c->id, &w);
  cublasLtMatmulAlgoConfigGetAttribute(&h.algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &c->tile,
                                       sizeof c->tile, &w);
  cublasLtMatmulAlgoConfigGetAttribute(&h.algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, &c->stages,
                                       sizeof c->stages, &w);
  return true;
}

/* The heuristic's preference for an FP8 plan: at most our workspace, and the
 * alignments the codes (A, B) and the float32 outputs (C, D) are known to
 * have.  false (and *pref null) where cuBLASLt refuses any of it. */
static bool lt_preference(cublasLtMatmulPreference_t *pref, size_t workspace_bytes,
                          uint32_t align_ab, uint32_t align_cd) {
  *pref = nullptr;
  if (cublasLtMatmulPreferenceCreate(pref) ||
      cublasLtMatmulPreferenceSetAttribute(*pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                           &workspace_bytes, sizeof workspace_bytes) ||
      cublasLtMatmulPreferenceSetAttribute(*pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                           &align_ab, sizeof align_ab) ||
      cublasLtMatmulPreferenceSetAttribute(*pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                           &align_ab, sizeof align_ab) ||
      cublasLtMatmulPreferenceSetAttribute(*pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                           &align_cd, sizeof align_cd) ||
      cublasLtMatmulPreferenceSetAttribute(*pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                           &align_cd, sizeof align_cd)) {
    if (*pref) cublasLtMatmulPreferenceDestroy(*pref);
    *pref = nullptr;
    return false;
  }
  return true;
}

/* The site's accumulation model, if the GEMM of a and b has one, into *out:
 * emin_a / emin_b those of the two operands' formats, as model.c sets them;
 * *sa / *sb the device scales they follow (operand_emin). */
static const exmy_accum_model *accum_of(const gtq_ctx *g, const gtq_operand &a,
                                        const gtq_operand &b, exmy_accum_model *out,
                                        const float **sa, const float **sb) {
  const int site = a.site >= 0 ? a.site : b.site;
  if (site < 0 || site >= g->n_sites || !accumulates(g->host[site])) return nullptr;
  *out = g->host[site].accum;
  out->emin_a = operand_emin(g, site, a, sa);
  out->emin_b = operand_emin(g, site, b, sb);
  return out;
}

/* ---- cuBLASLt's FP8 GEMM for the hopper models ----
 * The model (lib/accum_core.h) with the hopper presets and k_slice 0 is
 * cuBLASLt's FP8 GEMM bit for bit where cuBLASLt does not split K
 * (cuda/NOTES.md).  The slots hold y = Q(x s) / s in float32; for s = 2^k
 * the codes are c = y s exactly, and the model on y is
 * 2^-(ka+kb) times the model on the codes: every product, alignment
 * exponent and truncation point moves by the same power of two, and the
 * codes' sums (nonzero ones between 2^-33 and 2^56) stay float32 normals
 * after the shift, so no float32 rounding of the model changes, for scales
 * within exmy_gpu::fp8_scales_ok's bounds (fp8_codes.cuh).  The clamp
 * of an input's exponent at emin moves with them: the model clamps an
 * unscaled operand at its format's emin and a pow2-scaled one at the
 * format's emin - k (operand_emin, computed from the device s), where the
 * tensor core clamps the codes at the format's emin, so FP8-subnormal codes
 * take this path too.  Applying 1/s through cuBLASLt's scale pointers and alpha is
 * one rounding of the same real alpha · dot as the model's __fmul_rn
 * (powers of two commute with rounding away from subnormals, and the
 * bounds keep every partial product normal).  beta != 0: cuBLASLt's epilogue may fuse alpha acc + beta C
 * into one rounding where the model rounds alpha dot, beta C and their sum
 * apart, so cuBLASLt writes alpha acc alone and a separate pass adds
 * beta C as the model does. */
namespace {

/* The FP8 formats cuBLASLt's FP8 GEMM takes. */
enum Fp8Kind { kNotFp8, kFp8E4M3, kFp8E5M2 };

/* E4M3 (fn), E5M2, or neither. */
Fp8Kind fp8_kind(const exmy_format &f) {
  if (!f.is_signed) return kNotFp8;
  if (f.exp_bits == 4 && f.man_bits == 3 && f.bias == 7 && f.specials == EXMY_SPECIALS_FN)
    return kFp8E4M3;
  if (f.exp_bits == 5 && f.man_bits == 2 && f.bias == 15 && f.specials == EXMY_SPECIALS_IEEE)
    return kFp8E5M2;
  return kNotFp8;
}

bool same_accum(const exmy_accum_model &a, const exmy_accum_model &b) {
  return a.group == b.group && a.product_bits == b.product_bits && a.sum_bits == b.sum_bits &&
         a.round == b.round && a.promote_every == b.promote_every &&
         a.align_sum == b.align_sum && a.align_exp == b.align_exp && a.k_slice == b.k_slice;
}

/* out (rows x k, K contiguous) = the FP8 codes of op(X) s, op(X) read from
 * x (leading dimension ld) as is or transposed (TRANS: x is k x rows), by
 * 32 x 32 tiles; *inv = 1 / s.  *flag gets kFp8ScalesOutOfRange where s and
 * the other operand's scale (other: NULL for 1) fail fp8_scales_ok, and
 * kFp8NotCodes where a value y is not exactly c / s for a code c, or the
 * model's clamp of y's exponent at its emin differs from the tensor core's
 * of c's at the format's emin.  The model's emin: model_emin, or with scaled_emin
 * exmy_accum_scaled_emin(model_emin, s), as the emulation takes it. */
template <bool E4M3, bool TRANS>
__global__ void k_fp8_codes(const float *__restrict__ x, long ld, size_t rows, size_t k,
                            const float *scale, const float *other, int fmt_emin, int model_emin,
                            bool scaled_emin, __nv_fp8_storage_t *__restrict__ out, float *inv,
                            int *flag) {
  __shared__ float tile[32][33];
  const float s = scale ? *scale : 1.0f, is = __fdiv_rn(1.0f, s);
  model_emin = exmy_gpu::fp8_model_emin(model_emin, scaled_emin, s);
  const bool range_bad = !exmy_gpu::fp8_scales_ok(s, other ? *other : 1.0f);
  bool bad = false;
  if (blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0 && threadIdx.y == 0) *inv = is;
  const size_t p0 = (size_t)blockIdx.x * 32;
  for (size_t r0 = (size_t)blockIdx.y * 32; r0 < rows; r0 += (size_t)gridDim.y * 32) {
    for (int j = threadIdx.y; j < 32; j += 8) {
      if (TRANS) { /* tile[p][r] */
        const size_t p = p0 + j, r = r0 + threadIdx.x;
        if (p < k && r < rows) tile[j][threadIdx.x] = x[p * ld + r];
      } else { /* tile[r][p] */
        const size_t r = r0 + j, p = p0 + threadIdx.x;
        if (p < k && r < rows) tile[j][threadIdx.x] = x[r * ld + p];
      }
    }
    __syncthreads();
    for (int j = threadIdx.y; j < 32; j += 8) {
      const size_t r = r0 + j, p = p0 + threadIdx.x;
      if (r >= rows || p >= k) continue;
      const float y = TRANS ? tile[threadIdx.x][j] : tile[j][threadIdx.x];
      __nv_fp8_storage_t c;
      bad |= !exmy_gpu::fp8_code_of<E4M3>(y, s, is, fmt_emin, model_emin, &c);
      out[r * k + p] = c;
    }
    __syncthreads();
  }
  /* one atomic per block: range_bad is the same in every thread */
  const bool block_bad = __syncthreads_or(bad);
  if (threadIdx.x == 0 && threadIdx.y == 0 && (range_bad || block_bad))
    atomicOr(flag, (range_bad ? exmy_gpu::kFp8ScalesOutOfRange : 0) |
                       (block_bad ? exmy_gpu::kFp8NotCodes : 0));
}

/* C = exmy_gemm_epilogue(R, alpha, beta, C) (R: m x n dense), unless
 * flagged: after cuBLASLt's alpha dot (alpha 1 here, R = alpha dot rounded),
 * or after its block-scaled dot. */
__global__ void k_accum_epilogue(const int *flag, const float *__restrict__ r, size_t m,
                                 size_t n, float alpha, float beta, float *__restrict__ c,
                                 size_t ldc) {
  if (*flag) return;
  for (size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x; e < m * n;
       e += (size_t)gridDim.x * blockDim.x) {
    float *cij = c + (e / n) * ldc + e % n;
    *cij = exmy_gemm_epilogue(r[e], alpha, beta, cij);
  }
}

/* Where flagged: the emulation (cuda/accum_gemm.cuh) on the operands as
 * they lie; the emin of an operand with a scale pointer follows it
 * (operand_emin). */
__global__ void k_accum_gemm_if(const int *flag, exmy_accum_model model, bool ta, bool tb,
                                size_t m, size_t n, int k, float alpha,
                                const float *__restrict__ a, long lda,
                                const float *__restrict__ b, long ldb, float beta,
                                float *__restrict__ c, size_t ldc, const float *scale_a,
                                const float *scale_b) {
  if (*flag)
    exmy_cuda::accum_gemm_outputs(model, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc,
                                  scale_a, scale_b);
}

/* counts (AccumCount): this GEMM's path, from the flag of k_fp8_codes. */
__global__ void k_accum_count(const int *flag, unsigned long long *counts) {
  if (!*flag) counts[kCountFast]++;
  else if (*flag & exmy_gpu::kFp8ScalesOutOfRange) counts[kCountScalesOutOfRange]++;
  else if (*flag & exmy_gpu::kFp8NotCodes) counts[kCountNotCodes]++;
}

/* The plan for one shape, made on first use: cuBLASLt's heuristic, the
 * first algorithm that does not split K (a split-K GEMM adds its slices'
 * float32 results: the model with k_slice, not the preset's); where every
 * candidate splits K (small M x N, large K: the weight gradients' GEMMs),
 * the first one with its split undone (one slice, no reduction), if
 * cublasLtMatmulAlgoCheck accepts it. */
LtPlan &lt_plan(AccumFast &f, const LtShape &sh) {
  const int m = sh.m, n = sh.n, k = sh.k;
  const bool e4m3_a = sh.e4m3_a, e4m3_b = sh.e4m3_b, fast = sh.fast;
  const LtKey key(m, n, k, e4m3_a, e4m3_b, fast, sh.ldd, sh.align, sh.ld_ab, sh.batch,
                  sh.stride_d, sh.unit, sh.align_ab);
  auto it = f.plans.find(key);
  if (it != f.plans.end()) return it->second;
  LtPlan &p = f.plans[key];
  const cudaDataType ta = e4m3_a ? CUDA_R_8F_E4M3 : CUDA_R_8F_E5M2;
  const cudaDataType tb = e4m3_b ? CUDA_R_8F_E4M3 : CUDA_R_8F_E5M2;
  const cublasOperation_t T = CUBLAS_OP_T, N = CUBLAS_OP_N;
  const int8_t fast_accum = fast;
  const float *scales = sh.unit ? f.unit : f.inv;
  const float *scale_a = scales + kInvB, *scale_b = scales; /* cuBLASLt's A is our B */
  const uint32_t al = (uint32_t)sh.align, al_ab = (uint32_t)sh.align_ab;
  const int32_t batch = sh.batch;
  const int64_t stride_ab = k, stride_d = sh.stride_d;
  cublasLtMatmulPreference_t pref = nullptr;
  /* column-major: D (n x m, ld ldd) = (op(B)^T as k x n)^T . (op(A)^T as k x m) */
  if (cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F) ||
      cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &T, sizeof T) ||
      cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &N, sizeof N) ||
      cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &scale_a,
                                     sizeof scale_a) ||
      cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &scale_b,
                                     sizeof scale_b) ||
      cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast_accum,
                                     sizeof fast_accum) ||
      cublasLtMatrixLayoutCreate(&p.la, tb, k, n, sh.ld_ab) ||
      cublasLtMatrixLayoutCreate(&p.lb, ta, k, m, sh.ld_ab) ||
      cublasLtMatrixLayoutCreate(&p.ld, CUDA_R_32F, n, m, sh.ldd) ||
      (batch > 1 &&
       (cublasLtMatrixLayoutSetAttribute(p.la, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch,
                                         sizeof batch) ||
        cublasLtMatrixLayoutSetAttribute(p.la, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                         &stride_ab, sizeof stride_ab) ||
        cublasLtMatrixLayoutSetAttribute(p.lb, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch,
                                         sizeof batch) ||
        cublasLtMatrixLayoutSetAttribute(p.lb, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                         &stride_ab, sizeof stride_ab) ||
        cublasLtMatrixLayoutSetAttribute(p.ld, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch,
                                         sizeof batch) ||
        cublasLtMatrixLayoutSetAttribute(p.ld, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                         &stride_d, sizeof stride_d))) ||
      !lt_preference(&pref, f.workspace_bytes, al_ab, al)) {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    return p; /* not ok: the emulation */
  }
  cublasLtMatmulHeuristicResult_t heur[16] = {};
  int found = 0;
  if (cublasLtMatmulAlgoGetHeuristic(f.lt, p.op, p.la, p.lb, p.ld, p.ld, pref, 16, heur,
                                     &found) != CUBLAS_STATUS_SUCCESS)
    found = 0;
  cublasLtMatmulPreferenceDestroy(pref);
  /* EXMY_FP8_PLAN_LOG set: which algorithm each shape got (for the GPU tests' logs) */
  const bool log = getenv("EXMY_FP8_PLAN_LOG") != nullptr;
  for (int pass = 0; pass < 2 && !p.ok; pass++) /* 0: unsplit candidates, 1: split ones undone */
    for (int i = 0; i < found && !p.ok; i++) {
      AlgoConfig a;
      if (!algo_config(heur[i], &a)) continue;
      if (log && pass == 0) {
        printf("fp8 plan %d x %d x %d (%s x %s, fast %d, batch %d): candidate %d of %d: algo %d "
               "tile %u stages %u split-K %d workspace %zu\n", m, n, k,
               e4m3_a ? "E4M3" : "E5M2", e4m3_b ? "E4M3" : "E5M2", (int)fast, (int)batch, i,
               found, a.id, a.tile, a.stages, (int)a.splits, heur[i].workspaceSize);
      }
      if ((a.splits > 1) != (pass == 1)) continue;
      cublasLtMatmulAlgo_t algo = heur[i].algo;
      size_t workspace = heur[i].workspaceSize;
      if (a.splits > 1) {
        const int32_t one = 1;
        const uint32_t no_reduction = CUBLASLT_REDUCTION_SCHEME_NONE;
        cublasLtMatmulHeuristicResult_t check = {};
        if (cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &one,
                                                 sizeof one) ||
            cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME,
                                                 &no_reduction, sizeof no_reduction) ||
            cublasLtMatmulAlgoCheck(f.lt, p.op, p.la, p.lb, p.ld, p.ld, &algo, &check) !=
                CUBLAS_STATUS_SUCCESS)
          continue;
        workspace = check.workspaceSize;
        if (log)
          printf("fp8 plan %d x %d x %d: candidate %d with its split-K undone\n", m, n, k, i);
      }
      if (workspace > f.workspace_bytes) continue;
      p.algo = algo;
      p.ok = true;
    }
  if (log && !p.ok)
    printf("fp8 plan %d x %d x %d: no usable algorithm among %d: emulation\n", m, n, k, found);
  return p;
}

/* The operand of an FP8 GEMM: where its values lie, its format, its device
 * s (NULL: unscaled) and the emin the model clamps its exponents at
 * (scaled_emin: exmy_accum_scaled_emin(model_emin, s)). */
struct Fp8Operand {
  const float *ptr;
  long ld;
  Fp8Kind kind;
  const float *scale;
  int model_emin;
  bool scaled_emin;
};

/* Whether operand o of site `site` can feed the FP8 GEMM; fills *out.
 * emin_scale: the scale the model's emin follows (operand_emin), or NULL. */
bool fp8_operand(const gtq_ctx *g, const gtq_operand &o, int model_emin,
                 const float *emin_scale, Fp8Operand *out) {
  if (o.mx || o.bf16 || o.site < 0 || o.site >= g->n_sites) return false;
  const exmy_operand_quant &q = g->host[o.site].op[o.use];
  if (!q.enabled) return false;
  const Fp8Kind kind = fp8_kind(q.format);
  if (kind == kNotFp8) return false;
  switch (q.scaling.kind) {
    case EXMY_SCALING_NONE:
      if (o.qscale) return false;
      break;
    case EXMY_SCALING_TENSOR:
    case EXMY_SCALING_DELAYED:
      if (!q.scaling.pow2 || !o.qscale) return false;
      break;
    default:
      return false;
  }
  /* the emin follows the very scale the codes are made with */
  if (emin_scale && emin_scale != o.qscale) return false;
  *out = {(const float *)o.ptr, o.ld, kind, o.qscale, model_emin, emin_scale != nullptr};
  return true;
}

void launch_fp8_codes(const Fp8Operand &o, const float *other_scale, bool transpose, size_t rows,
                      size_t k, int fmt_emin, __nv_fp8_storage_t *out, float *inv, int *flag,
                      cudaStream_t st) {
  const dim3 block(32, 8);
  const size_t tr = (rows + 31) / 32;
  const dim3 grid((unsigned)((k + 31) / 32), (unsigned)(tr < 65535 ? tr : 65535));
  const bool e4m3 = o.kind == kFp8E4M3;
#define EXMY_FP8_CODES(E, T)                                                                \
  k_fp8_codes<E, T><<<grid, block, 0, st>>>(o.ptr, o.ld, rows, k, o.scale, other_scale,     \
                                            fmt_emin, o.model_emin, o.scaled_emin, out, inv, \
                                            flag)
  if (e4m3 && transpose) EXMY_FP8_CODES(true, true);
  else if (e4m3) EXMY_FP8_CODES(true, false);
  else if (transpose) EXMY_FP8_CODES(false, true);
  else EXMY_FP8_CODES(false, false);
#undef EXMY_FP8_CODES
  gtq_check(cudaGetLastError(), "FP8 codes");
}

}  // namespace

/* cuBLASLt's handle and what every FP8 GEMM shares (workspace, scale
 * pointers, flag, counters), made at the first one; false where cuBLASLt
 * cannot be opened (the emulation then). */
static bool accum_init(AccumFast &f, cudaStream_t st) {
  if (f.lt) return true;
  if (cublasLtCreate(&f.lt) != CUBLAS_STATUS_SUCCESS) {
    f.lt = nullptr;
    return false;
  }
  gtq_check(cudaMalloc(&f.workspace, f.workspace_bytes), "cudaMalloc (cuBLASLt workspace)");
  gtq_check(cudaMalloc((void **)&f.inv, (kInvB + 1) * sizeof(float)), "cudaMalloc");
  gtq_check(cudaMalloc((void **)&f.unit, (kInvB + 1) * sizeof(float)), "cudaMalloc");
  static const float one = 1.0f;
  gtq_check(cudaMemcpyAsync(f.unit, &one, sizeof one, cudaMemcpyHostToDevice, st), "unit scale");
  gtq_check(cudaMemcpyAsync(f.unit + kInvB, &one, sizeof one, cudaMemcpyHostToDevice, st),
            "unit scale");
  gtq_check(cudaMalloc((void **)&f.flag, sizeof(int)), "cudaMalloc");
  gtq_check(cudaMalloc((void **)&f.counts, kAccumCounts * sizeof(unsigned long long)),
            "cudaMalloc");
  gtq_check(cudaMemsetAsync(f.counts, 0, kAccumCounts * sizeof(unsigned long long), st),
            "counts");
  return true;
}

/* C = alpha op(A) op(B) + beta C through cuBLASLt's FP8 GEMM, bit for bit the
 * model's (see above); false, having done nothing, where this GEMM cannot
 * take that path.  Where the device finds a value that is not an exact
 * code, the emulation overwrites the result, in stream order. */
/* cuBLASLt's FP8 GEMM wants each row of A and B 16-byte aligned: with the
 * codes stored K-contiguous (one byte each, the TN layout FP8 requires),
 * K a multiple of 16. */
constexpr int kFp8KMultiple = 16;

static bool accum_fp8_gemm(gtq_ctx *g, bool ta, bool tb, int m, int n, int k, float alpha,
                           const gtq_operand &a, const gtq_operand &b, float beta, float *c,
                           long ldc, const exmy_accum_model &model, const float *sa,
                           const float *sb) {
  AccumFast &f = g->accum;
  if (f.emulate || m <= 0 || n <= 0 || k <= 0 || k % kFp8KMultiple || ldc < n) return false;
  const bool fast = same_accum(model, f.hopper);
  if (!fast && !same_accum(model, f.split)) return false;
  /* alpha 2^-(ka+kb) and the result stay normal */
  if (!exmy_gpu::fp8_alpha_ok(alpha)) return false;
  Fp8Operand oa, ob;
  if (!fp8_operand(g, a, model.emin_a, sa, &oa) || !fp8_operand(g, b, model.emin_b, sb, &ob))
    return false;
  if (oa.kind == kFp8E5M2 && ob.kind == kFp8E5M2) return false; /* cuBLASLt has no E5M2 x E5M2 */
  cudaStream_t st = g->stream;
  if (!accum_init(f, st)) return false;
  /* beta == 0: straight into C; else into the result buffer, beta C after */
  const size_t M = (size_t)m, N = (size_t)n, K = (size_t)k;
  const long ldd = beta != 0.0f ? n : ldc;
  int align = 256; /* the result buffer's: cudaMalloc's */
  while (beta == 0.0f && align > 4 && (uintptr_t)c % align) align /= 2;
  LtPlan &p = lt_plan(f, LtShape{m, n, k, oa.kind == kFp8E4M3, ob.kind == kFp8E4M3, fast, ldd,
                                 align, k, 1, 0, false, 256});
  if (!p.ok) return false;
  if (beta != 0.0f) reserve((void **)&f.result, &f.result_cap, M * N * sizeof(float));
  float *d = beta != 0.0f ? f.result : c;
  reserve(&f.codes[0], &f.codes_cap[0], M * K);
  reserve(&f.codes[1], &f.codes_cap[1], N * K);
  gtq_check(cudaMemsetAsync(f.flag, 0, sizeof(int), st), "FP8 flag");
  const exmy_format &fa = g->host[a.site].op[a.use].format, &fb = g->host[b.site].op[b.use].format;
  /* op(A) as m x k and op(B)^T as n x k, K contiguous */
  launch_fp8_codes(oa, ob.scale, ta, M, K, fa.emin, (__nv_fp8_storage_t *)f.codes[0], f.inv, f.flag,
                   st);
  launch_fp8_codes(ob, oa.scale, !tb, N, K, fb.emin, (__nv_fp8_storage_t *)f.codes[1],
                   f.inv + kInvB, f.flag, st);
  /* out of place, as PyTorch calls it (C is not read with beta 0; see
   * kInvB for the refused call) */
  const float zero = 0.0f;
  const cublasStatus_t s = cublasLtMatmul(f.lt, p.op, &alpha, f.codes[1], p.la, f.codes[0], p.lb,
                                          &zero, f.codes[0], p.ld, d, p.ld, &p.algo, f.workspace,
                                          f.workspace_bytes, st);
  if (s != CUBLAS_STATUS_SUCCESS) {
    /* refused for this shape: the emulation from now on (the codes written
     * above are scratch; the caller runs exmy_cuda_qgemm_accum) */
    fprintf(stderr, "train: cublasLtMatmul (FP8, %d x %d x %d) refused (%s): the emulation "
            "for this shape\n", m, n, k, cublasGetStatusString(s));
    p.ok = false;
    return false;
  }
  if (beta != 0.0f)
    k_accum_epilogue<<<grid_for(M * N), 256, 0, st>>>(f.flag, f.result, M, N, 1.0f, beta, c,
                                                       (size_t)ldc);
  k_accum_gemm_if<<<grid_for(M * N), 256, 0, st>>>(f.flag, model, ta, tb, M, N, k, alpha,
                                                   (const float *)a.ptr, a.ld,
                                                   (const float *)b.ptr, b.ld, beta, c,
                                                   (size_t)ldc, sa, sb);
  k_accum_count<<<1, 1, 0, st>>>(f.flag, f.counts);
  gtq_check(cudaGetLastError(), "FP8 GEMM epilogue");
  return true;
}

/* ---- Block-scaled operands under hopper-split: cuBLASLt per slice of K ----
 * DeepSeek-V3's recipe (fp8-deepseek): E4M3 operands with a float32
 * dequantization scale per block of 128 along K (1 x 128 tiles of
 * activations and gradients, 128 x 128 blocks of weights), accumulated by
 * the hopper-split model on the codes, each block's partial sum promoted with
 * its two scales (lib/accum_core.h, exmy_accum_dot_scaled).  With the
 * blocks as long as the promotion interval (exmy_accum_block_scaling) every
 * promotion closes exactly one block: the running sum restarts at 0 at each
 * block, so a block's partial is the hopper model (fast accumulation,
 * never promoted) on that block's 128 codes alone, which is cuBLASLt's FP8
 * GEMM with fast accumulation at K = 128 bit for bit (cuda/NOTES.md).
 * Where one operand is 1 x 128-tiled and the other 128 x 128-blocked,
 * cuBLASLt's own block-scaled GEMM computes the same in one call
 * (block_lt_gemm, calibrated bit for bit); elsewhere (the weight
 * gradient's two tiled operands, forced, or no such plan):
 *   1. the operands gathered K-contiguous and quantized to codes and block
 *      scales by the very call exmy_cuda_qgemm_accum makes
 *      (exmy_cuda_quantize_group_codes_f32 with the same recipe and sr
 *      offsets), the float32 codes then stored as FP8 (k_block_codes);
 *   2. one strided-batched cuBLASLt call per chunk of slices: batch s reads
 *      codes s·128 .. s·128 + 127 of every row (leading dimension K) and
 *      writes partial[s] (m x n), alpha 1, beta 0, scales 1, by an
 *      algorithm that does not split K (lt_plan);
 *   3. acc = exmy_accum_promote_scaled(acc, partial[s], sa, sb) over the
 *      slices in order from +0, the scales indexed as the emulation indexes
 *      them (exmy_accum_scales_row), carried across chunks, then
 *      exmy_gemm_epilogue into C (k_block_promote).
 * A zero partial is taken as +0: the model's partial is the running sum
 * rounded to float32 (exmy_accum_to_f32), +0 for a zero sum (an exact
 * cancellation or no nonzero product) and never an underflow (sums of FP8
 * products lie far inside float32's range), whereas the sign of a zero that
 * the tensor core returns is not part of the calibration; it matters where
 * acc is -0 (fmaf(s, -0, -0) is -0, fmaf(s, +0, -0) is +0).  Where a code
 * is not an exact finite FP8 value or a scale is not finite (the model then
 * accumulates each block in float32), the device flag makes the emulation
 * (cuda/accum_gemm.cuh, on the same float32 codes and scales) overwrite the
 * result in stream order, as accum_fp8_gemm does. */
namespace {

/* The bytes of partial sums one chunk of slices may take: at 120m's 32768
 * tokens, 4 of the 256 MiB slices of an MLP GEMM (fewer chunks, less of the
 * accumulator's traffic between them). */
constexpr size_t kBlockPartialBytes = size_t(1) << 30;

/* out (n codes) = the FP8 storage of codes (float32 values); *flag gets
 * kFp8NotCodes where a value is not exactly a finite code of the format
 * (exmy_gpu::fp8_code_of, unscaled) and kFp8ScalesOutOfRange where one of
 * the n_scales block scales is not finite. */
template <bool E4M3>
__global__ void k_block_codes(const float *__restrict__ codes, size_t n,
                              const float *__restrict__ scales, size_t n_scales, int fmt_emin,
                              __nv_fp8_storage_t *__restrict__ out, int *flag) {
  bool bad_code = false, bad_scale = false;
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    __nv_fp8_storage_t c;
    bad_code |= !exmy_gpu::fp8_code_of<E4M3>(codes[i], 1.0f, 1.0f, fmt_emin, fmt_emin, &c);
    out[i] = c;
  }
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n_scales; i += stride)
    bad_scale |= !isfinite(scales[i]);
  const int bits = (__syncthreads_or(bad_code) ? exmy_gpu::kFp8NotCodes : 0) |
                   (__syncthreads_or(bad_scale) ? exmy_gpu::kFp8ScalesOutOfRange : 0);
  if (threadIdx.x == 0 && bits) atomicOr(flag, bits);
}

/* Unless flagged: the promotions of `count` slices of K, from slice kb0:
 * partial[s] at part + s stride_d (m x n, leading dimension ldd), into acc
 * (m x n dense; from +0 when `first`); when `last`, C = exmy_gemm_epilogue
 * of it instead. */
__global__ void k_block_promote(const int *flag, const float *__restrict__ part, long stride_d,
                                long ldd, int count, int kb0, size_t m, size_t n,
                                exmy_accum_scales sa, exmy_accum_scales sb,
                                float *__restrict__ acc, bool first, bool last, float alpha,
                                float beta, float *__restrict__ c, size_t ldc) {
  if (*flag) return;
  for (size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x; e < m * n;
       e += (size_t)gridDim.x * blockDim.x) {
    const size_t i = e / n, j = e % n;
    const float *ra = exmy_accum_scales_row(&sa, i) + kb0;
    const float *rb = exmy_accum_scales_row(&sb, j) + kb0;
    const float *pij = part + i * ldd + j;
    float x = first ? 0.0f : acc[e];
    for (int s = 0; s < count; s++) {
      const float p = pij[(long)s * stride_d];
      x = exmy_accum_promote_scaled(x, p == 0.0f ? 0.0f : p, ra[s], rb[s]);
    }
    if (last) {
      float *cij = c + i * ldc + j;
      *cij = exmy_gemm_epilogue(x, alpha, beta, cij);
    } else {
      acc[e] = x;
    }
  }
}

/* Where flagged: the emulation of exmy_cuda_qgemm_accum (its k_accum_gemm)
 * on the float32 codes (ca: m x k, cb: n x k) and block scales. */
__global__ void k_block_emulate_if(const int *flag, exmy_accum_model model, size_t m, size_t n,
                                   int k, float alpha, const float *__restrict__ ca,
                                   const float *__restrict__ cb, float beta,
                                   float *__restrict__ c, size_t ldc, exmy_accum_scales sa,
                                   exmy_accum_scales sb) {
  if (*flag)
    exmy_cuda::accum_gemm_outputs(model, false, true, m, n, k, alpha, ca, k, cb, k, beta, c, ldc,
                                  nullptr, nullptr, sa, sb);
}

/* An operand's block scales (in: the quantizer's, ceil(rows / br) x kb,
 * K-contiguous, br = 1 or 128) into the layout cuBLASLt's block-scaled
 * GEMM reads (blockscaled_lt.h): VEC128 for br 1, BLK128x128 for br 128
 * (its padding zeroed beforehand). */
__global__ void k_block_lt_scales(const float *__restrict__ in, size_t rows, size_t kb, bool blk,
                                  float *__restrict__ out) {
  const size_t units = blk ? (rows + 127) / 128 : rows, k = kb * 128;
  for (size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x; e < units * kb;
       e += (size_t)gridDim.x * blockDim.x) {
    const size_t r = e / kb, b = e % kb;
    out[blk ? exmy_blockscaled_blk_at(r, b, k) : exmy_blockscaled_vec_at(r, b, rows)] = in[e];
  }
}

}  // namespace

/* One operand of block_fp8_gemm: op(X) (rows x k, x with leading dimension
 * ld, transposed when `transpose`) gathered and quantized as
 * exmy_cuda_qgemm_accum's quantize_codes does, its FP8 codes into
 * f.codes[i]; *s describes its block scales. */
static void block_operand(AccumFast &f, int i, const exmy_cuda_operand_quant &q, Fp8Kind kind,
                          const float *x, long ld, bool transpose, size_t rows, size_t k,
                          exmy_accum_scales *s, cudaStream_t st) {
  const size_t gk = (size_t)q.scaling.group;
  const size_t br = q.scaling.block_rows > 1 ? (size_t)q.scaling.block_rows : 1;
  const size_t per_row = (k + gk - 1) / gk, blocks = ((rows + br - 1) / br) * per_row;
  const size_t n = rows * k;
  reserve((void **)&f.work[i], &f.work_cap[i], n * sizeof(float));
  reserve((void **)&f.codes32[i], &f.codes32_cap[i], n * sizeof(float));
  reserve((void **)&f.bscales[i], &f.bscales_cap[i], blocks * sizeof(float));
  reserve(&f.codes[i], &f.codes_cap[i], n);
  exmy_cuda::launch_gather(x, ld, transpose, rows, k, f.work[i], st);
  gtq_check(cudaGetLastError(), "gather (block-scaled operand)");
  gtq_check(exmy_cuda_quantize_group_codes_f32(&q.format, &q.round, &q.scaling, f.work[i],
                                               f.work[i], f.codes32[i], f.bscales[i], rows, k,
                                               st),
            "block-scaled codes");
  *s = exmy_accum_scales{f.bscales[i], (long)per_row, (int)br};
  if (kind == kFp8E4M3)
    k_block_codes<true><<<grid_for(n), 256, 0, st>>>(f.codes32[i], n, f.bscales[i], blocks,
                                                     q.format.emin,
                                                     (__nv_fp8_storage_t *)f.codes[i], f.flag);
  else
    k_block_codes<false><<<grid_for(n), 256, 0, st>>>(f.codes32[i], n, f.bscales[i], blocks,
                                                      q.format.emin,
                                                      (__nv_fp8_storage_t *)f.codes[i], f.flag);
  gtq_check(cudaGetLastError(), "FP8 codes (block-scaled operand)");
}

/* cuBLASLt's partial sums of slices s0 .. s0 + count - 1 of K into
 * f.part + (s - s0) stride_d: one strided-batched call, or one call per
 * slice where cuBLASLt has no batched plan or refuses it; false where it
 * refuses even that (the plan is then marked unusable). */
static bool block_partials(AccumFast &f, LtShape sh, int s0, int count, cudaStream_t st) {
  const float one = 1.0f, zero = 0.0f;
  const __nv_fp8_storage_t *ca = (const __nv_fp8_storage_t *)f.codes[0];
  const __nv_fp8_storage_t *cb = (const __nv_fp8_storage_t *)f.codes[1];
  const long off = (long)s0 * sh.k;
  if (count > 1) {
    sh.batch = count;
    LtPlan &p = lt_plan(f, sh);
    if (p.ok) {
      /* out of place, C not read (beta 0), as accum_fp8_gemm calls it */
      const cublasStatus_t r =
          cublasLtMatmul(f.lt, p.op, &one, cb + off, p.la, ca + off, p.lb, &zero, f.codes[0],
                         p.ld, f.part, p.ld, &p.algo, f.workspace, f.workspace_bytes, st);
      if (r == CUBLAS_STATUS_SUCCESS) return true;
      fprintf(stderr, "train: cublasLtMatmul (FP8, batch %d of %d x %d x %d) refused (%s): one "
              "call per slice for this shape\n", count, sh.m, sh.n, sh.k,
              cublasGetStatusString(r));
      p.ok = false;
    }
  }
  sh.batch = 1;
  LtPlan &p = lt_plan(f, sh);
  if (!p.ok) return false;
  for (int s = 0; s < count; s++) {
    const long o = off + (long)s * sh.k;
    const cublasStatus_t r =
        cublasLtMatmul(f.lt, p.op, &one, cb + o, p.la, ca + o, p.lb, &zero, f.codes[0], p.ld,
                       f.part + (long)s * sh.stride_d, p.ld, &p.algo, f.workspace,
                       f.workspace_bytes, st);
    if (r != CUBLAS_STATUS_SUCCESS) {
      fprintf(stderr, "train: cublasLtMatmul (FP8, %d x %d x %d) refused (%s): the emulation "
              "for this shape\n", sh.m, sh.n, sh.k, cublasGetStatusString(r));
      p.ok = false;
      return false;
    }
  }
  return true;
}

/* The plan of cuBLASLt's block-scaled FP8 GEMM for C (m x n, D's leading
 * dimension ldd, alignment align bytes) = op(A) op(B), op(A) 1 x 128-tiled
 * and op(B) 128 x 128-blocked (a_tiled) or the reverse, as block_partials
 * calls cuBLASLt (its A our op(B)^T, its B our op(A)^T, D n x m column-major
 * = C row-major), the scales at f.lt_scales: made on first use, with the
 * heuristic's first algorithm whose split-K is 1 (no other was calibrated);
 * ok = false where there is none. */
static BlockLtPlan &block_lt_plan(AccumFast &f, int m, int n, int k, bool e4m3_a, bool e4m3_b,
                                  bool a_tiled, long ldd, int align) {
  const BlockLtKey key(m, n, k, e4m3_a, e4m3_b, a_tiled, ldd, align);
  auto it = f.block_plans.find(key);
  if (it != f.block_plans.end()) return it->second;
  BlockLtPlan &p = f.block_plans[key];
  const cudaDataType ta = e4m3_a ? CUDA_R_8F_E4M3 : CUDA_R_8F_E5M2;
  const cudaDataType tb = e4m3_b ? CUDA_R_8F_E4M3 : CUDA_R_8F_E5M2;
  const uint32_t al = (uint32_t)align, al_ab = 256; /* the codes: cudaMalloc's */
  cublasLtMatmulPreference_t pref = nullptr;
  const bool log = getenv("EXMY_FP8_PLAN_LOG") != nullptr;
  if (exmy_blockscaled_desc_make(&p.d, tb, a_tiled, ta, !a_tiled, (uint64_t)k, (uint64_t)n,
                                 (uint64_t)m, ldd, f.lt_scales[1], f.lt_scales[0], 0) ||
      !lt_preference(&pref, f.workspace_bytes, al_ab, al)) {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (log)
      printf("fp8 block-scaled plan %d x %d x %d: descriptors refused: per slice\n", m, n, k);
    return p; /* not ok: the per-slice path */
  }
  cublasLtMatmulHeuristicResult_t heur[16] = {};
  int found = 0;
  if (cublasLtMatmulAlgoGetHeuristic(f.lt, p.d.op, p.d.la, p.d.lb, p.d.ld, p.d.ld, pref, 16,
                                     heur, &found) != CUBLAS_STATUS_SUCCESS)
    found = 0;
  cublasLtMatmulPreferenceDestroy(pref);
  for (int i = 0; i < found && !p.ok; i++) {
    AlgoConfig a;
    if (!algo_config(heur[i], &a)) continue;
    if (log) {
      printf("fp8 block-scaled plan %d x %d x %d (%s x %s, %s 1 x 128): candidate %d of %d: "
             "algo %d tile %u stages %u split-K %d workspace %zu\n", m, n, k,
             e4m3_a ? "E4M3" : "E5M2", e4m3_b ? "E4M3" : "E5M2", a_tiled ? "A" : "B", i, found,
             a.id, a.tile, a.stages, (int)a.splits, heur[i].workspaceSize);
    }
    if (a.splits != 1 || heur[i].workspaceSize > f.workspace_bytes) continue;
    p.algo = heur[i].algo;
    p.ok = true;
  }
  if (log)
    printf("fp8 block-scaled plan %d x %d x %d: %s\n", m, n, k,
           p.ok ? "one call" : "no algorithm with split-K 1: per slice");
  return p;
}

/* The end of a block-scaled GEMM whose result is in C (unless flagged):
 * where the device flagged it, the emulation on the same float32 codes and
 * scales overwrites C; the path counted. */
static void block_finish(AccumFast &f, size_t m, size_t n, int k, float alpha, float beta,
                         float *c, long ldc, const exmy_accum_model &model,
                         const exmy_cuda_operand_quant &qa, const exmy_cuda_operand_quant &qb,
                         const exmy_accum_scales &sa, const exmy_accum_scales &sb,
                         cudaStream_t st) {
  exmy_accum_model local = model; /* as exmy_cuda_qgemm_accum: the codes' formats' emins */
  local.emin_a = qa.format.emin;
  local.emin_b = qb.format.emin;
  /* a grid of at most 8192 blocks: when not flagged (the rule), each block
   * only reads the flag */
  const unsigned emu_grid = grid_for(m * n) < 8192u ? grid_for(m * n) : 8192u;
  k_block_emulate_if<<<emu_grid, 256, 0, st>>>(f.flag, local, m, n, k, alpha, f.codes32[0],
                                               f.codes32[1], beta, c, (size_t)ldc, sa, sb);
  k_accum_count<<<1, 1, 0, st>>>(f.flag, f.counts);
  gtq_check(cudaGetLastError(), "block-scaled FP8 GEMM epilogue");
  f.block_gemms++;
}

/* block_fp8_gemm's first choice: one operand 1 x 128-tiled and the other
 * 128 x 128-blocked (the forward and data-gradient GEMMs; not the weight
 * gradient's two tiled operands), at what the calibration covered (the
 * blocked operand E4M3, m and n multiples of 128): cuBLASLt's block-scaled
 * FP8 GEMM (blockscaled_lt.h) in one call, fast accumulation off, split-K
 * 1, alpha 1 and beta 0, its float32 result bit for bit the model's
 * (hypothesis M of blockscaled_lt_calibrate: acc = fmaf(fl(sa sb),
 * partial, acc) per 128-slice); straight into C where alpha is 1 and beta
 * 0, else into the result buffer and exmy_gemm_epilogue after, as
 * k_block_promote applies it.  The operands, the device flag and the
 * emulation where flagged as on the per-slice path.  False, C untouched,
 * where it does not apply or cuBLASLt refuses (the per-slice path then). */
static bool block_lt_gemm(gtq_ctx *g, bool ta, bool tb, int m, int n, int k, float alpha,
                          const gtq_operand &a, const exmy_cuda_operand_quant &qa, Fp8Kind ka,
                          const gtq_operand &b, const exmy_cuda_operand_quant &qb, Fp8Kind kb,
                          float beta, float *c, long ldc, const exmy_accum_model &model) {
  AccumFast &f = g->accum;
  const int bra = qa.scaling.block_rows > 1 ? qa.scaling.block_rows : 1;
  const int brb = qb.scaling.block_rows > 1 ? qb.scaling.block_rows : 1;
  const bool a_tiled = bra == 1 && brb == 128, b_tiled = bra == 128 && brb == 1;
  if (f.block_batched || model.promote_every != 128 || !(a_tiled || b_tiled)) return false;
  if ((a_tiled ? kb : ka) != kFp8E4M3 || m % 128 || n % 128) return false;
  cudaStream_t st = g->stream;
  const size_t M = (size_t)m, N = (size_t)n, K = (size_t)k, kbl = K / 128;
  const bool direct = alpha == 1.0f && beta == 0.0f;
  if (!direct) reserve((void **)&f.result, &f.result_cap, M * N * sizeof(float));
  float *d = direct ? c : f.result;
  const long ldd = direct ? ldc : n;
  int align = 256; /* of D and of each of its columns (C's rows) */
  while (align > 4 && ((uintptr_t)d % align || (size_t)ldd * sizeof(float) % align)) align /= 2;
  const size_t rows[2] = {M, N};
  const bool blk[2] = {b_tiled, a_tiled};
  for (int i = 0; i < 2; i++)
    reserve((void **)&f.lt_scales[i], &f.lt_scales_cap[i],
            exmy_blockscaled_count(blk[i], rows[i], K) * sizeof(float));
  BlockLtPlan &p = block_lt_plan(f, m, n, k, ka == kFp8E4M3, kb == kFp8E4M3, a_tiled, ldd, align);
  if (!p.ok) return false;
  gtq_check(cudaMemsetAsync(f.flag, 0, sizeof(int), st), "FP8 flag");
  exmy_accum_scales sa, sb;
  /* op(A) as m x k and op(B)^T as n x k, K contiguous */
  block_operand(f, 0, qa, ka, (const float *)a.ptr, a.ld, ta, M, K, &sa, st);
  block_operand(f, 1, qb, kb, (const float *)b.ptr, b.ld, !tb, N, K, &sb, st);
  for (int i = 0; i < 2; i++) {
    if (blk[i])
      gtq_check(cudaMemsetAsync(f.lt_scales[i], 0,
                                exmy_blockscaled_count(1, rows[i], K) * sizeof(float), st),
                "block scales' padding");
    const size_t units = blk[i] ? (rows[i] + 127) / 128 : rows[i];
    k_block_lt_scales<<<grid_for(units * kbl), 256, 0, st>>>(f.bscales[i], rows[i], kbl, blk[i],
                                                             f.lt_scales[i]);
    gtq_check(cudaGetLastError(), "block scales for cuBLASLt");
  }
  /* cuBLASLt's A is op(B)^T, its B op(A)^T; C and D the same (as the
   * calibration called it; C not read with beta 0) */
  const float one = 1.0f, zero = 0.0f;
  cublasStatus_t r = exmy_blockscaled_set_scales(&p.d, f.lt_scales[1], f.lt_scales[0]);
  if (r == CUBLAS_STATUS_SUCCESS)
    r = cublasLtMatmul(f.lt, p.d.op, &one, f.codes[1], p.d.la, f.codes[0], p.d.lb, &zero, d,
                       p.d.ld, d, p.d.ld, &p.algo, f.workspace, f.workspace_bytes, st);
  if (r != CUBLAS_STATUS_SUCCESS) {
    fprintf(stderr, "train: cublasLtMatmul (block-scaled FP8, %d x %d x %d) refused (%s): per "
            "slice for this shape\n", m, n, k, cublasGetStatusString(r));
    p.ok = false;
    return false;
  }
  if (!direct)
    k_accum_epilogue<<<grid_for(M * N), 256, 0, st>>>(f.flag, f.result, M, N, alpha, beta, c,
                                                      (size_t)ldc);
  block_finish(f, M, N, k, alpha, beta, c, ldc, model, qa, qb, sa, sb, st);
  f.block_one_call++;
  return true;
}

/* C = alpha op(A) op(B) + beta C for two block-scaled FP8 operands under
 * hopper-split (see above), bit for bit the emulation's; false, with C
 * untouched, where this GEMM cannot take the path (the caller then runs
 * exmy_cuda_qgemm_accum with the same qa, qb).  qa, qb: the operands'
 * recipes with their sr offsets (mx_operand). */
static bool block_fp8_gemm(gtq_ctx *g, bool ta, bool tb, int m, int n, int k, float alpha,
                           const gtq_operand &a, const exmy_cuda_operand_quant &qa,
                           const gtq_operand &b, const exmy_cuda_operand_quant &qb, float beta,
                           float *c, long ldc, const exmy_accum_model &model) {
  AccumFast &f = g->accum;
  if (f.emulate || !a.mx || !b.mx || m <= 0 || n <= 0 || k <= 0 || ldc < n) return false;
  if (!same_accum(model, f.split)) return false;
  const int slice = model.promote_every;
  if (k % slice || slice % kFp8KMultiple) return false;
  if (!exmy_accum_block_scaling(&qa.scaling, &model) ||
      !exmy_accum_block_scaling(&qb.scaling, &model))
    return false;
  const Fp8Kind ka = fp8_kind(qa.format), kb = fp8_kind(qb.format);
  if (ka == kNotFp8 || kb == kNotFp8 || (ka == kFp8E5M2 && kb == kFp8E5M2)) return false;
  cudaStream_t st = g->stream;
  if (!accum_init(f, st)) return false;
  if (block_lt_gemm(g, ta, tb, m, n, k, alpha, a, qa, ka, b, qb, kb, beta, c, ldc, model))
    return true;
  const int slices = k / slice;
  /* partial[s]: rows of ldd floats (16-byte aligned), each slice 256-byte aligned */
  const long ldd = ((long)n + 3) / 4 * 4;
  const long stride_d = ((long)m * ldd + 63) / 64 * 64;
  const size_t per_slice = (size_t)stride_d * sizeof(float);
  int chunk = (int)(kBlockPartialBytes / per_slice);
  if (chunk < 1) chunk = 1;
  if (chunk > slices) chunk = slices;
  /* A's and B's slices start every `slice` codes: 128 bytes apart */
  const int align_ab = (slice & -slice) < 256 ? (slice & -slice) : 256;
  const LtShape sh{m, n, slice, ka == kFp8E4M3, kb == kFp8E4M3, true, ldd, 256, k, 1, stride_d,
                   true, align_ab};
  if (!lt_plan(f, sh).ok) return false; /* the per-slice plan, every chunk's last resort */
  const size_t M = (size_t)m, N = (size_t)n, K = (size_t)k;
  reserve((void **)&f.part, &f.part_cap, per_slice * chunk);
  if (chunk < slices) reserve((void **)&f.acc, &f.acc_cap, M * N * sizeof(float));
  gtq_check(cudaMemsetAsync(f.flag, 0, sizeof(int), st), "FP8 flag");
  exmy_accum_scales sa, sb;
  /* op(A) as m x k and op(B)^T as n x k, K contiguous */
  block_operand(f, 0, qa, ka, (const float *)a.ptr, a.ld, ta, M, K, &sa, st);
  block_operand(f, 1, qb, kb, (const float *)b.ptr, b.ld, !tb, N, K, &sb, st);
  for (int s0 = 0; s0 < slices; s0 += chunk) {
    const int count = slices - s0 < chunk ? slices - s0 : chunk;
    if (!block_partials(f, sh, s0, count, st)) return false; /* C not written yet */
    k_block_promote<<<grid_for(M * N), 256, 0, st>>>(f.flag, f.part, stride_d, ldd, count, s0,
                                                     M, N, sa, sb, f.acc, s0 == 0,
                                                     s0 + count == slices, alpha, beta, c,
                                                     (size_t)ldc);
    gtq_check(cudaGetLastError(), "block promotions");
  }
  block_finish(f, M, N, k, alpha, beta, c, ldc, model, qa, qb, sa, sb, st);
  return true;
}

extern "C" void gtq_set_accum_emulation(gtq_ctx *g, bool on) { g->accum.emulate = on; }

extern "C" void gtq_accum_paths(gtq_ctx *g, unsigned long long *fast,
                                unsigned long long *emulated) {
  gtq_accum_path_counts c;
  gtq_accum_counts(g, &c);
  if (fast) *fast = c.fast;
  if (emulated) *emulated = c.ineligible + c.scales_out_of_range + c.not_codes;
}

extern "C" void gtq_accum_counts(gtq_ctx *g, gtq_accum_path_counts *c) {
  unsigned long long d[kAccumCounts] = {};
  if (g->accum.counts) {
    gtq_check(cudaMemcpyAsync(d, g->accum.counts, sizeof d, cudaMemcpyDeviceToHost, g->stream),
              "accumulation paths");
    gtq_check(cudaStreamSynchronize(g->stream), "accumulation paths");
  }
  c->fast = d[kCountFast];
  c->ineligible = g->accum.emulated;
  c->scales_out_of_range = d[kCountScalesOutOfRange];
  c->not_codes = d[kCountNotCodes];
  c->block_scaled = g->accum.block_gemms;
  c->block_one_call = g->accum.block_one_call;
}

extern "C" void gtq_set_block_batched(gtq_ctx *g, bool on) { g->accum.block_batched = on; }

extern "C" void gtq_gemm(gtq_ctx *g, bool ta, bool tb, int m, int n, int k, float alpha,
                         gtq_operand a, gtq_operand b, float beta, float *c, long ldc) {
  exmy_accum_model accum;
  const float *sa = nullptr, *sb = nullptr;
  const exmy_accum_model *model = accum_of(g, a, b, &accum, &sa, &sb);
  if (model || a.mx || b.mx) {
    /* operands quantized along K are quantized here, at every use; under an
     * accumulation model the others are float32 (the site is off the BF16 path) */
    exmy_cuda_operand_quant qa = mx_operand(g, a.mx, (size_t)m * k);
    exmy_cuda_operand_quant qb = mx_operand(g, b.mx, (size_t)k * n);
    if (g->collect && a.mx) along_k_stats(g, a, qa, ta, m, k);  /* op(A) as m x k */
    if (g->collect && b.mx) along_k_stats(g, b, qb, !tb, n, k); /* op(B)^T as n x k */
    if (model) {
      if (accum_fp8_gemm(g, ta, tb, m, n, k, alpha, a, b, beta, c, ldc, *model, sa, sb)) return;
      if (block_fp8_gemm(g, ta, tb, m, n, k, alpha, a, qa, b, qb, beta, c, ldc, *model)) return;
      g->accum.emulated++;
      gtq_check(exmy_cuda_qgemm_accum_scaled(g->mx, ta, tb, m, n, k, alpha, (const float *)a.ptr,
                                             a.ld, a.mx ? &qa : nullptr, sa, (const float *)b.ptr,
                                             b.ld, b.mx ? &qb : nullptr, sb, beta, c, ldc,
                                             nullptr, model, g->stream),
                "exmy_cuda_qgemm_accum");
    } else if (mx_bf16_candidate(g, a, qa, b, qb, m, n, k)) {
      mx_gemm_bf16(g, ta, tb, m, n, k, alpha, a, qa, b, qb, beta, c, ldc);
      g->mx_img.paths.mx_images++;
    } else if (nvfp4_bf16_candidate(g, a, qa, b, qb, m, n, k)) {
      nvfp4_gemm_bf16(g, ta, tb, m, n, k, alpha, a, qa, b, qb, beta, c, ldc);
      g->mx_img.paths.nvfp4_images++;
    } else { /* the reference: gathered, quantized and checked by exmy_cuda_qgemm */
      gtq_check(exmy_cuda_qgemm(g->mx, ta, tb, m, n, k, alpha, (const float *)a.ptr, a.ld,
                                a.mx ? &qa : nullptr, (const float *)b.ptr, b.ld,
                                b.mx ? &qb : nullptr, beta, c, ldc, nullptr, nullptr, g->stream),
                "exmy_cuda_qgemm (MX)");
      g->mx_img.paths.reference++;
    }
    return;
  }
  if (a.bf16 != b.bf16) gtq_check(cudaErrorInvalidValue, "gemm (mixed operand types)");
  const cudaDataType t = a.bf16 ? CUDA_R_16BF : CUDA_R_32F;
  /* float32 operands: pedantic, never TF32 (emulation needs the inputs as given) */
  const cublasComputeType_t ct = a.bf16 ? CUBLAS_COMPUTE_32F : CUBLAS_COMPUTE_32F_PEDANTIC;
  const GemmScalars ab(g, alpha, beta, a, b);
  row_major_gemm_ex(g, ta, tb, m, n, k, ab.alpha, a, b, t, ab.beta, c, CUDA_R_32F, ldc, ct,
                    "cublasGemmEx");
}

extern "C" bool gtq_bf16_out_serves(const gtq_ctx *g, gtq_operand a, gtq_operand b) {
  exmy_accum_model accum;
  const float *sa = nullptr, *sb = nullptr;
  return a.bf16 && b.bf16 && !a.mx && !b.mx && !a.qscale && !b.qscale &&
         !accum_of(g, a, b, &accum, &sa, &sb);
}

extern "C" void gtq_gemm_bf16_out(gtq_ctx *g, bool ta, bool tb, int m, int n, int k,
                                  gtq_operand a, gtq_operand b, void *c, long ldc) {
  if (!gtq_bf16_out_serves(g, a, b))
    gtq_check(cudaErrorInvalidValue, "gemm into bf16 (operands not bf16 images)");
  const float one = 1.0f, zero = 0.0f;
  const GemmScalars ab(g, one, zero, a, b); /* gtq_gemm's alpha for these scales */
  row_major_gemm_ex(g, ta, tb, m, n, k, ab.alpha, a, b, CUDA_R_16BF, ab.beta, c, CUDA_R_16BF,
                    ldc, CUBLAS_COMPUTE_32F, "cublasGemmEx (bf16 out)");
}

extern "C" void gtq_gemm_batched(gtq_ctx *g, bool ta, bool tb, int m, int n, int k, float alpha,
                                 gtq_operand a, gtq_stride sa, gtq_operand b, gtq_stride sb,
                                 float beta, float *c, long ldc, gtq_stride sc, int nb, int nh) {
  if (a.mx || b.mx) gtq_check(cudaErrorNotSupported, "MX-quantized attention products on the GPU");
  exmy_accum_model accum;
  const float *ea = nullptr, *eb = nullptr; /* the scales the emins follow */
  if (const exmy_accum_model *model = accum_of(g, a, b, &accum, &ea, &eb)) {
    /* one GEMM per matrix, in the CPU's (batch, head) order: cuBLASLt's FP8
     * GEMM where it computes the model, else exmy_cuda_qgemm_accum */
    const size_t e = sizeof(float);
    for (int bi = 0; bi < nb; bi++)
      for (int h = 0; h < nh; h++) {
        gtq_operand am = a, bm = b;
        am.ptr = (const char *)a.ptr + (bi * sa.sb + (h / sa.div) * sa.sh) * e;
        bm.ptr = (const char *)b.ptr + (bi * sb.sb + (h / sb.div) * sb.sh) * e;
        if (accum_fp8_gemm(g, ta, tb, m, n, k, alpha, am, bm, beta, c + bi * sc.sb + h * sc.sh,
                           ldc, *model, ea, eb))
          continue;
        g->accum.emulated++;
        gtq_check(exmy_cuda_qgemm_accum_scaled(
                      g->mx, ta, tb, m, n, k, alpha,
                      (const float *)((const char *)a.ptr + (bi * sa.sb + (h / sa.div) * sa.sh) * e),
                      a.ld, nullptr, ea,
                      (const float *)((const char *)b.ptr + (bi * sb.sb + (h / sb.div) * sb.sh) * e),
                      b.ld, nullptr, eb, beta, c + bi * sc.sb + h * sc.sh, ldc, nullptr, model,
                      g->stream),
                  "exmy_cuda_qgemm_accum (batched)");
      }
    return;
  }
  if (a.bf16 != b.bf16) gtq_check(cudaErrorInvalidValue, "batched gemm (mixed operand types)");
  const int batch = nb * nh;
  reserve((void **)&g->ptrs, &g->ptrs_cap, sizeof(void *) * 3 * (size_t)batch);
  const void **pa_arr = (const void **)g->ptrs, **pb_arr = pa_arr + batch;
  void **pc_arr = g->ptrs + 2 * batch;
  const size_t e = a.bf16 ? 2 : 4;
  k_batch_pointers<<<(batch + 127) / 128, 128, 0, g->stream>>>(
      (const char *)a.ptr, sa.sb, sa.sh, sa.div, (const char *)b.ptr, sb.sb, sb.sh, sb.div,
      (char *)c, sc.sb, sc.sh, nb, nh, e, e, pa_arr, pb_arr, pc_arr);
  gtq_check(cudaGetLastError(), "batch pointers");
  const cudaDataType t = a.bf16 ? CUDA_R_16BF : CUDA_R_32F;
  const cublasComputeType_t ct = a.bf16 ? CUBLAS_COMPUTE_32F : CUBLAS_COMPUTE_32F_PEDANTIC;
  const GemmScalars ab(g, alpha, beta, a, b);
  blas_check(cublasGemmBatchedEx(g->blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                                 ta ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, ab.alpha, pb_arr, t,
                                 (int)b.ld, pa_arr, t, (int)a.ld, ab.beta, (void *const *)pc_arr,
                                 CUDA_R_32F, (int)ldc, batch, ct, CUBLAS_GEMM_DEFAULT),
             "cublasGemmBatchedEx");
}

extern "C" void gtq_slot_download(gtq_ctx *g, int site, int slot, float *out, size_t n) {
  const Site &s = g->sites[site];
  const Slot &sl = s.slot[slot];
  gtq_check(cudaStreamSynchronize(g->stream), "sync");
  if (!s.bf16) {
    gtq_check(cudaMemcpy(out, sl.data, n * sizeof(float), cudaMemcpyDeviceToHost), "slot");
    return;
  }
  uint16_t *b = (uint16_t *)malloc(n * sizeof(uint16_t));
  gtq_check(cudaMemcpy(b, sl.data, n * sizeof(uint16_t), cudaMemcpyDeviceToHost), "slot");
  float inv = 1.0f;
  if (sl.scaled) {
    float sc;
    gtq_check(cudaMemcpy(&sc, sl.scale, sizeof sc, cudaMemcpyDeviceToHost), "slot scale");
    inv = 1.0f / sc;
  }
  for (size_t i = 0; i < n; i++) {
    uint32_t bits = (uint32_t)b[i] << 16;
    float v;
    memcpy(&v, &bits, sizeof v);
    out[i] = sl.scaled ? v * inv : v;
  }
  free(b);
}
