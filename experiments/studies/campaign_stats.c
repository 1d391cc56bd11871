/* Exact binomial intervals, a sample's summary, Fisher's exact test and the
 * paired t-test (campaign_stats.h). */
#include "experiments/studies/campaign_stats.h"

#include <math.h>

/* The continued fraction of I_x(a, b) (Numerical Recipes' betacf). */
static double beta_fraction(double x, double a, double b) {
  const double tiny = 1e-300;
  const double qab = a + b, qap = a + 1, qam = a - 1;
  double c = 1, d = 1 - qab * x / qap;
  if (fabs(d) < tiny) d = tiny;
  d = 1 / d;
  double h = d;
  for (int m = 1; m <= 1000; m++) {
    const int m2 = 2 * m;
    double aa = m * (b - m) * x / ((qam + m2) * (a + m2));
    d = 1 + aa * d;
    if (fabs(d) < tiny) d = tiny;
    c = 1 + aa / c;
    if (fabs(c) < tiny) c = tiny;
    d = 1 / d;
    h *= d * c;
    aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2));
    d = 1 + aa * d;
    if (fabs(d) < tiny) d = tiny;
    c = 1 + aa / c;
    if (fabs(c) < tiny) c = tiny;
    d = 1 / d;
    const double del = d * c;
    h *= del;
    if (fabs(del - 1) < 1e-16) break;
  }
  return h;
}

double beta_cdf(double x, double a, double b) {
  if (!(a > 0 && b > 0) || isnan(x)) return NAN;
  if (x <= 0) return 0;
  if (x >= 1) return 1;
  const double front =
      exp(lgamma(a + b) - lgamma(a) - lgamma(b) + a * log(x) + b * log1p(-x));
  /* the fraction converges fast on the side of the mean; the other by symmetry */
  if (x < (a + 1) / (a + b + 2)) return front * beta_fraction(x, a, b) / a;
  return 1 - front * beta_fraction(1 - x, b, a) / b;
}

double beta_quantile(double p, double a, double b) {
  if (!(p >= 0 && p <= 1) || !(a > 0 && b > 0)) return NAN;
  double lo = 0, hi = 1;
  while (hi - lo > 1e-15) {
    const double mid = 0.5 * (lo + hi);
    if (mid <= lo || mid >= hi) break;
    if (beta_cdf(mid, a, b) < p) lo = mid;
    else hi = mid;
  }
  return 0.5 * (lo + hi);
}

int clopper_pearson(int k, int n, double alpha, double *low, double *high) {
  if (n < 1 || k < 0 || k > n || !(alpha > 0 && alpha < 1)) return -1;
  *low = k == 0 ? 0 : beta_quantile(alpha / 2, k, n - k + 1);
  *high = k == n ? 1 : beta_quantile(1 - alpha / 2, k + 1, n - k);
  return 0;
}

sample_summary summarise(const double *x, int n) {
  sample_summary s = {n, NAN, NAN, NAN, NAN};
  if (n < 1) return s;
  double sum = 0;
  s.min = s.max = x[0];
  for (int i = 0; i < n; i++) {
    sum += x[i];
    s.min = fmin(s.min, x[i]);
    s.max = fmax(s.max, x[i]);
  }
  s.mean = sum / n;
  if (n >= 2) {
    double ss = 0;
    for (int i = 0; i < n; i++) ss += (x[i] - s.mean) * (x[i] - s.mean);
    s.std = sqrt(ss / (n - 1));
  }
  return s;
}

/* log P(X = x) of the hypergeometric law: x of the k marked among N drawn
 * into a row of n */
static double log_hypergeometric(int x, int n, int k, int N) {
  return lgamma(n + 1.0) - lgamma(x + 1.0) - lgamma(n - x + 1.0) + lgamma(N - n + 1.0) -
         lgamma(k - x + 1.0) - lgamma(N - n - k + x + 1.0) - lgamma(N + 1.0) +
         lgamma(k + 1.0) + lgamma(N - k + 1.0);
}

int fisher_exact(int a, int b, int c, int d, double *one_sided, double *two_sided) {
  if (a < 0 || b < 0 || c < 0 || d < 0) return -1;
  const int n = a + b, k = a + c, N = a + b + c + d;
  const int lo = k - (N - n) > 0 ? k - (N - n) : 0, hi = n < k ? n : k;
  const double observed = exp(log_hypergeometric(a, n, k, N));
  double upper = 0, extreme = 0;
  for (int x = lo; x <= hi; x++) {
    const double p = exp(log_hypergeometric(x, n, k, N));
    if (x >= a) upper += p;
    if (p <= observed * (1 + 1e-7)) extreme += p;
  }
  *one_sided = fmin(upper, 1);
  *two_sided = fmin(extreme, 1);
  return 0;
}

double student_t_two_sided(double t, double nu) {
  if (!(nu > 0) || isnan(t)) return NAN;
  return beta_cdf(nu / (nu + t * t), nu / 2, 0.5);
}

paired_t paired_t_test(const double *differences, int n) {
  paired_t r = {summarise(differences, n), NAN, NAN};
  if (n >= 2 && r.diff.std > 0) {
    r.t = r.diff.mean / (r.diff.std / sqrt(n));
    r.p = student_t_two_sided(r.t, n - 1);
  }
  return r;
}
