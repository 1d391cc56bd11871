/* GPU quantize / encode / decode against the CPU reference (exmy_ref_*), bit
 * for bit: every format of the issue table plus generic eXmY, every rounding
 * mode, saturation on and off, subnormals kept and flushed, stochastic
 * rounding with aligned and unaligned offsets (one wrapping past 2^64) and
 * short sr_bits, on the structured input set; then unaligned pointers and ragged lengths, and every
 * code through decode.  Needs a GPU (tag "gpu"). */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/exmy_cuda.h"
#include "lib/exmy.h"
#include "tests/check_suite.h"
#include "tests/cuda/gpu_check.h"

static const char *const kFormats[] = {
    "float8_e4m3fn", "float8_e5m2",   "float8_e4m3fnuz", "float8_e5m2fnuz",
    "float8_e3m4",   "float8_e4m3",   "float6_e2m3fn",   "float6_e3m2fn",
    "float4_e2m1fn", "float8_e8m0fnu", "bfloat16",       "float16",
    "float32",       "e8m3",          "e8m4",            "e8m5",
    "e8m6",          "e5m10",         "e2m5",            "e3m0",
};
enum { NFORMATS = sizeof kFormats / sizeof *kFormats };

static uint32_t *g_bits;
static float *g_x;
static size_t g_n;
static float *g_dx;

static void setup(void) {
  if (g_bits) return;
  g_n = structured_inputs(1 << 20, &g_bits);
  g_x = (float *)g_bits;
  g_dx = dev_from(g_x, g_n * sizeof(float));
}

static uint32_t code_at(const void *codes, size_t bytes, size_t i) {
  return bytes == 1 ? ((const uint8_t *)codes)[i]
         : bytes == 2 ? ((const uint16_t *)codes)[i]
                      : ((const uint32_t *)codes)[i];
}

static uint32_t f32_bits(float v) {
  uint32_t u;
  memcpy(&u, &v, 4);
  return u;
}

/* Runs one (format, options) on x[0..n) (device copy dx), compares GPU codes
 * and quantized values with the reference; returns the number of
 * differences, printing the first few. */
static size_t compare_one(const exmy_format *f, const exmy_rounding_opts *o,
                          const float *x, const float *dx, size_t n) {
  const size_t bytes = exmy_code_bytes(f);
  void *dcodes = dev_alloc(n * bytes);
  float *dq = dev_alloc(n * sizeof(float));
  CU(exmy_cuda_encode_f32(f, o, dx, dcodes, n, 0));
  CU(exmy_cuda_quantize_f32(f, o, dx, dq, n, 0));
  void *codes = malloc(n * bytes);
  float *q = malloc(n * sizeof(float));
  to_host_free(codes, dcodes, n * bytes);
  to_host_free(q, dq, n * sizeof(float));
  size_t bad = 0;
#pragma omp parallel for reduction(+ : bad) schedule(static)
  for (size_t i = 0; i < n; i++) {
    const uint32_t rnd = o->mode == EXMY_SR ? exmy_sr_random(o->seed, o->offset + i) : 0;
    const uint32_t want = exmy_ref_encode(f, o, x[i], rnd);
    const float wq = exmy_ref_decode(f, want);
    const uint32_t got = code_at(codes, bytes, i);
    if (got != want || f32_bits(q[i]) != f32_bits(wq)) {
      if (bad < 3) {
#pragma omp critical
        printf("  %s %s sat=%d flush=%d bits=%d offset=%llu: x=0x%08x code gpu 0x%x cpu 0x%x, "
               "quantize gpu 0x%08x cpu 0x%08x\n",
               f->name, exmy_rounding_name(o->mode), o->saturate, o->flush_subnormals,
               o->sr_bits, (unsigned long long)o->offset, f32_bits(x[i]), got, want,
               f32_bits(q[i]), f32_bits(wq));
      }
      bad++;
    }
  }
  free(codes);
  free(q);
  return bad;
}

START_TEST(every_mode_and_option) {
  setup();
  exmy_format f;
  ck_assert_int_eq(exmy_format_parse(kFormats[_i], &f), 0);
  size_t bad = 0, runs = 0;
  for (int mode = EXMY_RNE; mode <= EXMY_SR; mode++)
    for (int sat = 0; sat < 2; sat++)
      for (int flush = 0; flush < 2; flush++) {
        exmy_rounding_opts o = {0};
        o.mode = (exmy_rounding)mode;
        o.saturate = sat;
        o.flush_subnormals = flush;
        o.seed = 0x243F6A8885A308D3ull;
        bad += compare_one(&f, &o, g_x, g_dx, g_n);
        runs++;
        if (mode == EXMY_SR) { /* unaligned stream offset, short sr_bits */
          o.offset = 1000003;
          o.sr_bits = 7;
          bad += compare_one(&f, &o, g_x, g_dx, g_n);
          o.offset = (1ull << 40) + 2;
          o.sr_bits = 0;
          bad += compare_one(&f, &o, g_x, g_dx, g_n);
          /* the stream index wraps past 2^64 inside the array (its Philox
           * block index at 2^62), from an offset of 3 mod 4 */
          o.offset = 0 - (uint64_t)1000001;
          bad += compare_one(&f, &o, g_x, g_dx, g_n);
          runs += 3;
        }
      }
  printf("convert %-16s %zu runs x %zu inputs: %zu differences\n", f.name, runs, g_n, bad);
  ck_assert_msg(bad == 0, "%s: %zu GPU/CPU differences", f.name, bad);
}
END_TEST

/* Unaligned pointers and lengths that leave a ragged tail: the scalar paths. */
START_TEST(unaligned_and_ragged) {
  setup();
  const char *names[] = {"float8_e4m3fn", "bfloat16", "float32", "e8m3"};
  size_t bad = 0;
  for (int k = 0; k < 4; k++) {
    exmy_format f;
    ck_assert_int_eq(exmy_format_parse(names[k], &f), 0);
    for (int mode = EXMY_RNE; mode <= EXMY_SR; mode += 3) {
      exmy_rounding_opts o = {0};
      o.mode = (exmy_rounding)mode;
      o.seed = 77;
      o.offset = 5;
      const size_t lens[] = {1, 7, 9, 4099, 100003};
      for (int l = 0; l < 5; l++) /* start 3 floats in: 12-byte misalignment */
        bad += compare_one(&f, &o, g_x + 3, g_dx + 3, lens[l]);
    }
  }
  ck_assert_msg(bad == 0, "%zu differences on unaligned or ragged calls", bad);
}
END_TEST

/* Every code (all 2^bits for <= 16-bit formats) through decode. */
START_TEST(decode_every_code) {
  size_t bad = 0;
  for (int k = 0; k < NFORMATS; k++) {
    exmy_format f;
    ck_assert_int_eq(exmy_format_parse(kFormats[k], &f), 0);
    if (f.bits > 16) continue;
    const size_t bytes = exmy_code_bytes(&f), n = (size_t)1 << f.bits;
    void *codes = malloc(n * bytes);
    for (size_t i = 0; i < n; i++) {
      if (bytes == 1) ((uint8_t *)codes)[i] = (uint8_t)i;
      else ((uint16_t *)codes)[i] = (uint16_t)i;
    }
    void *dcodes = dev_from(codes, n * bytes);
    float *dy = dev_alloc(n * sizeof(float)), *y = malloc(n * sizeof(float));
    CU(exmy_cuda_decode_f32(&f, dcodes, dy, n, 0));
    to_host_free(y, dy, n * sizeof(float));
    for (size_t i = 0; i < n; i++) {
      float want = exmy_ref_decode(&f, (uint32_t)i);
      if (f32_bits(y[i]) != f32_bits(want)) {
        if (bad < 5) printf("  decode %s code 0x%zx: gpu 0x%08x cpu 0x%08x\n", f.name, i,
                            f32_bits(y[i]), f32_bits(want));
        bad++;
      }
    }
    free(codes);
    free(y);
    CU(cudaFree(dcodes));
  }
  ck_assert_msg(bad == 0, "%zu decode differences", bad);
}
END_TEST

int main(void) {
  const TTest *const tests[] = {unaligned_and_ragged, decode_every_code, NULL};
  return run_suite(suite_of_loop("cuda_convert", 600, every_mode_and_option, NFORMATS, tests),
                   false);
}
