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

const char *config_str(const config *c, const char *key);
/* Typed getters; a malformed value is reported in err (first error kept). */
long config_int(const config *c, const char *key, char *err, size_t errlen);
double config_double(const config *c, const char *key, char *err, size_t errlen);

#endif /* EXPERIMENTS_CONFIG_H */
