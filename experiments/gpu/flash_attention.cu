/*
 * Fused causal attention, FlashAttention-2 style (see flash_attention.h for
 * the contract).  Tensor-core products are mma.sync.m16n8k16 (bf16 in, fp32
 * accumulate) with operands fetched from shared memory by ldmatrix.
 *
 * Fragment layouts of m16n8k16 (lane = 4 * g + t):
 *   A (16x16, row-major)  a0:(g, 2t..2t+1) a1:(g+8, 2t..) a2:(g, 2t+8..) a3:(g+8, 2t+8..)
 *   B (16x8, "col")       b0:(k 2t..2t+1, n g)  b1:(k 2t+8.., n g)
 *   C (16x8)              c0,c1:(g, 2t..2t+1)   c2,c3:(g+8, 2t..2t+1)
 * so the accumulators of two adjacent 8-column tiles of S are, element for
 * element, the A fragment of the 16-wide k step of P: P never leaves the
 * registers.
 *
 * Forward: one CTA per (batch, head, block of query rows); each warp owns
 * MT x 16 rows and walks the key blocks from 0 to the diagonal with an online
 * softmax in the log2 domain.  As in FlashAttention-2 the row sum l is the
 * sum of the fp32 P; P is rounded only as an operand of P V.
 *
 * Backward (deterministic, no atomics), three kernels:
 *   prep: D = rowsum(dO * O) and lse * log2(e), both padded to Tp rows
 *         (D = 0, lse = +inf past T, so padded query rows have P = 0);
 *   dkdv: one CTA per (batch, kv head, 64 keys); loops over every head of the
 *         group and every query block at or after the diagonal, holding dK
 *         and dV in registers; computes the transposed products
 *         S^T = K Q^T, dV += P^T dO, dP^T = V dO^T, dK += dS^T Q;
 *   dq:   one CTA per (batch, head, 64 queries); recomputes S and dP and
 *         accumulates dQ += dS K over the key blocks.
 * dS = P (dP - D) scale, with P the fp32 probabilities, rounded like P.
 *
 * Shared-memory tiles have rows of hs + 8 bf16 (16 bytes of padding), which
 * makes the 8 row addresses of every ldmatrix fall in distinct banks.
 * Rows past T are zero-filled on load and never stored, so any T >= 1 works.
 */
#include "experiments/gpu/flash_attention.h"

#include <atomic>

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>

#include "cuda/kernel_common.cuh" /* fold_finite_amax, block_amax_fold */
#include "experiments/gpu/wgmma.cuh"
#include "lib/philox.h"
#include "lib/round_core.h"

namespace {

typedef __nv_bfloat16 bf16;

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;
constexpr int kTpad = 128; /* lse2 / D rows are padded to a multiple of this */

/* ------------------------------------------------------------ primitives */

__device__ __forceinline__ uint32_t smem_addr(const void *p) {
  return (uint32_t)__cvta_generic_to_shared(p);
}

/* 16-byte copy global -> shared; pred false writes zeros (src-size 0). */
__device__ __forceinline__ void cp_async16(uint32_t dst, const void *src, bool pred) {
  const int n = pred ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(n));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ float ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

/* ------------------------------------------------- rounding P and dS */

/* The kernels' rounding of P and dS: EXMY_RNE, EXMY_RZ, EXMY_SR, or kBf16,
 * the plain conversion to bf16 (unquantized attention, or rne to 7 bits,
 * which is the same). */
constexpr int kBf16 = -1;

/* shift = 23 - mantissa bits; sr: sr_bits (1..32), the stream `seed` and the
 * index of element (0, 0, 0, 0), `offset`; rz_mask2: the bits a bf16 of
 * E8M(23 - shift) keeps, in both halves of a word (pack_bf16x2). */
struct Rounding {
  int shift, sr_bits;
  uint64_t seed, offset;
  uint32_t rz_mask2;
};

/* Round to nearest even keeping 23 - shift mantissa bits (bf16's exponent
 * range, subnormals included).  The result is a bf16 value for shift >= 16,
 * so the conversion that follows is exact. */
__host__ __device__ __forceinline__ float round_mantissa(float x, int shift) {
  uint32_t u = exmy_f32_bits(x);
  u += ((1u << (shift - 1)) - 1u) + ((u >> shift) & 1u);
  u &= ~((1u << shift) - 1u);
  return exmy_bits_f32(u);
}

/* x rounded by MODE (rz or sr, random word rnd) into E8M(23 - shift), the
 * value exmy_core_decode(exmy_core_encode(x)) of lib/round_core.h gives.  In
 * such a format (bias 127, IEEE specials) the code of every value, normal,
 * subnormal or inf, is its float32 bit pattern shifted right by `shift`, so
 * the core's truncated code is (|x| bits) >> shift with the dropped bits as
 * its remainder, even for float32 subnormals (the core normalises them, which
 * scales code and remainder alike), and adding one to a code is adding 2^shift
 * to the bits: the core's exmy_round_up() decides (sr: restated in 32 bits,
 * the same function of rem and rnd), a carry flows into the
 * exponent and past the largest value into inf, as the core's overflow does
 * without saturation.  NaN gives the core's NaN.  M >= 1 (16 <= shift <=
 * 22).  flash_attention_round() exposes this for the tests that hold it to
 * the core. */
template <int MODE>
__host__ __device__ __forceinline__ float round_e8(float x, int shift, uint32_t rnd,
                                                   int sr_bits) {
  const uint32_t u = exmy_f32_bits(x), a = u & 0x7FFFFFFFu;
  const uint32_t rem = a & ((1u << shift) - 1u);
  uint32_t r = u - rem;
  if constexpr (MODE == EXMY_SR) {
    /* exmy_round_up(EXMY_SR) in 32 bits: the core steps up when the top
     * sr_bits bits of the dropped part (as a fraction of the gap, rem << (32
     * - shift)) plus the top sr_bits bits of rnd reach 2^sr_bits, that is
     * when the two, kept in place in 32 bits, carry out of 32 bits */
    const uint32_t keep = ~0u << (32 - sr_bits), t = (rem << (32 - shift)) & keep;
    r += (t + (rnd & keep) < t ? 1u : 0u) << shift;
  }
  if (a > 0x7F800000u) r = (u & 0x80000000u) | 0x7FC00000u;
  return exmy_bits_f32(r);
}

template <int kMode>
__host__ __device__ __forceinline__ float round_value(float x, const Rounding &r, uint32_t rnd) {
  if constexpr (kMode == EXMY_RNE)
    return round_mantissa(x, r.shift);
  else if constexpr (kMode == EXMY_RZ || kMode == EXMY_SR)
    return round_e8<kMode>(x, r.shift, rnd, r.sr_bits);
  else
    return x;
}

/* Two floats -> bf16x2 (lo in the low half), rounded per kMode (random
 * words rlo, rhi for sr), then converted to nearest even (exact after a
 * rounding to <= 7 bits). */
template <int kMode>
__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi, const Rounding &rd,
                                                uint32_t rlo, uint32_t rhi) {
  if constexpr (kMode == EXMY_RZ) {
    /* Truncation composes: the conversion to bf16 toward zero (subnormals
     * kept) drops the low 16 bits, the mask the other shift - 16, so each
     * half holds round_e8<EXMY_RZ>'s value; one conversion and one mask a
     * pair.  A NaN converts to the canonical bf16 NaN, which the mask leaves
     * a NaN (M >= 1 keeps its top mantissa bit) though not with the core's
     * sign; P and dS go only into products, which make NaN of a NaN alike. */
    uint32_t r;
    asm("cvt.rz.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    return r & rd.rz_mask2;
  }
  lo = round_value<kMode>(lo, rd, rlo);
  hi = round_value<kMode>(hi, rd, rhi);
  uint32_t r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

/* Accumulators of 8-column tiles 2kk and 2kk+1 (sr words w0, w1 of their
 * elements) -> A fragment of k step kk. */
template <int kMode>
__device__ __forceinline__ void acc_to_a(uint32_t (&a)[4], const float (&c0)[4],
                                         const float (&c1)[4], const Rounding &rd,
                                         const uint32_t (&w0)[4], const uint32_t (&w1)[4]) {
  a[0] = pack_bf16x2<kMode>(c0[0], c0[1], rd, w0[0], w0[1]);
  a[1] = pack_bf16x2<kMode>(c0[2], c0[3], rd, w0[2], w0[3]);
  a[2] = pack_bf16x2<kMode>(c1[0], c1[1], rd, w1[0], w1[1]);
  a[3] = pack_bf16x2<kMode>(c1[2], c1[3], rd, w1[2], w1[3]);
}

/* ------------------------------------------- the sr words of a lane
 * Element (i, j) of a head draws stream index head + i T + j, head = offset +
 * (b NH + h) T^2 (flash_attention.h).  With T and offset multiples of 4 every
 * row starts a Philox block, so the 4 words of a block serve 4 consecutive
 * keys of one query row.  In an 8-column accumulator tile those sit in 2
 * lanes (query rows: forward, dQ) or in 4 (key rows: dK, dV); each lane
 * computes one block and the lanes trade words with shuffles, so a lane pays
 * one Philox call per 4 elements.  The functions below are the lane
 * arithmetic, host and device, so that flash_attention_sr_layout_mismatches()
 * can replay all 32 lanes against exmy_sr_word(). */

/* Query-row tiles (element e at row r0 + g + 8 (e >> 1), column c0 + 2 t4 +
 * (e & 1)): lanes t4 = 2p, 2p + 1 hold keys c0 + 4p .. c0 + 4p + 3; the even
 * lane computes the block of row g, the odd lane that of row g + 8, and each
 * sends its partner (lane ^ 1) the two words the partner holds. */
__host__ __device__ __forceinline__ uint64_t rm_block(uint64_t head, int T, int r0, int c0,
                                                      int lane) {
  const int g = lane >> 2, t4 = lane & 3;
  return (head + (uint64_t)(r0 + g + 8 * (t4 & 1)) * T + c0 + 4 * (t4 >> 1)) >> 2;
}
__host__ __device__ __forceinline__ uint64_t tr_block(uint64_t head, int T, int k0, int q0,
                                                      int lane) {
  const int g = lane >> 2, t4 = lane & 3, u = g & 3;
  return (head + (uint64_t)(q0 + 2 * t4 + (u & 1)) * T + k0 + 4 * (g >> 2) + 8 * (u >> 1)) >> 2;
}

/* One exchange of a transpose between this lane and its partner, `bit`
 * telling which of the two it is.  x holds two pairs (x[p], x[p + D]), p = 0
 * and p = 3 - D; of each pair the lane keeps element `bit` and sends the
 * other (trade_send); trade() then puts in each pair the word of the lane
 * with bit 0 first and that of the lane with bit 1 second. */
template <int D>
__host__ __device__ __forceinline__ void trade_send(uint32_t (&s)[2], const uint32_t (&x)[4],
                                                    bool bit) {
  s[0] = x[bit ? 0 : D];
  s[1] = x[(3 - D) + (bit ? 0 : D)];
}
template <int D>
__host__ __device__ __forceinline__ void trade(uint32_t (&y)[4], const uint32_t (&x)[4],
                                               const uint32_t (&v)[2], bool bit) {
#pragma unroll
  for (int k = 0; k < 2; k++) {
    const int p = k ? 3 - D : 0;
    const uint32_t kept = x[p + (bit ? D : 0)];
    y[p] = bit ? v[k] : kept;
    y[p + D] = bit ? kept : v[k];
  }
}
/* The lanes' bits: query rows trade words w[e], w[e + 2] with lane ^ 1 (the
 * other half of their keys); key rows first trade w[e], w[e + 1] with lane ^
 * 4, which leaves lane u with words u & 1 and (u & 1) + 2 of blocks u & 2
 * and (u & 2) + 1, then those with lane ^ 8. */
__host__ __device__ __forceinline__ bool rows_bit(int lane) { return lane & 1; }
__host__ __device__ __forceinline__ bool keys_bit1(int lane) { return (lane >> 2) & 1; }
__host__ __device__ __forceinline__ bool keys_bit2(int lane) { return (lane >> 3) & 1; }

__device__ __forceinline__ void exchange(uint32_t (&v)[2], const uint32_t (&s)[2], int mask) {
  v[0] = __shfl_xor_sync(0xffffffffu, s[0], mask);
  v[1] = __shfl_xor_sync(0xffffffffu, s[1], mask);
}

/* The sr words of this lane's 4 elements of the query-row tile at (r0, c0),
 * or of the key-row tile at (k0, q0); every lane of the warp must call. */
__device__ __forceinline__ void sr_words_rows(uint32_t (&r)[4], uint64_t seed, uint64_t head,
                                              int T, int r0, int c0, int lane) {
  uint32_t w[4], s[2], v[2];
  exmy_sr_block(seed, rm_block(head, T, r0, c0, lane), w);
  trade_send<2>(s, w, rows_bit(lane));
  exchange(v, s, 1);
  trade<2>(r, w, v, rows_bit(lane));
}
__device__ __forceinline__ void sr_words_keys(uint32_t (&r)[4], uint64_t seed, uint64_t head,
                                              int T, int k0, int q0, int lane) {
  uint32_t w[4], a[4], s[2], v[2];
  exmy_sr_block(seed, tr_block(head, T, k0, q0, lane), w);
  trade_send<1>(s, w, keys_bit1(lane));
  exchange(v, s, 4);
  trade<1>(a, w, v, keys_bit1(lane));
  trade_send<2>(s, a, keys_bit2(lane));
  exchange(v, s, 8);
  trade<2>(r, a, v, keys_bit2(lane));
}

/* The sr words of the accumulator tiles of a warp, for mma_pb: words(mt, n,
 * w) fills w for tile n of row tile mt.  Query rows from r0 (row tile mt at
 * r0 + 16 mt), keys from c0; or key rows from k0, queries from q0. */
struct QueryRowWords {
  uint64_t seed, head;
  int T, r0, c0, lane;
  __device__ __forceinline__ void operator()(int mt, int n, uint32_t (&w)[4]) const {
    sr_words_rows(w, seed, head, T, r0 + 16 * mt, c0 + 8 * n, lane);
  }
};
struct KeyRowWords {
  uint64_t seed, head;
  int T, k0, q0, lane;
  __device__ __forceinline__ void operator()(int mt, int n, uint32_t (&w)[4]) const {
    sr_words_keys(w, seed, head, T, k0 + 16 * mt, q0 + 8 * n, lane);
  }
};

/* The stream index of element (b, h, 0, 0). */
__device__ __forceinline__ uint64_t head_index(const Rounding &rd, int b, int NH, int h, int T) {
  return rd.offset + ((uint64_t)b * NH + h) * T * T;
}

/* ldmatrix addresses inside a tile with row stride LD (elements).
 * A operand, 16x16 at (r0, c0), row-major tile: */
template <int LD>
__device__ __forceinline__ uint32_t a_addr(const bf16 *s, int r0, int c0, int lane) {
  return smem_addr(s + (r0 + (lane & 15)) * LD + c0 + (lane >> 4) * 8);
}
/* B operands of two 8-wide n tiles (n0, n0+8) over k step k0, from a tile
 * stored n-major (row = n, column = k), e.g. K for S = Q K^T:
 * r[0], r[1] = b0, b1 of tile n0; r[2], r[3] = those of tile n0 + 8. */
template <int LD>
__device__ __forceinline__ uint32_t b_addr(const bf16 *s, int n0, int k0, int lane) {
  return smem_addr(s + (n0 + (lane & 7) + ((lane >> 4) << 3)) * LD + k0 + ((lane >> 3) & 1) * 8);
}
/* The same from a tile stored k-major (row = k, column = n), e.g. V for
 * P V; used with ldmatrix .trans. */
template <int LD>
__device__ __forceinline__ uint32_t bt_addr(const bf16 *s, int k0, int n0, int lane) {
  return smem_addr(s + (k0 + (lane & 7) + ((lane >> 3) & 1) * 8) * LD + n0 + (lane >> 4) * 8);
}

/* ------------------------------------------------ warp-tile products
 * A warp multiplies 16-row tiles of A (as A fragments) by B tiles it reads
 * from shared memory with ldmatrix; C is held as 8-column accumulator tiles
 * c[n][0..3] (layout at the top of this file). */

template <int N>
__device__ __forceinline__ void zero(float (&c)[N][4]) {
#pragma unroll
  for (int n = 0; n < N; n++)
#pragma unroll
    for (int e = 0; e < 4; e++) c[n][e] = 0.f;
}

/* c[mt] += a[mt] B over one 16 x 16 block of B (k0..k0+15, columns 16 np
 * .. 16 np + 15, i.e. the accumulator tiles 2 np and 2 np + 1) for MT row
 * tiles.  B is n-major in sB (row = n, column = k: K for Q K^T) or, with
 * kKMajor, k-major (row = k, column = n: V for P V, read with ldmatrix
 * .trans).  The B fragments are loaded once for all MT row tiles. */
template <int MT, bool kKMajor, int LD, int NT>
__device__ __forceinline__ void mma_16x16(float (*c)[NT][4], const uint32_t (*a)[4],
                                          const bf16 *sB, int k0, int np, int lane) {
  uint32_t b[4];
  if constexpr (kKMajor)
    ldsm_x4_t(b, bt_addr<LD>(sB, k0, np * 16, lane));
  else
    ldsm_x4(b, b_addr<LD>(sB, np * 16, k0, lane));
#pragma unroll
  for (int mt = 0; mt < MT; mt++) {
    mma_bf16(c[mt][2 * np], a[mt], b[0], b[1]);
    mma_bf16(c[mt][2 * np + 1], a[mt], b[2], b[3]);
  }
}

/* The same over every column of B: one 16-wide k step of c[mt] += a[mt] B. */
template <int MT, bool kKMajor, int LD, int NT>
__device__ __forceinline__ void mma_k_step(float (*c)[NT][4], const uint32_t (*a)[4],
                                           const bf16 *sB, int k0, int lane) {
#pragma unroll
  for (int np = 0; np < NT / 2; np++) mma_16x16<MT, kKMajor, LD>(c, a, sB, k0, np, lane);
}

/* The A fragments of the KS k steps of the 16 rows at row r0 of sA. */
template <int LD, int KS>
__device__ __forceinline__ void load_a_frags(uint32_t (&f)[KS][4], const bf16 *sA, int r0,
                                             int lane) {
#pragma unroll
  for (int kk = 0; kk < KS; kk++) ldsm_x4(f[kk], a_addr<LD>(sA, r0, kk * 16, lane));
}

/* The A fragment of k step kk of the 16 rows at r0 of sA: from the fragments
 * f kept in registers when kRegs (see load_a_frags), else by ldmatrix. */
template <bool kRegs, int LD, int KF>
__device__ __forceinline__ void a_frag(uint32_t (&a)[4], const uint32_t (&f)[KF][4],
                                       const bf16 *sA, int r0, int kk, int lane) {
  if constexpr (kRegs) {
#pragma unroll
    for (int e = 0; e < 4; e++) a[e] = f[kk][e];
  } else {
    ldsm_x4(a, a_addr<LD>(sA, r0, kk * 16, lane));
  }
}

/* c = A B^T over the head dimension (KS k steps): A the 16 rows at r0 of sA
 * (see a_frag), B the n-major tile sB of NT * 8 rows.  S^T = K Q^T and
 * dP^T = V dO^T. */
template <int KS, bool kRegs, int LD, int NT, int KF>
__device__ __forceinline__ void mma_abt(float (&c)[NT][4], const uint32_t (&f)[KF][4],
                                        const bf16 *sA, int r0, const bf16 *sB, int lane) {
  zero(c);
#pragma unroll
  for (int kk = 0; kk < KS; kk++) {
    uint32_t a[4];
    a_frag<kRegs, LD>(a, f, sA, r0, kk, lane);
    mma_k_step<1, false, LD>(&c, &a, sB, kk * 16, lane);
  }
}

/* c[mt] += P[mt] B with P a 16 x (8 * NP) accumulator tile per row tile,
 * rounded per kMode (sr: with the words of `words`, see QueryRowWords) and
 * packed k step by k step into A fragments, and B the k-major tile sB:
 * O += P V, dV += P^T dO, dK += dS^T Q, dQ += dS K. */
/* The A fragment of k step kk of P (row tile mt, accumulator tiles 2 kk and
 * 2 kk + 1), rounded per kMode (sr: the words of `words`). */
template <int kMode, int NP, class Words>
__device__ __forceinline__ void p_frag(uint32_t (&a)[4], const float (&p)[NP][4], int mt, int kk,
                                       const Rounding &rd, const Words &words) {
  uint32_t w0[4] = {0, 0, 0, 0}, w1[4] = {0, 0, 0, 0};
  if constexpr (kMode == EXMY_SR) {
    words(mt, 2 * kk, w0);
    words(mt, 2 * kk + 1, w1);
  }
  acc_to_a<kMode>(a, p[2 * kk], p[2 * kk + 1], rd, w0, w1);
}

template <int kMode, int MT, int LD, int NP, int NT, class Words>
__device__ __forceinline__ void mma_pb(float (*c)[NT][4], const float (*p)[NP][4],
                                       const bf16 *sB, const Rounding &rd, const Words &words,
                                       int lane) {
#pragma unroll
  for (int kk = 0; kk < NP / 2; kk++) {
    uint32_t a[MT][4];
#pragma unroll
    for (int mt = 0; mt < MT; mt++) p_frag<kMode>(a[mt], p[mt], mt, kk, rd, words);
    mma_k_step<MT, true, LD>(c, a, sB, kk * 16, lane);
  }
}

/* ------------------------------------------------ warpgroup products
 * The same products by wgmma (wgmma.cuh) for hs 64 and 64 x 64 blocks: a
 * warpgroup's 4 warps hold 16 rows each, in the layouts above (MT = 1), and
 * the operands are 64-row tiles in the 128-byte swizzle (load_tile with
 * kWg).  Each call issues its k steps in order, as mma_k_step does, and
 * leaves them pending (wgmma_commit, wgmma_wait, wgmma_settle follow). */

template <int NB>
__device__ __forceinline__ float (&flat(float (&c)[NB][4]))[NB * 4] {
  return reinterpret_cast<float(&)[NB * 4]>(c);
}

/* c = A B^T over hs 64: A the 64 rows of the tile at shared address a, B
 * the 64 rows of the tile at b (S = Q K^T, dP = dO V^T, S^T = K Q^T, dP^T =
 * V dO^T). */
__device__ __forceinline__ void wg_abt(float (&c)[8][4], uint32_t a, uint32_t b) {
  const uint64_t da = wgmma_desc_sw128(a, 16, 1024), db = wgmma_desc_sw128(b, 16, 1024);
#pragma unroll
  for (int kk = 0; kk < 4; kk++)
    wgmma_ss_m64n64k16<0>(flat(c), wgmma_desc_add(da, kk * 32), wgmma_desc_add(db, kk * 32), kk);
}

/* c += P B, P the 64 x 64 accumulator tiles as A fragments (4 k steps,
 * p_frag), B the tile at b read k-major (O += P V, dV += P^T dO, dK += dS^T
 * Q, dQ += dS K): 16 rows of 128 bytes a k step; the leading byte offset
 * (to a next panel of 64 columns) is not used at N = 64. */
__device__ __forceinline__ void wg_pb(float (&c)[8][4], const uint32_t (&p)[4][4], uint32_t b) {
  const uint64_t db = wgmma_desc_sw128(b, 8192, 1024);
#pragma unroll
  for (int kk = 0; kk < 4; kk++)
    wgmma_rs_m64n64k16<1>(flat(c), p[kk], wgmma_desc_add(db, kk * 2048));
}

/* P (64 x 64, this warp's 16 rows) as the 4 k steps' A fragments. */
template <int kMode, class Words>
__device__ __forceinline__ void p_frags(uint32_t (&a)[4][4], const float (&p)[8][4],
                                        const Rounding &rd, const Words &words) {
#pragma unroll
  for (int kk = 0; kk < 4; kk++) p_frag<kMode>(a[kk], p, 0, kk, rd, words);
}

/* Waits for the pending products and settles their accumulators. */
template <int... NB>
__device__ __forceinline__ void wg_finish(float (&... c)[NB][4]) {
  wgmma_commit();
  wgmma_wait<0>();
  (wgmma_settle(flat(c)), ...);
}

/* The backward's two score products of a step, issued together and waited
 * for: c1 = A1 B1^T, c2 = A2 B2^T (S and dP, or S^T and dP^T). */
__device__ __forceinline__ void wg_abt_pair(float (&c1)[8][4], uint32_t a1, uint32_t b1,
                                            float (&c2)[8][4], uint32_t a2, uint32_t b2) {
  wgmma_fence();
  wg_abt(c1, a1, b1);
  wg_abt(c2, a2, b2);
  wg_finish(c1, c2);
}

/* This lane's part of row g + 8 hf of a 16 x (8 * NT) accumulator tile,
 * times mul, to float32 memory: dst points at the row's column 2 t4; the
 * values stored folded into *amax (fold_finite_amax) when amax is given. */
template <int NT>
__device__ __forceinline__ void store_row(float *dst, const float (&c)[NT][4], int hf,
                                          float mul, float *amax = nullptr) {
#pragma unroll
  for (int n = 0; n < NT; n++) {
    const float x = c[n][2 * hf] * mul, y = c[n][2 * hf + 1] * mul;
    *(float2 *)(dst + n * 8) = make_float2(x, y);
    if (amax) {
      fold_finite_amax(x, *amax);
      fold_finite_amax(y, *amax);
    }
  }
}

/* The same rounded to bf16 (rne), to bf16 memory; the bf16 values stored
 * folded into *amax when amax is given. */
template <int NT>
__device__ __forceinline__ void store_row_bf16(bf16 *dst, const float (&c)[NT][4], int hf,
                                               float mul, float *amax = nullptr) {
#pragma unroll
  for (int n = 0; n < NT; n++) {
    const __nv_bfloat162 r = __floats2bfloat162_rn(c[n][2 * hf] * mul, c[n][2 * hf + 1] * mul);
    *(__nv_bfloat162 *)(dst + n * 8) = r;
    if (amax) {
      fold_finite_amax(__low2float(r), *amax);
      fold_finite_amax(__high2float(r), *amax);
    }
  }
}

/* Shared-memory row stride (elements) of the tiles: HS + 8 for ldmatrix, HS
 * (128 bytes, hs 64) in wgmma's swizzle; the start of dynamic shared memory,
 * aligned to 1024 bytes for the swizzle (kSmemAlign more bytes asked). */
template <int HS, bool kWg>
__host__ __device__ constexpr int tile_ld() {
  return kWg ? HS : HS + 8;
}
template <bool kWg>
constexpr size_t kSmemAlign = kWg ? 1024 : 0;
template <bool kWg>
__device__ __forceinline__ unsigned char *smem_base(unsigned char *p) {
  return kWg ? (unsigned char *)(((uintptr_t)p + 1023) & ~(uintptr_t)1023) : p;
}

/* ROWS x HS tile of a (T, ld) bf16 matrix starting at row r0 -> shared
 * memory with row stride tile_ld; rows >= T become zeros.  kWg: 16-byte
 * chunk c of row r at chunk c ^ (r & 7), wgmma's 128-byte swizzle. */
template <int ROWS, int HS, int NTHREADS, bool kWg = false>
__device__ __forceinline__ void load_tile(bf16 *s, const bf16 *g, size_t ld, int r0, int T,
                                          int tid) {
  constexpr int CH = HS / 8, LD = tile_ld<HS, kWg>(), RSTEP = NTHREADS / CH;
  static_assert(!kWg || HS == 64, "the swizzled tiles have rows of 128 bytes");
  /* A thread copies chunk c of rows r, r + RSTEP, ...: a loop of fixed trip
   * count, fully unrolled, with the thread's address and swizzle (r & 7 is
   * the same for all its rows when RSTEP % 8 == 0) computed once. */
  static_assert(NTHREADS % CH == 0 && (RSTEP % 8 == 0 || !kWg), "a thread's chunks");
  const int c = tid % CH, r = tid / CH;
  const int cs = (kWg ? c ^ (r & 7) : c) * 8;
  const bf16 *src = g + (size_t)(r0 + r) * ld + c * 8;
  bf16 *dst = s + r * LD + cs;
#pragma unroll
  for (int j = 0; j < (ROWS + RSTEP - 1) / RSTEP; j++) {
    if (ROWS % RSTEP != 0 && r + j * RSTEP >= ROWS) break;
    const bool ok = r0 + r + j * RSTEP < T;
    cp_async16(smem_addr(dst + j * RSTEP * LD), ok ? src + (size_t)j * RSTEP * ld : g, ok);
  }
}

/* N floats (N % 4 == 0, always in bounds: the arrays are padded). */
template <int N>
__device__ __forceinline__ void load_vec(float *s, const float *g, int tid) {
  if (tid < N / 4) cp_async16(smem_addr(s + tid * 4), g + tid * 4, true);
}

/* Which (head, block) the CTA of a one-dimensional grid of nheads x nblocks
 * takes, in the order CTAs start: heads in chunks of kHeadChunk, and inside
 * a chunk the block of rank 0 (the most work) of every head, then rank 1,
 * and so on.  So the CTAs that run together share few heads, whose operands
 * (K and V, or Q and dO, a quarter of a MiB a head at T 1024) are read from
 * L2 after the first CTA of a head brought them in; with the heads as the
 * fastest index, every head was in flight at once and each read went to
 * DRAM again (H100, B 32, T 1024, 12 heads: L2 hit rates of 15-20%, the
 * backward's kernels at 75-85% of DRAM bandwidth).  The longest CTAs of a
 * chunk still start first. */
struct HeadBlock {
  int head, rank;
};
__device__ __forceinline__ HeadBlock head_block(int nblocks) {
  constexpr int kHeadChunk = 16;
  const int nheads = (int)gridDim.x / nblocks;
  const int h0 = (int)blockIdx.x / (kHeadChunk * nblocks) * kHeadChunk;
  const int nh = min(kHeadChunk, nheads - h0), in = (int)blockIdx.x - h0 * nblocks;
  return {h0 + in % nh, in / nh};
}

/* A CTA of the forward or of the dQ kernel: head h of sequence b and the
 * block of BR query rows from q0, the last block first (it sees the most
 * keys; head_block); kvh is the head's key/value head. */
template <int HS, int BR>
struct QueryBlock {
  int b, h, kvh, q0;
  size_t ldq, ldkv; /* row strides of q (and out, dq, dout) and of k, v */
  __device__ __forceinline__ QueryBlock(int T, int NH, int NKV)
      : ldq((size_t)NH * HS), ldkv((size_t)NKV * HS) {
    const int nb = (T + BR - 1) / BR;
    const HeadBlock hb = head_block(nb);
    b = hb.head / NH, h = hb.head % NH, kvh = h / (NH / NKV);
    q0 = (nb - 1 - hb.rank) * BR;
  }
  /* column 0 of this head in a (B, T, NH * HS) or a (B, T, NKV * HS) tensor */
  template <typename E>
  __device__ __forceinline__ E *q_head(E *x, int T) const {
    return x + (size_t)b * T * ldq + (size_t)h * HS;
  }
  template <typename E>
  __device__ __forceinline__ E *kv_head(E *x, int T) const {
    return x + (size_t)b * T * ldkv + (size_t)kvh * HS;
  }
};

/* Waits for all but the latest group of copies; every thread of the CTA
 * may read what the others copied after this (wgmma too where kWg). */
template <bool kWg>
__device__ __forceinline__ void copies_landed() {
  cp_async_wait<1>();
  if constexpr (kWg) wgmma_fence_smem();
  __syncthreads();
}

/* Key/value blocks double-buffered in two stages of BC rows each: starts the
 * copy of block kb + 1 (if any) into the other stage, then waits for block
 * kb, which every thread of the CTA may read after this. */
template <int BC, int HS, int NTHREADS, bool kWg>
__device__ __forceinline__ void next_kv_block(bf16 *sK, bf16 *sV, const bf16 *kg,
                                              const bf16 *vg, size_t ldkv, int kb, int nkb,
                                              int T, int tid) {
  constexpr int LD = tile_ld<HS, kWg>();
  const int next = (kb & 1) ^ 1;
  if (kb + 1 < nkb) {
    load_tile<BC, HS, NTHREADS, kWg>(sK + next * BC * LD, kg, ldkv, (kb + 1) * BC, T, tid);
    load_tile<BC, HS, NTHREADS, kWg>(sV + next * BC * LD, vg, ldkv, (kb + 1) * BC, T, tid);
  }
  cp_async_commit();
  copies_landed<kWg>();
}

/* --------------------------------------------------------------- forward */

template <int HS, int WARPS, int MT, int BC, bool kWg>
struct FwdCfg {
  static constexpr int kThreads = WARPS * 32, kBR = WARPS * MT * 16, kLD = tile_ld<HS, kWg>();
  static constexpr size_t kSmem = (size_t)(kBR + 4 * BC) * kLD * sizeof(bf16) + kSmemAlign<kWg>;
};

/* kWg: the products by wgmma, each warpgroup (4 warps, MT = 1) 64 query rows
 * and 64 keys a block; the same sums in the same order as mma.sync's, so
 * the same bits (flash_attention_gpu_test).  Two CTAs an SM: at most 128
 * registers a thread (left alone, sr's kernel took 149, one CTA an SM, and
 * ran at 0.81 ms where it runs at 0.65 with 128 and a few spilled words; rne
 * and rz also gained, 0.30 -> 0.26 and 0.31 -> 0.28, B 32, T 1024, 12 heads). */
template <int HS, int WARPS, int MT, int BC, int kMode, bool kWg>
__global__ void __launch_bounds__(WARPS * 32, kWg ? 2 : 1)
    flash_fwd_kernel(float *__restrict__ out, bf16 *__restrict__ out_bf16,
                     float *__restrict__ lse, const bf16 *__restrict__ q,
                     const bf16 *__restrict__ k, const bf16 *__restrict__ v, int T, int NH,
                     int NKV, float scale_log2, Rounding rp, unsigned int *out_amax) {
  typedef FwdCfg<HS, WARPS, MT, BC, kWg> C;
  constexpr int NT = C::kThreads, BR = C::kBR, LD = C::kLD, KS = HS / 16;
  static_assert(!kWg || (HS == 64 && MT == 1 && BC == 64 && WARPS % 4 == 0), "wgmma tiles");
  extern __shared__ __align__(16) unsigned char smem_raw[];
  bf16 *sQ = (bf16 *)smem_base<kWg>(smem_raw), *sK = sQ + BR * LD, *sV = sK + 2 * BC * LD;

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t4 = lane & 3;
  const QueryBlock<HS, BR> cta(T, NH, NKV);
  const int b = cta.b, h = cta.h, q0 = cta.q0;
  const size_t ldq = cta.ldq, ldkv = cta.ldkv;
  const bf16 *qg = cta.q_head(q, T), *kg = cta.kv_head(k, T), *vg = cta.kv_head(v, T);
  const int nkb = (min(q0 + BR, T) + BC - 1) / BC;
  const int row0 = q0 + warp * MT * 16; /* first query row of this warp */
  /* wgmma: the key blocks this warpgroup's 64 rows see (a block wholly past
   * them is skipped; mma.sync warps compute it fully masked, adding zeros) */
  const int rows_wg = q0 + (warp & ~3) * 16;
  const int nkb_wg = !kWg ? nkb : rows_wg < T ? min(rows_wg + 63, T - 1) / BC + 1 : 0;

  load_tile<BR, HS, NT, kWg>(sQ, qg, ldq, q0, T, tid);
  load_tile<BC, HS, NT, kWg>(sK, kg, ldkv, 0, T, tid);
  load_tile<BC, HS, NT, kWg>(sV, vg, ldkv, 0, T, tid);
  cp_async_commit();

  uint32_t qf[MT][KS][4];
  float o[MT][HS / 8][4];
  float mrow[MT][2], lrow[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; mt++) {
    zero(o[mt]);
#pragma unroll
    for (int hf = 0; hf < 2; hf++) {
      mrow[mt][hf] = -INFINITY;
      lrow[mt][hf] = 0.f;
    }
  }

  for (int kb = 0; kb < nkb; kb++) {
    const int st = kb & 1;
    next_kv_block<BC, HS, NT, kWg>(sK, sV, kg, vg, ldkv, kb, nkb, T, tid);
    if (kb >= nkb_wg) { /* wgmma: past this warpgroup's rows */
      __syncthreads();
      continue;
    }
    if (!kWg && kb == 0) {
#pragma unroll
      for (int mt = 0; mt < MT; mt++) load_a_frags<LD>(qf[mt], sQ, warp * MT * 16 + mt * 16, lane);
    }
    const bf16 *cK = sK + st * BC * LD, *cV = sV + st * BC * LD;

    /* S = Q K^T (raw dot products) */
    float s[MT][BC / 8][4];
    if constexpr (kWg) {
      wgmma_fence();
      wg_abt(s[0], smem_addr(sQ + (warp & ~3) * 16 * LD), smem_addr(cK));
      wg_finish(s[0]);
    } else {
#pragma unroll
      for (int mt = 0; mt < MT; mt++) zero(s[mt]);
#pragma unroll
      for (int kk = 0; kk < KS; kk++) {
        uint32_t a[MT][4];
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
          for (int e = 0; e < 4; e++) a[mt][e] = qf[mt][kk][e];
        mma_k_step<MT, false, LD>(s, a, cK, kk * 16, lane);
      }
    }

    /* causal mask where this key block reaches past the warp's first row */
    if (kb * BC + BC - 1 > row0) {
#pragma unroll
      for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int n = 0; n < BC / 8; n++)
#pragma unroll
          for (int e = 0; e < 4; e++) {
            const int col = kb * BC + n * 8 + 2 * t4 + (e & 1);
            const int row = row0 + mt * 16 + g + (e >> 1) * 8;
            if (col > row) s[mt][n][e] = -INFINITY;
          }
    }

    /* online softmax (log2 domain); key 0 is in every row's first block, so
     * the running max is finite from the first block on */
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
      for (int hf = 0; hf < 2; hf++) {
        float mx = -INFINITY;
#pragma unroll
        for (int n = 0; n < BC / 8; n++)
          mx = fmaxf(mx, fmaxf(s[mt][n][2 * hf], s[mt][n][2 * hf + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float mnew = fmaxf(mrow[mt][hf], mx * scale_log2);
        const float alpha = ex2(mrow[mt][hf] - mnew);
        mrow[mt][hf] = mnew;
#pragma unroll
        for (int d = 0; d < HS / 8; d++) {
          o[mt][d][2 * hf] *= alpha;
          o[mt][d][2 * hf + 1] *= alpha;
        }
        float sum = 0.f;
#pragma unroll
        for (int n = 0; n < BC / 8; n++)
#pragma unroll
          for (int e = 0; e < 2; e++) {
            const float p = ex2(fmaf(s[mt][n][2 * hf + e], scale_log2, -mnew));
            s[mt][n][2 * hf + e] = p;
            sum += p;
          }
        lrow[mt][hf] = lrow[mt][hf] * alpha + sum;
      }

    /* O += P V */
    const QueryRowWords pw = {rp.seed, head_index(rp, b, NH, h, T), T, row0, kb * BC, lane};
    if constexpr (kWg) {
      uint32_t pf[4][4];
      p_frags<kMode>(pf, s[0], rp, pw);
      wgmma_fence();
      wg_pb(o[0], pf, smem_addr(cV));
      wg_finish(o[0]);
    } else {
      mma_pb<kMode, MT, LD>(o, s, cV, rp, pw, lane);
    }
    __syncthreads();
  }

  float m = 0.f; /* the finite amax of the values stored, for out_amax */
#pragma unroll
  for (int mt = 0; mt < MT; mt++)
#pragma unroll
    for (int hf = 0; hf < 2; hf++) {
      float l = lrow[mt][hf];
      l += __shfl_xor_sync(0xffffffffu, l, 1);
      l += __shfl_xor_sync(0xffffffffu, l, 2);
      const int row = row0 + mt * 16 + g + hf * 8;
      if (row < T) {
        const size_t at = ((size_t)b * T + row) * ldq + (size_t)h * HS + 2 * t4;
        if (out_bf16) /* the same values rounded to bf16 (rne) */
          store_row_bf16(out_bf16 + at, o[mt], hf, 1.f / l, &m);
        else
          store_row(out + at, o[mt], hf, 1.f / l, &m);
        if (t4 == 0) lse[((size_t)b * NH + h) * T + row] = (mrow[mt][hf] + log2f(l)) * kLn2;
      }
    }
  if (out_amax) block_amax_fold<NT>(m, out_amax);
}

/* -------------------------------------------------------------- backward */

/* D = rowsum(dO * O) and lse2 = lse * log2(e), laid out (B, NH, Tp); rows
 * t >= T get D = 0 and lse2 = +inf.  HS / 8 threads per row, rows ordered as
 * in memory (b, t, h). */
template <int HS, typename OT>
__global__ void flash_bwd_prep_kernel(float *__restrict__ lse2, float *__restrict__ Dd,
                                      const OT *__restrict__ out,
                                      const bf16 *__restrict__ dout,
                                      const float *__restrict__ lse, int B, int T, int Tp,
                                      int NH) {
  constexpr int TPR = HS / 8;
  const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  const size_t r = i / TPR, nrows = (size_t)B * Tp * NH;
  const int sub = (int)(i % TPR);
  const int h = (int)(r % NH), t = (int)((r / NH) % Tp), b = (int)(r / ((size_t)NH * Tp));
  float acc = 0.f;
  if (r < nrows && t < T) {
    const size_t off = (((size_t)b * T + t) * NH + h) * HS + sub * 8;
    const uint4 dv = *(const uint4 *)(dout + off);
    float4 o0, o1;
    if constexpr (sizeof(OT) == 4) { /* float32 O */
      o0 = *(const float4 *)(out + off), o1 = *(const float4 *)(out + off + 4);
    } else { /* bf16 O: the same values where O was rounded to bf16 */
      const uint4 ov = *(const uint4 *)(out + off);
      const __nv_bfloat162 *o2 = (const __nv_bfloat162 *)&ov;
      const float2 a = __bfloat1622float2(o2[0]), b = __bfloat1622float2(o2[1]),
                   c = __bfloat1622float2(o2[2]), d = __bfloat1622float2(o2[3]);
      o0 = make_float4(a.x, a.y, b.x, b.y), o1 = make_float4(c.x, c.y, d.x, d.y);
    }
    const __nv_bfloat162 *d2 = (const __nv_bfloat162 *)&dv;
    float2 f;
    f = __bfloat1622float2(d2[0]);
    acc = f.x * o0.x + f.y * o0.y;
    f = __bfloat1622float2(d2[1]);
    acc += f.x * o0.z + f.y * o0.w;
    f = __bfloat1622float2(d2[2]);
    acc += f.x * o1.x + f.y * o1.y;
    f = __bfloat1622float2(d2[3]);
    acc += f.x * o1.z + f.y * o1.w;
  }
#pragma unroll
  for (int off = TPR / 2; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
  if (r < nrows && sub == 0) {
    const size_t dst = ((size_t)b * NH + h) * Tp + t;
    Dd[dst] = t < T ? acc : 0.f;
    lse2[dst] = t < T ? lse[((size_t)b * NH + h) * T + t] * kLog2e : INFINITY;
  }
}

template <int HS, int WARPS, int BR, bool kWg>
struct DkdvCfg {
  static constexpr int kThreads = WARPS * 32, kBC = WARPS * 16, kLD = tile_ld<HS, kWg>();
  static constexpr size_t kSmem = (size_t)(2 * kBC + 4 * BR) * kLD * sizeof(bf16) +
                                  4 * BR * sizeof(float) + kSmemAlign<kWg>;
};

/* dK, dV for 16 * WARPS keys of one kv head.  kKVRegs: K and V fragments
 * stay in registers (hs <= 64), else they are re-read from shared memory.
 * kHeadRound (bf16 activations, a group of several heads): each head's dK
 * and dV rounded to bf16 (rne) when its last query block is in, then added
 * in float32 to the group's sums in head order, as autograd sums the bf16
 * gradients of K and V repeated over the group.  kWg: the products by wgmma
 * (one warpgroup, hs 64, 64 queries a step), the same sums in the same
 * order. */
/* Launch bounds: wgmma's kernel held to 168 registers, three CTAs an SM
 * (unbounded, ptxas takes 166-173, and from 169 two CTAs fit); sr's and the
 * head-rounding kernel take 250 or more and keep two; 0 leaves the mma.sync
 * kernels' registers to ptxas as before. */
template <int HS, int WARPS, int BR, bool kKVRegs, int kMode, bool kHeadRound, bool kWg>
__global__ void __launch_bounds__(WARPS * 32,
                                  kWg && kMode != EXMY_SR && !kHeadRound ? 3 : 0)
    flash_bwd_dkdv_kernel(float *__restrict__ dk, float *__restrict__ dv,
                          bf16 *__restrict__ dk16, bf16 *__restrict__ dv16,
                          const bf16 *__restrict__ q, const bf16 *__restrict__ k,
                          const bf16 *__restrict__ v, const bf16 *__restrict__ dout,
                          const float *__restrict__ lse2, const float *__restrict__ Dd, int T,
                          int Tp, int NH, int NKV, float scale_log2, float scale, Rounding rp,
                          Rounding rds, unsigned int *dv_amax) {
  typedef DkdvCfg<HS, WARPS, BR, kWg> C;
  constexpr int NT = C::kThreads, BC = C::kBC, LD = C::kLD, KS = HS / 16;
  static_assert(!kWg || (HS == 64 && WARPS == 4 && BR == 64 && !kKVRegs), "wgmma tiles");
  extern __shared__ __align__(16) unsigned char smem_raw[];
  bf16 *sK = (bf16 *)smem_base<kWg>(smem_raw), *sV = sK + BC * LD, *sQ = sV + BC * LD,
       *sdO = sQ + 2 * BR * LD;
  float *sL = (float *)(sdO + 2 * BR * LD), *sD = sL + 2 * BR;

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t4 = lane & 3;
  const HeadBlock hb = head_block((T + BC - 1) / BC);
  const int b = hb.head / NKV, kvh = hb.head % NKV, group = NH / NKV;
  const int k0 = hb.rank * BC; /* low key blocks have the most work: first */
  const int qb0 = k0 / BR, nq = (T + BR - 1) / BR - qb0, nit = group * nq;
  const size_t ldq = (size_t)NH * HS, ldkv = (size_t)NKV * HS;
  const bf16 *kg = k + (size_t)b * T * ldkv + (size_t)kvh * HS;
  const bf16 *vg = v + (size_t)b * T * ldkv + (size_t)kvh * HS;
  const bf16 *qg = q + (size_t)b * T * ldq, *dog = dout + (size_t)b * T * ldq;
  const int j0 = k0 + warp * 16; /* first key row of this warp */

  /* step it is query block qb0 + it % nq of head it / nq of the group: both
   * kept by stepping (no division a step), for the copies one step ahead */
  struct Step {
    int hi, qi;
  };
  auto advance = [nq](Step &s) {
    if (++s.qi == nq) s.qi = 0, s.hi++;
  };
  auto load_q = [&](const Step &at, int st) {
    const int h = kvh * group + at.hi, q0 = (qb0 + at.qi) * BR;
    load_tile<BR, HS, NT, kWg>(sQ + st * BR * LD, qg + (size_t)h * HS, ldq, q0, T, tid);
    load_tile<BR, HS, NT, kWg>(sdO + st * BR * LD, dog + (size_t)h * HS, ldq, q0, T, tid);
    const size_t ro = ((size_t)b * NH + h) * Tp + q0;
    load_vec<BR>(sL + st * BR, lse2 + ro, tid);
    load_vec<BR>(sD + st * BR, Dd + ro, tid);
  };

  load_tile<BC, HS, NT, kWg>(sK, kg, ldkv, k0, T, tid);
  load_tile<BC, HS, NT, kWg>(sV, vg, ldkv, k0, T, tid);
  Step next = {0, 0}, cur = {0, 0};
  load_q(next, 0);
  cp_async_commit();

  uint32_t kf[kKVRegs ? KS : 1][4], vf[kKVRegs ? KS : 1][4];
  float dka[HS / 8][4], dva[HS / 8][4];
  zero(dka);
  zero(dva);
  float dkt[kHeadRound ? HS / 8 : 1][4], dvt[kHeadRound ? HS / 8 : 1][4]; /* the group's */
  zero(dkt);
  zero(dvt);

  for (int it = 0; it < nit; it++) {
    const int st = it & 1;
    if (it + 1 < nit) {
      advance(next);
      load_q(next, st ^ 1);
    }
    cp_async_commit();
    copies_landed<kWg>();
    if constexpr (kKVRegs) {
      if (it == 0) {
        load_a_frags<LD>(kf, sK, warp * 16, lane);
        load_a_frags<LD>(vf, sV, warp * 16, lane);
      }
    }
    const int h = kvh * group + cur.hi, q0 = (qb0 + cur.qi) * BR;
    const bf16 *cQ = sQ + st * BR * LD, *cdO = sdO + st * BR * LD;
    const float *cL = sL + st * BR, *cD = sD + st * BR;

    /* S^T = K Q^T, 16 keys x BR queries per warp (wgmma: and dP^T = V dO^T) */
    float sa[BR / 8][4], dpa[BR / 8][4];
    if constexpr (kWg) {
      wg_abt_pair(sa, smem_addr(sK), smem_addr(cQ), dpa, smem_addr(sV), smem_addr(cdO));
    } else {
      mma_abt<KS, kKVRegs, LD>(sa, kf, sK, warp * 16, cQ, lane);
    }

    /* P^T = exp(S^T scale - lse[query]); zero where query < key */
    const bool diag = q0 < j0 + 15;
#pragma unroll
    for (int n = 0; n < BR / 8; n++) {
      const float2 L = *(const float2 *)(cL + n * 8 + 2 * t4);
#pragma unroll
      for (int e = 0; e < 4; e++) {
        float p = ex2(fmaf(sa[n][e], scale_log2, -((e & 1) ? L.y : L.x)));
        if (diag && q0 + n * 8 + 2 * t4 + (e & 1) < j0 + g + (e >> 1) * 8) p = 0.f;
        sa[n][e] = p;
      }
    }

    /* dV += P^T dO */
    const KeyRowWords pw = {rp.seed, head_index(rp, b, NH, h, T), T, j0, q0, lane};
    uint32_t pf[kWg ? 4 : 1][4];
    if constexpr (kWg) {
      p_frags<kMode>(pf, sa, rp, pw);
    } else {
      mma_pb<kMode, 1, LD>(&dva, &sa, cdO, rp, pw, lane);
      /* dP^T = V dO^T */
      mma_abt<KS, kKVRegs, LD>(dpa, vf, sV, warp * 16, cdO, lane);
    }

    /* dS^T = P^T (dP^T - D[query]) scale */
#pragma unroll
    for (int n = 0; n < BR / 8; n++) {
      const float2 D = *(const float2 *)(cD + n * 8 + 2 * t4);
#pragma unroll
      for (int e = 0; e < 4; e++)
        dpa[n][e] = sa[n][e] * (dpa[n][e] - ((e & 1) ? D.y : D.x)) * scale;
    }

    /* dK += dS^T Q */
    const KeyRowWords dsw = {rds.seed, head_index(rds, b, NH, h, T), T, j0, q0, lane};
    if constexpr (kWg) {
      uint32_t dsf[4][4];
      p_frags<kMode>(dsf, dpa, rds, dsw);
      wgmma_fence();
      wg_pb(dva, pf, smem_addr(cdO));
      wg_pb(dka, dsf, smem_addr(cQ));
      wg_finish(dva, dka);
    } else {
      mma_pb<kMode, 1, LD>(&dka, &dpa, cQ, rds, dsw, lane);
    }
    if constexpr (kHeadRound) {
      if (cur.qi == nq - 1) { /* head h is complete */
#pragma unroll
        for (int i = 0; i < HS / 8; i++)
#pragma unroll
          for (int e = 0; e < 4; e++) {
            dkt[i][e] = __fadd_rn(dkt[i][e], __bfloat162float(__float2bfloat16_rn(dka[i][e])));
            dvt[i][e] = __fadd_rn(dvt[i][e], __bfloat162float(__float2bfloat16_rn(dva[i][e])));
            dka[i][e] = dva[i][e] = 0.f;
          }
      }
    }
    advance(cur);
    __syncthreads();
  }
  if constexpr (kHeadRound) {
#pragma unroll
    for (int i = 0; i < HS / 8; i++)
#pragma unroll
      for (int e = 0; e < 4; e++) dka[i][e] = dkt[i][e], dva[i][e] = dvt[i][e];
  }

  float m = 0.f; /* the finite amax of dv's values stored, for dv_amax */
#pragma unroll
  for (int hf = 0; hf < 2; hf++) {
    const int row = j0 + g + hf * 8;
    if (row < T) {
      const size_t off = ((size_t)b * T + row) * ldkv + (size_t)kvh * HS + 2 * t4;
      if (dk16) { /* bf16 activations: written rounded */
        store_row_bf16(dk16 + off, dka, hf, 1.f);
        store_row_bf16(dv16 + off, dva, hf, 1.f, &m);
      } else {
        store_row(dk + off, dka, hf, 1.f);
        store_row(dv + off, dva, hf, 1.f, &m);
      }
    }
  }
  if (dv_amax) block_amax_fold<NT>(m, dv_amax);
}

template <int HS, int WARPS, int BC, bool kWg>
struct DqCfg {
  static constexpr int kThreads = WARPS * 32, kBR = WARPS * 16, kLD = tile_ld<HS, kWg>();
  static constexpr size_t kSmem =
      (size_t)(2 * kBR + 4 * BC) * kLD * sizeof(bf16) + kSmemAlign<kWg>;
};

/* dQ for 16 * WARPS query rows of one head.  kQRegs: Q and dO fragments stay
 * in registers (hs <= 64), else they are re-read from shared memory.  kWg:
 * the products by wgmma (one warpgroup, hs 64, 64 keys a step), the same
 * sums in the same order. */
template <int HS, int WARPS, int BC, bool kQRegs, int kMode, bool kWg>
__global__ void __launch_bounds__(WARPS * 32)
    flash_bwd_dq_kernel(float *__restrict__ dq, bf16 *__restrict__ dq16,
                        const bf16 *__restrict__ q,
                        const bf16 *__restrict__ k, const bf16 *__restrict__ v,
                        const bf16 *__restrict__ dout, const float *__restrict__ lse2,
                        const float *__restrict__ Dd, int T, int Tp, int NH, int NKV,
                        float scale_log2, float scale, Rounding rds) {
  typedef DqCfg<HS, WARPS, BC, kWg> C;
  constexpr int NT = C::kThreads, BR = C::kBR, LD = C::kLD, KS = HS / 16;
  static_assert(!kWg || (HS == 64 && WARPS == 4 && BC == 64 && !kQRegs), "wgmma tiles");
  extern __shared__ __align__(16) unsigned char smem_raw[];
  bf16 *sQ = (bf16 *)smem_base<kWg>(smem_raw), *sdO = sQ + BR * LD, *sK = sdO + BR * LD,
       *sV = sK + 2 * BC * LD;

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t4 = lane & 3;
  const QueryBlock<HS, BR> cta(T, NH, NKV);
  const int b = cta.b, h = cta.h, q0 = cta.q0;
  const size_t ldq = cta.ldq, ldkv = cta.ldkv;
  const bf16 *qg = cta.q_head(q, T), *dog = cta.q_head(dout, T);
  const bf16 *kg = cta.kv_head(k, T), *vg = cta.kv_head(v, T);
  const int nkb = (min(q0 + BR, T) + BC - 1) / BC;
  const int row0 = q0 + warp * 16;

  float L[2], D[2];
#pragma unroll
  for (int hf = 0; hf < 2; hf++) {
    const size_t ri = ((size_t)b * NH + h) * Tp + row0 + g + hf * 8;
    L[hf] = lse2[ri];
    D[hf] = Dd[ri];
  }

  load_tile<BR, HS, NT, kWg>(sQ, qg, ldq, q0, T, tid);
  load_tile<BR, HS, NT, kWg>(sdO, dog, ldq, q0, T, tid);
  load_tile<BC, HS, NT, kWg>(sK, kg, ldkv, 0, T, tid);
  load_tile<BC, HS, NT, kWg>(sV, vg, ldkv, 0, T, tid);
  cp_async_commit();

  uint32_t qf[kQRegs ? KS : 1][4], df[kQRegs ? KS : 1][4];
  float dqa[HS / 8][4];
  zero(dqa);

  for (int kb = 0; kb < nkb; kb++) {
    const int st = kb & 1;
    next_kv_block<BC, HS, NT, kWg>(sK, sV, kg, vg, ldkv, kb, nkb, T, tid);
    if constexpr (kQRegs) {
      if (kb == 0) {
        load_a_frags<LD>(qf, sQ, warp * 16, lane);
        load_a_frags<LD>(df, sdO, warp * 16, lane);
      }
    }
    const bf16 *cK = sK + st * BC * LD, *cV = sV + st * BC * LD;

    /* S = Q K^T and dP = dO V^T */
    float sa[BC / 8][4], dpa[BC / 8][4];
    if constexpr (kWg) {
      wg_abt_pair(sa, smem_addr(sQ), smem_addr(cK), dpa, smem_addr(sdO), smem_addr(cV));
    } else {
      zero(sa);
      zero(dpa);
#pragma unroll
      for (int kk = 0; kk < KS; kk++) {
        uint32_t a[4], c[4];
        a_frag<kQRegs, LD>(a, qf, sQ, warp * 16, kk, lane);
        a_frag<kQRegs, LD>(c, df, sdO, warp * 16, kk, lane);
#pragma unroll
        for (int np = 0; np < BC / 16; np++) {
          mma_16x16<1, false, LD>(&sa, &a, cK, kk * 16, np, lane);
          mma_16x16<1, false, LD>(&dpa, &c, cV, kk * 16, np, lane);
        }
      }
    }

    /* P and dS = P (dP - D) scale, zero where key > query */
    const bool diag = kb * BC + BC - 1 > row0;
#pragma unroll
    for (int n = 0; n < BC / 8; n++)
#pragma unroll
      for (int e = 0; e < 4; e++) {
        float p = ex2(fmaf(sa[n][e], scale_log2, -L[e >> 1]));
        if (diag && kb * BC + n * 8 + 2 * t4 + (e & 1) > row0 + g + (e >> 1) * 8) p = 0.f;
        dpa[n][e] = p * (dpa[n][e] - D[e >> 1]) * scale;
      }

    /* dQ += dS K */
    const QueryRowWords dsw = {rds.seed, head_index(rds, b, NH, h, T), T, row0, kb * BC, lane};
    if constexpr (kWg) {
      uint32_t dsf[4][4];
      p_frags<kMode>(dsf, dpa, rds, dsw);
      wgmma_fence();
      wg_pb(dqa, dsf, smem_addr(cK));
      wg_finish(dqa);
    } else {
      mma_pb<kMode, 1, LD>(&dqa, &dpa, cK, rds, dsw, lane);
    }
    __syncthreads();
  }

#pragma unroll
  for (int hf = 0; hf < 2; hf++) {
    const int row = row0 + g + hf * 8;
    if (row < T) {
      const size_t at = ((size_t)b * T + row) * ldq + (size_t)h * HS + 2 * t4;
      if (dq16)
        store_row_bf16(dq16 + at, dqa, hf, 1.f);
      else
        store_row(dq + at, dqa, hf, 1.f);
    }
  }
}

/* -------------------------------------------------------------- launchers */

/* Tile shapes per head size: forward (warps, m16 tiles per warp, keys per
 * block), backward (warps; queries per dK/dV step; keys per dQ step).
 * kWgmma: kernels by wgmma exist (hs 64: two warpgroups of 64 query rows in
 * the forward, one of 64 rows in dK/dV and dQ; the same block shapes, so
 * the same sums). */
template <int HS>
struct Tiles;
template <>
struct Tiles<32> {
  static constexpr int kFwdWarps = 4, kFwdMT = 2, kFwdBC = 64;
  static constexpr int kBwdWarps = 4, kDkdvBR = 64, kDqBC = 64;
  static constexpr bool kRegs = true, kWgmma = false;
};
template <>
struct Tiles<64> {
  static constexpr int kFwdWarps = 4, kFwdMT = 2, kFwdBC = 64;
  static constexpr int kBwdWarps = 4, kDkdvBR = 64, kDqBC = 64;
  static constexpr bool kRegs = true, kWgmma = true;
};
template <>
struct Tiles<128> {
  static constexpr int kFwdWarps = 4, kFwdMT = 1, kFwdBC = 64;
  static constexpr int kBwdWarps = 4, kDkdvBR = 64, kDqBC = 64;
  static constexpr bool kRegs = false, kWgmma = false;
};

/* flash_attention_use_wgmma's switch. */
int g_wgmma_allowed = 1;

/* Whether the wgmma kernels run here: allowed, and the current device of
 * compute capability 9.0 exactly, whose code is this file's sm_90a build
 * (other GPUs compile the compute_90 PTX, where wgmma.cuh traps).  Every
 * launch asks; a device's compute capability is looked up once. */
bool wgmma_here() {
  constexpr int kDevices = 64;
  static std::atomic<signed char> is_sm90[kDevices]; /* 0 not asked, 1 yes, -1 no */
  int dev;
  if (!g_wgmma_allowed || cudaGetDevice(&dev) != cudaSuccess) return false;
  if (dev >= 0 && dev < kDevices) {
    const signed char known = is_sm90[dev].load(std::memory_order_relaxed);
    if (known) return known > 0;
  }
  int major = 0, minor = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess)
    return false;
  const bool yes = major == 9 && minor == 0;
  if (dev >= 0 && dev < kDevices) is_sm90[dev].store(yes ? 1 : -1, std::memory_order_relaxed);
  return yes;
}

template <typename K>
cudaError_t prepare(K kernel, size_t smem) {
  if (smem <= 48 * 1024) return cudaSuccess;
  return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
}

/* The forward kernel of WARPS warps of MT row tiles and BC keys a step, by
 * mma.sync or (kWg) by wgmma. */
template <int HS, int WARPS, int MT, int BC, int kMode, bool kWg>
cudaError_t forward_kernel(float *out, bf16 *out_bf16, float *lse, const bf16 *q, const bf16 *k,
                           const bf16 *v, int B, int T, int NH, int NKV, float scale_log2,
                           Rounding rp, unsigned int *out_amax, cudaStream_t s) {
  typedef FwdCfg<HS, WARPS, MT, BC, kWg> C;
  auto kernel = flash_fwd_kernel<HS, WARPS, MT, BC, kMode, kWg>;
  cudaError_t e = prepare(kernel, C::kSmem);
  if (e != cudaSuccess) return e;
  const unsigned grid = (unsigned)B * NH * ((T + C::kBR - 1) / C::kBR);
  kernel<<<grid, C::kThreads, C::kSmem, s>>>(out, out_bf16, lse, q, k, v, T, NH, NKV, scale_log2,
                                             rp, out_amax);
  return cudaGetLastError();
}

template <int HS, int kMode>
cudaError_t forward(float *out, bf16 *out_bf16, float *lse, const bf16 *q, const bf16 *k,
                    const bf16 *v, int B, int T, int NH, int NKV, Rounding rp,
                    unsigned int *out_amax, cudaStream_t s) {
  typedef Tiles<HS> X;
  const float scale_log2 = (float)(kLog2e / sqrt((double)HS));
  if constexpr (X::kWgmma) {
    if (wgmma_here()) { /* the same 128 query rows a CTA, as 8 warps of 16 */
      static_assert(FwdCfg<HS, 2 * X::kFwdWarps, 1, X::kFwdBC, true>::kBR ==
                        X::kFwdWarps * X::kFwdMT * 16,
                    "same rows a CTA");
      return forward_kernel<HS, 2 * X::kFwdWarps, 1, X::kFwdBC, kMode, true>(
          out, out_bf16, lse, q, k, v, B, T, NH, NKV, scale_log2, rp, out_amax, s);
    }
  }
  return forward_kernel<HS, X::kFwdWarps, X::kFwdMT, X::kFwdBC, kMode, false>(
      out, out_bf16, lse, q, k, v, B, T, NH, NKV, scale_log2, rp, out_amax, s);
}

/* The dK/dV and dQ kernels, by mma.sync or (kWg) by wgmma. */
template <int HS, int kMode, bool kWg>
cudaError_t backward_kernels(float *dq, float *dk, float *dv, const bf16 *dout, const bf16 *q,
                             const bf16 *k, const bf16 *v, const float *lse2, const float *Dd,
                             int B, int T, int Tp, int NH, int NKV, Rounding rp, Rounding rds,
                             unsigned int *dv_amax, bool head_round, bf16 *const *grads16,
                             cudaStream_t s) {
  typedef Tiles<HS> X;
  constexpr bool kRegs = X::kRegs && !kWg;
  const float scale = (float)(1.0 / sqrt((double)HS)), scale_log2 = scale * kLog2e;
  cudaError_t e;
  typedef DkdvCfg<HS, X::kBwdWarps, X::kDkdvBR, kWg> C2;
  auto k2 = flash_bwd_dkdv_kernel<HS, X::kBwdWarps, X::kDkdvBR, kRegs, kMode, false, kWg>;
  if constexpr (kMode == kBf16) /* bf16 activations' P and dS; head_round implies NKV < NH */
    if (head_round)
      k2 = flash_bwd_dkdv_kernel<HS, X::kBwdWarps, X::kDkdvBR, kRegs, kMode, true, kWg>;
  if ((e = prepare(k2, C2::kSmem)) != cudaSuccess) return e;
  const unsigned g2 = (unsigned)B * NKV * ((T + C2::kBC - 1) / C2::kBC);
  k2<<<g2, C2::kThreads, C2::kSmem, s>>>(dk, dv, grads16[1], grads16[2], q, k, v, dout, lse2, Dd,
                                         T, Tp, NH, NKV, scale_log2, scale, rp, rds, dv_amax);
  if ((e = cudaGetLastError()) != cudaSuccess) return e;

  typedef DqCfg<HS, X::kBwdWarps, X::kDqBC, kWg> C3;
  auto k3 = flash_bwd_dq_kernel<HS, X::kBwdWarps, X::kDqBC, kRegs, kMode, kWg>;
  if ((e = prepare(k3, C3::kSmem)) != cudaSuccess) return e;
  const unsigned g3 = (unsigned)B * NH * ((T + C3::kBR - 1) / C3::kBR);
  k3<<<g3, C3::kThreads, C3::kSmem, s>>>(dq, grads16[0], q, k, v, dout, lse2, Dd, T, Tp, NH,
                                         NKV, scale_log2, scale, rds);
  return cudaGetLastError();
}

size_t padded_T(int T) { return ((size_t)T + kTpad - 1) / kTpad * kTpad; }

template <int HS, int kMode>
cudaError_t backward(float *dq, float *dk, float *dv, const bf16 *dout, const float *out,
                     const float *lse, const bf16 *q, const bf16 *k, const bf16 *v, int B, int T,
                     int NH, int NKV, Rounding rp, Rounding rds, void *scratch,
                     unsigned int *dv_amax, bool head_round, const bf16 *out_bf16,
                     bf16 *const *grads16, cudaStream_t s) {
  typedef Tiles<HS> X;
  const int Tp = (int)padded_T(T);
  float *lse2 = (float *)scratch, *Dd = lse2 + (size_t)B * NH * Tp;

  const size_t threads = (size_t)B * Tp * NH * (HS / 8);
  const unsigned prep_blocks = (unsigned)((threads + 255) / 256);
  if (out_bf16)
    flash_bwd_prep_kernel<HS, bf16><<<prep_blocks, 256, 0, s>>>(lse2, Dd, out_bf16, dout, lse, B,
                                                                T, Tp, NH);
  else
    flash_bwd_prep_kernel<HS, float><<<prep_blocks, 256, 0, s>>>(lse2, Dd, out, dout, lse, B, T,
                                                                 Tp, NH);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return e;

  if constexpr (X::kWgmma) {
    if (wgmma_here())
      return backward_kernels<HS, kMode, true>(dq, dk, dv, dout, q, k, v, lse2, Dd, B, T, Tp, NH,
                                               NKV, rp, rds, dv_amax, head_round, grads16, s);
  }
  return backward_kernels<HS, kMode, false>(dq, dk, dv, dout, q, k, v, lse2, Dd, B, T, Tp, NH,
                                            NKV, rp, rds, dv_amax, head_round, grads16, s);
}

const flash_rounding kPlainBf16 = {7, {}};

/* A valid rounding of P or dS for this T (see flash_attention.h). */
bool rounding_ok(const flash_rounding &r, int T) {
  const exmy_rounding_opts &o = r.round;
  if (r.mantissa_bits < (o.mode == EXMY_RNE ? 0 : 1) || r.mantissa_bits > 7 || o.saturate ||
      o.flush_subnormals)
    return false;
  if (o.mode == EXMY_SR)
    return o.sr_bits >= 0 && o.sr_bits <= 32 && T % 4 == 0 && o.offset % 4 == 0;
  return o.mode == EXMY_RNE || o.mode == EXMY_RZ;
}

Rounding rounding_of(const flash_rounding &r) {
  const exmy_rounding_opts &o = r.round;
  const uint32_t keep = 0xFFFFu & (0xFFFFu << (7 - r.mantissa_bits));
  return {23 - r.mantissa_bits, o.sr_bits == 0 ? 32 : o.sr_bits, o.seed, o.offset,
          keep | keep << 16};
}

/* The kernels' mode for these roundings (which agree in mode): plain bf16
 * for rne to 7 bits. */
int kernel_mode(const flash_rounding &a, const flash_rounding &b) {
  if (a.round.mode == EXMY_RNE && a.mantissa_bits == 7 && b.mantissa_bits == 7) return kBf16;
  return (int)a.round.mode;
}

bool args_ok(int B, int T, int NH, int NKV, int hs) {
  /* the grids are one-dimensional: a CTA per head and block of 64 rows or more */
  return B >= 1 && NH >= 1 && NKV >= 1 && NH % NKV == 0 && flash_attention_supported(hs, T) &&
         (size_t)B * NH * (((size_t)T + 63) / 64) <= 0x7fffffff;
}

/* f<HS, kMode>(args...) for the run-time head size and mode. */
#define FLASH_DISPATCH(f, hs, mode, ...)                                   \
  do {                                                                     \
    switch (hs * 4 + (mode == kBf16 ? 0 : mode == EXMY_RNE ? 1 : mode == EXMY_RZ ? 2 : 3)) { \
      case 32 * 4 + 0: return f<32, kBf16>(__VA_ARGS__);                   \
      case 32 * 4 + 1: return f<32, EXMY_RNE>(__VA_ARGS__);                \
      case 32 * 4 + 2: return f<32, EXMY_RZ>(__VA_ARGS__);                 \
      case 32 * 4 + 3: return f<32, EXMY_SR>(__VA_ARGS__);                 \
      case 64 * 4 + 0: return f<64, kBf16>(__VA_ARGS__);                   \
      case 64 * 4 + 1: return f<64, EXMY_RNE>(__VA_ARGS__);                \
      case 64 * 4 + 2: return f<64, EXMY_RZ>(__VA_ARGS__);                 \
      case 64 * 4 + 3: return f<64, EXMY_SR>(__VA_ARGS__);                 \
      case 128 * 4 + 0: return f<128, kBf16>(__VA_ARGS__);                 \
      case 128 * 4 + 1: return f<128, EXMY_RNE>(__VA_ARGS__);              \
      case 128 * 4 + 2: return f<128, EXMY_RZ>(__VA_ARGS__);               \
      default: return f<128, EXMY_SR>(__VA_ARGS__);                        \
    }                                                                      \
  } while (0)

}  // namespace

extern "C" int flash_attention_supported(int hs, int T) {
  /* the bound flash_attention.h documents */
  return (hs == 32 || hs == 64 || hs == 128) && T >= 1 && T <= 65535 * 64;
}

extern "C" cudaError_t flash_attention_forward(float *out, float *lse, const __nv_bfloat16 *q,
                                               const __nv_bfloat16 *k, const __nv_bfloat16 *v,
                                               int B, int T, int NH, int NKV, int hs,
                                               const flash_rounding *p,
                                               unsigned int *out_amax, cudaStream_t s) {
  const flash_rounding &rp = p ? *p : kPlainBf16;
  if (!args_ok(B, T, NH, NKV, hs) || !rounding_ok(rp, T)) return cudaErrorInvalidValue;
  const int mode = kernel_mode(rp, rp);
  FLASH_DISPATCH(forward, hs, mode, out, nullptr, lse, q, k, v, B, T, NH, NKV, rounding_of(rp),
                 out_amax, s);
}

extern "C" cudaError_t flash_attention_forward_bf16(__nv_bfloat16 *out, float *lse,
                                                    const __nv_bfloat16 *q,
                                                    const __nv_bfloat16 *k,
                                                    const __nv_bfloat16 *v, int B, int T, int NH,
                                                    int NKV, int hs, const flash_rounding *p,
                                                    unsigned int *out_amax, cudaStream_t s) {
  const flash_rounding &rp = p ? *p : kPlainBf16;
  if (!out || !args_ok(B, T, NH, NKV, hs) || !rounding_ok(rp, T)) return cudaErrorInvalidValue;
  const int mode = kernel_mode(rp, rp);
  FLASH_DISPATCH(forward, hs, mode, nullptr, out, lse, q, k, v, B, T, NH, NKV, rounding_of(rp),
                 out_amax, s);
}

extern "C" size_t flash_attention_scratch_bytes(int B, int T, int NH, int NKV, int hs) {
  (void)NKV;
  (void)hs;
  return 2 * (size_t)B * NH * padded_T(T) * sizeof(float);
}

extern "C" cudaError_t flash_attention_backward(float *dq, float *dk, float *dv,
                                                const __nv_bfloat16 *dout, const float *out,
                                                const float *lse, const __nv_bfloat16 *q,
                                                const __nv_bfloat16 *k, const __nv_bfloat16 *v,
                                                int B, int T, int NH, int NKV, int hs,
                                                const flash_rounding *p,
                                                const flash_rounding *ds, void *scratch,
                                                unsigned int *dv_amax, const flash_act_bf16 *act,
                                                cudaStream_t s) {
  const flash_rounding &rp = p ? *p : kPlainBf16, &rds = ds ? *ds : kPlainBf16;
  const bool head_round = act && act->round_head_grads && NKV < NH;
  const bf16 *out_bf16 = act ? act->out_bf16 : nullptr;
  bf16 *const none[3] = {nullptr, nullptr, nullptr};
  bf16 *const *grads16 = act && act->grads_bf16[0] ? act->grads_bf16 : none;
  if (act && (!act->grads_bf16[0] != !act->grads_bf16[1] ||
              !act->grads_bf16[0] != !act->grads_bf16[2]))
    return cudaErrorInvalidValue;
  if (!args_ok(B, T, NH, NKV, hs) || !rounding_ok(rp, T) || !rounding_ok(rds, T) ||
      rp.round.mode != rds.round.mode || !scratch || (!out && !out_bf16))
    return cudaErrorInvalidValue;
  const int mode = kernel_mode(rp, rds);
  if (head_round && mode != kBf16) return cudaErrorInvalidValue;
  FLASH_DISPATCH(backward, hs, mode, dq, dk, dv, dout, out, lse, q, k, v, B, T, NH, NKV,
                 rounding_of(rp), rounding_of(rds), scratch, dv_amax, head_round, out_bf16,
                 grads16, s);
}

/* ------------------------------------------------------ test support */

extern "C" int flash_attention_use_wgmma(int allow) {
  const int was = g_wgmma_allowed;
  g_wgmma_allowed = allow != 0;
  return was;
}

extern "C" int flash_attention_wgmma_active(int hs) {
  const bool tiles = hs == 32    ? Tiles<32>::kWgmma
                     : hs == 64  ? Tiles<64>::kWgmma
                     : hs == 128 ? Tiles<128>::kWgmma
                                 : false;
  return tiles && wgmma_here();
}

extern "C" float flash_attention_round(float x, const flash_rounding *r, uint32_t random) {
  const Rounding rd = rounding_of(*r);
  switch (r->round.mode) {
    case EXMY_RZ: return round_value<EXMY_RZ>(x, rd, random);
    case EXMY_SR: return round_value<EXMY_SR>(x, rd, random);
    default: return round_value<EXMY_RNE>(x, rd, random); /* kBf16 (cvt.rn) is the same */
  }
}

/* Every float32 bit pattern as the low half of a pair (its partner another
 * pattern, and random words from the index) through pack_bf16x2<kMode>,
 * each half against lib/round_core.h's encode and decode; *bad += the
 * halves that differ (a NaN for a NaN; rne's NaN inputs not counted). */
template <int kMode>
__global__ void pack_check_kernel(exmy_format f, exmy_rounding mode, Rounding rd,
                                  unsigned long long *bad) {
  unsigned long long n = 0;
  const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
  for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i >> 32 == 0; i += stride) {
    const uint32_t u[2] = {(uint32_t)i, (uint32_t)i * 0x9E3779B9u ^ 0x5BD1E995u};
    const uint32_t w[2] = {(uint32_t)i * 0x85EBCA6Bu ^ (uint32_t)(i >> 7),
                           ((uint32_t)i ^ 0xC2B2AE35u) * 0x27D4EB2Fu};
    const uint32_t got = pack_bf16x2<kMode>(exmy_bits_f32(u[0]), exmy_bits_f32(u[1]), rd, w[0], w[1]);
    for (int h = 0; h < 2; h++) {
      const float x = exmy_bits_f32(u[h]);
      /* rne rounds a NaN's payload like a value's (flash_attention.h) */
      if (kMode == EXMY_RNE && (u[h] & 0x7FFFFFFFu) > 0x7F800000u) continue;
      const uint32_t want = exmy_f32_bits(exmy_core_decode(
          &f, exmy_core_encode(&f, mode, 0, 0, rd.sr_bits, x, w[h])));
      const uint32_t g = h ? got >> 16 : got & 0xFFFFu;
      const bool nan_g = (g & 0x7F80u) == 0x7F80u && (g & 0x7Fu);
      n += (want & 0x7FFFFFFFu) > 0x7F800000u ? !nan_g : want != g << 16;
    }
  }
  atomicAdd(bad, n);
}

extern "C" long long flash_attention_pack_mismatches(const flash_rounding *r) {
  const exmy_rounding_opts &o = r->round;
  char name[8];
  snprintf(name, sizeof name, "e8m%d", r->mantissa_bits);
  exmy_format f;
  if (!rounding_ok(*r, 4) || exmy_format_parse(name, &f) != 0) return -1;
  const Rounding rd = rounding_of(*r);
  unsigned long long *d_bad = nullptr, bad = 0;
  if (cudaMalloc(&d_bad, sizeof bad) != cudaSuccess) return -1;
  bool ok = cudaMemset(d_bad, 0, sizeof bad) == cudaSuccess;
  const dim3 grid(4096), block(256);
  switch (kernel_mode(*r, *r)) {
    case kBf16: pack_check_kernel<kBf16><<<grid, block>>>(f, o.mode, rd, d_bad); break;
    case EXMY_RNE: pack_check_kernel<EXMY_RNE><<<grid, block>>>(f, o.mode, rd, d_bad); break;
    case EXMY_RZ: pack_check_kernel<EXMY_RZ><<<grid, block>>>(f, o.mode, rd, d_bad); break;
    default: pack_check_kernel<EXMY_SR><<<grid, block>>>(f, o.mode, rd, d_bad); break;
  }
  /* a kernel that did not run must not read as no differences */
  ok = ok && cudaGetLastError() == cudaSuccess &&
       cudaMemcpy(&bad, d_bad, sizeof bad, cudaMemcpyDeviceToHost) == cudaSuccess;
  cudaFree(d_bad);
  return ok ? (long long)bad : -1;
}

extern "C" long flash_attention_sr_layout_mismatches(int T, uint64_t seed, uint64_t offset) {
  if (T < 4 || T % 4 || offset % 4) return -1;
  long bad = 0;
  for (int keys = 0; keys < 2; keys++)         /* query-row tiles, then key-row tiles */
    for (int r0 = 0; r0 < T; r0 += 16)         /* 16 rows of a warp */
      for (int c0 = 0; c0 < T; c0 += 8) {      /* one 8-column accumulator tile */
        uint32_t w[32][4], a[32][4], s[32][2], r[32][4];
        for (int l = 0; l < 32; l++) {
          exmy_sr_block(seed, keys ? tr_block(offset, T, r0, c0, l) : rm_block(offset, T, r0, c0, l),
                        w[l]);
          if (keys) trade_send<1>(s[l], w[l], keys_bit1(l)); else trade_send<2>(s[l], w[l], rows_bit(l));
        }
        for (int l = 0; l < 32; l++) {
          const uint32_t v[2] = {s[l ^ (keys ? 4 : 1)][0], s[l ^ (keys ? 4 : 1)][1]};
          if (keys) trade<1>(a[l], w[l], v, keys_bit1(l)); else trade<2>(r[l], w[l], v, rows_bit(l));
        }
        if (keys) {
          for (int l = 0; l < 32; l++) trade_send<2>(s[l], a[l], keys_bit2(l));
          for (int l = 0; l < 32; l++) {
            const uint32_t v[2] = {s[l ^ 8][0], s[l ^ 8][1]};
            trade<2>(r[l], a[l], v, keys_bit2(l));
          }
        }
        for (int l = 0; l < 32; l++)
          for (int e = 0; e < 4; e++) {
            const int row = r0 + (l >> 2) + 8 * (e >> 1), col = c0 + 2 * (l & 3) + (e & 1);
            const int i = keys ? col : row, j = keys ? row : col; /* query, key */
            if (i < T && j < T)
              bad += r[l][e] != exmy_sr_word(seed, offset + (uint64_t)i * T + j);
          }
      }
  return bad;
}
