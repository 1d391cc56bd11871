/*
 * What the exmy library tests share: the formats under test with their
 * fields written out by hand, the dense structured set of float32 inputs, and
 * a tally that prints what differed (format, mode, input bits, expected, got).
 */
#ifndef EXMY_TESTS_LIB_HARNESS_H
#define EXMY_TESTS_LIB_HARNESS_H

#include <check.h>
#include <stddef.h>
#include <stdint.h>

#include "lib/exmy.h"
#include "tests/check_suite.h"
#include "tests/lib/oracle.h"

/* A format under test: the name the library parses and the fields the
 * published tables (OCP, ml_dtypes) give it, independently of lib/format.c. */
typedef struct {
  const char *name;
  int exp_bits, man_bits, bias;
  oracle_kind kind;
} test_format;

extern const test_format kTestFormats[]; /* every <= 16-bit format under test */
extern const size_t kNumTestFormats;

/* Finds a row by name (as spelled in kTestFormats); aborts if absent. */
const test_format *test_format_named(const char *name);

/* Parses t->name with the library, checks that its fields are the expected
 * ones (ck_assert), and builds the oracle's table. */
oracle_format *test_format_open(const test_format *t, exmy_format *lib);

/* The dense structured inputs of a format: every value, every midpoint
 * (and, if `quarters`, the quarter points) between neighbours, between 0 and
 * the smallest normal, and between max and the value after it, all with their
 * float32 neighbours; values far beyond max, FLT_MAX, float32 subnormals, +-0,
 * +-inf and NaNs; all with both signs.  Returns a malloc'ed array. */
float *structured_inputs(const oracle_format *f, int quarters, size_t *n);

/* Counts comparisons and prints the first few mismatches of a check. */
typedef struct {
  const char *what; /* e.g. "bulk encode" */
  long checked, failed;
  int printed;
  int show_word;  /* sr: print `word`, the random word used */
  uint32_t word;
} tally;

void tally_code(tally *t, const oracle_format *f, exmy_rounding mode,
                int saturate, int flush, int sr_bits, float x,
                oracle_result want, uint32_t got);
void tally_float(tally *t, const oracle_format *f, exmy_rounding mode,
                 int saturate, int flush, int sr_bits, float x,
                 oracle_result want, float got);
/* ck_assert that nothing failed, naming the check and the counts. */
void tally_assert(const tally *t);

/* Reads code i of an array of exmy_code_bytes(f)-byte codes. */
uint32_t code_at(const exmy_format *f, const void *codes, size_t i);
/* Writes code i likewise. */
void code_put(const exmy_format *f, void *codes, size_t i, uint32_t c);

uint32_t f32_bits(float x);
float bits_f32(uint32_t u);

#endif /* EXMY_TESTS_LIB_HARNESS_H */
