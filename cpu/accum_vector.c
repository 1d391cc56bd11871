/*
 * exmy_qgemm_accum's products with AVX-512 or AVX2: the model of
 * lib/accum_core.h for eight columns of C at once, bit-identical to
 * exmy_accum_dot.
 *
 * The scalar path decodes every float into (sign, significand, exponent)
 * twice per product and does it m·n times per operand element.  Here each
 * operand element is decoded once per GEMM (A's rows whole, B's columns
 * eight at a time, p-major so that one load gives a vector's columns), and
 * a group's two passes run on 64-bit lanes (cpu/accum_slice.h: eight per
 * AVX-512 vector, four per AVX2 one).  What happens at the end of a group
 * (the running sum, the promotion) and between K slices is lib/accum_core.h's
 * own code, per lane.  The two kernels differ only in the vector operations
 * of that loop; the decoding, the loop over rows and column blocks and the
 * models they cover are the ones below.
 *
 * Covered: truncation with alignment by the inputs' exponents (the H100's
 * model and its presets: hopper, hopper-split).  Other models, and any
 * element of C whose row or column holds an Inf or NaN, take the scalar
 * exmy_accum_dot.
 */
#include <math.h>
#include <omp.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/accum_vector.h"
#include "lib/accum_core.h"

/* The builds pinned to one clone (-DEXMY_NO_CLONES) and other compilers
 * leave the kernels out: every model takes the scalar products there. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(EXMY_NO_CLONES)
#include <immintrin.h>

/* Columns of C per block: one AVX-512 vector of int64, two AVX2 ones. */
enum { LANES = 8 };

/* Decoded operand elements: the significand's bits (0 for zero), the
 * exponent of its last bit, the exponent the model aligns by,
 * max(floor(log2 |x|), emin) (ZERO_LEAD for a zero), and the sign as a mask,
 * all ones for a negative value (so that a product's sign is one XOR). */
typedef struct {
  int64_t *mag, *exp, *lead, *neg;
} decoded;

/* A zero's lead: a sum with any other lead (<= 127) stays below
 * EXMY_ACCUM_NO_LEAD, so a zero product never raises a group's alignment
 * exponent, and a group of zero products stays unaligned. */
#define ZERO_LEAD (2 * (int64_t)EXMY_ACCUM_NO_LEAD)

static bool decoded_alloc(decoded *d, size_t n) {
  d->mag = aligned_alloc(64, 4 * n * sizeof(int64_t) + 64);
  if (!d->mag) return false;
  d->exp = d->mag + n, d->lead = d->exp + n, d->neg = d->lead + n;
  return true;
}

static void decode(float f, int emin, const decoded *d, size_t o) {
  const exmy_accum_num x = exmy_accum_from_f32(f);
  d->mag[o] = (int64_t)x.mag, d->exp[o] = x.exp, d->neg[o] = -(int64_t)x.neg;
  if (!x.mag) {
    d->lead[o] = ZERO_LEAD;
  } else {
    const int l = exmy_accum_lead(x);
    d->lead[o] = l > emin ? l : emin;
  }
}

/* One row of op(A) (decoded, k long) against LANES decoded columns (p-major,
 * LANES per p), the slice [s0, s1) of K: each column's result as
 * exmy_accum_dot_slice gives it. */
typedef void slice_fn(const exmy_accum_model *m, const decoded *a, const float *sa,
                      const decoded *b, const float *sb, int s0, int s1, float out[LANES]);

#define VI __m512i
#define VLANES 8
#define LOAD(p) _mm512_load_si512(p)
#define STORE(p, v) _mm512_store_si512(p, v)
#define SET1 _mm512_set1_epi64
#define ADD _mm512_add_epi64
#define SUB _mm512_sub_epi64
#define XOR _mm512_xor_si512
#define OR _mm512_or_si512
#define MAX _mm512_max_epi64
#define MUL32 _mm512_mul_epu32
#define SHL _mm512_sllv_epi64
#define SHR _mm512_srlv_epi64
#define TARGET "avx512f"
#define SLICE slice_avx512
#include "cpu/accum_slice.h"

/* AVX2 has no 64-bit max: a compare and a blend. */
__attribute__((target("avx2"))) static inline __m256i max_epi64_avx2(__m256i x, __m256i y) {
  return _mm256_blendv_epi8(x, y, _mm256_cmpgt_epi64(y, x));
}

#define VI __m256i
#define VLANES 4
#define LOAD(p) _mm256_load_si256((const __m256i *)(p))
#define STORE(p, v) _mm256_store_si256((__m256i *)(p), v)
#define SET1 _mm256_set1_epi64x
#define ADD _mm256_add_epi64
#define SUB _mm256_sub_epi64
#define XOR _mm256_xor_si256
#define OR _mm256_or_si256
#define MAX max_epi64_avx2
#define MUL32 _mm256_mul_epu32
#define SHL _mm256_sllv_epi64
#define SHR _mm256_srlv_epi64
#define TARGET "avx2"
#define SLICE slice_avx2
#include "cpu/accum_slice.h"

/* The kernels, best first: exmy_accum_vector_gemm runs the first that covers
 * the model. */
typedef struct {
  const char *name;
  slice_fn *slice;
  bool enabled; /* exmy_accum_*_enable */
} kernel_info;

enum { AVX512, AVX2, KERNELS };
static kernel_info kernels[KERNELS] = {
    [AVX512] = {"avx512", slice_avx512, true},
    [AVX2] = {"avx2", slice_avx2, true},
};

/* __builtin_cpu_supports takes a literal: one test per kernel. */
static bool cpu_runs(int kernel) {
  __builtin_cpu_init();
  return kernel == AVX512 ? __builtin_cpu_supports("avx512f") != 0
                          : __builtin_cpu_supports("avx2") != 0;
}

/* The first kernel run without EXMY_ACCUM_KERNEL: the widest (AVX-512, whose
 * build of the shared loop text matches exmy_accum_dot on every output of
 * qgemm_accum_test on an AVX-512 Xeon, as the AVX2 build does), falling back
 * to the next where the CPU lacks it. */
enum { DEFAULT_FIRST = AVX512 };

/* The kernel EXMY_ACCUM_KERNEL names (KERNELS for "scalar"), read at the
 * first call; the ones before it are not run (DEFAULT_FIRST without the
 * variable; -1 for a name it does not know). */
static int env_kernel(const char *want) {
  if (!want || !*want) return DEFAULT_FIRST;
  if (!strcmp(want, "scalar")) return KERNELS;
  for (int k = 0; k < KERNELS; k++)
    if (!strcmp(want, kernels[k].name)) return k;
  return -1;
}

static int first_allowed(void) {
  static int first = -1;
  const int f = __atomic_load_n(&first, __ATOMIC_ACQUIRE);
  if (f >= 0) return f;
  const char *want = getenv("EXMY_ACCUM_KERNEL");
  const int named = env_kernel(want), chosen = named < 0 ? DEFAULT_FIRST : named;
  int expected = -1;
  if (!__atomic_compare_exchange_n(&first, &expected, chosen, false, __ATOMIC_ACQ_REL,
                                   __ATOMIC_ACQUIRE))
    return expected; /* a racing first caller read it (and said so) */
  /* a test's or a benchmark's override: said on stderr, as EXMY_SGEMM_KERNEL is */
  if (named < 0) /* the default instead, said on stderr */
    fprintf(stderr, "exmy: EXMY_ACCUM_KERNEL=%s: not avx512, avx2 or scalar; ignored\n", want);
  else if (want && *want)
    fprintf(stderr, "exmy: accumulation kernel %s%s (EXMY_ACCUM_KERNEL)\n", want,
            named < KERNELS && !cpu_runs(named) ? ", which this CPU cannot run: the next one" : "");
  return chosen;
}

static bool covers(int kernel, const exmy_accum_model *m) {
  return kernels[kernel].enabled && kernel >= first_allowed() && m->group != EXMY_ACCUM_FP32 &&
         m->round == EXMY_ACCUM_TRUNCATE && m->align_exp == EXMY_ACCUM_ALIGN_INPUTS &&
         cpu_runs(kernel);
}

/* The loop over blocks of LANES columns and rows of C, with `slice`. */
static int vector_gemm(slice_fn *slice, const exmy_accum_model *m, bool ta, bool tb,
                       size_t rows, size_t cols, size_t k, float alpha, const float *a,
                       size_t lda, const exmy_accum_scales *sa, const float *b, size_t ldb,
                       const exmy_accum_scales *sb, float beta, float *c, size_t ldc) {
  if (k == 0) return -1;
  if (sa && !sa->s) sa = NULL;
  if (sb && !sb->s) sb = NULL;
  if ((sa || sb) && m->promote_every <= 0) return -1;
  /* blocks of K with scales; each thread's scales of its LANES columns */
  const size_t kblocks = sa || sb ? (k + (size_t)m->promote_every - 1) / (size_t)m->promote_every
                                  : 0;
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
      row_bad[i] |= !isfinite(x);
      decode(x, m->emin_a, &da, i * k + p);
    }
    const float *si = exmy_accum_scales_row(sa, i);
    for (size_t kb = 0; si && kb < kblocks; kb++) row_bad[i] |= !isfinite(si[kb]);
  }
  const int slice_k = m->k_slice && (size_t)m->k_slice < k ? m->k_slice : (int)k;
  const size_t blocks = (cols + LANES - 1) / LANES;
  const bool parallel = rows * cols * k > 65536;
  /* each thread's decoded columns, all allocated before C is touched */
  const int threads = parallel ? omp_get_max_threads() : 1;
  decoded *db = calloc((size_t)threads, sizeof *db);
  float *sbl = sb ? malloc((size_t)threads * kblocks * LANES * sizeof *sbl) : NULL;
  bool ok = db != NULL && (!sb || sbl);
  for (int t = 0; ok && t < threads; t++) ok = decoded_alloc(&db[t], k * LANES);
  if (!ok) {
    for (int t = 0; db && t < threads; t++) free(db[t].mag);
    free(db), free(da.mag), free(row_bad), free(sbl);
    return -1;
  }
#pragma omp parallel for schedule(dynamic) if (parallel) num_threads(threads)
  for (size_t blk = 0; blk < blocks; blk++) {
    const int thread = parallel ? omp_get_thread_num() : 0;
    const decoded *cb = &db[thread];
    const size_t j0 = blk * LANES, nj = cols - j0 < LANES ? cols - j0 : LANES;
    bool col_bad[LANES] = {false};
    for (size_t p = 0; p < k; p++)
      for (size_t l = 0; l < LANES; l++) {
        const float x = l < nj ? b[(j0 + l) * b_col + p * b_step] : 0.0f; /* padding: zeros */
        col_bad[l] |= !isfinite(x);
        decode(x, m->emin_b, cb, p * LANES + l);
      }
    /* the columns' block scales, LANES per block (padding: 1) */
    float *cs = sb ? sbl + (size_t)thread * kblocks * LANES : NULL;
    for (size_t l = 0; cs && l < LANES; l++) {
      const float *sj = l < nj ? exmy_accum_scales_row(sb, j0 + l) : NULL;
      for (size_t kb = 0; kb < kblocks; kb++) {
        cs[kb * LANES + l] = sj ? sj[kb] : 1.0f;
        col_bad[l] |= !isfinite(cs[kb * LANES + l]);
      }
    }
    for (size_t i = 0; i < rows; i++) {
      const decoded row = {da.mag + i * k, da.exp + i * k, da.lead + i * k, da.neg + i * k};
      const float *rs = exmy_accum_scales_row(sa, i);
      float dot[LANES];
      slice(m, &row, rs, cb, cs, 0, slice_k, dot);
      for (int s = slice_k; (size_t)s < k; s += slice_k) {
        float part[LANES];
        slice(m, &row, rs, cb, cs, s, (size_t)(s + slice_k) < k ? s + slice_k : (int)k, part);
        for (int l = 0; l < LANES; l++) dot[l] = exmy_accum_add_slices(dot[l], part[l]);
      }
      for (size_t l = 0; l < nj; l++) {
        const size_t j = j0 + l;
        /* an Inf or NaN in the row or the column (codes or scales): the
         * scalar model's float32 accumulation */
        const float acc = row_bad[i] || col_bad[l]
                              ? exmy_accum_dot_scaled(m, a + i * a_row, (long)a_step, rs,
                                                      b + j * b_col, (long)b_step,
                                                      exmy_accum_scales_row(sb, j), (int)k)
                              : dot[l];
        c[i * ldc + j] = exmy_gemm_epilogue(acc, alpha, beta, &c[i * ldc + j]);
      }
    }
  }
  for (int t = 0; t < threads; t++) free(db[t].mag);
  free(db), free(sbl);
  free(da.mag), free(row_bad);
  return 0;
}

/* The first kernel that covers m (KERNELS: none). */
static int kernel_for(const exmy_accum_model *m) {
  int k = 0;
  while (k < KERNELS && !covers(k, m)) k++;
  return k;
}

bool exmy_accum_avx512_covers(const exmy_accum_model *m) { return covers(AVX512, m); }
bool exmy_accum_avx2_covers(const exmy_accum_model *m) { return covers(AVX2, m); }
void exmy_accum_avx512_enable(bool on) { kernels[AVX512].enabled = on; }
void exmy_accum_avx2_enable(bool on) { kernels[AVX2].enabled = on; }

const char *exmy_accum_kernel_name(const exmy_accum_model *m) {
  const int k = kernel_for(m);
  return k < KERNELS ? kernels[k].name : "scalar";
}

int exmy_accum_vector_gemm(const exmy_accum_model *m, bool ta, bool tb, size_t rows,
                           size_t cols, size_t k, float alpha, const float *a, size_t lda,
                           const exmy_accum_scales *sa, const float *b, size_t ldb,
                           const exmy_accum_scales *sb, float beta, float *c, size_t ldc) {
  const int kernel = kernel_for(m);
  if (kernel == KERNELS) return -1;
  return vector_gemm(kernels[kernel].slice, m, ta, tb, rows, cols, k, alpha, a, lda, sa, b, ldb,
                     sb, beta, c, ldc);
}

#else

bool exmy_accum_avx512_covers(const exmy_accum_model *m) {
  (void)m;
  return false;
}

bool exmy_accum_avx2_covers(const exmy_accum_model *m) {
  (void)m;
  return false;
}

void exmy_accum_avx512_enable(bool on) { (void)on; }
void exmy_accum_avx2_enable(bool on) { (void)on; }

const char *exmy_accum_kernel_name(const exmy_accum_model *m) {
  (void)m;
  return "scalar";
}

int exmy_accum_vector_gemm(const exmy_accum_model *m, bool ta, bool tb, size_t rows,
                           size_t cols, size_t k, float alpha, const float *a, size_t lda,
                           const exmy_accum_scales *sa, const float *b, size_t ldb,
                           const exmy_accum_scales *sb, float beta, float *c, size_t ldc) {
  (void)m, (void)ta, (void)tb, (void)rows, (void)cols, (void)k, (void)alpha, (void)a;
  (void)lda, (void)sa, (void)b, (void)ldb, (void)sb, (void)beta, (void)c, (void)ldc;
  return -1;
}

#endif
