/*
 * The formats exmy knows by name, one row each, and the fields a format's
 * definition implies, written once for the host (lib/format.c) and the GPU
 * (cuda/kernel_common.cuh, where a row becomes a compile-time constant).
 * Adding a format is adding a row.
 *
 * X(ID, name, alias, E, M, bias, specials, gpu):
 *   ID        the GPU's name for the row: SPEC_<ID>
 *   name      the canonical name (ml_dtypes' where it has one); alias: a short
 *             one, or NULL; exmy_format_parse takes either, in any case
 *   E, M, bias, specials (EXMY_SPECIALS_<specials>): the format
 *   gpu       which GPU kernels are compiled with this format as a constant,
 *             every field folded (any other format runs the same core on its
 *             run-time struct, slower but equal):
 *             EXMY_GPU_CONVERT  quantize, encode, decode (cuda/convert.cu)
 *             EXMY_GPU_SCALED   tensor and delayed scaling in float32, MX
 *                               encode and decode (cuda/scaled.cu, mx.cu)
 *             EXMY_GPU_BF16     the bf16 GEMM operand path (cuda/scaled.cu)
 * E8M3..E8M6 (the paper's formats) have rows only for their GPU kernels: the
 * parser reads every IEEE-like eXmY without one, to the same format.
 */
#ifndef EXMY_FORMAT_CORE_H
#define EXMY_FORMAT_CORE_H

#include <stdint.h>

#include "lib/exmy.h"
#include "lib/hostdevice.h"

#define EXMY_GPU_CONVERT 1
#define EXMY_GPU_SCALED 2
#define EXMY_GPU_BF16 4

#define EXMY_FORMAT_TABLE(X)                                                           \
  X(E4M3FN, "float8_e4m3fn", "e4m3", 4, 3, 7, FN,                                      \
    EXMY_GPU_CONVERT | EXMY_GPU_SCALED | EXMY_GPU_BF16)                                \
  X(E5M2, "float8_e5m2", "e5m2", 5, 2, 15, IEEE,                                       \
    EXMY_GPU_CONVERT | EXMY_GPU_SCALED | EXMY_GPU_BF16)                                \
  X(E4M3FNUZ, "float8_e4m3fnuz", NULL, 4, 3, 8, FNUZ, EXMY_GPU_CONVERT)                \
  X(E5M2FNUZ, "float8_e5m2fnuz", NULL, 5, 2, 16, FNUZ, EXMY_GPU_CONVERT)               \
  X(E3M4, "float8_e3m4", NULL, 3, 4, 3, IEEE, EXMY_GPU_CONVERT)                        \
  X(E4M3, "float8_e4m3", NULL, 4, 3, 7, IEEE, EXMY_GPU_CONVERT)                        \
  X(E2M3, "float6_e2m3fn", "e2m3", 2, 3, 1, NONE, EXMY_GPU_CONVERT | EXMY_GPU_SCALED)  \
  X(E3M2, "float6_e3m2fn", "e3m2", 3, 2, 3, NONE, EXMY_GPU_CONVERT | EXMY_GPU_SCALED)  \
  X(E2M1, "float4_e2m1fn", "e2m1", 2, 1, 1, NONE, EXMY_GPU_CONVERT | EXMY_GPU_SCALED)  \
  X(E8M0, "float8_e8m0fnu", "e8m0", 8, 0, 127, E8M0, EXMY_GPU_CONVERT)                 \
  X(BF16, "bfloat16", "bf16", 8, 7, 127, IEEE, EXMY_GPU_CONVERT | EXMY_GPU_BF16)       \
  X(FP16, "float16", "fp16", 5, 10, 15, IEEE, EXMY_GPU_CONVERT)                        \
  X(FP32, "float32", "fp32", 8, 23, 127, IEEE, 0)                                      \
  X(E8M3, "e8m3", NULL, 8, 3, 127, IEEE, EXMY_GPU_CONVERT | EXMY_GPU_BF16)             \
  X(E8M4, "e8m4", NULL, 8, 4, 127, IEEE, EXMY_GPU_CONVERT | EXMY_GPU_BF16)             \
  X(E8M5, "e8m5", NULL, 8, 5, 127, IEEE, EXMY_GPU_CONVERT | EXMY_GPU_BF16)             \
  X(E8M6, "e8m6", NULL, 8, 6, 127, IEEE, EXMY_GPU_CONVERT | EXMY_GPU_BF16)

/* The fields a format's definition implies (exmy_format's "derived" ones),
 * for E, M and specials that exmy_format_make accepts; the name stays empty.
 * Under nvcc also a constant expression. */
EXMY_HD_CONSTEXPR exmy_format exmy_format_fields(int E, int M, int bias,
                                                 exmy_specials sp) {
  exmy_format f = {0};
  f.exp_bits = E;
  f.man_bits = M;
  f.bias = bias;
  f.specials = sp;
  f.is_signed = sp != EXMY_SPECIALS_E8M0;
  f.bits = E + M + (f.is_signed ? 1 : 0);
  const uint32_t all = (uint32_t)1 << (E + M); /* magnitude codes */
  f.sign_mask = f.is_signed ? all : 0;
  f.inf_code = EXMY_NO_CODE;
  f.nan_code = EXMY_NO_CODE;
  if (sp == EXMY_SPECIALS_IEEE) {
    f.inf_code = (((uint32_t)1 << E) - 1) << M;
    if (M > 0) f.nan_code = f.inf_code | ((uint32_t)1 << (M - 1));
    f.max_code = f.inf_code - 1;
  } else if (sp == EXMY_SPECIALS_FN) {
    f.nan_code = all - 1;
    f.max_code = all - 2;
  } else if (sp == EXMY_SPECIALS_FNUZ) {
    f.nan_code = f.sign_mask;
    f.max_code = all - 1;
  } else if (sp == EXMY_SPECIALS_NONE) {
    f.max_code = all - 1;
  } else { /* E8M0 */
    f.nan_code = all - 1;
    f.max_code = all - 2;
  }
  /* E8M0 has no subnormal field: code 0 is the smallest normal 2^-bias. */
  f.emin = sp == EXMY_SPECIALS_E8M0 ? -bias : 1 - bias;
  f.emax = (int)(f.max_code >> M) - bias;
  if (sp == EXMY_SPECIALS_IEEE && f.max_code >> M == 0) {
    /* E = 1: only subnormals below the reserved exponent */
    f.emax = f.emin - 1;
  }
  return f;
}

#endif /* EXMY_FORMAT_CORE_H */
