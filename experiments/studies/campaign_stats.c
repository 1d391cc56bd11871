/* Exact binomial intervals, a sample's summary, Fisher's exact test, the
 * paired t-test and the exact Mann-Whitney test (campaign_stats.h). */
#include "experiments/studies/campaign_stats.h"

#include <math.h>
#include <stdlib.h>

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

/* The rank of v among the pooled values, doubled so that mid-ranks are
 * integers: 2 (below) + (equal) + 1, below and equal counted over x and y. */
static int doubled_mid_rank(double v, const double *x, int n, const double *y, int m) {
  int below = 0, equal = 0;
  for (int i = 0; i < n; i++) below += x[i] < v, equal += x[i] == v;
  for (int j = 0; j < m; j++) below += y[j] < v, equal += y[j] == v;
  return 2 * below + equal + 1;
}

int mann_whitney_earlier(const double *x, int n, const double *y, int m, double *pairs_earlier,
                         double *p) {
  if (n < 1 || m < 1 || n + m > mann_whitney_max_pooled) return -1;
  for (int i = 0; i < n; i++)
    if (!isfinite(x[i])) return -1;
  for (int j = 0; j < m; j++)
    if (!isfinite(y[j])) return -1;
  const int pooled = n + m;
  int ranks[mann_whitney_max_pooled], observed = 0; /* doubled, W's doubled */
  for (int i = 0; i < pooled; i++) {
    ranks[i] = doubled_mid_rank(i < n ? x[i] : y[i - n], x, n, y, m);
    if (i < n) observed += ranks[i];
  }
  /* count[k][s]: how many k-subsets of the values seen so far have doubled rank
   * sum s; doubles, exact below 2^53 and C(200, 100) ~ 9e58 still in range */
  const int max_sum = pooled * (pooled + 1);
  double *count = calloc((size_t)(n + 1) * (max_sum + 1), sizeof(double));
  if (!count) return -1;
  count[0] = 1;
  for (int i = 0; i < pooled; i++)
    for (int k = (i + 1 < n ? i + 1 : n); k >= 1; k--) /* each value in a subset once */
      for (int s = max_sum; s >= ranks[i]; s--)
        count[(size_t)k * (max_sum + 1) + s] +=
            count[(size_t)(k - 1) * (max_sum + 1) + s - ranks[i]];
  double at_most = 0, all = 0;
  for (int s = 0; s <= max_sum; s++) {
    const double c = count[(size_t)n * (max_sum + 1) + s];
    all += c;
    if (s <= observed) at_most += c;
  }
  free(count);
  *p = fmin(at_most / all, 1);
  *pairs_earlier = (double)n * m - (observed / 2.0 - n * (n + 1) / 2.0);
  return 0;
}
