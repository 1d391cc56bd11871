/* Bulk conversions over arrays (plain OpenMP loops over the reference core). */
#include "lib/exmy.h"
#include "lib/philox.h"
#include "lib/round_core.h"

static int sr_bits_of(const exmy_rounding_opts *o) {
  return o->sr_bits == 0 ? 32 : o->sr_bits;
}

void exmy_encode_f32(const exmy_format *f, const exmy_rounding_opts *o,
                     const float *x, void *codes, size_t n) {
  const size_t bytes = exmy_code_bytes(f);
  const int sr = o->mode == EXMY_SR, bits = sr_bits_of(o);
#pragma omp parallel for schedule(static) if (n > 65536)
  for (size_t i = 0; i < n; i++) {
    uint32_t rnd = sr ? exmy_sr_word(o->seed, o->offset + i) : 0;
    uint32_t c = exmy_core_encode(f, o->mode, o->saturate, o->flush_subnormals,
                                  bits, x[i], rnd);
    if (bytes == 1) ((uint8_t *)codes)[i] = (uint8_t)c;
    else if (bytes == 2) ((uint16_t *)codes)[i] = (uint16_t)c;
    else ((uint32_t *)codes)[i] = c;
  }
}

void exmy_decode_f32(const exmy_format *f, const void *codes, float *y,
                     size_t n) {
  const size_t bytes = exmy_code_bytes(f);
#pragma omp parallel for schedule(static) if (n > 65536)
  for (size_t i = 0; i < n; i++) {
    uint32_t c = bytes == 1   ? ((const uint8_t *)codes)[i]
                 : bytes == 2 ? ((const uint16_t *)codes)[i]
                              : ((const uint32_t *)codes)[i];
    y[i] = exmy_core_decode(f, c);
  }
}

void exmy_quantize_f32(const exmy_format *f, const exmy_rounding_opts *o,
                       const float *x, float *y, size_t n) {
  const int sr = o->mode == EXMY_SR, bits = sr_bits_of(o);
#pragma omp parallel for schedule(static) if (n > 65536)
  for (size_t i = 0; i < n; i++) {
    uint32_t rnd = sr ? exmy_sr_word(o->seed, o->offset + i) : 0;
    y[i] = exmy_core_decode(f, exmy_core_encode(f, o->mode, o->saturate,
                                                o->flush_subnormals, bits,
                                                x[i], rnd));
  }
}
