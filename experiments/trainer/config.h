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
/* Parses the text of a config file (as written by config_write); 0 or -1. */
int config_load_text(config *c, const char *text, char *err, size_t errlen);

/* The precision recipe is the keys the table marks as such (formats,
 * rounding, scaling, coverage, optimizer-state storage).  Resets them to
 * their defaults, so that a recipe file loaded next defines them all. */
void config_reset_recipe(config *c);
/* The first recipe key (the `recipe` name excepted) whose values differ, or NULL. */
const char *config_recipe_diff(const config *a, const config *b);

const char *config_str(const config *c, const char *key);
/* Typed getters; a malformed value is reported in err (first error kept). */
long config_int(const config *c, const char *key, char *err, size_t errlen);
double config_double(const config *c, const char *key, char *err, size_t errlen);

#endif /* EXPERIMENTS_CONFIG_H */
