/* SplitMix64 (Steele, Lea and Flood, 2014): the small deterministic
 * generator of the trainer's initialisation (model.c) and data order
 * (data.c), and of GPU tests' inputs (host and device).  Each call advances
 * the state *s and returns 64 random bits. */
#ifndef EXPERIMENTS_SPLITMIX64_H
#define EXPERIMENTS_SPLITMIX64_H

#include <stdint.h>

#include "lib/hostdevice.h"

EXMY_HD uint64_t splitmix64(uint64_t *s) {
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

#endif /* EXPERIMENTS_SPLITMIX64_H */
