/*
 * One instruction set's loop of the accumulation model's vector kernels
 * (cpu/accum_vector.c): one row of op(A) against a block of LANES decoded
 * columns of op(B), the slice [s0, s1) of K, each column's result as
 * exmy_accum_dot_slice gives it; with block-scaled codes, sa (or NULL) the
 * row's scales per block of K from K's first, sb (or NULL) the columns'
 * (LANES per block, block-major).  Written once and included once per
 * instruction set with these defined (and undefined here afterwards):
 *   VI, VLANES        a vector of VLANES int64 lanes (LANES a multiple);
 *   LOAD, STORE       aligned load and store (VLANES · 8 bytes);
 *   SET1, ADD, SUB,   lane by lane;
 *   XOR, OR, MAX      (MAX: signed);
 *   MUL32             the product of each lane's low 32 bits, unsigned;
 *   SHL, SHR          shifts by each lane's count, 0 where the count taken
 *                     unsigned is 64 or more (a negative count included);
 *   TARGET, SLICE     the target attribute and the function's name.
 * The block's columns are taken VLANES at a time, each group of K in two
 * passes: the alignment exponent (the largest sum of the inputs' exponents
 * among the nonzero products, a zero column's lead being far below any), and
 * the sum of the products truncated to multiples of 2^q.  The end of a group
 * (the running sum, the promotion) is lib/accum_core.h's code, per lane.
 */
__attribute__((target(TARGET))) static void SLICE(const exmy_accum_model *m, const decoded *a,
                                                  const float *sa, const decoded *b,
                                                  const float *sb, int s0, int s1,
                                                  float out[LANES]) {
  const VI zero = SET1(0), below = SET1(m->product_bits - 1);
  const int64_t *am = a->mag, *ae = a->exp, *al = a->lead, *an = a->neg;
  for (int h = 0; h < LANES; h += VLANES) {
    /* this vector's columns */
    const int64_t *bm = b->mag + h, *be = b->exp + h, *bl = b->lead + h, *bn = b->neg + h;
    exmy_accum_num sum[VLANES];
    float acc[VLANES];
    for (int l = 0; l < VLANES; l++) sum[l] = (exmy_accum_num){0, 0, 0}, acc[l] = 0.0f;
    for (int g = s0; g < s1; g += m->group) {
      const int n = s1 - g < m->group ? s1 - g : m->group;
      int64_t start[VLANES] __attribute__((aligned(64)));
      for (int l = 0; l < VLANES; l++) start[l] = exmy_accum_sum_lead(m, sum[l]);
      /* two chains of maxima, even and odd p, joined at the end: a max
       * can take several cycles (AVX2: a compare and a blend) */
      VI lead = LOAD(start), lead_odd = lead;
      int p = g;
      for (; p + 1 < g + n; p += 2) {
        if (am[p]) lead = MAX(lead, ADD(SET1(al[p]), LOAD(bl + (size_t)p * LANES)));
        if (am[p + 1])
          lead_odd = MAX(lead_odd, ADD(SET1(al[p + 1]), LOAD(bl + (size_t)(p + 1) * LANES)));
      }
      if (p < g + n && am[p]) lead = MAX(lead, ADD(SET1(al[p]), LOAD(bl + (size_t)p * LANES)));
      lead = MAX(lead, lead_odd);
      const VI q = SUB(lead, below);
      VI group_sum = zero;
      for (p = g; p < g + n; p++) {
        if (!am[p]) continue;
        const size_t o = (size_t)p * LANES;
        const VI prod = MUL32(SET1(am[p]), LOAD(bm + o));
        const VI shift = SUB(ADD(SET1(ae[p]), LOAD(be + o)), q);
        /* e >= q: prod << (e - q); else prod >> (q - e), 0 from 64 bits on,
         * as exmy_accum_shr truncates: the other shift's count is negative,
         * so that shift gives 0 (both give prod at e = q) */
        const VI v = OR(SHL(prod, shift), SHR(prod, SUB(zero, shift)));
        /* all ones where the product is negative: -v = (v ^ ~0) - ~0 */
        const VI neg = XOR(SET1(an[p]), LOAD(bn + o));
        group_sum = ADD(group_sum, SUB(XOR(v, neg), neg));
      }
      int64_t gs[VLANES] __attribute__((aligned(64))), ld[VLANES] __attribute__((aligned(64)));
      STORE(gs, group_sum);
      STORE(ld, lead);
      const int promote = exmy_accum_promotes(m, g + n - s0, s1 - s0);
      const int kb = (g + n - 1) / (m->promote_every ? m->promote_every : 1);
      for (int l = 0; l < VLANES; l++) {
        /* the block's scales (sb: LANES per block), as exmy_accum_block_scales */
        const float scale[2] = {sa ? sa[kb] : 1.0f, sb ? sb[(size_t)kb * LANES + h + l] : 1.0f};
        exmy_accum_close_group(m, ld[l] > EXMY_ACCUM_NO_LEAD, (int)(ld[l] - m->product_bits + 1),
                               gs[l], promote, promote && (sa || sb) ? scale : 0, &sum[l],
                               &acc[l]);
      }
    }
    for (int l = 0; l < VLANES; l++)
      out[h + l] = m->promote_every ? acc[l] : exmy_accum_to_f32(sum[l]);
  }
}

#undef VI
#undef VLANES
#undef LOAD
#undef STORE
#undef SET1
#undef ADD
#undef SUB
#undef XOR
#undef OR
#undef MAX
#undef MUL32
#undef SHL
#undef SHR
#undef TARGET
#undef SLICE
