/* The global gradient norm: the same bits on 1, 2 and 3 threads (it decides
 * the clipping, hence every later loss), and within a few ulps of a long
 * double sum. */
#include "tests/check_suite.h"
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "experiments/trainer/optim.h"

START_TEST(norm_independent_of_threads) {
  /* sizes around the block of 16384: one block, a ragged tail, many blocks */
  static const size_t sizes[] = {1, 7, 16384, 16385, 100003, 1300000};
  unsigned s = 99;
  for (size_t c = 0; c < sizeof sizes / sizeof sizes[0]; c++) {
    const size_t n = sizes[c];
    float *g = malloc(n * sizeof *g);
    long double ref = 0;
    for (size_t i = 0; i < n; i++) {
      s = s * 1664525u + 1013904223u;
      /* magnitudes over 2^-20 .. 2^4: partial sums round differently in any other order */
      g[i] = ldexpf((float)(s >> 8) / 16777216.0f - 0.5f, (int)(s % 25) - 20);
      ref += (long double)g[i] * g[i];
    }
    double norm[3];
    for (int t = 1; t <= 3; t++) {
      omp_set_num_threads(t);
      norm[t - 1] = grad_global_norm(g, n);
    }
    ck_assert_msg(memcmp(&norm[0], &norm[1], sizeof(double)) == 0 &&
                      memcmp(&norm[0], &norm[2], sizeof(double)) == 0,
                  "n = %zu: norm %a (1 thread), %a (2), %a (3)", n, norm[0], norm[1], norm[2]);
    const double want = (double)sqrtl(ref);
    ck_assert_msg(fabs(norm[0] - want) <= 1e-13 * want, "n = %zu: norm %.17g, long double %.17g",
                  n, norm[0], want);
    printf("n = %7zu: norm %.17g on 1, 2 and 3 threads (long double %.17g)\n", n, norm[0], want);
    free(g);
  }
}
END_TEST

int main(void) {
  const TTest *const tests[] = {norm_independent_of_threads, NULL};
  return run_suite(suite_of("optim", 60, tests), true);
}
