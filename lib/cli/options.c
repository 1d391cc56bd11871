/* Argument parsing of the conversion commands: see options.h. */
#include "lib/cli/options.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/cli/io.h"
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

/* A decimal or 0x-prefixed unsigned 64-bit integer, nothing else. */
static uint64_t parse_u64(const char *command, const char *option,
                          const char *text) {
  char *end;
  errno = 0;
  unsigned long long v = strtoull(text, &end, 0);
  /* strtoull accepts leading blanks and a minus sign; a seed of "-1" is
   * almost certainly a mistake, so only plain digits pass. */
  if (text[0] < '0' || text[0] > '9' || *end != '\0' || errno == ERANGE)
    cli_fail("%s: %s wants an unsigned 64-bit integer, got '%s'", command,
             option, text);
  return (uint64_t)v;
}

/* The options, and which commands take them. */
typedef enum { OPT_FORMAT, OPT_ROUND, OPT_SATURATE, OPT_NO_SUBNORMALS,
               OPT_SEED, OPT_SR_BITS, OPT_OFFSET } option_id;
typedef struct {
  const char *name;
  option_id id;
  bool takes_value;
  bool rounding_only;
} option_spec;
static const option_spec kOptions[] = {
    {"--format", OPT_FORMAT, true, false},
    {"--round", OPT_ROUND, true, true},
    {"--saturate", OPT_SATURATE, false, true},
    {"--no-subnormals", OPT_NO_SUBNORMALS, false, true},
    {"--seed", OPT_SEED, true, true},
    {"--sr-bits", OPT_SR_BITS, true, true},
    {"--offset", OPT_OFFSET, true, true},
};

static const option_spec *find_option(const char *arg, size_t len) {
  for (size_t i = 0; i < sizeof kOptions / sizeof kOptions[0]; i++)
    if (strlen(kOptions[i].name) == len &&
        strncmp(kOptions[i].name, arg, len) == 0)
      return &kOptions[i];
  return NULL;
}

void cli_parse_conversion_args(const char *command, int argc, char **argv,
                               bool rounding, cli_conversion_args *args) {
  memset(args, 0, sizeof *args);
  const char *format_name = NULL;
  const char *paths[2];
  int npaths = 0;
  bool options_done = false;
  for (int i = 1; i < argc; i++) {
    const char *arg = argv[i];
    /* "-" alone is stdin/stdout, a path like any other */
    if (options_done || arg[0] != '-' || strcmp(arg, "-") == 0) {
      if (npaths == 2)
        cli_fail("%s: unexpected argument '%s' (IN and OUT already given)",
                 command, arg);
      paths[npaths++] = arg;
      continue;
    }
    if (strcmp(arg, "--") == 0) {
      options_done = true;
      continue;
    }
    const char *eq = strchr(arg, '=');
    size_t name_len = eq ? (size_t)(eq - arg) : strlen(arg);
    const option_spec *opt = find_option(arg, name_len);
    if (!opt || (opt->rounding_only && !rounding))
      cli_fail("%s: unknown option '%.*s' (see 'exmy help %s')", command,
               (int)name_len, arg, command);
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
      case OPT_SR_BITS: {
        uint64_t b = parse_u64(command, opt->name, value);
        if (b < 1 || b > 32)
          cli_fail("%s: --sr-bits must be in 1..32, got '%s'", command, value);
        args->round.sr_bits = (int)b;
        break;
      }
    }
  }
  if (!format_name) cli_fail("%s: missing --format F (see 'exmy help %s')",
                             command, command);
  if (npaths < 2)
    cli_fail("%s: missing %s (usage: exmy %s --format F ... IN OUT)", command,
             npaths == 0 ? "IN and OUT" : "OUT", command);
  cli_parse_format(command, format_name, &args->format);
  if (exmy_rounding_opts_check(&args->round) != 0)
    cli_fail("%s: invalid rounding options", command);
  args->in = paths[0];
  args->out = paths[1];
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
