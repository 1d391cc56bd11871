/*
 * The bulk conversions: exmy_quantize_f32, exmy_encode_f32, exmy_decode_f32.
 *
 * Two implementations of quantize / encode, held equal to the reference by
 * //tests/cpu:
 *  - on CPUs with AVX-512 (x86-64-v4), the intrinsics loops of
 *    cpu/bulk_avx512.c, for every format kparams_make takes except those
 *    whose subnormal range is wider than their mantissa without flush,
 *    chosen per call by avx512_kernel();
 *  - everywhere else (those formats, other CPUs), one C loop per (rounding mode,
 *    flush, output type), instantiated from cpu/bulk_kernel.h with those as
 *    constants so that the hot loop holds no switch and vectorises, compiled
 *    three times (target_clones: x86-64-v4, x86-64-v3 with 8 lanes and
 *    per-lane variable shifts, and the baseline) and chosen at load time, so
 *    the library never executes an instruction the CPU lacks.  The _baseline
 *    / _avx2 test builds pin one clone (and leave the AVX-512 loops out).
 * OpenMP splits arrays above EXMY_OMP_THRESHOLD (cpu/omp_threshold.h, measured
 * by //cpu:threshold_probe) into one contiguous slice per thread; arrays
 * larger than the cache get non-temporal stores (cpu/bulk_dispatch.h).
 *
 * Stochastic rounding draws element i's word from Philox block (offset+i)/4:
 * the loops generate the blocks of a tile of elements in one vectorised pass
 * (AVX-512 intrinsics where the CPU has them), then round the tile, so that
 * each block is computed once for its 4 words whatever the alignment of
 * offset.
 */
#define _GNU_SOURCE /* sysconf(_SC_LEVEL3_CACHE_SIZE) */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cpu/bulk_avx512.h"
#include "cpu/bulk_kernel.h"
#include "cpu/bulk_dispatch.h"
#include "cpu/omp_threshold.h"
#include "cpu/exmy_cpu.h"
#include "lib/philox.h"
#include "lib/round_core.h"

#if defined(__x86_64__) && !defined(EXMY_NO_CLONES)
#define EXMY_CLONES \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define EXMY_CLONES
#endif

/* sr in the C loops (cpu/bulk_kernel.h): elements per tile of random words
 * (the AVX-512 loops of cpu/bulk_avx512.c tile by AVX512_SR_TILE) */
enum { PORTABLE_SR_TILE = 512 };

/* The Philox words of blocks b0 .. b0+nb-1 (mod 2^62, as the block j >> 2 of
 * a 64-bit stream index j wraps), in order.  The loop over blocks vectorises
 * (32x32->64-bit multiplies). */
EXMY_CLONES static void philox_words(uint64_t seed, uint64_t b0, size_t nb,
                                     uint32_t *w) {
  const uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
  for (size_t i = 0; i < nb; i++) {
    const uint64_t block = (b0 + i) & EXMY_SR_BLOCK_MASK;
    uint32_t c0 = (uint32_t)block, c1 = (uint32_t)(block >> 32), c2 = 0, c3 = 0;
    uint32_t ka = k0, kb = k1;
    for (int round = 0; round < 10; round++) {
      uint64_t p0 = (uint64_t)EXMY_PHILOX_M0 * c0;
      uint64_t p1 = (uint64_t)EXMY_PHILOX_M1 * c2;
      uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ ka;
      uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ kb;
      c1 = (uint32_t)p1;
      c3 = (uint32_t)p0;
      c0 = n0;
      c2 = n2;
      ka += EXMY_PHILOX_W0;
      kb += EXMY_PHILOX_W1;
    }
    w[4 * i + 0] = c0;
    w[4 * i + 1] = c1;
    w[4 * i + 2] = c2;
    w[4 * i + 3] = c3;
  }
}

/* The words for a tile: AVX-512 where the CPU has it (cpu/bulk_avx512.c). */
static inline void philox_tile(uint64_t seed, uint64_t b0, size_t nb,
                               uint32_t *w, int avx512) {
#if EXMY_HAVE_AVX512_KERNELS
  if (avx512) {
    exmy_avx512_philox_words(seed, b0, nb, w);
    return;
  }
#endif
  (void)avx512;
  philox_words(seed, b0, nb, w);
}

/* 1 if the AVX-512 kernels run here; asked once. */
static int cpu_has_avx512(void) {
#if EXMY_HAVE_AVX512_KERNELS
  static int known = -1;
  int v = __atomic_load_n(&known, __ATOMIC_RELAXED);
  if (v < 0) {
    v = exmy_avx512_usable();
    __atomic_store_n(&known, v, __ATOMIC_RELAXED);
  }
  return v;
#else
  return 0;
#endif
}

typedef union { float f; uint32_t u; } f32u;

/* The loop over elements with a given per-element rounding expression. */
#define EXMY_LOOP(ROUND, QUANT, OUT_T)                                        \
  if (MODE != EXMY_SR) {                                                      \
    for (size_t i = 0; i < n; i++) {                                          \
      const uint32_t w_i = 0;                                                 \
      const float x_i = x[i];                                                 \
      uint32_t r = ROUND;                                                     \
      EXMY_STORE_##QUANT(out, i, r, OUT_T);                                   \
    }                                                                         \
  } else {                                                                    \
    uint32_t words[PORTABLE_SR_TILE + 8];                                     \
    const int avx512 = cpu_has_avx512();                                      \
    for (size_t t0 = 0; t0 < n; t0 += PORTABLE_SR_TILE) {                     \
      size_t len = n - t0 < PORTABLE_SR_TILE ? n - t0 : PORTABLE_SR_TILE;     \
      const uint64_t j = j0 + t0;                                             \
      philox_tile(seed, j >> 2, ((j & 3) + len + 3) >> 2, words, avx512);     \
      const uint32_t *w = words + (j & 3);                                    \
      const float *xt = x + t0;                                               \
      OUT_T *ot = out + t0;                                                   \
      for (size_t i = 0; i < len; i++) {                                      \
        const uint32_t w_i = w[i];                                            \
        const float x_i = xt[i];                                              \
        uint32_t r = ROUND;                                                   \
        EXMY_STORE_##QUANT(ot, i, r, OUT_T);                                  \
      }                                                                       \
    }                                                                         \
  }

static inline uint32_t bits_f(float x) {
  f32u v = {.f = x};
  return v.u;
}

/* One function per (mode, flush, e8m0, output).  OUT_T: the stored type;
 * QUANT: store float32 values instead of codes.  Signed formats without flush
 * take exmy_k_round_fast when the format allows (p.fast). */
#define EXMY_KERNEL(NAME, MODE_, FLUSH, E8M0, QUANT, OUT_T)                    \
  EXMY_CLONES static void NAME(const exmy_kparams *pp, const float *x,        \
                               void *outv, size_t n, uint64_t seed,           \
                               uint64_t j0) {                                 \
    const int MODE = MODE_;                                                   \
    const exmy_kparams p = *pp;                                               \
    OUT_T *out = (OUT_T *)outv;                                               \
    (void)seed, (void)j0;                                                     \
    if (!FLUSH && !E8M0 && p.fast) {                                          \
      EXMY_LOOP(exmy_k_round_fast(&p, x_i, w_i, MODE, QUANT), QUANT, OUT_T)   \
    } else {                                                                  \
      EXMY_LOOP(exmy_k_round(&p, bits_f(x_i), w_i, MODE, FLUSH, E8M0, QUANT), \
                QUANT, OUT_T)                                                 \
    }                                                                         \
  }
#define EXMY_STORE_0(out, i, r, T) (out)[i] = (T)(r)
#define EXMY_STORE_1(out, i, r, T)   \
  do {                               \
    f32u o_ = {.u = (r)};            \
    (out)[i] = o_.f;                 \
  } while (0)

/* The 7 modes of one (flush, e8m0, output), and their table row. */
#define EXMY_KERNEL_ROW(SUF, FLUSH, E8M0, QUANT, T)                       \
  EXMY_KERNEL(k_##SUF##_rne, EXMY_RNE, FLUSH, E8M0, QUANT, T)            \
  EXMY_KERNEL(k_##SUF##_rna, EXMY_RNA, FLUSH, E8M0, QUANT, T)            \
  EXMY_KERNEL(k_##SUF##_rz, EXMY_RZ, FLUSH, E8M0, QUANT, T)              \
  EXMY_KERNEL(k_##SUF##_ru, EXMY_RU, FLUSH, E8M0, QUANT, T)              \
  EXMY_KERNEL(k_##SUF##_rd, EXMY_RD, FLUSH, E8M0, QUANT, T)              \
  EXMY_KERNEL(k_##SUF##_ro, EXMY_RO, FLUSH, E8M0, QUANT, T)              \
  EXMY_KERNEL(k_##SUF##_sr, EXMY_SR, FLUSH, E8M0, QUANT, T)              \
  static const exmy_kernel_fn row_##SUF[7] = {                           \
      k_##SUF##_rne, k_##SUF##_rna, k_##SUF##_rz, k_##SUF##_ru,          \
      k_##SUF##_rd,  k_##SUF##_ro,  k_##SUF##_sr};

EXMY_KERNEL_ROW(q_keep, 0, 0, 1, float)
EXMY_KERNEL_ROW(q_flush, 1, 0, 1, float)
EXMY_KERNEL_ROW(q_e8m0, 0, 1, 1, float)
EXMY_KERNEL_ROW(c8_keep, 0, 0, 0, uint8_t)
EXMY_KERNEL_ROW(c8_flush, 1, 0, 0, uint8_t)
EXMY_KERNEL_ROW(c8_e8m0, 0, 1, 0, uint8_t)
EXMY_KERNEL_ROW(c16_keep, 0, 0, 0, uint16_t)
EXMY_KERNEL_ROW(c16_flush, 1, 0, 0, uint16_t)
EXMY_KERNEL_ROW(c32_keep, 0, 0, 0, uint32_t)
EXMY_KERNEL_ROW(c32_flush, 1, 0, 0, uint32_t)

static uint32_t f32_bits(float x) {
  f32u v = {.f = x};
  return v.u;
}

static int is_std_e8m0(const exmy_format *f) {
  return f->specials == EXMY_SPECIALS_E8M0 && f->exp_bits == 8 &&
         f->man_bits == 0 && f->bias == 127;
}

/* The loop invariants; returns -1 for the exotic formats the fast loops do not
 * cover (bias > 127, non-standard E8M0), which take the reference loop. */
static int kparams_make(const exmy_format *f, const exmy_rounding_opts *o,
                        exmy_kparams *p) {
  const int e8m0 = f->specials == EXMY_SPECIALS_E8M0;
  if (e8m0 ? !is_std_e8m0(f) : f->emin + 127 < 1) return -1;
  memset(p, 0, sizeof *p);
  p->man_bits = (uint32_t)f->man_bits;
  p->emin_b = (uint32_t)(f->emin + 127);
  p->max_code = f->max_code;
  p->sign_mask = f->sign_mask;
  p->sign_shift = (uint32_t)(32 - f->bits);
  p->fnuz = f->specials == EXMY_SPECIALS_FNUZ;
  p->sr_bits = o->sr_bits == 0 ? 32u : (uint32_t)o->sr_bits;
  p->sr_mask = p->sr_bits == 32 ? 0xFFFFFFFFu : (1u << p->sr_bits) - 1u;
  p->bias_adj = (uint32_t)(127 - f->bias) << 23;
  p->sub_linear = f->emin == -126;
  p->sub_quantum = exmy_bits_f32((uint32_t)(f->emin - f->man_bits + 127) << 23);
  if (f->emin - f->man_bits + 127 < 1) /* 2^(emin-M) is a float32 subnormal */
    p->sub_quantum = exmy_bits_f32(1u << (f->emin - f->man_bits + 149));
  if (p->sub_linear) p->sub_quantum = 1.0f;
  for (int s = 0; s < 2; s++) {
    uint32_t sign = s ? f->sign_mask : 0u;
    uint32_t ovf = exmy_overflow_code(f, o->mode, o->saturate, sign);
    uint32_t inf = o->saturate ? (sign | f->max_code)
                               : exmy_overflow_code(f, EXMY_RNE, 0, sign);
    uint32_t nan = exmy_nan_input_code(f, sign);
    *(s ? &p->c_ovf_neg : &p->c_ovf_pos) = ovf;
    *(s ? &p->c_inf_neg : &p->c_inf_pos) = inf;
    *(s ? &p->c_nan_neg : &p->c_nan_pos) = nan;
    *(s ? &p->q_ovf_neg : &p->q_ovf_pos) = f32_bits(exmy_core_decode(f, ovf));
    *(s ? &p->q_inf_neg : &p->q_inf_pos) = f32_bits(exmy_core_decode(f, inf));
    *(s ? &p->q_nan_neg : &p->q_nan_pos) = f32_bits(exmy_core_decode(f, nan));
  }
  /* the fast kernel's invariants */
  const int M = f->man_bits, d = 23 - M, R = (int)p->sr_bits;
  p->fast = !e8m0 && M >= f->emin;
  p->drop = (uint32_t)d;
  p->drop_mask = (1u << d) - 1u;
  p->half = d ? 1u << (d - 1) : 0u;
  p->half_m1 = d ? p->half - 1u : 0u;
  p->rne_odd = d ? 1u : 0u;
  p->unit = 1u << d;
  p->emin_bits = p->emin_b << 23;
  p->max_bits = f32_bits(exmy_core_decode(f, f->max_code));
  p->code_base = (p->emin_b - 1u) << M;
  const int up_exp = M - f->emin; /* |x| · 2^up_exp counts quanta; 0..149 */
  p->sub_scale_a = ldexpf(1.0f, up_exp / 2);
  p->sub_scale_b = ldexpf(1.0f, up_exp - up_exp / 2);
  p->sub_sr_scale = ldexpf(1.0f, R);
  if (d >= R) {
    p->sr_keep = ~((1u << (d - R)) - 1u);
    p->sr_rshift = (uint32_t)(32 - R);
    p->sr_lshift = (uint32_t)(d - R);
    p->sr_add_mask = 0xFFFFFFFFu;
  } else {
    p->sr_keep = 0xFFFFFFFFu;
    p->sr_rshift = d ? (uint32_t)(32 - d) : 0u;
    p->sr_lshift = 0;
    p->sr_add_mask = d ? 0xFFFFFFFFu : 0u;
  }
  p->c_e8m0_bad = o->saturate ? 0u : f->nan_code;
  p->q_e8m0_bad = f32_bits(exmy_core_decode(f, p->c_e8m0_bad));
  return 0;
}

/* Input plus output bytes of a call from which its output goes out by
 * non-temporal stores (cpu/bulk_dispatch.h); 0: not asked yet. */
static size_t stream_min = 0;

size_t exmy_bulk_stream_min_bytes(void) {
  size_t v = __atomic_load_n(&stream_min, __ATOMIC_RELAXED);
  if (v == 0) {
    long llc = sysconf(_SC_LEVEL3_CACHE_SIZE);
    if (llc <= 0) llc = sysconf(_SC_LEVEL2_CACHE_SIZE);
    v = llc > 0 ? (size_t)llc / 2 : EXMY_STREAM_MIN_BYTES_UNKNOWN;
    if (v < EXMY_STREAM_MIN_BYTES_FLOOR) v = EXMY_STREAM_MIN_BYTES_FLOOR;
    __atomic_store_n(&stream_min, v, __ATOMIC_RELAXED);
  }
  return v;
}

void exmy_bulk_set_stream_min_bytes(size_t bytes) {
  __atomic_store_n(&stream_min, bytes, __ATOMIC_RELAXED);
}

/* The AVX-512 kernel for these options (and p->stream set for n elements),
 * or NULL where the C loops run: no AVX-512, or, without flush, a format
 * whose subnormal range is wider than its mantissa (p->fast = 0). */
static exmy_kernel_fn avx512_kernel(const exmy_format *f, const exmy_rounding_opts *o,
                                    exmy_kparams *p, size_t n, size_t out_bytes) {
#if EXMY_HAVE_AVX512_KERNELS
  /* E8M0 has no subnormals: flush changes nothing */
  const exmy_k512_kind kind = f->specials == EXMY_SPECIALS_E8M0 ? EXMY_K512_E8M0
                              : o->flush_subnormals             ? EXMY_K512_FLUSH
                              : p->sub_linear                   ? EXMY_K512_LINEAR
                                                                : EXMY_K512_SUB;
  if ((kind != EXMY_K512_SUB || p->fast) && cpu_has_avx512()) {
    const size_t io = sizeof(float) + (out_bytes ? out_bytes : sizeof(float));
    p->stream = n >= exmy_bulk_stream_min_bytes() / io;
    return exmy_avx512_kernel(o->mode, (int)out_bytes, kind);
  }
#endif
  (void)f, (void)o, (void)p, (void)n, (void)out_bytes;
  return NULL;
}

const char *exmy_bulk_kernel_path(const exmy_format *f, const exmy_rounding_opts *o) {
  exmy_kparams p;
  if (kparams_make(f, o, &p)) return "reference";
  return avx512_kernel(f, o, &p, 0, 0) ? "avx512" : "c";
}

/* Runs a loop over n elements, one contiguous slice per thread above the
 * threshold; slices start on multiples of 64 elements (whole cache lines). */
static void run_parallel(exmy_kernel_fn fn, const exmy_kparams *p,
                         const float *x, void *out, size_t out_bytes, size_t n,
                         uint64_t seed, uint64_t offset) {
  if (n < EXMY_OMP_THRESHOLD || omp_get_max_threads() == 1 || omp_in_parallel()) {
    fn(p, x, out, n, seed, offset);
    return;
  }
#pragma omp parallel
  {
    const size_t T = (size_t)omp_get_num_threads(), t = (size_t)omp_get_thread_num();
    size_t lo = (n / T * t) & ~(size_t)63;
    size_t hi = t + 1 == T ? n : (n / T * (t + 1)) & ~(size_t)63;
    fn(p, x + lo, (char *)out + lo * out_bytes, hi - lo, seed, offset + lo);
  }
}

/* The reference loop, for the formats kparams_make declines. */
static void reference_loop(const exmy_format *f, const exmy_rounding_opts *o,
                           const float *x, void *out, size_t n, int quant) {
  const size_t bytes = exmy_code_bytes(f);
  const int bits = o->sr_bits == 0 ? 32 : o->sr_bits;
#pragma omp parallel for schedule(static) if (n >= EXMY_OMP_THRESHOLD)
  for (size_t i = 0; i < n; i++) {
    uint32_t rnd = o->mode == EXMY_SR ? exmy_sr_word(o->seed, o->offset + i) : 0;
    uint32_t c = exmy_core_encode(f, o->mode, o->saturate, o->flush_subnormals,
                                  bits, x[i], rnd);
    if (quant) ((float *)out)[i] = exmy_core_decode(f, c);
    else if (bytes == 1) ((uint8_t *)out)[i] = (uint8_t)c;
    else if (bytes == 2) ((uint16_t *)out)[i] = (uint16_t)c;
    else ((uint32_t *)out)[i] = c;
  }
}

/* quantize (bytes 0: float32 values out) or encode (codes of `bytes`). */
static void round_array(const exmy_format *f, const exmy_rounding_opts *o,
                        const float *x, void *out, size_t n, size_t bytes) {
  exmy_kparams p;
  if (kparams_make(f, o, &p)) {
    reference_loop(f, o, x, out, n, bytes == 0);
    return;
  }
  const int flush = o->flush_subnormals;
  exmy_kernel_fn fn = avx512_kernel(f, o, &p, n, bytes);
  if (!fn) {
    const exmy_kernel_fn *row =
        f->specials == EXMY_SPECIALS_E8M0 ? (bytes == 0 ? row_q_e8m0 : row_c8_e8m0)
        : bytes == 0                      ? (flush ? row_q_flush : row_q_keep)
        : bytes == 1                      ? (flush ? row_c8_flush : row_c8_keep)
        : bytes == 2                      ? (flush ? row_c16_flush : row_c16_keep)
                                          : (flush ? row_c32_flush : row_c32_keep);
    fn = row[o->mode];
  }
  run_parallel(fn, &p, x, out, bytes == 0 ? sizeof(float) : bytes, n, o->seed, o->offset);
}

void exmy_quantize_f32(const exmy_format *f, const exmy_rounding_opts *o,
                       const float *x, float *y, size_t n) {
  round_array(f, o, x, y, n, 0);
}

void exmy_encode_f32(const exmy_format *f, const exmy_rounding_opts *o,
                     const float *x, void *codes, size_t n) {
  round_array(f, o, x, codes, n, exmy_code_bytes(f));
}

/* ------------------------------------------------------------------ decode */

/* Codes of <= 16 bits: a table of every code's value, then one load each. */
#define EXMY_DECODE_LUT(NAME, T)                                              \
  EXMY_CLONES static void NAME(const float *lut, const T *c, float *y,       \
                               size_t n) {                                   \
    for (size_t i = 0; i < n; i++) y[i] = lut[c[i]];                         \
  }
EXMY_DECODE_LUT(decode_lut8, uint8_t)
EXMY_DECODE_LUT(decode_lut16, uint16_t)

/* Wider codes (and 16-bit ones when the array is too small to amortise a
 * 65536-entry table): the arithmetic of exmy_k_decode_finite plus specials. */
EXMY_CLONES static void decode_arith(const exmy_format *f, const exmy_kparams *pp,
                                     const void *codes, size_t bytes, float *y,
                                     size_t n) {
  const exmy_kparams p = *pp;
  const uint32_t width = f->bits >= 32 ? 0xFFFFFFFFu : (1u << f->bits) - 1u;
  const uint32_t mag_mask = f->sign_mask - 1u;
  /* a magnitude >= special_from is inf/NaN (IEEE: inf_code; FN: nan_code) */
  const uint32_t special_from = f->specials == EXMY_SPECIALS_IEEE ? f->inf_code
                                : f->specials == EXMY_SPECIALS_FN ? f->nan_code
                                                                  : 0xFFFFFFFFu;
  const uint32_t inf_code = f->inf_code;
  const uint32_t fnuz_nan = f->specials == EXMY_SPECIALS_FNUZ ? f->nan_code : 0xFFFFFFFFu;
  for (size_t i = 0; i < n; i++) {
    uint32_t c = bytes == 2 ? ((const uint16_t *)codes)[i] : ((const uint32_t *)codes)[i];
    c &= width;
    uint32_t mag = c & mag_mask, s = (c & p.sign_mask) << p.sign_shift;
    uint32_t r = exmy_k_decode_finite(&p, c, 0);
    uint32_t special = s | (mag == inf_code ? 0x7F800000u : 0x7FC00000u);
    r = mag >= special_from ? special : r;
    r = c == fnuz_nan ? 0x7FC00000u : r;
    f32u v = {.u = r};
    y[i] = v.f;
  }
}

void exmy_decode_f32(const exmy_format *f, const void *codes, float *y,
                     size_t n) {
  const size_t bytes = exmy_code_bytes(f);
  exmy_rounding_opts rne = {0};
  exmy_kparams p;
  const int fast = kparams_make(f, &rne, &p) == 0;
  if (bytes == 1 || (bytes == 2 && (n >= (1u << 18) || !fast))) {
    const size_t size = (size_t)1 << (8 * bytes);
    float *lut = bytes == 1 ? (float[256]){0} : malloc(size * sizeof(float));
    if (!lut) { /* no memory for the table: the reference, slowly */
      for (size_t i = 0; i < n; i++)
        y[i] = exmy_core_decode(f, ((const uint16_t *)codes)[i]);
      return;
    }
    for (size_t c = 0; c < size; c++) lut[c] = exmy_core_decode(f, (uint32_t)c);
    const int par = n >= EXMY_OMP_THRESHOLD;
#pragma omp parallel for schedule(static) if (par)
    for (size_t b = 0; b < (n + 4095) / 4096; b++) {
      size_t lo = b * 4096, len = n - lo < 4096 ? n - lo : 4096;
      if (bytes == 1) decode_lut8(lut, (const uint8_t *)codes + lo, y + lo, len);
      else decode_lut16(lut, (const uint16_t *)codes + lo, y + lo, len);
    }
    if (bytes == 2) free(lut);
    return;
  }
  if (!fast) {
#pragma omp parallel for schedule(static) if (n >= EXMY_OMP_THRESHOLD)
    for (size_t i = 0; i < n; i++) y[i] = exmy_core_decode(f, ((const uint32_t *)codes)[i]);
    return;
  }
#pragma omp parallel for schedule(static) if (n >= EXMY_OMP_THRESHOLD)
  for (size_t b = 0; b < (n + 4095) / 4096; b++) {
    size_t lo = b * 4096, len = n - lo < 4096 ? n - lo : 4096;
    decode_arith(f, &p, (const char *)codes + lo * bytes, bytes, y + lo, len);
  }
}
