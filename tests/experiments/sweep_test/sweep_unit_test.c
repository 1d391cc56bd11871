/* The sweep runner's pure parts: the grid's order and names, the fingerprint
 * that decides skip and resume, and the CSV rows made from the trainer's JSON. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "experiments/studies/collect.h"
#include "experiments/studies/gpus.h"
#include "experiments/studies/study.h"
#include "tests/check_suite.h"

/* The study text in a temporary file; its path. */
static const char *study_file(const char *text) {
  static char path[256];
  snprintf(path, sizeof path, "%s/studyXXXXXX", getenv("TEST_TMPDIR") ? getenv("TEST_TMPDIR") : "/tmp");
  const int fd = mkstemp(path);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
  close(fd);
  return path;
}

/* The rows a FILE* function writes, as a string. */
static char buf[8192];
static FILE *mem(void) {
  memset(buf, 0, sizeof buf);
  return fmemopen(buf, sizeof buf, "w");
}

static const char grid_study[] =
    "# a comment\n"
    "study = g\n"
    "recipes = bf16 e8m3\n"
    "lrs = 1e-3 3e-3\n"
    "seeds = 1 2\n"
    "variant x = format_w=e5m2   format_a=e5m2\n"
    "variant y =\n"
    "vary rounding = rne rz\n"
    "vary scaling = none tensor\n"
    "set steps = 10\n"
    "quick steps = 5\n"
    "quick seeds = 7\n";

START_TEST(grid_order_and_names) {
  study s;
  char err[512];
  ck_assert_int_eq(study_load(&s, study_file(grid_study), false, err, sizeof err), 0);
  sweep_point *p;
  const int n = study_expand(&s, &p);
  ck_assert_int_eq(n, 2 * 2 * 2 * 2 * 2 * 2);
  /* recipes, variants, lrs, seeds, then the axes in file order, the last fastest */
  ck_assert_str_eq(p[0].name, "bf16_x_lr1e-3_s1_rounding-rne_scaling-none");
  ck_assert_str_eq(p[1].name, "bf16_x_lr1e-3_s1_rounding-rne_scaling-tensor");
  ck_assert_str_eq(p[2].name, "bf16_x_lr1e-3_s1_rounding-rz_scaling-none");
  ck_assert_str_eq(p[4].name, "bf16_x_lr1e-3_s2_rounding-rne_scaling-none");
  ck_assert_str_eq(p[8].name, "bf16_x_lr3e-3_s1_rounding-rne_scaling-none");
  ck_assert_str_eq(p[16].name, "bf16_y_lr1e-3_s1_rounding-rne_scaling-none");
  ck_assert_str_eq(p[32].name, "e8m3_x_lr1e-3_s1_rounding-rne_scaling-none");
  char *line = point_grid_line(&p[1]);
  ck_assert_str_eq(line, "bf16_x_lr1e-3_s1_rounding-rne_scaling-tensor|bf16|x|1e-3|1|"
                         "rounding=rne;scaling=tensor|steps=10 format_w=e5m2 format_a=e5m2 "
                         "lr=1e-3 seed=1 rounding=rne scaling=tensor");
  free(line);
  line = point_grid_line(&p[16]);
  ck_assert_str_eq(line, "bf16_y_lr1e-3_s1_rounding-rne_scaling-none|bf16|y|1e-3|1|"
                         "rounding=rne;scaling=none|steps=10 lr=1e-3 seed=1 rounding=rne scaling=none");
  free(line);
  points_free(p, n);
  study_free(&s);
  /* --quick: its study name, its seeds, its sets after the study's */
  ck_assert_int_eq(study_load(&s, study_file(grid_study), true, err, sizeof err), 0);
  ck_assert_str_eq(s.study, "g-quick");
  ck_assert_int_eq(study_expand(&s, &p), 2 * 2 * 2 * 1 * 2 * 2);
  ck_assert_str_eq(p[0].name, "bf16_x_lr1e-3_s7_rounding-rne_scaling-none");
  ck_assert_ptr_nonnull(strstr(p[0].args, "steps=10 steps=5 "));
  points_free(p, 2 * 2 * 2 * 2 * 2);
  study_free(&s);
}
END_TEST

START_TEST(grid_without_variants_or_axes) {
  study s;
  char err[512];
  ck_assert_int_eq(study_load(&s, study_file("study = t\nrecipes = bf16\nlrs = 0.3\n"), false, err,
                              sizeof err), 0);
  sweep_point *p;
  ck_assert_int_eq(study_expand(&s, &p), 1);
  char *line = point_grid_line(&p[0]);
  ck_assert_str_eq(line, "bf16_lr0.3_s1|bf16|-|0.3|1||lr=0.3 seed=1");
  free(line);
  points_free(p, 1);
  study_free(&s);
}
END_TEST

START_TEST(bad_study_configs) {
  static const char *const bad[][2] = {
      {"study = b\nrecipes = bf16\nlrs = 1e-3\nfoo = 1\n", "unknown directive 'foo'"},
      {"study = b\nrecipes = bf16\nlrs = fast\n", "bad learning rate 'fast'"},
      {"recipes = bf16\nlrs = 1e-3\n", "no 'study = NAME'"},
      {"study = b\nrecipes = bf16\nlrs = 1e-3\nset nosuchkey = 1\n", "unknown config key 'nosuchkey'"},
      {"study = b\nrecipes = bf16\nlrs = 1e-3\nset steps = many\n", "config key 'steps'"},
      {"study = b\nrecipes = bf16\nlrs = 1e-3\nvariant v = rounding=rne nosuch=1\n", "'nosuch'"},
      {"study = b\nrecipes = bf16\nlrs = 1e-3\nvary nosuch = 1 2\n", "unknown config key 'nosuch'"},
      {"study = b\nrecipes = bf16\nlrs = 1e-3\nplots = pie\n", "unknown plot 'pie'"},
      {"study = b/c\nrecipes = bf16\nlrs = 1e-3\n", "bad study name"},
      {"study = b\nrecipes = bf16\nlrs = 1e-3\nseeds = -1\n", "bad seed '-1'"},
      {"study = b\nrecipes = bf16\nlrs = 1e-3\nnot a line\n", "expected key=value"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    study s;
    char err[512] = "";
    ck_assert_int_eq(study_load(&s, study_file(bad[i][0]), false, err, sizeof err), -1);
    ck_assert_msg(strstr(err, bad[i][1]) && !strchr(err, '\n'), "case %zu: '%s'", i, err);
  }
}
END_TEST

START_TEST(fingerprint_decides_skip_and_resume) {
  sweep_point p = {.recipe = "bf16", .args = "steps=6 lr=1e-3 seed=1"};
  char *fp = point_fingerprint(&p);
  ck_assert_str_eq(fp, "bf16 steps=6 lr=1e-3 seed=1");
  ck_assert(fingerprint_matches("bf16 steps=6 lr=1e-3 seed=1\n", fp));
  ck_assert(fingerprint_matches("bf16 steps=6 lr=1e-3 seed=1\n\n", fp));
  ck_assert(fingerprint_matches("bf16 steps=6 lr=1e-3 seed=1", fp));
  ck_assert(!fingerprint_matches("bf16 steps=5 lr=1e-3 seed=1\n", fp));
  ck_assert(!fingerprint_matches("bf16 steps=6 lr=1e-3 seed=1 x=1\n", fp));
  ck_assert(!fingerprint_matches("bf16 steps=6 lr=1e-3 seed=\n", fp));
  ck_assert(!fingerprint_matches("", fp));
  free(fp);
}
END_TEST

static sweep_point point = {.name = "bf16_v_lr0.3_s1_diverge_delta-0", .recipe = "bf16",
                            .variant = "v", .lr = "0.3", .seed = "1",
                            .axes = "diverge_delta=0;rounding=rz", .args = ""};

START_TEST(summary_rows) {
  const char *json = "{\"status\":\"completed\",\"steps\":6,\"last_loss\":12345.0,\"min_loss\":1,"
                     "\"val_loss\":1e-05,\"tokens_per_s\":100000000,\"wall_s\":null}\n";
  FILE *f = mem();
  summary_row(f, &point, "completed", json);
  fclose(f);
  /* numbers as the trainer wrote them; no diverged_at: empty */
  ck_assert_str_eq(buf, "bf16_v_lr0.3_s1_diverge_delta-0,bf16_v_diverge_delta=0_rounding=rz,bf16,v,"
                        "diverge_delta=0 rounding=rz,0.3,1,completed,6,12345.0,1e-05,,100000000\n");
  f = mem();
  summary_row(f, &point, "diverged",
              "{\"status\":\"diverged\",\"steps\":2,\"diverged_at\":3,\"last_loss\":5.25,"
              "\"val_loss\":4.5,\"tokens_per_s\":null}");
  fclose(f);
  ck_assert_str_eq(strchr(buf, ',') + 0, ",bf16_v_diverge_delta=0_rounding=rz,bf16,v,"
                                         "diverge_delta=0 rounding=rz,0.3,1,diverged,2,5.25,,3,\n");
  f = mem(); /* a failed run's numbers are not results */
  summary_row(f, &point, "failed", json);
  fclose(f);
  ck_assert_ptr_nonnull(strstr(buf, ",failed,,,,,\n"));
  sweep_point plain = point;
  plain.variant = "-", plain.axes = "";
  f = mem();
  summary_row(f, &plain, "not-run", NULL);
  fclose(f);
  ck_assert_str_eq(buf, "bf16_v_lr0.3_s1_diverge_delta-0,bf16,bf16,,,0.3,1,not-run,,,,,\n");
}
END_TEST

START_TEST(curve_and_stats_rows) {
  const char *log =
      "{\"step\":1,\"loss\":5.5,\"lr\":0.3}\n"
      "{\"step\":2,\"loss\":4.25,\"lr\":0.3}\n"
      "{\"step\":2,\"stats\":[{\"site\":\"l0.wq\",\"use\":\"x\",\"format\":\"e4m3\",\"amax\":1.5,"
      "\"underflow\":0,\"overflow\":null,\"mse\":1e-06,\"cosine\":0.999,\"scale\":2,"
      "\"delayed_over_current\":null}]}\n"
      "{\"step\":2,\"val_loss\":4.75,\"esharp_last_1e-3\":0.25,\"esharp_last_5e-4\":0.125,"
      "\"esharp_all_1e-3\":0.5,\"esharp_all_5e-4\":null}\n"
      "{\"step\":3,\"lo\n" /* cut by a crash */
      "{\"step\":3,\"loss\":9.0,\"lr\":0.3}\n"
      "{\"step\":2,\"loss\":4.20,\"lr\":0.3}\n" /* resumed: the last line of a step wins */
      "{\"step\":3,\"event\":\"diverged\",\"loss\":null}\n"
      "{\"step\":3,\"loss\":null,\"lr\":0.3}";
  FILE *f = mem();
  static char stats_buf[1024];
  FILE *st = fmemopen(stats_buf, sizeof stats_buf, "w");
  curves_rows(f, st, "p", log);
  fclose(f);
  fclose(st);
  ck_assert_str_eq(buf, "p,1,5.5,,,,,\np,2,4.20,4.75,0.25,0.125,0.5,\np,3,,,,,,\n");
  ck_assert_str_eq(stats_buf, "p,2,l0.wq,x,e4m3,1.5,0,,1e-06,0.999,2,\n");
}
END_TEST

START_TEST(sharpness_rows_by_step) {
  const char *jsonl =
      "{\"step\":10,\"rho\":0.05,\"directions\":2,\"tensors\":\"all\",\"tokens\":64,\"loss\":5.1,"
      "\"loss_perturbed\":5.2,\"kl_mean\":0.001,\"kl_max\":0.01,\"sharpness\":0.8}\n"
      "{\"step\":2,\"rho\":0.05,\"directions\":2,\"tensors\":\"all\",\"tokens\":64,\"loss\":5.5,"
      "\"loss_perturbed\":5.6,\"kl_mean\":0.002,\"kl_max\":0.02,\"sharpness\":1.6}\n";
  FILE *f = mem();
  sharpness_rows(f, "p", jsonl);
  fclose(f);
  ck_assert_str_eq(buf, "p,2,0.05,2,5.5,5.6,0.002,0.02,1.6\np,10,0.05,2,5.1,5.2,0.001,0.01,0.8\n");
  /* a diverged checkpoint: sharpness writes its non-finite values as null */
  f = mem();
  sharpness_rows(f, "p",
                 "{\"step\":4,\"rho\":0.05,\"directions\":2,\"tensors\":\"all\",\"tokens\":64,"
                 "\"loss\":null,\"loss_perturbed\":null,\"kl_mean\":null,\"kl_max\":null,"
                 "\"sharpness\":null}\n");
  fclose(f);
  ck_assert_str_eq(buf, "p,4,0.05,2,nan,nan,nan,nan,nan\n");
  ck_assert_int_eq(sharpness_line_step("{\"step\":10,\"rho\":0.05}"), 10);
  ck_assert_int_eq(sharpness_line_step("{\"rho\":0.05}"), -1);
}
END_TEST

/* sweep --gpus: the list, and the GPU each slot runs on */
START_TEST(gpu_lists_and_slots) {
  int g[GPUS_MAX];
  char err[256];
  ck_assert_int_eq(gpus_parse("0", g, err, sizeof err), 1);
  ck_assert_int_eq(g[0], 0);
  ck_assert_int_eq(gpus_parse("3,1,12", g, err, sizeof err), 3);
  ck_assert_int_eq(g[0], 3);
  ck_assert_int_eq(g[1], 1);
  ck_assert_int_eq(g[2], 12);
  /* --gpus 0,1 --per-gpu 2: jobs 4, two slots on each GPU */
  ck_assert_int_eq(gpus_parse("0,1", g, err, sizeof err), 2);
  const int want[] = {0, 1, 0, 1};
  int on[2] = {0};
  for (int k = 0; k < 4; k++) {
    ck_assert_int_eq(slot_gpu(k, g, 2), want[k]);
    on[slot_gpu(k, g, 2)]++;
  }
  ck_assert_int_eq(on[0], 2);
  ck_assert_int_eq(on[1], 2);
  /* the slots follow the list's order, not the device numbers' */
  ck_assert_int_eq(gpus_parse("5,2,7", g, err, sizeof err), 3);
  ck_assert_int_eq(slot_gpu(0, g, 3), 5);
  ck_assert_int_eq(slot_gpu(1, g, 3), 2);
  ck_assert_int_eq(slot_gpu(2, g, 3), 7);
  ck_assert_int_eq(slot_gpu(3, g, 3), 5);
  ck_assert_int_eq(slot_gpu(5, g, 3), 7);
  const char *bad[] = {"", ",", "0,", ",0", "0,,1", "0,0", "1,0,1", "a", "0,x", "-1", "1.5", " 0", "0 ", "+1",
                       "99999", NULL};
  for (const char **b = bad; *b; b++) {
    err[0] = 0;
    ck_assert_msg(gpus_parse(*b, g, err, sizeof err) == -1, "accepted '%s'", *b);
    ck_assert_msg(err[0] && !strchr(err, '\n'), "'%s': no one-line message", *b);
  }
  ck_assert_int_eq(gpus_parse(NULL, g, err, sizeof err), -1);
}
END_TEST

int main(void) {
  const TTest *tests[] = {grid_order_and_names, grid_without_variants_or_axes, bad_study_configs,
                          fingerprint_decides_skip_and_resume, summary_rows, curve_and_stats_rows,
                          sharpness_rows_by_step, gpu_lists_and_slots, NULL};
  return run_suite(suite_of("sweep_unit", 0, tests), true);
}
