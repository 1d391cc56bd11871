/* Below this many elements the bulk kernels run on one thread: starting the
 * OpenMP team costs more than it saves.  Measured by //cpu:threshold_probe
 * (bazel run //cpu:threshold_probe) on the 2-core development machine; see
 * the probe for how. */
#ifndef EXMY_CPU_OMP_THRESHOLD_H
#define EXMY_CPU_OMP_THRESHOLD_H

#define EXMY_OMP_THRESHOLD 32768

#endif
