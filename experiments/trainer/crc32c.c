/* CRC32C: SSE4.2's crc32 instruction where the build targets it (x86-64-v2
 * and up), else a byte-wise table. */
#include "experiments/trainer/crc32c.h"

#include <string.h>
#ifdef __SSE4_2__
#include <nmmintrin.h>
#endif

static uint32_t table[256];

static void make_table(void) {
  for (uint32_t i = 0; i < 256; i++) {
    uint32_t c = i;
    for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    table[i] = c;
  }
}

uint32_t crc32c_portable(uint32_t crc, const void *data, size_t n) {
  if (!table[1]) make_table(); /* idempotent: a race writes the same values */
  const unsigned char *p = data;
  crc = ~crc;
  for (size_t i = 0; i < n; i++) crc = (crc >> 8) ^ table[(crc ^ p[i]) & 0xff];
  return ~crc;
}

uint32_t crc32c(uint32_t crc, const void *data, size_t n) {
#ifdef __SSE4_2__
  const unsigned char *p = data;
  uint64_t c = ~crc;
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t w;
    memcpy(&w, p, 8);
    c = _mm_crc32_u64(c, w);
  }
  uint32_t c32 = (uint32_t)c;
  for (; n; n--, p++) c32 = _mm_crc32_u8(c32, *p);
  return ~c32;
#else
  return crc32c_portable(crc, data, n);
#endif
}
