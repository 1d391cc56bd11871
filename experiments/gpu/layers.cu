/*
 * The GPU twins of model.c's non-matmul layers and of optim.c's update (see
 * layers.h).
 *
 * Float arithmetic: the CPU build (-march=x86-64-v2) has no FMA, so each
 * a * b + c there rounds twice.  nvcc would contract such expressions into
 * fused multiply-adds; the elementwise formulas below therefore spell their
 * operations with the _rn intrinsics, which are never contracted, in the CPU's
 * order.  Where the CPU goes through double (exp, 1/sqrt, the loss sums) so do
 * these kernels.  What still differs from the CPU is only the order of the
 * row and column sums (a warp or a block tree here, a serial loop there).
 *
 * Determinism: no atomics.  Every sum has a shape fixed by the problem size
 * alone (lane strides of 32, blocks of a compile-time size, row chunks of
 * DW_ROWS, SUMSQ_BLOCKS partials), so a launch on any GPU, repeated, gives the
 * same bits.
 */
#include "experiments/gpu/layers.h"
#include "cuda/elementwise.cuh"
#include "cuda/group_dre.cuh"
#include "experiments/trainer/act_bf16_core.h"
#include "experiments/trainer/logit_sharpness.h"
#include "lib/scale_core.h"

#include <cuda_bf16.h>
#include <algorithm>
#include <initializer_list>
#include <type_traits>
#include <stdint.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

namespace {

constexpr int kThreads = 256;        /* elementwise kernels */
constexpr int kWarpsPerBlock = 8;    /* warp-per-row kernels: 256 threads */
constexpr unsigned kFull = 0xffffffffu;
/* the kernels that fold their output's amax: blocks of kThreads threads */
static_assert(32 * kWarpsPerBlock == kThreads && kThreads == exmy_cuda::kThreads,
              "one block size");

/* Every thread's finite max |output| m into *amax (device word; NULL: none
 * wanted), as an amax pass over the output would leave it (see layers.h).
 * Every thread of the block calls it. */
__device__ __forceinline__ void fold_output_amax(float m, unsigned int *amax) {
  if (amax) block_amax_fold<kThreads>(m, amax);
}

/* Blocks for a grid-stride loop over n elements (any cap is correct; this one
 * fills an H100 many times over; cuda/gather.cuh's grid_for, for the GEMM
 * operands, caps higher). */
unsigned elementwise_grid(size_t n) {
  size_t b = (n + kThreads - 1) / kThreads;
  if (b > 32768) b = 32768;
  return (unsigned)(b ? b : 1);
}

/* Blocks along x for a kernel with a row of blocks per matrix (blockIdx.y),
 * each row a grid-stride over `items` per matrix: a few thousand blocks in
 * all fill the GPU, and the fewer blocks a row, the fewer atomics on its
 * amax word (block_amax_fold: one per block). */
unsigned matrix_row_grid(size_t items, size_t matrices) {
  const unsigned x = elementwise_grid(items),
                 cap = (unsigned)(4096 / matrices > 0 ? 4096 / matrices : 1);
  return x < cap ? x : cap;
}

/* Blocks for a block-per-row kernel (grid-stride over rows beyond the cap). */
unsigned block_per_row_grid(long rows) {
  return (unsigned)(rows < 65536 ? (rows > 0 ? rows : 1) : 65536);
}

/* Blocks for a warp-per-row kernel. */
unsigned warp_per_row_grid(long rows) {
  return (unsigned)((rows + kWarpsPerBlock - 1) / kWarpsPerBlock);
}

__device__ __forceinline__ size_t global_index() {
  return (size_t)blockIdx.x * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ size_t global_stride() { return (size_t)gridDim.x * blockDim.x; }

/* Butterfly sums: lane and partner add the same two values (addition
 * commutes), so every lane ends with the same bits. */
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = __fadd_rn(v, __shfl_xor_sync(kFull, v, o));
  return v;
}
__device__ __forceinline__ double warp_sum(double v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = __dadd_rn(v, __shfl_xor_sync(kFull, v, o));
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(kFull, v, o));
  return v;
}
__device__ __forceinline__ double warp_max(double v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmax(v, __shfl_xor_sync(kFull, v, o));
  return v;
}

/* Sum over a block of NT threads (power of two), in a fixed tree. */
template <int NT>
__device__ double block_sum(double v) {
  __shared__ double sh[NT];
  sh[threadIdx.x] = v;
  __syncthreads();
#pragma unroll
  for (int s = NT / 2; s > 0; s >>= 1) {
    if ((int)threadIdx.x < s) sh[threadIdx.x] = __dadd_rn(sh[threadIdx.x], sh[threadIdx.x + s]);
    __syncthreads();
  }
  return sh[0];
}

/* The CPU's sigmoid: (real)(1.0 / (1.0 + exp(-(double)a))), act_bf16_core.h's text. */
__device__ __forceinline__ float sigmoid_as_cpu(float a) { return silu_sigmoid(a); }

/* A device buffer kept between calls, grown on demand (cudaFree synchronizes
 * the device, so a growth never frees memory a queued kernel still reads). */
uint64_t scratch_epoch = 0; /* reallocations of cached_scratch (gpu_layers_scratch_epoch) */

void *cached_scratch(void **buf, size_t *cap, size_t bytes) {
  if (bytes > *cap) {
    scratch_epoch++;
    if (*buf) cudaFree(*buf);
    *buf = NULL;
    *cap = 0;
    cudaError_t e = cudaMalloc(buf, bytes);
    if (e != cudaSuccess) {
      fprintf(stderr, "experiments/gpu/layers: cudaMalloc(%zu): %s\n", bytes,
              cudaGetErrorString(e));
      abort();
    }
    *cap = bytes;
  }
  return *buf;
}

/* ------------------------------------------------------------- encoder */

/* A block per row (grid-stride over rows): no 64-bit division per element. */
__global__ void encoder_forward_kernel(float *out, const int *tokens, const float *wte, int N,
                                       int C) {
  for (int i = blockIdx.x; i < N; i += gridDim.x) {
    const float *src = wte + (size_t)tokens[i] * C;
    float *dst = out + (size_t)i * C;
    for (int c = threadIdx.x; c < C; c += blockDim.x) dst[c] = src[c];
  }
}

/* Thread (v, c) adds the bucket's rows in increasing position: the CPU's
 * order of additions into dwte[v][c], so the result is bit-identical. */
__global__ void encoder_backward_kernel(float *dwte, const float *dout, const int *bucket_start,
                                        const int *bucket_pos, int V, int C) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  for (int v = blockIdx.y; v < V; v += gridDim.y) {
    const int k0 = bucket_start[v], k1 = bucket_start[v + 1];
    if (k0 == k1) continue;
    float acc = dwte[(size_t)v * C + c];
#pragma unroll 8
    for (int k = k0; k < k1; k++) acc = __fadd_rn(acc, dout[(size_t)bucket_pos[k] * C + c]);
    dwte[(size_t)v * C + c] = acc;
  }
}

/* ------------------------------------------------------------- RMSNorm */

constexpr double kRmsEps = 1e-5; /* model.c's RMS_EPS */

/* The warp-per-row kernels' walk over a row: lane's elements c = lane +
 * 32 j in increasing j.  J > 0 (rows of C <= 32 J): unrolled, so that a
 * warp issues every load of the row at once and may keep the row's values
 * in registers (row_load); J = 0: a loop, for any C.  The same elements in
 * the same order either way, so the same sums and bits. */
template <int J, class F>
__device__ __forceinline__ void row_each(int lane, int C, F f) {
  if constexpr (J > 0) {
#pragma unroll
    for (int j = 0; j < J; j++)
      if (lane + 32 * j < C) f(j, lane + 32 * j);
  } else {
    for (int c = lane, j = 0; c < C; c += 32, j++) f(j, c);
  }
}
/* A row's values of x for row_each: held in registers for J > 0
 * (v[j] = x[c]), else read at each use.  add (NULL: none): the row becomes
 * x + add first, written back to x. */
template <int J>
struct RowValues {
  float v[J > 0 ? J : 1];
  const float *x;
  __device__ __forceinline__ RowValues(const float *row, int lane, int C,
                                       const float *add = nullptr)
      : x(row) {
    if (add) {
      float *y = const_cast<float *>(row);
      row_each<J>(lane, C, [&](int j, int c) {
        const float t = __fadd_rn(row[c], add[c]);
        y[c] = t;
        if constexpr (J > 0) v[j] = t;
      });
    } else if constexpr (J > 0) {
      row_each<J>(lane, C, [&](int j, int c) { v[j] = row[c]; });
    }
  }
  __device__ __forceinline__ float operator()(int j, int c) const {
    if constexpr (J > 0)
      return v[j];
    else
      return x[c];
  }
};

/* One warp per row; out's amax folded into *amax (NULL: not wanted).  add:
 * the residual add before it, inp = inp + add (gpu_add_inplace's sums, in
 * place) in the same pass. */
template <int J>
__global__ void rmsnorm_forward_kernel(float *out, float *rstd, float *inp, const float *add,
                                       const float *w, int N, int C, unsigned int *amax) {
  const int lane = threadIdx.x & 31;
  const long row = (long)blockIdx.x * kWarpsPerBlock + threadIdx.x / 32;
  float m = 0.0f;
  if (row < N) {
    const RowValues<J> x(inp + (size_t)row * C, lane, C, add ? add + (size_t)row * C : nullptr);
    float *y = out + (size_t)row * C;
    float ss = 0;
    row_each<J>(lane, C, [&](int j, int c) { ss = __fadd_rn(ss, __fmul_rn(x(j, c), x(j, c))); });
    ss = warp_sum(ss);
    const float r = (float)(1.0 / sqrt((double)__fdiv_rn(ss, (float)C) + kRmsEps));
    row_each<J>(lane, C, [&](int j, int c) {
      const float v = __fmul_rn(__fmul_rn(x(j, c), r), w[c]);
      y[c] = v;
      fold_finite_amax(v, m);
    });
    if (lane == 0) rstd[row] = r;
  }
  fold_output_amax(m, amax);
}

/* The same RMSNorm written straight into its bf16 GEMM operand image (format
 * ID, mode MODE, scale and amax as quantize8_bf16 takes them), and into the
 * float32 out too where out_f32 is not NULL.  A warp's row staged in shared
 * memory by 16-byte loads (with add, as above: the sums written back); its
 * sum of squares over c = lane + 32 j as rmsnorm_forward_kernel's, so the
 * same r and values, which replace x in shared memory; then 8 consecutive
 * elements a lane, the fill pass's groups (C % 8 == 0, so none crosses a
 * row): the same image, sr stream indices and amax as the float32 tensor
 * and the fill.  Dynamic shared memory: kWarpsPerBlock rows of C floats. */
/* The staged RMSNorm kernels' warp: its row, its lane and the row's place
 * in dynamic shared memory (kWarpsPerBlock rows of C floats). */
struct StagedRow {
  long row;
  int lane;
  float *xs;
};
__device__ __forceinline__ StagedRow staged_row(float *rows, int C) {
  const int wid = threadIdx.x / 32;
  return {(long)blockIdx.x * kWarpsPerBlock + wid, (int)(threadIdx.x & 31),
          rows + (size_t)wid * C};
}

/* A warp's row staged in shared memory xs (C floats) by 16-byte loads, after
 * the residual add where there is one (add: inp + add written back to inp;
 * add_bf16: inp + add_bf16 widened, written to sum); returns the row's r,
 * from its sum of squares over c = lane + 32 j as rmsnorm_forward_kernel's,
 * so the same r. */
__device__ __forceinline__ float stage_row(float *xs, float *inp, const float *__restrict__ add,
                                           const uint16_t *__restrict__ add_bf16, float *sum,
                                           long row, int C, int lane) {
  {
    float4 *x4 = reinterpret_cast<float4 *>(inp + (size_t)row * C);
    float4 *s4 = reinterpret_cast<float4 *>((sum ? sum : inp) + (size_t)row * C);
    const float4 *a4 = add ? reinterpret_cast<const float4 *>(add + (size_t)row * C) : nullptr;
    const uint2 *b4 = add_bf16 ? reinterpret_cast<const uint2 *>(add_bf16 + (size_t)row * C)
                               : nullptr;
    for (int k = lane; k < C / 4; k += 32) {
      float4 v = x4[k];
      if (a4 || b4) {
        float4 b;
        if (a4) {
          b = a4[k];
        } else { /* 4 bf16 values, widened */
          const uint2 u = b4[k];
          b = make_float4(__uint_as_float(u.x << 16), __uint_as_float(u.x & 0xFFFF0000u),
                          __uint_as_float(u.y << 16), __uint_as_float(u.y & 0xFFFF0000u));
        }
        v = make_float4(__fadd_rn(v.x, b.x), __fadd_rn(v.y, b.y), __fadd_rn(v.z, b.z),
                        __fadd_rn(v.w, b.w));
        s4[k] = v;
      }
      reinterpret_cast<float4 *>(xs)[k] = v;
    }
  }
  __syncwarp();
  float ss = 0;
  for (int c = lane; c < C; c += 32) ss = __fadd_rn(ss, __fmul_rn(xs[c], xs[c]));
  ss = warp_sum(ss);
  return (float)(1.0 / sqrt((double)__fdiv_rn(ss, (float)C) + kRmsEps));
}

template <int ID, int MODE>
__global__ void __launch_bounds__(kThreads)
    rmsnorm_forward_bf16_kernel(const __grid_constant__ exmy_format rt,
                                const __grid_constant__ KOpts o, uint16_t *__restrict__ out,
                                float *__restrict__ out_f32, float *__restrict__ rstd,
                                float *inp, const float *__restrict__ add,
                                const uint16_t *__restrict__ add_bf16, float *sum,
                                const float *__restrict__ w, int N, int C, int vec,
                                const float *si, const exmy_cuda_amax_scale cs,
                                unsigned int *amax_bits) {
  using namespace exmy_cuda;
  extern __shared__ __align__(16) float rows[];
  __shared__ float pair[2];
  const auto &f = kernel_format<ID>(rt);
  const auto [row, lane, xs] = staged_row(rows, C);
  float m = 0.0f;
  const float r = row < N ? stage_row(xs, inp, add, add_bf16, sum, row, C, lane) : 0.0f;
  si = block_scale_pair(si, cs, pair);
  if (row < N) {
    for (int c = lane; c < C; c += 32) {
      const float v = __fmul_rn(__fmul_rn(xs[c], r), w[c]);
      xs[c] = v;
      if (out_f32) out_f32[(size_t)row * C + c] = v;
    }
    __syncwarp();
    const size_t n = (size_t)N * C;
    for (int k = lane; k < C / kPer; k += 32) {
      const float4 p = reinterpret_cast<const float4 *>(xs)[2 * k],
                   q = reinterpret_cast<const float4 *>(xs)[2 * k + 1];
      float v[kPer] = {p.x, p.y, p.z, p.w, q.x, q.y, q.z, q.w};
      const size_t base = (size_t)row * C + (size_t)kPer * k;
      uint32_t code[kPer];
      quantize8_bf16<ID, MODE>(f, o, base, n, v, si, m, code);
      store8<uint16_t>(out, base, n, vec != 0, code);
    }
    if (lane == 0) rstd[row] = r;
  }
  fold_output_amax(m, amax_bits);
}

/* Its first pass under current scaling: the same staging, r and values,
 * whose finite amax is folded into *amax_bits; rstd written, no output. */
__global__ void __launch_bounds__(kThreads)
    rmsnorm_forward_amax_kernel(float *__restrict__ rstd, float *inp,
                                const float *__restrict__ add,
                                const uint16_t *__restrict__ add_bf16, float *sum,
                                const float *__restrict__ w, int N, int C,
                                unsigned int *amax_bits) {
  extern __shared__ __align__(16) float rows[];
  const auto [row, lane, xs] = staged_row(rows, C);
  float m = 0.0f;
  if (row < N) {
    const float r = stage_row(xs, inp, add, add_bf16, sum, row, C, lane);
    for (int c = lane; c < C; c += 32) fold_finite_amax(__fmul_rn(__fmul_rn(xs[c], r), w[c]), m);
    if (lane == 0) rstd[row] = r;
  }
  fold_output_amax(m, amax_bits);
}

/* The widest row rmsnorm_forward_bf16_kernel stages: 8 rows of 1024 floats,
 * 32 KiB of the 48 a launch has without opting in. */
constexpr int kRmsnormBf16MaxC = 1024;
static_assert(sizeof(float) * kWarpsPerBlock * kRmsnormBf16MaxC <= 48 * 1024,
              "rmsnorm_forward_bf16_kernel's staged rows need no shared memory opt-in");

/* dx += r (dy w - x k), k = r^2 mean(dy w x), for one row (one warp); the
 * values written folded into m, and written rounded to bf16 (rne: the bits
 * of the unscaled bf16 fill's pass over dx) into img where it is not NULL.
 * dx is read with x and dy, before the sum that the second pass waits for. */
template <int J>
__device__ __forceinline__ void rmsnorm_dinp_row(float *dx, const RowValues<J> &x,
                                                 const RowValues<J> &dy, const float *w, float r,
                                                 int lane, int C, float &m,
                                                 __nv_bfloat16 *img) {
  const RowValues<J> dx0(dx, lane, C);
  float dot = 0;
  row_each<J>(lane, C, [&](int j, int c) {
    dot = __fadd_rn(dot, __fmul_rn(__fmul_rn(dy(j, c), w[c]), x(j, c)));
  });
  dot = warp_sum(dot);
  const float k = __fdiv_rn(__fmul_rn(__fmul_rn(r, r), dot), (float)C);
  row_each<J>(lane, C, [&](int j, int c) {
    const float v = __fadd_rn(
        dx0(j, c), __fmul_rn(r, __fsub_rn(__fmul_rn(dy(j, c), w[c]), __fmul_rn(x(j, c), k))));
    dx[c] = v;
    if (img) { /* the amax of the image's values: what its fills round */
      const __nv_bfloat16 b = __float2bfloat16_rn(v);
      img[c] = b;
      fold_finite_amax(__bfloat162float(b), m);
    } else {
      fold_finite_amax(v, m);
    }
  });
}

/* dinp (rmsnorm_dinp_row) one warp per row, rows read from memory at each
 * pass (any C; rows held in registers take rmsnorm_backward_fused_kernel);
 * the amax of dinp after the addition folded into *amax (NULL: not wanted). */
__global__ void rmsnorm_backward_dinp_kernel(float *dinp, __nv_bfloat16 *img, const float *dout,
                                             const float *inp, const float *w, const float *rstd,
                                             int N, int C, unsigned int *amax) {
  const int lane = threadIdx.x & 31;
  const long row = (long)blockIdx.x * kWarpsPerBlock + threadIdx.x / 32;
  float m = 0.0f;
  if (row < N) {
    const RowValues<0> x(inp + (size_t)row * C, lane, C), dy(dout + (size_t)row * C, lane, C);
    rmsnorm_dinp_row<0>(dinp + (size_t)row * C, x, dy, w, rstd[row], lane, C, m,
                        img ? img + (size_t)row * C : nullptr);
  }
  fold_output_amax(m, amax);
}

/* dw, stage 1: block (32 columns x DW_GROUPS row groups) sums the rows of one
 * chunk of DW_ROWS rows into partial[chunk][c]; stage 2 adds the chunks in
 * order.  The chunking depends on N only. */
constexpr int DW_ROWS = 128, DW_GROUPS = 8;

/* Both in one pass where a row fits the registers (J > 0): a block per chunk
 * of DW_ROWS rows, warp g taking its rows r0 + g + 8 i one after another
 * (rmsnorm_dinp_row each) and adding dy x r into its columns' sums, which
 * the block then adds in group order: rmsnorm_dw_partial_kernel's sums in
 * its order, the same bits, without reading dy and x again. */
template <int J>
__global__ void __launch_bounds__(32 * DW_GROUPS)
    rmsnorm_backward_fused_kernel(float *dinp, __nv_bfloat16 *img, float *partial,
                                  const float *dout, const float *inp, const float *w,
                                  const float *rstd, int N, int C, int chunks,
                                  unsigned int *amax) {
  extern __shared__ float sums[]; /* DW_GROUPS x C */
  const int lane = threadIdx.x & 31, grp = threadIdx.x / 32;
  float m = 0.0f;
  for (int chunk = blockIdx.x; chunk < chunks; chunk += gridDim.x) {
    const int r0 = chunk * DW_ROWS, r1 = min(r0 + DW_ROWS, N);
    float acc[J];
#pragma unroll
    for (int j = 0; j < J; j++) acc[j] = 0.0f;
    for (int row = r0 + grp; row < r1; row += DW_GROUPS) {
      const RowValues<J> x(inp + (size_t)row * C, lane, C), dy(dout + (size_t)row * C, lane, C);
      const float r = rstd[row];
      rmsnorm_dinp_row<J>(dinp + (size_t)row * C, x, dy, w, r, lane, C, m,
                          img ? img + (size_t)row * C : nullptr);
      row_each<J>(lane, C, [&](int j, int c) {
        acc[j] = __fadd_rn(acc[j], __fmul_rn(__fmul_rn(dy(j, c), x(j, c)), r));
      });
    }
    row_each<J>(lane, C, [&](int j, int c) { sums[grp * C + c] = acc[j]; });
    __syncthreads();
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
      float t = sums[c];
#pragma unroll
      for (int g = 1; g < DW_GROUPS; g++) t = __fadd_rn(t, sums[g * C + c]);
      partial[(size_t)chunk * C + c] = t;
    }
    __syncthreads();
  }
  fold_output_amax(m, amax);
}

/* Rows held in registers up to this many elements a lane (C <= 1024); the
 * loop kernels beyond, or everywhere when turned off (tests). */
constexpr int kRowRegs = 32;
bool rmsnorm_rows_in_registers = true;
/* the fused backward's column sums of its row groups: within the 48 KiB of
 * dynamic shared memory a launch has without opting in */
static_assert(sizeof(float) * DW_GROUPS * 32 * kRowRegs <= 48 * 1024, "dw sums");

/* f(std::integral_constant<int, J>) for the J that serves C (row_each). */
template <class F>
static void with_row_regs(int C, F f) {
  if (!rmsnorm_rows_in_registers || C > 32 * kRowRegs)
    f(std::integral_constant<int, 0>{});
  else if (C <= 32 * 8)
    f(std::integral_constant<int, 8>{});
  else if (C <= 32 * 16)
    f(std::integral_constant<int, 16>{});
  else if (C <= 32 * 24)
    f(std::integral_constant<int, 24>{});
  else
    f(std::integral_constant<int, kRowRegs>{});
}

__global__ void rmsnorm_dw_partial_kernel(float *partial, const float *dout, const float *inp,
                                          const float *rstd, int N, int C, int chunks) {
  __shared__ float sh[DW_GROUPS][33];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int c = blockIdx.x * 32 + tx;
  for (int chunk = blockIdx.y; chunk < chunks; chunk += gridDim.y) {
    const int r0 = chunk * DW_ROWS, r1 = min(r0 + DW_ROWS, N);
    float s = 0;
    if (c < C)
      for (int r = r0 + ty; r < r1; r += DW_GROUPS)
        s = __fadd_rn(s, __fmul_rn(__fmul_rn(dout[(size_t)r * C + c], inp[(size_t)r * C + c]),
                                   rstd[r]));
    sh[ty][tx] = s;
    __syncthreads();
    if (ty == 0 && c < C) {
      float t = sh[0][tx];
#pragma unroll
      for (int g = 1; g < DW_GROUPS; g++) t = __fadd_rn(t, sh[g][tx]);
      partial[(size_t)chunk * C + c] = t;
    }
    __syncthreads();
  }
}

__global__ void rmsnorm_dw_final_kernel(float *dw, const float *partial, int C, int chunks) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float t = 0;
  for (int k = 0; k < chunks; k++) t = __fadd_rn(t, partial[(size_t)k * C + c]);
  dw[c] = __fadd_rn(dw[c], t);
}

void *dw_scratch = NULL;
size_t dw_scratch_cap = 0;

/* ---------------------------------------------------------------- RoPE */

/* A block per row bt of B * T (grid-stride); pair k of the row is
 * (x[2k], x[2k+1]), frequency i = k % half of head k / half; the rotated
 * tensor's amax folded into *amax (NULL: not wanted).  ACT_BF16: each rotated
 * value rounded to bf16 (activations = bf16); false: the float32 rotation. */
template <bool ACT_BF16>
__global__ void rope_kernel(float *x, const float *cos_t, const float *sin_t, long rows, int T,
                            int nh, int half, float sign, unsigned int *amax) {
  const int pairs = nh * half;
  float m = 0.0f;
  for (long bt = blockIdx.x; bt < rows; bt += gridDim.x) {
    const float *cs = cos_t + (size_t)(bt % T) * half, *sn = sin_t + (size_t)(bt % T) * half;
    float *row = x + (size_t)bt * 2 * pairs;
    for (int k = threadIdx.x; k < pairs; k += blockDim.x) {
      const int i = k % half;
      const float c = cs[i], s = sign * sn[i];
      float y0, y1;
      rope_rotate_pair(row[2 * k], row[2 * k + 1], c, s, ACT_BF16, &y0, &y1);
      row[2 * k] = y0;
      row[2 * k + 1] = y1;
      fold_finite_amax(y0, m);
      fold_finite_amax(y1, m);
    }
  }
  fold_output_amax(m, amax);
}

/* RoPE's rotation of every row (sign 1), or its gradient, the inverse
 * rotation (sign -1: the rotation is orthogonal); ACT_BF16: rope_kernel's. */
template <bool ACT_BF16>
static void launch_rope(float *x, const float *cos_t, const float *sin_t, int B, int T, int nh,
                        int hs, float sign, unsigned int *amax, cudaStream_t s) {
  const long rows = (long)B * T;
  if (rows <= 0 || nh * (hs / 2) <= 0) return;
  rope_kernel<ACT_BF16><<<block_per_row_grid(rows), kThreads, 0, s>>>(x, cos_t, sin_t, rows, T,
                                                                      nh, hs / 2, sign, amax);
}

/* The cos and sin of the angles of the pairs from element `base` of x (rows
 * of rowlen, T positions, half frequencies a head): cs[p] and sn[p] for its
 * pair p, while the pairs stay within one head (groups of 8 elements, hs a
 * multiple of 8).  One formula for both bf16 RoPE kernels, so they rotate
 * by the same angles. */
__device__ __forceinline__ void rope_angles_at(const float *cos_t, const float *sin_t,
                                               size_t base, int T, int rowlen, int half,
                                               const float **cs, const float **sn) {
  const size_t bt = base / rowlen;
  const int i0 = (int)(base - bt * rowlen) / 2 % half, t = (int)(bt % T);
  *cs = cos_t + (size_t)t * half + i0;
  *sn = sin_t + (size_t)t * half + i0;
}

/* RoPE's rotation (sign 1) or its gradient (sign -1) of x (B T rows of
 * nh * hs), rounded straight into a bf16 GEMM operand image: 8 elements (4
 * pairs of one head, rows of a multiple of 8) a thread, rope_kernel's
 * rotation of each pair and quantize8_bf16 on the values in registers, so
 * the image (and the amax) are the bits of rope_kernel's float32 tensor and
 * k_quantize_scaled_bf16's pass over it; out NULL: only the amax. */
template <int ID, int MODE>
__global__ void __launch_bounds__(exmy_cuda::kThreads)
    rope_bf16_kernel(const __grid_constant__ exmy_format rt, const __grid_constant__ KOpts o,
                     uint16_t *__restrict__ out, const float *__restrict__ x,
                     const float *__restrict__ cos_t, const float *__restrict__ sin_t, size_t n,
                     int T, int rowlen, int half, float sign, int vec, const float *si,
                     unsigned int *amax) {
  using namespace exmy_cuda;
  const auto &f = kernel_format<ID>(rt);
  const size_t base = ((size_t)blockIdx.x * exmy_cuda::kThreads + threadIdx.x) * kPer;
  float m = 0.0f;
  if (base < n) {
    float v[kPer];
    const bool full = load8(x, base, n, vec, v);
    const float *cs, *sn;
    rope_angles_at(cos_t, sin_t, base, T, rowlen, half, &cs, &sn);
#pragma unroll
    for (int p = 0; p < kPer / 2; p++)
      rope_rotate_pair(v[2 * p], v[2 * p + 1], cs[p], sign * sn[p], false, &v[2 * p],
                       &v[2 * p + 1]);
    if (out) {
      uint32_t c[kPer];
      quantize8_bf16<ID, MODE>(f, o, base, n, v, si, m, c);
      store8<uint16_t>(out, base, n, full, c);
    } else { /* current scaling's first pass: the amax alone */
      amax8(v, base, n, m);
    }
  }
  fold_output_amax(m, amax);
}

template <int ID>
struct RopeBf16Op {
  static bool run(const exmy_format &f, const KOpts &o, uint16_t *out, const float *x,
                  const float *cos_t, const float *sin_t, size_t n, int T, int rowlen, int half,
                  float sign, const gpu_bf16_scaling &sc, cudaStream_t s) {
    if constexpr (ID == SPEC_GENERIC) {
      return false;
    } else {
      const int vec = (((uintptr_t)out | (uintptr_t)x) & 15u) == 0;
      const unsigned blocks = blocks_for((n + exmy_cuda::kPer - 1) / exmy_cuda::kPer,
                                         exmy_cuda::kThreads);
      if (!out) { /* the amax alone: no rounding, one kernel of any mode */
        rope_bf16_kernel<ID, EXMY_RNE><<<blocks, exmy_cuda::kThreads, 0, s>>>(
            f, o, out, x, cos_t, sin_t, n, T, rowlen, half, sign, vec, nullptr, sc.amax_bits);
        return true;
      }
      exmy_cuda::with_operand_mode<ID>(o.mode, [&](auto mode) {
        rope_bf16_kernel<ID, decltype(mode)::value><<<blocks, exmy_cuda::kThreads, 0, s>>>(
            f, o, out, x, cos_t, sin_t, n, T, rowlen, half, sign, vec, sc.scale_inv,
            sc.amax_bits);
      });
      return true;
    }
  }
};

template <int ID>
struct RmsnormBf16Op {
  static bool run(const exmy_format &f, const KOpts &o, uint16_t *out, float *out_f32,
                  float *rstd, float *inp, const float *add, const uint16_t *add_bf16,
                  float *sum, const float *w, int N, int C, const gpu_bf16_scaling &sc,
                  cudaStream_t s) {
    if constexpr (ID == SPEC_GENERIC) {
      return false;
    } else {
      const int vec = ((uintptr_t)out & 15u) == 0;
      exmy_cuda::with_operand_mode<ID>(o.mode, [&](auto mode) {
        rmsnorm_forward_bf16_kernel<ID, decltype(mode)::value>
            <<<std::max(1u, warp_per_row_grid(N)), kThreads, sizeof(float) * kWarpsPerBlock * C,
               s>>>(f, o, out, out_f32, rstd, inp, add, add_bf16, sum, w, N, C, vec, sc.scale_inv,
                sc.of_amax, sc.amax_bits);
      });
      return true;
    }
  }
};

/* -------------------------------------------------------------- SwiGLU */

/* One element of model.c's swiglu_forward: silu(a) b. */
__device__ __forceinline__ float swiglu_value(float a, float b) {
  return __fmul_rn(__fmul_rn(a, sigmoid_as_cpu(a)), b);
}

/* out's amax folded into *amax (NULL: not wanted).  ACT_BF16: model.c's
 * swiglu_forward_act_bf16 (act_bf16_core.h; float32 storage of bf16 values);
 * false: model.c's swiglu_forward. */
template <bool ACT_BF16>
__global__ void swiglu_forward_kernel(float *out, const float *h1, const float *h3, size_t n,
                                      unsigned int *amax) {
  float m = 0.0f;
  for (size_t i = global_index(); i < n; i += global_stride()) {
    float v;
    if constexpr (ACT_BF16)
      v = swiglu_forward_act_bf16_element(h1[i], h3[i]);
    else
      v = swiglu_value(h1[i], h3[i]);
    out[i] = v;
    fold_finite_amax(v, m);
  }
  fold_output_amax(m, amax);
}

/* bf16 storage of activations = bf16: the same element formulas (swiglu_*
 * act_bf16, act_bf16_core.h) on bf16 tensors, 8 elements a thread through
 * 16-byte loads and stores (n % 8 == 0 and 16-byte aligned pointers; the
 * launcher checks).  Every output is a bf16 value, so its conversion to
 * bf16 is exact: the bits are those of the float32-storage kernels. */
struct bf16x8 {
  __nv_bfloat16 v[8];
};
__device__ __forceinline__ bf16x8 load_bf16x8(const uint16_t *p, size_t i) {
  uint4 w = reinterpret_cast<const uint4 *>(p)[i];
  return *reinterpret_cast<bf16x8 *>(&w);
}
__device__ __forceinline__ void store_bf16x8(uint16_t *p, size_t i, const bf16x8 &x) {
  reinterpret_cast<uint4 *>(p)[i] = *reinterpret_cast<const uint4 *>(&x);
}

/* silu_sigmoid of every bf16 value, indexed by its bits (sigmoid_table_kernel
 * writes it with the function itself, so a lookup is the same float): the
 * bf16-storage SwiGLU kernels read it in place of the double-precision
 * sigmoid, whose arithmetic bound them.  Built once per device
 * (ensure_sigmoid_table). */
__device__ float sigmoid_of_bf16[1 << 16];

__global__ void sigmoid_table_kernel() {
  const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < (1u << 16)) sigmoid_of_bf16[i] = silu_sigmoid(__uint_as_float(i << 16));
}

constexpr int kMaxDevices = 64;
bool sigmoid_table_built[kMaxDevices];

/* Builds the table on the current device before the first kernel that reads
 * it (stream order); during a graph capture the build goes into the graph
 * and is not taken as done. */
static void ensure_sigmoid_table(cudaStream_t s) {
  int dev = 0;
  cudaGetDevice(&dev);
  if (dev >= 0 && dev < kMaxDevices && sigmoid_table_built[dev]) return;
  sigmoid_table_kernel<<<(1 << 16) / kThreads, kThreads, 0, s>>>();
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(s, &st) == cudaSuccess && st == cudaStreamCaptureStatusNone &&
      dev >= 0 && dev < kMaxDevices)
    sigmoid_table_built[dev] = true;
}

__device__ __forceinline__ float sigmoid_lookup(__nv_bfloat16 a) {
  return __ldg(&sigmoid_of_bf16[__bfloat16_as_ushort(a)]);
}

/* hg = SwiGLU(h1, h3) of 8 bf16 elements: the forward's value, which the
 * backward also writes where it makes hg again (lean activations) */
__device__ __forceinline__ bf16x8 swiglu_forward_bf16x8(const bf16x8 &a, const bf16x8 &b) {
  bf16x8 o;
#pragma unroll
  for (int j = 0; j < 8; j++)
    o.v[j] = __float2bfloat16_rn(swiglu_forward_act_bf16_sig(
        __bfloat162float(a.v[j]), sigmoid_lookup(a.v[j]), __bfloat162float(b.v[j])));
  return o;
}

/* The finite max |v| of 8 bf16 values folded into m. */
__device__ __forceinline__ void fold_bf16x8_amax(const bf16x8 &x, float &m) {
#pragma unroll
  for (int j = 0; j < 8; j++) fold_finite_amax(__bfloat162float(x.v[j]), m);
}

__global__ void __launch_bounds__(kThreads)
    swiglu_forward_bf16_storage_kernel(uint16_t *out, const uint16_t *h1, const uint16_t *h3,
                                       size_t n8, unsigned int *amax) {
  float m = 0.0f;
  for (size_t i = global_index(); i < n8; i += global_stride()) {
    const bf16x8 o = swiglu_forward_bf16x8(load_bf16x8(h1, i), load_bf16x8(h3, i));
    store_bf16x8(out, i, o);
    if (amax) fold_bf16x8_amax(o, m);
  }
  fold_output_amax(m, amax);
}

/* dh1, dh3 = SwiGLU's gradients of 8 bf16 elements (output gradient d),
 * each rounded to bf16 as bf16 activations store them */
__device__ __forceinline__ void swiglu_backward_bf16x8(const bf16x8 &d, const bf16x8 &a,
                                                       const bf16x8 &b, bf16x8 &dh1,
                                                       bf16x8 &dh3) {
#pragma unroll
  for (int j = 0; j < 8; j++) {
    float g1, g3;
    swiglu_backward_act_bf16_sig(__bfloat162float(d.v[j]), __bfloat162float(a.v[j]),
                                 sigmoid_lookup(a.v[j]), __bfloat162float(b.v[j]), &g1, &g3);
    dh1.v[j] = __float2bfloat16_rn(g1);
    dh3.v[j] = __float2bfloat16_rn(g3);
  }
}

/* kHg: hg written too, from the h1 and h3 already loaded */
template <bool kHg>
__global__ void __launch_bounds__(kThreads)
    swiglu_backward_bf16_storage_kernel(uint16_t *dh1, uint16_t *dh3, uint16_t *hg,
                                        const uint16_t *dout, const uint16_t *h1,
                                        const uint16_t *h3, size_t n8, unsigned int *amax1,
                                        unsigned int *amax3) {
  float m1 = 0.0f, m3 = 0.0f;
  for (size_t i = global_index(); i < n8; i += global_stride()) {
    const bf16x8 d = load_bf16x8(dout, i), a = load_bf16x8(h1, i), b = load_bf16x8(h3, i);
    bf16x8 o1, o3;
    swiglu_backward_bf16x8(d, a, b, o1, o3);
    store_bf16x8(dh1, i, o1);
    store_bf16x8(dh3, i, o3);
    if (amax1) fold_bf16x8_amax(o1, m1);
    if (amax3) fold_bf16x8_amax(o3, m3);
    if constexpr (kHg) store_bf16x8(hg, i, swiglu_forward_bf16x8(a, b));
  }
  fold_output_amax(m1, amax1);
  fold_output_amax(m3, amax3);
}

/* The 8 bf16 values x (group i of the n elements) written into group i of y
 * as their bf16 GEMM operand image: k_quantize_scaled_bf16's
 * quantize8_bf16 on them (their finite amax folded into m). */
template <int ID, int MODE>
__device__ __forceinline__ void store_image8(const exmy_format &f, const KOpts &o, uint16_t *y,
                                             size_t i, size_t n, const bf16x8 &x,
                                             const float *si, float &m) {
  using namespace exmy_cuda;
  if constexpr ((MODE == EXMY_RZ || MODE == EXMY_RNE) && by_mask_enabled<ID>()) {
    /* unscaled bf16 and E8Mx by rz or rne: the values are bf16 already, so
     * two a word (by_mask_bf16x2), their amax the largest magnitude's bits */
    if (!si && !o.flush) {
      const uint4 w = *reinterpret_cast<const uint4 *>(&x);
      const uint32_t in[4] = {w.x, w.y, w.z, w.w};
      uint32_t q[4];
      bool ok = true;
#pragma unroll
      for (int k = 0; k < 4; k++) ok = by_mask_bf16x2<ID, MODE>(o.saturate, in[k], q[k]) && ok;
      if (ok) { /* all finite: amax8's fold is the integer max of the magnitudes */
        const uint32_t mx = __vmaxu2(__vmaxu2(in[0] & 0x7FFF7FFFu, in[1] & 0x7FFF7FFFu),
                                     __vmaxu2(in[2] & 0x7FFF7FFFu, in[3] & 0x7FFF7FFFu));
        m = fmaxf(m, __uint_as_float(max(mx & 0xFFFFu, mx >> 16) << 16));
        reinterpret_cast<uint4 *>(y)[i] = make_uint4(q[0], q[1], q[2], q[3]);
        return;
      }
    }
  }
  float v[kPer];
  uint32_t c[kPer];
#pragma unroll
  for (int j = 0; j < kPer; j++) v[j] = __bfloat162float(x.v[j]);
  quantize8_bf16<ID, MODE>(f, o, i * kPer, n, v, si, m, c);
  store8<uint16_t>(y, i * kPer, n, true, c);
}

/* The two kernels above with each output written as its bf16 GEMM operand
 * image instead: the bf16 value they store, then quantize8_bf16 as the
 * fill's pass (k_quantize_scaled_bf16) would apply it to the stored tensor,
 * so the image, its sr stream indices and its amax are that pass's.  A
 * thread 8 elements; n % 8 == 0 and 16-byte aligned pointers.  The backward:
 * o1 and o3 differ at most in the sr stream offset; si and amax per
 * gradient as in swiglu_backward_bf16_kernel. */
template <int ID, int MODE>
__global__ void __launch_bounds__(exmy_cuda::kThreads)
    swiglu_forward_bf16_storage_image_kernel(const __grid_constant__ exmy_format rt,
                                             const __grid_constant__ KOpts o,
                                             uint16_t *__restrict__ out,
                                             const uint16_t *__restrict__ h1,
                                             const uint16_t *__restrict__ h3, size_t n,
                                             const float *si, unsigned int *amax) {
  using namespace exmy_cuda;
  const auto &f = kernel_format<ID>(rt);
  const size_t i = (size_t)blockIdx.x * exmy_cuda::kThreads + threadIdx.x, base = i * kPer;
  float m = 0.0f;
  if (base < n)
    store_image8<ID, MODE>(f, o, out, i, n,
                           swiglu_forward_bf16x8(load_bf16x8(h1, i), load_bf16x8(h3, i)), si, m);
  fold_output_amax(m, amax);
}

template <int ID, int MODE>
__global__ void __launch_bounds__(exmy_cuda::kThreads)
    swiglu_backward_bf16_storage_image_kernel(
        const __grid_constant__ exmy_format rt, const __grid_constant__ KOpts o1,
        const __grid_constant__ KOpts o3, uint16_t *__restrict__ dh1, uint16_t *__restrict__ dh3,
        const uint16_t *__restrict__ dout, const uint16_t *__restrict__ h1,
        const uint16_t *__restrict__ h3, size_t n, const float *si1, const float *si3,
        unsigned int *amax1, unsigned int *amax3) {
  using namespace exmy_cuda;
  const auto &f = kernel_format<ID>(rt);
  const size_t i = (size_t)blockIdx.x * exmy_cuda::kThreads + threadIdx.x, base = i * kPer;
  float m1 = 0.0f, m3 = 0.0f;
  if (base < n) {
    bf16x8 g1, g3;
    swiglu_backward_bf16x8(load_bf16x8(dout, i), load_bf16x8(h1, i), load_bf16x8(h3, i), g1, g3);
    store_image8<ID, MODE>(f, o1, dh1, i, n, g1, si1, m1);
    store_image8<ID, MODE>(f, o3, dh3, i, n, g3, si3, m3);
  }
  fold_output_amax(m1, amax1);
  fold_output_amax(m3, amax3);
}

/* RoPE of bf16 activations on bf16 storage: rope_kernel<true>'s rotation
 * of each pair and rounding, 8 elements (4 pairs of one head: hs % 8 == 0)
 * a thread through 16-byte loads and stores; every result a bf16 value, so
 * the bits of the float32-storage kernel. */
__global__ void __launch_bounds__(kThreads)
    rope_bf16_storage_kernel(uint16_t *out, const uint16_t *x, const float *cos_t,
                             const float *sin_t, size_t n8, int T, int rowlen, int half,
                             float sign, unsigned int *amax) {
  float m = 0.0f;
  for (size_t i = global_index(); i < n8; i += global_stride()) {
    const float *cs, *sn;
    rope_angles_at(cos_t, sin_t, i * 8, T, rowlen, half, &cs, &sn);
    float v[8];
    const bf16x8 a = load_bf16x8(x, i);
#pragma unroll
    for (int j = 0; j < 8; j++) v[j] = __bfloat162float(a.v[j]);
    bf16x8 o;
#pragma unroll
    for (int p = 0; p < 4; p++) {
      float y0, y1;
      rope_rotate_pair(v[2 * p], v[2 * p + 1], cs[p], sign * sn[p], 1, &y0, &y1);
      o.v[2 * p] = __float2bfloat16_rn(y0);
      o.v[2 * p + 1] = __float2bfloat16_rn(y1);
    }
    store_bf16x8(out, i, o);
    if (amax) fold_bf16x8_amax(o, m);
  }
  fold_output_amax(m, amax);
}


/* The gradients of one element: model.c's swiglu_backward. */
__device__ __forceinline__ void swiglu_grads(float d, float a, float b, float *g1, float *g3) {
  const float sig = sigmoid_as_cpu(a);
  *g3 = __fmul_rn(__fmul_rn(d, a), sig);
  *g1 = __fmul_rn(__fmul_rn(__fmul_rn(d, b), sig),
                  __fadd_rn(1.0f, __fmul_rn(a, __fsub_rn(1.0f, sig))));
}

/* ACT_BF16: model.c's swiglu_backward_act_bf16, the same storage; false:
 * its swiglu_backward. */
template <bool ACT_BF16>
__global__ void swiglu_backward_kernel(float *dh1, float *dh3, const float *dout, const float *h1,
                                       const float *h3, size_t n) {
  for (size_t i = global_index(); i < n; i += global_stride()) {
    if constexpr (ACT_BF16)
      swiglu_backward_act_bf16_element(dout[i], h1[i], h3[i], &dh1[i], &dh3[i]);
    else
      swiglu_grads(dout[i], h1[i], h3[i], &dh1[i], &dh3[i]);
  }
}

/* SwiGLU on float32 storage, model.c's (ACT_BF16 false) or with bf16
 * activations' roundings (true). */
template <bool ACT_BF16>
static void launch_swiglu_forward(float *out, const float *h1, const float *h3, size_t n,
                                  unsigned int *amax, cudaStream_t s) {
  if (!n) return;
  swiglu_forward_kernel<ACT_BF16><<<elementwise_grid(n), kThreads, 0, s>>>(out, h1, h3, n, amax);
}
template <bool ACT_BF16>
static void launch_swiglu_backward(float *dh1, float *dh3, const float *dout, const float *h1,
                                   const float *h3, size_t n, cudaStream_t s) {
  if (!n) return;
  swiglu_backward_kernel<ACT_BF16><<<elementwise_grid(n), kThreads, 0, s>>>(dh1, dh3, dout, h1,
                                                                            h3, n);
}

/* The same, each gradient rounded straight into its bf16 GEMM operand image:
 * the 8 elements per thread and 16-byte loads and stores of cuda/scaled.cu's
 * k_quantize_scaled_bf16, and its quantize8_bf16 (amax, scale, encode8, bf16
 * bits) applied to the gradients in registers instead of to float32 tensors
 * read back from memory, so the images (and the amaxes) are the same bits.
 * o1 and o3 differ at most in the sr stream offset; per gradient, si (device
 * {s, 1/s}) or NULL (unscaled), and amax (device) or NULL (not wanted). */
template <int ID, int MODE>
__global__ void __launch_bounds__(exmy_cuda::kThreads)
    swiglu_backward_bf16_kernel(const __grid_constant__ exmy_format rt,
                                const __grid_constant__ KOpts o1, const __grid_constant__ KOpts o3,
                                uint16_t *__restrict__ dh1, uint16_t *__restrict__ dh3,
                                const float *__restrict__ dout, const float *__restrict__ h1,
                                const float *__restrict__ h3, size_t n, int vec,
                                const float *si1, const float *si3, unsigned int *amax1,
                                unsigned int *amax3) {
  using namespace exmy_cuda;
  const auto &f = kernel_format<ID>(rt);
  const size_t base = ((size_t)blockIdx.x * exmy_cuda::kThreads + threadIdx.x) * kPer;
  float m1 = 0.0f, m3 = 0.0f;
  if (base < n) {
    float d[kPer], a[kPer], b[kPer], g1[kPer], g3[kPer];
    const bool full = load8(dout, base, n, vec, d);
    load8(h1, base, n, vec, a);
    load8(h3, base, n, vec, b);
#pragma unroll
    for (int k = 0; k < kPer; k++) swiglu_grads(d[k], a[k], b[k], &g1[k], &g3[k]);
    uint32_t c[kPer];
    quantize8_bf16<ID, MODE>(f, o1, base, n, g1, si1, m1, c);
    store8<uint16_t>(dh1, base, n, full, c);
    quantize8_bf16<ID, MODE>(f, o3, base, n, g3, si3, m3, c);
    store8<uint16_t>(dh3, base, n, full, c);
  }
  fold_output_amax(m1, amax1);
  fold_output_amax(m3, amax3);
}

/* The forward, out = silu(h1) h3 rounded straight into its bf16 GEMM
 * operand image: swiglu_backward_bf16_kernel's threads and quantize8_bf16 on
 * the values in registers, so the image (and the amax) are the bits of the
 * float32 tensor and k_quantize_scaled_bf16's pass. */
template <int ID, int MODE>
__global__ void __launch_bounds__(exmy_cuda::kThreads)
    swiglu_forward_bf16_kernel(const __grid_constant__ exmy_format rt,
                               const __grid_constant__ KOpts o, uint16_t *__restrict__ out,
                               const float *__restrict__ h1, const float *__restrict__ h3,
                               size_t n, int vec, const float *si, unsigned int *amax) {
  using namespace exmy_cuda;
  const auto &f = kernel_format<ID>(rt);
  const size_t base = ((size_t)blockIdx.x * exmy_cuda::kThreads + threadIdx.x) * kPer;
  float m = 0.0f;
  if (base < n) {
    float a[kPer], b[kPer], v[kPer];
    const bool full = load8(h1, base, n, vec, a);
    load8(h3, base, n, vec, b);
#pragma unroll
    for (int k = 0; k < kPer; k++) v[k] = swiglu_value(a[k], b[k]);
    uint32_t c[kPer];
    quantize8_bf16<ID, MODE>(f, o, base, n, v, si, m, c);
    store8<uint16_t>(out, base, n, full, c);
  }
  fold_output_amax(m, amax);
}

/* Only the gradients' amaxes (current scaling's first pass): the same
 * threads, gradients and folds, nothing written. */
__global__ void __launch_bounds__(exmy_cuda::kThreads)
    swiglu_backward_amax_kernel(const float *__restrict__ dout, const float *__restrict__ h1,
                                const float *__restrict__ h3, size_t n, int vec,
                                unsigned int *amax1, unsigned int *amax3) {
  using namespace exmy_cuda;
  const size_t base = ((size_t)blockIdx.x * exmy_cuda::kThreads + threadIdx.x) * kPer;
  float m1 = 0.0f, m3 = 0.0f;
  if (base < n) {
    float d[kPer], a[kPer], b[kPer], g1[kPer], g3[kPer];
    load8(dout, base, n, vec, d);
    load8(h1, base, n, vec, a);
    load8(h3, base, n, vec, b);
#pragma unroll
    for (int k = 0; k < kPer; k++) swiglu_grads(d[k], a[k], b[k], &g1[k], &g3[k]);
    amax8(g1, base, n, m1);
    amax8(g3, base, n, m3);
  }
  fold_output_amax(m1, amax1);
  fold_output_amax(m3, amax3);
}

/* The kernel for the table formats of the bf16 operand path, in the modes
 * with_operand_mode serves; false for any other format (the caller rounds
 * separately; the generic format is not worth its compile time here). */
template <int ID>
struct SwigluBf16Op {
  static bool run(const exmy_format &f, const KOpts &o1, const KOpts &o3, uint16_t *dh1,
                  uint16_t *dh3, const float *dout, const float *h1, const float *h3, size_t n,
                  const gpu_bf16_scaling &sc1, const gpu_bf16_scaling &sc3, cudaStream_t s) {
    if constexpr (ID == SPEC_GENERIC) {
      return false;
    } else {
      const int vec = (((uintptr_t)dh1 | (uintptr_t)dh3 | (uintptr_t)dout | (uintptr_t)h1 |
                        (uintptr_t)h3) & 15u) == 0;
      const unsigned blocks = blocks_for((n + exmy_cuda::kPer - 1) / exmy_cuda::kPer,
                                         exmy_cuda::kThreads);
      exmy_cuda::with_operand_mode<ID>(o1.mode, [&](auto mode) {
        swiglu_backward_bf16_kernel<ID, decltype(mode)::value>
            <<<blocks, exmy_cuda::kThreads, 0, s>>>(f, o1, o3, dh1, dh3, dout, h1, h3, n, vec,
                                                    sc1.scale_inv, sc3.scale_inv, sc1.amax_bits,
                                                    sc3.amax_bits);
      });
      return true;
    }
  }
};

template <int ID>
struct SwigluFwdBf16Op {
  static bool run(const exmy_format &f, const KOpts &o, uint16_t *out, const float *h1,
                  const float *h3, size_t n, const gpu_bf16_scaling &sc, cudaStream_t s) {
    if constexpr (ID == SPEC_GENERIC) {
      return false;
    } else {
      const int vec = (((uintptr_t)out | (uintptr_t)h1 | (uintptr_t)h3) & 15u) == 0;
      const unsigned blocks = blocks_for((n + exmy_cuda::kPer - 1) / exmy_cuda::kPer,
                                         exmy_cuda::kThreads);
      exmy_cuda::with_operand_mode<ID>(o.mode, [&](auto mode) {
        swiglu_forward_bf16_kernel<ID, decltype(mode)::value>
            <<<blocks, exmy_cuda::kThreads, 0, s>>>(f, o, out, h1, h3, n, vec, sc.scale_inv,
                                                    sc.amax_bits);
      });
      return true;
    }
  }
};

/* A tensor stored in bf16 written as its bf16 GEMM operand image: the
 * fill's pass (k_quantize_scaled_bf16's quantize8_bf16) on the stored
 * values, 8 a thread; y may be x. */
template <int ID, int MODE>
__global__ void __launch_bounds__(exmy_cuda::kThreads)
    bf16_storage_image_kernel(const __grid_constant__ exmy_format rt,
                              const __grid_constant__ KOpts o, uint16_t *y, const uint16_t *x,
                              size_t n, const float *si, const exmy_cuda_amax_scale cs,
                              unsigned int *amax) {
  using namespace exmy_cuda;
  const auto &f = kernel_format<ID>(rt);
  const size_t i = (size_t)blockIdx.x * exmy_cuda::kThreads + threadIdx.x, base = i * kPer;
  float m = 0.0f;
  bf16x8 v;
  if (base < n) v = load_bf16x8(x, i);
  __shared__ float pair[2];
  si = block_scale_pair(si, cs, pair);
  if (base < n) store_image8<ID, MODE>(f, o, y, i, n, v, si, m);
  fold_output_amax(m, amax);
}

/* The finite max |x| of values stored in bf16, 8 a thread, folded into
 * amax: current scaling's first pass over a stored tensor. */
__global__ void __launch_bounds__(exmy_cuda::kThreads)
    bf16_storage_amax_kernel(const uint16_t *x, size_t n, unsigned int *amax) {
  const size_t i = (size_t)blockIdx.x * exmy_cuda::kThreads + threadIdx.x;
  float m = 0.0f;
  if (i * exmy_cuda::kPer < n) fold_bf16x8_amax(load_bf16x8(x, i), m);
  fold_output_amax(m, amax);
}

/* The dispatch of the bf16-storage image kernels: launch(id, mode) with
 * the table format's id and the mode of the bf16 operand path as
 * std::integral_constant, for the formats with_operand_mode serves; false
 * for any other format. */
template <int ID>
struct Bf16ImageLaunch {
  template <class Launch>
  static bool run(int mode, const Launch &launch) {
    if constexpr (ID == SPEC_GENERIC) {
      return false;
    } else {
      exmy_cuda::with_operand_mode<ID>(
          mode, [&](auto m) { launch(std::integral_constant<int, ID>{}, m); });
      return true;
    }
  }
};

__global__ void add_inplace_kernel(float *y, const float *x, size_t n) {
  for (size_t i = global_index(); i < n; i += global_stride()) y[i] = __fadd_rn(y[i], x[i]);
}

/* y = a + x for x in bf16 (a NULL: y = x, the widened value itself, so that
 * a bf16 -0 stays -0), 8 elements a thread where every pointer is 16-byte
 * aligned and n % 8 == 0 (VEC), else one. */
template <bool VEC>
__global__ void add_bf16_kernel(float *y, const float *a, const uint16_t *x, size_t n) {
  if constexpr (VEC) {
    for (size_t i = global_index(); i < n / 8; i += global_stride()) {
      const bf16x8 b = load_bf16x8(x, i);
      float v[8];
#pragma unroll
      for (int j = 0; j < 8; j++) v[j] = __bfloat162float(b.v[j]);
      if (a) {
        const float4 lo = reinterpret_cast<const float4 *>(a)[2 * i],
                     hi = reinterpret_cast<const float4 *>(a)[2 * i + 1];
        const float w[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
#pragma unroll
        for (int j = 0; j < 8; j++) v[j] = __fadd_rn(w[j], v[j]);
      }
      reinterpret_cast<float4 *>(y)[2 * i] = make_float4(v[0], v[1], v[2], v[3]);
      reinterpret_cast<float4 *>(y)[2 * i + 1] = make_float4(v[4], v[5], v[6], v[7]);
    }
  } else {
    for (size_t i = global_index(); i < n; i += global_stride()) {
      const float v = __bfloat162float(reinterpret_cast<const __nv_bfloat16 *>(x)[i]);
      y[i] = a ? __fadd_rn(a[i], v) : v;
    }
  }
}

/* y = x0 + x1 + x2 in that order (x1, x2 NULL: fewer terms) for bf16 x:
 * gpu_add_bf16's widening and sums, one pass; 8 elements a thread where VEC. */
template <bool VEC>
__global__ void sum_bf16_kernel(float *y, const uint16_t *x0, const uint16_t *x1,
                                const uint16_t *x2, size_t n) {
  const uint16_t *terms[2] = {x1, x2};
  if constexpr (VEC) {
    for (size_t i = global_index(); i < n / 8; i += global_stride()) {
      const bf16x8 b = load_bf16x8(x0, i);
      float v[8];
#pragma unroll
      for (int j = 0; j < 8; j++) v[j] = __bfloat162float(b.v[j]);
#pragma unroll
      for (int t = 0; t < 2; t++)
        if (terms[t]) {
          const bf16x8 c = load_bf16x8(terms[t], i);
#pragma unroll
          for (int j = 0; j < 8; j++) v[j] = __fadd_rn(v[j], __bfloat162float(c.v[j]));
        }
      reinterpret_cast<float4 *>(y)[2 * i] = make_float4(v[0], v[1], v[2], v[3]);
      reinterpret_cast<float4 *>(y)[2 * i + 1] = make_float4(v[4], v[5], v[6], v[7]);
    }
  } else {
    for (size_t i = global_index(); i < n; i += global_stride()) {
      float v = __bfloat162float(reinterpret_cast<const __nv_bfloat16 *>(x0)[i]);
      for (int t = 0; t < 2; t++)
        if (terms[t])
          v = __fadd_rn(v, __bfloat162float(reinterpret_cast<const __nv_bfloat16 *>(terms[t])[i]));
      y[i] = v;
    }
  }
}

/* activations = bf16: the scores (or their gradient) as model.c's
 * scale_scores_bf16, act_bf16_core.h's text. */
__global__ void scores_act_bf16_kernel(float *x, size_t n, float sqrt_hs) {
  for (size_t i = global_index(); i < n; i += global_stride())
    x[i] = scores_act_bf16_element(x[i], sqrt_hs);
}

/* ----------------------------------------------------- causal softmax */

/* One warp per row; the row's query sits at t = row % T. */
__global__ void causal_softmax_forward_kernel(float *att, long rows, int T) {
  const int lane = threadIdx.x & 31;
  const long row = (long)blockIdx.x * kWarpsPerBlock + threadIdx.x / 32;
  if (row >= rows) return;
  const int t = (int)(row % T);
  float *a = att + (size_t)row * T;
  float mx = -INFINITY;
  for (int j = lane; j <= t; j += 32) mx = fmaxf(mx, a[j]);
  mx = warp_max(mx);
  float sum = 0;
  for (int j = lane; j <= t; j += 32) {
    const float e = (float)exp((double)__fsub_rn(a[j], mx));
    a[j] = e;
    sum = __fadd_rn(sum, e);
  }
  sum = warp_sum(sum);
  const float inv = __fdiv_rn(1.0f, sum);
  for (int j = lane; j < T; j += 32) a[j] = j <= t ? __fmul_rn(a[j], inv) : 0.0f;
}

/* d = scale P (dP - rowsum(dP P)) on and below the diagonal, 0 above. */
__global__ void causal_softmax_backward_kernel(float *datt, const float *att, long rows, int T,
                                               float scale) {
  const int lane = threadIdx.x & 31;
  const long row = (long)blockIdx.x * kWarpsPerBlock + threadIdx.x / 32;
  if (row >= rows) return;
  const int t = (int)(row % T);
  float *d = datt + (size_t)row * T;
  const float *p = att + (size_t)row * T;
  float dot = 0;
  for (int j = lane; j <= t; j += 32) dot = __fadd_rn(dot, __fmul_rn(d[j], p[j]));
  dot = warp_sum(dot);
  for (int j = lane; j < T; j += 32)
    d[j] = j <= t ? __fmul_rn(__fmul_rn(scale, p[j]), __fsub_rn(d[j], dot)) : 0.0f;
}

/* -------------------------------------------------------- cross-entropy */

/* One warp per row; the exponentials summed in double as on the CPU. */
__global__ void crossentropy_forward_kernel(float *probs, float *losses, const int *targets, int N,
                                            int V) {
  const int lane = threadIdx.x & 31;
  const long row = (long)blockIdx.x * kWarpsPerBlock + threadIdx.x / 32;
  if (row >= N) return;
  float *p = probs + (size_t)row * V;
  float mx = -INFINITY;
  for (int j = lane; j < V; j += 32) mx = fmaxf(mx, p[j]);
  mx = warp_max(mx);
  double sum = 0;
  for (int j = lane; j < V; j += 32) {
    const float e = (float)exp((double)__fsub_rn(p[j], mx));
    p[j] = e;
    sum = __dadd_rn(sum, (double)e);
  }
  sum = warp_sum(sum);
  const float inv = (float)(1.0 / sum);
  for (int j = lane; j < V; j += 32) p[j] = __fmul_rn(p[j], inv);
  __syncwarp(); /* lane 0 reads the target's probability another lane wrote */
  if (lane == 0) losses[row] = (float)-log((double)p[targets[row]]);
}

/* log sum_j exp(w_j) - w_y of one row in double, w_j = z_j (k < 0) or the
 * box corner of eps index k (logit_sharpness.h); one warp, every lane returns
 * it.  model.c's row_loss, with the warp's sums. */
__device__ double row_loss(const float *z, int y, int V, int k, int lane) {
  const double eps = k < 0 ? 0 : logit_sharpness_eps(k);
  double mx = -INFINITY;
  for (int j = lane; j < V; j += 32)
    mx = fmax(mx, k < 0 ? (double)z[j] : logit_box_corner((double)z[j], j == y, eps));
  mx = warp_max(mx);
  double sum = 0;
  for (int j = lane; j < V; j += 32)
    sum = __dadd_rn(sum, exp((k < 0 ? (double)z[j] : logit_box_corner((double)z[j], j == y, eps)) -
                             mx));
  sum = warp_sum(sum);
  const double wy = k < 0 ? (double)z[y] : logit_box_corner((double)z[y], 1, eps);
  return mx + log(sum) - wy;
}

/* One warp per row. */
__global__ void logit_sharpness_kernel(float *phi, const float *logits, const int *targets, int N,
                                       int V) {
  const int lane = threadIdx.x & 31;
  const long row = (long)blockIdx.x * kWarpsPerBlock + threadIdx.x / 32;
  if (row >= N) return;
  const float *z = logits + (size_t)row * V;
  const double loss = row_loss(z, targets[row], V, -1, lane);
  for (int k = 0; k < LOGIT_SHARPNESS_NUM_EPS; k++) {
    const double loss_max = row_loss(z, targets[row], V, k, lane);
    if (lane == 0) phi[(size_t)k * N + row] = (float)logit_sharpness_phi(loss, loss_max);
  }
}

/* A block per row (grid-stride); dlogits may alias probs (same index read,
 * then written). */
__global__ void crossentropy_backward_kernel(float *dlogits, const float *probs,
                                             const int *targets, int N, int V, float scale) {
  for (int i = blockIdx.x; i < N; i += gridDim.x) {
    const int target = targets[i];
    const float *p = probs + (size_t)i * V;
    float *d = dlogits + (size_t)i * V;
    for (int j = threadIdx.x; j < V; j += blockDim.x) {
      float v = __fmul_rn(p[j], scale);
      if (j == target) v = __fsub_rn(v, scale);
      d[j] = v;
    }
  }
}

/* ------------------------------------------------------------ reductions */

constexpr int kMeanThreads = 1024;

__global__ void mean_kernel(const float *x, int n, double *out) {
  double s = 0;
  for (int i = threadIdx.x; i < n; i += kMeanThreads) s = __dadd_rn(s, (double)x[i]);
  s = block_sum<kMeanThreads>(s);
  if (threadIdx.x == 0) *out = s / n;
}

/* Stage 1: SUMSQ_BLOCKS(n) blocks of kSumsqThreads, each a grid-stride sum into
 * scratch[block]; stage 2: one block adds the partials. */
constexpr int kSumsqThreads = 256, kSumsqMaxBlocks = 1024;

size_t sumsq_blocks(size_t n) {
  size_t b = (n + kSumsqThreads - 1) / kSumsqThreads;
  if (b > kSumsqMaxBlocks) b = kSumsqMaxBlocks;
  return b ? b : 1;
}

__global__ void sumsq_partial_kernel(const float *g, size_t n, double *partial) {
  double s = 0;
  for (size_t i = global_index(); i < n; i += global_stride()) {
    const double x = g[i];
    s = __dadd_rn(s, __dmul_rn(x, x));
  }
  s = block_sum<kSumsqThreads>(s);
  if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

__global__ void sumsq_final_kernel(const double *partial, int blocks, double *out) {
  double s = 0;
  for (int i = threadIdx.x; i < blocks; i += kSumsqMaxBlocks) s = __dadd_rn(s, partial[i]);
  s = block_sum<kSumsqMaxBlocks>(s);
  if (threadIdx.x == 0) *out = s;
}

/* ---------------------------------------------------------------- AdamW */

/* grad_clip: coef = max_norm / (norm + 1e-6), applied when < 1 */
__device__ __forceinline__ bool clip_coef(const double *sumsq, double max_norm, float *coef) {
  *coef = 1.0f;
  if (!(max_norm > 0)) return false;
  *coef = (float)(max_norm / (sqrt(*sumsq) + 1e-6));
  return *coef < 1.0f;
}

/* Matrix blockIdx.y of len elements (the rows of blocks along x stride over
 * it); its new parameters' amax folded into amax[blockIdx.y * amax_stride]
 * (amax NULL: not wanted). */
__global__ void adamw_kernel(float *p, float *g, float *m, float *v, size_t len,
                             const double *sumsq, double max_norm, adamw_coefs c,
                             unsigned int *amax, size_t amax_stride) {
  float coef;
  const bool clip = clip_coef(sumsq, max_norm, &coef);
  const size_t base = (size_t)blockIdx.y * len;
  p += base, g += base, m += base, v += base;
  float mx = 0.0f;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < len;
       i += (size_t)gridDim.x * blockDim.x) {
    float gi = g[i];
    if (clip) {
      gi = __fmul_rn(gi, coef);
      g[i] = gi;
    }
    float pi = p[i], mi = m[i], vi = v[i];
    adamw_element(&c, gi, &pi, &mi, &vi); /* experiments/trainer/adamw_core.h, as optim.c */
    m[i] = mi;
    v[i] = vi;
    p[i] = pi;
    fold_finite_amax(pi, mx);
  }
  fold_output_amax(mx, amax ? amax + (size_t)blockIdx.y * amax_stride : nullptr);
}

/* Matrix blockIdx.y's finite amax into amax[blockIdx.y], 8 elements a
 * thread per step of the row's grid-stride. */
__global__ void __launch_bounds__(kThreads)
    amax_matrices_kernel(const gpu_matrix *matrices, unsigned int *amax) {
  using namespace exmy_cuda;
  const gpu_matrix a = matrices[blockIdx.y];
  const int vec = ((uintptr_t)a.x & 15u) == 0;
  float m = 0.0f;
  for (size_t base = global_index() * kPer; base < a.n; base += global_stride() * kPer) {
    float v[kPer];
    load8(a.x, base, a.n, vec, v);
    amax8(v, base, a.n, m);
  }
  fold_output_amax(m, amax + blockIdx.y);
}

/* Matrix blockIdx.y rounded in place under the scale of its amax word, as
 * exmy_cuda_quantize_tensor_scaled_f32's kernel rounds it (element indices,
 * and so sr's stream, counted from the matrix's start). */
template <int ID>
__global__ void __launch_bounds__(kThreads)
    quantize_matrices_kernel(const __grid_constant__ exmy_format rt,
                             const __grid_constant__ KOpts o, const gpu_matrix *matrices,
                             const unsigned int *amax, float fmax, int margin, int pow2) {
  using namespace exmy_cuda;
  const auto &f = kernel_format<ID>(rt);
  const gpu_matrix a = matrices[blockIdx.y];
  const int vec = ((uintptr_t)a.x & 15u) == 0;
  const float2 si = scale_pair_from_amax(amax[blockIdx.y], fmax, margin, pow2);
  for (size_t base = global_index() * kPer; base < a.n; base += global_stride() * kPer)
    quantize8_scaled<ID, EXMY_RNE>(f, o, a.x, a.x, base, a.n, vec, si.x, si.y);
}

/* The kernel of a table format with float32 scaled kernels; false for any
 * other (gpu_quantize_matrices_serves). */
template <int ID>
struct QuantizeMatricesOp {
  static bool run(const exmy_format &f, const KOpts &o, const gpu_matrix *matrices, int count,
                  size_t max_n, const unsigned int *amax, float fmax, int margin, int pow2,
                  cudaStream_t s) {
    if constexpr (ID == SPEC_GENERIC) {
      return false;
    } else {
      const dim3 grid(matrix_row_grid((max_n + exmy_cuda::kPer - 1) / exmy_cuda::kPer,
                                      (size_t)count),
                      (unsigned)count);
      quantize_matrices_kernel<ID><<<grid, kThreads, 0, s>>>(f, o, matrices, amax, fmax, margin,
                                                             pow2);
      return true;
    }
  }
};

/* The tensors of one gpu_adamw_coat call: tensor i ends before element
 * end[i] and steps with coefs[i]. */
struct AdamwTensors {
  size_t end[GPU_ADAMW_MAX_TENSORS];
  adamw_coefs coefs[GPU_ADAMW_MAX_TENSORS];
};

/* The moments' formats (m, v), their largest finite values, the
 * logarithms of their ranges (ln(fmax / smallest subnormal)) and what the
 * fast rounding needs of them (exmy_cuda::format_fast). */
struct CoatFormats {
  exmy_format f[2];
  float fmax[2];
  double log_range[2];
  exmy_cuda::FormatFast ff[2];
};

/* Group i of a run of n elements cut into groups of `group`: its first
 * element and its length (the last may be short). */
struct GroupSpan {
  size_t start, len;
};
__device__ __forceinline__ GroupSpan group_span(size_t i, size_t group, size_t n) {
  const size_t start = i * group;
  return {start, n - start < group ? n - start : group};
}

/* Groups a warp of adamw_coat_kernel takes at once: their scales are found
 * side by side, lane j (m) and lane 16 + j (v) for group j, so that the
 * double logarithms and powers of group_scale run once for all of them. */
constexpr int kCoatBatch = 16;
static_assert(kCoatBatch <= 16, "a batch's groups are lanes j and 16 + j");
/* Iterations of 32 elements a lane takes together, their loads first: one
 * at a time left the kernel waiting on memory.  With 3 blocks an SM (80
 * registers, a few spilled in the group setup) 2 did best on the H100 over
 * the 120m model's parameters (layers_gpu_test): 2.41 ms against 2.85 for 4
 * and 2.90 for 4 at 120 registers (2 blocks an SM). */
constexpr int kCoatUnroll = 2;

/* A warp per batch of kCoatBatch groups of `group` elements (grid-stride over
 * the batches, every lane through every iteration).  Group by group: the
 * AdamW step of its elements (adamw_kernel's), p and the clipped g written,
 * m and v written unrounded while their statistics gather, reduced over the
 * warp into the lanes of the group.  Then every lane finds its group's
 * scales at once, and group by group each lane reads back the m and v it
 * wrote and writes them rounded (exmy_cuda::group_round_try, where it fails
 * group_round: the library's rounding).  FAST: both moments' formats are
 * rounded by the hardware (group_round_try's branch-free form).  Every
 * access but the unrounded stores is marked streaming (evict first), so
 * that the read-back finds those in L2 more often: over the 120m model's
 * parameters 1.62 GB read from DRAM instead of 2.11 (the four arrays once:
 * 1.37). */
template <bool FAST>
__global__ void __launch_bounds__(kThreads, 3)
    adamw_coat_kernel(float *p, float *g, float *m, float *v, size_t n, size_t group,
                      const double *sumsq, double max_norm,
                      const __grid_constant__ AdamwTensors t,
                      const __grid_constant__ CoatFormats cf, int dre,
                      const __grid_constant__ KOpts o) {
  using namespace exmy_cuda;
  float coef;
  const bool clip = clip_coef(sumsq, max_norm, &coef);
  const int lane = (int)(threadIdx.x % 32), mine = lane / 16;
  const size_t groups = (n + group - 1) / group;
  for (size_t first = global_index() / 32 * kCoatBatch; first < groups;
       first += global_stride() / 32 * kCoatBatch) {
    const int count = groups - first < (size_t)kCoatBatch ? (int)(groups - first) : kCoatBatch;
    int ti = 0;
    while (first * group >= t.end[ti]) ti++;
    float my_amax = 0.0f, my_amin = INFINITY; /* of group lane % 16, moment `mine` */
    for (int j = 0; j < count; j++) {
      const auto [start, len] = group_span(first + j, group, n);
      float amax[2] = {0.0f, 0.0f}, amin[2] = {INFINITY, INFINITY};
      for (size_t i0 = 0; i0 < len; i0 += 32 * kCoatUnroll) {
        /* a chunk's loads first: kCoatUnroll of each array in flight */
        float gv[kCoatUnroll], pv[kCoatUnroll], mv[kCoatUnroll], vv[kCoatUnroll];
#pragma unroll
        for (int u = 0; u < kCoatUnroll; u++) {
          const size_t i = i0 + 32 * u + lane, at = start + i;
          if (i < len)
            gv[u] = __ldcs(g + at), pv[u] = __ldcs(p + at), mv[u] = __ldcs(m + at),
            vv[u] = __ldcs(v + at);
        }
#pragma unroll
        for (int u = 0; u < kCoatUnroll; u++) {
          const size_t i = i0 + 32 * u + lane, at = start + i;
          if (i >= len) break;
          while (at >= t.end[ti]) ti++;
          if (clip) {
            gv[u] = __fmul_rn(gv[u], coef);
            __stcs(g + at, gv[u]);
          }
          adamw_element(&t.coefs[ti], gv[u], &pv[u], &mv[u], &vv[u]);
          __stcs(p + at, pv[u]);
          m[at] = mv[u];
          v[at] = vv[u];
          group_stats_add(mv[u], amax[0], amin[0]);
          group_stats_add(vv[u], amax[1], amin[1]);
        }
      }
      for (int k = 0; k < 2; k++) group_stats_warp(amax[k], amin[k]);
      if ((lane & 15) == j) {
        my_amax = mine ? amax[1] : amax[0];
        my_amin = mine ? amin[1] : amin[0];
      }
    }
    const GroupScale own = group_scale(cf.fmax[mine], cf.log_range[mine], my_amax, my_amin, 0, 0,
                                       dre);
    const GroupFast own_fast = group_fast(cf.f[mine], cf.ff[mine], o, own);
    for (int j = 0; j < count; j++) {
      const auto [start, len] = group_span(first + j, group, n);
      GroupScale sc[2];
      GroupFast fast[2];
      for (int k = 0; k < 2; k++)
        group_take(own, own_fast, j + 16 * k, cf.ff[k], &sc[k], &fast[k]);
      group_tables(sc, fast);
      /* each lane reads back only what it wrote itself, a chunk at a time */
      for (size_t i0 = 0; i0 < len; i0 += 32 * kCoatUnroll) {
        float mv[kCoatUnroll], vv[kCoatUnroll];
#pragma unroll
        for (int u = 0; u < kCoatUnroll; u++) {
          const size_t i = i0 + 32 * u + lane, at = start + i;
          mv[u] = i < len ? __ldcs(m + at) : 0.0f;
          vv[u] = i < len ? __ldcs(v + at) : 0.0f;
        }
#pragma unroll
        for (int u = 0; u < kCoatUnroll; u++) {
          const size_t i = i0 + 32 * u + lane, at = start + i;
          if (i0 + 32 * u >= len) break; /* the warp's last iteration */
          bool m_ok, v_ok;
          float mq = group_round_try<FAST>(cf.f[0], o, mv[u], sc[0], fast[0], &m_ok);
          float vq = group_round_try<FAST>(cf.f[1], o, vv[u], sc[1], fast[1], &v_ok);
          if (i < len) {
            if (!m_ok) mq = group_round(cf.f[0], o, mv[u], sc[0], o.offset + at);
            if (!v_ok) vq = group_round(cf.f[1], o, vv[u], sc[1], o.offset + at);
            __stcs(m + at, mq);
            __stcs(v + at, vq);
          }
        }
      }
    }
  }
}

}  // namespace

/* ================================================================ API */

extern "C" {

void gpu_encoder_forward(float *out, const int *tokens, const float *wte, int N, int C,
                         cudaStream_t s) {
  if (N <= 0 || C <= 0) return;
  encoder_forward_kernel<<<block_per_row_grid(N), kThreads, 0, s>>>(out, tokens, wte, N, C);
}

void gpu_encoder_backward(float *dwte, const float *dout, const int *bucket_start,
                          const int *bucket_pos, int V, int C, cudaStream_t s) {
  if (V <= 0 || C <= 0) return;
  dim3 grid((C + 127) / 128, V < 65535 ? V : 65535);
  encoder_backward_kernel<<<grid, 128, 0, s>>>(dwte, dout, bucket_start, bucket_pos, V, C);
}

void gpu_token_buckets(const int *tokens, int N, int V, int *bucket_start, int *bucket_pos) {
  for (int v = 0; v <= V; v++) bucket_start[v] = 0;
  for (int i = 0; i < N; i++) bucket_start[tokens[i] + 1]++;
  for (int v = 0; v < V; v++) bucket_start[v + 1] += bucket_start[v];
  /* bucket_start[v] doubles as bucket v's fill cursor, then is shifted back */
  for (int i = 0; i < N; i++) bucket_pos[bucket_start[tokens[i]]++] = i;
  for (int v = V; v > 0; v--) bucket_start[v] = bucket_start[v - 1];
  bucket_start[0] = 0;
}

static void launch_rmsnorm_forward(float *out, float *rstd, float *inp, const float *add,
                                   const float *w, int N, int C, unsigned int *amax,
                                   cudaStream_t s) {
  if (N <= 0) return;
  with_row_regs(C, [&](auto J) {
    rmsnorm_forward_kernel<decltype(J)::value><<<warp_per_row_grid(N), 32 * kWarpsPerBlock, 0, s>>>(
        out, rstd, inp, add, w, N, C, amax);
  });
}

void gpu_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *w, int N, int C,
                         unsigned int *amax, cudaStream_t s) {
  launch_rmsnorm_forward(out, rstd, const_cast<float *>(inp), nullptr, w, N, C, amax, s);
}

void gpu_add_rmsnorm_forward(float *out, float *rstd, float *inp, const float *add,
                             const float *w, int N, int C, unsigned int *amax, cudaStream_t s) {
  launch_rmsnorm_forward(out, rstd, inp, add, w, N, C, amax, s);
}

bool gpu_rmsnorm_forward_bf16_serves(int C) {
  return C > 0 && C % exmy_cuda::kPer == 0 && C <= kRmsnormBf16MaxC;
}

/* Whether sc leaves no scale for the kernel to work out (of_amax): the
 * kernels other than gpu_bf16_storage_image's and RMSNorm's take a scale
 * given. */
static bool scale_given(const gpu_bf16_scaling *sc) { return !sc || !sc->of_amax.amax_bits; }

/* Whether the staged kernels (stage_row) take N rows of C: widths they
 * serve, and the rows they read or write whole (the input, the float32 or
 * bf16 addend, the sum) 16-byte aligned. */
static bool staged_rows_ok(int N, int C, const float *inp, const float *add,
                           const uint16_t *add_bf16, const float *sum) {
  return N >= 0 && gpu_rmsnorm_forward_bf16_serves(C) &&
         (((uintptr_t)inp | (uintptr_t)add | (uintptr_t)add_bf16 | (uintptr_t)sum) & 15u) == 0;
}

static cudaError_t launch_rmsnorm_forward_bf16(void *out, float *out_f32, float *rstd,
                                               float *inp, const float *add,
                                               const uint16_t *add_bf16, float *sum,
                                               const float *w, int N, int C,
                                               const exmy_format *f,
                                               const exmy_rounding_opts *o,
                                               const gpu_bf16_scaling *sc, cudaStream_t s) {
  if (!gpu_bf16_operand_serves(f) || exmy_rounding_opts_check(o) != 0 ||
      !staged_rows_ok(N, C, inp, add, add_bf16, sum))
    return cudaErrorInvalidValue;
  if (!N && scale_given(sc)) return cudaSuccess; /* else block 0 writes the scale */
  const gpu_bf16_scaling none = {nullptr, nullptr};
  const bool launched = with_spec_format<EXMY_GPU_BF16, RmsnormBf16Op>(
      f, *f, kopts_of(o), (uint16_t *)out, out_f32, rstd, inp, add, add_bf16, sum, w, N, C,
      sc ? *sc : none, s);
  return launched ? cudaGetLastError() : cudaErrorInvalidValue;
}

cudaError_t gpu_rmsnorm_forward_bf16(void *out, float *out_f32, float *rstd, float *inp,
                                     const float *add, const float *w, int N, int C,
                                     const exmy_format *f, const exmy_rounding_opts *o,
                                     const gpu_bf16_scaling *sc, cudaStream_t s) {
  return launch_rmsnorm_forward_bf16(out, out_f32, rstd, inp, add, nullptr, nullptr, w, N, C, f,
                                     o, sc, s);
}

cudaError_t gpu_rmsnorm_forward_amax(float *rstd, float *inp, const float *add,
                                     const float *base, const uint16_t *add_bf16,
                                     const float *w, int N, int C, unsigned int *amax,
                                     cudaStream_t s) {
  float *row_in = add_bf16 ? const_cast<float *>(base) : inp, *sum = add_bf16 ? inp : nullptr;
  if (!amax || (add && add_bf16) || !add_bf16 != !base ||
      !staged_rows_ok(N, C, row_in, add, add_bf16, sum))
    return cudaErrorInvalidValue;
  if (!N) return cudaSuccess;
  rmsnorm_forward_amax_kernel<<<warp_per_row_grid(N), kThreads,
                                sizeof(float) * kWarpsPerBlock * C, s>>>(rstd, row_in, add,
                                                                         add_bf16, sum, w, N, C,
                                                                         amax);
  return cudaGetLastError();
}

cudaError_t gpu_add_bf16_rmsnorm_forward_bf16(void *out, float *out_f32, float *rstd, float *sum,
                                              const float *inp, const uint16_t *add,
                                              const float *w, int N, int C,
                                              const exmy_format *f,
                                              const exmy_rounding_opts *o,
                                              const gpu_bf16_scaling *sc, cudaStream_t s) {
  if (!sum || !add) return cudaErrorInvalidValue;
  return launch_rmsnorm_forward_bf16(out, out_f32, rstd, const_cast<float *>(inp), nullptr, add,
                                     sum, w, N, C, f, o, sc, s);
}

void gpu_rmsnorm_set_rows_in_registers(bool on) { rmsnorm_rows_in_registers = on; }

void gpu_rmsnorm_backward(float *dinp, float *dw, const float *dout, const float *inp,
                          const float *w, const float *rstd, int N, int C, unsigned int *amax,
                          cudaStream_t s) {
  gpu_rmsnorm_backward_bf16(dinp, nullptr, dw, dout, inp, w, rstd, N, C, amax, s);
}

void gpu_rmsnorm_backward_bf16(float *dinp, void *dinp_bf16, float *dw, const float *dout,
                               const float *inp, const float *w, const float *rstd, int N, int C,
                               unsigned int *amax, cudaStream_t s) {
  if (N <= 0 || C <= 0) return;
  __nv_bfloat16 *img = (__nv_bfloat16 *)dinp_bf16;
  const int chunks = (N + DW_ROWS - 1) / DW_ROWS;
  float *partial = (float *)cached_scratch(&dw_scratch, &dw_scratch_cap,
                                           (size_t)chunks * C * sizeof(float));
  const unsigned chunk_blocks = chunks < 65535 ? chunks : 65535;
  with_row_regs(C, [&](auto J) {
    constexpr int kJ = decltype(J)::value;
    if constexpr (kJ > 0) {
      rmsnorm_backward_fused_kernel<kJ>
          <<<chunk_blocks, 32 * DW_GROUPS, sizeof(float) * DW_GROUPS * C, s>>>(
              dinp, img, partial, dout, inp, w, rstd, N, C, chunks, amax);
    } else {
      rmsnorm_backward_dinp_kernel<<<warp_per_row_grid(N), 32 * kWarpsPerBlock, 0, s>>>(
          dinp, img, dout, inp, w, rstd, N, C, amax);
      rmsnorm_dw_partial_kernel<<<dim3((C + 31) / 32, chunk_blocks), dim3(32, DW_GROUPS), 0, s>>>(
          partial, dout, inp, rstd, N, C, chunks);
    }
  });
  rmsnorm_dw_final_kernel<<<(C + 127) / 128, 128, 0, s>>>(dw, partial, C, chunks);
}

void gpu_rope_forward(float *x, const float *cos_t, const float *sin_t, int B, int T, int nh,
                      int hs, cudaStream_t s) {
  launch_rope<false>(x, cos_t, sin_t, B, T, nh, hs, 1.0f, nullptr, s);
}

void gpu_rope_backward(float *dx, const float *cos_t, const float *sin_t, int B, int T, int nh,
                       int hs, unsigned int *amax, cudaStream_t s) {
  launch_rope<false>(dx, cos_t, sin_t, B, T, nh, hs, -1.0f, amax, s);
}

void gpu_rope_forward_act_bf16(float *x, const float *cos_t, const float *sin_t, int B, int T,
                               int nh, int hs, cudaStream_t s) {
  launch_rope<true>(x, cos_t, sin_t, B, T, nh, hs, 1.0f, nullptr, s);
}

void gpu_rope_backward_act_bf16(float *dx, const float *cos_t, const float *sin_t, int B, int T,
                                int nh, int hs, unsigned int *amax, cudaStream_t s) {
  launch_rope<true>(dx, cos_t, sin_t, B, T, nh, hs, -1.0f, amax, s);
}

void gpu_swiglu_forward(float *out, const float *h1, const float *h3, size_t n,
                        unsigned int *amax, cudaStream_t s) {
  launch_swiglu_forward<false>(out, h1, h3, n, amax, s);
}

void gpu_swiglu_backward(float *dh1, float *dh3, const float *dout, const float *h1,
                         const float *h3, size_t n, cudaStream_t s) {
  launch_swiglu_backward<false>(dh1, dh3, dout, h1, h3, n, s);
}

void gpu_swiglu_forward_act_bf16(float *out, const float *h1, const float *h3, size_t n,
                                 unsigned int *amax, cudaStream_t s) {
  launch_swiglu_forward<true>(out, h1, h3, n, amax, s);
}

void gpu_swiglu_backward_act_bf16(float *dh1, float *dh3, const float *dout, const float *h1,
                                  const float *h3, size_t n, cudaStream_t s) {
  launch_swiglu_backward<true>(dh1, dh3, dout, h1, h3, n, s);
}

static bool bf16_storage_ok(size_t n, std::initializer_list<const void *> ptrs) {
  for (const void *p : ptrs)
    if ((uintptr_t)p % 16) return false;
  return n % 8 == 0;
}

cudaError_t gpu_swiglu_forward_bf16_storage(uint16_t *out, const uint16_t *h1,
                                            const uint16_t *h3, size_t n, unsigned int *amax,
                                            cudaStream_t s) {
  if (!bf16_storage_ok(n, {out, h1, h3})) return cudaErrorInvalidValue;
  if (!n) return cudaSuccess;
  ensure_sigmoid_table(s);
  swiglu_forward_bf16_storage_kernel<<<elementwise_grid(n / 8), kThreads, 0, s>>>(out, h1, h3,
                                                                                  n / 8, amax);
  return cudaGetLastError();
}

cudaError_t gpu_swiglu_backward_bf16_storage(uint16_t *dh1, uint16_t *dh3, uint16_t *hg,
                                             const uint16_t *dout, const uint16_t *h1,
                                             const uint16_t *h3, size_t n, unsigned int *amax1,
                                             unsigned int *amax3, cudaStream_t s) {
  if (!bf16_storage_ok(n, {dh1, dh3, dout, h1, h3}) || (hg && !bf16_storage_ok(n, {hg})))
    return cudaErrorInvalidValue;
  if (!n) return cudaSuccess;
  ensure_sigmoid_table(s);
  if (hg)
    swiglu_backward_bf16_storage_kernel<true><<<elementwise_grid(n / 8), kThreads, 0, s>>>(
        dh1, dh3, hg, dout, h1, h3, n / 8, amax1, amax3);
  else
    swiglu_backward_bf16_storage_kernel<false><<<elementwise_grid(n / 8), kThreads, 0, s>>>(
        dh1, dh3, nullptr, dout, h1, h3, n / 8, amax1, amax3);
  return cudaGetLastError();
}

cudaError_t gpu_rope_bf16_storage(uint16_t *out, const uint16_t *x, const float *cos_t,
                                  const float *sin_t, int B, int T, int nh, int hs, bool backward,
                                  unsigned int *amax, cudaStream_t s) {
  if (B < 0 || T <= 0 || nh <= 0 || hs <= 0 || hs % 8 || (((uintptr_t)out | (uintptr_t)x) & 15u))
    return cudaErrorInvalidValue;
  const size_t n8 = (size_t)B * T * nh * hs / 8;
  if (!n8) return cudaSuccess;
  rope_bf16_storage_kernel<<<elementwise_grid(n8), kThreads, 0, s>>>(
      out, x, cos_t, sin_t, n8, T, nh * hs, hs / 2, backward ? -1.0f : 1.0f, amax);
  return cudaGetLastError();
}

/* The table rows of the bf16 operand path (every one bf16-exact). */
bool gpu_bf16_operand_serves(const exmy_format *f) {
  const int id = spec_id(f);
  return id != SPEC_GENERIC && (spec_kernels(id) & EXMY_GPU_BF16);
}

/* Valid options for the two gradients' images, alike but for the sr
 * stream offset (one kernel rounds both). */
static bool gradient_pair_opts_ok(const exmy_rounding_opts *o1, const exmy_rounding_opts *o3) {
  return exmy_rounding_opts_check(o1) == 0 && exmy_rounding_opts_check(o3) == 0 &&
         o1->mode == o3->mode && o1->saturate == o3->saturate &&
         o1->flush_subnormals == o3->flush_subnormals && o1->seed == o3->seed &&
         o1->sr_bits == o3->sr_bits;
}

cudaError_t gpu_swiglu_backward_bf16(void *dh1, void *dh3, const float *dout, const float *h1,
                                     const float *h3, size_t n, const exmy_format *f,
                                     const exmy_rounding_opts *o1, const exmy_rounding_opts *o3,
                                     const gpu_bf16_scaling *sc1, const gpu_bf16_scaling *sc3,
                                     cudaStream_t s) {
  if (!gpu_bf16_operand_serves(f) || !gradient_pair_opts_ok(o1, o3) || !scale_given(sc1) ||
      !scale_given(sc3))
    return cudaErrorInvalidValue;
  if (!n) return cudaSuccess;
  const gpu_bf16_scaling none = {nullptr, nullptr};
  const bool launched = with_spec_format<EXMY_GPU_BF16, SwigluBf16Op>(
      f, *f, kopts_of(o1), kopts_of(o3), (uint16_t *)dh1, (uint16_t *)dh3, dout, h1, h3, n,
      sc1 ? *sc1 : none, sc3 ? *sc3 : none, s);
  return launched ? cudaGetLastError() : cudaErrorInvalidValue;
}

cudaError_t gpu_swiglu_forward_bf16(void *out, const float *h1, const float *h3, size_t n,
                                    const exmy_format *f, const exmy_rounding_opts *o,
                                    const gpu_bf16_scaling *sc, cudaStream_t s) {
  if (!gpu_bf16_operand_serves(f) || exmy_rounding_opts_check(o) != 0 || !scale_given(sc))
    return cudaErrorInvalidValue;
  if (!n) return cudaSuccess;
  const gpu_bf16_scaling none = {nullptr, nullptr};
  const bool launched = with_spec_format<EXMY_GPU_BF16, SwigluFwdBf16Op>(
      f, *f, kopts_of(o), (uint16_t *)out, h1, h3, n, sc ? *sc : none, s);
  return launched ? cudaGetLastError() : cudaErrorInvalidValue;
}

/* Blocks of exmy_cuda::kThreads threads for n bf16 values, 8 a thread. */
static unsigned image_blocks(size_t n) {
  return blocks_for(n / exmy_cuda::kPer, exmy_cuda::kThreads);
}

cudaError_t gpu_bf16_storage_image(void *y, const uint16_t *x, size_t n, const exmy_format *f,
                                   const exmy_rounding_opts *o, const gpu_bf16_scaling *sc,
                                   cudaStream_t s) {
  if (!gpu_bf16_operand_serves(f) || exmy_rounding_opts_check(o) != 0 ||
      !bf16_storage_ok(n, {y, x}))
    return cudaErrorInvalidValue;
  const gpu_bf16_scaling c = sc ? *sc : gpu_bf16_scaling{nullptr, nullptr};
  if (!n && scale_given(&c)) return cudaSuccess; /* else block 0 writes the scale */
  const KOpts ko = kopts_of(o);
  const bool launched =
      with_spec_format<EXMY_GPU_BF16, Bf16ImageLaunch>(f, ko.mode, [&](auto id, auto mode) {
        bf16_storage_image_kernel<decltype(id)::value, decltype(mode)::value>
            <<<std::max(1u, image_blocks(n)), exmy_cuda::kThreads, 0, s>>>(
                *f, ko, (uint16_t *)y, x, n, c.scale_inv, c.of_amax, c.amax_bits);
      });
  return launched ? cudaGetLastError() : cudaErrorInvalidValue;
}

cudaError_t gpu_bf16_storage_amax(const uint16_t *x, size_t n, unsigned int *amax,
                                  cudaStream_t s) {
  if (!amax || !bf16_storage_ok(n, {x})) return cudaErrorInvalidValue;
  if (!n) return cudaSuccess;
  bf16_storage_amax_kernel<<<image_blocks(n), exmy_cuda::kThreads, 0, s>>>(x, n, amax);
  return cudaGetLastError();
}

cudaError_t gpu_swiglu_forward_bf16_storage_image(void *out, const uint16_t *h1,
                                                  const uint16_t *h3, size_t n,
                                                  const exmy_format *f,
                                                  const exmy_rounding_opts *o,
                                                  const gpu_bf16_scaling *sc, cudaStream_t s) {
  if (!gpu_bf16_operand_serves(f) || exmy_rounding_opts_check(o) != 0 || !scale_given(sc) ||
      !bf16_storage_ok(n, {out, h1, h3}))
    return cudaErrorInvalidValue;
  if (!n) return cudaSuccess;
  ensure_sigmoid_table(s);
  const gpu_bf16_scaling c = sc ? *sc : gpu_bf16_scaling{nullptr, nullptr};
  const KOpts ko = kopts_of(o);
  const bool launched =
      with_spec_format<EXMY_GPU_BF16, Bf16ImageLaunch>(f, ko.mode, [&](auto id, auto mode) {
        swiglu_forward_bf16_storage_image_kernel<decltype(id)::value, decltype(mode)::value>
            <<<image_blocks(n), exmy_cuda::kThreads, 0, s>>>(*f, ko, (uint16_t *)out, h1, h3, n,
                                                             c.scale_inv, c.amax_bits);
      });
  return launched ? cudaGetLastError() : cudaErrorInvalidValue;
}

cudaError_t gpu_swiglu_backward_bf16_storage_image(
    void *dh1, void *dh3, const uint16_t *dout, const uint16_t *h1, const uint16_t *h3, size_t n,
    const exmy_format *f, const exmy_rounding_opts *o1, const exmy_rounding_opts *o3,
    const gpu_bf16_scaling *sc1, const gpu_bf16_scaling *sc3, cudaStream_t s) {
  if (!gpu_bf16_operand_serves(f) || !gradient_pair_opts_ok(o1, o3) || !scale_given(sc1) ||
      !scale_given(sc3) || !bf16_storage_ok(n, {dh1, dh3, dout, h1, h3}))
    return cudaErrorInvalidValue;
  if (!n) return cudaSuccess;
  ensure_sigmoid_table(s);
  const gpu_bf16_scaling c1 = sc1 ? *sc1 : gpu_bf16_scaling{nullptr, nullptr},
                         c3 = sc3 ? *sc3 : gpu_bf16_scaling{nullptr, nullptr};
  const KOpts k1 = kopts_of(o1), k3 = kopts_of(o3);
  const bool launched =
      with_spec_format<EXMY_GPU_BF16, Bf16ImageLaunch>(f, k1.mode, [&](auto id, auto mode) {
        swiglu_backward_bf16_storage_image_kernel<decltype(id)::value, decltype(mode)::value>
            <<<image_blocks(n), exmy_cuda::kThreads, 0, s>>>(
                *f, k1, k3, (uint16_t *)dh1, (uint16_t *)dh3, dout, h1, h3, n, c1.scale_inv,
                c3.scale_inv, c1.amax_bits, c3.amax_bits);
      });
  return launched ? cudaGetLastError() : cudaErrorInvalidValue;
}

cudaError_t gpu_rope_bf16(void *out, const float *x, const float *cos_t, const float *sin_t,
                          int B, int T, int nh, int hs, bool backward, const exmy_format *f,
                          const exmy_rounding_opts *o, const gpu_bf16_scaling *sc,
                          cudaStream_t s) {
  if (!gpu_bf16_operand_serves(f) || exmy_rounding_opts_check(o) != 0 || !scale_given(sc) ||
      B < 0 || T <= 0 || nh <= 0 || hs <= 0 || hs % 8)
    return cudaErrorInvalidValue;
  const size_t n = (size_t)B * T * nh * hs;
  if (!n) return cudaSuccess;
  const gpu_bf16_scaling none = {nullptr, nullptr};
  const bool launched = with_spec_format<EXMY_GPU_BF16, RopeBf16Op>(
      f, *f, kopts_of(o), (uint16_t *)out, x, cos_t, sin_t, n, T, nh * hs, hs / 2,
      backward ? -1.0f : 1.0f, sc ? *sc : none, s);
  return launched ? cudaGetLastError() : cudaErrorInvalidValue;
}

cudaError_t gpu_swiglu_backward_amax(const float *dout, const float *h1, const float *h3,
                                     size_t n, unsigned int *amax1, unsigned int *amax3,
                                     cudaStream_t s) {
  if (!n || (!amax1 && !amax3)) return cudaSuccess;
  const int vec = (((uintptr_t)dout | (uintptr_t)h1 | (uintptr_t)h3) & 15u) == 0;
  const unsigned blocks = blocks_for((n + exmy_cuda::kPer - 1) / exmy_cuda::kPer,
                                     exmy_cuda::kThreads);
  swiglu_backward_amax_kernel<<<blocks, exmy_cuda::kThreads, 0, s>>>(dout, h1, h3, n, vec, amax1,
                                                                     amax3);
  return cudaGetLastError();
}

void gpu_add_inplace(float *y, const float *x, size_t n, cudaStream_t s) {
  if (!n) return;
  add_inplace_kernel<<<elementwise_grid(n), kThreads, 0, s>>>(y, x, n);
}

void gpu_add_bf16(float *y, const float *a, const uint16_t *x, size_t n, cudaStream_t s) {
  if (!n) return;
  if (((uintptr_t)y | (uintptr_t)a | (uintptr_t)x) % 16 == 0 && n % 8 == 0)
    add_bf16_kernel<true><<<elementwise_grid(n / 8), kThreads, 0, s>>>(y, a, x, n);
  else
    add_bf16_kernel<false><<<elementwise_grid(n), kThreads, 0, s>>>(y, a, x, n);
}

void gpu_sum_bf16(float *y, const uint16_t *x0, const uint16_t *x1, const uint16_t *x2, size_t n,
                  cudaStream_t s) {
  if (!n) return;
  if (((uintptr_t)y | (uintptr_t)x0 | (uintptr_t)x1 | (uintptr_t)x2) % 16 == 0 && n % 8 == 0)
    sum_bf16_kernel<true><<<elementwise_grid(n / 8), kThreads, 0, s>>>(y, x0, x1, x2, n);
  else
    sum_bf16_kernel<false><<<elementwise_grid(n), kThreads, 0, s>>>(y, x0, x1, x2, n);
}

/* Every float32 bit pattern: act_bf16 on the GPU against the core. */
__global__ void act_bf16_mismatch_kernel(unsigned long long *count) {
  unsigned long long bad = 0;
  for (uint64_t i = global_index(); i < (1ull << 32); i += global_stride()) {
    const float x = __uint_as_float((uint32_t)i), a = act_bf16(x), c = act_bf16_core(x);
    bad += isnan(a) != isnan(c) || (!isnan(a) && __float_as_uint(a) != __float_as_uint(c));
  }
  if (bad) atomicAdd(count, bad);
}

long long gpu_act_bf16_core_mismatches(void) {
  unsigned long long *d = nullptr, h = 0;
  if (cudaMalloc((void **)&d, sizeof h) != cudaSuccess) return -1;
  cudaMemset(d, 0, sizeof h);
  act_bf16_mismatch_kernel<<<4096, kThreads>>>(d);
  const bool ok = cudaMemcpy(&h, d, sizeof h, cudaMemcpyDeviceToHost) == cudaSuccess;
  cudaFree(d);
  return ok ? (long long)h : -1;
}

void gpu_scores_act_bf16(float *x, size_t n, int hs, cudaStream_t s) {
  if (!n) return;
  const float sqrt_hs = (float)sqrt((double)hs); /* model.c's */
  scores_act_bf16_kernel<<<elementwise_grid(n), kThreads, 0, s>>>(x, n, sqrt_hs);
}

void gpu_causal_softmax_forward(float *att, long rows, int T, cudaStream_t s) {
  if (rows <= 0) return;
  causal_softmax_forward_kernel<<<warp_per_row_grid(rows), 32 * kWarpsPerBlock, 0, s>>>(att, rows,
                                                                                       T);
}

void gpu_causal_softmax_backward(float *datt, const float *att, long rows, int T, float scale,
                                 cudaStream_t s) {
  if (rows <= 0) return;
  causal_softmax_backward_kernel<<<warp_per_row_grid(rows), 32 * kWarpsPerBlock, 0, s>>>(datt, att,
                                                                                    rows, T, scale);
}

void gpu_crossentropy_forward(float *probs, float *losses, const int *targets, int N, int V,
                              cudaStream_t s) {
  if (N <= 0) return;
  crossentropy_forward_kernel<<<warp_per_row_grid(N), 32 * kWarpsPerBlock, 0, s>>>(probs, losses,
                                                                              targets, N, V);
}

void gpu_logit_sharpness_forward(float *phi, const float *logits, const int *targets, int N,
                                 int V, cudaStream_t s) {
  if (N <= 0) return;
  logit_sharpness_kernel<<<warp_per_row_grid(N), 32 * kWarpsPerBlock, 0, s>>>(phi, logits, targets,
                                                                             N, V);
}

void gpu_crossentropy_backward(float *dlogits, const float *probs, const int *targets, int N,
                               int V, float scale, cudaStream_t s) {
  if (N <= 0 || V <= 0) return;
  crossentropy_backward_kernel<<<block_per_row_grid(N), kThreads, 0, s>>>(dlogits, probs, targets,
                                                                          N, V, scale);
}

void gpu_mean(const float *x, int n, double *out, cudaStream_t s) {
  mean_kernel<<<1, kMeanThreads, 0, s>>>(x, n, out);
}

size_t gpu_sumsq_scratch(size_t n) { return sumsq_blocks(n); }

uint64_t gpu_layers_scratch_epoch(void) { return scratch_epoch; }

void gpu_sumsq(const float *g, size_t n, double *scratch, double *out, cudaStream_t s) {
  const size_t blocks = sumsq_blocks(n);
  sumsq_partial_kernel<<<(unsigned)blocks, kSumsqThreads, 0, s>>>(g, n, scratch);
  sumsq_final_kernel<<<1, kSumsqMaxBlocks, 0, s>>>(scratch, (int)blocks, out);
}

void gpu_adamw(float *p, float *g, float *m, float *v, size_t n, const double *sumsq,
               double max_norm, const adamw_coefs *c, cudaStream_t s) {
  if (!n) return;
  adamw_kernel<<<elementwise_grid(n), kThreads, 0, s>>>(p, g, m, v, n, sumsq, max_norm, *c,
                                                        nullptr, 0);
}

void gpu_adamw_fold(float *p, float *g, float *m, float *v, size_t n, const double *sumsq,
                    double max_norm, const adamw_coefs *c, size_t matrices, unsigned int *amax,
                    size_t amax_stride, cudaStream_t s) {
  if (!n || !matrices) return;
  const size_t len = n / matrices;
  adamw_kernel<<<dim3(matrix_row_grid(len, matrices), (unsigned)matrices), kThreads, 0, s>>>(
      p, g, m, v, len, sumsq, max_norm, *c, amax, amax_stride);
}

void gpu_amax_matrices(const gpu_matrix *matrices, int count, size_t max_n, unsigned int *amax,
                       cudaStream_t s) {
  if (count < 1 || !max_n) return;
  const dim3 grid(matrix_row_grid((max_n + exmy_cuda::kPer - 1) / exmy_cuda::kPer, (size_t)count),
                  (unsigned)count);
  amax_matrices_kernel<<<grid, kThreads, 0, s>>>(matrices, amax);
}

bool gpu_quantize_matrices_serves(const exmy_format *f, const exmy_rounding_opts *o) {
  const int id = spec_id(f);
  return id != SPEC_GENERIC && (spec_kernels(id) & EXMY_GPU_SCALED) && o->mode == EXMY_RNE &&
         exmy_rounding_opts_check(o) == 0;
}

cudaError_t gpu_quantize_matrices_scaled(const exmy_format *f, const exmy_rounding_opts *o,
                                         int margin, bool pow2, const gpu_matrix *matrices,
                                         int count, size_t max_n, const unsigned int *amax,
                                         cudaStream_t s) {
  if (!gpu_quantize_matrices_serves(f, o) || count > 65535) return cudaErrorInvalidValue;
  if (count < 1 || !max_n) return cudaSuccess;
  exmy_format_info info;
  exmy_format_get_info(f, &info);
  with_spec_format<EXMY_GPU_SCALED, QuantizeMatricesOp>(f, *f, kopts_of(o), matrices, count,
                                                        max_n, amax, info.max, margin,
                                                        pow2 ? 1 : 0, s);
  return cudaGetLastError();
}

cudaError_t gpu_adamw_coat(float *p, float *g, float *m, float *v, const size_t *lengths,
                           const adamw_coefs *coefs, int ntensors, const double *sumsq,
                           double max_norm, const exmy_format formats[2], int group, bool dre,
                           cudaStream_t s) {
  if (ntensors < 1 || ntensors > GPU_ADAMW_MAX_TENSORS || group < 1) return cudaErrorInvalidValue;
  AdamwTensors t;
  size_t n = 0;
  for (int i = 0; i < GPU_ADAMW_MAX_TENSORS; i++) {
    if (i < ntensors) {
      n += lengths[i];
      t.coefs[i] = coefs[i];
    } else {
      t.coefs[i] = coefs[ntensors - 1];
    }
    t.end[i] = i < ntensors - 1 ? n : SIZE_MAX; /* the last tensor takes the rest */
  }
  if (!n) return cudaSuccess;
  exmy_rounding_opts o = {};
  o.mode = EXMY_RNE;
  o.saturate = true;
  CoatFormats cf;
  for (int k = 0; k < 2; k++) {
    exmy_format_info info;
    exmy_format_get_info(&formats[k], &info);
    cf.f[k] = formats[k];
    cf.fmax[k] = info.max;
    cf.log_range[k] = log((double)info.max / (double)info.min_subnormal);
    cf.ff[k] = exmy_cuda::format_fast(formats[k], o.saturate);
  }
  const size_t groups = (n + (size_t)group - 1) / (size_t)group;
  const size_t batches = (groups + kCoatBatch - 1) / kCoatBatch;
  size_t blocks = (batches + kWarpsPerBlock - 1) / kWarpsPerBlock;
  if (blocks > 32768) blocks = 32768;
  const bool fast = cf.ff[0].hw && cf.ff[1].hw && cf.ff[0].tabled && cf.ff[1].tabled &&
                    cf.ff[0].narrow && cf.ff[1].narrow; /* FAST's expansion is the float form */
  (fast ? adamw_coat_kernel<true> : adamw_coat_kernel<false>)<<<(unsigned)blocks, kThreads, 0,
                                                                s>>>(
      p, g, m, v, n, (size_t)group, sumsq, max_norm, t, cf, dre ? 1 : 0, kopts_of(&o));
  return cudaGetLastError();
}

}  /* extern "C" */

/* ------------------------------------------- Smooth-SwiGLU per token row */
/* model.h's smooth_swiglu_*: one warp per row t finds s_t from h3's row
 * (the max is exact, so every kernel finds the same s_t), then goes over the
 * row with the CPU's operations in the CPU's order. */

namespace {

__device__ __forceinline__ float smooth_swiglu_row_scale(const float *h3_row, int H, int lane) {
  float amax = 0.0f;
  for (int j = lane; j < H; j += 32) amax = fmaxf(amax, fabsf(h3_row[j]));
  return exmy_core_row_scale_from_amax(warp_max(amax));
}

__global__ void smooth_swiglu_forward_kernel(float *out, const float *h1, const float *h3, int N,
                                             int H) {
  const int lane = threadIdx.x & 31;
  const long t = (long)blockIdx.x * kWarpsPerBlock + threadIdx.x / 32;
  if (t >= N) return;
  const size_t row = (size_t)t * H;
  const float s = smooth_swiglu_row_scale(h3 + row, H, lane);
  for (int j = lane; j < H; j += 32) {
    const float a = h1[row + j], sig = sigmoid_as_cpu(a);
    out[row + j] = __fmul_rn(__fmul_rn(a, sig), __fdiv_rn(h3[row + j], s));
  }
}

__global__ void smooth_swiglu_backward_kernel(float *dh1, float *dh3, const float *dout,
                                              const float *h1, const float *h3, int N, int H) {
  const int lane = threadIdx.x & 31;
  const long t = (long)blockIdx.x * kWarpsPerBlock + threadIdx.x / 32;
  if (t >= N) return;
  const size_t row = (size_t)t * H;
  const float s = smooth_swiglu_row_scale(h3 + row, H, lane);
  for (int j = lane; j < H; j += 32) {
    const size_t i = row + j;
    const float a = h1[i], sig = sigmoid_as_cpu(a), d = dout[i], u = __fdiv_rn(h3[i], s);
    dh3[i] = __fdiv_rn(__fmul_rn(__fmul_rn(d, a), sig), s);
    dh1[i] = __fmul_rn(__fmul_rn(__fmul_rn(d, u), sig),
                       __fadd_rn(1.0f, __fmul_rn(a, __fsub_rn(1.0f, sig))));
  }
}

__global__ void smooth_swiglu_scale_rows_kernel(float *dst, const float *src, const float *h3,
                                                int N, int C, int H) {
  const int lane = threadIdx.x & 31;
  const long t = (long)blockIdx.x * kWarpsPerBlock + threadIdx.x / 32;
  if (t >= N) return;
  const float s = smooth_swiglu_row_scale(h3 + (size_t)t * H, H, lane);
  for (int j = lane; j < C; j += 32) dst[(size_t)t * C + j] = __fmul_rn(src[(size_t)t * C + j], s);
}

}  /* namespace */

extern "C" {

void gpu_smooth_swiglu_forward(float *out, const float *h1, const float *h3, int N, int H,
                               cudaStream_t s) {
  if (N <= 0) return;
  smooth_swiglu_forward_kernel<<<warp_per_row_grid(N), 32 * kWarpsPerBlock, 0, s>>>(out, h1, h3,
                                                                                    N, H);
}

void gpu_smooth_swiglu_backward(float *dh1, float *dh3, const float *dout, const float *h1,
                                const float *h3, int N, int H, cudaStream_t s) {
  if (N <= 0) return;
  smooth_swiglu_backward_kernel<<<warp_per_row_grid(N), 32 * kWarpsPerBlock, 0, s>>>(
      dh1, dh3, dout, h1, h3, N, H);
}

void gpu_smooth_swiglu_scale_rows(float *dst, const float *src, const float *h3, int N, int C,
                                  int H, cudaStream_t s) {
  if (N <= 0) return;
  smooth_swiglu_scale_rows_kernel<<<warp_per_row_grid(N), 32 * kWarpsPerBlock, 0, s>>>(
      dst, src, h3, N, C, H);
}

}  /* extern "C" */
