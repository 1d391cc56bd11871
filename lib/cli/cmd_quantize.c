/* exmy quantize: float32 values -> the nearest values of a format, as float32. */
#include <stdlib.h>

#include "lib/cli/io.h"
#include "lib/cli/options.h"
#include "lib/exmy.h"

const char cli_quantize_help[] =
    "usage: exmy quantize --format F [--round R] [--saturate] [--no-subnormals]\n"
    "                     [--seed S] [--offset O] [--sr-bits B] IN OUT\n"
    "\n"
    "Rounds each float32 of IN (raw little-endian float32, '-' = stdin) to\n"
    "format F in one rounding step and writes the result as float32 to OUT\n"
    "('-' = stdout): equal to decode(encode(IN)).\n"
    "\n"
    "  --format F       target format (required; see 'exmy --help')\n"
    "  --round R        rne (default), rna, rz, ru, rd, ro, or sr (stochastic)\n"
    "  --saturate       out-of-range values (and inf) become +-max\n"
    "                   (default: follow IEEE 754 and the format)\n"
    "  --no-subnormals  take the format without its subnormals (flush to 0\n"
    "                   or round to the smallest normal)\n"
    "  --seed S         sr: Philox key (default 0)\n"
    "  --offset O       sr: counter of the file's first element (default 0);\n"
    "                   element i uses offset + i, so a file split in two\n"
    "                   with --offset = elements before gives the same bits\n"
    "  --sr-bits B      sr: random bits per element, 1..32 (default 32)\n"
    "  --seed, --offset and --sr-bits are ignored unless --round sr.\n";

int cli_quantize(int argc, char **argv) {
  cli_conversion_args a;
  cli_parse_conversion_args("quantize", argc, argv, true, &a);
  cli_input in;
  cli_input_open(&in, a.in, sizeof(float), "float32 values");
  cli_output out;
  cli_output_open(&out, a.out);

  float *x = cli_alloc(CLI_CHUNK_ELEMENTS * sizeof *x);
  exmy_rounding_opts o = a.round;
  size_t n;
  while ((n = cli_input_read(&in, x, CLI_CHUNK_ELEMENTS)) > 0) {
    /* sr: element i of the file draws counter offset + i, exactly as one
     * call over the whole file would. */
    o.offset = a.round.offset + (in.elements - n);
    cli_le_swap(x, n, sizeof *x);
    exmy_quantize_f32(&a.format, &o, x, x, n);
    cli_le_swap(x, n, sizeof *x);
    cli_output_write(&out, x, n * sizeof *x);
  }
  cli_input_close(&in);
  cli_output_commit(&out);
  cli_free(x);
  return 0;
}
