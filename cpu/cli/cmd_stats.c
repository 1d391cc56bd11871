/* exmy stats: what a quantization does to a tensor, one statistic a line. */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "cpu/cli/io.h"
#include "cpu/cli/options.h"
#include "cpu/exmy_cpu.h"

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
    "  --margin M       tensor/group: scale times 2^-M (default 0); a margin\n"
    "                   that puts this input's scale outside float32's normal\n"
    "                   range is an error\n"
    "  --pow2           tensor/group: round the scale down to a power of two\n"
    "  other options as in 'exmy quantize'.\n";

/* The scale of a margin the user chose must stay a normal float32 for this
 * input: past that its inverse is not finite and every value comes out as
 * NaN (left out of the sums: MSE 0, cosine 1), or the library's fallback
 * scale of 1 applies.  Judged at the tensor's amax, the smallest scale any
 * group gets. */
static void check_margin(const exmy_format *f, const exmy_scaling *sc, const float *x, size_t n) {
  if ((sc->kind != EXMY_SCALING_TENSOR && sc->kind != EXMY_SCALING_GROUP) || sc->margin == 0)
    return;
  double amax = 0;
  for (size_t i = 0; i < n; i++)
    if (isfinite(x[i]) && fabs(x[i]) > amax) amax = fabs(x[i]);
  if (amax == 0) return;
  exmy_format_info info;
  exmy_format_get_info(f, &info);
  const double unmoved = info.max / amax, s = ldexp(unmoved, -sc->margin);
  const bool fits = unmoved >= FLT_MIN && unmoved <= FLT_MAX;
  if (fits && (s < FLT_MIN || s > FLT_MAX))
    cli_fail("stats: --margin %d puts the scale of this input (amax %.9g) at %.3g, outside "
             "float32's normal range", sc->margin, amax, s);
}

int cli_stats(int argc, char **argv) {
  cli_args a;
  cli_parse_args("stats", argc, argv, CLI_ROUNDING | CLI_SCALING, 1, &a);

  /* the whole file: current scaling needs its amax before the first value */
  cli_input in;
  cli_input_open(&in, a.in, sizeof(float), "float32 values");
  size_t cap = CLI_CHUNK_ELEMENTS, n = 0, got;
  float *x = cli_alloc(cap * sizeof *x);
  while ((got = cli_input_read(&in, x + n, cap - n)) > 0) {
    n += got;
    if (n == cap) {
      if (cap > SIZE_MAX / 2 / sizeof *x) cli_fail("stats: out of memory after %zu values", n);
      x = cli_realloc(x, 2 * cap * sizeof *x);
      cap *= 2;
    }
  }
  cli_input_close(&in);
  cli_le_swap(x, n, sizeof *x);
  check_margin(&a.format, &a.scaling, x, n);

  float *y = cli_alloc((n ? n : 1) * sizeof *y);
  exmy_tensor_stats st;
  if (exmy_quantize_scaled_f32(&a.format, &a.round, &a.scaling, NULL, x, y, 1, n, &st))
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
  cli_free(x);
  cli_free(y);
  return 0;
}
