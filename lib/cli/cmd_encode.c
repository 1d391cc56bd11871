/* exmy encode: float32 values -> the codes of a format. */
#include <stdlib.h>

#include "lib/cli/io.h"
#include "lib/cli/options.h"
#include "lib/exmy.h"

const char cli_encode_help[] =
    "usage: exmy encode --format F [--round R] [--saturate] [--no-subnormals]\n"
    "                   [--seed S] [--offset O] [--sr-bits B] IN OUT\n"
    "\n"
    "Rounds each float32 of IN (raw little-endian float32, '-' = stdin) to\n"
    "format F and writes its code to OUT ('-' = stdout): 1 byte per code for\n"
    "formats of <= 8 bits (FP6/FP4 in the low bits), 2 little-endian bytes\n"
    "for <= 16 bits, 4 for float32.  Options as for quantize:\n"
    "\n"
    "  --format F       target format (required; see 'exmy --help')\n"
    "  --round R        rne (default), rna, rz, ru, rd, ro, or sr (stochastic)\n"
    "  --saturate       out-of-range values (and inf) become +-max\n"
    "  --no-subnormals  take the format without its subnormals\n"
    "  --seed S         sr: Philox key (default 0)\n"
    "  --offset O       sr: counter of the file's first element (default 0)\n"
    "  --sr-bits B      sr: random bits per element, 1..32 (default 32)\n";

int cli_encode(int argc, char **argv) {
  cli_conversion_args a;
  cli_parse_conversion_args("encode", argc, argv, true, &a);
  const size_t code_bytes = exmy_code_bytes(&a.format);
  cli_input in;
  cli_input_open(&in, a.in, sizeof(float), "float32 values");
  cli_output out;
  cli_output_open(&out, a.out);

  float *x = cli_alloc(CLI_CHUNK_ELEMENTS * sizeof *x);
  void *codes = cli_alloc(CLI_CHUNK_ELEMENTS * code_bytes);
  exmy_rounding_opts o = a.round;
  size_t n;
  while ((n = cli_input_read(&in, x, CLI_CHUNK_ELEMENTS)) > 0) {
    /* sr: keep the counter running across chunks (see quantize). */
    o.offset = a.round.offset + (in.elements - n);
    cli_le_swap(x, n, sizeof *x);
    exmy_encode_f32(&a.format, &o, x, codes, n);
    cli_le_swap(codes, n, code_bytes);
    cli_output_write(&out, codes, n * code_bytes);
  }
  cli_input_close(&in);
  cli_output_commit(&out);
  cli_free(codes);
  cli_free(x);
  return 0;
}
