/* CRC32C, the checkpoints' checksum: the catalogued check value and RFC 3720's
 * test vectors (B.4), and the instruction path equal to the table path on
 * every length and alignment, whole or in pieces. */
#include "tests/check_suite.h"
#include <stdint.h>
#include <string.h>

#include "experiments/trainer/crc32c.h"
#include "tests/test_rng.h"

START_TEST(test_known_values) {
  ck_assert_uint_eq(crc32c(0, "123456789", 9), 0xE3069283u);
  ck_assert_uint_eq(crc32c_portable(0, "123456789", 9), 0xE3069283u);
  unsigned char buf[32];
  memset(buf, 0, sizeof buf);
  ck_assert_uint_eq(crc32c(0, buf, 32), 0x8A9136AAu); /* 32 bytes of zeros */
  memset(buf, 0xff, sizeof buf);
  ck_assert_uint_eq(crc32c(0, buf, 32), 0x62A8AB43u); /* 32 bytes of ones */
  for (int i = 0; i < 32; i++) buf[i] = (unsigned char)i;
  ck_assert_uint_eq(crc32c(0, buf, 32), 0x46DD794Eu); /* 0, 1, ..., 31 */
  ck_assert_uint_eq(crc32c(0, buf, 0), 0u);
}
END_TEST

START_TEST(test_paths_agree) {
  unsigned char buf[300];
  uint64_t s = 12345;
  for (size_t i = 0; i < sizeof buf; i++) {
    buf[i] = (unsigned char)(test_rng_next(&s) >> 56);
  }
  for (size_t off = 0; off < 9; off++)
    for (size_t n = 0; n + off <= sizeof buf; n++) {
      const uint32_t want = crc32c_portable(0, buf + off, n);
      ck_assert_uint_eq(crc32c(0, buf + off, n), want);
      const size_t cut = n / 3; /* in two pieces */
      ck_assert_uint_eq(crc32c(crc32c(0, buf + off, cut), buf + off + cut, n - cut), want);
    }
}
END_TEST

int main(void) {
  const TTest *const tests[] = {test_known_values, test_paths_agree, NULL};
  return run_suite(suite_of("crc32c", 0, tests), false);
}
