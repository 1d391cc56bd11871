/*
 * A sweep's CSVs from what its runs wrote (the trainer's summary.json and
 * log.jsonl, the sharpness lines, the shadow checks' shadow.csv), read with
 * json-c.  Numbers are copied as the trainer wrote them (json-c keeps the text
 * of a parsed number), so the CSVs hold the runs' own digits; null and absent
 * fields are empty.  Only finished points (completed, diverged) give rows to
 * curves.csv, stats.csv and the evaluations' CSVs; summary.csv has a row for
 * every point, without numbers for one that did not give a result.
 *
 *   summary.csv    point,group,recipe,variant,overrides,lr,seed,status,steps,
 *                  final_train_loss,final_val_loss,diverged_step,tokens_per_s
 *   curves.csv     point,step,train_loss,val_loss,esharp_last_1e-3,
 *                  esharp_last_5e-4,esharp_all_1e-3,esharp_all_5e-4 (the
 *                  validation's epsilon-sharpness of the logits,
 *                  experiments/trainer/logit_sharpness.h; the last line of a
 *                  step wins: a resumed run repeats the steps after its
 *                  checkpoint)
 *   stats.csv      point,step,site,use,format,amax,underflow,overflow,mse,
 *                  cosine,scale,delayed_over_current (stays with the runs)
 *   sharpness.csv  point,step,rho,directions,loss,loss_perturbed,kl_mean,kl_max,
 *                  sharpness (rows in the order of the step)
 *   shadow.csv     point, then the columns of the run's shadow.csv
 */
#ifndef EXPERIMENTS_STUDIES_COLLECT_H
#define EXPERIMENTS_STUDIES_COLLECT_H

#include <stdbool.h>
#include <stdio.h>

#include "experiments/studies/study.h"

extern const char summary_header[], curves_header[], stats_header[], sharpness_header[];

/* Whether an outcome is a result: completed or diverged. */
bool outcome_finished(const char *outcome);

/* The summary.csv row of point p (with its newline): outcome is what the
 * sweep made of the run (completed, diverged, interrupted, stopped, failed,
 * not-run); summary_json the text of its summary.json (NULL: none).  */
void summary_row(FILE *out, const sweep_point *p, const char *outcome, const char *summary_json);

/* The curves.csv rows of point `name` from its log (log.jsonl text), and its
 * statistics rows into stats (NULL: none).  Lines that are not JSON objects
 * (a line cut by a crash) are skipped. */
void curves_rows(FILE *curves, FILE *stats, const char *name, const char *log_jsonl);

/* The sharpness.csv rows of point `name` from its sharpness.jsonl text. */
void sharpness_rows(FILE *out, const char *name, const char *sharpness_jsonl);

/* The step of a sharpness.jsonl line, or -1. */
long long sharpness_line_step(const char *line);

/* Writes the CSVs of the grid into dir (stats.csv too) from the point
 * folders dir/<point>/; outcomes[i] is point i's.  0, or -1 (errno). */
int collect_csvs(const char *dir, const sweep_point *points, int n, const char *const *outcomes);

/* The whole of a file, NUL-terminated (malloc'ed), or NULL. */
char *read_text(const char *path);

#endif /* EXPERIMENTS_STUDIES_COLLECT_H */
