/* OCP Microscaling v1.0 storage: element codes plus one E8M0 scale per block
 * of 32 (or `block`) consecutive elements of a row.  Same numbers as
 * EXMY_SCALING_MX in exmy_quantize_scaled_f32. */
#include <math.h>

#include "cpu/exmy_cpu.h"
#include "lib/scale_core.h"

enum { CHUNK = 256 };

int exmy_mx_encode_f32(const exmy_format *f, const exmy_rounding_opts *o,
                       int block, const float *x, size_t rows, size_t cols,
                       uint8_t *codes, uint8_t *scales) {
  if (exmy_code_bytes(f) != 1 || block < 0) return -1;
  const size_t g = block > 0 ? (size_t)block : 32;
  const size_t per_row = (cols + g - 1) / g, tasks = rows * per_row;
  exmy_rounding_opts oe = *o;
  oe.saturate = true; /* as in exmy_quantize_scaled_f32's MX */
#pragma omp parallel for schedule(static) if (rows * cols > 65536)
  for (size_t t = 0; t < tasks; t++) {
    size_t r = t / per_row, c0 = (t % per_row) * g;
    size_t len = cols - c0 < g ? cols - c0 : g, start = r * cols + c0;
    float amax = 0.0f;
    for (size_t i = 0; i < len; i++) {
      float a = fabsf(x[start + i]);
      if (a > amax && a <= 3.40282347e38f) amax = a;
    }
    int e = exmy_core_mx_exponent(f->emax, amax);
    scales[t] = (uint8_t)(e + 127);
    const float s = exmy_pow2f(-e);
    float xs[CHUNK];
    for (size_t p = 0; p < len; p += CHUNK) {
      size_t cn = len - p < CHUNK ? len - p : CHUNK;
      for (size_t i = 0; i < cn; i++) xs[i] = x[start + p + i] * s;
      exmy_rounding_opts oc = oe;
      oc.offset = o->offset + start + p;
      exmy_encode_f32(f, &oc, xs, codes + start + p, cn);
    }
  }
  return 0;
}

void exmy_mx_decode_f32(const exmy_format *f, int block, const uint8_t *codes,
                        const uint8_t *scales, size_t rows, size_t cols,
                        float *y) {
  const size_t g = block > 0 ? (size_t)block : 32;
  const size_t per_row = (cols + g - 1) / g;
  exmy_decode_f32(f, codes, y, rows * cols);
#pragma omp parallel for schedule(static) if (rows * cols > 65536)
  for (size_t r = 0; r < rows; r++)
    for (size_t c = 0; c < cols; c++) {
      uint8_t sc = scales[r * per_row + c / g];
      /* 0xFF is E8M0's NaN */
      y[r * cols + c] = sc == 0xFF ? NAN : y[r * cols + c] * exmy_pow2f((int)sc - 127);
    }
}
