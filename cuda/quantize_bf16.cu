/*
 * Rounding into a format whose values are all bfloat16 values (M <= 7, no
 * value below bf16's smallest subnormal), stored as bfloat16: the operand of
 * the exact BF16 tensor-core GEMM path, produced in the same pass as the
 * rounding.  The codes are those of exmy_cuda_encode_f32 (same core, same
 * Philox stream for sr), so the stored values are bit-identical to the CPU's.
 */
#include <cuda_bf16.h>

#include "cuda/elementwise.cuh"
#include "cuda/exmy_cuda.h"

namespace {
using namespace exmy_cuda;

template <int ID, int MODE>
__global__ void __launch_bounds__(kThreads)
    k_quantize_bf16(const __grid_constant__ exmy_format rt, const __grid_constant__ KOpts o,
                    const float *__restrict__ x, uint16_t *__restrict__ y, size_t n, int vec) {
  const auto &f = kernel_format<ID>(rt);
  const size_t base = ((size_t)blockIdx.x * kThreads + threadIdx.x) * kPer;
  if (base >= n) return;
  float v[kPer];
  uint32_t c[kPer];
  const bool full = load8(x, base, n, vec, v);
  encode8<ID, MODE>(f, o, base, v, c);
#pragma unroll
  for (int k = 0; k < kPer; k++)
    c[k] = __bfloat16_as_ushort(__float2bfloat16_rn(decode_one<ID>(f, c[k])));
  store8<uint16_t>(y, base, n, full, c);
}

template <int ID, int MODE>
void launch(const exmy_format &f, const KOpts &o, const float *x, uint16_t *y, size_t n,
            cudaStream_t s) {
  const int vec = (((uintptr_t)x | (uintptr_t)y) & 15u) == 0;
  k_quantize_bf16<ID, MODE><<<blocks_for((n + kPer - 1) / kPer, kThreads), kThreads, 0, s>>>(
      f, o, x, y, n, vec);
}

/* rne and sr kernels for the formats training recipes use; the run-time-mode
 * kernel for the rest (kept short: each instance costs nvcc time). */
template <int ID>
void launch_modes(const exmy_format &f, const KOpts &o, const float *x, uint16_t *y, size_t n,
                  cudaStream_t s) {
  if (o.mode == EXMY_RNE) launch<ID, EXMY_RNE>(f, o, x, y, n, s);
  else if (o.mode == EXMY_SR) launch<ID, EXMY_SR>(f, o, x, y, n, s);
  else launch<ID, kRuntimeMode>(f, o, x, y, n, s);
}

}  // namespace

extern "C" cudaError_t exmy_cuda_quantize_bf16(const exmy_format *f,
                                               const exmy_rounding_opts *o, const float *x,
                                               void *y, size_t n, cudaStream_t s) {
  if (!exmy_cuda_bf16_exact(f) || exmy_rounding_opts_check(o) != 0) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  const KOpts k = kopts_of(o);
  uint16_t *out = (uint16_t *)y;
  switch (spec_id(f)) {
    case SPEC_BF16: launch_modes<SPEC_BF16>(*f, k, x, out, n, s); break;
    case SPEC_E4M3FN: launch_modes<SPEC_E4M3FN>(*f, k, x, out, n, s); break;
    case SPEC_E5M2: launch_modes<SPEC_E5M2>(*f, k, x, out, n, s); break;
    case SPEC_E8M3: launch_modes<SPEC_E8M3>(*f, k, x, out, n, s); break;
    case SPEC_E8M4: launch_modes<SPEC_E8M4>(*f, k, x, out, n, s); break;
    case SPEC_E8M5: launch_modes<SPEC_E8M5>(*f, k, x, out, n, s); break;
    case SPEC_E8M6: launch_modes<SPEC_E8M6>(*f, k, x, out, n, s); break;
    default: launch<SPEC_GENERIC, kRuntimeMode>(*f, k, x, out, n, s);
  }
  return cudaGetLastError();
}
