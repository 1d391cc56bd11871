/* A study's config and its grid (study.h). */
#include "experiments/studies/study.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "experiments/trainer/config.h"

static void *xrealloc(void *p, size_t n) {
  p = realloc(p, n);
  if (!p) {
    fprintf(stderr, "sweep: out of memory\n");
    exit(1);
  }
  return p;
}

static char *xstrdup(const char *s) {
  const size_t n = strlen(s) + 1;
  return memcpy(xrealloc(NULL, n), s, n);
}

void strlist_push(strlist *l, const char *s) {
  if (l->n == l->cap) {
    l->cap = l->cap ? 2 * l->cap : 8;
    l->v = xrealloc(l->v, (size_t)l->cap * sizeof *l->v);
  }
  l->v[l->n++] = xstrdup(s);
}

void strlist_free(strlist *l) {
  for (int i = 0; i < l->n; i++) free(l->v[i]);
  free(l->v);
  *l = (strlist){0};
}

void strlist_split(strlist *l, const char *s) {
  char word[CONFIG_VALUE_LEN + 64];
  while (*s) {
    while (isspace((unsigned char)*s)) s++;
    size_t n = 0;
    while (s[n] && !isspace((unsigned char)s[n])) n++;
    if (!n) break;
    if (n >= sizeof word) n = sizeof word - 1; /* lines are checked shorter */
    memcpy(word, s, n);
    word[n] = 0;
    strlist_push(l, word);
    s += n;
  }
}

char *strlist_join(const strlist *l, const char *sep) {
  size_t len = 1;
  for (int i = 0; i < l->n; i++) len += strlen(l->v[i]) + strlen(sep);
  char *out = xrealloc(NULL, len), *p = out;
  *p = 0;
  for (int i = 0; i < l->n; i++) p += sprintf(p, "%s%s", i ? sep : "", l->v[i]);
  return out;
}

/* Whether s is one or more characters of the set `allowed` or alphanumerics. */
static bool name_of(const char *s, const char *allowed) {
  if (!*s) return false;
  for (; *s; s++)
    if (!isalnum((unsigned char)*s) && !strchr(allowed, *s)) return false;
  return true;
}

/* s with every run of blanks one space (the value of a line). */
static void squeeze(char *s) {
  char *o = s;
  for (const char *p = s; *p; p++) {
    if (isspace((unsigned char)*p)) {
      if (o > s && o[-1] != ' ') *o++ = ' ';
    } else {
      *o++ = *p;
    }
  }
  if (o > s && o[-1] == ' ') o--;
  *o = 0;
}

typedef struct {
  study *s;
  bool quick;
  strlist quick_sets;
  char *q_recipes, *q_lrs, *q_seeds, *q_sharpness, *q_shadow;
} reader;

static void replace(char **field, const char *v) {
  free(*field);
  *field = xstrdup(v);
}

/* KEY=VALUE as the trainer would take it (on a scratch configuration). */
static int check_assignment(const char *key, const char *value, char *err, size_t errlen) {
  if (strpbrk(value, " |")) {
    snprintf(err, errlen, "value of '%s' has a blank or '|' (values cannot)", key);
    return -1;
  }
  static config scratch;
  config_defaults(&scratch);
  return config_set(&scratch, key, value, err, errlen);
}

static int read_line(void *ctx, char *name, char *value, int lineno, char *err, size_t errlen) {
  (void)lineno;
  reader *r = ctx;
  study *s = r->s;
  squeeze(name);
  squeeze(value);
  char *key = strchr(name, ' ');
  if (key) *key++ = 0;
  if (key && strchr(key, ' ')) goto unknown;
  if (!key) {
    if (!strcmp(name, "study")) {
      if (!name_of(value, "_.-")) {
        snprintf(err, errlen, "bad study name '%s'", value);
        return -1;
      }
      replace(&s->study, value);
    } else if (!strcmp(name, "recipes")) replace(&s->recipes, value);
    else if (!strcmp(name, "lrs")) replace(&s->lrs, value);
    else if (!strcmp(name, "seeds")) replace(&s->seeds, value);
    else if (!strcmp(name, "plots")) replace(&s->plots, value);
    else if (!strcmp(name, "sharpness")) replace(&s->sharpness, value);
    else if (!strcmp(name, "shadow")) replace(&s->shadow, value);
    else goto unknown;
    return 0;
  }
  if (!strcmp(name, "quick")) {
    char **field = !strcmp(key, "recipes")     ? &r->q_recipes
                   : !strcmp(key, "lrs")       ? &r->q_lrs
                   : !strcmp(key, "seeds")     ? &r->q_seeds
                   : !strcmp(key, "sharpness") ? &r->q_sharpness
                   : !strcmp(key, "shadow")    ? &r->q_shadow
                                               : NULL;
    if (field) {
      replace(field, value);
      return 0;
    }
  }
  if (!strcmp(name, "set") || !strcmp(name, "quick")) {
    if (check_assignment(key, value, err, errlen)) return -1;
    char *a = xrealloc(NULL, strlen(key) + strlen(value) + 2);
    sprintf(a, "%s=%s", key, value);
    strlist_push(!strcmp(name, "set") ? &s->sets : &r->quick_sets, a);
    free(a);
    return 0;
  }
  if (!strcmp(name, "vary")) {
    if (!*value) {
      snprintf(err, errlen, "empty axis");
      return -1;
    }
    if (!config_has_key(key)) {
      snprintf(err, errlen, "unknown config key '%s'", key);
      return -1;
    }
    if (strchr(value, '|')) {
      snprintf(err, errlen, "axis '%s' has a '|' (values cannot)", key);
      return -1;
    }
    if (s->vary_keys.n == STUDY_MAX_AXES) {
      snprintf(err, errlen, "more than %d axes", STUDY_MAX_AXES);
      return -1;
    }
    strlist_push(&s->vary_keys, key);
    strlist_push(&s->vary_values, value);
    return 0;
  }
  if (!strcmp(name, "variant")) {
    if (!name_of(key, ".+-")) {
      snprintf(err, errlen, "bad variant name '%s'", key);
      return -1;
    }
    strlist words = {0};
    strlist_split(&words, value);
    for (int i = 0; i < words.n; i++) {
      char *eq = strchr(words.v[i], '=');
      if (!eq) {
        snprintf(err, errlen, "variant %s: expected key=value, got '%s'", key, words.v[i]);
        strlist_free(&words);
        return -1;
      }
      *eq = 0;
      if (check_assignment(words.v[i], eq + 1, err, errlen)) {
        strlist_free(&words);
        return -1;
      }
    }
    strlist_free(&words);
    strlist_push(&s->variant_names, key);
    strlist_push(&s->variant_sets, value);
    return 0;
  }
unknown:
  if (key) key[-1] = ' ';
  snprintf(err, errlen, "unknown directive '%s'", name);
  return -1;
}

/* Every word of list matches ok, else a message naming what. */
static int check_words(const char *path, const char *list, bool (*ok)(const char *),
                       const char *what, char *err, size_t errlen) {
  strlist w = {0};
  strlist_split(&w, list);
  for (int i = 0; i < w.n; i++)
    if (!ok(w.v[i])) {
      snprintf(err, errlen, "%s: %s '%s'", path, what, w.v[i]);
      strlist_free(&w);
      return -1;
    }
  strlist_free(&w);
  return 0;
}

/* [0-9.]+([eE][-+]?[0-9]+)?, and a learning rate the trainer takes */
static bool is_lr(const char *v) {
  const char *p = v;
  while (isdigit((unsigned char)*p) || *p == '.') p++;
  if (p == v) return false;
  if (*p == 'e' || *p == 'E') {
    p++;
    if (*p == '+' || *p == '-') p++;
    if (!isdigit((unsigned char)*p)) return false;
    while (isdigit((unsigned char)*p)) p++;
  }
  char err[256];
  return !*p && !check_assignment("lr", v, err, sizeof err);
}

static bool is_seed(const char *v) {
  char err[256];
  return *v && strspn(v, "0123456789") == strlen(v) && !check_assignment("seed", v, err, sizeof err);
}

static bool is_plot(const char *v) {
  static const char *const kinds[] = {"curves", "final", "lr", "debug", "speed", "sharpness", "shadow"};
  for (size_t i = 0; i < sizeof kinds / sizeof *kinds; i++)
    if (!strcmp(v, kinds[i])) return true;
  return false;
}

static bool is_recipe(const char *v) { return name_of(v, "_.+-"); }

int study_load(study *s, const char *path, bool quick, char *err, size_t errlen) {
  *s = (study){0};
  reader r = {.s = s, .quick = quick};
  s->seeds = xstrdup("1");
  s->plots = xstrdup("curves");
  s->recipes = xstrdup("");
  s->lrs = xstrdup("");
  s->sharpness = xstrdup("");
  s->shadow = xstrdup("");
  int rc = config_read_lines(path, read_line, &r, err, errlen);
  if (!rc && !s->study) {
    snprintf(err, errlen, "%s: no 'study = NAME'", path);
    rc = -1;
  }
  if (!rc && quick) {
    if (r.q_recipes && *r.q_recipes) replace(&s->recipes, r.q_recipes);
    if (r.q_lrs && *r.q_lrs) replace(&s->lrs, r.q_lrs);
    if (r.q_seeds && *r.q_seeds) replace(&s->seeds, r.q_seeds);
    if (r.q_sharpness && *r.q_sharpness) replace(&s->sharpness, r.q_sharpness);
    if (r.q_shadow && *r.q_shadow) replace(&s->shadow, r.q_shadow);
    char *name = xrealloc(NULL, strlen(s->study) + 7);
    sprintf(name, "%s-quick", s->study);
    free(s->study);
    s->study = name;
    for (int i = 0; i < r.quick_sets.n; i++) strlist_push(&s->sets, r.quick_sets.v[i]);
  }
  if (!rc && !*s->recipes) snprintf(err, errlen, "%s: no recipes", path), rc = -1;
  if (!rc && !*s->lrs) snprintf(err, errlen, "%s: no lrs", path), rc = -1;
  if (!rc && !*s->seeds) snprintf(err, errlen, "%s: no seeds", path), rc = -1;
  if (!rc) rc = check_words(path, s->recipes, is_recipe, "bad recipe name", err, errlen);
  if (!rc) rc = check_words(path, s->lrs, is_lr, "bad learning rate", err, errlen);
  if (!rc) rc = check_words(path, s->seeds, is_seed, "bad seed", err, errlen);
  if (!rc) rc = check_words(path, s->plots, is_plot, "unknown plot", err, errlen);
  if (!rc && !s->variant_names.n) {
    strlist_push(&s->variant_names, "-");
    strlist_push(&s->variant_sets, "");
  }
  strlist_free(&r.quick_sets);
  free(r.q_recipes), free(r.q_lrs), free(r.q_seeds), free(r.q_sharpness), free(r.q_shadow);
  if (rc) study_free(s);
  return rc;
}

void study_free(study *s) {
  free(s->study), free(s->recipes), free(s->lrs), free(s->seeds), free(s->plots);
  free(s->sharpness), free(s->shadow);
  strlist_free(&s->sets);
  strlist_free(&s->vary_keys);
  strlist_free(&s->vary_values);
  strlist_free(&s->variant_names);
  strlist_free(&s->variant_sets);
  *s = (study){0};
}

/* The grid being expanded. */
typedef struct {
  const study *s;
  sweep_point *p;
  int n, cap;
  strlist axis_words[STUDY_MAX_AXES]; /* the words of each axis */
} expansion;

static void expand(expansion *x, int axis, const char *base, const sweep_point *proto, char *name,
                   char *axes, strlist *args) {
  const study *s = x->s;
  if (axis == s->vary_keys.n) {
    if (x->n == x->cap) {
      x->cap = x->cap ? 2 * x->cap : 16;
      x->p = xrealloc(x->p, (size_t)x->cap * sizeof *x->p);
    }
    sweep_point *p = &x->p[x->n++];
    p->name = xstrdup(name);
    p->recipe = xstrdup(proto->recipe);
    p->variant = xstrdup(proto->variant);
    p->lr = xstrdup(proto->lr);
    p->seed = xstrdup(proto->seed);
    p->axes = xstrdup(axes);
    p->args = strlist_join(args, " ");
    return;
  }
  (void)base;
  const char *key = s->vary_keys.v[axis];
  const strlist *vals = &x->axis_words[axis];
  for (int i = 0; i < vals->n; i++) {
    const char *v = vals->v[i];
    const size_t kv = strlen(key) + strlen(v) + 2;
    char *n2 = xrealloc(NULL, strlen(name) + kv + 1), *a2 = xrealloc(NULL, strlen(axes) + kv + 1);
    sprintf(n2, "%s_%s-%s", name, key, v);
    sprintf(a2, "%s%s%s=%s", axes, *axes ? ";" : "", key, v);
    char *assignment = xrealloc(NULL, kv);
    sprintf(assignment, "%s=%s", key, v);
    strlist_push(args, assignment);
    expand(x, axis + 1, base, proto, n2, a2, args);
    free(args->v[--args->n]);
    free(assignment), free(n2), free(a2);
  }
}

int study_expand(const study *s, sweep_point **points) {
  expansion x = {.s = s};
  const int axes = s->vary_keys.n;
  for (int a = 0; a < axes; a++) strlist_split(&x.axis_words[a], s->vary_values.v[a]);
  strlist recipes = {0}, lrs = {0}, seeds = {0};
  strlist_split(&recipes, s->recipes);
  strlist_split(&lrs, s->lrs);
  strlist_split(&seeds, s->seeds);
  for (int r = 0; r < recipes.n; r++)
    for (int v = 0; v < s->variant_names.n; v++)
      for (int l = 0; l < lrs.n; l++)
        for (int e = 0; e < seeds.n; e++) {
          const char *variant = s->variant_names.v[v];
          sweep_point proto = {.recipe = recipes.v[r], .variant = (char *)variant,
                               .lr = lrs.v[l], .seed = seeds.v[e]};
          char name[4 * CONFIG_VALUE_LEN];
          if (strcmp(variant, "-"))
            snprintf(name, sizeof name, "%s_%s_lr%s_s%s", recipes.v[r], variant, lrs.v[l],
                     seeds.v[e]);
          else
            snprintf(name, sizeof name, "%s_lr%s_s%s", recipes.v[r], lrs.v[l], seeds.v[e]);
          strlist args = {0};
          for (int i = 0; i < s->sets.n; i++) strlist_push(&args, s->sets.v[i]);
          strlist_split(&args, s->variant_sets.v[v]);
          char a[CONFIG_VALUE_LEN + 8];
          snprintf(a, sizeof a, "lr=%s", lrs.v[l]);
          strlist_push(&args, a);
          snprintf(a, sizeof a, "seed=%s", seeds.v[e]);
          strlist_push(&args, a);
          char axes_none[1] = "";
          expand(&x, 0, name, &proto, name, axes_none, &args);
          strlist_free(&args);
        }
  strlist_free(&recipes), strlist_free(&lrs), strlist_free(&seeds);
  for (int a = 0; a < axes; a++) strlist_free(&x.axis_words[a]);
  *points = x.p;
  return x.n;
}

void points_free(sweep_point *p, int n) {
  for (int i = 0; i < n; i++) {
    free(p[i].name), free(p[i].recipe), free(p[i].variant), free(p[i].lr), free(p[i].seed);
    free(p[i].axes), free(p[i].args);
  }
  free(p);
}

char *point_grid_line(const sweep_point *p) {
  const size_t n = strlen(p->name) + strlen(p->recipe) + strlen(p->variant) + strlen(p->lr) +
                   strlen(p->seed) + strlen(p->axes) + strlen(p->args) + 8;
  char *line = xrealloc(NULL, n);
  snprintf(line, n, "%s|%s|%s|%s|%s|%s|%s", p->name, p->recipe, p->variant, p->lr, p->seed,
           p->axes, p->args);
  return line;
}

char *point_fingerprint(const sweep_point *p) {
  const size_t n = strlen(p->recipe) + strlen(p->args) + 2;
  char *fp = xrealloc(NULL, n);
  snprintf(fp, n, "%s %s", p->recipe, p->args);
  return fp;
}

bool fingerprint_matches(const char *file_text, const char *fp) {
  size_t n = strlen(file_text);
  while (n && file_text[n - 1] == '\n') n--;
  return n == strlen(fp) && !memcmp(file_text, fp, n);
}
