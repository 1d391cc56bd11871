/* The MX shared exponent, used by both MX paths (fake quantization and the
 * code+scale encoding) so that they cannot disagree. */
#ifndef EXMY_CPU_MX_SCALE_H
#define EXMY_CPU_MX_SCALE_H

#include "lib/exmy.h"

/* X = floor(log2(amax)) - emax of the element format (OCP MX v1.0, 6.3),
 * clamped to E8M0's [-127, 127]; -127 for an all-zero block, 127 for inf. */
int exmy_mx_shared_exponent(const exmy_format *f, float amax);

#endif
