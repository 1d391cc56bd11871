/* exmy table F: every code of a format of at most 8 bits with its value. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>

#include "cpu/cli/io.h"
#include "cpu/cli/options.h"
#include "cpu/exmy_cpu.h"

const char cli_table_help[] =
    "usage: exmy table F\n"
    "\n"
    "Prints one line per code of format F (at most 8 bits: 2^bits lines, no\n"
    "header), in code order.  Columns: the code in hex; its bit fields\n"
    "sign|exponent|mantissa (fields the format lacks are left out: E8M0 shows\n"
    "only its 8 exponent bits); the value as %.9g and as C99 hex float %a\n"
    "(exact); its class: zero, subnormal, normal, inf or nan.\n"
    "Wider formats (bf16, fp16, ...) have too many codes for a table: use\n"
    "'exmy info F', or 'exmy decode' on a file of codes.\n";

/* The `width` bits of v from the top, as '0'/'1' characters. */
static char *put_bits(char *p, uint32_t v, int width) {
  for (int i = width - 1; i >= 0; i--) *p++ = (char)('0' + ((v >> i) & 1u));
  return p;
}

static void bit_fields(const exmy_format *f, uint32_t code, char *out) {
  const int M = f->man_bits, E = f->exp_bits;
  char *p = out;
  if (f->is_signed) {
    p = put_bits(p, code >> (E + M), 1);
    *p++ = '|';
  }
  p = put_bits(p, code >> M, E);
  if (M > 0) {
    *p++ = '|';
    p = put_bits(p, code, M);
  }
  *p = '\0';
}

static const char *value_class(float v, float min_normal) {
  if (isnan(v)) return "nan";
  if (isinf(v)) return "inf";
  if (v == 0.0f) return "zero";
  return fabsf(v) < min_normal ? "subnormal" : "normal";
}

int cli_table(int argc, char **argv) {
  exmy_format f;
  cli_parse_format_arg("table", argc, argv, &f);
  if (f.bits > 8)
    cli_fail("table: %s has %d bits (%llu codes); table lists formats of at "
             "most 8 bits (see 'exmy info %s')", f.name, f.bits,
             1ull << f.bits, f.name);
  exmy_format_info info;
  exmy_format_get_info(&f, &info);

  const unsigned ncodes = 1u << f.bits;
  uint8_t codes[256];
  float values[256];
  for (unsigned c = 0; c < ncodes; c++) codes[c] = (uint8_t)c;
  exmy_decode_f32(&f, codes, values, ncodes);

  for (unsigned c = 0; c < ncodes; c++) {
    char fields[16];
    bit_fields(&f, c, fields);
    printf("0x%02x  %s  %-15.9g  %-15a  %s\n", c, fields, (double)values[c],
           (double)values[c], value_class(values[c], info.min_normal));
  }
  cli_stdout_finish();
  return 0;
}
