/* The fast paths of cuda/fast_path.cuh against the reference core, both on
 * the GPU, on ALL 2^32 float32 inputs: rne, rna, rz, ru, rd, ro (saturating
 * and not), and sr with 32, 7 and 1 random bits (random words from a hash of
 * the input), for every format that has a fast path; fast_quantize_rne
 * against the core's code decoded; fast_decode against the core on every
 * code; and for bf16 and the E8Mx formats rz_by_mask and rne_by_mask on
 * every finite input, and by_mask_bf16x2 on every pair of bf16 values,
 * against the core's codes decoded.  Needs a GPU (tag "gpu"). */
#include <check.h>
#include <cuda_runtime.h>
#include <stdio.h>

#include "cuda/fast_path.cuh"
#include "lib/exmy.h"
#include "tests/check_suite.h"

using namespace exmy_cuda;

struct Miss {
  unsigned long long count;
  uint32_t x, fast, core;
};

/* On every float32: fast_encode for the compile-time format ID, or for
 * SPEC_GENERIC fast_encode_f on the run-time format rt (the generic kernels'
 * fast path), against the core. */
template <int ID, int MODE>
__global__ void k_sweep(const __grid_constant__ exmy_format rt, int R, int sat, Miss *m) {
  const auto &f = kernel_format<ID>(rt);
  const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
  unsigned long long bad = 0;
  for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (1ull << 32); i += stride) {
    const float x = __uint_as_float((uint32_t)i);
    const uint32_t rnd = MODE == EXMY_SR ? (uint32_t)(i * 0x9E3779B97F4A7C15ull >> 32) ^ (uint32_t)i : 0u;
    uint32_t fc;
    bool fast;
    if constexpr (ID == SPEC_GENERIC)
      fast = fast_encode_f<MODE>(rt, R, sat, x, rnd, fc);
    else
      fast = fast_encode<ID, MODE>(R, sat, x, rnd, fc);
    if (!fast) continue; /* the core runs there */
    const uint32_t cc = exmy_core_encode(&f, (exmy_rounding)MODE, sat, 0, R, x, rnd);
    if (fc != cc) {
      if (bad == 0) { m->x = (uint32_t)i; m->fast = fc; m->core = cc; }
      bad++;
    }
  }
  if (bad) atomicAdd(&m->count, bad);
}

/* On every float32: fast_quantize_rne (fast_quantize_rne_f for SPEC_GENERIC)
 * against the core's code decoded by the core, as float bits; m->count of
 * differences, and `served` the inputs the fast path took (not inf, NaN or
 * an overflow it leaves to the core). */
template <int ID>
__global__ void k_sweep_value(const __grid_constant__ exmy_format rt, int sat, Miss *m,
                              unsigned long long *served) {
  const auto &f = kernel_format<ID>(rt);
  const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
  unsigned long long bad = 0, took = 0;
  for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (1ull << 32); i += stride) {
    const float x = __uint_as_float((uint32_t)i);
    float q;
    bool fast;
    if constexpr (ID == SPEC_GENERIC)
      fast = fast_quantize_rne_f(rt, sat, x, q);
    else
      fast = fast_quantize_rne<ID>(sat, x, q);
    if (!fast) continue;
    took++;
    const uint32_t cc = exmy_core_encode(&f, EXMY_RNE, sat, 0, 32, x, 0);
    const uint32_t want = __float_as_uint(exmy_core_decode(&f, cc));
    if (__float_as_uint(q) != want) {
      if (bad == 0) { m->x = (uint32_t)i; m->fast = __float_as_uint(q); m->core = want; }
      bad++;
    }
  }
  if (bad) atomicAdd(&m->count, bad);
  atomicAdd(served, took);
}

/* On every finite float32, in either half of the pair: hw_quantize_rne_sat2
 * against the core's saturating rne code decoded by the core, as float bits
 * (the other half takes a scrambled input, finite or not skipped). */
template <int ID>
__global__ void k_sweep_hw_pair(Miss *m, unsigned long long *served) {
  constexpr exmy_format f = spec_format<ID>();
  const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
  unsigned long long bad = 0, took = 0;
  for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (1ull << 32); i += stride) {
    const float x = __uint_as_float((uint32_t)i);
    const float y = __uint_as_float((uint32_t)(i * 0x9E3779B1ull));
    if (!(fabsf(x) <= 3.40282347e38f) || !(fabsf(y) <= 3.40282347e38f)) continue;
    float qx, qy, qy2, qx2;
    hw_quantize_rne_sat2<ID>(x, y, qx, qy);
    hw_quantize_rne_sat2<ID>(y, x, qy2, qx2);
    took++;
    const uint32_t want = __float_as_uint(exmy_core_decode(&f, exmy_core_encode(&f, EXMY_RNE, 1, 0, 32, x, 0)));
    const uint32_t want_y = __float_as_uint(exmy_core_decode(&f, exmy_core_encode(&f, EXMY_RNE, 1, 0, 32, y, 0)));
    if (__float_as_uint(qx) != want || __float_as_uint(qx2) != want ||
        __float_as_uint(qy) != want_y || __float_as_uint(qy2) != want_y) {
      if (bad == 0) { m->x = (uint32_t)i; m->fast = __float_as_uint(qx); m->core = want; }
      bad++;
    }
  }
  if (bad) atomicAdd(&m->count, bad);
  atomicAdd(served, took);
}

/* On every finite float32: rz_by_mask, and rne_by_mask with saturation
 * `sat`, against the core's rz and rne codes decoded by the core, as float
 * bits; `served` counts the inputs rne_by_mask took (all but the overflows
 * it leaves to the core). */
template <int ID>
__global__ void k_sweep_mask(int sat, Miss *m, unsigned long long *served) {
  constexpr exmy_format f = spec_format<ID>();
  const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
  unsigned long long bad = 0, took = 0;
  for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (1ull << 32); i += stride) {
    const float x = __uint_as_float((uint32_t)i);
    if (!(fabsf(x) <= 3.40282347e38f)) continue;
    const uint32_t z = __float_as_uint(rz_by_mask<ID>(x));
    const uint32_t want_z = __float_as_uint(exmy_core_decode(&f, exmy_core_encode(&f, EXMY_RZ, sat, 0, 32, x, 0)));
    float q;
    const bool fast = rne_by_mask<ID>(sat, x, q);
    const uint32_t want = __float_as_uint(exmy_core_decode(&f, exmy_core_encode(&f, EXMY_RNE, sat, 0, 32, x, 0)));
    took += fast;
    if (z != want_z || (fast && __float_as_uint(q) != want)) {
      if (bad == 0) {
        m->x = (uint32_t)i;
        m->fast = z != want_z ? z : __float_as_uint(q);
        m->core = z != want_z ? want_z : want;
      }
      bad++;
    }
  }
  if (bad) atomicAdd(&m->count, bad);
  atomicAdd(served, took);
}

/* by_mask_bf16x2's table: for every bf16 pattern h, the bf16 bits of the
 * core's code of h's value under MODE decoded (a value of an E8Mx is a bf16
 * value), with bit 16 set where the pair path must serve that half (finite,
 * and for rne without saturation not overflowing). */
template <int ID, int MODE>
__global__ void k_mask_table(int sat, uint32_t *table) {
  constexpr exmy_format f = spec_format<ID>();
  const uint32_t h = blockIdx.x * blockDim.x + threadIdx.x;
  if (h > 0xFFFFu) return;
  const float x = __uint_as_float(h << 16);
  const uint32_t code = exmy_core_encode(&f, (exmy_rounding)MODE, sat, 0, 32, x, 0);
  const uint32_t v = __float_as_uint(exmy_core_decode(&f, code));
  const bool served = fabsf(x) <= 3.40282347e38f &&
                      (MODE == EXMY_RZ || sat || fabsf(__uint_as_float(v)) <= 3.40282347e38f);
  table[h] = (v >> 16) | (served ? 0x10000u : 0u);
}

/* On every 32-bit word (every pair of bf16 values): by_mask_bf16x2 serves
 * exactly the pairs whose halves the table marks, with both halves the
 * table's; m->count of differences, `served` of the pairs it took. */
template <int ID, int MODE>
__global__ void k_sweep_mask_pairs(int sat, const uint32_t *table, Miss *m,
                                   unsigned long long *served) {
  const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
  unsigned long long bad = 0, took = 0;
  for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (1ull << 32); i += stride) {
    const uint32_t p = (uint32_t)i, lo = table[p & 0xFFFFu], hi = table[p >> 16];
    uint32_t q = 0;
    const bool ok = by_mask_bf16x2<ID, MODE>(sat, p, q);
    const uint32_t want = (hi << 16) | (lo & 0xFFFFu);
    took += ok;
    if (ok != ((lo & hi) >> 16 & 1u) || (ok && q != want)) {
      if (bad == 0) { m->x = p; m->fast = ok ? q : 0xFFFFFFFFu; m->core = want; }
      bad++;
    }
  }
  if (bad) atomicAdd(&m->count, bad);
  atomicAdd(served, took);
}

/* fast_decode (or fast_decode_f) against the core on every code (the first
 * 2^24 of wider formats). */
template <int ID>
__global__ void k_decode_all(const __grid_constant__ exmy_format rt, Miss *m) {
  const auto &f = kernel_format<ID>(rt);
  const uint32_t n = f.bits >= 24 ? (1u << 24) : 1u << f.bits;
  for (uint32_t c = blockIdx.x * blockDim.x + threadIdx.x; c < n; c += gridDim.x * blockDim.x) {
    float fast;
    if constexpr (ID == SPEC_GENERIC)
      fast = fast_decode_f(rt, c);
    else
      fast = fast_decode<ID>(c);
    const uint32_t a = __float_as_uint(fast), b = __float_as_uint(exmy_core_decode(&f, c));
    if (a != b) { atomicAdd(&m->count, 1ull); m->x = c; m->fast = a; m->core = b; }
  }
}

/* k_sweep<ID, mode> for a mode known at run time. */
template <int ID>
static void sweep(int mode, const exmy_format &f, int R, int sat, Miss *d) {
  switch (mode) {
#define EXMY_SWEEP_CASE(m) \
  case m: k_sweep<ID, m><<<132 * 16, 256>>>(f, R, sat, d); break;
    EXMY_SWEEP_CASE(EXMY_RNE) EXMY_SWEEP_CASE(EXMY_RNA) EXMY_SWEEP_CASE(EXMY_RZ)
    EXMY_SWEEP_CASE(EXMY_RU) EXMY_SWEEP_CASE(EXMY_RD) EXMY_SWEEP_CASE(EXMY_RO)
    EXMY_SWEEP_CASE(EXMY_SR)
#undef EXMY_SWEEP_CASE
  }
}

/* The sweeps of a format: every mode with and without saturation, sr also
 * with 7 and 1 random bits. */
static const struct Run { int mode, R, sat; } kRuns[] = {
    {EXMY_RNE, 32, 0}, {EXMY_RNE, 32, 1}, {EXMY_RNA, 32, 0}, {EXMY_RNA, 32, 1},
    {EXMY_RZ, 32, 0},  {EXMY_RZ, 32, 1},  {EXMY_RU, 32, 0},  {EXMY_RU, 32, 1},
    {EXMY_RD, 32, 0},  {EXMY_RD, 32, 1},  {EXMY_RO, 32, 0},  {EXMY_RO, 32, 1},
    {EXMY_SR, 32, 0},  {EXMY_SR, 7, 0},   {EXMY_SR, 1, 0},   {EXMY_SR, 32, 1}};
constexpr int kNumRuns = sizeof kRuns / sizeof kRuns[0];

/* Every run of kRuns, then decode, with the kernels of table row ID
 * (SPEC_GENERIC: f known at run time only); prints a line per run, what
 * (" (run-time format)" or "") after its count; returns the differences. */
template <int ID>
static unsigned long long check_runs(const char *name, const exmy_format &f, const char *what) {
  Miss *d, h;
  unsigned long long total = 0;
  ck_assert_int_eq(cudaMalloc(&d, sizeof *d), cudaSuccess);
  /* the end of a sweep's line: its first difference (the fast side named
   * `fast`), and its differences counted into total */
  auto line_end = [&](const char *fast) {
    if (h.count) printf(" (first: 0x%08x %s 0x%x core 0x%x)", h.x, fast, h.fast, h.core);
    printf("\n");
    total += h.count;
  };
  for (int r = 0; r <= kNumRuns; r++) {
    ck_assert_int_eq(cudaMemset(d, 0, sizeof *d), cudaSuccess);
    if (r == kNumRuns) k_decode_all<ID><<<256, 256>>>(f, d);
    else sweep<ID>(kRuns[r].mode, f, kRuns[r].R, kRuns[r].sat, d);
    ck_assert_int_eq(cudaDeviceSynchronize(), cudaSuccess);
    ck_assert_int_eq(cudaMemcpy(&h, d, sizeof h, cudaMemcpyDeviceToHost), cudaSuccess);
    printf("fast path %-14s %-6s R=%-2d sat=%d: %llu differences from the core%s", name,
           r == kNumRuns ? "decode" : exmy_rounding_name((exmy_rounding)kRuns[r].mode),
           r == kNumRuns ? 0 : kRuns[r].R, r == kNumRuns ? 0 : kRuns[r].sat, h.count, what);
    line_end("fast");
  }
  /* the value path, saturating and not: it must take every finite input
   * but the overflows it leaves to the core */
  unsigned long long *served, n;
  ck_assert_int_eq(cudaMalloc(&served, sizeof *served), cudaSuccess);
  /* a sweep that counts: d and served zeroed, launch(), then h and n */
  auto counted = [&](auto launch) {
    ck_assert_int_eq(cudaMemset(d, 0, sizeof *d), cudaSuccess);
    ck_assert_int_eq(cudaMemset(served, 0, sizeof *served), cudaSuccess);
    launch();
    ck_assert_int_eq(cudaDeviceSynchronize(), cudaSuccess);
    ck_assert_int_eq(cudaMemcpy(&h, d, sizeof h, cudaMemcpyDeviceToHost), cudaSuccess);
    ck_assert_int_eq(cudaMemcpy(&n, served, sizeof n, cudaMemcpyDeviceToHost), cudaSuccess);
  };
  for (int sat = 0; sat <= 1; sat++) {
    counted([&] { k_sweep_value<ID><<<132 * 16, 256>>>(f, sat, d, served); });
    printf("fast path %-14s value  rne  sat=%d: %llu differences from the core's decoded code, "
           "%llu inputs served%s", name, sat, h.count, n, what);
    line_end("fast");
    /* 2^32 less 2^24 infinities and NaNs: all served when saturating */
    if (sat) ck_assert_msg(n == (1ull << 32) - (1ull << 24), "%s: %llu served", name, n);
  }
  if constexpr (HwPair<ID>::enabled) { /* the hardware's pair, saturating rne */
    counted([&] { k_sweep_hw_pair<ID><<<132 * 16, 256>>>(d, served); });
    printf("hardware pair %-10s rne  sat=1: %llu differences from the core's decoded code, "
           "%llu finite pairs%s", name, h.count, n, what);
    line_end("hw");
    ck_assert_msg(n > (1ull << 31), "%s: only %llu finite pairs", name, n);
  }
  if constexpr (by_mask_enabled<ID>()) { /* float32 bits with a mask: rz, rne */
    for (int sat = 0; sat <= 1; sat++) {
      counted([&] { k_sweep_mask<ID><<<132 * 16, 256>>>(sat, d, served); });
      printf("by masks %-15s rz, rne sat=%d: %llu differences from the core's decoded codes, "
             "%llu finite inputs served by rne%s", name, sat, h.count, n, what);
      line_end("mask");
      /* every finite input when saturating */
      if (sat) ck_assert_msg(n == (1ull << 32) - (1ull << 24), "%s: %llu served", name, n);
    }
    /* the same on two bf16 values a word: every pair */
    uint32_t *table;
    ck_assert_int_eq(cudaMalloc(&table, 4 << 16), cudaSuccess);
    for (int mode = 0; mode < 2; mode++)
      for (int sat = 0; sat <= 1; sat++) {
        counted([&] {
          if (mode == 0) {
            k_mask_table<ID, EXMY_RNE><<<256, 256>>>(sat, table);
            k_sweep_mask_pairs<ID, EXMY_RNE><<<132 * 16, 256>>>(sat, table, d, served);
          } else {
            k_mask_table<ID, EXMY_RZ><<<256, 256>>>(sat, table);
            k_sweep_mask_pairs<ID, EXMY_RZ><<<132 * 16, 256>>>(sat, table, d, served);
          }
        });
        printf("bf16 pairs by masks %-10s %s sat=%d: %llu differences from the core's decoded "
               "codes, %llu of 2^32 pairs served%s", name, mode ? "rz " : "rne", sat, h.count, n,
               what);
        line_end("pair");
        /* pairs of finite halves (bf16 has 2^8 patterns of inf and NaN):
         * (2^16 - 2^8)^2, all served but overflows */
        const unsigned long long finite = (65536ull - 256) * (65536ull - 256);
        ck_assert_msg(n <= finite && n > finite - (finite >> 6), "%s: %llu pairs served", name, n);
        if (mode == 1 || sat) ck_assert_msg(n == finite, "%s: %llu pairs served", name, n);
      }
    cudaFree(table);
  }
  cudaFree(served);
  cudaFree(d);
  return total;
}

static unsigned long long check_runtime(const char *name) {
  exmy_format f;
  ck_assert_int_eq(exmy_format_parse(name, &f), 0);
  ck_assert(fast_path_ok(f));
  return check_runs<SPEC_GENERIC>(name, f, " (run-time format)");
}

template <int ID>
static unsigned long long check_format(const char *name) {
  /* the kernels fold the format; passed for their signature */
  return check_runs<ID>(name, spec_format<ID>(), "");
}

/* check_format for the rows of the format table that have fast paths. */
template <int ID>
static unsigned long long check_if_fast(const char *name, int *formats) {
  if constexpr (Fast<ID>::enabled) {
    ++*formats;
    return check_format<ID>(name);
  } else {
    return 0;
  }
}

START_TEST(fast_equals_core_on_all_inputs) {
  unsigned long long bad = 0;
  int formats = 0;
#define EXMY_CHECK_ROW(id, name, ...) bad += check_if_fast<SPEC_##id>(name, &formats);
  EXMY_FORMAT_TABLE(EXMY_CHECK_ROW)
#undef EXMY_CHECK_ROW
  ck_assert_msg(formats >= 15, "only %d compile-time formats have fast paths", formats);
  const char *generic[] = {"float8_e4m3fnuz", "e8m3", "e5m10", "e2m5", "e3m0", "e8m2", "e6m5", "e8m7"};
  for (int i = 0; i < 8; i++) bad += check_runtime(generic[i]);
  ck_assert_msg(bad == 0, "%llu fast-path differences", bad);
}
END_TEST

int main(void) {
  const TTest *const tests[] = {fast_equals_core_on_all_inputs, NULL};
  return run_suite(suite_of("cuda_fast_path", 300, tests), false);
}
