/*
 * bench: GPU throughput of the exmy kernels against a device-to-device copy
 * measured in the same run (the "x copy" column; "target" states the goal).
 *
 * Bytes count the fewest the operation must move: each input read once, each
 * output written once (quantize 8 B/element, encode to uint8 5 B, MX encode
 * 5 + 1/32 B, statistics 8 B read).  The copy's bytes are read + write.  Each
 * line is the median of `reps` timed runs after two warm-ups; the checksum is
 * a sum over the output's 32-bit words, so that runs can be compared.
 *
 * Usage: bench [log2_elements (28)] [reps (20)]
 */
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/bench.h"
#include "cuda/exmy_cuda.h"
#include "lib/exmy.h"
#include "lib/philox.h"

/* Test data: uniform significands over 16 binades around 1, like activations
 * after normalisation, with sign. */
__global__ void k_fill(float *x, size_t n, uint64_t seed) {
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    uint32_t w[4];
    exmy_sr_block(seed, i, w);
    const float m = (float)(w[0] >> 8) * (1.0f / 16777216.0f) - 0.5f;
    x[i] = ldexpf(m, (int)(w[1] % 16) - 8);
  }
}

__global__ void k_checksum(const uint32_t *p, size_t words, unsigned long long *out) {
  unsigned long long s = 0;
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < words; i += stride)
    s += (unsigned long long)p[i] * (1 + (i & 7));
  atomicAdd(out, s);
}

/* The hardware's own conversion, as a reference line: 8 elements per thread,
 * cvt.rn.satfinite.e4m3x2.f32. */
__global__ void k_hw_e4m3(const float4 *x, uint2 *y, size_t groups) {
  const size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= groups) return;
  const float4 a = x[2 * t], b = x[2 * t + 1];
  uint32_t p0 = __nv_cvt_float2_to_fp8x2(make_float2(a.x, a.y), __NV_SATFINITE, __NV_E4M3) |
                (uint32_t)__nv_cvt_float2_to_fp8x2(make_float2(a.z, a.w), __NV_SATFINITE, __NV_E4M3) << 16;
  uint32_t p1 = __nv_cvt_float2_to_fp8x2(make_float2(b.x, b.y), __NV_SATFINITE, __NV_E4M3) |
                (uint32_t)__nv_cvt_float2_to_fp8x2(make_float2(b.z, b.w), __NV_SATFINITE, __NV_E4M3) << 16;
  y[t] = make_uint2(p0, p1);
}

static int g_reps = 20;

static unsigned long long checksum(const void *p, size_t bytes) {
  unsigned long long *d, h = 0;
  CK(cudaMalloc(&d, sizeof *d));
  CK(cudaMemset(d, 0, sizeof *d));
  k_checksum<<<1024, 256>>>((const uint32_t *)p, bytes / 4, d);
  CK(cudaMemcpy(&h, d, sizeof h, cudaMemcpyDeviceToHost));
  CK(cudaFree(d));
  return h;
}

static double g_copy_gbs;

static void row(const char *op, const char *fmt, const char *mode, size_t n,
                double bytes_per_elem, double ms, const void *out, size_t out_bytes,
                const char *target) {
  const double gelem = n / (ms * 1e6), gbs = n * bytes_per_elem / (ms * 1e6);
  printf("%-14s %-16s %-5s %9.1f %9.1f %7.3f   %016llx  %s\n", op, fmt, mode, gelem, gbs,
         gbs / g_copy_gbs, out ? checksum(out, out_bytes) : 0ull, target);
  fflush(stdout);
}

int main(int argc, char **argv) {
  const int lg = argc > 1 ? atoi(argv[1]) : 28;
  if (argc > 2) g_reps = atoi(argv[2]);
  const size_t n = (size_t)1 << lg;
  float *x, *y;
  uint8_t *codes, *scales;
  CK(cudaMalloc(&x, n * 4));
  CK(cudaMalloc(&y, n * 4));
  CK(cudaMalloc(&codes, n * 2));
  CK(cudaMalloc(&scales, n / 32 + 1));
  k_fill<<<4096, 256>>>(x, n, 2024);
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  printf("bench: %s, %d SMs, n = 2^%d = %zu elements, median of %d runs\n", prop.name,
         prop.multiProcessorCount, lg, n, g_reps);

  const double copy_ms = median_ms(g_reps, [&] { CK(cudaMemcpyAsync(y, x, n * 4, cudaMemcpyDeviceToDevice)); });
  g_copy_gbs = 8.0 * n / (copy_ms * 1e6);
  printf("%-14s %-16s %-5s %9s %9s %7s   %-16s  %s\n", "op", "format", "mode", "Gelem/s", "GB/s",
         "x copy", "checksum", "target");
  row("memcpy d2d", "-", "-", n, 8.0, copy_ms, y, n * 4, "reference");
  const size_t groups = n / 8;
  double ms = median_ms(g_reps, [&] {
    k_hw_e4m3<<<(unsigned)((groups + 255) / 256), 256>>>((const float4 *)x, (uint2 *)codes, groups);
  });
  row("hw cvt e4m3", "float8_e4m3fn", "rn", n, 5.0, ms, codes, n, "reference (600 Gelem/s seen)");

  /* a line's format and options (seed 42 for sr) */
  struct Q {
    const char *fmt;
    exmy_rounding mode;
    exmy_format format() const {
      exmy_format f;
      exmy_format_parse(fmt, &f);
      return f;
    }
    exmy_rounding_opts opts() const {
      exmy_rounding_opts o = {};
      o.mode = mode;
      o.seed = 42;
      return o;
    }
  };
  const Q quant[] = {
      {"float8_e4m3fn", EXMY_RNE}, {"float8_e5m2", EXMY_RNE},   {"float6_e2m3fn", EXMY_RNE},
      {"float6_e3m2fn", EXMY_RNE}, {"float4_e2m1fn", EXMY_RNE}, {"float8_e8m0fnu", EXMY_RNE},
      {"bfloat16", EXMY_RNE},      {"float16", EXMY_RNE},       {"float8_e4m3fnuz", EXMY_RNE},
      {"e8m3", EXMY_RNE},          {"float8_e4m3fn", EXMY_RZ},  {"float8_e4m3fn", EXMY_RNA},
      {"float8_e4m3fn", EXMY_RU},  {"float8_e4m3fn", EXMY_RD},  {"float8_e4m3fn", EXMY_RO},
      {"e8m3", EXMY_RZ},           {"float8_e4m3fn", EXMY_SR},
      {"bfloat16", EXMY_SR},       {"e8m3", EXMY_SR},
  };
  for (const Q &q : quant) {
    const exmy_format f = q.format();
    const exmy_rounding_opts o = q.opts();
    ms = median_ms(g_reps, [&] { CK(exmy_cuda_quantize_f32(&f, &o, x, y, n, 0)); });
    row("quantize", q.fmt, exmy_rounding_name(q.mode), n, 8.0, ms, y, n * 4,
        ">= 0.9");
  }
  const Q enc[] = {
      {"float8_e4m3fn", EXMY_RNE}, {"float8_e5m2", EXMY_RNE}, {"float4_e2m1fn", EXMY_RNE},
      {"float8_e8m0fnu", EXMY_RNE}, {"float8_e4m3fnuz", EXMY_RNE}, {"float8_e4m3fn", EXMY_RZ},
      {"float8_e4m3fn", EXMY_SR},   {"bfloat16", EXMY_RNE},
  };
  for (const Q &q : enc) {
    const exmy_format f = q.format();
    const exmy_rounding_opts o = q.opts();
    const size_t cb = exmy_code_bytes(&f);
    ms = median_ms(g_reps, [&] { CK(exmy_cuda_encode_f32(&f, &o, x, codes, n, 0)); });
    row("encode", q.fmt, exmy_rounding_name(q.mode), n, 4.0 + cb, ms, codes, n * cb,
        cb > 1 ? "-" : q.mode == EXMY_SR ? ">= 0.8" : ">= 0.9");
  }
  {
    exmy_format f;
    exmy_format_parse("float8_e4m3fn", &f);
    ms = median_ms(g_reps, [&] { CK(exmy_cuda_decode_f32(&f, codes, y, n, 0)); });
    row("decode", "float8_e4m3fn", "-", n, 5.0, ms, y, n * 4, "-");
    exmy_rounding_opts o = {};
    const size_t cols = 4096, rows = n / cols;
    ms = median_ms(g_reps, [&] { CK(exmy_cuda_mx_encode_f32(&f, &o, 32, x, rows, cols, codes, scales, 0)); });
    row("mx encode", "float8_e4m3fn", "rne", n, 5.0 + 1.0 / 32, ms, codes, n, ">= 0.8");
    ms = median_ms(g_reps, [&] { CK(exmy_cuda_mx_decode_f32(&f, 32, codes, scales, rows, cols, y, 0)); });
    row("mx decode", "float8_e4m3fn", "-", n, 5.0 + 1.0 / 32, ms, y, n * 4, "-");
    /* the trainer's MX GEMM operand: blocks of 32 along K into a bf16 image,
     * from K-contiguous rows and from a transposed tensor (dW's operands) */
    unsigned *flag;
    CK(cudaMalloc(&flag, sizeof *flag));
    ms = median_ms(g_reps, [&] {
      CK(exmy_cuda_mx_quantize_bf16(&f, &o, 32, x, cols, false, rows, cols, y, flag, 1, 0));
    });
    row("mx bf16 image", "float8_e4m3fn", "rne", n, 6.0, ms, y, n * 2, ">= 0.8");
    ms = median_ms(g_reps, [&] {
      CK(exmy_cuda_mx_quantize_bf16(&f, &o, 32, x, cols, true, cols, rows, y, flag, 1, 0));
    });
    row("mx bf16 img T", "float8_e4m3fn", "rne", n, 6.0, ms, y, n * 2, ">= 0.8");
    CK(cudaFree(flag));
    ms = median_ms(g_reps, [&] { CK(exmy_cuda_quantize_tensor_scaled_f32(&f, &o, 0, false, x, y, n, NULL, 0)); });
    row("tensor-scaled", "float8_e4m3fn", "rne", n, 8.0, ms, y, n * 4, "- (reads x twice)");
    CK(exmy_cuda_quantize_f32(&f, &o, x, y, n, 0));
    exmy_tensor_stats *st;
    CK(cudaMalloc(&st, sizeof *st));
    ms = median_ms(g_reps, [&] { CK(exmy_cuda_tensor_stats_f32(&f, x, y, n, st, 0)); });
    row("stats", "float8_e4m3fn", "-", n, 8.0, ms, st, sizeof *st, ">= 0.8");
    CK(cudaFree(st));
  }
  CK(cudaFree(x));
  CK(cudaFree(y));
  CK(cudaFree(codes));
  CK(cudaFree(scales));
  gemm_bench(g_reps);
  return 0;
}
