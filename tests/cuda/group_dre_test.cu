/* The fast rounding of cuda/group_dre.cuh (group_round_try: what the
 * trainer's fused COAT optimizer runs) against its exact path (group_round:
 * lib/scale_core.h's double powers and the core's encode), both on the GPU,
 * wherever the fast path says it served the element: the same float, bit for
 * bit.  Inputs aimed at where the two could part: x whose expanded and scaled
 * value lies at a value of the format or a midpoint between two (where the
 * rounding decides), then up to 2^15 ulps either side, and x log-uniform over
 * the normal floats; one group a warp, its expansion exponent k up to 16 (a
 * third of the groups within 0.01 of 16) and its scale log-uniform over
 * 2^-120 .. 2^126 or the group's own (the format's largest value over
 * amax^k).  Every format the fast path serves, saturating and not, with and
 * without the hardware's conversions.  Needs a GPU (tag "gpu"). */
#include <check.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>

#include "cuda/group_dre.cuh"
#include "experiments/trainer/splitmix64.h"
#include "lib/exmy.h"
#include "tests/check_suite.h"

using namespace exmy_cuda;

/* What a configuration's run found: inputs tried (finite), served by the fast
 * path, and differing from the exact path; the first difference. */
struct Tally {
  unsigned long long tried, served, differ;
  unsigned int first_taken;
  float x, fast, exact, scale;
  double k;
};

/* A uniform double in [0, 1) from the stream of state s. */
__device__ double uniform(uint64_t &s) { return (double)(splitmix64(&s) >> 11) * 0x1p-53; }

/* per_lane inputs a lane of one group a warp.  Every lane draws the group's
 * k and scale from the same stream (the tables are shuffled across the warp)
 * and its inputs from its own. */
template <bool FAST>
__global__ void k_compare(const __grid_constant__ exmy_format f, FormatFast ff, KOpts o,
                          float fmax, uint64_t seed, int per_lane, Tally *out) {
  const uint64_t warp = ((uint64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
  uint64_t gs = seed ^ (warp * 0xD1B54A32D192ED03ull);
  uint64_t ls = gs ^ ((uint64_t)(threadIdx.x % 32 + 1) << 40);
  double k = uniform(gs) < 0.3 ? 16.0 - 0.01 * uniform(gs) : 0.05 + 15.95 * uniform(gs);
  float s;
  if (uniform(gs) < 0.5) {
    s = exp2f((float)(-120.0 + 246.0 * uniform(gs)));
  } else {
    const double amax = exp2(-30.0 + 40.0 * uniform(gs));
    s = (float)(fmax / pow(amax, k));
    if (!(s > 0.0f && s <= 3.40282347e38f)) s = 1.0f;
  }
  GroupScale g[2];
  g[0] = {s, __fdiv_rn(1.0f, s), k};
  g[1] = g[0];
  GroupFast t[2];
  t[0] = group_fast(f, ff, o, g[0]);
  t[1] = t[0];
  group_tables(g, t);
  unsigned long long tried = 0, served = 0, differ = 0;
  for (int i = 0; i < per_lane; i++) {
    float x;
    if (uniform(ls) < 0.7) {
      /* sig / 2^(M+1) steps: every value of the format and every midpoint,
       * over its range and three binades past each end */
      const int span = f.emax - f.emin + f.man_bits + 6;
      const int p = f.emin - f.man_bits - 3 + (int)(uniform(ls) * span);
      const double v = ldexp(1.0 + floor(uniform(ls) * (2 << f.man_bits)) / (2 << f.man_bits), p);
      x = (float)pow(v / s, 1.0 / k);
      const int m = (int)(uniform(ls) * 16);
      x = __uint_as_float(__float_as_uint(x) + (int)((2.0 * uniform(ls) - 1.0) * (1 << m)));
    } else {
      x = exp2f((float)(-126.0 + 253.0 * uniform(ls)));
    }
    if (uniform(ls) < 0.5) x = -x;
    bool ok;
    const float fast = group_round_try<FAST>(f, o, x, g[0], t[0], &ok); /* every lane */
    if (isnan(x) || isinf(x)) continue;
    tried++;
    if (!ok) continue;
    served++;
    const float exact = group_round(f, o, x, g[0], 0);
    if (__float_as_uint(fast) != __float_as_uint(exact)) {
      if (atomicCAS(&out->first_taken, 0u, 1u) == 0u)
        out->x = x, out->fast = fast, out->exact = exact, out->scale = s, out->k = k;
      differ++;
    }
  }
  atomicAdd(&out->tried, tried);
  atomicAdd(&out->served, served);
  if (differ) atomicAdd(&out->differ, differ);
}

/* One configuration: format ID, saturating or not, FAST (both moments' formats
 * rounded by the hardware: E4M3 and E5M2 saturating only).  Returns the
 * differences; asserts that the fast path served some of the inputs. */
template <int ID>
static unsigned long long compare(const char *name, int saturate, bool fast_kernel) {
  const exmy_format f = spec_format<ID>();
  const FormatFast ff = format_fast(f, saturate);
  const KOpts o = {EXMY_RNE, saturate, 0, 32, 0, 0};
  exmy_format_info info;
  exmy_format_get_info(&f, &info);
  Tally *d = nullptr, h = {};
  ck_assert(cudaMalloc((void **)&d, sizeof h) == cudaSuccess);
  ck_assert(cudaMemset(d, 0, sizeof h) == cudaSuccess);
  const int blocks = 1024, threads = 256, per_lane = 256, launches = 4;
  for (int r = 0; r < launches; r++) {
    const uint64_t seed = 1000003ull * (uint64_t)(r + 1) + (uint64_t)ID;
    if (fast_kernel)
      k_compare<true><<<blocks, threads>>>(f, ff, o, info.max, seed, per_lane, d);
    else
      k_compare<false><<<blocks, threads>>>(f, ff, o, info.max, seed, per_lane, d);
  }
  ck_assert(cudaDeviceSynchronize() == cudaSuccess);
  ck_assert(cudaMemcpy(&h, d, sizeof h, cudaMemcpyDeviceToHost) == cudaSuccess);
  cudaFree(d);
  printf("group_round_try %-12s sat %d %-10s (narrow %d, hw %d): %llu inputs, %llu served "
         "(%.1f%%), %llu differ from group_round\n",
         name, saturate, fast_kernel ? "FAST" : "general", ff.narrow, ff.hw, h.tried, h.served,
         100.0 * (double)h.served / (double)(h.tried ? h.tried : 1), h.differ);
  if (h.differ)
    printf("  first: x = %a, k = %.17g, scale = %a: fast %a, exact %a\n", h.x, h.k, h.scale,
           h.fast, h.exact);
  ck_assert_msg(h.tried > 0 && h.served > 0, "%s: the fast path served none of %llu", name,
                h.tried);
  return h.differ;
}

START_TEST(group_round_try_equals_group_round) {
  unsigned long long bad = 0;
  bad += compare<SPEC_E4M3FN>("e4m3fn", 1, true);
  bad += compare<SPEC_E5M2>("e5m2", 1, true);
  bad += compare<SPEC_E4M3FN>("e4m3fn", 1, false);
  bad += compare<SPEC_E5M2>("e5m2", 1, false);
  bad += compare<SPEC_E4M3FN>("e4m3fn", 0, false);
  bad += compare<SPEC_E5M2>("e5m2", 0, false);
  bad += compare<SPEC_E3M2>("e3m2", 1, false);
  bad += compare<SPEC_E2M1>("e2m1", 1, false);
  bad += compare<SPEC_E2M3>("e2m3", 1, false);
  bad += compare<SPEC_E4M3FNUZ>("e4m3fnuz", 1, false);
  bad += compare<SPEC_E5M2FNUZ>("e5m2fnuz", 1, false);
  bad += compare<SPEC_E5M2FNUZ>("e5m2fnuz", 0, false);
  bad += compare<SPEC_E4M3>("e4m3", 0, false);
  bad += compare<SPEC_E8M3>("e8m3", 1, false); /* the expansion in double */
  ck_assert_msg(bad == 0, "%llu elements where the fast path differs", bad);
}
END_TEST

int main(void) {
  const TTest *const tests[] = {group_round_try_equals_group_round, NULL};
  return run_suite(suite_of("cuda_group_dre", 600, tests), false);
}
