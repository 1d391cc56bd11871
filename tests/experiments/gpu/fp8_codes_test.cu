/* experiments/gpu/fp8_codes.cuh on the host (no GPU needed): every E4M3 and
 * E5M2 code c, scaled slot values y = c 2^-k for k in [-40, 40]: unscaled,
 * every finite code comes back (±0 included) and NaN / Inf do not; scaled
 * by 2^k, |k| <= 32, with the model's emin following the scale
 * (fp8_model_emin: the format's emin - k), every finite code, subnormals
 * included; with float32's emin (a scale the model does not follow), exactly
 * the codes that are not subnormal; never a value off the grid, out of range, or not exactly code
 * times 2^-k.  The scale check (fp8_scales_ok) takes pairs of powers of two
 * only, exactly those that keep every partial product of a codes' sum
 * (2^-33 .. 2^56 in magnitude), alpha (2^-16 .. 2^16) and the two inverse
 * scales a float32 normal. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "experiments/gpu/fp8_codes.cuh"

static int failures = 0;
#define EXPECT(cond, ...)                  \
  do {                                     \
    if (!(cond)) {                         \
      if (failures++ < 20) {               \
        printf("FAIL %s: ", #cond);        \
        printf(__VA_ARGS__);               \
        printf("\n");                      \
      }                                    \
    }                                      \
  } while (0)

template <bool E4M3>
static void check_format() {
  const __nv_fp8_interpretation_t kind = E4M3 ? __NV_E4M3 : __NV_E5M2;
  const int fmt_emin = E4M3 ? -6 : -14, man = E4M3 ? 3 : 2;
  long accepted = 0, shifted_accepted = 0;
  for (int k = -40; k <= 40; k++) {
    const float s = ldexpf(1.0f, k), inv = ldexpf(1.0f, -k);
    for (int code = 0; code < 256; code++) {
      const float c = __half2float(__half(__nv_cvt_fp8_to_halfraw((__nv_fp8_storage_t)code, kind)));
      const float y = ldexpf(c, -k); /* exact: |k| <= 40 keeps c 2^-k a float32 normal */
      const bool finite = isfinite(c);
      const bool sub = c != 0.0f && fabsf(c) < ldexpf(1.0f, fmt_emin);
      __nv_fp8_storage_t got;
      /* unscaled: the model clamps at the format's emin too */
      if (k == 0) {
        const bool ok = exmy_gpu::fp8_code_of<E4M3>(y, 1.0f, 1.0f, fmt_emin, fmt_emin, &got);
        EXPECT(ok == finite, "unscaled code 0x%02x (%g)", code, c);
        if (ok) EXPECT(got == code, "unscaled code 0x%02x gave 0x%02x", code, got);
      }
      /* pow2-scaled, the model's emin following s: every finite code */
      const int shifted = exmy_gpu::fp8_model_emin(fmt_emin, true, s);
      if (k >= -32 && k <= 32) {
        EXPECT(shifted == fmt_emin - k, "k %d: emin %d", k, shifted);
        const bool ok2 = exmy_gpu::fp8_code_of<E4M3>(y, s, inv, fmt_emin, shifted, &got);
        EXPECT(ok2 == finite, "k %d code 0x%02x (%g), emin %d", k, code, c, shifted);
        if (ok2) EXPECT(got == code, "k %d code 0x%02x gave 0x%02x", k, code, got);
        shifted_accepted += ok2;
      }
      EXPECT(exmy_gpu::fp8_model_emin(-126, false, s) == -126, "k %d", k);
      /* scaled, float32's emin (a scale the model does not follow) */
      const bool ok = exmy_gpu::fp8_code_of<E4M3>(y, s, inv, fmt_emin, -126, &got);
      EXPECT(ok == (finite && !sub), "k %d code 0x%02x (%g)", k, code, c);
      if (ok) {
        EXPECT(got == code, "k %d code 0x%02x gave 0x%02x", k, code, got);
        accepted++;
      }
      /* a float32 neighbour of y, and y halfway to the next code: off the grid */
      if (finite && c != 0.0f) {
        const float near = nextafterf(y, INFINITY);
        EXPECT(!exmy_gpu::fp8_code_of<E4M3>(near, s, inv, fmt_emin, fmt_emin, &got),
               "k %d: %g next to code 0x%02x", k, near, code);
        const int e = ilogbf(c) > fmt_emin ? ilogbf(c) : fmt_emin;
        const float half = ldexpf(c + copysignf(ldexpf(1.0f, e - man - 1), c), -k);
        EXPECT(!exmy_gpu::fp8_code_of<E4M3>(half, s, inv, fmt_emin, fmt_emin, &got),
               "k %d: %g between codes", k, half);
      }
    }
    /* beyond the largest finite value */
    const float big = ldexpf(E4M3 ? 480.0f : 65536.0f, -k);
    __nv_fp8_storage_t got;
    EXPECT(!exmy_gpu::fp8_code_of<E4M3>(big, s, inv, fmt_emin, fmt_emin, &got), "k %d: %g", k,
           big);
  }
  /* y s inexact: y a float32 subnormal with bits that s = 2^-1 drops */
  __nv_fp8_storage_t got;
  EXPECT(!exmy_gpu::fp8_code_of<E4M3>(ldexpf(1.0f, -149), 0.5f, 2.0f, fmt_emin, -126, &got),
         "2^-149 at s = 1/2");
  printf("%s: %ld scaled codes accepted under float32's emin, %ld under the shifted emin\n",
         E4M3 ? "E4M3" : "E5M2", accepted, shifted_accepted);
}

/* Whether every product of a subset of {a codes' sum, alpha, 1/sa, 1/sb}
 * is a float32 normal, for sums and alpha at the ends of their ranges. */
static bool partial_products_normal(int ka, int kb) {
  const double sums[2] = {ldexp(1.0, -33), ldexp(1.0, 56)};
  const double alphas[2] = {ldexp(1.0, -exmy_gpu::kFp8AlphaExpMax),
                            ldexp(1.0, exmy_gpu::kFp8AlphaExpMax)};
  for (double sum : sums)
    for (double alpha : alphas)
      for (int mask = 0; mask < 8; mask++) {
        const double p = sum * (mask & 1 ? alpha : 1.0) * (mask & 2 ? ldexp(1.0, -ka) : 1.0) *
                         (mask & 4 ? ldexp(1.0, -kb) : 1.0);
        if (p < ldexp(1.0, -126) || p >= ldexp(1.0, 128)) return false;
      }
  return true;
}

static void check_scales() {
  long accepted = 0;
  for (int ka = -160; ka <= 140; ka++)
    for (int kb = -160; kb <= 140; kb++) {
      const bool normal_a = ka >= -126 && ka <= 127, normal_b = kb >= -126 && kb <= 127;
      const bool want = normal_a && normal_b && partial_products_normal(ka, kb);
      const bool got = exmy_gpu::fp8_scales_ok(ldexpf(1.0f, ka), ldexpf(1.0f, kb));
      EXPECT(got == want, "scales 2^%d, 2^%d: %d", ka, kb, got);
      accepted += got;
    }
  /* a gradient's scale (2^40) with an activation's (2^8) passes; not powers of two do not */
  EXPECT(exmy_gpu::fp8_scales_ok(ldexpf(1.0f, 40), ldexpf(1.0f, 8)), "2^40, 2^8");
  const float bad[] = {0.0f, -0.0f, INFINITY, NAN, -2.0f, 3.0f, 1.5f, ldexpf(1.0f, -140) * 3.0f};
  for (float b : bad) {
    EXPECT(!exmy_gpu::fp8_scales_ok(b, 1.0f), "scale %g", b);
    EXPECT(!exmy_gpu::fp8_scales_ok(1.0f, b), "scale %g", b);
  }
  printf("scales: %ld of %d pairs of powers of two accepted\n", accepted, 301 * 301);
}

static void check_alpha() {
  const float ok[] = {1.0f, -1.0f, 0x1p-16f, -0x1p16f, 0x1p16f, 3.0f};
  const float bad[] = {0.0f, 0x1p-16f * 0.999f, 0x1p16f * 1.001f, -0x1p17f, INFINITY, NAN};
  for (float a : ok) EXPECT(exmy_gpu::fp8_alpha_ok(a), "alpha %a", a);
  for (float a : bad) EXPECT(!exmy_gpu::fp8_alpha_ok(a), "alpha %a", a);
}

int main() {
  check_scales();
  check_alpha();
  check_format<true>();
  check_format<false>();
  printf("%s (%d failures)\n", failures ? "FAIL" : "ok", failures);
  return failures != 0;
}
