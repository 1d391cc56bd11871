/* exmy info F: the facts of a format, every value printed exactly. */
#include <inttypes.h>
#include <stdio.h>

#include "cpu/cli/io.h"
#include "cpu/cli/options.h"
#include "lib/exmy.h"

const char cli_info_help[] =
    "usage: exmy info F\n"
    "\n"
    "Prints the facts of format F, one 'label  value' per line: bits and their\n"
    "split, code bytes, bias, emin/emax (unbiased exponents of the smallest\n"
    "normal and the largest finite value), max, min normal, min subnormal,\n"
    "epsilon (2^-M), the number of finite codes and of distinct finite values\n"
    "(+0 and -0 count once), and the special values: zero, negative zero,\n"
    "inf, NaN, subnormals, with their codes.  Values are printed twice:\n"
    "%.9g (enough to identify a float32) and C99 hex float %a (exact).\n";

/* A code as hex, as many digits as the format's width needs (1..8: a format
 * has at most 32 bits; the bound also tells the compiler "0x" + 8 digits fit). */
static const char *hex_code(const exmy_format *f, uint32_t code, char buf[16]) {
  const unsigned digits = (unsigned)(f->bits + 3) / 4;
  snprintf(buf, 16, "0x%0*" PRIx32, digits < 1 ? 1 : digits > 8 ? 8 : (int)digits, code);
  return buf;
}

static void print_value(const char *label, float v) {
  printf("%-15s%.9g  %a\n", label, (double)v, (double)v);
}

int cli_info(int argc, char **argv) {
  exmy_format f;
  cli_parse_format_arg("info", argc, argv, &f);
  exmy_format_info info;
  exmy_format_get_info(&f, &info);
  char a[16], b[16];

  printf("%-15s%s\n", "format", f.name);
  printf("%-15s%d = sign %d + exponent %d + mantissa %d\n", "bits", f.bits,
         f.is_signed ? 1 : 0, f.exp_bits, f.man_bits);
  printf("%-15s%zu\n", "code bytes", exmy_code_bytes(&f));
  printf("%-15s%d\n", "bias", f.bias);
  printf("%-15s%d\n", "emin", f.emin);
  printf("%-15s%d\n", "emax", f.emax);
  print_value("max", info.max);
  print_value("min normal", info.min_normal);
  print_value("min subnormal", info.min_subnormal);
  print_value("epsilon", info.epsilon);
  printf("%-15s%" PRIu64 "\n", "finite codes", info.finite_codes);
  printf("%-15s%" PRIu64 "\n", "finite values", info.finite_values);

  /* E8M0's code 0 is 2^-127: it has no zero at all. */
  if (f.specials == EXMY_SPECIALS_E8M0)
    printf("%-15sno (code 0 is the smallest value)\n", "zero");
  else
    printf("%-15syes: %s\n", "zero", hex_code(&f, 0, a));
  if (info.has_negative_zero)
    printf("%-15syes: %s\n", "negative zero", hex_code(&f, f.sign_mask, a));
  else if (f.specials == EXMY_SPECIALS_FNUZ)
    printf("%-15sno (%s is NaN)\n", "negative zero", hex_code(&f, f.sign_mask, a));
  else
    printf("%-15sno\n", "negative zero");

  if (info.has_inf)
    printf("%-15syes: +inf %s, -inf %s\n", "inf", hex_code(&f, f.inf_code, a),
           hex_code(&f, f.sign_mask | f.inf_code, b));
  else
    printf("%-15sno\n", "inf");

  /* Codes that are neither finite nor inf are NaN. */
  const uint64_t all_codes = (uint64_t)1 << f.bits;
  const uint64_t nan_codes =
      all_codes - info.finite_codes - (info.has_inf ? (f.is_signed ? 2 : 1) : 0);
  if (!info.has_nan)
    printf("%-15sno (NaN inputs give %s)\n", "nan",
           info.has_inf ? "inf" : "+-max");
  else if (f.is_signed && f.specials != EXMY_SPECIALS_FNUZ)
    printf("%-15syes: %" PRIu64 " codes; +NaN %s, -NaN %s\n", "nan", nan_codes,
           hex_code(&f, f.nan_code, a), hex_code(&f, f.sign_mask | f.nan_code, b));
  else
    printf("%-15syes: %" PRIu64 " code%s; NaN %s\n", "nan", nan_codes,
           nan_codes == 1 ? "" : "s", hex_code(&f, f.nan_code, a));

  if (info.has_subnormals && f.man_bits == 1)
    printf("%-15syes: %s (1 positive)\n", "subnormals", hex_code(&f, 1, a));
  else if (info.has_subnormals)
    printf("%-15syes: %s..%s (%" PRIu64 " positive)\n", "subnormals",
           hex_code(&f, 1, a), hex_code(&f, ((uint32_t)1 << f.man_bits) - 1, b),
           ((uint64_t)1 << f.man_bits) - 1);
  else
    printf("%-15sno\n", "subnormals");
  cli_stdout_finish();
  return 0;
}
