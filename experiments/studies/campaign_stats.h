/*
 * The statistics of a campaign's table (campaign.c): exact binomial
 * confidence intervals and the seeds' summary of a sample.
 *
 *   beta_cdf(x; a, b)       the regularised incomplete beta function I_x(a, b)
 *                           (a, b > 0), by the continued fraction of Numerical
 *                           Recipes (section 6.4, modified Lentz), to ~1e-14.
 *   beta_quantile(p; a, b)  the x with I_x(a, b) = p, by bisection on [0, 1]
 *                           (I_x is increasing in x), to 1e-15 in x.
 *   clopper_pearson         the two-sided interval of confidence 1 - alpha
 *                           for a binomial proportion with k of n:
 *                             low  = 0 if k = 0, else beta_quantile(alpha/2; k, n-k+1)
 *                             high = 1 if k = n, else beta_quantile(1-alpha/2; k+1, n-k)
 *                           (Clopper & Pearson 1934; what scipy's
 *                           binomtest(k, n).proportion_ci(method="exact") gives).
 *                           It covers the true proportion with probability at
 *                           least 1 - alpha for every proportion.
 *   sample_summary          n, mean, sample standard deviation (denominator
 *                           n - 1; NaN when n < 2), min, max.
 */
#ifndef EXPERIMENTS_STUDIES_CAMPAIGN_STATS_H
#define EXPERIMENTS_STUDIES_CAMPAIGN_STATS_H

double beta_cdf(double x, double a, double b);
double beta_quantile(double p, double a, double b);

/* 0 <= k <= n, n >= 1, 0 < alpha < 1; -1 for arguments outside these (low and
 * high unchanged), else 0. */
int clopper_pearson(int k, int n, double alpha, double *low, double *high);

typedef struct {
  int n;
  double mean, std, min, max; /* NaN when n = 0 (std also when n = 1) */
} sample_summary;

sample_summary summarise(const double *x, int n);

#endif /* EXPERIMENTS_STUDIES_CAMPAIGN_STATS_H */
