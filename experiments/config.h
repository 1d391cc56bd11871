/*
 * Run configuration: a flat table of key=value settings with defaults (the
 * table in config.c documents every key).  Files hold `key = value` lines
 * ('#' starts a comment); `--set key=value` overrides; an unknown key is an
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
int config_set(config *c, const char *key, const char *value, char *err, size_t errlen);
int config_set_assignment(config *c, const char *assignment, char *err, size_t errlen);
int config_load_file(config *c, const char *path, char *err, size_t errlen);
void config_write(const config *c, FILE *f);
/* Parses the text of a config file (as written by config_write); 0 or -1. */
int config_load_text(config *c, const char *text, char *err, size_t errlen);

/* The precision recipe is the keys from `recipe` to the end of the table
 * (formats, rounding, scaling, coverage, optimizer-state storage).  Resets
 * them to their defaults, so that a recipe file loaded next defines them all. */
void config_reset_recipe(config *c);
/* The first recipe key (the `recipe` name excepted) whose values differ, or NULL. */
const char *config_recipe_diff(const config *a, const config *b);

const char *config_str(const config *c, const char *key);
/* Typed getters; a malformed value is reported in err (first error kept). */
long config_int(const config *c, const char *key, char *err, size_t errlen);
double config_double(const config *c, const char *key, char *err, size_t errlen);

#endif /* EXPERIMENTS_CONFIG_H */
