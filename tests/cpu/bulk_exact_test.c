/* The fast bulk kernels (cpu/bulk.c) against the scalar reference
 * (lib/round_core.h via exmy_ref_*), bit for bit: every named format, E8M3..
 * E8M6, generic and exotic-bias formats; every mode, saturate and flush on/off,
 * several sr_bits; 1 and 2 threads; odd lengths, unaligned starts, in-place,
 * and stream offsets not divisible by 4.  Inputs: every value of the format
 * (or a sample for wide ones), the midpoints between neighbours, float32
 * neighbours of both, the underflow/overflow boundaries, specials, float32
 * subnormals, and random bit patterns.  Also: outputs written by
 * non-temporal stores at every alignment, and which loop runs (the AVX-512
 * loops where the CPU has them, in the shipped build).  Prints the first
 * mismatch. */
#include <check.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/bulk_dispatch.h"
#include "cpu/exmy_cpu.h"

static uint32_t bits_of(float x) { uint32_t u; memcpy(&u, &x, 4); return u; }
static float f_of(uint32_t u) { float x; memcpy(&x, &u, 4); return x; }

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint32_t next32(void) {
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return (uint32_t)(rng >> 11);
}

typedef struct { float *v; size_t n, cap; } vec;
static void push(vec *a, float x) {
  if (a->n == a->cap) a->v = realloc(a->v, (a->cap = a->cap * 2 + 1024) * sizeof(float));
  a->v[a->n++] = x;
}
/* x and its float32 neighbours, both signs */
static void push_around(vec *a, float x) {
  if (!isfinite(x)) return;
  uint32_t u = bits_of(fabsf(x));
  for (int d = -1; d <= 1; d++) {
    uint32_t w = u + (uint32_t)d;
    if ((int)d < 0 && u < (uint32_t)-d) continue;
    push(a, f_of(w)), push(a, -f_of(w));
  }
}

/* The structured input set of format f, padded with random bit patterns to at
 * least `min_n` elements (so that 2-thread runs really split). */
static vec inputs_for(const exmy_format *f, size_t min_n) {
  vec a = {0};
  const uint32_t mags = f->max_code + 1;
  uint32_t *codes = malloc(sizeof(uint32_t) * (mags < 3000 ? mags : 3000));
  size_t nc = 0;
  if (mags <= 2048) {
    for (uint32_t c = 0; c < mags; c++) codes[nc++] = c;
  } else { /* the edges of the range, the normal/subnormal seam, a sample */
    uint32_t seam = 1u << f->man_bits;
    for (uint32_t c = 0; c < 200; c++) codes[nc++] = c, codes[nc++] = f->max_code - c;
    for (uint32_t c = seam > 100 ? seam - 100 : 0; c < seam + 100 && c <= f->max_code; c++)
      codes[nc++] = c;
    while (nc < 2500) codes[nc++] = next32() % mags;
  }
  for (size_t i = 0; i < nc; i++) {
    float v = exmy_ref_decode(f, codes[i]);
    push_around(&a, v);
    if (codes[i] < f->max_code) { /* the midpoint to the next value */
      double w = exmy_ref_decode(f, codes[i] + 1);
      push_around(&a, (float)(0.5 * ((double)v + w)));
    }
  }
  exmy_format_info info;
  exmy_format_get_info(f, &info);
  /* overflow: max + half a step and beyond; underflow: half the smallest value */
  double top_step = ldexp(1.0, f->emax - f->man_bits);
  push_around(&a, (float)(info.max + 0.5 * top_step));
  push_around(&a, (float)(info.max + top_step));
  push_around(&a, (float)(info.max * 2.0));
  push_around(&a, info.min_subnormal * 0.5f);
  push_around(&a, info.min_subnormal * 0.25f);
  push_around(&a, info.min_subnormal * 0.75f);
  push_around(&a, info.min_normal * 0.5f);
  const float specials[] = {0.0f, INFINITY, 3.40282347e38f, 1.17549435e-38f,
                            1.4e-45f, 5.9e-39f, 1.0f, 2.0f, 3.0f};
  for (size_t i = 0; i < sizeof specials / sizeof *specials; i++) push_around(&a, specials[i]);
  push(&a, INFINITY), push(&a, -INFINITY), push(&a, 0.0f), push(&a, -0.0f);
  push(&a, f_of(0x7FC00000u)), push(&a, f_of(0xFFC00000u)), push(&a, f_of(0x7F800001u)),
      push(&a, f_of(0xFFBFFFFFu));
  /* every float32 subnormal exponent scale */
  for (int k = 0; k < 23; k++) push(&a, f_of(1u << k)), push(&a, f_of((1u << k) | 1u)),
      push(&a, -f_of((2u << k) - 1u));
  /* random bit patterns, and random values within the format's range */
  for (size_t i = 0; i < 8000; i++) push(&a, f_of(next32()));
  while (a.n < min_n || a.n % 2 == 0) {
    float v = exmy_ref_decode(f, next32() % mags);
    push(&a, v * (1.0f + (float)(next32() % 1000) / 4096.0f));
  }
  free(codes);
  return a;
}

static const char *kNames[] = {
    "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz",
    "float8_e3m4", "float8_e4m3", "float6_e2m3fn", "float6_e3m2fn",
    "float4_e2m1fn", "float8_e8m0fnu", "bfloat16", "float16", "float32",
    "e8m3", "e8m4", "e8m5", "e8m6", "e1m5", "e1m2", "e2m0", "e3m0", "e5m7",
    "e7m5", "e4m10", "e8m10", "e6m17", "e8m23"};

static int n_fail = 0;

static int report(const exmy_format *f, const exmy_rounding_opts *o, int threads,
                  const char *what, size_t i, float x, uint32_t got, uint32_t want) {
  if (n_fail++ == 0)
    fprintf(stderr,
            "MISMATCH %s %s mode=%s sat=%d flush=%d sr_bits=%d offset=%llu threads=%d "
            "i=%zu x=%a (0x%08x): got 0x%08x want 0x%08x\n",
            what, f->name, exmy_rounding_name(o->mode), o->saturate, o->flush_subnormals,
            o->sr_bits, (unsigned long long)o->offset, threads, i, x, bits_of(x), got, want);
  return 1;
}

/* quantize and encode of x[0..n) (a slice starting at `start` of the input) */
static void check_opts(const exmy_format *f, const exmy_rounding_opts *o,
                       const float *x, size_t n) {
  const size_t bytes = exmy_code_bytes(f);
  uint32_t *want = malloc(n * 4);
  for (size_t i = 0; i < n; i++) {
    uint32_t r = o->mode == EXMY_SR ? exmy_sr_random(o->seed, o->offset + i) : 0;
    want[i] = exmy_ref_encode(f, o, x[i], r);
  }
  float *y = malloc(n * 4);
  void *c = malloc(n * bytes);
  for (int threads = 1; threads <= 2; threads++) {
    omp_set_num_threads(threads);
    exmy_quantize_f32(f, o, x, y, n);
    for (size_t i = 0; i < n; i++) {
      uint32_t w = bits_of(exmy_ref_decode(f, want[i]));
      if (bits_of(y[i]) != w && report(f, o, threads, "quantize", i, x[i], bits_of(y[i]), w)) break;
    }
    exmy_encode_f32(f, o, x, c, n);
    for (size_t i = 0; i < n; i++) {
      uint32_t g = bytes == 1 ? ((uint8_t *)c)[i] : bytes == 2 ? ((uint16_t *)c)[i] : ((uint32_t *)c)[i];
      if (g != want[i] && report(f, o, threads, "encode", i, x[i], g, want[i])) break;
    }
    /* in place: y == x */
    memcpy(y, x, n * 4);
    exmy_quantize_f32(f, o, y, y, n);
    for (size_t i = 0; i < n; i++) {
      uint32_t w = bits_of(exmy_ref_decode(f, want[i]));
      if (bits_of(y[i]) != w && report(f, o, threads, "quantize-in-place", i, x[i], bits_of(y[i]), w)) break;
    }
  }
  free(want), free(y), free(c);
}

static void check_format(const exmy_format *f) {
  vec in = inputs_for(f, 36001);
  const int sr_bits_set[] = {0, 1, 9, 23, 31};
  const int n_sr_sets = 5;
  for (int mode = EXMY_RNE; mode <= EXMY_SR; mode++)
    for (int sat = 0; sat < 2; sat++)
      for (int flush = 0; flush < 2; flush++) {
        int nbits = mode == EXMY_SR ? n_sr_sets : 1;
        for (int b = 0; b < nbits; b++) {
          exmy_rounding_opts o = {.mode = (exmy_rounding)mode, .saturate = sat,
                                  .flush_subnormals = flush, .seed = 0x1234567890abull + b,
                                  .offset = b == 0 ? 0 : 4000000000ull + 4 * b + b % 4,
                                  .sr_bits = sr_bits_set[b]};
          /* the whole (odd-length) array, then an unaligned, odd slice */
          check_opts(f, &o, in.v, in.n);
          check_opts(f, &o, in.v + 3, in.n - 6);
        }
      }
  /* decode: every code (or a sample) with junk above the width, short and long */
  const size_t nd = 300001;
  uint32_t *codes = malloc(nd * 4);
  for (size_t i = 0; i < nd; i++) {
    uint32_t r = next32();
    codes[i] = f->bits >= 16 ? r : (i < (1u << f->bits) ? (uint32_t)i : r);
  }
  const size_t bytes = exmy_code_bytes(f);
  void *packed = malloc(nd * bytes);
  for (size_t i = 0; i < nd; i++) {
    if (bytes == 1) ((uint8_t *)packed)[i] = (uint8_t)codes[i];
    else if (bytes == 2) ((uint16_t *)packed)[i] = (uint16_t)codes[i];
    else ((uint32_t *)packed)[i] = codes[i];
  }
  float *y = malloc(nd * 4);
  const size_t lens[] = {1001, nd};
  exmy_rounding_opts none = {0};
  for (int threads = 1; threads <= 2; threads++)
    for (int l = 0; l < 2; l++) {
      omp_set_num_threads(threads);
      exmy_decode_f32(f, packed, y, lens[l]);
      for (size_t i = 0; i < lens[l]; i++) {
        uint32_t c = bytes == 1 ? ((uint8_t *)packed)[i] : bytes == 2 ? ((uint16_t *)packed)[i] : codes[i];
        uint32_t w = bits_of(exmy_ref_decode(f, c));
        if (bits_of(y[i]) != w && report(f, &none, threads, "decode", i, 0, bits_of(y[i]), w)) break;
      }
    }
  free(codes), free(packed), free(y), free(in.v);
}

START_TEST(named_and_generic_formats) {
  exmy_format f;
  n_fail = 0;
  ck_assert_int_eq(exmy_format_parse(kNames[_i], &f), 0);
  check_format(&f);
  ck_assert_msg(n_fail == 0, "%d mismatches in %s (first printed above)", n_fail, f.name);
}
END_TEST

START_TEST(exotic_bias_takes_reference_path) {
  /* bias 130 > 127: some normal values are float32 subnormals */
  exmy_format f;
  n_fail = 0;
  ck_assert_int_eq(exmy_format_make("e4m3b130", 4, 3, 130, EXMY_SPECIALS_FN, &f), 0);
  check_format(&f);
  ck_assert_int_eq(exmy_format_make("e5m2b20", 5, 2, 20, EXMY_SPECIALS_IEEE, &f), 0);
  check_format(&f);
  ck_assert_msg(n_fail == 0, "%d mismatches", n_fail);
}
END_TEST

/* The same comparisons with the output forced through the non-temporal
 * stores (normally only for arrays larger than the cache): outputs starting
 * across a cache line, so that the unaligned heads and the tile seams of sr
 * are exercised, lengths from 1 to a few sr tiles, and in place. */
START_TEST(streaming_stores) {
  static const char *names[] = {"float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "bfloat16",
                                "e8m3", "float8_e3m4", "float4_e2m1fn", "float8_e8m0fnu",
                                "float32", "float16"};
  n_fail = 0;
  exmy_bulk_set_stream_min_bytes(1);
  for (size_t k = 0; k < sizeof names / sizeof *names; k++) {
    exmy_format f;
    ck_assert_int_eq(exmy_format_parse(names[k], &f), 0);
    vec in = inputs_for(&f, 9001);
    const size_t bytes = exmy_code_bytes(&f), n = in.n;
    uint32_t *want = malloc(n * 4);
    const size_t room = (n * 4 + 64 + 63) & ~(size_t)63; /* whole lines, one spare */
    char *ybuf = aligned_alloc(64, room), *cbuf = aligned_alloc(64, room);
    for (int mode = EXMY_RNE; mode <= EXMY_SR; mode++)
      for (int opt = 0; opt < 4; opt++) {
        const int sat = opt & 1, flush = opt >> 1;
        exmy_rounding_opts o = {.mode = (exmy_rounding)mode, .saturate = sat, .flush_subnormals = flush,
                                .seed = 77 + k, .offset = 5 + k, .sr_bits = sat ? 13 : 0};
        for (size_t i = 0; i < n; i++)
          want[i] = exmy_ref_encode(&f, &o, in.v[i], mode == EXMY_SR ? exmy_sr_random(o.seed, o.offset + i) : 0);
        /* outputs starting at these elements of a line */
        static const size_t starts[] = {0, 1, 2, 3, 7, 15, 31, 33, 63};
        for (size_t st = 0; st < sizeof starts / sizeof *starts; st++) {
          float *y = (float *)(void *)(ybuf + 4 * (starts[st] % 16));
          void *c = cbuf + bytes * (starts[st] % (64 / bytes));
          const size_t lens[] = {1, 17, 63, 64, 65, 200, 2500, n};
          for (int threads = 1; threads <= 2; threads++) {
            omp_set_num_threads(threads);
            for (size_t l = 0; l < sizeof lens / sizeof *lens; l++) {
              const size_t len = lens[l] < n ? lens[l] : n;
              exmy_quantize_f32(&f, &o, in.v, y, len);
              for (size_t i = 0; i < len; i++) {
                uint32_t w = bits_of(exmy_ref_decode(&f, want[i]));
                if (bits_of(y[i]) != w && report(&f, &o, threads, "quantize-stream", i, in.v[i], bits_of(y[i]), w)) break;
              }
              exmy_encode_f32(&f, &o, in.v, c, len);
              for (size_t i = 0; i < len; i++) {
                uint32_t g = bytes == 1 ? ((uint8_t *)c)[i] : bytes == 2 ? ((uint16_t *)c)[i] : ((uint32_t *)c)[i];
                if (g != want[i] && report(&f, &o, threads, "encode-stream", i, in.v[i], g, want[i])) break;
              }
              memcpy(y, in.v, len * 4);
              exmy_quantize_f32(&f, &o, y, y, len);
              for (size_t i = 0; i < len; i++) {
                uint32_t w = bits_of(exmy_ref_decode(&f, want[i]));
                if (bits_of(y[i]) != w && report(&f, &o, threads, "quantize-stream-in-place", i, in.v[i], bits_of(y[i]), w)) break;
              }
            }
          }
        }
      }
    free(want), free(ybuf), free(cbuf), free(in.v);
  }
  exmy_bulk_set_stream_min_bytes(0);
  ck_assert_msg(n_fail == 0, "%d mismatches with streaming stores", n_fail);
}
END_TEST

/* Stream indices offset + i wrap around 2^64 like the reference's, and with
 * them the Philox block numbers (j >> 2) around 2^62. */
START_TEST(sr_offset_wraps) {
  static const char *names[] = {"float8_e4m3fn", "bfloat16", "float8_e8m0fnu"};
  n_fail = 0;
  for (size_t k = 0; k < sizeof names / sizeof *names; k++) {
    exmy_format f;
    ck_assert_int_eq(exmy_format_parse(names[k], &f), 0);
    vec in = inputs_for(&f, 36001);
    for (int back = 997; back <= 1000; back++)
      for (int flush = 0; flush < 2; flush++) {
        exmy_rounding_opts o = {.mode = EXMY_SR, .flush_subnormals = flush, .seed = 99,
                                .offset = UINT64_MAX - (uint64_t)back};
        check_opts(&f, &o, in.v, in.n);
      }
    free(in.v);
  }
  ck_assert_msg(n_fail == 0, "%d mismatches", n_fail);
}
END_TEST

/* The shipped library must run the AVX-512 loops where the CPU has them: for
 * the formats they cover (with and without flush), a slip in the dispatch
 * would otherwise only show as a slow benchmark. */
START_TEST(dispatch) {
  static const char *names[] = {"float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "bfloat16",
                                "e8m3", "e8m6", "float8_e3m4", "float4_e2m1fn", "float16",
                                "float32", "float8_e8m0fnu"};
  const int avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                     __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
  for (size_t k = 0; k < sizeof names / sizeof *names; k++) {
    exmy_format f;
    ck_assert_int_eq(exmy_format_parse(names[k], &f), 0);
    for (int mode = EXMY_RNE; mode <= EXMY_SR; mode++) {
      exmy_rounding_opts o = {.mode = (exmy_rounding)mode, .flush_subnormals = mode % 2 == 1};
      const char *path = exmy_bulk_kernel_path(&f, &o);
#if defined(EXMY_TEST_EXPECT_AVX512)
      if (avx512) ck_assert_msg(strcmp(path, "avx512") == 0, "%s %s runs %s", f.name,
                                exmy_rounding_name(o.mode), path);
#else
      (void)avx512;
      ck_assert_msg(strcmp(path, "c") == 0, "%s %s runs %s in a one-clone build", f.name,
                    exmy_rounding_name(o.mode), path);
#endif
    }
  }
  exmy_format f;
  exmy_format_make("e4m3b130", 4, 3, 130, EXMY_SPECIALS_FN, &f);
  exmy_rounding_opts o = {0};
  ck_assert_str_eq(exmy_bulk_kernel_path(&f, &o), "reference");
}
END_TEST

int main(void) {
#ifdef EXMY_TEST_NEEDS_AVX2
  if (!__builtin_cpu_supports("avx2")) {
    printf("skipped: this build of the kernels needs AVX2\n");
    return 0;
  }
#endif
  Suite *s = suite_create("bulk_exact");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 120);
  tcase_add_loop_test(tc, named_and_generic_formats, 0, sizeof kNames / sizeof *kNames);
  tcase_add_test(tc, exotic_bias_takes_reference_path);
  tcase_add_test(tc, streaming_stores);
  tcase_add_test(tc, dispatch);
  tcase_add_test(tc, sr_offset_wraps);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_set_fork_status(sr, CK_NOFORK);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
