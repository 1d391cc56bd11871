/* exmy_qgemm_accum under the Hopper FP8 model against the H100 itself: a
 * committed slice of cuBLASLt FP8 GEMMs captured on an H100
 * (h100_fp8/README.md: E4M3 and E5M2 operands, four distributions, K = 32 ..
 * 16384, fast accumulation on and off) must be reproduced bit for bit, every
 * element of every case; and the slice must tell the calibrated model from
 * one without its features (alignment by the inputs' exponents, split K). */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/exmy_cpu.h"
#include "lib/accum_core.h"
#include "lib/exmy.h"
#include "tests/check_suite.h"

/* the test runs in the runfiles tree, at the workspace's root */
static const char *const data_path = "tests/lib/h100_fp8/h100_fp8_gemm.bin";

enum { RECORDS = 88, KMAX = 16384 };

typedef struct {
  int format_a, format_b, dist, rows, cols, k;
  float *a, *bt;        /* rows × k, cols × k */
  uint32_t *fast, *split; /* rows × cols, the H100's float32 bits */
} record;

static const char *const format_names[] = {"e4m3", "e5m2"};
static const char *const dist_names[] = {"uniform", "normal", "wide", "cancel"};

static record records[RECORDS];
static int n_records;

static uint32_t u32_at(const unsigned char *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* The file's bytes, checked as untrusted; every record decoded. */
static void load(void) {
  FILE *f = fopen(data_path, "rb");
  ck_assert_msg(f != NULL, "cannot open %s", data_path);
  ck_assert_int_eq(fseek(f, 0, SEEK_END), 0);
  const long size = ftell(f);
  ck_assert(size > 12 && size < (1L << 24));
  unsigned char *buf = malloc((size_t)size);
  rewind(f);
  ck_assert_int_eq(fread(buf, 1, (size_t)size, f), size);
  fclose(f);
  ck_assert_msg(!memcmp(buf, "EXMYH100", 8), "%s: not an EXMYH100 file", data_path);
  n_records = (int)u32_at(buf + 8);
  ck_assert_int_eq(n_records, RECORDS);
  exmy_format formats[2];
  for (int i = 0; i < 2; i++) ck_assert_int_eq(exmy_format_parse(format_names[i], &formats[i]), 0);
  long at = 12;
  for (int r = 0; r < n_records; r++) {
    ck_assert(at + 12 <= size);
    record *x = &records[r];
    const unsigned char *h = buf + at;
    x->format_a = h[0], x->format_b = h[1], x->dist = h[2], x->rows = h[3], x->cols = h[4];
    x->k = (int)u32_at(h + 8);
    ck_assert(x->format_a < 2 && x->format_b < 2 && x->dist < 4);
    ck_assert(x->rows >= 1 && x->cols >= 1 && x->k >= 1 && x->k <= KMAX);
    at += 12;
    const long need = (long)(x->rows + x->cols) * x->k + 8L * x->rows * x->cols;
    ck_assert_msg(at + need <= size, "%s: record %d truncated", data_path, r);
    x->a = malloc(sizeof(float) * (size_t)(x->rows * x->k));
    x->bt = malloc(sizeof(float) * (size_t)(x->cols * x->k));
    for (int i = 0; i < x->rows * x->k; i++)
      x->a[i] = exmy_ref_decode(&formats[x->format_a], buf[at++]);
    for (int i = 0; i < x->cols * x->k; i++)
      x->bt[i] = exmy_ref_decode(&formats[x->format_b], buf[at++]);
    x->fast = malloc(sizeof(uint32_t) * (size_t)(x->rows * x->cols));
    x->split = malloc(sizeof(uint32_t) * (size_t)(x->rows * x->cols));
    for (int i = 0; i < x->rows * x->cols; i++, at += 4) x->fast[i] = u32_at(buf + at);
    for (int i = 0; i < x->rows * x->cols; i++, at += 4) x->split[i] = u32_at(buf + at);
  }
  ck_assert_int_eq(at, size);
  free(buf);
}

/* cuBLASLt's split of K for these M = N = 64 GEMMs on the H100: none up to
 * K = 4096; at K = 16384, 6 slices of 22 tiles of 128 products (the last 18),
 * found by matching the captured outputs. */
static int cublaslt_k_slice(int k) { return k == 16384 ? 2816 : 0; }

/* The Hopper FP8 model: fast accumulation (promote_every 0) or not (128). */
static exmy_accum_model hopper(const record *x, int fast) {
  exmy_format fa, fb;
  ck_assert_int_eq(exmy_format_parse(format_names[x->format_a], &fa), 0);
  ck_assert_int_eq(exmy_format_parse(format_names[x->format_b], &fb), 0);
  exmy_accum_model m = {32, 14, 14, EXMY_ACCUM_TRUNCATE, fast ? 0 : 128, 1, 0, 0, 0, 0};
  m.align_exp = EXMY_ACCUM_ALIGN_INPUTS;
  m.emin_a = fa.emin, m.emin_b = fb.emin;
  m.k_slice = cublaslt_k_slice(x->k);
  return m;
}

static uint32_t bits_of(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

/* Elements of record x where model m differs from the H100; printed when
 * `say`. */
static int differences(const record *x, const exmy_accum_model *m, int fast, int say) {
  static float c[16 * 16];
  ck_assert(x->rows * x->cols <= 16 * 16);
  ck_assert_int_eq(exmy_qgemm_accum(false, true, (size_t)x->rows, (size_t)x->cols, (size_t)x->k,
                                    1.0f, x->a, (size_t)x->k, NULL, x->bt, (size_t)x->k, NULL,
                                    0.0f, c, (size_t)x->cols, NULL, m),
                   0);
  const uint32_t *want = fast ? x->fast : x->split;
  int wrong = 0;
  for (int i = 0; i < x->rows * x->cols; i++)
    if (bits_of(c[i]) != want[i]) {
      wrong++;
      if (say) {
        float w;
        memcpy(&w, &want[i], 4);
        fprintf(stderr, "%s x %s %s K %d %s element %d: model %.9g, H100 %.9g\n",
                format_names[x->format_a], format_names[x->format_b], dist_names[x->dist], x->k,
                fast ? "fast" : "split", i, c[i], w);
      }
    }
  return wrong;
}

START_TEST(test_model_reproduces_h100) {
  load();
  int elements = 0, wrong = 0;
  for (int r = 0; r < n_records; r++)
    for (int fast = 0; fast < 2; fast++) {
      const exmy_accum_model m = hopper(&records[r], fast);
      ck_assert_int_eq(exmy_accum_model_check(&m), 0);
      wrong += differences(&records[r], &m, fast, 1);
      elements += records[r].rows * records[r].cols;
    }
  ck_assert_int_eq(elements, 2 * (3 * 4 * 6 * 16 + 3 * 4 * 2 + 4));
  ck_assert_int_eq(wrong, 0);
}
END_TEST

/* The slice is sharp: the model loses elements without each feature. */
START_TEST(test_features_are_needed) {
  load();
  int own_exp = 0, no_split[2] = {0, 0}, mixed = 0, long_cases = 0;
  for (int r = 0; r < n_records; r++) {
    const record *x = &records[r];
    for (int fast = 0; fast < 2; fast++) {
      exmy_accum_model m = hopper(x, fast);
      m.align_exp = EXMY_ACCUM_ALIGN_PRODUCT; /* by the product's own exponent */
      const int w = differences(x, &m, fast, 0);
      own_exp += w;
      if (x->dist == 0 && x->k <= 4096) ck_assert_int_eq(w, 0); /* positive: no effect */
      if (x->dist && x->k <= 512) mixed += w > 0;
      if (x->k > 4096) {
        m = hopper(x, fast);
        m.k_slice = 0;
        no_split[fast] += differences(x, &m, fast, 0);
        long_cases++;
      }
    }
  }
  ck_assert_int_eq(long_cases, 8);
  /* every K = 16384 element with fast accumulation; without it, where the
   * order of float32 additions shows (some of the wide data) */
  ck_assert_int_eq(no_split[1], 4);
  ck_assert_int_ge(no_split[0], 1);
  ck_assert_int_gt(own_exp, 500);
  ck_assert_int_eq(mixed, 3 * 3 * 6 * 2); /* every mixed-sign case up to K = 512 */
}
END_TEST

int main(void) {
  const TTest *tests[] = {test_model_reproduces_h100, test_features_are_needed, NULL};
  return run_suite(suite_of("h100_fp8", 300, tests), true);
}
