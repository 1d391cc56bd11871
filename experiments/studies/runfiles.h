/*
 * Bazel runfiles: the files a binary's `data` attribute brings along, found
 * the way Bazel lays them out: $RUNFILES_DIR (set for tests and for programs
 * they start), else the tree <binary>.runfiles beside the binary (bazel run,
 * bazel-bin), else the manifest $RUNFILES_MANIFEST_FILE.
 */
#ifndef EXPERIMENTS_STUDIES_RUNFILES_H
#define EXPERIMENTS_STUDIES_RUNFILES_H

/* The path of runfile `rel` ("exmy/experiments/trainer/train": the workspace's name,
 * then the file's path in it), malloc'ed; NULL when it is in none of them.
 * argv0: this program's argv[0]. */
char *runfile(const char *argv0, const char *rel);

#endif /* EXPERIMENTS_STUDIES_RUNFILES_H */
