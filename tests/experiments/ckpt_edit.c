/*
 * ckpt_edit: damages or forges checkpoints for the tests (the trainer must
 * refuse each one with exit 2).
 *
 *   ckpt_edit FILE offset WHAT           print the byte offset of a section (header text
 *                                        params mom1 mom2 states end) or header field
 *                                        (step data_index)
 *   ckpt_edit FILE flip OFFSET           flip the low bit of one byte (no checksum fixed)
 *   ckpt_edit FILE header FIELD VALUE    set a header field (step, data_epoch,
 *                                        data_index, tokens_seen, running_min, version),
 *                                        checksums recomputed: a forged, well-formed file
 *   ckpt_edit FILE state K FIELD VALUE   set a field of the K-th delayed-scaling state
 *                                        (history_len, count, latest, scale, scale_inv,
 *                                        amax0), checksums recomputed
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "experiments/trainer/checkpoint.h"
#include "experiments/trainer/crc32c.h"

static unsigned char *data;
static size_t size;

static void fail(const char *msg) {
  fprintf(stderr, "ckpt_edit: %s\n", msg);
  exit(1);
}

static ckpt_header *header(void) { return (ckpt_header *)data; }

static size_t section_offset(int s) {
  const ckpt_header *h = header();
  size_t off = sizeof *h;
  const size_t len[CKPT_SECTIONS] = {h->config_text_len, h->num_params * 4, h->num_params * 4,
                                     h->num_params * 4, h->states_bytes};
  for (int i = 0; i < s; i++) off += len[i];
  return off;
}

/* Recomputes every section's checksum and the header's (a forger's move). */
static void reseal(void) {
  ckpt_header *h = header();
  for (int s = 0; s < CKPT_SECTIONS; s++)
    h->section_crc[s] =
        crc32c(0, data + section_offset(s), section_offset(s + 1) - section_offset(s));
  h->header_crc = 0;
  h->header_crc = crc32c(0, h, sizeof *h);
}

int main(int argc, char **argv) {
  if (argc < 3) fail("usage: ckpt_edit FILE offset|flip|header|state ...");
  FILE *f = fopen(argv[1], "rb");
  if (!f) fail("cannot open the file");
  fseek(f, 0, SEEK_END);
  size = (size_t)ftell(f);
  rewind(f);
  data = malloc(size);
  if (!data || fread(data, 1, size, f) != size || size < sizeof(ckpt_header)) fail("cannot read");
  fclose(f);
  const char *cmd = argv[2];
  if (!strcmp(cmd, "offset") && argc == 4) {
    static const char *const names[] = {"header", "text", "params", "mom1", "mom2", "states",
                                        "end"};
    for (int s = 0; s < 7; s++)
      if (!strcmp(argv[3], names[s])) {
        printf("%zu\n", s == 0 ? 0 : section_offset(s - 1));
        return 0;
      }
    if (!strcmp(argv[3], "step")) printf("%zu\n", offsetof(ckpt_header, step));
    else if (!strcmp(argv[3], "data_index")) printf("%zu\n", offsetof(ckpt_header, data_index));
    else fail("unknown section or field");
    return 0;
  }
  if (!strcmp(cmd, "flip") && argc == 4) {
    size_t off = strtoull(argv[3], NULL, 10);
    if (off >= size) fail("offset beyond the file");
    data[off] ^= 1;
  } else if (!strcmp(cmd, "header") && argc == 5) {
    ckpt_header *h = header();
    const char *k = argv[3], *v = argv[4];
    if (!strcmp(k, "step")) h->step = strtoll(v, NULL, 10);
    else if (!strcmp(k, "data_epoch")) h->data_epoch = strtoull(v, NULL, 10);
    else if (!strcmp(k, "data_index")) h->data_index = strtoull(v, NULL, 10);
    else if (!strcmp(k, "tokens_seen")) h->tokens_seen = strtod(v, NULL);
    else if (!strcmp(k, "running_min")) h->running_min = strtod(v, NULL);
    else if (!strcmp(k, "version")) h->version = (uint32_t)strtoul(v, NULL, 10);
    else fail("unknown header field");
    reseal();
  } else if (!strcmp(cmd, "state") && argc == 6) {
    const int k = atoi(argv[3]);
    unsigned char *p = data + section_offset(CKPT_STATES), *end = data + section_offset(5);
    for (int i = 0; i < k; i++) { /* int32 len, count, latest; float scale, inv; float[len] */
      int32_t len;
      if (p + 20 > end) fail("no such state");
      memcpy(&len, p, 4);
      p += 20 + 4 * (size_t)len;
    }
    if (p + 20 > end) fail("no such state");
    static const char *const fields[] = {"history_len", "count", "latest", "scale", "scale_inv",
                                         "amax0"};
    int i = 0;
    while (i < 6 && strcmp(argv[4], fields[i])) i++;
    if (i == 6) fail("unknown state field");
    if (i < 3) {
      int32_t v = (int32_t)strtol(argv[5], NULL, 10);
      memcpy(p + 4 * i, &v, 4);
    } else {
      float v = strtof(argv[5], NULL);
      memcpy(p + 4 * i, &v, 4);
    }
    reseal();
  } else {
    fail("unknown command");
  }
  f = fopen(argv[1], "wb");
  if (!f || fwrite(data, 1, size, f) != size || fclose(f)) fail("cannot write");
  return 0;
}
