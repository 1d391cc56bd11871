/* The tests' pseudo-random data: one 64-bit linear congruential generator
 * (Knuth's MMIX multiplier and increment), so that every test draws from the
 * same stream for a given seed.  Each test takes the bits it needs from the
 * returned state; the helpers below are the common draws. */
#ifndef EXMY_TESTS_TEST_RNG_H
#define EXMY_TESTS_TEST_RNG_H

#include <math.h>
#include <stdint.h>

/* Advances *state and returns it. */
static inline uint64_t test_rng_next(uint64_t *state) {
  *state = *state * 6364136223846793005ull + 1442695040888963407ull;
  return *state;
}

/* Uniform in [0, 1), from the state's top 53 bits. */
static inline double test_rng_uniform(uint64_t *state) {
  return (double)(test_rng_next(state) >> 11) / 9007199254740992.0;
}

/* Standard normal, by Box-Muller from two uniforms. */
static inline double test_rng_gauss(uint64_t *state) {
  const double u = test_rng_uniform(state) + 1e-300, v = test_rng_uniform(state);
  return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

#endif
