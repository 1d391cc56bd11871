/* cuda/cublas_loader.c: cuBLAS is opened at first use, not linked.
 *   cublas_loader_test [loaded|missing]   (default: loaded)
 * loaded: exmy_cuda_cublas_load succeeds, a cuBLAS entry point reaches the
 *         real library (cublasGetStatusString knows the status names);
 * missing: it fails with one line naming the library, and every entry point
 *          answers CUBLAS_STATUS_NOT_INITIALIZED.
 * Needs no GPU: loading cuBLAS does not touch the device. */
#include <cublas_v2.h>
#include <stdio.h>
#include <string.h>

#include "cuda/exmy_cuda.h"

int main(int argc, char **argv) {
  const int want_loaded = argc < 2 || !strcmp(argv[1], "loaded");
  char err[512] = "";
  const int rc = exmy_cuda_cublas_load(err, sizeof err);
  const char *name = cublasGetStatusString(CUBLAS_STATUS_INVALID_VALUE);
  int failures = 0;
  if (want_loaded) {
    if (rc != 0) printf("FAILED: cuBLAS did not load: %s\n", err), failures++;
    if (!strcmp(name, "cuBLAS is not loaded")) printf("FAILED: status string '%s'\n", name), failures++;
  } else {
    cublasHandle_t h;
    if (rc == 0) printf("FAILED: cuBLAS loaded although it should be missing\n"), failures++;
    if (!strstr(err, "libcublas.so.") || strchr(err, '\n'))
      printf("FAILED: message '%s' does not name the library on one line\n", err), failures++;
    if (cublasCreate(&h) != CUBLAS_STATUS_NOT_INITIALIZED)
      printf("FAILED: cublasCreate without cuBLAS\n"), failures++;
    printf("message: %s\n", err);
  }
  printf("cublas_loader_test: %s\n", failures ? "FAILED" : "ok");
  return failures != 0;
}
