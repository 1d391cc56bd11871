/* The GPUs of the sweep's slots (gpus.h). */
#include "experiments/studies/gpus.h"

#include <stdio.h>
#include <string.h>

int gpus_parse(const char *list, int *gpus, char *err, size_t errlen) {
  int n = 0;
  const char *p = list;
  if (!p || !*p) {
    snprintf(err, errlen, "--gpus needs a list of device numbers (like 0,1)");
    return -1;
  }
  for (;;) {
    const size_t digits = strspn(p, "0123456789");
    if (digits == 0 || digits > 4 || (p[digits] && p[digits] != ',')) {
      snprintf(err, errlen, "--gpus '%s': want device numbers separated by commas (like 0,1)", list);
      return -1;
    }
    int d = 0;
    for (size_t k = 0; k < digits; k++) d = 10 * d + (p[k] - '0');
    for (int k = 0; k < n; k++)
      if (gpus[k] == d) {
        snprintf(err, errlen, "--gpus '%s': device %d twice", list, d);
        return -1;
      }
    if (n == GPUS_MAX) {
      snprintf(err, errlen, "--gpus '%s': more than %d devices", list, GPUS_MAX);
      return -1;
    }
    gpus[n++] = d;
    p += digits;
    if (!*p) return n;
    p++; /* the comma: a device number must follow */
  }
}

int slot_gpu(int slot, const int *gpus, int n) { return gpus[slot % n]; }
