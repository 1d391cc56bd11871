/*
 * Stochastic rounding and its random numbers.
 *
 * References: Random123's known-answer vectors for Philox4x32-10; a second
 * Philox4x32-10 written here from Salmon et al. (SC'11) for the documented
 * stream mapping (counter = (j / 4, 0, 0), key = seed, word j % 4); the
 * oracle's exact probability p = (|x| - lo) / (hi - lo) and the documented
 * sr_bits rule floor(2^R p) / 2^R, checked word by word at the threshold and
 * statistically (5 sigma) over Philox draws; the bulk calls' results with
 * 1, 2 and 3 OpenMP threads (omp_set_num_threads and OMP_NUM_THREADS).
 */
#define _GNU_SOURCE
#include <check.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cpu/exmy_cpu.h"
#include "tests/lib/harness.h"
#include "tests/lib/oracle.h"

/* ------------------------------------------------------------------ Philox */

/* Philox4x32-10 as the paper defines it: ten rounds of two 32x32->64-bit
 * multiplications whose halves are permuted and xored with the round key,
 * the key bumped by the Weyl constants between rounds. */
static void philox_ref(const uint32_t ctr[4], const uint32_t key[2],
                       uint32_t out[4]) {
  uint32_t x0 = ctr[0], x1 = ctr[1], x2 = ctr[2], x3 = ctr[3];
  uint32_t k0 = key[0], k1 = key[1];
  for (int r = 0; r < 10; r++) {
    uint64_t a = (uint64_t)0xD2511F53u * x0, b = (uint64_t)0xCD9E8D57u * x2;
    uint32_t y0 = (uint32_t)(b >> 32) ^ x1 ^ k0, y1 = (uint32_t)b;
    uint32_t y2 = (uint32_t)(a >> 32) ^ x3 ^ k1, y3 = (uint32_t)a;
    x0 = y0, x1 = y1, x2 = y2, x3 = y3;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  out[0] = x0, out[1] = x1, out[2] = x2, out[3] = x3;
}

/* the documented word of stream index j */
static uint32_t stream_word(uint64_t seed, uint64_t j) {
  uint32_t ctr[4] = {(uint32_t)(j >> 2), (uint32_t)(j >> 34), 0, 0};
  uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
  uint32_t out[4];
  philox_ref(ctr, key, out);
  return out[j & 3];
}

START_TEST(test_philox_known_answers) {
  /* Random123, tests/kat_vectors: philox4x32 10 CTR[4] KEY[2] -> OUT[4] */
  static const uint32_t kat[3][10] = {
      {0, 0, 0, 0, 0, 0, 0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8},
      {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff,
       0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd},
      {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0,
       0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1},
  };
  for (int v = 0; v < 3; v++) {
    uint32_t lib[4], ref[4];
    exmy_philox4x32_10(kat[v], kat[v] + 4, lib);
    philox_ref(kat[v], kat[v] + 4, ref);
    for (int w = 0; w < 4; w++) {
      ck_assert_msg(lib[w] == kat[v][6 + w],
                    "vector %d word %d: library 0x%08x, expected 0x%08x", v, w,
                    lib[w], kat[v][6 + w]);
      ck_assert_msg(ref[w] == kat[v][6 + w],
                    "vector %d word %d: test's Philox 0x%08x, expected 0x%08x",
                    v, w, ref[w], kat[v][6 + w]);
    }
  }
}
END_TEST

START_TEST(test_sr_stream_words) {
  /* exmy_sr_random(seed, j) is word j % 4 of Philox(counter j / 4, key seed) */
  static const uint64_t seeds[] = {0, 1, 0xFFFFFFFFull, 0x100000000ull,
                                   0x0123456789ABCDEFull, ~0ull};
  long bad = 0;
  for (size_t s = 0; s < sizeof seeds / sizeof seeds[0]; s++) {
    uint64_t j = 0;
    for (int k = 0; k < 4000; k++) {
      uint32_t got = exmy_sr_random(seeds[s], j), want = stream_word(seeds[s], j);
      if (got != want && bad++ < 10)
        fprintf(stderr, "[stream] seed 0x%llx index %llu: 0x%08x, expected 0x%08x\n",
                (unsigned long long)seeds[s], (unsigned long long)j, got, want);
      /* consecutive indices, then jumps that reach the counter's high word */
      j = k < 1000 ? j + 1 : j * 3 + 0x9E3779B97F4A7C15ull % 1000003;
    }
  }
  ck_assert_msg(bad == 0, "%ld stream words differ", bad);
}
END_TEST

/* ------------------------------------------------- the sr rule, word by word */

static const char *const kSrFormats[] = {
    "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float4_e2m1fn",
    "float6_e3m2fn", "float8_e8m0fnu", "bfloat16", "float16", "e8m3", "e3m0"};
enum { kNumSrFormats = sizeof kSrFormats / sizeof kSrFormats[0] };

START_TEST(test_sr_threshold_words) {
  /* For every R, up happens exactly for the words whose top R bits plus
   * floor(2^R p) carry out of R bits: check the words on either side of that
   * threshold, the extremes and some others, in the scalar reference. */
  static const int bits[] = {1, 2, 3, 8, 16, 23, 24, 31, 32};
  tally t = {.what = "sr threshold", .show_word = 1};
  for (int fi = 0; fi < kNumSrFormats; fi++) {
    exmy_format lib;
    oracle_format *o = test_format_open(test_format_named(kSrFormats[fi]), &lib);
    size_t n;
    float *x = structured_inputs(o, 1, &n);
    const size_t step = n / 3000 + 1;
    uint32_t lcg = 99;
    for (size_t i = 0; i < n; i += step + (lcg >> 31)) {
      lcg = lcg * 1664525u + 1013904223u;
      for (int sat = 0; sat <= 1; sat++)
        for (int flush = 0; flush <= (o->has_normals ? 1 : 0); flush++) {
          oracle_loc loc;
          oracle_result down, up;
          oracle_locate(o, x[i], sat, flush, &loc);
          const double p = oracle_sr(o, &loc, sat, &down, &up);
          for (size_t b = 0; b < sizeof bits / sizeof bits[0]; b++) {
            const int R = bits[b];
            const double top = floor(ldexp(p, R));
            uint32_t words[6] = {0u, 0xFFFFFFFFu, 0x80000000u, lcg, 0, 0};
            int nw = 4;
            if (top > 0 && p < 1) { /* the smallest word that rounds up */
              uint64_t first_up = (uint64_t)(ldexp(1.0, R) - top) << (32 - R);
              words[nw++] = (uint32_t)first_up;
              words[nw++] = (uint32_t)(first_up - 1);
            }
            exmy_rounding_opts opts = {EXMY_SR, sat, flush, 0, 0, R};
            for (int w = 0; w < nw; w++) {
              t.word = words[w];
              oracle_result want = oracle_sr_goes_up(p, R, words[w]) ? up : down;
              tally_code(&t, o, EXMY_SR, sat, flush, R, x[i], want,
                         exmy_ref_encode(&lib, &opts, x[i], words[w]));
              tally_float(&t, o, EXMY_SR, sat, flush, R, x[i], want,
                          exmy_ref_quantize(&lib, &opts, x[i], words[w]));
            }
          }
        }
    }
    free(x);
    oracle_format_free(o);
  }
  tally_assert(&t);
}
END_TEST

/* ------------------------------------------ bulk calls: the stream mapping */

/* A fixed array of inputs spread over a format's range, both signs. */
static float *spread_inputs(const oracle_format *o, size_t n) {
  float *x = malloc(n * sizeof *x);
  uint32_t lcg = 7;
  for (size_t i = 0; i < n; i++) {
    lcg = lcg * 1664525u + 1013904223u;
    size_t k = (lcg >> 8) % (o->count - 1);
    double frac = ((lcg >> 2) & 1023) / 1024.0;
    float v = (float)(o->mag[k] + frac * (o->mag[k + 1] - o->mag[k]));
    x[i] = (lcg & 1) && o->is_signed ? -v : v;
  }
  return x;
}

START_TEST(test_sr_bulk_is_the_stream) {
  /* element i of a call with (seed, offset) = scalar reference with the word
   * of stream index offset + i (computed by the test's own Philox) = oracle;
   * and element i of a call with offset o = element i + o with offset 0 */
  static const uint64_t offsets[] = {1, 2, 3, 4, 5, 4097, 65539};
  tally t = {.what = "sr bulk"};
  const size_t n = 200003; /* > 65536: the bulk calls go parallel */
  for (int fi = 0; fi < kNumSrFormats; fi++) {
    exmy_format lib;
    oracle_format *o = test_format_open(test_format_named(kSrFormats[fi]), &lib);
    float *x = spread_inputs(o, n), *y0 = malloc(n * 4), *y = malloc(n * 4);
    void *c0 = malloc(n * 4), *c = malloc(n * 4);
    const uint64_t seed = 0x9E3779B97F4A7C15ull ^ (uint64_t)fi;
    for (int flush = 0; flush <= (o->has_normals ? 1 : 0); flush++) {
      exmy_rounding_opts opts = {EXMY_SR, 0, flush, seed, 0, 0};
      exmy_quantize_f32(&lib, &opts, x, y0, n);
      exmy_encode_f32(&lib, &opts, x, c0, n);
      for (size_t i = 0; i < n; i++) {
        oracle_result want = oracle_round(o, x[i], EXMY_SR, 0, flush, 32,
                                          stream_word(seed, i));
        tally_code(&t, o, EXMY_SR, 0, flush, 32, x[i], want, code_at(&lib, c0, i));
        tally_float(&t, o, EXMY_SR, 0, flush, 32, x[i], want, y0[i]);
      }
      for (size_t k = 0; k < sizeof offsets / sizeof offsets[0]; k++) {
        const uint64_t off = offsets[k];
        opts.offset = off;
        exmy_quantize_f32(&lib, &opts, x + off, y, n - off);
        exmy_encode_f32(&lib, &opts, x + off, c, n - off);
        long bad = 0;
        for (size_t i = 0; i + off < n; i++)
          if (f32_bits(y[i]) != f32_bits(y0[i + off]) ||
              code_at(&lib, c, i) != code_at(&lib, c0, i + off)) {
            if (bad++ < 5)
              fprintf(stderr, "[offset] %s flush=%d offset %llu element %zu: "
                      "0x%08x, element %zu at offset 0 gave 0x%08x\n",
                      o->name, flush, (unsigned long long)off, i, f32_bits(y[i]),
                      (size_t)(i + off), f32_bits(y0[i + off]));
          }
        ck_assert_msg(bad == 0, "%s: %ld elements differ with offset %llu",
                      o->name, bad, (unsigned long long)off);
      }
    }
    free(x), free(y0), free(y), free(c0), free(c);
    oracle_format_free(o);
  }
  tally_assert(&t);
}
END_TEST

/* A fixed sr workload; returns a hash (FNV-1a) of its codes and values. */
static uint64_t sr_workload_hash(void) {
  static const char *const names[] = {"float8_e4m3fn", "bfloat16",
                                      "float4_e2m1fn"};
  uint64_t h = 0xcbf29ce484222325ull;
  const size_t n = 300007;
  for (int k = 0; k < 3; k++) {
    const test_format *t = test_format_named(names[k]);
    exmy_format f;
    if (exmy_format_parse(t->name, &f) != 0) abort();
    oracle_format *o = oracle_format_new(t->name, t->exp_bits, t->man_bits,
                                         t->bias, t->kind);
    float *x = spread_inputs(o, n), *y = malloc(n * 4);
    uint8_t *c = malloc(n * 4);
    exmy_rounding_opts opts = {EXMY_SR, 0, 0, 0xDEADBEEFCAFEull, 12345, 0};
    exmy_quantize_f32(&f, &opts, x, y, n);
    exmy_encode_f32(&f, &opts, x, c, n);
    const uint8_t *bytes[2] = {(const uint8_t *)y, c};
    size_t len[2] = {n * 4, n * exmy_code_bytes(&f)};
    for (int b = 0; b < 2; b++)
      for (size_t i = 0; i < len[b]; i++) h = (h ^ bytes[b][i]) * 0x100000001b3ull;
    free(x), free(y), free(c);
    oracle_format_free(o);
  }
  return h;
}

/* Runs this program again with OMP_NUM_THREADS=threads and --sr-hash. */
static int child_hash(int threads, int *seen, uint64_t *hash) {
  int fd[2];
  if (pipe(fd) != 0) return -1;
  pid_t pid = fork();
  if (pid == 0) {
    char v[8];
    snprintf(v, sizeof v, "%d", threads);
    setenv("OMP_NUM_THREADS", v, 1);
    dup2(fd[1], 1);
    close(fd[0]);
    execl("/proc/self/exe", "sr_test", "--sr-hash", (char *)NULL);
    _exit(127);
  }
  close(fd[1]);
  char buf[128] = {0};
  ssize_t got = read(fd[0], buf, sizeof buf - 1);
  close(fd[0]);
  int status;
  waitpid(pid, &status, 0);
  unsigned long long h;
  if (got <= 0 || sscanf(buf, "%d %llx", seen, &h) != 2) return -1;
  *hash = h;
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -1;
}

START_TEST(test_sr_same_bits_any_thread_count) {
  omp_set_num_threads(1);
  const uint64_t h1 = sr_workload_hash();
  for (int threads = 2; threads <= 3; threads++) {
    omp_set_num_threads(threads);
    uint64_t h = sr_workload_hash();
    ck_assert_msg(h == h1, "omp_set_num_threads(%d): hash %016llx, 1 thread %016llx",
                  threads, (unsigned long long)h, (unsigned long long)h1);
  }
  for (int threads = 1; threads <= 3; threads++) {
    int seen = 0;
    uint64_t h = 0;
    ck_assert_msg(child_hash(threads, &seen, &h) == 0,
                  "OMP_NUM_THREADS=%d: the child run failed", threads);
    ck_assert_msg(seen == threads, "OMP_NUM_THREADS=%d: child saw %d threads",
                  threads, seen);
    ck_assert_msg(h == h1, "OMP_NUM_THREADS=%d: hash %016llx, in-process %016llx",
                  threads, (unsigned long long)h, (unsigned long long)h1);
  }
}
END_TEST

/* ------------------------------------------------------------- statistics */

typedef struct {
  long cases, draws;
} stats_count;

/* Draws N results for x (a call over N copies: N stream indices) and checks
 * the round-up frequency against floor(2^R p)/2^R within 5 sigma and, if
 * asked, that the mean is x within 5 sigma. */
static void check_frequency(const exmy_format *lib, const oracle_format *o,
                            float x, int sat, int flush, int R, uint64_t seed,
                            uint64_t offset, int check_mean, stats_count *sc) {
  enum { N = 16384 };
  static float xs[N], y[N];
  oracle_loc loc;
  oracle_result down, up;
  oracle_locate(o, x, sat, flush, &loc);
  const double p = oracle_sr(o, &loc, sat, &down, &up);
  const double pr = oracle_sr_prob(p, R);
  for (int i = 0; i < N; i++) xs[i] = x;
  exmy_rounding_opts opts = {EXMY_SR, sat, flush, seed, offset, R};
  exmy_quantize_f32(lib, &opts, xs, y, N);
  long n_up = 0, n_down = 0;
  double sum = 0;
  if (oracle_float_matches(up, oracle_result_float(o, down)) &&
      oracle_code_matches(o, up, down.code)) {
    /* both neighbours give the same result (e.g. saturating beyond max) */
    long other = 0;
    for (int i = 0; i < N; i++) other += !oracle_float_matches(down, y[i]);
    ck_assert_msg(other == 0, "%s sr sat=%d x=0x%08x: %ld of %d results are not %a",
                  o->name, sat, f32_bits(x), other, N,
                  (double)oracle_result_float(o, down));
    sc->cases++;
    sc->draws += N;
    return;
  }
  for (int i = 0; i < N; i++) {
    if (oracle_float_matches(up, y[i])) n_up++;
    else if (oracle_float_matches(down, y[i])) n_down++;
    sum += y[i];
  }
  const char *fmt = o->name;
  ck_assert_msg(n_up + n_down == N,
                "%s sr_bits=%d sat=%d flush=%d x=0x%08x (%a): %ld of %d results "
                "are neither neighbour (%a, %a)",
                fmt, R, sat, flush, f32_bits(x), (double)x, N - n_up - n_down,
                N, (double)oracle_result_float(o, down),
                (double)oracle_result_float(o, up));
  const double expect = N * pr, sigma = sqrt(N * pr * (1 - pr));
  ck_assert_msg(fabs(n_up - expect) <= 5 * sigma,
                "%s sr_bits=%d sat=%d flush=%d x=0x%08x (%a): rounded up %ld of "
                "%d times, expected %.1f (p = %.9f, %.9f with %d bits), 5 sigma = %.1f",
                fmt, R, sat, flush, f32_bits(x), (double)x, n_up, N, expect, p, pr,
                R, 5 * sigma);
  if (check_mean) {
    const double gap = loc.hi - loc.lo;
    const double sd = gap * sqrt(pr * (1 - pr) / N);
    const double mean = sum / N;
    ck_assert_msg(fabs(mean - (double)x) <= 5 * sd + ldexp(gap, -32),
                  "%s sr x=0x%08x (%a): mean of %d results %a, off by %.3g sigma",
                  fmt, f32_bits(x), (double)x, N, mean,
                  (mean - (double)x) / (sd > 0 ? sd : 1));
  }
  sc->cases++;
  sc->draws += N;
}

START_TEST(test_sr_unbiased_and_exact_frequency) {
  /* inputs in the normal range, among the subnormals, between 0 and the
   * smallest subnormal, below max, beyond max (overflow), in the flushed gap */
  static const double fracs[] = {0.5, 0.25, 0.1, 0.9, 1.0 / 3, 0.7, 0.03};
  stats_count sc = {0, 0};
  uint64_t seed = 1;
  for (int fi = 0; fi < kNumSrFormats; fi++) {
    exmy_format lib;
    oracle_format *o = test_format_open(test_format_named(kSrFormats[fi]), &lib);
    /* lower neighbours by index in the value list; -1: max..beyond, -2: the
     * flushed gap */
    size_t one = 0;
    while (one + 1 < o->count && o->mag[one] < 1.0) one++;
    const long starts[] = {(long)one, (long)(o->count / 3), 0, 1,
                           (long)(o->count > 4 ? o->count / 50 + 1 : 1),
                           (long)o->count - 2, -1, -2};
    for (size_t s = 0; s < sizeof starts / sizeof starts[0]; s++) {
      double lo, hi;
      int flush = 0;
      if (starts[s] == -1) lo = o->max, hi = o->beyond;
      else if (starts[s] == -2) {
        if (!o->has_normals || !o->has_subnormals) continue;
        lo = 0, hi = o->min_normal, flush = 1;
      } else {
        if (starts[s] < 0 || (size_t)starts[s] + 1 >= o->count) continue;
        lo = o->mag[starts[s]], hi = o->mag[starts[s] + 1];
      }
      for (size_t k = 0; k < sizeof fracs / sizeof fracs[0]; k++)
        for (int sign = 0; sign <= (o->is_signed ? 1 : 0); sign++) {
          float x = (float)(lo + fracs[k] * (hi - lo));
          if (!((double)x > lo && (double)x < hi) || !isfinite(x)) continue;
          if (sign) x = -x;
          const int over = starts[s] == -1;
          /* beyond max the upper result is inf/NaN/max: no mean */
          check_frequency(&lib, o, x, 0, flush, 0, seed, seed << 20, !over, &sc);
          seed++;
          if (over) { /* saturating: always max */
            check_frequency(&lib, o, x, 1, flush, 32, seed, 0, 0, &sc);
            seed++;
          }
        }
    }
    oracle_format_free(o);
  }
  fprintf(stderr, "[sr statistics] %ld inputs, %ld draws\n", sc.cases, sc.draws);
  ck_assert(sc.cases > 300);
}
END_TEST

START_TEST(test_sr_bits_truncation) {
  /* P(up) = floor(2^R frac) / 2^R: e.g. frac 0.75 gives 1/2 with R = 1 and
   * 3/4 with R = 2; frac 0.3 gives 0 with R = 1 */
  static const double fracs[] = {0.75, 0.3, 0.126, 0.5, 0.99, 0.2, 0.01};
  static const int bits[] = {1, 2, 8};
  static const char *const names[] = {"float8_e4m3fn", "bfloat16", "float8_e8m0fnu",
                                      "float4_e2m1fn", "float16"};
  stats_count sc = {0, 0};
  uint64_t seed = 1000;
  for (int fi = 0; fi < 5; fi++) {
    exmy_format lib;
    oracle_format *o = test_format_open(test_format_named(names[fi]), &lib);
    size_t one = 0;
    while (one + 1 < o->count && o->mag[one] < 1.0) one++;
    const size_t starts[] = {one, 1, o->count / 4};
    for (size_t s = 0; s < 3; s++) {
      const double lo = o->mag[starts[s]], hi = o->mag[starts[s] + 1];
      for (size_t k = 0; k < sizeof fracs / sizeof fracs[0]; k++)
        for (size_t b = 0; b < 3; b++) {
          float x = (float)(lo + fracs[k] * (hi - lo));
          if (!((double)x > lo && (double)x < hi)) continue;
          check_frequency(&lib, o, x, 0, 0, bits[b], seed, 0, 0, &sc);
          seed++;
        }
    }
    oracle_format_free(o);
  }
  fprintf(stderr, "[sr_bits statistics] %ld inputs, %ld draws\n", sc.cases,
          sc.draws);
  ck_assert(sc.cases > 100);
}
END_TEST

START_TEST(test_sr_bits_zero_means_32) {
  exmy_format f;
  ck_assert(exmy_format_parse("bf16", &f) == 0);
  oracle_format *o = oracle_format_new("bfloat16", 8, 7, 127, ORACLE_IEEE);
  const size_t n = 100000;
  float *x = spread_inputs(o, n), *a = malloc(n * 4), *b = malloc(n * 4);
  exmy_rounding_opts o0 = {EXMY_SR, 0, 0, 42, 7, 0}, o32 = {EXMY_SR, 0, 0, 42, 7, 32};
  exmy_quantize_f32(&f, &o0, x, a, n);
  exmy_quantize_f32(&f, &o32, x, b, n);
  ck_assert_msg(memcmp(a, b, n * 4) == 0, "sr_bits 0 and 32 differ");
  free(x), free(a), free(b);
  oracle_format_free(o);
}
END_TEST


int main(int argc, char **argv) {
  if (argc == 2 && strcmp(argv[1], "--sr-hash") == 0) {
    printf("%d %016llx\n", omp_get_max_threads(),
           (unsigned long long)sr_workload_hash());
    return 0;
  }
  const TTest *const tests[] = {test_philox_known_answers, test_sr_stream_words,
                                test_sr_threshold_words, test_sr_bulk_is_the_stream,
                                test_sr_same_bits_any_thread_count,
                                test_sr_unbiased_and_exact_frequency, test_sr_bits_truncation,
                                test_sr_bits_zero_means_32, NULL};
  return run_suite(suite_of("sr", 120, tests), true);
}
