/* Scale arithmetic shared by the recipes: the current-scaling formula and the
 * delayed-scaling state (Transformer Engine's DelayedScaling). */
#include <math.h>
#include <stdlib.h>

#include "lib/exmy.h"

float exmy_scale_from_amax(const exmy_format *f, float amax, int margin,
                           bool pow2) {
  exmy_format_info info;
  exmy_format_get_info(f, &info);
  if (!(amax > 0) || !isfinite(amax)) return 1.0f;
  /* TE: sf = (fp8_max / amax) / 2^margin, in float32 */
  float s = ldexpf(info.max / amax, -margin);
  if (!isfinite(s) || !(s > 0)) return 1.0f;
  if (pow2) {
    int e;
    frexpf(s, &e); /* s = m · 2^e, m in [0.5, 1): floor(log2 s) = e - 1 */
    s = ldexpf(1.0f, e - 1);
  }
  return s;
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

void exmy_delayed_state_update(exmy_delayed_state *s, const exmy_format *f,
                               const exmy_scaling *sc, float amax) {
  s->latest = (s->latest + 1) % s->history_len;
  s->amax_history[s->latest] = amax;
  if (s->count < s->history_len) s->count++;
  float use = amax;
  if (!sc->history_most_recent)
    for (int i = 0; i < s->history_len; i++)
      if (s->amax_history[i] > use) use = s->amax_history[i];
  /* TE keeps the previous scale where amax is 0 or not finite */
  if (!(use > 0) || !isfinite(use)) return;
  float scale = exmy_scale_from_amax(f, use, sc->margin, sc->pow2);
  s->scale = scale;
  s->scale_inv = 1.0f / scale;
}
