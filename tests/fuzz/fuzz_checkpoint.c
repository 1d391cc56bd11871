/*
 * libFuzzer harness: the checkpoint reader (experiments/trainer/checkpoint.c) on
 * arbitrary files, against a tiny model (vocab 4, dim 4, one layer: 116
 * parameters) under a delayed-scaling recipe (histories of 2), so that the
 * file is short and most of it is delayed-scaling states.
 *
 * The first byte chooses how the rest is read: even, as it is (almost every
 * change then fails a checksum); odd, with every checksum recomputed from the
 * lengths the header gives (a forger's file: the checks behind the checksums
 * are reached).  Properties beyond "no crash": a refused file leaves the
 * delayed-scaling states as they were and gets a one-line message; after an
 * accepted one, the states take updates (where a bad history position would
 * write outside its buffer) and the position checks run.
 *
 * Built with -DFUZZ_MAKE_SEEDS it is a program instead: `fuzz_checkpoint DIR`
 * writes the seed corpus (well-formed checkpoints, both modes) into DIR.
 */
#define _GNU_SOURCE
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cpu/exmy_cpu.h"
#include "experiments/trainer/checkpoint.h"
#include "experiments/trainer/config.h"
#include "experiments/trainer/crc32c.h"
#include "experiments/trainer/recipe.h"
#include "tests/fuzz/fuzz_file.h"

static const char recipe_text[] =
    "format_w = e4m3\nformat_a = e4m3\nformat_g = e5m2\nscaling = delayed\n"
    "amax_history = 2\n";

static struct {
  config cfg;
  char *config_text;
  model m;
  recipe rc;
  tq_site *sites;
  int n_sites;
  float *mom1, *mom2;
} S;

static void setup(void) {
  char err[512] = "";
  config_defaults(&S.cfg);
  if (config_load_text(&S.cfg, recipe_text, err, sizeof err) ||
      recipe_from_config(&S.rc, &S.cfg, 1, err, sizeof err)) {
    fprintf(stderr, "setup: %s\n", err);
    abort();
  }
  const model_config mc = {4, 4, 1, 2, 1, 2, 2};
  if (model_init(&S.m, &mc, 1)) abort();
  S.sites = recipe_make_sites(&S.rc, &mc);
  S.n_sites = model_num_sites(&mc);
  S.mom1 = calloc(S.m.num_params, sizeof(float));
  S.mom2 = calloc(S.m.num_params, sizeof(float));
  size_t len = 0;
  FILE *f = open_memstream(&S.config_text, &len);
  config_write(&S.cfg, f);
  fclose(f);
  if (!S.sites || !S.mom1 || !S.mom2) abort();
}

static char *states(size_t *len) {
  char *buf = NULL;
  FILE *f = open_memstream(&buf, len);
  if (!f || sites_state_write(S.sites, S.n_sites, f)) abort();
  fclose(f);
  return buf;
}

/* Every delayed-scaling state takes an update, as the next step would. */
static void update_states(float amax) {
  const exmy_scaling sc = {.kind = EXMY_SCALING_DELAYED};
  for (int i = 0; i < S.n_sites; i++)
    for (int u = 0; u < USES_PER_SITE; u++)
      if (S.sites[i].op[u].delayed)
        exmy_delayed_state_update(S.sites[i].op[u].delayed, &S.sites[i].op[u].format, &sc, amax);
}

/* The checksums a header's lengths imply, recomputed over what the file has. */
static void reseal(uint8_t *p, size_t size) {
  if (size < sizeof(ckpt_header)) return;
  ckpt_header h;
  memcpy(&h, p, sizeof h);
  const uint64_t len[CKPT_SECTIONS] = {h.config_text_len, h.num_params * 4, h.num_params * 4,
                                       h.num_params * 4, h.states_bytes};
  uint64_t off = sizeof h;
  for (int s = 0; s < CKPT_SECTIONS; s++) {
    const uint64_t n = off >= size ? 0 : len[s] < size - off ? len[s] : size - off;
    h.section_crc[s] = n ? crc32c(0, p + off, n) : 0;
    off = off + len[s] < off ? UINT64_MAX : off + len[s]; /* no wrap-around */
  }
  h.header_crc = 0;
  h.header_crc = crc32c(0, &h, sizeof h);
  memcpy(p, &h, sizeof h);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static int ready;
  if (!ready) setup(), ready = 1;
  if (size < 1) return 0;
  uint8_t *file = malloc(size);
  if (!file) abort();
  memcpy(file, data + 1, size - 1);
  if (data[0] & 1) reseal(file, size - 1);
  const char *path = as_file("ckpt", file, size - 1);
  free(file);

  char err[512] = "";
  ckpt_header h;
  char *text = NULL;
  if (checkpoint_read_config(path, &h, &text, err, sizeof err)) {
    one_line(err);
  } else {
    config saved;
    config_defaults(&saved);
    err[0] = 0;
    if (config_load_text(&saved, text, err, sizeof err)) one_line(err);
  }
  free(text);

  /* every input starts from the same states (a crash must not depend on the inputs before) */
  static char *baseline;
  static size_t baseline_len;
  if (!baseline) baseline = states(&baseline_len);
  if (sites_state_load(S.sites, S.n_sites, baseline, baseline_len, err, sizeof err)) abort();

  size_t before_len, after_len;
  char *before = states(&before_len);
  err[0] = 0;
  if (checkpoint_load(path, &h, &S.m, S.mom1, S.mom2, S.sites, S.n_sites, err, sizeof err)) {
    one_line(err);
    char *after = states(&after_len);
    if (after_len != before_len || memcmp(before, after, before_len)) {
      fprintf(stderr, "a refused checkpoint changed the delayed-scaling states\n");
      abort();
    }
    free(after);
  } else {
    err[0] = 0;
    if (checkpoint_check_position(&h, 100, 50, 4, err, sizeof err)) one_line(err);
    for (int k = 0; k < 6; k++) update_states(0.5f + k);
  }
  free(before);
  return 0;
}

#ifdef FUZZ_MAKE_SEEDS
/* Seeds: the model's checkpoint with fresh states, partly filled, full and
 * wrapped histories; each with mode bytes 0 (as is) and 1 (resealed). */
int main(int argc, char **argv) {
  if (argc != 2) return 2;
  setup();
  const int updates[] = {0, 1, 2, 5};
  for (size_t i = 0; i < sizeof updates / sizeof *updates; i++) {
    recipe_free_sites(S.sites, S.n_sites);
    S.sites = recipe_make_sites(&S.rc, &S.m.cfg);
    for (int k = 0; k < updates[i]; k++) update_states(1.0f + k);
    ckpt_header h = {.model_cfg = {4, 4, 1, 2, 1, 2, 2}, .step = updates[i],
                     .data_index = (uint64_t)updates[i], .tokens_seen = 4.0 * updates[i],
                     .running_min = updates[i] ? 2.5 : INFINITY};
    char tmp[4200], *buf = NULL;
    snprintf(tmp, sizeof tmp, "%s/ckpt.tmpseed", argv[1]);
    if (checkpoint_save(tmp, &h, S.config_text, &S.m, S.mom1, S.mom2, S.sites, S.n_sites))
      return 1;
    FILE *f = fopen(tmp, "rb");
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    rewind(f);
    buf = malloc((size_t)n);
    if (fread(buf, 1, (size_t)n, f) != (size_t)n) return 1;
    fclose(f);
    unlink(tmp);
    for (int mode = 0; mode < 2; mode++) {
      char name[4300];
      snprintf(name, sizeof name, "%s/updates%d-mode%d", argv[1], updates[i], mode);
      f = fopen(name, "wb");
      unsigned char b = (unsigned char)mode;
      if (!f || fwrite(&b, 1, 1, f) != 1 || fwrite(buf, 1, (size_t)n, f) != (size_t)n || fclose(f))
        return 1;
    }
    free(buf);
  }
  return 0;
}
#endif
