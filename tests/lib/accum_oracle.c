#include "tests/lib/accum_oracle.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

enum { LIMBS = 32, BITS = 32 * LIMBS, ZERO_BIT = 512 }; /* bit i weighs 2^(i - 512) */

typedef struct {
  uint32_t w[LIMBS];
} big;

static big big_zero(void) {
  big r;
  memset(&r, 0, sizeof r);
  return r;
}

static int bit(const big *x, int i) { return i >= 0 && i < BITS && (x->w[i / 32] >> (i % 32)) & 1; }

static void set_bit(big *x, int i) { x->w[i / 32] |= 1u << (i % 32); }

static big add(big x, big y) {
  big r;
  uint64_t carry = 0;
  for (int i = 0; i < LIMBS; i++) {
    uint64_t s = (uint64_t)x.w[i] + y.w[i] + carry;
    r.w[i] = (uint32_t)s, carry = s >> 32;
  }
  return r;
}

static big neg(big x) {
  for (int i = 0; i < LIMBS; i++) x.w[i] = ~x.w[i];
  big one = big_zero();
  set_bit(&one, 0);
  return add(x, one);
}

static int is_neg(const big *x) { return bit(x, BITS - 1); }

static big absv(big x) { return is_neg(&x) ? neg(x) : x; }

/* floor(log2 |x|) as a bit index, -1 for zero */
static int lead(big x) {
  x = absv(x);
  for (int i = BITS - 1; i >= 0; i--)
    if (bit(&x, i)) return i;
  return -1;
}

/* 2^(j - 512) added to a magnitude (j >= 0) */
static big add_pow2(big x, int j) {
  big p = big_zero();
  set_bit(&p, j);
  return add(x, p);
}

/* x with its magnitude reduced to a multiple of 2^(j - 512): truncated, or
 * rounded to nearest even */
static big round_at(big x, int j, int nearest) {
  if (j <= 0) return x;
  const int negative = is_neg(&x);
  big m = absv(x);
  int below = 0, half = bit(&m, j - 1);
  for (int i = 0; i < j - 1 && i < BITS; i++) below |= bit(&m, i);
  for (int i = 0; i < j && i < BITS; i++) m.w[i / 32] &= ~(1u << (i % 32));
  if (nearest && half && (below || bit(&m, j))) m = add_pow2(m, j);
  return negative ? neg(m) : m;
}

/* x to `bits` significant bits, never below 2^(floor - 512) */
static big round_sig(big x, int bits, int floor_bit, int nearest) {
  const int l = lead(x);
  if (l < 0) return x;
  int j = l - bits + 1;
  if (j < floor_bit) j = floor_bit;
  return round_at(x, j, nearest);
}

/* a float32 product, exactly: a double holds it (24 + 24 bits) */
static big from_product(float a, float b) {
  const double p = (double)a * (double)b;
  big r = big_zero();
  if (p == 0) return r;
  int e;
  double f = frexp(fabs(p), &e); /* |p| = f · 2^e, f in [0.5, 1) */
  for (int i = 1; i <= 53; i++) {
    f *= 2;
    if (f >= 1) {
      set_bit(&r, e - i + ZERO_BIT);
      f -= 1;
    }
  }
  return p < 0 ? neg(r) : r;
}

static big from_float(float a) { return from_product(a, 1.0f); }

/* x to float32, nearest even; +0 for 0, -0 for a negative x that rounds to 0 */
static float to_float(big x) {
  const int negative = is_neg(&x);
  x = round_sig(x, 24, ZERO_BIT - 149, 1);
  const int l = lead(x);
  if (l < 0) return negative ? -0.0f : 0.0f;
  x = absv(x);
  if (l - ZERO_BIT > 127) return negative ? -INFINITY : INFINITY;
  double v = 0;
  for (int i = 0; i < BITS; i++)
    if (bit(&x, i)) v += ldexp(1.0, i - ZERO_BIT);
  return (float)(negative ? -v : v);
}

/* The bit index that the product a·b (both nonzero) is aligned by: its own
 * leading bit, or its inputs' exponents added, each at least its emin. */
static int align_bit(const exmy_accum_model *m, float a, float b) {
  if (m->align_exp == EXMY_ACCUM_ALIGN_PRODUCT) return lead(from_product(a, b));
  int ea, eb;
  frexpf(fabsf(a), &ea); /* |a| in [2^(ea-1), 2^ea) */
  frexpf(fabsf(b), &eb);
  ea -= 1, eb -= 1;
  if (ea < m->emin_a) ea = m->emin_a;
  if (eb < m->emin_b) eb = m->emin_b;
  return ea + eb + ZERO_BIT;
}

/* One K slice: the model without k_slice. */
static float slice_dot(const exmy_accum_model *m, const float *a, long stride_a, const float *b,
                       long stride_b, int k) {
  const int nearest = m->round == EXMY_ACCUM_NEAREST_EVEN;
  big sum = big_zero();
  float acc = 0.0f;
  int since_promotion = 0;
  for (int start = 0; start < k; start += m->group) {
    const int end = start + m->group < k ? start + m->group : k;
    int e = m->align_sum ? lead(sum) : -1;
    for (int p = start; p < end; p++) {
      if (a[p * stride_a] == 0 || b[p * stride_b] == 0) continue;
      const int l = align_bit(m, a[p * stride_a], b[p * stride_b]);
      if (l > e) e = l;
    }
    if (e >= 0) {
      const int keep_from = e - m->product_bits + 1; /* the lowest bit kept */
      big group_sum = big_zero();
      for (int p = start; p < end; p++)
        group_sum = add(group_sum, round_at(from_product(a[p * stride_a], b[p * stride_b]),
                                            keep_from, nearest));
      if (m->align_sum)
        sum = add(group_sum, round_at(sum, keep_from, nearest));
      else
        sum = add(sum, group_sum);
      sum = round_sig(sum, m->sum_bits, 0, nearest);
    }
    since_promotion += end - start;
    if (m->promote_every && (since_promotion == m->promote_every || end == k)) {
      if (!isinf(acc)) acc = to_float(add(from_float(acc), sum));
      sum = big_zero();
      since_promotion = 0;
    }
  }
  return m->promote_every ? acc : to_float(sum);
}

float oracle_accum_dot(const exmy_accum_model *m, const float *a, long stride_a,
                       const float *b, long stride_b, int k) {
  const int slice = m->k_slice ? m->k_slice : k;
  float acc = 0.0f;
  for (int s = 0; s < k; s += slice) {
    const float part = slice_dot(m, a + s * stride_a, stride_a, b + s * stride_b, stride_b,
                                 k - s < slice ? k - s : slice);
    acc = s == 0 ? part : acc + part; /* a float32 addition (SSE: nearest even) */
  }
  return acc;
}

float oracle_exact_dot(int promote_every, const float *a, long stride_a, const float *b,
                       long stride_b, int k) {
  big sum = big_zero();
  float acc = 0.0f;
  for (int p = 0; p < k; p++) {
    sum = add(sum, from_product(a[p * stride_a], b[p * stride_b]));
    if (p + 1 == k || (promote_every && (p + 1) % promote_every == 0)) {
      if (!isinf(acc)) acc = to_float(add(from_float(acc), sum));
      sum = big_zero();
    }
  }
  return acc;
}

float oracle_scaled_dot(const exmy_accum_model *m, const float *a, long stride_a,
                        const float *sa, const float *b, long stride_b, const float *sb, int k) {
  exmy_accum_model block = *m;
  block.promote_every = 0, block.k_slice = 0;
  const int slice = m->k_slice ? m->k_slice : k;
  float acc = 0.0f;
  for (int s = 0; s < k; s += slice) {
    const int end = s + slice < k ? s + slice : k;
    float part = 0.0f;
    for (int p = s; p < end; p += m->promote_every) {
      const int n = end - p < m->promote_every ? end - p : m->promote_every;
      const float partial = slice_dot(&block, a + p * stride_a, stride_a, b + p * stride_b,
                                      stride_b, n);
      const int kb = p / m->promote_every;
      const float scale = to_float(from_product(sa ? sa[kb] : 1.0f, sb ? sb[kb] : 1.0f));
      if (!isinf(part)) part = to_float(add(from_float(part), from_product(scale, partial)));
    }
    acc = s == 0 ? part : acc + part; /* a float32 addition (SSE: nearest even) */
  }
  return acc;
}
