/* exmy: the command-line tool.  Dispatches on the subcommand word through the
 * table in commands.h; `exmy --help`, `exmy help NAME`, `exmy NAME --help`. */
#include <stdio.h>
#include <string.h>

#include "cpu/cli/commands.h"
#include "cpu/cli/io.h"
#include "cpu/cli/options.h"

#define EXMY_CLI_ROW(name, summary) {#name, summary, cli_##name##_help, cli_##name},
static const cli_command kCommands[] = {EXMY_CLI_COMMANDS(EXMY_CLI_ROW)};
#undef EXMY_CLI_ROW
static const size_t kNumCommands = sizeof kCommands / sizeof kCommands[0];

static const cli_command *find_command(const char *name) {
  for (size_t i = 0; i < kNumCommands; i++)
    if (strcmp(kCommands[i].name, name) == 0) return &kCommands[i];
  return NULL;
}

static int print_usage(void) {
  printf("exmy: round float32 into low-bit floating-point formats, bit-exactly\n"
         "\n"
         "usage: exmy COMMAND [ARGS]      exmy help COMMAND      exmy --help\n"
         "\n"
         "commands:\n");
  for (size_t i = 0; i < kNumCommands; i++)
    printf("  %-10s %s\n", kCommands[i].name, kCommands[i].summary);
  printf("\n"
         "files: values are raw little-endian float32; codes take 1 byte each\n"
         "  for formats of <= 8 bits (FP6/FP4 in the low bits), 2 little-endian\n"
         "  bytes for <= 16 bits, 4 for float32.  '-' is stdin / stdout.\n"
         "  Files stream in chunks of 1 Mi elements; OUT may be IN.\n");
  char names[1024];
  cli_format_names(names, sizeof names, true, strlen("formats: "), 76);
  printf("formats: %s and IEEE-like eXmY\n"
         "  with 1 <= X <= 8, 0 <= Y <= 23 (bias 2^(X-1)-1), e.g. e8m3, e5m10.\n"
         "rounding: rne (default), rna, rz, ru, rd, ro, sr (stochastic).\n"
         "errors: one line on stderr starting 'exmy: ', exit status 2, and no\n"
         "  output file (an existing OUT is left as it was).\n",
         names);
  cli_stdout_finish();
  return 0;
}

static int print_help(const cli_command *c) {
  fputs(c->help, stdout);
  cli_stdout_finish();
  return 0;
}

static int is_help_flag(const char *arg) {
  return strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0;
}

int cli_main(int argc, char **argv) {
  if (argc < 2) cli_fail("missing command (see 'exmy --help')");
  const char *word = argv[1];
  if (is_help_flag(word)) return print_usage();
  if (strcmp(word, "help") == 0) {
    if (argc == 2) return print_usage();
    if (argc > 3) cli_fail("help: takes one COMMAND, got %d", argc - 2);
    const cli_command *c = find_command(argv[2]);
    if (!c) cli_fail("help: unknown command '%s' (see 'exmy --help')", argv[2]);
    return print_help(c);
  }
  const cli_command *c = find_command(word);
  if (!c) cli_fail("unknown command '%s' (see 'exmy --help')", word);
  for (int i = 2; i < argc; i++) {
    if (strcmp(argv[i], "--") == 0) break;
    if (is_help_flag(argv[i])) return print_help(c);
  }
  return c->run(argc - 1, argv + 1);
}

#ifndef EXMY_CLI_NO_MAIN /* the fuzzer (tests/fuzz) calls cli_main itself */
int main(int argc, char **argv) { return cli_main(argc, argv); }
#endif
