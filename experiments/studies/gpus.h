/*
 * sweep --gpus 0,1,... [--per-gpu K]: which GPU each of the sweep's slots
 * (launcher.h) runs on.  Pure functions of their arguments.
 */
#ifndef EXPERIMENTS_STUDIES_GPUS_H
#define EXPERIMENTS_STUDIES_GPUS_H

#include <stddef.h>

#define GPUS_MAX 64

/* The device numbers of a --gpus list ("0,1,3": non-negative integers, comma
 * separated, no blanks, no repeats) into gpus[GPUS_MAX]: their count, or -1
 * with one line in err. */
int gpus_parse(const char *list, int *gpus, char *err, size_t errlen);

/* The GPU of slot 0..jobs-1: the slots go round the list (slot k on
 * gpus[k % n]), so jobs = n x K puts K slots on each GPU and a smaller
 * --jobs still spreads its slots over the GPUs. */
int slot_gpu(int slot, const int *gpus, int n);

#endif /* EXPERIMENTS_STUDIES_GPUS_H */
