/*
 * The statistics of a campaign's table (campaign.c): exact binomial
 * confidence intervals, the seeds' summary of a sample, and the tests that
 * compare a group with a reference (Fisher's exact test, the paired t-test,
 * the Mann-Whitney test of the steps to divergence).
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
 *   fisher_exact            Fisher's exact test of the 2x2 table
 *                                      diverged      not
 *                             group    a             b
 *                             others   c             d
 *                           under the hypergeometric null, the margins fixed:
 *                           P(x) = C(a+b, x) C(c+d, a+c-x) / C(N, a+c), from
 *                           log-factorials (lgamma).  one_sided = P(X >= a),
 *                           the group diverging more often than the others
 *                           (R's alternative = "greater"); two_sided = the sum
 *                           of P(x) over every x with P(x) <= P(a) (1 + 1e-7),
 *                           the relative tolerance of R's fisher.test and
 *                           scipy's fisher_exact, so that tables exactly as
 *                           probable as the observed one count despite rounding.
 *   student_t_two_sided     P(|T| >= |t|) for Student's t with nu degrees of
 *                           freedom: I_{nu/(nu+t^2)}(nu/2, 1/2) (beta_cdf).
 *   paired_t_test           the differences of paired values (group - reference):
 *                           their summary, t = mean / (std / sqrt(n)) and its
 *                           two-sided p with n - 1 degrees of freedom.  t and p
 *                           are NaN when n < 2 or std = 0 (all differences
 *                           equal: the t statistic is undefined, not infinite).
 *   mann_whitney_earlier    the exact one-sided Mann-Whitney (Wilcoxon rank-sum)
 *                           test that the group's values x (n of them) are
 *                           smaller than the reference's y (m): the statistic is
 *                           W, the sum of the x's ranks in the pooled sample,
 *                           tied values taking the mean of their ranks
 *                           (mid-ranks); p = P(W' <= W) for W' the rank sum of n
 *                           values drawn at random, without replacement, from
 *                           the n + m observed ones, every subset equally likely:
 *                           the permutation law conditional on the ties (R's
 *                           coin::wilcox_test(distribution = "exact")), so ties
 *                           need no correction.  Counted exactly by the
 *                           recursion over the pooled values of the number of
 *                           k-subsets with each rank sum (ranks doubled to
 *                           integers), for n + m <= mann_whitney_max_pooled.
 *                           Also pairs_earlier, the pairs (x_i, y_j) with
 *                           x_i < y_j plus half those with x_i = y_j, out of n m:
 *                           n m - (W - n (n + 1) / 2), so p = P(pairs_earlier'
 *                           >= pairs_earlier).  Without ties and n = m = 3, x all
 *                           below y: p = 1 / C(6, 3) = 0.05.
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

/* a, b, c, d >= 0; -1 for a negative count (p values unchanged), else 0. */
int fisher_exact(int a, int b, int c, int d, double *one_sided, double *two_sided);

/* NaN for nu <= 0 or t NaN. */
double student_t_two_sided(double t, double nu);

typedef struct {
  sample_summary diff; /* of the differences */
  double t, p;         /* NaN when diff.n < 2 or diff.std = 0 */
} paired_t;

paired_t paired_t_test(const double *differences, int n);

/* the exact recursion's table grows as (n + 1) (n + m)^2: a campaign's groups
 * hold a few seeds */
enum { mann_whitney_max_pooled = 200 };

/* n, m >= 1, n + m <= mann_whitney_max_pooled, every value finite; -1 for
 * arguments outside these (results unchanged), else 0. */
int mann_whitney_earlier(const double *x, int n, const double *y, int m, double *pairs_earlier,
                         double *p);

#endif /* EXPERIMENTS_STUDIES_CAMPAIGN_STATS_H */
