/*
 * libFuzzer harness: the trainer's config parser (experiments/trainer/config.c) on
 * arbitrary bytes, read as a file.  Properties beyond "no crash": a refused
 * file gets one line of message; an accepted one, written back out
 * (config_write) and read again (config_load_text), gives the same
 * configuration; the recipe built from it is refused or accepted without a
 * crash; a single `--set` assignment of the same bytes likewise.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "experiments/trainer/config.h"
#include "experiments/trainer/recipe.h"
#include "tests/fuzz/fuzz_file.h"

static char *written(const config *c) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  if (!f) abort();
  config_write(c, f);
  fclose(f);
  return buf;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *path = as_file("config", data, size);

  config c;
  config_defaults(&c);
  char err[512] = "";
  if (config_load_file(&c, path, err, sizeof err)) {
    one_line(err);
  } else {
    char *text = written(&c);
    config again;
    config_defaults(&again);
    if (config_load_text(&again, text, err, sizeof err)) {
      fprintf(stderr, "config_write's text is refused: %s\n", err);
      abort();
    }
    char *text2 = written(&again);
    if (strcmp(text, text2)) {
      fprintf(stderr, "config_write/config_load_text do not round-trip:\n%s\n---\n%s\n", text, text2);
      abort();
    }
    free(text);
    free(text2);
    recipe r;
    err[0] = 0;
    if (recipe_from_config(&r, &c, 1, err, sizeof err)) one_line(err);
  }

  /* the same bytes as one --set key=value */
  char *assignment = malloc(size + 1);
  if (!assignment) abort();
  memcpy(assignment, data, size);
  assignment[size] = 0;
  config_defaults(&c);
  err[0] = 0;
  if (config_set_assignment(&c, assignment, err, sizeof err)) one_line(err);
  free(assignment);
  return 0;
}
