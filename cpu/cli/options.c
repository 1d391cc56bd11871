/* Argument parsing of every command: see options.h. */
#include "cpu/cli/options.h"

#include <ctype.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cli/io.h"
#include "lib/format_core.h"

/* The rows of the format table (lib/format_core.h). */
static const struct {
  const char *name, *alias;
  int exp_bits, man_bits, bias;
  exmy_specials specials;
} kFormatRows[] = {
#define EXMY_CLI_ROW(id, name, alias, E, M, bias, sp, gpu) \
  {name, alias, E, M, bias, EXMY_SPECIALS_##sp},
    EXMY_FORMAT_TABLE(EXMY_CLI_ROW)
#undef EXMY_CLI_ROW
};

size_t cli_format_names(char *buf, size_t size, bool with_aliases, size_t first_col,
                        size_t width) {
  size_t len = 0, col = first_col;
  buf[0] = '\0';
  for (size_t i = 0; i < sizeof kFormatRows / sizeof kFormatRows[0]; i++) {
    const char *name = kFormatRows[i].name, *alias = kFormatRows[i].alias;
    /* rows named as a generic eXmY (E8M3..E8M6) go under "eXmY" */
    char generic[16];
    snprintf(generic, sizeof generic, "e%dm%d", kFormatRows[i].exp_bits,
             kFormatRows[i].man_bits);
    if (strcmp(name, generic) == 0 && kFormatRows[i].specials == EXMY_SPECIALS_IEEE &&
        kFormatRows[i].bias == (1 << (kFormatRows[i].exp_bits - 1)) - 1)
      continue;
    char word[64];
    if (with_aliases && alias)
      snprintf(word, sizeof word, "%s (%s),", name, alias);
    else
      snprintf(word, sizeof word, "%s,", alias ? alias : name);
    const size_t w = strlen(word);
    const char *sep = len == 0 ? "" : width && col + 1 + w > width ? "\n  " : " ";
    if (len + strlen(sep) + w + 1 > size) break;
    len += (size_t)snprintf(buf + len, size - len, "%s%s", sep, word);
    col = sep[0] == '\n' ? 2 + w : col + strlen(sep) + w;
  }
  return col;
}

void cli_parse_format(const char *command, const char *name, exmy_format *f) {
  if (exmy_format_parse(name, f) != 0) {
    char names[512];
    cli_format_names(names, sizeof names, false, 0, 0);
    cli_fail("%s: unknown format '%s' (known: %s their ml_dtypes names, and eXmY "
             "with 1<=X<=8, 0<=Y<=23)", command, name, names);
  }
}

/* A decimal or 0x-prefixed hexadecimal unsigned 64-bit integer, nothing else
 * (no blanks, no sign: a seed of "-1" is almost certainly a mistake). */
static uint64_t parse_u64(const char *command, const char *option,
                          const char *text) {
  const int hex = text[0] == '0' && (text[1] == 'x' || text[1] == 'X');
  const char *digits = hex ? text + 2 : text;
  char *end;
  errno = 0;
  unsigned long long v = strtoull(digits, &end, hex ? 16 : 10);
  if (!(hex ? isxdigit((unsigned char)digits[0]) : isdigit((unsigned char)digits[0])) ||
      *end != '\0' || errno == ERANGE)
    cli_fail("%s: %s wants an unsigned 64-bit integer, got '%s'", command,
             option, text);
  return (uint64_t)v;
}

/* A decimal integer in lo..hi: an optional '-', then digits, nothing else. */
static long parse_int(const char *command, const char *option, const char *text,
                      long lo, long hi) {
  const char *digits = text[0] == '-' ? text + 1 : text;
  char *end;
  errno = 0;
  long v = strtol(text, &end, 10);
  if (!isdigit((unsigned char)digits[0]) || *end != '\0' || errno == ERANGE || v < lo ||
      v > hi)
    cli_fail("%s: %s wants an integer in %ld..%ld, got '%s'", command, option, lo,
             hi, text);
  return v;
}

static void parse_scaling(const char *command, const char *v, exmy_scaling *sc) {
  if (strcmp(v, "none") == 0) sc->kind = EXMY_SCALING_NONE;
  else if (strcmp(v, "tensor") == 0) sc->kind = EXMY_SCALING_TENSOR;
  else if (strcmp(v, "mx") == 0) sc->kind = EXMY_SCALING_MX;
  else if (strncmp(v, "group:", 6) == 0) {
    sc->kind = EXMY_SCALING_GROUP;
    sc->group = (int)parse_int(command, "--scaling group:G", v + 6, 0, 1L << 30);
  } else {
    cli_fail("%s: --scaling wants none, tensor, mx or group:G, got '%s'", command, v);
  }
}

/* The options, and the group each belongs to (0: every command). */
typedef enum { OPT_FORMAT, OPT_ROUND, OPT_SATURATE, OPT_NO_SUBNORMALS,
               OPT_SEED, OPT_SR_BITS, OPT_OFFSET, OPT_SCALING, OPT_MARGIN,
               OPT_POW2 } option_id;
typedef struct {
  const char *name;
  option_id id;
  bool takes_value;
  unsigned group;
} option_spec;
static const option_spec kOptions[] = {
    {"--format", OPT_FORMAT, true, 0},
    {"--round", OPT_ROUND, true, CLI_ROUNDING},
    {"--saturate", OPT_SATURATE, false, CLI_ROUNDING},
    {"--no-subnormals", OPT_NO_SUBNORMALS, false, CLI_ROUNDING},
    {"--seed", OPT_SEED, true, CLI_ROUNDING},
    {"--sr-bits", OPT_SR_BITS, true, CLI_ROUNDING},
    {"--offset", OPT_OFFSET, true, CLI_ROUNDING},
    {"--scaling", OPT_SCALING, true, CLI_SCALING},
    {"--margin", OPT_MARGIN, true, CLI_SCALING},
    {"--pow2", OPT_POW2, false, CLI_SCALING},
};
enum { kNumOptions = sizeof kOptions / sizeof kOptions[0] };

static const option_spec *find_option(const char *arg, size_t len) {
  for (size_t i = 0; i < kNumOptions; i++)
    if (strlen(kOptions[i].name) == len &&
        strncmp(kOptions[i].name, arg, len) == 0)
      return &kOptions[i];
  return NULL;
}

void cli_parse_args(const char *command, int argc, char **argv, unsigned groups, int npaths,
                    cli_args *args) {
  memset(args, 0, sizeof *args);
  const char *format_name = NULL;
  const char *paths[2] = {NULL, NULL};
  int given = 0;
  bool options_done = false, seen[kNumOptions] = {false};
  for (int i = 1; i < argc; i++) {
    const char *arg = argv[i];
    /* "-" alone is stdin/stdout, a path like any other */
    if (options_done || arg[0] != '-' || strcmp(arg, "-") == 0) {
      if (given == npaths)
        cli_fail("%s: unexpected argument '%s' (%s already given)", command, arg,
                 npaths == 2 ? "IN and OUT" : "IN");
      paths[given++] = arg;
      continue;
    }
    if (strcmp(arg, "--") == 0) {
      options_done = true;
      continue;
    }
    const char *eq = strchr(arg, '=');
    size_t name_len = eq ? (size_t)(eq - arg) : strlen(arg);
    const option_spec *opt = find_option(arg, name_len);
    if (!opt || (opt->group && !(opt->group & groups)))
      cli_fail("%s: unknown option '%.*s' (see 'exmy help %s')", command,
               (int)(name_len > 64 ? 64 : name_len), arg, command);
    if (seen[opt - kOptions]) cli_fail("%s: %s given twice", command, opt->name);
    seen[opt - kOptions] = true;
    const char *value = NULL;
    if (opt->takes_value) {
      if (eq) value = eq + 1;
      else if (i + 1 < argc) value = argv[++i];
      else cli_fail("%s: %s needs a value", command, opt->name);
    } else if (eq) {
      cli_fail("%s: %s takes no value", command, opt->name);
    }
    switch (opt->id) {
      case OPT_FORMAT:
        format_name = value;
        break;
      case OPT_ROUND:
        if (exmy_rounding_parse(value, &args->round.mode) != 0)
          cli_fail("%s: unknown rounding mode '%s' (known: rne, rna, rz, ru, "
                   "rd, ro, sr)", command, value);
        break;
      case OPT_SATURATE:
        args->round.saturate = true;
        break;
      case OPT_NO_SUBNORMALS:
        args->round.flush_subnormals = true;
        break;
      case OPT_SEED:
        args->round.seed = parse_u64(command, opt->name, value);
        break;
      case OPT_OFFSET:
        args->round.offset = parse_u64(command, opt->name, value);
        break;
      case OPT_SR_BITS:
        args->round.sr_bits = (int)parse_int(command, opt->name, value, 1, 32);
        break;
      case OPT_SCALING:
        parse_scaling(command, value, &args->scaling);
        break;
      case OPT_MARGIN:
        args->scaling.margin = (int)parse_int(command, opt->name, value, -1000, 1000);
        break;
      case OPT_POW2:
        args->scaling.pow2 = true;
        break;
    }
  }
  if (!format_name) cli_fail("%s: missing --format F (see 'exmy help %s')",
                             command, command);
  if (given < npaths) {
    if (npaths == 1) cli_fail("%s: missing input file IN", command);
    cli_fail("%s: missing %s (usage: exmy %s --format F ... IN OUT)", command,
             given == 0 ? "IN and OUT" : "OUT", command);
  }
  cli_parse_format(command, format_name, &args->format);
  if (exmy_rounding_opts_check(&args->round) != 0)
    cli_fail("%s: invalid rounding options", command);
  args->in = paths[0];
  args->out = paths[1];
}

void cli_parse_conversion_args(const char *command, int argc, char **argv,
                               bool rounding, cli_conversion_args *args) {
  cli_parse_args(command, argc, argv, rounding ? CLI_ROUNDING : 0, 2, args);
}

void cli_parse_format_arg(const char *command, int argc, char **argv,
                          exmy_format *f) {
  const char *name = NULL;
  for (int i = 1; i < argc; i++) {
    if (argv[i][0] == '-' && argv[i][1] != '\0')
      cli_fail("%s: unknown option '%s' (usage: exmy %s F)", command, argv[i],
               command);
    if (name)
      cli_fail("%s: unexpected argument '%s' (usage: exmy %s F)", command,
               argv[i], command);
    name = argv[i];
  }
  if (!name) cli_fail("%s: missing format (usage: exmy %s F)", command, command);
  cli_parse_format(command, name, f);
}
