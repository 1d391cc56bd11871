/*
 * A campaign's table, from a folder of run directories (a sweep's folder, or
 * runs brought back from the GPU machine side by side):
 *
 *   bazel run //experiments/studies:campaign -- DIR [--out PREFIX] [--select KEY=VALUE ...]
 *                                              [--reference SUBSTRING]
 *
 * writes PREFIX.csv and PREFIX.md (default DIR/campaign): one row per group,
 * a group being the runs whose config.cfg agree on every key but the seed and
 * the keys that do not change what is trained (run_dir, data paths, threads,
 * device, progress, checkpointing, fault injection; operational_keys below).
 * Its name lists the keys that differ between groups, "key=value ...", in
 * config.cfg's order.  A key absent from a run's config.cfg reads as the
 * trainer's default (config_defaults, as config_write writes it), so a run
 * made before the trainer gained a key groups with later runs of its
 * setting.  Per group:
 *
 *   runs               subfolders with a config.cfg in the group
 *   finished           of them, completed or diverged (summary.json's status);
 *                      the others (interrupted, stopped, failed, no summary)
 *                      count in no statistic below
 *   diverged           the trainer's divergence: at some step the training loss
 *                      was not finite or exceeded its running minimum by more
 *                      than diverge_delta (config.cfg; 2 nats by default)
 *   divergence_freq    diverged / finished, with its two-sided 95%
 *                      Clopper-Pearson interval ci95_low, ci95_high
 *                      (campaign_stats.h)
 *   val_loss_*         the completed runs' final validation loss
 *                      (summary.json's val_loss, the validation after the last
 *                      step): n, mean, sample standard deviation, min, max
 *   div_step_*         the diverged runs' step of divergence (diverged_at):
 *                      mean, min, max
 *
 * --select KEY=VALUE (repeatable) keeps only the runs whose config.cfg has the
 * key with that value, every --select at once; the groups, their names and
 * everything below are then of those runs alone (a campaign with two learning
 * rates is compared at one: --select lr=4e-4).  Values compare as text, as
 * the grouping compares them: lr=4e-4 does not select a config that writes
 * 0.0004.  PREFIX.md then says which runs were selected, above its first table.
 * A --select without "=" or with an empty key, one that matches no run, or
 * several that match none together: one line on stderr and exit 2.
 *
 * Empty cells where a statistic is undefined (no run, one run for a standard
 * deviation).  PREFIX_curves.csv holds every run's trajectory as the sweep's
 * curves.csv does (collect.h: training and validation loss, the validations'
 * epsilon-sharpness), with the run's folder as `point` and its group in front.
 *
 * --reference SUBSTRING names the reference group, the one group whose name
 * contains SUBSTRING (e.g. recipe=bf16; none or several is one line on stderr
 * and exit 2), and adds a second table to PREFIX.md and PREFIX_compare.csv:
 * each group against it (campaign_stats.h for the tests).  Per group:
 *
 *   reference              the reference group's name
 *   finished, diverged     as above, of the group
 *   reference_finished, reference_diverged    the same of the reference
 *   fisher_reference_one_sided, _two_sided
 *                          Fisher's exact test of diverged / finished against
 *                          the reference's: one-sided, the probability of at
 *                          least as many divergences in the group with the
 *                          margins fixed; two-sided, of every table no more
 *                          probable than the observed (empty in the
 *                          reference's own row)
 *   others_finished, others_diverged, fisher_others_one_sided, _two_sided
 *                          the same against every finished run not in the
 *                          group, all other groups pooled
 *   val_pairs              seeds (config.cfg's `seed`) that completed in both
 *                          the group and the reference (this and the next
 *                          four empty in the reference's own row)
 *   val_diff_mean, val_diff_std
 *                          their final validation loss, group - reference:
 *                          mean and sample standard deviation of the differences
 *   val_diff_t, val_diff_p the paired t = mean / (std / sqrt(pairs)) and its
 *                          two-sided p, Student's t with pairs - 1 degrees of
 *                          freedom; empty with fewer than 2 pairs, and when the
 *                          differences are all equal (std 0, t undefined)
 *   div_step_pairs, div_step_pairs_earlier, div_step_earlier_p
 *                          the steps of divergence (diverged_at) of the group's
 *                          diverged runs against the reference's: how many
 *                          pairs of a group run and a reference run, in how
 *                          many of them the group's diverged earlier (a tie
 *                          counting half), and the exact one-sided Mann-Whitney
 *                          p that the group diverges earlier (campaign_stats.h:
 *                          the rank sum's permutation law given the observed
 *                          steps, ties at mid-ranks).  Empty where either has
 *                          no diverged run or the two have more than 200
 *                          together, and in the reference's own row
 *
 * With --reference also the early-warning rule, PREFIX_warn.csv and a third
 * table in PREFIX.md: a run's smoothed gradient norm is the running median of
 * the grad_norm of its last 9 training lines in log.jsonl (fewer before the
 * ninth; the mean of the middle two of an even count), and the rule fires at
 * the first step >= 100 where the smoothed norm is at least --warn-ratio R
 * (default 1.5) times the smoothed norm of the reference run of the same seed
 * at the same step (steps the reference did not log are skipped).  One row per
 * finished run of every other group, by folder name:
 *
 *   run, group, seed       the run's folder, group and config.cfg's seed
 *   outcome, diverged_at   completed, or diverged and its step of divergence
 *   warn_step              the step the rule fired; empty when it did not
 *   steps_ahead            diverged_at - warn_step, for warned diverged runs
 *   max_ratio              the largest ratio at the steps the rule watches
 *
 * The reference run is the first completed run of the reference group with the
 * seed (by folder name); for a diverged run without one, the reference group's
 * run of the seed that diverged last, if it diverged after the run (so that
 * every step compared is one where the reference was still training); runs
 * without either are listed with warn_step, steps_ahead and max_ratio empty
 * and count in no summary.  PREFIX.md sums the
 * rule up per group: diverged runs warned / diverged runs with a reference,
 * completed runs with a false alarm (the rule fired) / completed runs with a
 * reference.  A bad R (not a number > 0) is one line on stderr and exit 2.
 *
 * Without --reference none of these is written and PREFIX.md holds the first table
 * alone.  Each file is written to a temporary name and renamed.  Under `bazel run`
 * a relative DIR or PREFIX is the workspace's.  An unreadable DIR, or one without
 * any run, is one line on stderr and exit 2.
 */
#include <dirent.h>
#include <json-c/json.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "experiments/studies/campaign_stats.h"
#include "experiments/trainer/config.h"
#include "experiments/studies/collect.h"

/* config.cfg keys that do not change what is trained */
static const char *const operational_keys[] = {
    "seed",       "run_dir",    "data",        "val_data",    "progress",   "threads",
    "device",     "ckpt_every", "ckpt_keep",   "stop_at",     "interrupt_at", "crash_at",
    "cuda_graph", "stats_every", "lean_activations", NULL};

typedef struct {
  char *name;
  int n_keys;
  char **keys, **values; /* config.cfg, in its order */
  char status[32];       /* "" when summary.json is absent or unreadable */
  double val_loss;       /* NaN when absent */
  long diverged_at;      /* 0 when absent */
  int group;
} run_info;

static void fail(int code, const char *msg, const char *what) {
  fprintf(stderr, "campaign: %s%s%s\n", msg, what ? ": " : "", what ? what : "");
  exit(code);
}

static void *xrealloc(void *p, size_t n) {
  p = realloc(p, n ? n : 1);
  if (!p) fail(1, "out of memory", NULL);
  return p;
}

static char *xstrdup(const char *s) {
  char *d = strdup(s);
  if (!d) fail(1, "out of memory", NULL);
  return d;
}

static bool operational(const char *key) {
  for (int i = 0; operational_keys[i]; i++)
    if (!strcmp(key, operational_keys[i])) return true;
  return false;
}

/* The "key = value" lines of text (which it cuts up) into r; others are ignored. */
static void parse_config_text(char *text, run_info *r) {
  for (char *line = text, *next; *line; line = next) {
    next = line + strcspn(line, "\n");
    if (*next) *next++ = 0;
    char *eq = strstr(line, " = ");
    if (!eq || eq == line) continue;
    *eq = 0;
    r->keys = xrealloc(r->keys, sizeof(char *) * (r->n_keys + 1));
    r->values = xrealloc(r->values, sizeof(char *) * (r->n_keys + 1));
    r->keys[r->n_keys] = xstrdup(line);
    r->values[r->n_keys++] = xstrdup(eq + 3);
  }
}

/* false when the file is absent. */
static bool read_config(const char *path, run_info *r) {
  char *text = read_text(path);
  if (!text) return false;
  parse_config_text(text, r);
  free(text);
  return true;
}

/* The trainer's defaults as its config.cfg writes them (config_write).  A key
 * the trainer gained after a run was made is absent from that run's
 * config.cfg and reads as its default, which is the behaviour the run had, so
 * the run groups with later runs of its setting. */
static run_info trainer_defaults;

static void read_trainer_defaults(void) {
  config c;
  config_defaults(&c);
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  if (!f) fail(1, "out of memory", NULL);
  config_write(&c, f);
  fclose(f);
  parse_config_text(text, &trainer_defaults);
  free(text);
}

/* key's value in r's config.cfg, else the trainer's default, else NULL. */
static const char *config_value_or_null(const run_info *r, const char *key) {
  for (int i = 0; i < r->n_keys; i++)
    if (!strcmp(r->keys[i], key)) return r->values[i];
  for (int i = 0; i < trainer_defaults.n_keys; i++)
    if (!strcmp(trainer_defaults.keys[i], key)) return trainer_defaults.values[i];
  return NULL;
}

static const char *config_value(const run_info *r, const char *key) {
  const char *v = config_value_or_null(r, key);
  return v ? v : "";
}

/* --select KEY=VALUE: the key split from the value at the first "=" */
typedef struct {
  const char *text; /* as given, for messages */
  char *key;
  const char *value;
} selection;

static selection *selections;
static int n_selections, n_runs_in_dir;

/* Whether r has the key with the value (as text: grouping compares values so
 * too; a key absent from its config.cfg has the trainer's default); a key
 * unknown to both is not an empty value here. */
static bool selected_by(const run_info *r, const selection *s) {
  const char *v = config_value_or_null(r, s->key);
  return v && !strcmp(v, s->value);
}

static void free_run(run_info *r) {
  for (int k = 0; k < r->n_keys; k++) free(r->keys[k]), free(r->values[k]);
  free(r->keys), free(r->values), free(r->name);
}

/* Keeps the runs that every --select selects, in their order; a --select that
 * selects none, or none left by all of them, is refused. */
static int select_runs(run_info *runs, int n, const char *dir) {
  for (int s = 0; s < n_selections; s++) {
    int matches = 0;
    for (int i = 0; i < n; i++) matches += selected_by(&runs[i], &selections[s]);
    if (!matches) {
      fprintf(stderr, "campaign: --select %s matches no run in %s\n", selections[s].text, dir);
      exit(2);
    }
  }
  int kept = 0;
  for (int i = 0; i < n; i++) {
    bool keep = true;
    for (int s = 0; s < n_selections && keep; s++) keep = selected_by(&runs[i], &selections[s]);
    if (keep) runs[kept++] = runs[i];
    else free_run(&runs[i]);
  }
  if (!kept) {
    fputs("campaign: no run matches every --select at once:", stderr);
    for (int s = 0; s < n_selections; s++) fprintf(stderr, " %s", selections[s].text);
    fputc('\n', stderr);
    exit(2);
  }
  return kept;
}

static void read_summary(const char *path, run_info *r) {
  r->val_loss = NAN;
  char *text = read_text(path);
  json_object *o = text ? json_tokener_parse(text) : NULL, *v;
  free(text);
  if (o && json_object_is_type(o, json_type_object)) {
    if (json_object_object_get_ex(o, "status", &v) && json_object_is_type(v, json_type_string))
      snprintf(r->status, sizeof r->status, "%s", json_object_get_string(v));
    if (json_object_object_get_ex(o, "val_loss", &v) &&
        (json_object_is_type(v, json_type_double) || json_object_is_type(v, json_type_int)))
      r->val_loss = json_object_get_double(v);
    if (json_object_object_get_ex(o, "diverged_at", &v) && json_object_is_type(v, json_type_int))
      r->diverged_at = (long)json_object_get_int64(v);
  }
  json_object_put(o);
}

/* The runs of dir (subfolders with a config.cfg), by name. */
static run_info *read_runs(const char *dir, int *n) {
  struct dirent **names;
  const int count = scandir(dir, &names, NULL, alphasort);
  if (count < 0) fail(2, "cannot read the folder", dir);
  run_info *runs = NULL;
  *n = 0;
  char path[8192];
  for (int i = 0; i < count; i++) {
    const char *name = names[i]->d_name;
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    run_info r = {0};
    if (name[0] != '.' && !stat(path, &st) && S_ISDIR(st.st_mode) &&
        (snprintf(path, sizeof path, "%s/%s/config.cfg", dir, name), read_config(path, &r))) {
      r.name = xstrdup(name);
      snprintf(path, sizeof path, "%s/%s/summary.json", dir, name);
      read_summary(path, &r);
      runs = xrealloc(runs, sizeof *runs * (*n + 1));
      runs[(*n)++] = r;
    }
    free(names[i]);
  }
  free(names);
  return runs;
}

/* Keys (first-seen order over the runs) on which the runs differ, but the
 * operational ones. */
static int varying_keys(const run_info *runs, int n, const char ***keys) {
  int nk = 0;
  *keys = NULL;
  for (int i = 0; i < n; i++)
    for (int j = 0; j < runs[i].n_keys; j++) {
      const char *key = runs[i].keys[j];
      bool seen = operational(key);
      for (int k = 0; k < nk && !seen; k++) seen = !strcmp((*keys)[k], key);
      if (seen) continue;
      bool differs = false;
      for (int m = 0; m < n && !differs; m++)
        differs = strcmp(config_value(&runs[m], key), runs[i].values[j]) != 0;
      if (!differs) continue;
      *keys = xrealloc(*keys, sizeof(char *) * (nk + 1));
      (*keys)[nk++] = key;
    }
  return nk;
}

static char *group_name(const run_info *r, const char **keys, int nk) {
  size_t len = 1;
  for (int k = 0; k < nk; k++) len += strlen(keys[k]) + strlen(config_value(r, keys[k])) + 2;
  char *s = xrealloc(NULL, len);
  s[0] = 0;
  for (int k = 0; k < nk; k++)
    sprintf(s + strlen(s), "%s%s=%s", k ? " " : "", keys[k], config_value(r, keys[k]));
  return s;
}

/* A group against the reference group (--reference); p values NaN where a
 * side has no finished run. */
typedef struct {
  double reference_one_sided, reference_two_sided; /* Fisher, against the reference */
  int others_finished, others_diverged;            /* every finished run not in the group */
  double others_one_sided, others_two_sided;       /* Fisher, against them pooled */
  paired_t val_by_seed; /* final validation loss, group - reference, by seed */
  int div_step_pairs;                                /* 0: no Mann-Whitney test */
  double div_step_pairs_earlier, div_step_earlier_p; /* steps to divergence; NaN without one */
} comparison;

typedef struct {
  char *name;
  int runs, finished, diverged;
  double ci_low, ci_high;
  sample_summary val, div_step;
  comparison vs;
} group_row;

static int reference_group = -1; /* the index of --reference's group; -1 without it */

/* A number for the CSV: %.9g, empty when not finite. */
static void csv_num(FILE *f, double v) {
  if (isfinite(v)) fprintf(f, ",%.9g", v);
  else fputs(",", f);
}

/* A CSV field, quoted when it holds a comma, a quote or a line break. */
static void csv_text(FILE *f, const char *s) {
  if (!s[strcspn(s, ",\"\n\r")]) {
    fputs(s, f);
    return;
  }
  fputc('"', f);
  for (; *s; s++) {
    if (*s == '"') fputc('"', f);
    fputc(*s, f);
  }
  fputc('"', f);
}

static void write_csv(FILE *f, const group_row *g, int ng) {
  fputs("group,runs,finished,diverged,divergence_freq,ci95_low,ci95_high,val_loss_n,"
        "val_loss_mean,val_loss_std,val_loss_min,val_loss_max,div_step_mean,div_step_min,"
        "div_step_max\n", f);
  for (int i = 0; i < ng; i++) {
    csv_text(f, g[i].name);
    fprintf(f, ",%d,%d,%d", g[i].runs, g[i].finished, g[i].diverged);
    csv_num(f, g[i].finished ? (double)g[i].diverged / g[i].finished : NAN);
    csv_num(f, g[i].ci_low);
    csv_num(f, g[i].ci_high);
    fprintf(f, ",%d", g[i].val.n);
    csv_num(f, g[i].val.mean);
    csv_num(f, g[i].val.std);
    csv_num(f, g[i].val.min);
    csv_num(f, g[i].val.max);
    csv_num(f, g[i].div_step.mean);
    csv_num(f, g[i].div_step.min);
    csv_num(f, g[i].div_step.max);
    fputc('\n', f);
  }
}

/* A group's name in a markdown cell: | escaped, line breaks as spaces. */
static void md_name(FILE *f, const char *name) {
  for (const char *s = name; *s; s++) {
    if (*s == '|') fputc('\\', f);
    fputc(*s == '\n' ? ' ' : *s, f);
  }
}

/* A p value in a markdown cell: 3 significant digits, "-" when undefined. */
static void md_p(FILE *f, double p) {
  if (isfinite(p)) fprintf(f, "%.3g", p);
  else fputs("-", f);
}

static void write_compare_csv(FILE *f, const group_row *g, int ng) {
  fputs("group,reference,finished,diverged,reference_finished,reference_diverged,"
        "fisher_reference_one_sided,fisher_reference_two_sided,others_finished,others_diverged,"
        "fisher_others_one_sided,fisher_others_two_sided,val_pairs,val_diff_mean,val_diff_std,"
        "val_diff_t,val_diff_p,div_step_pairs,div_step_pairs_earlier,div_step_earlier_p\n", f);
  const group_row *ref = &g[reference_group];
  for (int i = 0; i < ng; i++) {
    const comparison *c = &g[i].vs;
    csv_text(f, g[i].name);
    fputc(',', f);
    csv_text(f, ref->name);
    fprintf(f, ",%d,%d,%d,%d", g[i].finished, g[i].diverged, ref->finished, ref->diverged);
    csv_num(f, c->reference_one_sided);
    csv_num(f, c->reference_two_sided);
    fprintf(f, ",%d,%d", c->others_finished, c->others_diverged);
    csv_num(f, c->others_one_sided);
    csv_num(f, c->others_two_sided);
    if (i == reference_group) fputs(",", f);
    else fprintf(f, ",%d", c->val_by_seed.diff.n);
    csv_num(f, c->val_by_seed.diff.mean);
    csv_num(f, c->val_by_seed.diff.std);
    csv_num(f, c->val_by_seed.t);
    csv_num(f, c->val_by_seed.p);
    if (c->div_step_pairs) fprintf(f, ",%d", c->div_step_pairs);
    else fputs(",", f);
    csv_num(f, c->div_step_pairs_earlier);
    csv_num(f, c->div_step_earlier_p);
    fputc('\n', f);
  }
}

/* The second markdown table, after a blank line: each group against the reference. */
static void write_md_comparison(FILE *f, const group_row *g, int ng) {
  fputs("\nAgainst the reference group ", f);
  md_name(f, g[reference_group].name);
  fputs(": Fisher's exact test of the divergences (one-sided: the group diverges more "
        "often), against the reference and against all other finished runs pooled; the final "
        "validation loss paired by seed (group − reference) with its two-sided paired t-test; "
        "the steps to divergence against the reference's, pairs of a diverged run of each in "
        "which the group's diverged earlier (ties half) and the exact one-sided Mann-Whitney p "
        "that the group diverges earlier.\n\n"
        "| group | diverged / finished | vs reference: p one-sided, two-sided | all other runs: "
        "diverged / finished; p one-sided, two-sided | val loss − reference by seed: mean ± "
        "std, pairs; t, p | steps to divergence vs reference: pairs earlier; p one-sided "
        "(earlier) |\n"
        "|---|---|---|---|---|---|\n", f);
  for (int i = 0; i < ng; i++) {
    const comparison *c = &g[i].vs;
    fputs("| ", f);
    md_name(f, g[i].name);
    fprintf(f, " | %d / %d | ", g[i].diverged, g[i].finished);
    if (i == reference_group) fputs("(reference)", f);
    else md_p(f, c->reference_one_sided), fputs(", ", f), md_p(f, c->reference_two_sided);
    fprintf(f, " | %d / %d; ", c->others_diverged, c->others_finished);
    md_p(f, c->others_one_sided), fputs(", ", f), md_p(f, c->others_two_sided);
    fputs(" | ", f);
    const paired_t *v = &c->val_by_seed;
    if (i == reference_group) fputs("(reference)", f);
    else if (v->diff.n == 0) fputs("-", f);
    else {
      if (v->diff.n >= 2) fprintf(f, "%+.4f ± %.4f, %d; ", v->diff.mean, v->diff.std, v->diff.n);
      else fprintf(f, "%+.4f, 1; ", v->diff.mean);
      if (isfinite(v->t)) fprintf(f, "t %.3f, p %.3g", v->t, v->p);
      else fputs("-", f);
    }
    fputs(" | ", f);
    if (i == reference_group) fputs("(reference)", f);
    else if (!c->div_step_pairs) fputs("-", f);
    else {
      fprintf(f, "%g / %d; ", c->div_step_pairs_earlier, c->div_step_pairs);
      md_p(f, c->div_step_earlier_p);
    }
    fputs(" |\n", f);
  }
}

/* The early-warning rule (--reference): one row per finished run of the
 * groups other than the reference. */
enum { warn_window = 9, warn_first_step = 100 };

typedef struct {
  const run_info *run;
  bool diverged, has_reference;
  long warn_step;   /* 0 when the rule did not fire */
  double max_ratio; /* NaN without a reference or a common step */
} warn_row;

static warn_row *warnings;
static int n_warnings;
static double warn_threshold; /* --warn-ratio */

/* The run's training lines in log.jsonl (those with a step and a numeric
 * grad_norm), as steps and smoothed gradient norms: the running median of the
 * last warn_window grad_norms.  Returns how many; *steps and *smoothed are
 * allocated (NULL, 0 without a log). */
static int smoothed_grad_norms(const char *dir, const run_info *r, long **steps,
                               double **smoothed) {
  char path[8192];
  snprintf(path, sizeof path, "%s/%s/log.jsonl", dir, r->name);
  char *log = read_text(path);
  int n = 0;
  double *raw = NULL;
  *steps = NULL, *smoothed = NULL;
  for (char *line = log, *next; line && *line; line = next) {
    next = line + strcspn(line, "\n");
    if (*next) *next++ = 0;
    json_object *o = json_tokener_parse(line), *step, *norm;
    if (o && json_object_is_type(o, json_type_object) &&
        json_object_object_get_ex(o, "step", &step) && json_object_is_type(step, json_type_int) &&
        json_object_object_get_ex(o, "grad_norm", &norm) &&
        (json_object_is_type(norm, json_type_double) || json_object_is_type(norm, json_type_int))) {
      /* a resumed run repeats the steps after its checkpoint: the last line
       * of a step wins, as in curves.csv (collect.h) */
      while (n > 0 && (*steps)[n - 1] >= (long)json_object_get_int64(step)) n--;
      *steps = xrealloc(*steps, sizeof(long) * (n + 1));
      raw = xrealloc(raw, sizeof(double) * (n + 1));
      (*steps)[n] = (long)json_object_get_int64(step);
      raw[n++] = json_object_get_double(norm);
    }
    json_object_put(o);
  }
  free(log);
  *smoothed = xrealloc(NULL, sizeof(double) * (n ? n : 1));
  for (int i = 0; i < n; i++) {
    double window[warn_window];
    int w = 0;
    for (int j = i >= warn_window - 1 ? i - (warn_window - 1) : 0; j <= i; j++) {
      int k = w++; /* insertion into the sorted window */
      for (; k > 0 && window[k - 1] > raw[j]; k--) window[k] = window[k - 1];
      window[k] = raw[j];
    }
    (*smoothed)[i] = w % 2 ? window[w / 2] : (window[w / 2 - 1] + window[w / 2]) / 2;
  }
  free(raw);
  return n;
}

/* The first completed run of the reference group with r's seed, or NULL. */
/* The reference run of r's seed: the first completed one; else, for a run
 * that diverged, the reference run of the seed that diverged last, if it
 * diverged after r (at a learning rate where no reference run completes, the
 * rule still compares r with a reference that was training normally at every
 * step r logged). */
static const run_info *same_seed_reference(const run_info *r, const run_info *runs, int n) {
  const char *seed = config_value(r, "seed");
  const run_info *outlived = NULL;
  for (int j = 0; j < n && *seed; j++) {
    const run_info *c = &runs[j];
    if (c->group != reference_group || strcmp(config_value(c, "seed"), seed)) continue;
    if (!strcmp(c->status, "completed")) return c;
    if (!strcmp(c->status, "diverged") && (!outlived || c->diverged_at > outlived->diverged_at))
      outlived = c;
  }
  if (outlived && !strcmp(r->status, "diverged") && r->diverged_at > 0 &&
      outlived->diverged_at > r->diverged_at)
    return outlived;
  return NULL;
}

static void early_warnings(const char *dir, const run_info *runs, int n, double warn_ratio) {
  warnings = xrealloc(NULL, sizeof(warn_row) * n);
  warn_threshold = warn_ratio;
  for (int i = 0; i < n; i++) {
    const run_info *r = &runs[i];
    const bool diverged = !strcmp(r->status, "diverged");
    if (r->group == reference_group || (!diverged && strcmp(r->status, "completed"))) continue;
    warn_row *w = &warnings[n_warnings++];
    *w = (warn_row){.run = r, .diverged = diverged, .max_ratio = NAN};
    const run_info *ref = same_seed_reference(r, runs, n);
    if (!ref) continue;
    w->has_reference = true;
    long *steps, *ref_steps;
    double *smoothed, *ref_smoothed;
    const int m = smoothed_grad_norms(dir, r, &steps, &smoothed);
    const int m_ref = smoothed_grad_norms(dir, ref, &ref_steps, &ref_smoothed);
    for (int a = 0, b = 0; a < m; a++) { /* both logs in step order */
      while (b < m_ref && ref_steps[b] < steps[a]) b++;
      if (b == m_ref || ref_steps[b] != steps[a] || steps[a] < warn_first_step) continue;
      const double ratio = smoothed[a] / ref_smoothed[b];
      if (!(ratio <= w->max_ratio)) w->max_ratio = ratio; /* NaN at first */
      if (!w->warn_step && ratio >= warn_ratio) w->warn_step = steps[a];
    }
    free(steps), free(smoothed), free(ref_steps), free(ref_smoothed);
  }
}

static void write_warn_csv(FILE *f, const group_row *g, int ng) {
  (void)ng;
  fputs("run,group,seed,outcome,diverged_at,warn_step,steps_ahead,max_ratio\n", f);
  for (int i = 0; i < n_warnings; i++) {
    const warn_row *w = &warnings[i];
    csv_text(f, w->run->name);
    fputc(',', f);
    csv_text(f, g[w->run->group].name);
    fputc(',', f);
    csv_text(f, config_value(w->run, "seed"));
    fprintf(f, ",%s,", w->diverged ? "diverged" : "completed");
    if (w->diverged && w->run->diverged_at > 0) fprintf(f, "%ld", w->run->diverged_at);
    fputc(',', f);
    if (w->warn_step) fprintf(f, "%ld", w->warn_step);
    fputc(',', f);
    if (w->warn_step && w->diverged && w->run->diverged_at > 0)
      fprintf(f, "%ld", w->run->diverged_at - w->warn_step);
    csv_num(f, w->max_ratio);
    fputc('\n', f);
  }
}

/* The third markdown table: the rule per group, then per run. */
static void write_md_warnings(FILE *f, const group_row *g, int ng) {
  fprintf(f, "\nEarly warning: the smoothed gradient norm (running median of 9 training steps) "
          "against the reference run of the same seed; the rule fires at the first step >= 100 "
          "where the ratio reaches %g.  The reference run is the seed's completed one, or for a "
          "diverged run without one, the seed's reference run that diverged last if it diverged "
          "later; runs without either show \"-\" and count in no summary.\n\n"
          "| group | diverged runs warned / with a reference | completed runs with a false "
          "alarm / with a reference |\n|---|---|---|\n", warn_threshold);
  for (int k = 0; k < ng; k++) {
    if (k == reference_group) continue;
    int warned = 0, diverged = 0, alarms = 0, completed = 0;
    for (int i = 0; i < n_warnings; i++) {
      const warn_row *w = &warnings[i];
      if (w->run->group != k || !w->has_reference) continue;
      if (w->diverged) diverged++, warned += w->warn_step > 0;
      else completed++, alarms += w->warn_step > 0;
    }
    fputs("| ", f);
    md_name(f, g[k].name);
    fprintf(f, " | %d / %d | %d / %d |\n", warned, diverged, alarms, completed);
  }
  fputs("\n| run | group | seed | outcome | warned at step | steps ahead | largest ratio |\n"
        "|---|---|---|---|---|---|---|\n", f);
  for (int i = 0; i < n_warnings; i++) {
    const warn_row *w = &warnings[i];
    fprintf(f, "| %s | ", w->run->name);
    md_name(f, g[w->run->group].name);
    fprintf(f, " | %s | ", config_value(w->run, "seed"));
    if (w->diverged) fprintf(f, "diverged at %ld | ", w->run->diverged_at);
    else fputs("completed | ", f);
    if (w->warn_step) fprintf(f, "%ld | ", w->warn_step);
    else fputs("- | ", f);
    if (w->warn_step && w->diverged && w->run->diverged_at > 0)
      fprintf(f, "%ld | ", w->run->diverged_at - w->warn_step);
    else fputs("- | ", f);
    if (isfinite(w->max_ratio)) fprintf(f, "%.3f |\n", w->max_ratio);
    else fputs("- |\n", f);
  }
}

/* The markdown table: "-" where the CSV is empty; | in a name escaped. */
static void write_md(FILE *f, const group_row *g, int ng) {
  if (n_selections) {
    int runs = 0;
    for (int i = 0; i < ng; i++) runs += g[i].runs;
    fputs("Runs selected:", f);
    for (int s = 0; s < n_selections; s++) fprintf(f, " %s", selections[s].text);
    fprintf(f, " (%d of the %d runs in the folder).\n\n", runs, n_runs_in_dir);
  }
  fputs("| group | runs (finished) | diverged | frequency [95% CI] | final val loss: mean "
        "± std (min – max), n | steps to divergence: mean (min – max) |\n"
        "|---|---|---|---|---|---|\n", f);
  for (int i = 0; i < ng; i++) {
    fputs("| ", f);
    md_name(f, g[i].name);
    fprintf(f, " | %d (%d) | %d | ", g[i].runs, g[i].finished, g[i].diverged);
    if (g[i].finished)
      fprintf(f, "%.2f [%.4f, %.4f]", (double)g[i].diverged / g[i].finished, g[i].ci_low,
              g[i].ci_high);
    else fputs("-", f);
    fputs(" | ", f);
    const sample_summary *v = &g[i].val;
    if (v->n >= 2)
      fprintf(f, "%.4f ± %.4f (%.4f – %.4f), %d", v->mean, v->std, v->min, v->max, v->n);
    else if (v->n == 1) fprintf(f, "%.4f, 1", v->mean);
    else fputs("-", f);
    fputs(" | ", f);
    const sample_summary *d = &g[i].div_step;
    if (d->n) fprintf(f, "%.0f (%.0f – %.0f)", d->mean, d->min, d->max);
    else fputs("-", f);
    fputs(" |\n", f);
  }
  if (reference_group >= 0) write_md_comparison(f, g, ng), write_md_warnings(f, g, ng);
}

/* The runs' trajectories: "group," then curves.csv's columns. */
static const char *curves_dir;
static const run_info *curves_runs;
static int curves_n;
static void write_curves(FILE *f, const group_row *g, int ng) {
  (void)ng;
  fprintf(f, "group,%s", curves_header);
  char path[8192];
  for (int i = 0; i < curves_n; i++) {
    snprintf(path, sizeof path, "%s/%s/log.jsonl", curves_dir, curves_runs[i].name);
    char *log = read_text(path), *rows = NULL;
    size_t len = 0;
    FILE *mem = log ? open_memstream(&rows, &len) : NULL;
    if (mem) {
      curves_rows(mem, NULL, curves_runs[i].name, log);
      fclose(mem);
      for (char *line = rows; line && *line;) { /* each row with the group in front */
        char *nl = strchr(line, '\n');
        csv_text(f, g[curves_runs[i].group].name);
        fprintf(f, ",%.*s\n", (int)(nl ? nl - line : (long)strlen(line)), line);
        line = nl ? nl + 1 : line + strlen(line);
      }
    }
    free(rows);
    free(log);
  }
}

/* Writes path through path.tmp and a rename; exits 1 on failure. */
static void write_atomic(const char *path, void (*body)(FILE *, const group_row *, int),
                         const group_row *g, int ng) {
  char tmp[8300];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE *f = fopen(tmp, "w");
  if (!f) fail(1, "cannot write", tmp);
  body(f, g, ng);
  const bool ok = fflush(f) == 0 && !ferror(f);
  if ((fclose(f) != 0) | !ok || rename(tmp, path) != 0) {
    unlink(tmp);
    fail(1, "cannot write", path);
  }
}

/* The steps of divergence of group g's diverged runs, into steps; how many. */
static int divergence_steps(const run_info *runs, int n, int g, double *steps) {
  int count = 0;
  for (int i = 0; i < n; i++)
    if (runs[i].group == g && !strcmp(runs[i].status, "diverged") && runs[i].diverged_at > 0)
      steps[count++] = (double)runs[i].diverged_at;
  return count;
}

/* Each group against the reference group: Fisher's exact test of its
 * divergences against the reference's and against every other finished run,
 * its completed runs' final validation loss minus the reference's of the
 * same seed (a seed run twice on a side pairs its first run by folder name),
 * and the Mann-Whitney test of its steps of divergence against the reference's. */
static void compare(group_row *groups, int ng, const run_info *runs, int n) {
  int total_finished = 0, total_diverged = 0;
  for (int g = 0; g < ng; g++)
    total_finished += groups[g].finished, total_diverged += groups[g].diverged;
  const group_row *ref = &groups[reference_group];
  double *differences = xrealloc(NULL, sizeof(double) * n);
  double *steps = xrealloc(NULL, sizeof(double) * n);
  double *ref_steps = xrealloc(NULL, sizeof(double) * n);
  const int n_ref_steps = divergence_steps(runs, n, reference_group, ref_steps);
  for (int g = 0; g < ng; g++) {
    comparison *c = &groups[g].vs;
    const int finished = groups[g].finished, diverged = groups[g].diverged;
    c->reference_one_sided = c->reference_two_sided = NAN;
    c->others_one_sided = c->others_two_sided = NAN;
    if (g != reference_group && finished && ref->finished)
      fisher_exact(diverged, finished - diverged, ref->diverged, ref->finished - ref->diverged,
                   &c->reference_one_sided, &c->reference_two_sided);
    c->others_finished = total_finished - finished;
    c->others_diverged = total_diverged - diverged;
    if (finished && c->others_finished)
      fisher_exact(diverged, finished - diverged, c->others_diverged,
                   c->others_finished - c->others_diverged, &c->others_one_sided,
                   &c->others_two_sided);
    int pairs = 0;
    for (int i = 0; i < n && g != reference_group; i++) {
      const run_info *r = &runs[i];
      const char *seed = config_value(r, "seed");
      if (r->group != g || strcmp(r->status, "completed") || !isfinite(r->val_loss) || !*seed)
        continue;
      bool seed_paired = false;
      for (int j = 0; j < i && !seed_paired; j++)
        seed_paired = runs[j].group == g && !strcmp(runs[j].status, "completed") &&
                      isfinite(runs[j].val_loss) && !strcmp(config_value(&runs[j], "seed"), seed);
      for (int j = 0; j < n && !seed_paired; j++)
        if (runs[j].group == reference_group && !strcmp(runs[j].status, "completed") &&
            isfinite(runs[j].val_loss) && !strcmp(config_value(&runs[j], "seed"), seed)) {
          differences[pairs++] = r->val_loss - runs[j].val_loss;
          seed_paired = true;
        }
    }
    c->val_by_seed = paired_t_test(differences, pairs);
    c->div_step_pairs_earlier = c->div_step_earlier_p = NAN;
    const int n_steps = g == reference_group ? 0 : divergence_steps(runs, n, g, steps);
    if (n_steps && n_ref_steps &&
        mann_whitney_earlier(steps, n_steps, ref_steps, n_ref_steps, &c->div_step_pairs_earlier,
                             &c->div_step_earlier_p) == 0)
      c->div_step_pairs = n_steps * n_ref_steps;
  }
  free(differences), free(steps), free(ref_steps);
}

#define USAGE                                                                            \
  "campaign DIR [--out PREFIX] [--select KEY=VALUE ...] [--reference SUBSTRING [--warn-ratio R]]"

int main(int argc, char **argv) {
  const char *dir = NULL, *out = NULL, *reference = NULL;
  double warn_ratio = 1.5;
  read_trainer_defaults();
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--out") && i + 1 < argc) out = argv[++i];
    else if (!strcmp(argv[i], "--reference") && i + 1 < argc) reference = argv[++i];
    else if (!strcmp(argv[i], "--select") && i + 1 < argc) {
      const char *text = argv[++i], *eq = strchr(text, '=');
      if (!eq || eq == text) fail(2, "--select wants KEY=VALUE (the value compared as text)", text);
      char *key = strndup(text, eq - text);
      if (!key) fail(1, "out of memory", NULL);
      selections = xrealloc(selections, sizeof *selections * (n_selections + 1));
      selections[n_selections++] = (selection){.text = text, .key = key, .value = eq + 1};
    }
    else if (!strcmp(argv[i], "--warn-ratio") && i + 1 < argc) {
      char *end;
      warn_ratio = strtod(argv[++i], &end);
      if (end == argv[i] || *end || !isfinite(warn_ratio) || warn_ratio <= 0)
        fail(2, "--warn-ratio wants a number > 0", argv[i]);
    }
    else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      printf("usage: " USAGE "   (writes PREFIX.csv, PREFIX.md, PREFIX_curves.csv, with "
             "--reference PREFIX_compare.csv and PREFIX_warn.csv; default PREFIX DIR/campaign; "
             "--select keeps the runs whose config.cfg has KEY with VALUE, as text, every "
             "--select at once)\n");
      return 0;
    } else if (!dir && argv[i][0] != '-') dir = argv[i];
    else fail(2, "unexpected argument (usage: " USAGE ")", argv[i]);
  }
  if (!dir) fail(2, "usage: " USAGE, NULL);
  /* under `bazel run` the current directory is the binary's runfiles: DIR and
   * PREFIX, when relative, are the workspace's */
  const char *workspace = getenv("BUILD_WORKSPACE_DIRECTORY");
  if (workspace && *workspace && chdir(workspace) != 0)
    fail(2, "cannot enter the workspace", workspace);
  int n;
  run_info *runs = read_runs(dir, &n);
  if (n == 0) fail(2, "no run directories (subfolders with a config.cfg)", dir);
  n_runs_in_dir = n;
  if (n_selections) n = select_runs(runs, n, dir);

  const char **keys;
  const int nk = varying_keys(runs, n, &keys);
  group_row *groups = NULL;
  int ng = 0;
  for (int i = 0; i < n; i++) {
    char *name = group_name(&runs[i], keys, nk);
    if (!*name) name = (free(name), xstrdup(*config_value(&runs[i], "recipe")
                                                 ? config_value(&runs[i], "recipe")
                                                 : "all"));
    int g = 0;
    while (g < ng && strcmp(groups[g].name, name)) g++;
    if (g == ng) {
      groups = xrealloc(groups, sizeof *groups * (ng + 1));
      groups[ng++] = (group_row){.name = name};
    } else free(name);
    runs[i].group = g;
  }
  double *val = xrealloc(NULL, sizeof(double) * n), *steps = xrealloc(NULL, sizeof(double) * n);
  for (int g = 0; g < ng; g++) {
    int nv = 0, nd = 0;
    for (int i = 0; i < n; i++) {
      if (runs[i].group != g) continue;
      const run_info *r = &runs[i];
      groups[g].runs++;
      const bool completed = !strcmp(r->status, "completed"),
                 diverged = !strcmp(r->status, "diverged");
      groups[g].finished += completed || diverged;
      groups[g].diverged += diverged;
      if (completed && isfinite(r->val_loss)) val[nv++] = r->val_loss;
      if (diverged && r->diverged_at > 0) steps[nd++] = (double)r->diverged_at;
    }
    groups[g].ci_low = groups[g].ci_high = NAN;
    if (groups[g].finished)
      clopper_pearson(groups[g].diverged, groups[g].finished, 0.05, &groups[g].ci_low,
                      &groups[g].ci_high);
    groups[g].val = summarise(val, nv);
    groups[g].div_step = summarise(steps, nd);
  }
  if (reference) {
    int matches = 0;
    for (int g = 0; g < ng; g++)
      if (strstr(groups[g].name, reference)) matches++, reference_group = g;
    if (matches != 1) {
      fprintf(stderr, "campaign: --reference %s matches %d groups, not exactly one\n", reference,
              matches);
      exit(2);
    }
    compare(groups, ng, runs, n);
    early_warnings(dir, runs, n, warn_ratio);
  }

  char path[8192];
  snprintf(path, sizeof path, "%s.csv", out ? out : "");
  if (!out) snprintf(path, sizeof path, "%s/campaign.csv", dir);
  write_atomic(path, write_csv, groups, ng);
  if (n_selections)
    printf("campaign: %d of %d runs selected, in %d groups: %s\n", n, n_runs_in_dir, ng, path);
  else printf("campaign: %d runs in %d groups: %s\n", n, ng, path);
  path[strlen(path) - 4] = 0;
  strcat(path, ".md");
  write_atomic(path, write_md, groups, ng);
  printf("campaign: %s\n", path);
  path[strlen(path) - 3] = 0;
  strcat(path, "_curves.csv");
  curves_dir = dir, curves_runs = runs, curves_n = n;
  write_atomic(path, write_curves, groups, ng);
  printf("campaign: %s\n", path);
  if (reference_group >= 0) {
    path[strlen(path) - strlen("_curves.csv")] = 0;
    strcat(path, "_compare.csv");
    write_atomic(path, write_compare_csv, groups, ng);
    printf("campaign: %s\n", path);
    path[strlen(path) - strlen("_compare.csv")] = 0;
    strcat(path, "_warn.csv");
    write_atomic(path, write_warn_csv, groups, ng);
    printf("campaign: %s\n", path);
  }

  for (int i = 0; i < n; i++) free_run(&runs[i]);
  for (int s = 0; s < n_selections; s++) free(selections[s].key);
  for (int g = 0; g < ng; g++) free(groups[g].name);
  free(runs), free(groups), free(keys), free(val), free(steps), free(warnings), free(selections);
  return 0;
}
