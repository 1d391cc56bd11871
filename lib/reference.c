/* The scalar reference: thin wrappers over lib/round_core.h. */
#include "lib/exmy.h"
#include "lib/philox.h"
#include "lib/round_core.h"

static int effective_sr_bits(const exmy_rounding_opts *o) {
  return o->sr_bits == 0 ? 32 : o->sr_bits;
}

uint32_t exmy_ref_encode(const exmy_format *f, const exmy_rounding_opts *o,
                         float x, uint32_t random) {
  return exmy_core_encode(f, o->mode, o->saturate, o->flush_subnormals,
                          effective_sr_bits(o), x, random);
}

float exmy_ref_decode(const exmy_format *f, uint32_t code) {
  return exmy_core_decode(f, code);
}

float exmy_ref_quantize(const exmy_format *f, const exmy_rounding_opts *o,
                        float x, uint32_t random) {
  return exmy_core_decode(f, exmy_ref_encode(f, o, x, random));
}

uint32_t exmy_sr_random(uint64_t seed, uint64_t index) {
  return exmy_sr_word(seed, index);
}

void exmy_philox4x32_10(const uint32_t counter[4], const uint32_t key[2],
                        uint32_t out[4]) {
  exmy_philox4x32_10_block(counter, key, out);
}
