/* The accumulation models by name: the text a recipe or a script gives
 * (exmy_accum_model_parse) and back (exmy_accum_model_format). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/accum_core.h"
#include "lib/exmy.h"

/* The named models, as calibrated against the H100's cuBLASLt FP8 GEMM
 * (lib/accum_core.h, cuda/NOTES.md).  hopper: with fast accumulation (the
 * running sum never promoted); hopper-split: without it, the partial sum
 * promoted to float32 every 128 products (as DeepSeek-V3 and Transformer
 * Engine's split accumulator do).  k_slice is 0: cuBLASLt chooses its split-K
 * per shape (none measured up to K = 4096 at 64 x 64; 2816 at K = 16384), so
 * no name can carry it; `kslice:N` sets it for one shape.  emin_a / emin_b
 * are not in the text: they are the operands' formats' (exmy_accum_operand_emin),
 * set by the GEMM's caller; 0 here. */
static const struct {
  const char *name;
  exmy_accum_model model;
} named[] = {
    {"fp32", {EXMY_ACCUM_FP32, 0, 0, 0, 0, 0, 0, 0, 0, 0}},
    {"hopper", {32, 14, 14, EXMY_ACCUM_TRUNCATE, 0, 1, EXMY_ACCUM_ALIGN_INPUTS, 0, 0, 0}},
    {"hopper-split", {32, 14, 14, EXMY_ACCUM_TRUNCATE, 128, 1, EXMY_ACCUM_ALIGN_INPUTS, 0, 0, 0}},
};

/* The keys of an explicit model, each an int field of exmy_accum_model: a
 * number, or one of two words (names[v] for the values 0 and 1). */
static const struct {
  const char *key;
  size_t offset;
  const char *names[2];
} keys[] = {
    {"group", offsetof(exmy_accum_model, group), {NULL, NULL}},
    {"bits", offsetof(exmy_accum_model, product_bits), {NULL, NULL}},
    {"sum", offsetof(exmy_accum_model, sum_bits), {NULL, NULL}},
    {"round", offsetof(exmy_accum_model, round), {"trunc", "nearest"}},
    {"promote", offsetof(exmy_accum_model, promote_every), {NULL, NULL}},
    {"align", offsetof(exmy_accum_model, align_sum), {NULL, NULL}},
    {"align_to", offsetof(exmy_accum_model, align_exp), {"product", "inputs"}},
    {"kslice", offsetof(exmy_accum_model, k_slice), {NULL, NULL}},
};
_Static_assert(EXMY_ACCUM_TRUNCATE == 0 && EXMY_ACCUM_NEAREST_EVEN == 1, "round's names");
_Static_assert(EXMY_ACCUM_ALIGN_PRODUCT == 0 && EXMY_ACCUM_ALIGN_INPUTS == 1, "align_to's names");

int exmy_accum_model_parse(const char *text, exmy_accum_model *out) {
  if (!text || !out) return -1;
  for (size_t i = 0; i < sizeof named / sizeof *named; i++)
    if (!strcmp(text, named[i].name)) {
      *out = named[i].model;
      return 0;
    }
  exmy_accum_model m = named[1].model; /* keys not given: hopper's */
  unsigned seen = 0;
  const char *p = text;
  while (*p) {
    const char *colon = strchr(p, ':');
    if (!colon) return -1;
    size_t k = 0;
    while (k < sizeof keys / sizeof *keys &&
           !(strlen(keys[k].key) == (size_t)(colon - p) && !strncmp(keys[k].key, p, colon - p)))
      k++;
    if (k == sizeof keys / sizeof *keys || seen & (1u << k)) return -1; /* unknown, repeated */
    seen |= 1u << k;
    const char *value = colon + 1, *end = value + strcspn(value, ",");
    long v = -1;
    if (keys[k].names[0]) {
      for (int r = 0; r < 2; r++)
        if (strlen(keys[k].names[r]) == (size_t)(end - value) &&
            !strncmp(keys[k].names[r], value, end - value))
          v = r;
    } else if (end > value && end - value <= 6 && strspn(value, "0123456789") == (size_t)(end - value)) {
      v = strtol(value, NULL, 10);
    }
    if (v < 0) return -1;
    *(int *)((char *)&m + keys[k].offset) = (int)v;
    p = *end ? end + 1 : end;
    if (*end && !*p) return -1; /* a trailing comma */
  }
  if (!seen || m.group == EXMY_ACCUM_FP32 || exmy_accum_model_check(&m)) return -1;
  *out = m;
  return 0;
}

int exmy_accum_model_format(const exmy_accum_model *m, char *buf, size_t len) {
  if (!m || exmy_accum_model_check(m)) return -1;
  int n;
  if (m->group == EXMY_ACCUM_FP32)
    n = snprintf(buf, len, "fp32");
  else
    n = snprintf(buf, len,
                 "group:%d,bits:%d,sum:%d,round:%s,promote:%d,align:%d,align_to:%s,kslice:%d",
                 m->group, m->product_bits, m->sum_bits, keys[3].names[m->round],
                 m->promote_every, m->align_sum, keys[6].names[m->align_exp], m->k_slice);
  return n >= 0 && (size_t)n < len ? 0 : -1;
}

int exmy_accum_operand_emin(const exmy_operand_quant *q) {
  return exmy_accum_operand_emin_scaled(q, NAN);
}

int exmy_accum_operand_emin_scaled(const exmy_operand_quant *q, float s) {
  if (!q || !q->enabled) return -126;
  if (q->scaling.kind == EXMY_SCALING_NONE) return q->format.emin;
  if (exmy_accum_pow2_scaled(q)) return exmy_accum_scaled_emin(q->format.emin, s);
  return -126;
}

bool exmy_accum_pow2_scaled(const exmy_operand_quant *q) {
  return q && q->enabled && exmy_accum_pow2_scaling(&q->scaling);
}

bool exmy_accum_pow2_scaling(const exmy_scaling *s) {
  return s->pow2 && (s->kind == EXMY_SCALING_TENSOR || s->kind == EXMY_SCALING_DELAYED);
}

bool exmy_accum_block_scaled(const exmy_operand_quant *q, const exmy_accum_model *m) {
  return q && q->enabled && exmy_accum_block_scaling(&q->scaling, m);
}

bool exmy_accum_block_scaling(const exmy_scaling *s, const exmy_accum_model *m) {
  return s && m && m->group != EXMY_ACCUM_FP32 && m->promote_every > 0 &&
         s->kind == EXMY_SCALING_GROUP && !s->dynamic_range_expansion &&
         s->group == m->promote_every;
}
