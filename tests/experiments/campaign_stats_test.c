/* experiments/studies/campaign_stats.h against independent references:
 *  - Clopper-Pearson for n = 3 against scipy's published values (closed forms:
 *    k = 0 and k = n are (alpha/2)^(1/n) expressions, k = 1 and 2 a cubic);
 *  - every k of n = 1..30 against bisection on the binomial CDF itself
 *    (low: P(X >= k | low) = alpha/2, high: P(X <= k | high) = alpha/2);
 *  - beta_cdf for integer a, b against the binomial tail it equals, and for
 *    a = b = 1/2 against the arcsine law (2/pi) asin(sqrt x);
 *  - the summary's sample standard deviation (n - 1) on hand values;
 *  - arguments outside the domain refused. */
#include <check.h>
#include <math.h>

#include "experiments/studies/campaign_stats.h"
#include "tests/check_suite.h"

/* P(X <= k) for X ~ Binomial(n, p), summed in long double */
static long double binom_cdf(int k, int n, long double p) {
  long double sum = 0, c = 1; /* c = C(n, j) */
  for (int j = 0; j <= k; j++) {
    sum += c * powl(p, j) * powl(1 - p, n - j);
    c = c * (n - j) / (j + 1);
  }
  return sum;
}

/* the p in [0, 1] with f(p) = target, f decreasing in p */
static double solve_decreasing(long double (*f)(int, int, long double), int k, int n,
                               long double target) {
  long double lo = 0, hi = 1;
  for (int i = 0; i < 200; i++) {
    const long double mid = (lo + hi) / 2;
    if (f(k, n, mid) > target) lo = mid;
    else hi = mid;
  }
  return (double)((lo + hi) / 2);
}

/* P(X >= k) = 1 - P(X <= k - 1), written as decreasing in p by a sign */
static long double minus_upper_tail(int k, int n, long double p) {
  return -(1 - binom_cdf(k - 1, n, p));
}

START_TEST(test_scipy_n3) {
  /* scipy.stats.binomtest(k, 3).proportion_ci(method="exact") */
  const double a = 0.025;
  const double cubic_low = 0.0942993241; /* 3x^2 - 2x^3 = 0.025: I_x(2, 2) */
  const double want[4][2] = {{0, 1 - cbrt(a)},
                             {1 - cbrt(1 - a), 1 - cubic_low},
                             {cubic_low, cbrt(1 - a)},
                             {cbrt(a), 1}};
  for (int k = 0; k <= 3; k++) {
    double lo, hi;
    ck_assert_int_eq(clopper_pearson(k, 3, 0.05, &lo, &hi), 0);
    ck_assert_msg(fabs(lo - want[k][0]) < 1e-9 && fabs(hi - want[k][1]) < 1e-9,
                  "k %d: [%.10f, %.10f], want [%.10f, %.10f]", k, lo, hi, want[k][0], want[k][1]);
  }
  double lo, hi;
  clopper_pearson(0, 3, 0.05, &lo, &hi);
  ck_assert(fabs(hi - 0.7076) < 5e-5); /* the value scipy prints */
}
END_TEST

START_TEST(test_against_binomial_cdf) {
  for (int n = 1; n <= 30; n++)
    for (int k = 0; k <= n; k++) {
      double lo, hi;
      ck_assert_int_eq(clopper_pearson(k, n, 0.05, &lo, &hi), 0);
      const double ref_lo = k == 0 ? 0 : solve_decreasing(minus_upper_tail, k, n, -0.025L);
      const double ref_hi = k == n ? 1 : solve_decreasing(binom_cdf, k, n, 0.025L);
      ck_assert_msg(fabs(lo - ref_lo) < 1e-9 && fabs(hi - ref_hi) < 1e-9,
                    "n %d k %d: [%.12f, %.12f], binomial CDF [%.12f, %.12f]", n, k, lo, hi,
                    ref_lo, ref_hi);
      ck_assert(lo <= (double)k / n && (double)k / n <= hi);
    }
}
END_TEST

START_TEST(test_beta_cdf) {
  for (int a = 1; a <= 12; a++)
    for (int b = 1; b <= 12; b++)
      for (double x = 0.01; x < 1; x += 0.07) {
        /* I_x(a, b) = P(Binomial(a + b - 1, x) >= a) */
        const double ref = (double)(1 - binom_cdf(a - 1, a + b - 1, x));
        ck_assert_msg(fabs(beta_cdf(x, a, b) - ref) < 1e-12, "I_%g(%d, %d) = %.15g, want %.15g",
                      x, a, b, beta_cdf(x, a, b), ref);
      }
  for (double x = 0.001; x < 1; x += 0.0371) {
    const double ref = 2 / M_PI * asin(sqrt(x));
    ck_assert_msg(fabs(beta_cdf(x, 0.5, 0.5) - ref) < 1e-12, "arcsine at %g", x);
    ck_assert(fabs(beta_quantile(ref, 0.5, 0.5) - x) < 1e-12);
  }
  ck_assert(beta_cdf(0, 2, 3) == 0 && beta_cdf(1, 2, 3) == 1);
}
END_TEST

START_TEST(test_summary) {
  const double x[] = {3.1, 3.2, 3.3, 3.0, 3.9};
  sample_summary s = summarise(x, 5);
  /* mean 3.3; squared deviations .04 .01 0 .09 .36 = .5; / 4 = .125 */
  ck_assert(s.n == 5 && fabs(s.mean - 3.3) < 1e-12 && fabs(s.std - sqrt(0.125)) < 1e-12);
  ck_assert(s.min == 3.0 && s.max == 3.9);
  s = summarise(x, 1);
  ck_assert(s.n == 1 && s.mean == 3.1 && isnan(s.std) && s.min == 3.1 && s.max == 3.1);
  s = summarise(x, 0);
  ck_assert(s.n == 0 && isnan(s.mean) && isnan(s.min));
}
END_TEST

START_TEST(test_bad_arguments) {
  double lo = 7, hi = 7;
  ck_assert_int_eq(clopper_pearson(4, 3, 0.05, &lo, &hi), -1);
  ck_assert_int_eq(clopper_pearson(-1, 3, 0.05, &lo, &hi), -1);
  ck_assert_int_eq(clopper_pearson(0, 0, 0.05, &lo, &hi), -1);
  ck_assert_int_eq(clopper_pearson(1, 3, 1.5, &lo, &hi), -1);
  ck_assert(lo == 7 && hi == 7);
  ck_assert(isnan(beta_cdf(0.5, 0, 1)) && isnan(beta_quantile(2, 1, 1)));
}
END_TEST

int main(void) {
  const TTest *const tests[] = {test_scipy_n3, test_against_binomial_cdf, test_beta_cdf,
                                test_summary, test_bad_arguments, NULL};
  return run_suite(suite_of("campaign_stats", 60, tests), true);
}
