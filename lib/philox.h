/*
 * Philox4x32-10, the counter-based generator of Salmon, Moraes, Dror and Shaw,
 * "Parallel random numbers: as easy as 1, 2, 3" (SC'11), with Random123's
 * constants.  A header so that the identical function compiles for the host
 * and, under nvcc, for the device: stochastic rounding draws the same bits on
 * both.
 */
#ifndef EXMY_PHILOX_H
#define EXMY_PHILOX_H

#include <stdint.h>

#include "lib/hostdevice.h"

#define EXMY_PHILOX_M0 0xD2511F53u
#define EXMY_PHILOX_M1 0xCD9E8D57u
#define EXMY_PHILOX_W0 0x9E3779B9u /* golden ratio */
#define EXMY_PHILOX_W1 0xBB67AE85u /* sqrt(3) - 1 */

EXMY_HD void exmy_philox_round(uint32_t c[4], const uint32_t k[2]) {
  uint64_t p0 = (uint64_t)EXMY_PHILOX_M0 * c[0];
  uint64_t p1 = (uint64_t)EXMY_PHILOX_M1 * c[2];
  uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
  uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
  uint32_t c1 = c[1], c3 = c[3];
  c[0] = hi1 ^ c1 ^ k[0];
  c[1] = lo1;
  c[2] = hi0 ^ c3 ^ k[1];
  c[3] = lo0;
}

/* out = Philox4x32-10(counter, key). */
EXMY_HD void exmy_philox4x32_10_block(const uint32_t counter[4],
                                      const uint32_t key[2], uint32_t out[4]) {
  uint32_t c[4] = {counter[0], counter[1], counter[2], counter[3]};
  uint32_t k[2] = {key[0], key[1]};
  for (int round = 0; round < 10; round++) {
    if (round > 0) {
      k[0] += EXMY_PHILOX_W0;
      k[1] += EXMY_PHILOX_W1;
    }
    exmy_philox_round(c, k);
  }
  out[0] = c[0];
  out[1] = c[1];
  out[2] = c[2];
  out[3] = c[3];
}

/* The 4 random words of block `block` of the stream `seed`: they serve the
 * elements with stream index 4*block .. 4*block+3. */
EXMY_HD void exmy_sr_block(uint64_t seed, uint64_t block, uint32_t out[4]) {
  uint32_t counter[4] = {(uint32_t)block, (uint32_t)(block >> 32), 0u, 0u};
  uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
  exmy_philox4x32_10_block(counter, key, out);
}

/* The random word of stream index j (= offset + i) for stochastic rounding. */
EXMY_HD uint32_t exmy_sr_word(uint64_t seed, uint64_t j) {
  uint32_t out[4];
  exmy_sr_block(seed, j >> 2, out);
  return out[j & 3];
}

#endif /* EXMY_PHILOX_H */
