/*
 * Training data: a token stream cut into windows of T+1 tokens, visited in an
 * order shuffled per epoch from the seed (deterministic; the position is two
 * numbers, saved in checkpoints).
 *
 * Sources: a file or a directory of files (sorted by name, concatenated).  A
 * file that starts with llm.c's shard header (256 int32, magic 20240520) holds
 * uint16 tokens; any other file is byte-level text, one token per byte.
 */
#ifndef EXPERIMENTS_DATA_H
#define EXPERIMENTS_DATA_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
  uint16_t *tokens;
  size_t n_tokens;
  int T;
  size_t n_windows;
  uint32_t *order; /* this epoch's window order */
  uint64_t seed, epoch, index;
  int shuffle;
} dataset;

/* Loads path (file or directory); 0, or -1 with a one-line message. */
int dataset_load(dataset *d, const char *path, int vocab, char *err, size_t errlen);
/* Moves the last `frac` of d's tokens into a new dataset (validation split). */
void dataset_split_tail(dataset *d, dataset *tail, double frac);
/* Prepares windows of T+1 tokens; shuffle: visit them in a seeded random order. */
int dataset_start(dataset *d, int T, uint64_t seed, int shuffle, char *err, size_t errlen);
/* Positions the stream (resume). */
void dataset_seek(dataset *d, uint64_t epoch, uint64_t index);
/* The next B windows: inputs (B, T) and targets (B, T) shifted by one. */
void dataset_next_batch(dataset *d, int B, int *inputs, int *targets);
void dataset_free(dataset *d);

#endif /* EXPERIMENTS_DATA_H */
