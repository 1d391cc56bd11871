/* The recipes' scale on the host: the current-scaling formula for a format
 * and the delayed-scaling state (Transformer Engine's DelayedScaling); the
 * arithmetic itself is lib/scale_core.h, shared with cuda/. */
#include <stdlib.h>
#include <string.h>

#include "cpu/exmy_cpu.h"
#include "lib/scale_core.h"

float exmy_scale_from_amax(const exmy_format *f, float amax, int margin,
                           bool pow2) {
  exmy_format_info info;
  exmy_format_get_info(f, &info);
  return exmy_core_scale_from_amax(info.max, amax, margin, pow2);
}

exmy_delayed_state *exmy_delayed_state_new(int history_len) {
  if (history_len < 1) return NULL;
  exmy_delayed_state *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  s->amax_history = calloc((size_t)history_len, sizeof(float));
  if (!s->amax_history) {
    free(s);
    return NULL;
  }
  s->history_len = history_len;
  s->latest = history_len - 1; /* the first record lands in slot 0 */
  s->scale = 1.0f;
  s->scale_inv = 1.0f;
  return s;
}

void exmy_delayed_state_free(exmy_delayed_state *s) {
  if (!s) return;
  free(s->amax_history);
  free(s);
}

bool exmy_delayed_state_equal(const exmy_delayed_state *a, const exmy_delayed_state *b) {
  return a->history_len == b->history_len && a->count == b->count && a->latest == b->latest &&
         !memcmp(&a->scale, &b->scale, sizeof(float)) &&
         !memcmp(&a->scale_inv, &b->scale_inv, sizeof(float)) &&
         !memcmp(a->amax_history, b->amax_history, sizeof(float) * (size_t)a->history_len);
}

void exmy_delayed_state_update(exmy_delayed_state *s, const exmy_format *f,
                               const exmy_scaling *sc, float amax) {
  exmy_format_info info;
  exmy_format_get_info(f, &info);
  exmy_core_delayed_advance(s->history_len, &s->count, &s->latest);
  exmy_core_delayed_update(s->amax_history, s->history_len, s->latest, amax,
                           sc->history_most_recent, info.max, sc->margin,
                           sc->pow2, &s->scale, &s->scale_inv);
}
