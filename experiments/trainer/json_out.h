/* Numbers in the JSON lines the trainer and its tools write (log.jsonl,
 * sharpness.jsonl): %.9g, and null where the value is not finite (a diverged
 * loss), since JSON has no NaN or infinity and the sweep's collector parses
 * every line. */
#ifndef EXPERIMENTS_TRAINER_JSON_OUT_H
#define EXPERIMENTS_TRAINER_JSON_OUT_H

#include <math.h>
#include <stddef.h>
#include <stdio.h>

static inline void json_num(FILE *f, const char *key, double v) {
  if (isfinite(v)) fprintf(f, "\"%s\":%.9g", key, v);
  else fprintf(f, "\"%s\":null", key);
}

/* "key":value pairs separated by commas (json_num each). */
typedef struct {
  const char *key;
  double value;
} json_field;

static inline void json_nums(FILE *f, const json_field *fields, size_t n) {
  for (size_t i = 0; i < n; i++) {
    if (i) fputc(',', f);
    json_num(f, fields[i].key, fields[i].value);
  }
}

#endif /* EXPERIMENTS_TRAINER_JSON_OUT_H */
