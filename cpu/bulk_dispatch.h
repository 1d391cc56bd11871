/*
 * What the bulk conversions of cpu/bulk.c decide per call, open to the tests
 * and the benchmark: which loop runs, and whether its output goes out by
 * non-temporal stores.
 *
 * Non-temporal stores: a plain store first reads the line it writes (read
 * for ownership), so a float32 -> float32 loop moves 12 bytes per element
 * where a non-temporal one moves 8; but a non-temporal store also pushes the
 * line out of the caches, which costs when the array would have stayed
 * there.  Measured on the 2-core development machine (Xeon, 2 x 2 MiB L2,
 * 480 MiB L3 reported), 2026-11-23, AVX-512 loop y = x & mask over 2
 * threads, Gelem/s, plain vs non-temporal (and glibc memcpy):
 *   output   34 MB: 4.7-5.0 vs 2.8-3.0 (memcpy 4.4)
 *   output   67 MB: 4.3     vs 3.4-3.9 (memcpy 4.4)
 *   output  134 MB: 3.7-3.9 vs 4.8-5.3 (memcpy 3.8-4.1)
 *   output  268 MB: 3.4     vs 4.3-5.5 (memcpy 3.4-3.6)
 * so the crossover lies where input + output approach half the last-level
 * cache; that is the rule (the LLC size from sysconf).  Only the AVX-512
 * loops stream.
 */
#ifndef EXMY_CPU_BULK_DISPATCH_H
#define EXMY_CPU_BULK_DISPATCH_H

#include <stddef.h>

#include "cpu/exmy_cpu.h"

/* where sysconf does not know the cache size, and the least ever used */
#define EXMY_STREAM_MIN_BYTES_UNKNOWN ((size_t)64 << 20)
#define EXMY_STREAM_MIN_BYTES_FLOOR ((size_t)4 << 20)

/* Input plus output bytes of one call from which the output is streamed. */
size_t exmy_bulk_stream_min_bytes(void);

/* Tests: sets that size (any value, 1 streams everything); 0 restores the
 * default. */
void exmy_bulk_set_stream_min_bytes(size_t bytes);

/* The loop exmy_quantize_f32 / exmy_encode_f32 run for (f, o) on this CPU:
 * "avx512" (cpu/bulk_avx512.c), "c" (the loops of cpu/bulk_kernel.h, in the
 * clone the CPU picks) or "reference" (formats the fast loops decline). */
const char *exmy_bulk_kernel_path(const exmy_format *f, const exmy_rounding_opts *o);

#endif
