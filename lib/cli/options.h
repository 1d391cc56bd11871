/*
 * Command-line options of every command that takes them (quantize, encode,
 * decode, stats), parsed by one parser from one table, and the format names
 * shared by every command.
 */
#ifndef EXMY_CLI_OPTIONS_H
#define EXMY_CLI_OPTIONS_H

#include <stdbool.h>

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

/* Parses the single argument F of `exmy info F` / `exmy table F`. */
void cli_parse_format_arg(const char *command, int argc, char **argv,
                          exmy_format *f);

/* exmy_format_parse, failing with a message that lists the known names. */
void cli_parse_format(const char *command, const char *name, exmy_format *f);

#endif /* EXMY_CLI_OPTIONS_H */
