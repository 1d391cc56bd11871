/* CRC32C, the checkpoints' checksum: the catalogued check value and RFC 3720's
 * test vectors (B.4), and the instruction path equal to the table path on
 * every length and alignment, whole or in pieces. */
#include <check.h>
#include <stdint.h>
#include <string.h>

#include "experiments/crc32c.h"

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
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    buf[i] = (unsigned char)(s >> 56);
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
  Suite *s = suite_create("crc32c");
  TCase *tc = tcase_create("crc32c");
  tcase_add_test(tc, test_known_values);
  tcase_add_test(tc, test_paths_agree);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_set_fork_status(sr, CK_NOFORK);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
