/*
 * A study: its config (experiments/studies/sweeps/README.md) read with the trainer's
 * config syntax (config_read_lines), and its grid of points.  Pure functions
 * of their inputs but for study_load, which reads the file.
 */
#ifndef EXPERIMENTS_STUDIES_STUDY_H
#define EXPERIMENTS_STUDIES_STUDY_H

#include <stdbool.h>
#include <stddef.h>

#define STUDY_MAX_AXES 32

/* A growable list of strings (owned). */
typedef struct {
  char **v;
  int n, cap;
} strlist;

void strlist_push(strlist *l, const char *s);
void strlist_free(strlist *l);
/* The words of s (split on blanks) appended to l. */
void strlist_split(strlist *l, const char *s);
/* The items joined by sep, malloc'ed. */
char *strlist_join(const strlist *l, const char *sep);

typedef struct {
  char *study;                            /* NAME, NAME-quick under --quick */
  char *recipes, *lrs, *seeds, *plots;    /* word lists */
  char *sharpness, *shadow;               /* evaluation arguments ("" none) */
  strlist sets;                           /* "KEY=VALUE", `set` then (quick) `quick` */
  strlist vary_keys, vary_values;         /* one axis each: key, its words */
  strlist variant_names, variant_sets;    /* "-" and "" when the study has none */
} study;

/* Reads the study config at path; quick applies the `quick` lines.  Every
 * `set`, `quick` and `variant` assignment is checked against the trainer's
 * key table (config_set), the key of a `vary` axis too; an axis value is
 * checked by the trainer of its point.  0, or -1 with one line in err. */
int study_load(study *s, const char *path, bool quick, char *err, size_t errlen);
void study_free(study *s);

/* One point of the grid. */
typedef struct {
  char *name;    /* RECIPE[_VARIANT]_lrLR_sSEED[_KEY-V...] */
  char *recipe, *variant, *lr, *seed;
  char *axes;    /* "KEY=V;KEY=V" */
  char *args;    /* the trainer's --set assignments, space-separated */
} sweep_point;

/* The grid in its order: recipes, variants, lrs, seeds, then each `vary`
 * axis in the order of the file (the last varies fastest). */
int study_expand(const study *s, sweep_point **points);
void points_free(sweep_point *p, int n);

/* The line of grid.txt: name|recipe|variant|lr|seed|axes|args (malloc'ed, no newline). */
char *point_grid_line(const sweep_point *p);
/* What a run must have been started with to count for this point: "RECIPE ARGS"
 * (the point's folder keeps it in sweep_args; malloc'ed). */
char *point_fingerprint(const sweep_point *p);
/* Whether the text of a sweep_args file is fp (trailing newlines ignored). */
bool fingerprint_matches(const char *file_text, const char *fp);

#endif /* EXPERIMENTS_STUDIES_STUDY_H */
