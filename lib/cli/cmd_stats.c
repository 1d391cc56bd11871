/* exmy stats: what a quantization does to a tensor, one statistic a line. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lib/cli/io.h"
#include "lib/cli/options.h"
#include "lib/exmy.h"

const char cli_stats_help[] =
    "usage: exmy stats --format F [--round R] [--saturate] [--no-subnormals]\n"
    "                  [--seed S] [--offset O] [--sr-bits B]\n"
    "                  [--scaling none|tensor|mx|group:G] [--margin M] [--pow2] IN\n"
    "\n"
    "Quantizes the float32 values of IN (raw little-endian, '-' = stdin; read\n"
    "whole into memory) to format F under the scaling recipe and prints one\n"
    "'name value' line per statistic of exmy_tensor_stats (lib/exmy.h): n,\n"
    "amax, min_nonzero, underflow_ratio, subnormal_ratio, overflow_ratio, mse,\n"
    "rel_l2, cosine, sqnr_db, scale (nan where scales are per block/group).\n"
    "\n"
    "  --scaling S      none (default); tensor: per-tensor current scaling;\n"
    "                   mx: OCP MX blocks of 32; group:G: a scale per G\n"
    "                   consecutive values (G = 0: one group, the whole file)\n"
    "  --margin M       tensor/group: scale times 2^-M (default 0)\n"
    "  --pow2           tensor/group: round the scale down to a power of two\n"
    "  other options as in 'exmy quantize'.\n";

static long parse_long(const char *opt, const char *v, long lo, long hi) {
  char *end;
  errno = 0;
  long x = strtol(v, &end, 10);
  if (errno || end == v || *end || x < lo || x > hi)
    cli_fail("stats: %s wants an integer in %ld..%ld, got '%s'", opt, lo, hi, v);
  return x;
}

static unsigned long long parse_u64(const char *opt, const char *v) {
  char *end;
  errno = 0;
  unsigned long long x = strtoull(v, &end, 0);
  if (errno || end == v || *end || v[0] == '-')
    cli_fail("stats: %s wants a non-negative integer, got '%s'", opt, v);
  return x;
}

static void parse_scaling(const char *v, exmy_scaling *sc) {
  if (strcmp(v, "none") == 0) sc->kind = EXMY_SCALING_NONE;
  else if (strcmp(v, "tensor") == 0) sc->kind = EXMY_SCALING_TENSOR;
  else if (strcmp(v, "mx") == 0) sc->kind = EXMY_SCALING_MX;
  else if (strncmp(v, "group:", 6) == 0) {
    sc->kind = EXMY_SCALING_GROUP;
    sc->group = (int)parse_long("--scaling group:G", v + 6, 0, 1L << 30);
  } else {
    cli_fail("stats: --scaling wants none, tensor, mx or group:G, got '%s'", v);
  }
}

int cli_stats(int argc, char **argv) {
  exmy_format f;
  int have_format = 0;
  exmy_rounding_opts o = {0};
  exmy_scaling sc = {0};
  const char *in_path = NULL;
  int options_done = 0;
  for (int i = 1; i < argc; i++) {
    const char *arg = argv[i];
    if (options_done || arg[0] != '-' || strcmp(arg, "-") == 0) {
      if (in_path) cli_fail("stats: takes one input file, got '%s' and '%s'", in_path, arg);
      in_path = arg;
      continue;
    }
    if (strcmp(arg, "--") == 0) {
      options_done = 1;
      continue;
    }
    /* --name=value or --name value */
    char name[32];
    const char *value = NULL, *eq = strchr(arg, '=');
    size_t len = eq ? (size_t)(eq - arg) : strlen(arg);
    if (len >= sizeof name) cli_fail("stats: unknown option '%s'", arg);
    memcpy(name, arg, len);
    name[len] = '\0';
    const int flag = strcmp(name, "--saturate") == 0 || strcmp(name, "--no-subnormals") == 0 ||
                     strcmp(name, "--pow2") == 0;
    if (flag) {
      if (eq) cli_fail("stats: %s takes no value", name);
    } else if (eq) {
      value = eq + 1;
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      cli_fail("stats: %s needs a value", name);
    }
    if (strcmp(name, "--format") == 0) cli_parse_format("stats", value, &f), have_format = 1;
    else if (strcmp(name, "--round") == 0) {
      if (exmy_rounding_parse(value, &o.mode))
        cli_fail("stats: --round wants rne, rna, rz, ru, rd, ro or sr, got '%s'", value);
    } else if (strcmp(name, "--saturate") == 0) o.saturate = true;
    else if (strcmp(name, "--no-subnormals") == 0) o.flush_subnormals = true;
    else if (strcmp(name, "--pow2") == 0) sc.pow2 = true;
    else if (strcmp(name, "--seed") == 0) o.seed = parse_u64(name, value);
    else if (strcmp(name, "--offset") == 0) o.offset = parse_u64(name, value);
    else if (strcmp(name, "--sr-bits") == 0) o.sr_bits = (int)parse_long(name, value, 1, 32);
    else if (strcmp(name, "--margin") == 0) sc.margin = (int)parse_long(name, value, -1000, 1000);
    else if (strcmp(name, "--scaling") == 0) parse_scaling(value, &sc);
    else cli_fail("stats: unknown option '%s' (see 'exmy help stats')", name);
  }
  if (!have_format) cli_fail("stats: --format F is required");
  if (!in_path) cli_fail("stats: missing input file IN");

  /* the whole file: current scaling needs its amax before the first value */
  cli_input in;
  cli_input_open(&in, in_path, sizeof(float), "float32 values");
  size_t cap = CLI_CHUNK_ELEMENTS, n = 0, got;
  float *x = cli_alloc(cap * sizeof *x);
  while ((got = cli_input_read(&in, x + n, cap - n)) > 0) {
    n += got;
    if (n == cap) {
      float *bigger = realloc(x, 2 * cap * sizeof *x);
      if (!bigger) cli_fail("stats: out of memory after %zu values", n);
      x = bigger, cap *= 2;
    }
  }
  cli_input_close(&in);
  cli_le_swap(x, n, sizeof *x);

  float *y = cli_alloc((n ? n : 1) * sizeof *y);
  exmy_tensor_stats st;
  if (exmy_quantize_scaled_f32(&f, &o, &sc, NULL, x, y, 1, n, &st))
    cli_fail("stats: invalid scaling options");
  printf("n %zu\n", st.n);
  printf("amax %.9g\n", st.amax);
  printf("min_nonzero %.9g\n", st.min_nonzero);
  printf("underflow_ratio %.9g\n", st.underflow_ratio);
  printf("subnormal_ratio %.9g\n", st.subnormal_ratio);
  printf("overflow_ratio %.9g\n", st.overflow_ratio);
  printf("mse %.9g\n", st.mse);
  printf("rel_l2 %.9g\n", st.rel_l2);
  printf("cosine %.9g\n", st.cosine);
  printf("sqnr_db %.9g\n", st.sqnr_db);
  printf("scale %.9g\n", st.scale);
  cli_stdout_finish();
  free(x), free(y);
  return 0;
}
