/*
 * libFuzzer harness: the exmy CLI (cpu/cli/) end to end, in process: its
 * arguments, the input file it reads and the outputs it writes.
 *
 * Input: up to 12 arguments separated by NUL bytes, then "\0\0", then the
 * contents of in.bin.  The arguments follow "exmy"; an argument holding '/'
 * is skipped (the CLI stays inside its scratch directory), and so is one
 * named like the CLI's temporary files.  The scratch
 * directory also holds a read-only file, a file with two hard links, a
 * symbolic link to in.bin, one to nothing, and a directory.  cli_fail returns
 * here through cli_fail_hook (longjmp) instead of exiting.
 *
 * Properties beyond "no crash, no leak" (LeakSanitizer: cli_fail frees
 * everything): no temporary file survives a run; the read-only file, the
 * hard-linked file, the link to nothing and the directory are exactly as
 * they were.  Built with -DCLI_CHUNK_ELEMENTS=64, so that short inputs cross
 * chunk boundaries.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cpu/cli/commands.h"
#include "cpu/cli/io.h"

static jmp_buf failed;
static void on_fail(void) { longjmp(failed, 1); }

static const char *const fixed[] = {".", "..", "in.bin", "ro.bin", "h1.bin", "h2.bin",
                                    "link.bin", "dangling.bin", "adir"};

static void put(const char *name, const void *data, size_t n) {
  FILE *f = fopen(name, "wb");
  if (!f || fwrite(data, 1, n, f) != n || fclose(f)) abort();
}

static void check(int ok, const char *what) {
  if (!ok) {
    fprintf(stderr, "fuzz_cli: %s\n", what);
    abort();
  }
}

static void setup(void) {
  char dir[4096]; /* under $TMPDIR: run.sh points it at its build directory, removed after */
  const char *tmp = getenv("TMPDIR");
  snprintf(dir, sizeof dir, "%s/exmy-fuzz-cli-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  check(mkdtemp(dir) && chdir(dir) == 0, "cannot make the scratch directory");
  put("ro.bin", "precious", 8);
  check(chmod("ro.bin", 0444) == 0, "chmod");
  put("h1.bin", "linked", 6);
  check(link("h1.bin", "h2.bin") == 0, "link");
  check(symlink("in.bin", "link.bin") == 0 && symlink("nowhere.bin", "dangling.bin") == 0, "symlink");
  check(mkdir("adir", 0755) == 0, "mkdir");
  /* what the CLI prints is not the point (libFuzzer's -close_fd_mask hides stderr) */
  int null = open("/dev/null", O_WRONLY);
  check(null >= 0 && dup2(null, 1) == 1, "stdout");
  close(null);
  cli_fail_hook = on_fail;
}

static int same_file(const char *name, const char *content, size_t n) {
  char buf[16];
  FILE *f = fopen(name, "rb");
  if (!f) return 0;
  size_t got = fread(buf, 1, sizeof buf, f);
  fclose(f);
  return got == n && !memcmp(buf, content, n);
}

/* After each run: the fixed files as they were, every other file removed. */
static void check_and_clean(void) {
  struct stat st;
  check(stat("ro.bin", &st) == 0 && (st.st_mode & 0777) == 0444 && same_file("ro.bin", "precious", 8),
        "the read-only file changed");
  check(stat("h1.bin", &st) == 0 && st.st_nlink == 2 && same_file("h2.bin", "linked", 6),
        "the hard-linked file changed");
  check(lstat("dangling.bin", &st) == 0 && S_ISLNK(st.st_mode) && access("nowhere.bin", F_OK) != 0,
        "the link to nothing changed");
  check(lstat("link.bin", &st) == 0 && S_ISLNK(st.st_mode), "the link to in.bin changed");
  check(stat("adir", &st) == 0 && S_ISDIR(st.st_mode), "the directory changed");
  DIR *d = opendir("adir");
  int entries = 0;
  for (struct dirent *e; d && (e = readdir(d));) entries++;
  if (d) closedir(d);
  check(entries == 2, "something was written into the directory");
  d = opendir(".");
  check(d != NULL, "opendir");
  for (struct dirent *e; (e = readdir(d));) {
    check(strncmp(e->d_name, ".exmy-tmp-", 10) != 0, "a temporary file survived");
    size_t i = 0;
    while (i < sizeof fixed / sizeof *fixed && strcmp(e->d_name, fixed[i])) i++;
    if (i == sizeof fixed / sizeof *fixed) unlink(e->d_name);
  }
  closedir(d);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static int ready;
  if (!ready) setup(), ready = 1;
  /* the arguments, then "\0\0", then in.bin */
  char *copy = malloc(size + 2);
  check(copy != NULL, "malloc");
  memcpy(copy, data, size);
  copy[size] = copy[size + 1] = 0;
  char *argv[14] = {"exmy"};
  int argc = 1;
  size_t i = 0;
  while (i < size && copy[i] && argc < 13) {
    char *arg = copy + i;
    i += strlen(arg) + 1;
    if (!strchr(arg, '/') && strncmp(arg, ".exmy-tmp-", 10)) argv[argc++] = arg;
  }
  while (i < size && copy[i]) i += strlen(copy + i) + 1; /* arguments beyond 12 */
  i = i + 1 < size ? i + 1 : size;                      /* the second NUL */
  put("in.bin", data + i, size - i);
  argv[argc] = NULL;
  check(freopen("in.bin", "rb", stdin) != NULL, "stdin");

  if (!setjmp(failed)) cli_main(argc, argv);
  fflush(stdout);
  check_and_clean();
  free(copy);
  return 0;
}
