/* exmy decode: the codes of a format -> float32 values. */
#include <inttypes.h>
#include <stdlib.h>

#include "cpu/cli/io.h"
#include "cpu/cli/options.h"
#include "cpu/exmy_cpu.h"

const char cli_decode_help[] =
    "usage: exmy decode --format F IN OUT\n"
    "\n"
    "Reads codes of format F from IN ('-' = stdin): 1 byte per code for\n"
    "formats of <= 8 bits (FP6/FP4 in the low bits), 2 little-endian bytes\n"
    "for <= 16 bits, 4 for float32; writes each code's value as raw\n"
    "little-endian float32 to OUT ('-' = stdout).  Exact: no rounding.\n"
    "NaN codes give the quiet float32 NaN 0x7fc00000 (with the code's sign\n"
    "where the format has signed NaNs).  A code with bits set above the\n"
    "format's width (e.g. 0x40 for a 6-bit format) is an error.\n";

/* The library ignores bits above the format's width; the CLI refuses them,
 * since they mean the file is not what --format says it is. */
static void check_codes(const exmy_format *f, const cli_input *in,
                        const void *codes, size_t n, size_t code_bytes) {
  if (f->bits >= (int)(8 * code_bytes)) return;
  const uint32_t limit = (uint32_t)1 << f->bits;
  for (size_t i = 0; i < n; i++) {
    uint32_t c = code_bytes == 1 ? ((const uint8_t *)codes)[i]
                                 : ((const uint16_t *)codes)[i];
    if (c >= limit)
      cli_fail("%s: element %" PRIu64 " is 0x%x, not a code of %s (%d bits)",
               in->path, in->elements - n + i, (unsigned)c, f->name, f->bits);
  }
}

int cli_decode(int argc, char **argv) {
  cli_conversion_args a;
  cli_parse_conversion_args("decode", argc, argv, false, &a);
  const size_t code_bytes = exmy_code_bytes(&a.format);
  cli_input in;
  cli_input_open(&in, a.in, code_bytes, "codes");
  cli_output out;
  cli_output_open(&out, a.out);

  void *codes = cli_alloc(CLI_CHUNK_ELEMENTS * code_bytes);
  float *y = cli_alloc(CLI_CHUNK_ELEMENTS * sizeof *y);
  size_t n;
  while ((n = cli_input_read(&in, codes, CLI_CHUNK_ELEMENTS)) > 0) {
    cli_le_swap(codes, n, code_bytes);
    check_codes(&a.format, &in, codes, n, code_bytes);
    exmy_decode_f32(&a.format, codes, y, n);
    cli_le_swap(y, n, sizeof *y);
    cli_output_write(&out, y, n * sizeof *y);
  }
  cli_input_close(&in);
  cli_output_commit(&out);
  cli_free(y);
  cli_free(codes);
  return 0;
}
