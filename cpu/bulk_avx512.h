/*
 * The AVX-512 kernels of the bulk conversions (cpu/bulk_avx512.c): the hot
 * path (signed formats without flush, mode by mode) and Philox4x32-10 for
 * stochastic rounding, written with intrinsics.  cpu/bulk.c calls them when
 * the CPU has x86-64-v4 (AVX-512 F/BW/DQ/VL); the C loops of
 * cpu/bulk_kernel.h are their portable twins, and //tests/cpu holds both
 * equal to the scalar reference bit for bit.
 */
#ifndef EXMY_CPU_BULK_AVX512_H
#define EXMY_CPU_BULK_AVX512_H

#include <stddef.h>
#include <stdint.h>

#include "cpu/bulk_kernel.h"

/* The builds pinned to one clone (-DEXMY_NO_CLONES, tests) leave them out. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(EXMY_NO_CLONES)
#define EXMY_HAVE_AVX512_KERNELS 1
#else
#define EXMY_HAVE_AVX512_KERNELS 0
#endif

#if EXMY_HAVE_AVX512_KERNELS
/* 1 if this CPU runs the kernels below (AVX-512 F, BW, DQ and VL). */
int exmy_avx512_usable(void);

/* Which rounding the kernel does (see cpu/bulk_avx512.c). */
typedef enum {
  EXMY_K512_SUB = 0,    /* exmy_k_round_fast's domain (p->fast, no flush) */
  EXMY_K512_LINEAR = 1, /* the same with emin = -126 (p->sub_linear) */
  EXMY_K512_E8M0 = 2,   /* the standard E8M0 (any flush) */
  EXMY_K512_FLUSH = 3,  /* signed formats with flush_subnormals */
} exmy_k512_kind;

/* The kernel for one rounding mode, output and kind: out_bytes 0 stores
 * float32 values (quantize), 1 / 2 / 4 store codes of that size (E8M0: 0 or
 * 1 only; NULL otherwise).  Honours p->stream. */
exmy_kernel_fn exmy_avx512_kernel(int mode, int out_bytes, exmy_k512_kind kind);

/* The Philox words of blocks b0 .. b0+nb-1 (mod 2^62), in order: exactly
 * 4*nb words, the same as lib/philox.h's exmy_sr_block. */
void exmy_avx512_philox_words(uint64_t seed, uint64_t b0, size_t nb,
                              uint32_t *w);
#endif

#endif
