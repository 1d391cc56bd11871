/*
 * Run configuration: a flat table of key=value settings with defaults (the
 * table in config.c documents every key: its type, range and meaning).  Files
 * hold `key = value` lines of any length ('#' starts a comment), each key at
 * most once; `--set key=value` overrides.  An unknown key, a value of the
 * wrong type or out of its key's range, a directory or a binary file is an
 * error.  The resolved configuration is written into the run directory.
 */
#ifndef EXPERIMENTS_CONFIG_H
#define EXPERIMENTS_CONFIG_H

#include <stdio.h>

#define CONFIG_MAX_KEYS 96
#define CONFIG_VALUE_LEN 512

typedef struct {
  char values[CONFIG_MAX_KEYS][CONFIG_VALUE_LEN];
} config;

void config_defaults(config *c);
/* 0, or -1 with a one-line message in err. */
/* Checks the value against the key's type and range before storing it. */
int config_set(config *c, const char *key, const char *value, char *err, size_t errlen);
int config_set_assignment(config *c, const char *assignment, char *err, size_t errlen);
int config_load_file(config *c, const char *path, char *err, size_t errlen);
void config_write(const config *c, FILE *f);

/* The syntax of a config file, for files with other names than the keys (the
 * study configs of experiments/studies): `name = value` lines of any length,
 * '#' starts a comment, blank lines skipped, blanks around the name and the
 * value dropped; a line without '=', a NUL byte or a directory is an error.
 * Calls line(ctx, name, value, lineno, err, errlen) for each line in order; it
 * returns 0, or -1 with a message in err that the reader prefixes with
 * "FILE:LINE: ".  0, or -1 with a one-line message in err. */
typedef int (*config_line_fn)(void *ctx, char *name, char *value, int lineno, char *err,
                              size_t errlen);
int config_read_lines(const char *path, config_line_fn line, void *ctx, char *err, size_t errlen);
/* Parses the text of a config file (as written by config_write); 0 or -1. */
int config_load_text(config *c, const char *text, char *err, size_t errlen);

/* The precision recipe is the keys the table marks as such (formats,
 * rounding, scaling, coverage, optimizer-state storage).  Resets them to
 * their defaults, so that a recipe file loaded next defines them all. */
void config_reset_recipe(config *c);
/* The first recipe key (the `recipe` name excepted) whose values differ, or NULL. */
const char *config_recipe_diff(const config *a, const config *b);

/* Whether key is a key of the table. */
int config_has_key(const char *key);
const char *config_str(const config *c, const char *key);
/* Typed getters; a malformed value is reported in err (first error kept). */
long config_int(const config *c, const char *key, char *err, size_t errlen);
double config_double(const config *c, const char *key, char *err, size_t errlen);

#endif /* EXPERIMENTS_CONFIG_H */
