/* lib/scale_core.h (the scaling arithmetic the CPU and the GPU share) against
 * the same formulas written independently with libm's ldexpf and frexpf, on a
 * strided sweep of every float32 and the margins, formats and exponents that
 * reach the edges of float32's range. */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "lib/scale_core.h"
#include "tests/lib/harness.h"

/* Non-negative float32 values (inf and NaN included): every 4099th bit
 * pattern, then the edges of the ranges.  Returns a malloc'ed array. */
static float *sweep(size_t *n) {
  static const uint32_t edges[] = {0x00000000u, 0x00000001u, 0x00000002u, 0x007FFFFFu,
                                   0x00800000u, 0x00800001u, 0x3F7FFFFFu, 0x3F800000u,
                                   0x7F7FFFFFu, 0x7F800000u, 0x7FC00000u};
  const size_t nedges = sizeof edges / sizeof edges[0];
  float *v = malloc(((0x80000000u / 4099u) + 1 + nedges) * sizeof *v);
  size_t k = 0;
  for (uint32_t b = 0; b < 0x80000000u; b += 4099u) v[k++] = bits_f32(b);
  for (size_t i = 0; i < nedges; i++) v[k++] = bits_f32(edges[i]);
  *n = k;
  return v;
}

static float ref_scale(float fmax, float amax, int margin, int pow2) {
  if (!(amax > 0) || !isfinite(amax)) return 1.0f;
  float s = ldexpf(fmax / amax, -margin);
  if (!isfinite(s) || !(s > 0)) return 1.0f;
  if (pow2) {
    int e;
    frexpf(s, &e); /* s = m · 2^e, m in [0.5, 1) */
    s = ldexpf(1.0f, e - 1);
  }
  return s;
}

static int ref_mx_exponent(int emax, float amax) {
  if (!(amax > 0)) return -127;
  int e;
  frexpf(amax, &e);
  int x = e - 1 - emax;
  return x < -127 ? -127 : x > 127 ? 127 : x;
}

START_TEST(scale_from_amax_is_ldexpf_of_the_quotient) {
  /* fmax of e2m1, e4m3, e5m2, e8m3 and float32 */
  const float fmaxes[] = {6.0f, 448.0f, 57344.0f, 0x1.Ep127f, 0x1.FFFFFEp127f};
  const int margins[] = {-300, -200, -150, -130, -127, -64, -10, -1, 0,
                         1,    2,    10,   64,   127,  130, 150, 200, 300};
  tally t = {.what = "exmy_core_scale_from_amax"};
  size_t n;
  float *v = sweep(&n);
  for (size_t s = 0; s < n; s++) {
    const float amax = v[s];
    for (size_t i = 0; i < sizeof fmaxes / sizeof fmaxes[0]; i++)
      for (size_t j = 0; j < sizeof margins / sizeof margins[0]; j++)
        for (int pow2 = 0; pow2 < 2; pow2++) {
          float want = ref_scale(fmaxes[i], amax, margins[j], pow2);
          float got = exmy_core_scale_from_amax(fmaxes[i], amax, margins[j], pow2);
          t.checked++;
          if (f32_bits(want) != f32_bits(got) && t.failed++ < 8)
            fprintf(stderr, "fmax %a amax %a margin %d pow2 %d: want %a got %a\n",
                    fmaxes[i], amax, margins[j], pow2, want, got);
        }
  }
  free(v);
  tally_assert(&t);
}
END_TEST

START_TEST(mx_exponent_and_powers_of_two) {
  tally t = {.what = "exmy_core_mx_exponent / exmy_floor_pow2f / exmy_pow2f"};
  for (int p = -149; p <= 127; p++) {
    t.checked++;
    if (exmy_pow2f(p) != ldexpf(1.0f, p) && t.failed++ < 8)
      fprintf(stderr, "exmy_pow2f(%d) = %a\n", p, exmy_pow2f(p));
  }
  /* emax of e2m1, e4m3, e5m2, e8m0's neighbours and extremes */
  const int emaxes[] = {-20, -1, 0, 1, 2, 4, 8, 15, 127};
  size_t n;
  float *v = sweep(&n);
  for (size_t s = 0; s < n; s++) {
    const float a = v[s];
    if (a > 0 && isfinite(a)) {
      int e;
      frexpf(a, &e);
      t.checked += 2;
      if (exmy_floor_log2f(a) != e - 1 && t.failed++ < 8)
        fprintf(stderr, "exmy_floor_log2f(%a) = %d\n", a, exmy_floor_log2f(a));
      if (exmy_floor_pow2f(a) != ldexpf(1.0f, e - 1) && t.failed++ < 8)
        fprintf(stderr, "exmy_floor_pow2f(%a) = %a\n", a, exmy_floor_pow2f(a));
    }
    if (isfinite(a))
      for (size_t i = 0; i < sizeof emaxes / sizeof emaxes[0]; i++) {
        t.checked++;
        int want = ref_mx_exponent(emaxes[i], a), got = exmy_core_mx_exponent(emaxes[i], a);
        if (want != got && t.failed++ < 8)
          fprintf(stderr, "emax %d amax %a: want %d got %d\n", emaxes[i], a, want, got);
      }
  }
  free(v);
  tally_assert(&t);
}
END_TEST

START_TEST(pow2_exponent_takes_exactly_the_positive_powers_of_two) {
  tally t = {.what = "exmy_pow2_exponent"};
  for (int p = -149; p <= 127; p++) {
    const float s = ldexpf(1.0f, p);
    int k = 1000, k_neg = 1000, k_next = 1000;
    t.checked += 2;
    if (!exmy_pow2_exponent(s, &k) || k != p)
      if (t.failed++ < 8) fprintf(stderr, "2^%d: k = %d\n", p, k);
    if (exmy_pow2_exponent(-s, &k_neg) || k_neg != 0)
      if (t.failed++ < 8) fprintf(stderr, "-2^%d taken\n", p);
    if (p == -149) continue; /* its successor is 2^-148 */
    t.checked++;
    if (exmy_pow2_exponent(nextafterf(s, INFINITY), &k_next) && t.failed++ < 8)
      fprintf(stderr, "2^%d's successor taken\n", p);
  }
  const float never[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 3.0f, 1.5f, 0x1p-140f * 3.0f};
  for (size_t i = 0; i < sizeof never / sizeof never[0]; i++) {
    int k;
    t.checked++;
    if (exmy_pow2_exponent(never[i], &k) && t.failed++ < 8)
      fprintf(stderr, "%a taken\n", never[i]);
  }
  /* every finite positive value: taken exactly where ldexpf gives it back */
  size_t n;
  float *v = sweep(&n);
  for (size_t i = 0; i < n; i++) {
    const float a = v[i];
    if (!(a > 0) || !isfinite(a)) continue;
    int k, e;
    frexpf(a, &e);
    t.checked++;
    if (exmy_pow2_exponent(a, &k) != (a == ldexpf(1.0f, e - 1)) && t.failed++ < 8)
      fprintf(stderr, "%a: %d\n", a, exmy_pow2_exponent(a, &k));
  }
  free(v);
  tally_assert(&t);
}
END_TEST

START_TEST(delayed_update_keeps_the_scale_where_amax_is_unusable) {
  float history[3] = {0, 0, 0}, scale = 1.0f, inv = 1.0f;
  /* e4m3 (fmax 448): amax 4 -> 112; then 0 (history max still 4) -> 112 */
  exmy_core_delayed_update(history, 3, 0, 4.0f, 0, 448.0f, 0, 0, &scale, &inv);
  ck_assert(scale == 112.0f && inv == 1.0f / 112.0f);
  exmy_core_delayed_update(history, 3, 1, 0.0f, 0, 448.0f, 0, 0, &scale, &inv);
  ck_assert(scale == 112.0f);
  /* most recent only: amax 0 keeps the scale; NaN too */
  scale = 7.0f;
  exmy_core_delayed_update(history, 3, 2, 0.0f, 1, 448.0f, 0, 0, &scale, &inv);
  ck_assert(scale == 7.0f);
  exmy_core_delayed_update(history, 3, 2, NAN, 1, 448.0f, 0, 0, &scale, &inv);
  ck_assert(scale == 7.0f);
  /* the history's max wins over a smaller recent amax; pow2 rounds down */
  exmy_core_delayed_update(history, 3, 1, 1.0f, 0, 448.0f, 0, 1, &scale, &inv);
  ck_assert(scale == 64.0f && inv == 1.0f / 64.0f);
  ck_assert(history[1] == 1.0f);
}
END_TEST

int main(void) {
  const TTest *const tests[] = {scale_from_amax_is_ldexpf_of_the_quotient,
                                mx_exponent_and_powers_of_two,
                                pow2_exponent_takes_exactly_the_positive_powers_of_two,
                                delayed_update_keeps_the_scale_where_amax_is_unusable, NULL};
  return run_suite(suite_of("scale_core", 120, tests), true);
}
