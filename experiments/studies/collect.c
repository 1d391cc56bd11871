/* A sweep's CSVs (collect.h). */
#include "experiments/studies/collect.h"

#include <errno.h>
#include <json-c/json.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "experiments/trainer/logit_sharpness.h"

const char summary_header[] =
    "point,group,recipe,variant,overrides,lr,seed,status,steps,final_train_loss,"
    "final_val_loss,diverged_step,tokens_per_s\n";
const char curves_header[] =
    "point,step,train_loss,val_loss,esharp_last_1e-3,esharp_last_5e-4,esharp_all_1e-3,"
    "esharp_all_5e-4\n";
const char stats_header[] =
    "point,step,site,use,format,amax,underflow,overflow,mse,cosine,scale,"
    "delayed_over_current\n";
const char sharpness_header[] =
    "point,step,rho,directions,loss,loss_perturbed,kl_mean,kl_max,sharpness\n";

bool outcome_finished(const char *o) { return !strcmp(o, "completed") || !strcmp(o, "diverged"); }

char *read_text(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  struct stat st;
  if (fstat(fileno(f), &st) || !S_ISREG(st.st_mode)) {
    fclose(f);
    return NULL;
  }
  size_t cap = (size_t)st.st_size + 1, n = 0;
  char *buf = malloc(cap);
  for (size_t got; buf && (got = fread(buf + n, 1, cap - n - 1, f)) > 0;) {
    n += got;
    if (n + 1 == cap) {
      char *b = realloc(buf, cap *= 2);
      if (!b) free(buf);
      buf = b;
    }
  }
  fclose(f);
  if (buf) buf[n] = 0;
  return buf;
}

/* One JSON object of a line (json_object_put it), or NULL. */
static json_object *parse_object(const char *text, size_t len) {
  json_tokener *tok = json_tokener_new();
  if (!tok) return NULL;
  json_object *o = json_tokener_parse_ex(tok, text, (int)len);
  bool whole = json_tokener_get_error(tok) == json_tokener_success;
  for (size_t i = whole ? json_tokener_get_parse_end(tok) : len; i < len; i++)
    whole = whole && strchr(" \t\r\n", text[i]);
  json_tokener_free(tok);
  if (o && (!whole || !json_object_is_type(o, json_type_object))) {
    json_object_put(o);
    o = NULL;
  }
  return o;
}

/* A field as the CSVs show it: a number or a string as written, else
 * (null, absent, an object) `absent`. */
static const char *field(json_object *o, const char *key, const char *absent) {
  json_object *v;
  if (!o || !json_object_object_get_ex(o, key, &v) || !v) return absent;
  switch (json_object_get_type(v)) {
    case json_type_int:
    case json_type_double:
    case json_type_string:
      return json_object_get_string(v);
    default:
      return absent;
  }
}

/* A field of sharpness.jsonl: JSON null stands for a value that was not
 * finite (sharpness prints NaN and infinities as null), which the CSV writes
 * as nan, as it always has. */
static const char *sharp_field(json_object *o, const char *key) {
  json_object *v;
  if (o && json_object_object_get_ex(o, key, &v) && !v) return "nan";
  return field(o, key, "null");
}

/* A number field; "" when the field is not a number. */
static const char *num(json_object *o, const char *key) {
  json_object *v;
  if (!o || !json_object_object_get_ex(o, key, &v)) return "";
  return json_object_is_type(v, json_type_int) || json_object_is_type(v, json_type_double)
             ? json_object_get_string(v)
             : "";
}

/* s with each occurrence of `from` replaced by `to`. */
static void put_replaced(FILE *out, const char *s, char from, char to) {
  for (; *s; s++) fputc(*s == from ? to : *s, out);
}

void summary_row(FILE *out, const sweep_point *p, const char *outcome, const char *summary_json) {
  const bool result = outcome_finished(outcome) || !strcmp(outcome, "interrupted") ||
                      !strcmp(outcome, "stopped"); /* a failed run's numbers are not results */
  json_object *s = result && summary_json ? parse_object(summary_json, strlen(summary_json)) : NULL;
  const bool variant = strcmp(p->variant, "-") != 0;
  fprintf(out, "%s,%s%s%s", p->name, p->recipe, variant ? "_" : "", variant ? p->variant : "");
  if (*p->axes) fputc('_', out), put_replaced(out, p->axes, ';', '_');
  fprintf(out, ",%s,%s,", p->recipe, variant ? p->variant : "");
  put_replaced(out, p->axes, ';', ' ');
  fprintf(out, ",%s,%s,%s,%s,%s,%s,%s,%s\n", p->lr, p->seed, outcome, num(s, "steps"),
          num(s, "last_loss"), strcmp(outcome, "diverged") ? num(s, "val_loss") : "",
          num(s, "diverged_at"), num(s, "tokens_per_s"));
  json_object_put(s);
}

/* A logged step's value: its line's order decides among repeats. */
typedef struct {
  long long step;
  int order;
  char *value;
} step_value;

static int by_step_then_order(const void *a, const void *b) {
  const step_value *x = a, *y = b;
  if (x->step != y->step) return x->step < y->step ? -1 : 1;
  return x->order - y->order;
}

static void push(step_value **v, int *n, int *cap, long long step, int order, const char *value) {
  if (*n == *cap) {
    *cap = *cap ? 2 * *cap : 256;
    step_value *nv = realloc(*v, (size_t)*cap * sizeof **v);
    if (!nv) {
      fprintf(stderr, "sweep: out of memory\n");
      exit(1);
    }
    *v = nv;
  }
  (*v)[(*n)++] = (step_value){step, order, strdup(value)};
}

/* The last value of step in v (sorted), or NULL. */
static const char *last_of(const step_value *v, int n, long long step) {
  int lo = 0, hi = n; /* first index with step > `step` */
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    if (v[mid].step <= step) lo = mid + 1;
    else hi = mid;
  }
  return lo > 0 && v[lo - 1].step == step ? v[lo - 1].value : NULL;
}

static bool int_field(json_object *o, const char *key, long long *v) {
  json_object *f;
  if (!json_object_object_get_ex(o, key, &f) || !json_object_is_type(f, json_type_int)) return false;
  *v = json_object_get_int64(f);
  return true;
}

void curves_rows(FILE *curves, FILE *stats, const char *name, const char *log) {
  step_value *train = NULL, *val = NULL;
  int nt = 0, ct = 0, nv = 0, cv = 0, order = 0;
  for (const char *line = log; *line;) {
    const char *nl = strchr(line, '\n');
    const size_t len = nl ? (size_t)(nl - line) : strlen(line);
    json_object *o = parse_object(line, len), *a;
    long long step;
    line += len + (nl != NULL);
    if (!o || !int_field(o, "step", &step)) {
      json_object_put(o);
      continue;
    }
    if (json_object_object_get_ex(o, "stats", &a)) {
      const size_t n = json_object_is_type(a, json_type_array) ? json_object_array_length(a) : 0;
      for (size_t i = 0; stats && i < n; i++) {
        json_object *s = json_object_array_get_idx(a, i);
        fprintf(stats, "%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s\n", name, field(o, "step", ""),
                field(s, "site", ""), field(s, "use", ""), field(s, "format", ""),
                field(s, "amax", ""), field(s, "underflow", ""), field(s, "overflow", ""),
                field(s, "mse", ""), field(s, "cosine", ""), field(s, "scale", ""),
                field(s, "delayed_over_current", ""));
      }
    } else if (json_object_object_get_ex(o, "val_loss", NULL)) {
      /* the validation's columns, as one text: val_loss, then the sharpness */
      char cols[1024];
      int len = snprintf(cols, sizeof cols, "%s", field(o, "val_loss", ""));
      for (int k = 0; k < LOGIT_SHARPNESS_NUM_EPS; k++)
        len += snprintf(cols + len, sizeof cols - (size_t)len, ",%s",
                        field(o, logit_sharpness_last_key(k), ""));
      for (int k = 0; k < LOGIT_SHARPNESS_NUM_EPS; k++)
        len += snprintf(cols + len, sizeof cols - (size_t)len, ",%s",
                        field(o, logit_sharpness_all_key(k), ""));
      push(&val, &nv, &cv, step, order++, cols);
    } else if (json_object_object_get_ex(o, "loss", NULL) &&
               !json_object_object_get_ex(o, "event", NULL)) {
      push(&train, &nt, &ct, step, order++, field(o, "loss", ""));
    }
    json_object_put(o);
  }
  qsort(train, (size_t)nt, sizeof *train, by_step_then_order);
  qsort(val, (size_t)nv, sizeof *val, by_step_then_order);
  for (int i = 0; i < nt; i++) {
    if (train[i].step < 1 || (i + 1 < nt && train[i + 1].step == train[i].step)) continue;
    const char *v = last_of(val, nv, train[i].step);
    fprintf(curves, "%s,%lld,%s,", name, train[i].step, train[i].value);
    if (v) fprintf(curves, "%s\n", v);
    else {
      for (int k = 0; k < 2 * LOGIT_SHARPNESS_NUM_EPS; k++) fputc(',', curves);
      fputc('\n', curves);
    }
  }
  for (int i = 0; i < nt; i++) free(train[i].value);
  for (int i = 0; i < nv; i++) free(val[i].value);
  free(train), free(val);
}

long long sharpness_line_step(const char *line) {
  json_object *o = parse_object(line, strlen(line));
  long long step;
  if (!o || !int_field(o, "step", &step)) step = -1;
  json_object_put(o);
  return step;
}

static int by_step_then_text(const void *a, const void *b) {
  const step_value *x = a, *y = b;
  if (x->step != y->step) return x->step < y->step ? -1 : 1;
  return strcmp(x->value, y->value);
}

void sharpness_rows(FILE *out, const char *name, const char *jsonl) {
  step_value *rows = NULL;
  int n = 0, cap = 0;
  for (const char *line = jsonl; *line;) {
    const char *nl = strchr(line, '\n');
    const size_t len = nl ? (size_t)(nl - line) : strlen(line);
    json_object *o = parse_object(line, len);
    long long step;
    line += len + (nl != NULL);
    if (!o || !int_field(o, "step", &step)) {
      json_object_put(o);
      continue;
    }
    char row[2048];
    snprintf(row, sizeof row, "%s,%s,%s,%s,%s,%s,%s,%s\n", field(o, "step", ""),
             sharp_field(o, "rho"), sharp_field(o, "directions"), sharp_field(o, "loss"),
             sharp_field(o, "loss_perturbed"), sharp_field(o, "kl_mean"),
             sharp_field(o, "kl_max"), sharp_field(o, "sharpness"));
    push(&rows, &n, &cap, step, n, row);
    json_object_put(o);
  }
  qsort(rows, (size_t)n, sizeof *rows, by_step_then_text);
  for (int i = 0; i < n; i++) {
    const char *comma = strchr(rows[i].value, ',');
    fprintf(out, "%s,%.*s%s", name, (int)(comma - rows[i].value), rows[i].value, comma);
    free(rows[i].value);
  }
  free(rows);
}

/* dir/name/file, in buf. */
static const char *in_point(char *buf, size_t len, const char *dir, const char *name,
                            const char *file) {
  snprintf(buf, len, "%s/%s/%s", dir, name, file);
  return buf;
}

int collect_csvs(const char *dir, const sweep_point *p, int n, const char *const *outcomes) {
  char path[8192], path2[8192];
  FILE *summary = fopen((snprintf(path, sizeof path, "%s/summary.csv", dir), path), "w");
  FILE *curves = fopen((snprintf(path, sizeof path, "%s/curves.csv", dir), path), "w");
  FILE *stats = fopen((snprintf(path, sizeof path, "%s/stats.csv", dir), path), "w");
  FILE *sharp = NULL, *shadow = NULL;
  int rc = summary && curves && stats ? 0 : -1;
  if (!rc) {
    fputs(summary_header, summary);
    fputs(curves_header, curves);
    fputs(stats_header, stats);
  }
  for (int i = 0; !rc && i < n; i++) {
    char *s = read_text(in_point(path, sizeof path, dir, p[i].name, "summary.json"));
    summary_row(summary, &p[i], outcomes[i], s);
    free(s);
  }
  for (int i = 0; !rc && i < n; i++) {
    if (!outcome_finished(outcomes[i])) continue;
    char *log = read_text(in_point(path, sizeof path, dir, p[i].name, "log.jsonl"));
    if (log) curves_rows(curves, stats, p[i].name, log);
    free(log);
  }
  /* the evaluations' CSVs: only when a point has the evaluation's file */
  snprintf(path, sizeof path, "%s/sharpness.csv", dir);
  snprintf(path2, sizeof path2, "%s/shadow.csv", dir);
  if (!rc && ((unlink(path) && errno != ENOENT) || (unlink(path2) && errno != ENOENT))) rc = -1;
  for (int i = 0; !rc && i < n; i++) {
    if (!outcome_finished(outcomes[i])) continue;
    char *text = read_text(in_point(path, sizeof path, dir, p[i].name, "sharpness.jsonl"));
    if (text && !sharp) {
      sharp = fopen((snprintf(path, sizeof path, "%s/sharpness.csv", dir), path), "w");
      if (!sharp) rc = -1;
      else fputs(sharpness_header, sharp);
    }
    if (text && sharp) sharpness_rows(sharp, p[i].name, text);
    free(text);
  }
  for (int i = 0; !rc && i < n; i++) {
    if (!outcome_finished(outcomes[i])) continue;
    char *text = read_text(in_point(path, sizeof path, dir, p[i].name, "shadow.csv"));
    if (!text) continue;
    const char *nl = strchr(text, '\n');
    const int head = nl ? (int)(nl - text) : (int)strlen(text);
    if (!shadow) {
      shadow = fopen((snprintf(path, sizeof path, "%s/shadow.csv", dir), path), "w");
      if (!shadow) rc = -1;
      else fprintf(shadow, "point,%.*s\n", head, text);
    }
    for (const char *line = nl ? nl + 1 : ""; shadow && *line;) {
      const char *e = strchr(line, '\n');
      const size_t len = e ? (size_t)(e - line) + 1 : strlen(line);
      fprintf(shadow, "%s,%.*s", p[i].name, (int)len, line);
      line += len;
    }
    free(text);
  }
  FILE *files[] = {summary, curves, stats, sharp, shadow};
  for (size_t i = 0; i < sizeof files / sizeof *files; i++)
    if (files[i] && (ferror(files[i]) | fclose(files[i]))) rc = -1;
  return rc;
}
