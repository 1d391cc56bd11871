/* exmy encode: float32 values -> the codes of a format. */
#include "cpu/cli/options.h"

const char cli_encode_help[] =
    "usage: exmy encode --format F [--round R] [--saturate] [--no-subnormals]\n"
    "                   [--seed S] [--offset O] [--sr-bits B] IN OUT\n"
    "\n"
    "Rounds each float32 of IN (raw little-endian float32, '-' = stdin) to\n"
    "format F and writes its code to OUT ('-' = stdout): 1 byte per code for\n"
    "formats of <= 8 bits (FP6/FP4 in the low bits), 2 little-endian bytes\n"
    "for <= 16 bits, 4 for float32.\n"
    "\n"
    CLI_ROUNDING_OPTIONS_HELP;

int cli_encode(int argc, char **argv) {
  return cli_round_stream("encode", argc, argv, true);
}
