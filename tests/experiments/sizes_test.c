/* The named sizes (model_named_size): each preset has the shape and the
 * parameter count that experiments/README.md and model.c's comments state,
 * counted by model_param_sizes (the sizes the model allocates) against the
 * LLaMA formula written out here, and against the published figures: 1b with
 * TinyLlama's vocabulary and context is TinyLlama-1.1B's 1,100,048,384.  The
 * shapes the PyTorch reference (llama_torch.py's SIZES) and bench_gpu.sh
 * write out for the sizes they time are model.c's. */
#include "tests/check_suite.h"
#include <stdio.h>
#include <string.h>

#include "experiments/trainer/model.h"

static size_t allocated(const model_config *c) {
  size_t sizes[NUM_PARAM_TENSORS], n = 0;
  model_param_sizes(c, sizes);
  for (int t = 0; t < NUM_PARAM_TENSORS; t++) n += sizes[t];
  return n;
}

/* embedding and LM head; per layer wq, wo (C x C), wk, wv (KV x C), w1, w3,
 * w2 (C x H) and two RMSNorm gains; the final RMSNorm */
static size_t llama_formula(const model_config *c) {
  const size_t V = c->vocab, C = c->dim, L = c->n_layers, H = c->hidden,
               KV = (size_t)c->n_kv_heads * (c->dim / c->n_heads);
  return 2 * V * C + L * (2 * C * C + 2 * KV * C + 3 * C * H + 2 * C) + C;
}

static const struct {
  const char *name;
  model_config shape; /* V C L NH NKV H T */
  size_t params;
} presets[] = {
    {"test", {256, 16, 2, 2, 1, 32, 16}, 12880},                       /* 12.9k */
    {"tiny", {256, 128, 6, 4, 4, 384, 128}, 1345152},                  /* 1.3M */
    {"small", {256, 384, 10, 6, 6, 1152, 256}, 19373952},              /* 19.4M */
    {"120m", {256, 768, 12, 12, 12, 2048, 1024}, 85347072},            /* 85M */
    {"120m-32k", {32000, 768, 12, 12, 1, 2048, 2048}, 121129728},      /* 121.1M */
    {"350m", {256, 1024, 24, 16, 16, 2816, 1024}, 308855808},          /* 308.9M */
    {"1b", {256, 2048, 22, 32, 4, 5632, 1024}, 970024960},             /* 970.0M */
};

START_TEST(presets_shape_and_count) {
  model_config c;
  ck_assert_msg(model_named_size(presets[_i].name, &c) == 0, "no size '%s'", presets[_i].name);
  const model_config *w = &presets[_i].shape;
  ck_assert_msg(c.vocab == w->vocab && c.dim == w->dim && c.n_layers == w->n_layers &&
                    c.n_heads == w->n_heads && c.n_kv_heads == w->n_kv_heads &&
                    c.hidden == w->hidden && c.seq_len == w->seq_len,
                "%s: shape V %d C %d L %d NH %d NKV %d H %d T %d", presets[_i].name, c.vocab,
                c.dim, c.n_layers, c.n_heads, c.n_kv_heads, c.hidden, c.seq_len);
  ck_assert_uint_eq(allocated(&c), llama_formula(&c));
  ck_assert_msg(allocated(&c) == presets[_i].params, "%s: %zu parameters, documented %zu",
                presets[_i].name, allocated(&c), presets[_i].params);
  printf("%-9s %13zu parameters\n", presets[_i].name, allocated(&c));
}
END_TEST

START_TEST(one_b_is_tinyllama) {
  model_config c;
  ck_assert_int_eq(model_named_size("1b", &c), 0);
  c.vocab = 32000, c.seq_len = 2048; /* TinyLlama's tokenizer and context */
  ck_assert_uint_eq(allocated(&c), 1100048384u);
}
END_TEST

START_TEST(unknown_size_refused) {
  model_config c;
  ck_assert_int_eq(model_named_size("2b", &c), -1);
}
END_TEST

/* Every line of `path` that starts (after blanks) with `key` followed by the
 * shape as "V, C, L, NH, NKV, H, T" (llama_torch.py) or "V C L NH NKV H T"
 * after `<<< "` (bench_gpu.sh) must give size `name`'s shape; returns how many
 * lines named it. */
static int copies_agree(const char *path, const char *name, const char *key, const char *after) {
  FILE *f = fopen(path, "r");
  ck_assert_msg(f != NULL, "cannot open %s", path);
  model_config c;
  ck_assert_int_eq(model_named_size(name, &c), 0);
  const int want[7] = {c.vocab, c.dim, c.n_layers, c.n_heads, c.n_kv_heads, c.hidden, c.seq_len};
  char line[512];
  int found = 0;
  while (fgets(line, sizeof line, f)) {
    const char *p = line + strspn(line, " \t");
    if (strncmp(p, key, strlen(key))) continue;
    const char *q = strstr(p, after);
    ck_assert_msg(q != NULL, "%s: no shape after '%s' in: %s", path, after, line);
    q += strlen(after);
    int v[7];
    const int got = strchr(q, ',') && strchr(q, ',') < strchr(q, ')')
                        ? sscanf(q, "%d, %d, %d, %d, %d, %d, %d", &v[0], &v[1], &v[2], &v[3],
                                 &v[4], &v[5], &v[6])
                        : sscanf(q, "%d %d %d %d %d %d %d", &v[0], &v[1], &v[2], &v[3], &v[4],
                                 &v[5], &v[6]);
    ck_assert_msg(got == 7 && !memcmp(v, want, sizeof v), "%s: %s is not model.c's %s: %s", path,
                  key, name, line);
    found++;
  }
  fclose(f);
  return found;
}

START_TEST(copies_of_the_shapes_agree) {
  const char *names[] = {"test", "tiny", "small", "120m", "350m", "1b"};
  for (int i = 0; i < 6; i++) {
    char key[64];
    snprintf(key, sizeof key, "\"%s\":", names[i]);
    ck_assert_msg(copies_agree("experiments/reference/llama_torch.py", names[i], key, "(") == 1,
                  "llama_torch.py: SIZES has no single row %s", key);
  }
  for (int i = 3; i < 6; i++) {
    char key[64];
    snprintf(key, sizeof key, "%s) read -r V C L NH NKV H T", names[i]);
    ck_assert_msg(copies_agree("experiments/gpu/bench_gpu.sh", names[i], key, "<<< \"") == 1,
                  "bench_gpu.sh: no single shape line for %s", names[i]);
  }
}
END_TEST

int main(void) {
  const TTest *const tests[] = {one_b_is_tinyllama, unknown_size_refused,
                                copies_of_the_shapes_agree, NULL};
  return run_suite(suite_of_loop("sizes", 60, presets_shape_and_count,
                                 (int)(sizeof presets / sizeof presets[0]), tests),
                   true);
}
