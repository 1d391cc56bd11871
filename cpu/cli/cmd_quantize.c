/* exmy quantize: float32 values -> the nearest values of a format, as float32. */
#include <stdlib.h>

#include "cpu/cli/io.h"
#include "cpu/cli/options.h"
#include "cpu/exmy_cpu.h"

const char cli_quantize_help[] =
    "usage: exmy quantize --format F [--round R] [--saturate] [--no-subnormals]\n"
    "                     [--seed S] [--offset O] [--sr-bits B] IN OUT\n"
    "\n"
    "Rounds each float32 of IN (raw little-endian float32, '-' = stdin) to\n"
    "format F in one rounding step and writes the result as float32 to OUT\n"
    "('-' = stdout): equal to decode(encode(IN)).\n"
    "\n"
    CLI_ROUNDING_OPTIONS_HELP;

int cli_round_stream(const char *command, int argc, char **argv, bool to_codes) {
  cli_conversion_args a;
  cli_parse_conversion_args(command, argc, argv, true, &a);
  const size_t out_bytes = to_codes ? exmy_code_bytes(&a.format) : sizeof(float);
  cli_input in;
  cli_input_open(&in, a.in, sizeof(float), "float32 values");
  cli_output out;
  cli_output_open(&out, a.out);

  float *x = cli_alloc(CLI_CHUNK_ELEMENTS * sizeof *x);
  void *y = to_codes ? cli_alloc(CLI_CHUNK_ELEMENTS * out_bytes) : x;
  exmy_rounding_opts o = a.round;
  size_t n;
  while ((n = cli_input_read(&in, x, CLI_CHUNK_ELEMENTS)) > 0) {
    /* sr: element i of the file draws counter offset + i, exactly as one
     * call over the whole file would. */
    o.offset = a.round.offset + (in.elements - n);
    cli_le_swap(x, n, sizeof *x);
    if (to_codes)
      exmy_encode_f32(&a.format, &o, x, y, n);
    else
      exmy_quantize_f32(&a.format, &o, x, x, n);
    cli_le_swap(y, n, out_bytes);
    cli_output_write(&out, y, n * out_bytes);
  }
  cli_input_close(&in);
  cli_output_commit(&out);
  if (to_codes) cli_free(y);
  cli_free(x);
  return 0;
}

int cli_quantize(int argc, char **argv) {
  return cli_round_stream("quantize", argc, argv, false);
}
