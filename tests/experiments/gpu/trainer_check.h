/* Helpers of the GPU trainer's tests (trainer_gpu_test, accum_fp8_gpu_test):
 * a recipe from config assignments, and a bitwise comparison of results. */
#ifndef TESTS_EXPERIMENTS_GPU_TRAINER_CHECK_H
#define TESTS_EXPERIMENTS_GPU_TRAINER_CHECK_H

#include <check.h>
#include <stddef.h>
#include <string.h>

#include "experiments/trainer/config.h"
#include "experiments/trainer/recipe.h"

/* *rc = the recipe of the default config with the assignments `sets`
 * (NULL-terminated) applied; the test fails on any error. */
static inline void make_recipe(recipe *rc, const char *const *sets) {
  config cfg;
  char err[256] = "";
  config_defaults(&cfg);
  for (int i = 0; sets[i]; i++)
    ck_assert_msg(!config_set_assignment(&cfg, sets[i], err, sizeof err), "%s", err);
  ck_assert_msg(!recipe_from_config(rc, &cfg, 77, err, sizeof err), "%s", err);
}

/* How many of a[0..n) and b[0..n) differ in their bits. */
static inline size_t count_bit_diffs(const float *a, const float *b, size_t n) {
  size_t d = 0;
  for (size_t i = 0; i < n; i++)
    if (memcmp(&a[i], &b[i], sizeof(float))) d++;
  return d;
}

#endif
