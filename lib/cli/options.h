/*
 * Command-line arguments of the conversion commands (quantize, encode,
 * decode) and the format names shared by every command.
 */
#ifndef EXMY_CLI_OPTIONS_H
#define EXMY_CLI_OPTIONS_H

#include <stdbool.h>

#include "lib/exmy.h"

typedef struct {
  exmy_format format;
  exmy_rounding_opts round; /* zero (plain rne) unless options say otherwise */
  const char *in, *out;     /* "-" is stdin / stdout */
} cli_conversion_args;

/* Parses  --format F [rounding options] IN OUT  (options and the two paths in
 * any order; "--" ends the options; "--name=value" and "--name value" both
 * work).  `rounding` says whether --round, --saturate, --no-subnormals,
 * --seed, --sr-bits and --offset are accepted (decode does not round).
 * Fails through cli_fail on anything unknown, missing or out of range. */
void cli_parse_conversion_args(const char *command, int argc, char **argv,
                               bool rounding, cli_conversion_args *args);

/* Parses the single argument F of `exmy info F` / `exmy table F`. */
void cli_parse_format_arg(const char *command, int argc, char **argv,
                          exmy_format *f);

/* exmy_format_parse, failing with a message that lists the known names. */
void cli_parse_format(const char *command, const char *name, exmy_format *f);

#endif /* EXMY_CLI_OPTIONS_H */
