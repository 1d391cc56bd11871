/* Test data for the CLI tests, without Python:
 *   gen_data floats STRIDE       float32 bit patterns 0, S, 2S, ... < 2^32
 *                                (every sign, exponent, inf and NaN class)
 *   gen_data codes WIDTH COUNT   codes 0 .. COUNT-1, WIDTH little-endian bytes each
 *   gen_data mixed COUNT         COUNT float32s of both signs in [2^-8, 2^8)
 *                                with scrambled mantissas: nearly all inexact
 *                                in 8-bit formats, so sr matters everywhere
 * written to stdout. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static void put_le(uint32_t v, int width) {
  for (int b = 0; b < width; b++) putchar((int)((v >> (8 * b)) & 0xFFu));
}

int main(int argc, char **argv) {
  if (argc == 3 && argv[1][0] == 'f') {
    uint64_t stride = strtoull(argv[2], NULL, 0);
    if (stride == 0) return 2;
    for (uint64_t bits = 0; bits < ((uint64_t)1 << 32); bits += stride)
      put_le((uint32_t)bits, 4);
  } else if (argc == 4 && argv[1][0] == 'c') {
    int width = atoi(argv[2]);
    uint64_t count = strtoull(argv[3], NULL, 0);
    if (width < 1 || width > 4) return 2;
    for (uint64_t c = 0; c < count; c++) put_le((uint32_t)c, width);
  } else if (argc == 3 && argv[1][0] == 'm') {
    uint64_t count = strtoull(argv[2], NULL, 0);
    for (uint64_t i = 0; i < count; i++) {
      uint32_t man = (uint32_t)(i * 2654435761u) & 0x7FFFFFu; /* Knuth's hash */
      uint32_t exp = (uint32_t)(127 - 8 + i % 16);
      uint32_t sign = (uint32_t)(i & 1) << 31;
      put_le(sign | exp << 23 | man, 4);
    }
  } else {
    fputs("usage: gen_data floats STRIDE | codes WIDTH COUNT | mixed COUNT\n",
          stderr);
    return 2;
  }
  return fflush(stdout) == 0 ? 0 : 1;
}
