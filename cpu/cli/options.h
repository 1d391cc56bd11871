/*
 * Command-line options of every command that takes them (quantize, encode,
 * decode, stats), parsed by one parser from one table, and the format names
 * shared by every command.
 */
#ifndef EXMY_CLI_OPTIONS_H
#define EXMY_CLI_OPTIONS_H

#include <stdbool.h>
#include <stddef.h>

#include "lib/exmy.h"

/* Which option groups a command takes besides --format. */
enum {
  CLI_ROUNDING = 1 << 0, /* --round --saturate --no-subnormals --seed --offset --sr-bits */
  CLI_SCALING = 1 << 1,  /* --scaling --margin --pow2 */
};

typedef struct {
  exmy_format format;
  exmy_rounding_opts round; /* zero (plain rne) unless options say otherwise */
  exmy_scaling scaling;     /* zero (none) unless options say otherwise */
  const char *in, *out;     /* "-" is stdin / stdout; out NULL where the command has none */
} cli_args;

/* Parses  --format F [options] PATHS  (options and paths in any order; "--"
 * ends the options; "--name=value" and "--name value" both work; an option
 * at most once).  `groups`: the option groups the command takes; `npaths`: 2
 * (IN OUT) or 1 (IN).  Integers are plain digits ('-' first where negative
 * values are valid; 0x for hexadecimal where an unsigned 64-bit value is
 * wanted), within their option's range.  Fails through cli_fail on anything
 * unknown, repeated, missing or out of range. */
void cli_parse_args(const char *command, int argc, char **argv, unsigned groups, int npaths,
                    cli_args *args);

/* The conversion commands: IN OUT, with the rounding options if `rounding`
 * (decode does not round). */
typedef cli_args cli_conversion_args;
void cli_parse_conversion_args(const char *command, int argc, char **argv,
                               bool rounding, cli_conversion_args *args);

/* The help lines of --format and the rounding options (quantize, encode). */
#define CLI_ROUNDING_OPTIONS_HELP                                                \
    "  --format F       target format (required; see 'exmy --help')\n"           \
    "  --round R        rne (default), rna, rz, ru, rd, ro, or sr (stochastic)\n"\
    "  --saturate       out-of-range values (and inf) become +-max\n"            \
    "                   (default: follow IEEE 754 and the format)\n"             \
    "  --no-subnormals  take the format without its subnormals (flush to 0\n"    \
    "                   or round to the smallest normal)\n"                      \
    "  --seed S         sr: Philox key (default 0)\n"                            \
    "  --offset O       sr: counter of the file's first element (default 0);\n"  \
    "                   element i uses offset + i, so a file split in two\n"     \
    "                   with --offset = elements before gives the same bits\n"   \
    "  --sr-bits B      sr: random bits per element, 1..32 (default 32)\n"       \
    "  --seed, --offset and --sr-bits are ignored unless --round sr.\n"

/* quantize (to_codes false) and encode: rounds IN to OUT chunk by chunk, the
 * sr counter running on across chunks; returns the exit status. */
int cli_round_stream(const char *command, int argc, char **argv, bool to_codes);

/* Parses the single argument F of `exmy info F` / `exmy table F`. */
void cli_parse_format_arg(const char *command, int argc, char **argv,
                          exmy_format *f);

/* The named formats of the format table into buf: "e4m3, e5m2, ...," (the
 * alias where there is one) or, with_aliases, "float8_e4m3fn (e4m3), ...,".
 * width > 0: the text starts at column first_col and breaks its lines before
 * column `width`, continuing with two spaces.  Returns the last line's length. */
size_t cli_format_names(char *buf, size_t size, bool with_aliases, size_t first_col,
                        size_t width);

/* exmy_format_parse, failing with a message that lists the known names. */
void cli_parse_format(const char *command, const char *name, exmy_format *f);

#endif /* EXMY_CLI_OPTIONS_H */
