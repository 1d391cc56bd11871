/* What every Check unit test's main does: a suite of one test case from a
 * list of tests, and running a suite to the process's exit status. */
#ifndef EXMY_TESTS_CHECK_SUITE_H
#define EXMY_TESTS_CHECK_SUITE_H

#include <check.h>
#include <stdbool.h>
#include <stddef.h>

/* A suite `name` of one test case: `loop` for i in [0, loop_end) if it is
 * not NULL, then `tests` (NULL-terminated), each allowed `timeout` seconds
 * (0: Check's default, CK_DEFAULT_TIMEOUT). */
static inline Suite *suite_of_loop(const char *name, double timeout, const TTest *loop,
                                   int loop_end, const TTest *const *tests) {
  Suite *s = suite_create(name);
  TCase *tc = tcase_create(name);
  if (timeout > 0) tcase_set_timeout(tc, timeout);
  if (loop) tcase_add_loop_test(tc, loop, 0, loop_end);
  for (; *tests; tests++) tcase_add_test(tc, *tests);
  suite_add_tcase(s, tc);
  return s;
}

static inline Suite *suite_of(const char *name, double timeout,
                              const TTest *const *tests) {
  return suite_of_loop(name, timeout, NULL, 0, tests);
}

/* Runs every test of s; returns 0 if all passed, 1 otherwise.  fork: each
 * test in a child process (Check's default: a crash fails one test, and
 * timeouts apply); false for the GPU tests, whose CUDA context does not
 * survive a fork. */
static inline int run_suite(Suite *s, bool fork) {
  SRunner *r = srunner_create(s);
  if (!fork) srunner_set_fork_status(r, CK_NOFORK);
  srunner_run_all(r, CK_NORMAL);
  const int failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed == 0 ? 0 : 1;
}

#endif /* EXMY_TESTS_CHECK_SUITE_H */
