/*
 * verify_hw: our reference core against the GPU's own conversions, on ALL
 * 2^32 float32 inputs.
 *
 * Each line of the table pairs one CUDA conversion (cuda_fp8.h, cuda_fp6.h,
 * cuda_fp4.h, cuda_bf16.h, cuda_fp16.h) with the exmy format and options that
 * should mean the same thing, and runs both on every bit pattern.  On sm_90
 * the fp8 e4m3/e5m2 and bf16/fp16 conversions are single cvt instructions; the
 * fp6, fp4 and e8m0 ones are the header's software emulation (their cvt
 * instructions need sm_100+), which is still NVIDIA's definition of them.
 *
 * A non-NaN input whose codes differ is a mismatch; where both codes are NaN
 * codes of the format it is counted apart ("nan-code"), since the brief only
 * asks for a NaN.  For NaN inputs we check that our code is a NaN where the
 * format has one.  E8M0 mismatches on zero, negative or float32-subnormal
 * inputs are counted apart too: lib/exmy.h documents our choice there.
 *
 * Usage: verify_hw [log2_inputs]   (default 32: every float32)
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp4.h>
#include <cuda_fp6.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/exmy.h"
#include "lib/round_core.h"

#define CUDA_OK(call)                                                    \
  do {                                                                   \
    cudaError_t err_ = (call);                                           \
    if (err_ != cudaSuccess) {                                           \
      fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__,                 \
              cudaGetErrorString(err_));                                 \
      exit(1);                                                           \
    }                                                                    \
  } while (0)

enum HwOp { OP_E4M3, OP_E5M2, OP_E2M3, OP_E3M2, OP_E2M1, OP_E8M0, OP_BF16, OP_FP16 };
enum HwRound { HR_RN, HR_RZ, HR_RU, HR_RD };

/* The GPU's conversion, as the code in the low bits of the result. */
template <int OP, int RND, int SAT>
__device__ __forceinline__ uint32_t hw_convert(float x) {
  const __nv_saturation_t sat = SAT ? __NV_SATFINITE : __NV_NOSAT;
  const cudaRoundMode rm = RND == HR_RN ? cudaRoundNearest
                           : RND == HR_RZ ? cudaRoundZero
                           : RND == HR_RU ? cudaRoundPosInf
                                          : cudaRoundMinInf;
  if (OP == OP_E4M3) return __nv_cvt_float_to_fp8(x, sat, __NV_E4M3);
  if (OP == OP_E5M2) return __nv_cvt_float_to_fp8(x, sat, __NV_E5M2);
  if (OP == OP_E2M3) return __nv_cvt_float_to_fp6(x, __NV_E2M3, rm);
  if (OP == OP_E3M2) return __nv_cvt_float_to_fp6(x, __NV_E3M2, rm);
  if (OP == OP_E2M1) return __nv_cvt_float_to_fp4(x, __NV_E2M1, rm);
  if (OP == OP_E8M0) return __nv_cvt_float_to_e8m0(x, sat, rm);
  if (OP == OP_BF16) {
    __nv_bfloat16 h = RND == HR_RN   ? __float2bfloat16_rn(x)
                      : RND == HR_RZ ? __float2bfloat16_rz(x)
                      : RND == HR_RU ? __float2bfloat16_ru(x)
                                     : __float2bfloat16_rd(x);
    return __bfloat16_as_ushort(h);
  }
  __half h = RND == HR_RN   ? __float2half_rn(x)
             : RND == HR_RZ ? __float2half_rz(x)
             : RND == HR_RU ? __float2half_ru(x)
                            : __float2half_rd(x);
  return __half_as_ushort(h);
}

#define MAX_RECORDS 24
typedef struct {
  unsigned long long inputs, mismatches, documented, nan_code_diffs,
      nan_inputs, nan_inputs_ours_not_nan, nan_inputs_hw_not_nan;
  unsigned int nrec;
  uint32_t rec_x[MAX_RECORDS], rec_ours[MAX_RECORDS], rec_hw[MAX_RECORDS];
  unsigned int ndoc;
  uint32_t doc_x[4], doc_ours[4], doc_hw[4];
} Result;

__device__ __forceinline__ int is_nan_code(const exmy_format &f, uint32_t c) {
  return isnan(exmy_core_decode(&f, c));
}

template <int OP, int RND, int SAT>
__global__ void __launch_bounds__(256) sweep(exmy_format f, int mode, int saturate,
                                             uint64_t count, Result *r) {
  unsigned long long mism = 0, doc = 0, nandiff = 0, nanin = 0, nan_ours = 0,
                     nan_hw = 0;
  const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
  const uint64_t step = (1ull << 32) / count; /* count < 2^32: a strided subset */
  for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < count;
       i += stride) {
    const uint32_t xb = (uint32_t)(i * step);
    const float x = __uint_as_float(xb);
    const uint32_t ours = exmy_core_encode(&f, (exmy_rounding)mode, saturate, 0,
                                           32, x, 0u);
    const uint32_t hw = hw_convert<OP, RND, SAT>(x);
    if (isnan(x)) {
      nanin++;
      if (f.nan_code != EXMY_NO_CODE && !is_nan_code(f, ours)) nan_ours++;
      if (!is_nan_code(f, hw)) nan_hw++;
      continue;
    }
    if (ours == hw) continue;
    if (is_nan_code(f, ours) && is_nan_code(f, hw)) {
      nandiff++;
      continue;
    }
    const uint32_t ab = xb & 0x7FFFFFFFu;
    const int documented = f.specials == EXMY_SPECIALS_E8M0 &&
                           ((xb >> 31) || ab < 0x00800000u);
    if (documented) {
      doc++;
      unsigned int k = atomicAdd(&r->ndoc, 1u);
      if (k < 4) { r->doc_x[k] = xb; r->doc_ours[k] = ours; r->doc_hw[k] = hw; }
    } else {
      mism++;
      unsigned int k = atomicAdd(&r->nrec, 1u);
      if (k < MAX_RECORDS) { r->rec_x[k] = xb; r->rec_ours[k] = ours; r->rec_hw[k] = hw; }
    }
  }
  /* one atomic per counter per thread that saw something */
  if (mism) atomicAdd(&r->mismatches, mism);
  if (doc) atomicAdd(&r->documented, doc);
  if (nandiff) atomicAdd(&r->nan_code_diffs, nandiff);
  if (nanin) atomicAdd(&r->nan_inputs, nanin);
  if (nan_ours) atomicAdd(&r->nan_inputs_ours_not_nan, nan_ours);
  if (nan_hw) atomicAdd(&r->nan_inputs_hw_not_nan, nan_hw);
}

typedef void (*SweepFn)(exmy_format, int, int, uint64_t, Result *);

typedef struct {
  const char *hw_name;  /* the CUDA conversion */
  SweepFn fn;
  const char *format;   /* exmy name */
  exmy_rounding mode;
  int saturate;
} Case;

#define CASE(name, OP, RND, SAT, fmt, mode, sat) \
  {name, sweep<OP, RND, SAT>, fmt, mode, sat}

static const Case kCases[] = {
    CASE("__nv_cvt_float_to_fp8 E4M3 NOSAT", OP_E4M3, HR_RN, 0, "float8_e4m3fn", EXMY_RNE, 0),
    CASE("__nv_cvt_float_to_fp8 E4M3 SATFINITE", OP_E4M3, HR_RN, 1, "float8_e4m3fn", EXMY_RNE, 1),
    CASE("__nv_cvt_float_to_fp8 E5M2 NOSAT", OP_E5M2, HR_RN, 0, "float8_e5m2", EXMY_RNE, 0),
    CASE("__nv_cvt_float_to_fp8 E5M2 SATFINITE", OP_E5M2, HR_RN, 1, "float8_e5m2", EXMY_RNE, 1),
    CASE("__nv_cvt_float_to_fp6 E2M3 rn (satfinite) vs sat=1", OP_E2M3, HR_RN, 1, "float6_e2m3fn", EXMY_RNE, 1),
    CASE("__nv_cvt_float_to_fp6 E2M3 rn (satfinite) vs sat=0", OP_E2M3, HR_RN, 1, "float6_e2m3fn", EXMY_RNE, 0),
    CASE("__nv_cvt_float_to_fp6 E2M3 rz (satfinite) vs sat=1", OP_E2M3, HR_RZ, 1, "float6_e2m3fn", EXMY_RZ, 1),
    CASE("__nv_cvt_float_to_fp6 E3M2 rn (satfinite) vs sat=1", OP_E3M2, HR_RN, 1, "float6_e3m2fn", EXMY_RNE, 1),
    CASE("__nv_cvt_float_to_fp6 E3M2 rn (satfinite) vs sat=0", OP_E3M2, HR_RN, 1, "float6_e3m2fn", EXMY_RNE, 0),
    CASE("__nv_cvt_float_to_fp6 E3M2 rz (satfinite) vs sat=1", OP_E3M2, HR_RZ, 1, "float6_e3m2fn", EXMY_RZ, 1),
    CASE("__nv_cvt_float_to_fp4 E2M1 rn (satfinite) vs sat=1", OP_E2M1, HR_RN, 1, "float4_e2m1fn", EXMY_RNE, 1),
    CASE("__nv_cvt_float_to_fp4 E2M1 rn (satfinite) vs sat=0", OP_E2M1, HR_RN, 1, "float4_e2m1fn", EXMY_RNE, 0),
    CASE("__nv_cvt_float_to_fp4 E2M1 rz (satfinite) vs sat=1", OP_E2M1, HR_RZ, 1, "float4_e2m1fn", EXMY_RZ, 1),
    CASE("__nv_cvt_float_to_e8m0 rz NOSAT", OP_E8M0, HR_RZ, 0, "float8_e8m0fnu", EXMY_RZ, 0),
    CASE("__nv_cvt_float_to_e8m0 rz SATFINITE", OP_E8M0, HR_RZ, 1, "float8_e8m0fnu", EXMY_RZ, 1),
    CASE("__nv_cvt_float_to_e8m0 ru NOSAT", OP_E8M0, HR_RU, 0, "float8_e8m0fnu", EXMY_RU, 0),
    CASE("__nv_cvt_float_to_e8m0 ru SATFINITE", OP_E8M0, HR_RU, 1, "float8_e8m0fnu", EXMY_RU, 1),
    CASE("__float2bfloat16_rn", OP_BF16, HR_RN, 0, "bfloat16", EXMY_RNE, 0),
    CASE("__float2bfloat16_rz", OP_BF16, HR_RZ, 0, "bfloat16", EXMY_RZ, 0),
    CASE("__float2bfloat16_ru", OP_BF16, HR_RU, 0, "bfloat16", EXMY_RU, 0),
    CASE("__float2bfloat16_rd", OP_BF16, HR_RD, 0, "bfloat16", EXMY_RD, 0),
    CASE("__float2half_rn", OP_FP16, HR_RN, 0, "float16", EXMY_RNE, 0),
    CASE("__float2half_rz", OP_FP16, HR_RZ, 0, "float16", EXMY_RZ, 0),
    CASE("__float2half_ru", OP_FP16, HR_RU, 0, "float16", EXMY_RU, 0),
    CASE("__float2half_rd", OP_FP16, HR_RD, 0, "float16", EXMY_RD, 0),
};

int main(int argc, char **argv) {
  int log2n = argc > 1 ? atoi(argv[1]) : 32;
  if (log2n < 1 || log2n > 32) log2n = 32;
  const uint64_t count = 1ull << log2n;
  Result *d_r;
  CUDA_OK(cudaMalloc(&d_r, sizeof(Result)));
  int sms = 0;
  CUDA_OK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  int total_bad = 0;
  printf("verify_hw: %llu float32 inputs per case (%s)\n",
         (unsigned long long)count, log2n == 32 ? "all of them" : "strided");
  printf("%-52s %-15s %-4s %-3s %12s %10s %9s %9s %s\n", "cuda conversion",
         "exmy format", "mode", "sat", "mismatches", "documented", "nan-code",
         "nan-in-ok", "");
  for (size_t c = 0; c < sizeof kCases / sizeof kCases[0]; c++) {
    const Case &k = kCases[c];
    exmy_format f;
    if (exmy_format_parse(k.format, &f) != 0) {
      printf("cannot parse %s\n", k.format);
      return 1;
    }
    CUDA_OK(cudaMemset(d_r, 0, sizeof(Result)));
    cudaEvent_t t0, t1;
    CUDA_OK(cudaEventCreate(&t0));
    CUDA_OK(cudaEventCreate(&t1));
    CUDA_OK(cudaEventRecord(t0));
    k.fn<<<sms * 16, 256>>>(f, (int)k.mode, k.saturate, count, d_r);
    CUDA_OK(cudaGetLastError());
    CUDA_OK(cudaEventRecord(t1));
    CUDA_OK(cudaDeviceSynchronize());
    float ms = 0;
    CUDA_OK(cudaEventElapsedTime(&ms, t0, t1));
    Result r;
    CUDA_OK(cudaMemcpy(&r, d_r, sizeof r, cudaMemcpyDeviceToHost));
    const int nan_ok = r.nan_inputs_ours_not_nan == 0;
    printf("%-52s %-15s %-4s %-3d %12llu %10llu %9llu %9s (%.0f ms; hw non-NaN on NaN input: %llu of %llu)\n",
           k.hw_name, k.format, exmy_rounding_name(k.mode), k.saturate,
           r.mismatches, r.documented, r.nan_code_diffs,
           f.nan_code == EXMY_NO_CODE ? "n/a" : nan_ok ? "yes" : "NO", ms,
           r.nan_inputs_hw_not_nan, r.nan_inputs);
    if (r.mismatches || !nan_ok) total_bad++;
    unsigned int nrec = r.nrec < MAX_RECORDS ? r.nrec : MAX_RECORDS;
    for (unsigned int i = 0; i < nrec; i++)
      printf("    MISMATCH x=0x%08x (%.9g) ours=0x%x (%.9g) cuda=0x%x (%.9g)\n",
             r.rec_x[i], exmy_bits_f32(r.rec_x[i]), r.rec_ours[i],
             exmy_core_decode(&f, r.rec_ours[i]), r.rec_hw[i],
             exmy_core_decode(&f, r.rec_hw[i]));
    unsigned int ndoc = r.ndoc < 4 ? r.ndoc : 4;
    for (unsigned int i = 0; i < ndoc; i++)
      printf("    documented-choice x=0x%08x (%.9g) ours=0x%x cuda=0x%x\n",
             r.doc_x[i], exmy_bits_f32(r.doc_x[i]), r.doc_ours[i], r.doc_hw[i]);
  }
  printf("verify_hw: %d case(s) with undocumented mismatches or non-NaN codes for NaN\n",
         total_bad);
  return total_bad ? 1 : 0;
}
