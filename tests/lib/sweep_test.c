/*
 * Sweeps over the float32 bit patterns.  In CI (sweep_test): every 263rd
 * pattern (a prime stride, so that every bit position varies; 16.3 million
 * inputs, about 2^24) with saturation and flushing off, and every 1031st with
 * both on.  In the "manual" target sweep_exhaustive_test
 * (-DEXMY_SWEEP_EXHAUSTIVE): all 2^32.  Each input goes through the library's
 * bulk exmy_encode_f32 and exmy_quantize_f32 in every deterministic mode and
 * is compared with the oracle.
 *
 * Reference: the oracle (tests/lib/oracle.c), neighbours found by binary
 * search in a first-principles table and each mode's rule applied in exact
 * double arithmetic.
 *
 * Options (for manual runs): --stride N, --options-stride N (0: no pass with
 * saturate and flush_subnormals on), --formats a,b,c, --modes rne,rz.
 */
#include <check.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpu/exmy_cpu.h"
#include "tests/lib/harness.h"
#include "tests/lib/oracle.h"

#ifdef EXMY_SWEEP_EXHAUSTIVE
static uint64_t g_stride = 1;
static uint64_t g_options_stride = 0; /* 0: no pass with the options on */
static const char *g_formats = "float8_e4m3fn,float8_e5m2,e8m3,bfloat16,float16";
#else
static uint64_t g_stride = 263;          /* prime: 16.3 million inputs */
static uint64_t g_options_stride = 1031; /* prime: 4.2 million inputs */
static const char *g_formats =
    "float8_e4m3fn,float8_e5m2,float8_e4m3fnuz,float4_e2m1fn,float8_e8m0fnu,"
    "e8m3,bfloat16,float16";
#endif
static const char *g_modes = "rne,rna,rz,ru,rd,ro";

enum { CHUNK = 16384 };

typedef struct {
  exmy_rounding mode;
  int saturate, flush;
} config;

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

/* Sweeps one format over every configuration; returns the mismatches. */
static long sweep_format(const test_format *t, uint64_t stride,
                         const config *cfg, int ncfg, long *checked_out) {
  exmy_format lib;
  oracle_format *o = test_format_open(t, &lib);
  const uint64_t n = ((1ull << 32) + stride - 1) / stride;
  int any_flush = 0;
  for (int c = 0; c < ncfg; c++) any_flush |= cfg[c].flush;
  const uint64_t chunks = (n + CHUNK - 1) / CHUNK;
  tally tl = {.what = "sweep"};
  long checked = 0, failed = 0;
  const double t0 = now();
#pragma omp parallel reduction(+ : checked, failed)
  {
    float *x = malloc(CHUNK * sizeof *x), *y = malloc(CHUNK * sizeof *y);
    void *codes = malloc(CHUNK * 4);
    oracle_loc *loc[2];
    loc[0] = malloc(CHUNK * sizeof(oracle_loc));
    loc[1] = malloc(CHUNK * sizeof(oracle_loc));
#pragma omp for schedule(dynamic)
    for (uint64_t ch = 0; ch < chunks; ch++) {
      const uint64_t first = ch * CHUNK;
      const size_t m = (size_t)(first + CHUNK <= n ? CHUNK : n - first);
      for (size_t i = 0; i < m; i++)
        x[i] = bits_f32((uint32_t)((first + i) * stride));
      for (size_t i = 0; i < m; i++) {
        oracle_locate(o, x[i], 0, 0, &loc[0][i]);
        if (any_flush) oracle_locate(o, x[i], 0, 1, &loc[1][i]);
      }
      for (int c = 0; c < ncfg; c++) {
        const exmy_rounding_opts opts = {cfg[c].mode, cfg[c].saturate,
                                         cfg[c].flush, 0, 0, 0};
        exmy_encode_f32(&lib, &opts, x, codes, m);
        exmy_quantize_f32(&lib, &opts, x, y, m);
        const oracle_loc *l = loc[cfg[c].flush];
        for (size_t i = 0; i < m; i++) {
          oracle_loc sat_loc;
          const oracle_loc *li = &l[i];
          if (li->special && cfg[c].saturate) { /* specials depend on it */
            oracle_locate(o, x[i], 1, cfg[c].flush, &sat_loc);
            li = &sat_loc;
          }
          oracle_result want = oracle_apply(o, li, cfg[c].mode, cfg[c].saturate);
          uint32_t got = code_at(&lib, codes, i);
          checked += 2;
          if (!oracle_code_matches(o, want, got) ||
              !oracle_float_matches(want, y[i])) {
            failed++;
#pragma omp critical
            {
              tally_code(&tl, o, cfg[c].mode, cfg[c].saturate, cfg[c].flush, 0,
                         x[i], want, got);
              tally_float(&tl, o, cfg[c].mode, cfg[c].saturate, cfg[c].flush,
                          0, x[i], want, y[i]);
            }
          }
        }
      }
    }
    free(x);
    free(y);
    free(codes);
    free(loc[0]);
    free(loc[1]);
  }
  fprintf(stderr,
          "[sweep] %s: %llu inputs (stride %llu) x %d configurations, %ld "
          "results checked, %ld differ, %.1f s on %d threads\n",
          t->name, (unsigned long long)n, (unsigned long long)stride, ncfg,
          checked, failed, now() - t0, omp_get_max_threads());
  oracle_format_free(o);
  *checked_out = checked;
  return failed;
}

static int parse_mode(const char *s, size_t len, exmy_rounding *m) {
  char buf[8];
  if (len == 0 || len >= sizeof buf) return -1;
  memcpy(buf, s, len);
  buf[len] = 0;
  return exmy_rounding_parse(buf, m);
}

START_TEST(test_sweep) {
  /* pass 1: every mode, saturation and flushing off, stride g_stride;
   * pass 2: every mode, saturation and flushing on, stride g_options_stride
   * (both options at once: they act on disjoint inputs, overflow and
   * underflow; each alone is covered by the structured inputs) */
  config plain[8], options[8];
  int ncfg = 0;
  for (const char *p = g_modes; *p;) {
    size_t len = strcspn(p, ",");
    exmy_rounding m;
    ck_assert_msg(parse_mode(p, len, &m) == 0 && m != EXMY_SR && ncfg < 8,
                  "bad mode list %s", g_modes);
    plain[ncfg] = (config){m, 0, 0};
    options[ncfg] = (config){m, 1, 1};
    ncfg++;
    p += len + (p[len] == ',');
  }
  /* Bazel test sharding (shard_count): shard k takes formats k, k + n, ... */
  const char *total = getenv("TEST_TOTAL_SHARDS"), *index = getenv("TEST_SHARD_INDEX");
  const int shards = total ? atoi(total) : 1, shard = index ? atoi(index) : 0;
  const char *status = getenv("TEST_SHARD_STATUS_FILE");
  if (status) fclose(fopen(status, "w")); /* says: this test knows sharding */
  long failed = 0, checked = 0;
  int k = 0;
  for (const char *p = g_formats; *p; k++) {
    size_t len = strcspn(p, ",");
    char name[32];
    ck_assert(len < sizeof name);
    memcpy(name, p, len);
    name[len] = 0;
    if (shards > 1 && k % shards != shard) {
      p += len + (p[len] == ',');
      continue;
    }
    const test_format *t = test_format_named(name);
    long c = 0;
    failed += sweep_format(t, g_stride, plain, ncfg, &c);
    checked += c;
    if (g_options_stride) {
      /* flushing needs normal values (not so for IEEE-like E = 1) */
      oracle_format *o = oracle_format_new(t->name, t->exp_bits, t->man_bits,
                                           t->bias, t->kind);
      const int flush_ok = o->has_normals;
      oracle_format_free(o);
      for (int i = 0; i < ncfg; i++) options[i].flush = flush_ok;
      failed += sweep_format(t, g_options_stride, options, ncfg, &c);
      checked += c;
    }
    p += len + (p[len] == ',');
  }
  fprintf(stderr, "[sweep] total: %ld results checked, %ld differ\n", checked,
          failed);
  ck_assert_msg(failed == 0, "%ld of %ld sweep results differ from the oracle",
                failed, checked);
}
END_TEST

int main(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--stride") && i + 1 < argc)
      g_stride = strtoull(argv[++i], NULL, 0);
    else if (!strcmp(argv[i], "--formats") && i + 1 < argc)
      g_formats = argv[++i];
    else if (!strcmp(argv[i], "--modes") && i + 1 < argc)
      g_modes = argv[++i];
    else if (!strcmp(argv[i], "--options-stride") && i + 1 < argc)
      g_options_stride = strtoull(argv[++i], NULL, 0);
    else {
      fprintf(stderr, "usage: %s [--stride N] [--options-stride N (0: none)] "
                      "[--formats a,b] [--modes rne,rz]\n", argv[0]);
      return 2;
    }
  }
  if (g_stride == 0) g_stride = 1;
  const TTest *const tests[] = {test_sweep, NULL};
  /* the timeout: Bazel's instead */
  return run_suite(suite_of("sweep", 86400, tests), true);
}
