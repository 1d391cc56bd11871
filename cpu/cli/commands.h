/*
 * The table of exmy subcommands.
 *
 * Adding a subcommand (e.g. `exmy stats`) is ONE row in EXMY_CLI_COMMANDS
 * below plus its own file:
 *   1. write cpu/cli/cmd_stats.c defining
 *        const char cli_stats_help[] = "usage: exmy stats ...\n...";
 *        int cli_stats(int argc, char **argv);  (argv[0] is "stats";
 *                                                 returns the exit status)
 *      using io.h for errors and files (cli_fail: one line, exit 2);
 *   2. add   X(stats, "one-line summary")   to the list.
 * cpu/BUILD compiles every .c file of cpu/cli/, so the BUILD file needs no change.
 * The row declares cli_stats / cli_stats_help, lists the command in
 * `exmy --help` and makes `exmy stats` and `exmy help stats` work.
 */
#ifndef EXMY_CLI_COMMANDS_H
#define EXMY_CLI_COMMANDS_H

/* X(name, one-line summary), in the order `exmy --help` lists them. */
#define EXMY_CLI_COMMANDS(X)                                                  \
  X(quantize, "round float32 values to a format; output float32 values")      \
  X(encode, "round float32 values to a format; output the format's codes")    \
  X(decode, "turn a format's codes into float32 values")                      \
  X(info, "facts about a format: bits, bias, range, epsilon, specials")       \
  X(table, "every code of a format of at most 8 bits with its value")        \
  X(stats, "what quantizing a tensor does to it: amax, ratios, errors")

#define EXMY_CLI_DECLARE(name, summary)  \
  extern const char cli_##name##_help[]; \
  int cli_##name(int argc, char **argv);
EXMY_CLI_COMMANDS(EXMY_CLI_DECLARE)
#undef EXMY_CLI_DECLARE

/* The whole tool: `exmy ARGS` is cli_main(argc, argv); returns the exit status. */
int cli_main(int argc, char **argv);

typedef struct {
  const char *name;     /* the word after `exmy` */
  const char *summary;  /* one line for `exmy --help` */
  const char *help;     /* full text for `exmy help NAME` */
  int (*run)(int argc, char **argv);
} cli_command;

#endif /* EXMY_CLI_COMMANDS_H */
