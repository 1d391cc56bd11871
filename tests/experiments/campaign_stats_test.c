/* experiments/studies/campaign_stats.h against independent references:
 *  - Clopper-Pearson for n = 3 against scipy's published values (closed forms:
 *    k = 0 and k = n are (alpha/2)^(1/n) expressions, k = 1 and 2 a cubic);
 *  - every k of n = 1..30 against bisection on the binomial CDF itself
 *    (low: P(X >= k | low) = alpha/2, high: P(X <= k | high) = alpha/2);
 *  - beta_cdf for integer a, b against the binomial tail it equals, and for
 *    a = b = 1/2 against the arcsine law (2/pi) asin(sqrt x);
 *  - the summary's sample standard deviation (n - 1) on hand values;
 *  - Fisher's exact test on textbook tables and on tables summed by hand from
 *    the hypergeometric formula in exact fractions;
 *  - Student's t two-sided p at the tabulated 5% critical values, and at
 *    t = 2, nu = 2, where it is 1 - sqrt(2/3) in closed form;
 *  - the exact Mann-Whitney test on cases counted by hand (separated samples,
 *    ties, one value a side), the U tables' entries, and every sample of a
 *    few small sizes against enumeration of the subsets, the statistic counted
 *    pair by pair rather than from ranks;
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

START_TEST(test_fisher_exact) {
  const struct {
    int a, b, c, d;
    double one_sided, two_sided;
  } tables[] = {
      /* Fisher's lady tasting tea: 3 of 4 cups right. P(x) = C(4,x) C(4,4-x) / 70
       * = 1, 16, 36, 16, 1 (/70): one-sided 17/70, two-sided 34/70 (P(1) = P(3)) */
      {3, 1, 1, 3, 0.2428571, 0.4857143},
      /* 3 of 3 diverged against 0 of 6: C(3,3) C(6,0) / C(9,3) = 1/84 either way */
      {3, 0, 0, 6, 1.0 / 84, 1.0 / 84},
      /* P(x) = C(3,x) C(4,4-x) / 35 = 1, 12, 18, 4 (/35), observed x = 1:
       * one-sided 34/35, two-sided (1 + 12 + 4)/35 = 17/35 */
      {1, 2, 3, 1, 34.0 / 35, 17.0 / 35},
      /* P(x) = C(10,x) C(10,9-x) / C(20,9) = 1, 45, 540, 2520, 5292, 5292, 2520,
       * 540, 45, 1 (/16796), observed x = 7: one-sided (540 + 45 + 1)/16796 =
       * 293/8398, two-sided twice that (the law is symmetric), 293/4199 */
      {7, 3, 2, 8, 293.0 / 8398, 293.0 / 4199},
      /* no divergence anywhere: one table, p = 1 */
      {0, 3, 0, 3, 1, 1},
  };
  for (size_t i = 0; i < sizeof tables / sizeof *tables; i++) {
    double one, two;
    ck_assert_int_eq(fisher_exact(tables[i].a, tables[i].b, tables[i].c, tables[i].d, &one, &two),
                     0);
    ck_assert_msg(fabs(one - tables[i].one_sided) < 1e-7 && fabs(two - tables[i].two_sided) < 1e-7,
                  "[[%d, %d], [%d, %d]]: one-sided %.10f, two-sided %.10f; want %.10f, %.10f",
                  tables[i].a, tables[i].b, tables[i].c, tables[i].d, one, two,
                  tables[i].one_sided, tables[i].two_sided);
  }
  double one = 7, two = 7;
  ck_assert_int_eq(fisher_exact(-1, 2, 3, 4, &one, &two), -1);
  ck_assert(one == 7 && two == 7);
}
END_TEST

START_TEST(test_student_t) {
  /* the two-sided 5% critical values of the t tables (t_{0.975, nu}) */
  const struct {
    double t, nu, p;
  } points[] = {{4.302653, 2, 0.05},
                {2.228139, 10, 0.05},
                {12.7062, 1, 0.05},
                /* nu = 2: p = 1 - sqrt(t^2 / (2 + t^2)) = 1 - sqrt(2/3) */
                {2.0, 2, 0.1835034},
                {-2.0, 2, 0.1835034},
                {0, 5, 1}};
  for (size_t i = 0; i < sizeof points / sizeof *points; i++) {
    const double p = student_t_two_sided(points[i].t, points[i].nu);
    ck_assert_msg(fabs(p - points[i].p) < 2e-6, "t %g nu %g: p %.8f, want %.7f", points[i].t,
                  points[i].nu, p, points[i].p);
  }
  ck_assert(fabs(student_t_two_sided(2.0, 2) - (1 - sqrt(2.0 / 3))) < 1e-12);
  ck_assert(isnan(student_t_two_sided(1, 0)) && isnan(student_t_two_sided(NAN, 3)));
}
END_TEST

START_TEST(test_paired_t) {
  /* differences 0.125, 0.25, 0.375: mean 0.25, std 0.125, t = 2 sqrt(3),
   * nu = 2: p = 1 - sqrt(12/14) */
  const double d[] = {0.125, 0.25, 0.375};
  paired_t r = paired_t_test(d, 3);
  ck_assert(r.diff.n == 3 && fabs(r.diff.mean - 0.25) < 1e-15 && fabs(r.diff.std - 0.125) < 1e-15);
  ck_assert_msg(fabs(r.t - 2 * sqrt(3)) < 1e-12 && fabs(r.p - (1 - sqrt(6.0 / 7))) < 1e-12,
                "t %.12f p %.12f", r.t, r.p);
  r = paired_t_test(d, 1); /* one pair: no standard deviation, no test */
  ck_assert(r.diff.n == 1 && r.diff.mean == 0.125 && isnan(r.t) && isnan(r.p));
  const double equal[] = {0.5, 0.5};
  r = paired_t_test(equal, 2); /* std 0: t undefined */
  ck_assert(r.diff.std == 0 && isnan(r.t) && isnan(r.p));
}
END_TEST

START_TEST(test_mann_whitney_by_hand) {
  const double steps_a[] = {101, 109, 114}, steps_b[] = {368, 376, 396};
  const struct {
    const double *x;
    int n;
    const double *y;
    int m;
    double pairs_earlier, p;
  } cases[] = {
      /* 3 below 3: W = 1 + 2 + 3, the least of C(6, 3) = 20 subsets */
      {steps_a, 3, steps_b, 3, 9, 1.0 / 20},
      /* the other way round: every subset has W' <= 4 + 5 + 6 */
      {steps_b, 3, steps_a, 3, 0, 1},
      /* 2 below 3: 1 of C(5, 2) = 10 */
      {steps_a, 2, steps_b, 3, 6, 1.0 / 10},
      /* one value a side: 1 of 2; one below three: 1 of 4; one above three: 4 of 4 */
      {steps_a, 1, steps_b, 1, 1, 0.5},
      {steps_a, 1, steps_b, 3, 3, 0.25},
      {steps_b + 2, 1, steps_a, 3, 0, 1},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    double pairs = -1, p = -1;
    ck_assert_int_eq(
        mann_whitney_earlier(cases[i].x, cases[i].n, cases[i].y, cases[i].m, &pairs, &p), 0);
    ck_assert_msg(pairs == cases[i].pairs_earlier && fabs(p - cases[i].p) < 1e-15,
                  "case %zu: pairs earlier %g, p %.15g; want %g, %.15g", i, pairs, p,
                  cases[i].pairs_earlier, cases[i].p);
  }
  /* ties: x = {1, 2}, y = {2, 3}; mid-ranks 1, 2.5 | 2.5, 4, W = 3.5.  The six
   * 2-subsets of {1, 2.5, 2.5, 4} sum to 3.5 3.5 5 5 6.5 6.5: p = 2/6.  Pairs:
   * 1 < 2, 1 < 3, 2 = 2 (half), 2 < 3: 3.5 of 4. */
  const double tie_x[] = {1, 2}, tie_y[] = {2, 3};
  double pairs, p;
  ck_assert_int_eq(mann_whitney_earlier(tie_x, 2, tie_y, 2, &pairs, &p), 0);
  ck_assert_msg(pairs == 3.5 && fabs(p - 1.0 / 3) < 1e-15, "ties: %g, %.15g", pairs, p);
  /* x = {350, 500}, y = {300, 350, 400}: mid-ranks 2.5, 5 | 1, 2.5, 4, W = 7.5;
   * the ten 2-subsets of {1, 2.5, 2.5, 4, 5} sum to 3.5 3.5 5 6 5 6.5 6.5 7.5 7.5 9:
   * p = 9/10; pairs: 350 = 350 (half), 350 < 400: 1.5 of 6 */
  const double tie2_x[] = {350, 500}, tie2_y[] = {300, 350, 400};
  ck_assert_int_eq(mann_whitney_earlier(tie2_x, 2, tie2_y, 3, &pairs, &p), 0);
  ck_assert_msg(pairs == 1.5 && fabs(p - 0.9) < 1e-15, "ties 2: %g, %.15g", pairs, p);
  /* all values equal: every subset has the observed W, p = 1, every pair half */
  const double same[] = {7, 7, 7, 7, 7};
  ck_assert_int_eq(mann_whitney_earlier(same, 3, same + 3, 2, &pairs, &p), 0);
  ck_assert(pairs == 3 && p == 1);
}
END_TEST

/* The tables of the Mann-Whitney U's exact lower tail P(U <= u) without ties
 * (e.g. Siegel & Castellan, table J): n = 3, m = 4: u = 0 0.029, u = 1 0.057;
 * n = m = 4: u = 1 0.029, u = 2 0.057; n = m = 5: u = 2 0.016, u = 4 0.048.  U
 * counts the pairs with x above y, so x takes the ranks that leave u pairs. */
START_TEST(test_mann_whitney_tables) {
  const struct {
    int n, m, u;
    double p;
  } rows[] = {{3, 4, 0, 1.0 / 35}, {3, 4, 1, 2.0 / 35}, {4, 4, 1, 2.0 / 70},
              {4, 4, 2, 4.0 / 70}, {5, 5, 2, 4.0 / 252}, {5, 5, 4, 12.0 / 252}};
  for (size_t i = 0; i < sizeof rows / sizeof *rows; i++) {
    /* x = 1..n - 1 and n + u: U = u (the last x above u of the y's) */
    double x[8], y[8];
    for (int k = 0; k < rows[i].n - 1; k++) x[k] = k + 1;
    x[rows[i].n - 1] = rows[i].n + rows[i].u;
    for (int k = 0, v = rows[i].n; k < rows[i].m; v++)
      if (v != rows[i].n + rows[i].u) y[k++] = v;
    double pairs, p;
    ck_assert_int_eq(mann_whitney_earlier(x, rows[i].n, y, rows[i].m, &pairs, &p), 0);
    ck_assert_msg(pairs == rows[i].n * rows[i].m - rows[i].u && fabs(p - rows[i].p) < 1e-15,
                  "n %d m %d u %d: pairs %g p %.6f, want %.6f", rows[i].n, rows[i].m, rows[i].u,
                  pairs, p, rows[i].p);
  }
}
END_TEST

/* pairs with a < b, half the ties */
static double count_earlier_pairs(const double *a, int n, const double *b, int m) {
  double pairs = 0;
  for (int i = 0; i < n; i++)
    for (int j = 0; j < m; j++) pairs += a[i] < b[j] ? 1 : a[i] == b[j] ? 0.5 : 0;
  return pairs;
}

START_TEST(test_mann_whitney_enumerated) {
  /* values from a small set, so that ties are frequent; every split of the
   * pooled sample into n and m by a bit mask, equally likely */
  unsigned state = 12345;
  for (int trial = 0; trial < 300; trial++) {
    const int n = 1 + trial % 6, m = 1 + (trial / 6) % 7;
    double pooled[13];
    for (int i = 0; i < n + m; i++) {
      state = state * 1103515245u + 12345u;
      pooled[i] = (double)((state >> 16) % 6) * 10;
    }
    const double observed = count_earlier_pairs(pooled, n, pooled + n, m);
    int splits = 0, at_least = 0;
    for (unsigned mask = 0; mask < 1u << (n + m); mask++) {
      if (__builtin_popcount(mask) != n) continue;
      double a[13], b[13];
      int na = 0, nb = 0;
      for (int i = 0; i < n + m; i++)
        if (mask >> i & 1) a[na++] = pooled[i];
        else b[nb++] = pooled[i];
      splits++;
      at_least += count_earlier_pairs(a, na, b, nb) >= observed;
    }
    double pairs, p;
    ck_assert_int_eq(mann_whitney_earlier(pooled, n, pooled + n, m, &pairs, &p), 0);
    ck_assert_msg(pairs == observed && fabs(p - (double)at_least / splits) < 1e-12,
                  "trial %d (n %d m %d): pairs %g p %.12f; enumerated %g, %d / %d", trial, n, m,
                  pairs, p, observed, at_least, splits);
  }
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
  const double x[] = {1, NAN}, y[mann_whitney_max_pooled] = {0};
  double pairs = 7, p = 7;
  ck_assert_int_eq(mann_whitney_earlier(x, 0, y, 3, &pairs, &p), -1);
  ck_assert_int_eq(mann_whitney_earlier(x, 1, y, 0, &pairs, &p), -1);
  ck_assert_int_eq(mann_whitney_earlier(x, 2, y, 3, &pairs, &p), -1);
  ck_assert_int_eq(mann_whitney_earlier(x, 1, y, mann_whitney_max_pooled, &pairs, &p), -1);
  ck_assert(pairs == 7 && p == 7);
}
END_TEST

int main(void) {
  const TTest *const tests[] = {test_scipy_n3, test_against_binomial_cdf, test_beta_cdf,
                                test_summary, test_fisher_exact, test_student_t, test_paired_t,
                                test_mann_whitney_by_hand, test_mann_whitney_tables,
                                test_mann_whitney_enumerated, test_bad_arguments, NULL};
  return run_suite(suite_of("campaign_stats", 60, tests), true);
}
