/*
 * One instruction set's micro-kernels of exmy_sgemm (cpu/gemm.c), written
 * once and included once per instruction set with these defined (and
 * undefined here afterwards):
 *   V, LANES             the vector type and its floats;
 *   ZERO, BCAST, FMADD,  its intrinsics (BCAST from a float *, FMADD(a, b, c)
 *   MUL, ADD, SET1,      = a·b + c in one rounding, LOAD aligned);
 *   LOAD, LOADU, STOREU
 *   MR, ROWS(X)          the tile's rows (6 or 12) and X(0) X(1) ... X(MR-1);
 *   TARGET               the target attribute of the functions;
 *   TILE_COLS, TILE_ROWS  their names.
 * Both compute an MR x 2·LANES tile of C: each of its accumulators starts at
 * 0 and takes k fused multiply-adds in order of p, then C = alpha·acc, or
 * alpha·acc + beta·C when beta != 0 (a multiply, a multiply and an add).
 * They differ only in where they read op(A).  The accumulators are named
 * variables, two vectors per row: as arrays of vectors in unrolled loops GCC
 * kept part of them on the stack.
 */
#define DECLARE_ROW(r) V c##r##_0 = ZERO(), c##r##_1 = ZERO();
#define FMA_ROW(r)                       \
  {                                      \
    const V a_ = BCAST(A_AT(r));         \
    c##r##_0 = FMADD(a_, b0, c##r##_0);  \
    c##r##_1 = FMADD(a_, b1, c##r##_1);  \
  }
#define STORE_ROW(r)                                  \
  {                                                   \
    float *cr = c + r * ldc;                          \
    V x0 = MUL(va, c##r##_0), x1 = MUL(va, c##r##_1); \
    if (beta != 0.0f) {                               \
      x0 = ADD(x0, MUL(vb, LOADU(cr)));               \
      x1 = ADD(x1, MUL(vb, LOADU(cr + LANES)));       \
    }                                                 \
    STOREU(cr, x0);                                   \
    STOREU(cr + LANES, x1);                           \
  }
#define TILE_LOOP(A_NEXT)                                    \
  ROWS(DECLARE_ROW)                                          \
  for (size_t p = 0; p < k; p++, bp += 2 * LANES, A_NEXT) {  \
    const V b0 = LOAD(bp), b1 = LOAD(bp + LANES);            \
    ROWS(FMA_ROW)                                            \
  }                                                          \
  const V va = SET1(alpha), vb = SET1(beta);                 \
  ROWS(STORE_ROW)

/* Element (r, p) of op(A) at a[p * lda + r]: a packed panel (lda = MR), or
 * A^T read in place. */
__attribute__((target(TARGET))) static void TILE_COLS(size_t k, const float *a, size_t lda,
                                                      const float *bp, float *c, size_t ldc,
                                                      float alpha, float beta) {
#define A_AT(r) (a + r)
  TILE_LOOP(a += lda)
#undef A_AT
}

/* Element (r, p) of op(A) at a[r * lda + p]: MR whole rows of A, in place.
 * Row r is read at a0 (rows 0-5) or a6 (rows 6-11) plus one of five multiples
 * of lda, so that the addresses take few registers. */
#define A_ROW_0 (a0)
#define A_ROW_1 (a0 + l1)
#define A_ROW_2 (a0 + l2)
#define A_ROW_3 (a0 + l3)
#define A_ROW_4 (a0 + l4)
#define A_ROW_5 (a0 + l5)
#define A_ROW_6 (a6)
#define A_ROW_7 (a6 + l1)
#define A_ROW_8 (a6 + l2)
#define A_ROW_9 (a6 + l3)
#define A_ROW_10 (a6 + l4)
#define A_ROW_11 (a6 + l5)
__attribute__((target(TARGET))) static void TILE_ROWS(size_t k, const float *a, size_t lda,
                                                      const float *bp, float *c, size_t ldc,
                                                      float alpha, float beta) {
  const size_t l1 = lda, l2 = 2 * lda, l3 = 3 * lda, l4 = 4 * lda, l5 = 5 * lda;
  const float *a0 = a;
#if MR > 6
  const float *a6 = a + 6 * lda;
#define A_NEXT (a0++, a6++)
#else
#define A_NEXT a0++
#endif
#define A_AT(r) A_ROW_##r
  TILE_LOOP(A_NEXT)
#undef A_AT
#undef A_NEXT
}

#undef A_ROW_0
#undef A_ROW_1
#undef A_ROW_2
#undef A_ROW_3
#undef A_ROW_4
#undef A_ROW_5
#undef A_ROW_6
#undef A_ROW_7
#undef A_ROW_8
#undef A_ROW_9
#undef A_ROW_10
#undef A_ROW_11
#undef DECLARE_ROW
#undef FMA_ROW
#undef STORE_ROW
#undef TILE_LOOP
#undef V
#undef LANES
#undef ZERO
#undef BCAST
#undef FMADD
#undef MUL
#undef ADD
#undef SET1
#undef LOAD
#undef LOADU
#undef STOREU
#undef MR
#undef ROWS
#undef TARGET
#undef TILE_COLS
#undef TILE_ROWS
