/*
 * exmy_qgemm_accum's products with AVX-512: the model of lib/accum_core.h
 * for eight columns of C at once, bit-identical to exmy_accum_dot.
 *
 * The scalar path decodes every float into (sign, significand, exponent)
 * twice per product and does it m·n times per operand element.  Here each
 * operand element is decoded once per GEMM (A's rows whole, B's columns
 * eight at a time, p-major so that one load gives the eight columns), and
 * a group's two passes - the alignment exponent (the largest sum of the
 * inputs' exponents among the nonzero products) and the sum of the
 * products truncated to multiples of 2^q - run on 64-bit lanes.  What
 * happens at the end of a group (the running sum, the promotion) and
 * between K slices is lib/accum_core.h's own code, per lane.
 *
 * Covered: truncation with alignment by the inputs' exponents (the H100's
 * model and its presets: hopper, hopper-split).  Other models, and any
 * element of C whose row or column holds an Inf or NaN, take the scalar
 * exmy_accum_dot.
 */
#include <immintrin.h>
#include <math.h>
#include <omp.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/accum_avx512.h"
#include "lib/accum_core.h"

/* The builds pinned to one clone (-DEXMY_NO_CLONES) and other compilers
 * leave the kernel out: every model takes the scalar products there. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(EXMY_NO_CLONES)

enum { LANES = 8 };

/* A decoded operand element: the significand's bits (0 for zero), the
 * exponent of its last bit, max(floor(log2 |x|), emin) and the sign. */
typedef struct {
  int64_t *mag, *exp, *lead, *neg;
} decoded;

static bool decoded_alloc(decoded *d, size_t n) {
  d->mag = aligned_alloc(64, 4 * n * sizeof(int64_t) + 64);
  if (!d->mag) return false;
  d->exp = d->mag + n, d->lead = d->exp + n, d->neg = d->lead + n;
  return true;
}

static void decode(float f, int emin, int64_t *mag, int64_t *exp, int64_t *lead, int64_t *neg) {
  const exmy_accum_num x = exmy_accum_from_f32(f);
  *mag = (int64_t)x.mag, *exp = x.exp, *neg = x.neg;
  const int l = x.mag ? exmy_accum_lead(x) : 0;
  *lead = l > emin ? l : emin;
}

static bool enabled = true;
void exmy_accum_avx512_enable(bool on) { enabled = on; }

bool exmy_accum_avx512_covers(const exmy_accum_model *m) {
  return enabled && m->group != EXMY_ACCUM_FP32 && m->round == EXMY_ACCUM_TRUNCATE &&
         m->align_exp == EXMY_ACCUM_ALIGN_INPUTS && __builtin_cpu_supports("avx512f");
}

/* The functions below run only where exmy_accum_avx512_covers said yes. */
#define AVX512 __attribute__((target("avx512f")))

/* One row of op(A) (decoded, k long) against eight decoded columns
 * (p-major, LANES per p), the slice [s0, s1) of K: each lane's result as
 * exmy_accum_dot_slice gives it. */
AVX512 static void slice8(const exmy_accum_model *m, const decoded *a, const decoded *b, int s0,
                          int s1, float out[LANES]) {
  exmy_accum_num sum[LANES];
  float acc[LANES];
  for (int l = 0; l < LANES; l++) sum[l] = (exmy_accum_num){0, 0, 0}, acc[l] = 0.0f;
  const __m512i zero = _mm512_setzero_si512();
  for (int g = s0; g < s1; g += m->group) {
    const int n = s1 - g < m->group ? s1 - g : m->group;
    int64_t start[LANES] __attribute__((aligned(64)));
    for (int l = 0; l < LANES; l++) start[l] = exmy_accum_sum_lead(m, sum[l]);
    __m512i lead = _mm512_load_si512(start);
    for (int p = g; p < g + n; p++) {
      if (!a->mag[p]) continue;
      const __m512i mag = _mm512_load_si512(b->mag + (size_t)p * LANES);
      const __mmask8 nz = _mm512_cmpneq_epi64_mask(mag, zero);
      const __m512i l = _mm512_add_epi64(_mm512_set1_epi64(a->lead[p]),
                                         _mm512_load_si512(b->lead + (size_t)p * LANES));
      lead = _mm512_mask_max_epi64(lead, nz, lead, l);
    }
    const __m512i q = _mm512_sub_epi64(lead, _mm512_set1_epi64(m->product_bits - 1));
    __m512i group_sum = zero;
    for (int p = g; p < g + n; p++) {
      if (!a->mag[p]) continue;
      const size_t o = (size_t)p * LANES;
      const __m512i prod =
          _mm512_mul_epu32(_mm512_set1_epi64(a->mag[p]), _mm512_load_si512(b->mag + o));
      const __m512i shift = _mm512_sub_epi64(
          _mm512_add_epi64(_mm512_set1_epi64(a->exp[p]), _mm512_load_si512(b->exp + o)), q);
      /* e >= q: mag << (e - q); else mag >> (q - e), 0 from 64 bits on (a
       * shift count of 64 or more gives 0), as exmy_accum_shr truncates */
      const __mmask8 up = _mm512_cmpge_epi64_mask(shift, zero);
      __m512i v = _mm512_mask_sllv_epi64(_mm512_srlv_epi64(prod, _mm512_sub_epi64(zero, shift)),
                                         up, prod, shift);
      const __mmask8 neg = _mm512_cmpneq_epi64_mask(
          _mm512_xor_si512(_mm512_set1_epi64(a->neg[p]), _mm512_load_si512(b->neg + o)), zero);
      v = _mm512_mask_sub_epi64(v, neg, zero, v);
      group_sum = _mm512_add_epi64(group_sum, v);
    }
    int64_t gs[LANES] __attribute__((aligned(64))), ld[LANES] __attribute__((aligned(64)));
    _mm512_store_si512(gs, group_sum);
    _mm512_store_si512(ld, lead);
    const int promote = exmy_accum_promotes(m, g + n - s0, s1 - s0);
    for (int l = 0; l < LANES; l++)
      exmy_accum_close_group(m, ld[l] > EXMY_ACCUM_NO_LEAD, (int)(ld[l] - m->product_bits + 1),
                             gs[l], promote, &sum[l], &acc[l]);
  }
  for (int l = 0; l < LANES; l++) out[l] = m->promote_every ? acc[l] : exmy_accum_to_f32(sum[l]);
}

AVX512 int exmy_accum_avx512_gemm(const exmy_accum_model *m, bool ta, bool tb, size_t rows,
                                  size_t cols, size_t k, float alpha, const float *a,
                                  size_t lda, const float *b, size_t ldb, float beta, float *c,
                                  size_t ldc) {
  if (!exmy_accum_avx512_covers(m) || k == 0) return -1;
  /* element p of row i of op(A), of column j of op(B) */
  const size_t a_row = ta ? 1 : lda, a_step = ta ? lda : 1;
  const size_t b_col = tb ? ldb : 1, b_step = tb ? 1 : ldb;
  decoded da;
  bool *row_bad = malloc(rows * sizeof *row_bad);
  if (!row_bad || !decoded_alloc(&da, rows * k)) {
    free(row_bad);
    return -1;
  }
  for (size_t i = 0; i < rows; i++) {
    row_bad[i] = false;
    for (size_t p = 0; p < k; p++) {
      const float x = a[i * a_row + p * a_step];
      const size_t o = i * k + p;
      row_bad[i] |= !isfinite(x);
      decode(x, m->emin_a, da.mag + o, da.exp + o, da.lead + o, da.neg + o);
    }
  }
  const int slice = m->k_slice && (size_t)m->k_slice < k ? m->k_slice : (int)k;
  const size_t blocks = (cols + LANES - 1) / LANES;
  const bool parallel = rows * cols * k > 65536;
  /* each thread's decoded columns, all allocated before C is touched */
  const int threads = parallel ? omp_get_max_threads() : 1;
  decoded *db = calloc((size_t)threads, sizeof *db);
  bool ok = db != NULL;
  for (int t = 0; ok && t < threads; t++) ok = decoded_alloc(&db[t], k * LANES);
  if (!ok) {
    for (int t = 0; db && t < threads; t++) free(db[t].mag);
    free(db), free(da.mag), free(row_bad);
    return -1;
  }
#pragma omp parallel for schedule(dynamic) if (parallel) num_threads(threads)
  for (size_t blk = 0; blk < blocks; blk++) {
    const decoded *cb = &db[parallel ? omp_get_thread_num() : 0];
    const size_t j0 = blk * LANES, nj = cols - j0 < LANES ? cols - j0 : LANES;
    bool col_bad[LANES] = {false};
    for (size_t p = 0; p < k; p++)
      for (size_t l = 0; l < LANES; l++) {
        const size_t o = p * LANES + l;
        const float x = l < nj ? b[(j0 + l) * b_col + p * b_step] : 0.0f; /* padding: zeros */
        col_bad[l] |= !isfinite(x);
        decode(x, m->emin_b, cb->mag + o, cb->exp + o, cb->lead + o, cb->neg + o);
      }
    for (size_t i = 0; i < rows; i++) {
      const decoded row = {da.mag + i * k, da.exp + i * k, da.lead + i * k, da.neg + i * k};
      float dot[LANES];
      slice8(m, &row, cb, 0, slice, dot);
      for (int s = slice; (size_t)s < k; s += slice) {
        float part[LANES];
        slice8(m, &row, cb, s, (size_t)(s + slice) < k ? s + slice : (int)k, part);
        for (int l = 0; l < LANES; l++) dot[l] = exmy_accum_add_slices(dot[l], part[l]);
      }
      for (size_t l = 0; l < nj; l++) {
        const size_t j = j0 + l;
        /* an Inf or NaN in the row or the column: the float32 accumulation */
        const float acc = row_bad[i] || col_bad[l]
                              ? exmy_accum_dot(m, a + i * a_row, (long)a_step, b + j * b_col,
                                               (long)b_step, (int)k)
                              : dot[l];
        c[i * ldc + j] = exmy_gemm_epilogue(acc, alpha, beta, &c[i * ldc + j]);
      }
    }
  }
  for (int t = 0; t < threads; t++) free(db[t].mag);
  free(db);
  free(da.mag), free(row_bad);
  return 0;
}

#else

bool exmy_accum_avx512_covers(const exmy_accum_model *m) {
  (void)m;
  return false;
}

int exmy_accum_avx512_gemm(const exmy_accum_model *m, bool ta, bool tb, size_t rows,
                           size_t cols, size_t k, float alpha, const float *a, size_t lda,
                           const float *b, size_t ldb, float beta, float *c, size_t ldc) {
  (void)m, (void)ta, (void)tb, (void)rows, (void)cols, (void)k, (void)alpha, (void)a;
  (void)lda, (void)b, (void)ldb, (void)beta, (void)c, (void)ldc;
  return -1;
}

void exmy_accum_avx512_enable(bool on) { (void)on; }

#endif
