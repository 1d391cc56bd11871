/*
 * cuBLAS and cuBLASLt, opened when the first GPU GEMM needs them.
 *
 * Nothing in exmy links libcublas or libcublasLt.  This file defines the few
 * cuBLAS entry points exmy calls, with the prototypes of the toolkit's own
 * headers (a mismatch does not compile); each one opens the libraries on first
 * use and forwards to the real function.  So a CPU run of the trainer, or any
 * program that never touches the GPU, starts on a machine where the toolkit's
 * libraries are missing or unknown to the loader, and a GPU run finds them:
 *   1. through the loader (LD_LIBRARY_PATH, its cache, the binary's rpath),
 *   2. in EXMY_CUDA_LIB_DIR, the library folder of the toolkit that built us.
 * If neither has them, every call returns CUBLAS_STATUS_NOT_INITIALIZED and
 * exmy_cuda_cublas_load() says in one line what was looked for and where.
 */
#include <cublasLt.h>
#include <cublas_v2.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "cuda/exmy_cuda.h"

#ifndef EXMY_CUDA_LIB_DIR
#define EXMY_CUDA_LIB_DIR "/usr/local/cuda/lib64"
#endif
#ifndef EXMY_CUDA_MAJOR
#define EXMY_CUDA_MAJOR "13"
#endif

enum { LIB_CUBLAS, LIB_CUBLASLT };
static void *handles[2];
static char load_error[512];
static pthread_once_t load_once = PTHREAD_ONCE_INIT;

static void *open_library(const char *base) {
  char name[256], path[1024];
  snprintf(name, sizeof name, "lib%s.so.%s", base, EXMY_CUDA_MAJOR);
  void *h = dlopen(name, RTLD_NOW | RTLD_GLOBAL);
  if (h) return h;
  snprintf(path, sizeof path, "%s/%s", EXMY_CUDA_LIB_DIR, name);
  return dlopen(path, RTLD_NOW | RTLD_GLOBAL);
}

static void load_libraries(void) {
  /* cublasLt first: libcublas needs it, and a library loaded by full path
   * satisfies the other's dependency by its soname. */
  handles[LIB_CUBLASLT] = open_library("cublasLt");
  if (handles[LIB_CUBLASLT]) handles[LIB_CUBLAS] = open_library("cublas");
  if (!handles[LIB_CUBLAS])
    snprintf(load_error, sizeof load_error,
             "the GPU needs cuBLAS from CUDA %s (libcublas.so.%s, libcublasLt.so.%s), found "
             "neither by the loader nor in %s: add its folder to LD_LIBRARY_PATH",
             EXMY_CUDA_MAJOR, EXMY_CUDA_MAJOR, EXMY_CUDA_MAJOR, EXMY_CUDA_LIB_DIR);
}

int exmy_cuda_cublas_load(char *err, size_t errlen) {
  pthread_once(&load_once, load_libraries);
  if (handles[LIB_CUBLAS]) return 0;
  if (err && errlen) snprintf(err, errlen, "%s", load_error);
  return -1;
}

static void *symbol(int lib, const char *name) {
  if (exmy_cuda_cublas_load(NULL, 0)) return NULL;
  return dlsym(handles[lib], name);
}

/* One row per entry point: library, name, parameters, arguments. */
#define CUBLAS_ENTRY_POINTS(X)                                                                  \
  X(LIB_CUBLAS, cublasCreate_v2, (cublasHandle_t * handle), (handle))                          \
  X(LIB_CUBLAS, cublasDestroy_v2, (cublasHandle_t handle), (handle))                           \
  X(LIB_CUBLAS, cublasSetStream_v2, (cublasHandle_t handle, cudaStream_t streamId),            \
    (handle, streamId))                                                                         \
  X(LIB_CUBLAS, cublasSetMathMode, (cublasHandle_t handle, cublasMath_t mode), (handle, mode)) \
  X(LIB_CUBLAS, cublasSetPointerMode_v2, (cublasHandle_t handle, cublasPointerMode_t mode),    \
    (handle, mode))                                                                             \
  X(LIB_CUBLAS, cublasSetWorkspace_v2,                                                          \
    (cublasHandle_t handle, void *workspace, size_t workspaceSizeInBytes),                      \
    (handle, workspace, workspaceSizeInBytes))                                                  \
  X(LIB_CUBLAS, cublasGemmEx,                                                                   \
    (cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,   \
     int k, const void *alpha, const void *A, cudaDataType Atype, int lda, const void *B,       \
     cudaDataType Btype, int ldb, const void *beta, void *C, cudaDataType Ctype, int ldc,       \
     cublasComputeType_t computeType, cublasGemmAlgo_t algo),                                   \
    (handle, transa, transb, m, n, k, alpha, A, Atype, lda, B, Btype, ldb, beta, C, Ctype, ldc, \
     computeType, algo))                                                                        \
  X(LIB_CUBLAS, cublasGemmBatchedEx,                                                            \
    (cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,   \
     int k, const void *alpha, const void *const Aarray[], cudaDataType Atype, int lda,         \
     const void *const Barray[], cudaDataType Btype, int ldb, const void *beta,                 \
     void *const Carray[], cudaDataType Ctype, int ldc, int batchCount,                         \
     cublasComputeType_t computeType, cublasGemmAlgo_t algo),                                   \
    (handle, transa, transb, m, n, k, alpha, Aarray, Atype, lda, Barray, Btype, ldb, beta,      \
     Carray, Ctype, ldc, batchCount, computeType, algo))                                        \
  X(LIB_CUBLAS, cublasSgeam,                                                                    \
    (cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,   \
     const float *alpha, const float *A, int lda, const float *beta, const float *B, int ldb,   \
     float *C, int ldc),                                                                        \
    (handle, transa, transb, m, n, alpha, A, lda, beta, B, ldb, C, ldc))                        \
  X(LIB_CUBLASLT, cublasLtCreate, (cublasLtHandle_t * lightHandle), (lightHandle))             \
  X(LIB_CUBLASLT, cublasLtDestroy, (cublasLtHandle_t lightHandle), (lightHandle))              \
  X(LIB_CUBLASLT, cublasLtMatmul,                                                               \
    (cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t computeDesc, const void *alpha,         \
     const void *A, cublasLtMatrixLayout_t Adesc, const void *B, cublasLtMatrixLayout_t Bdesc,  \
     const void *beta, const void *C, cublasLtMatrixLayout_t Cdesc, void *D,                    \
     cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t *algo, void *workspace,           \
     size_t workspaceSizeInBytes, cudaStream_t stream),                                         \
    (lightHandle, computeDesc, alpha, A, Adesc, B, Bdesc, beta, C, Cdesc, D, Ddesc, algo,       \
     workspace, workspaceSizeInBytes, stream))                                                  \
  X(LIB_CUBLASLT, cublasLtMatmulAlgoCheck,                                                      \
    (cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t operationDesc,                          \
     cublasLtMatrixLayout_t Adesc, cublasLtMatrixLayout_t Bdesc, cublasLtMatrixLayout_t Cdesc,  \
     cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t *algo,                            \
     cublasLtMatmulHeuristicResult_t *result),                                                  \
    (lightHandle, operationDesc, Adesc, Bdesc, Cdesc, Ddesc, algo, result))                     \
  X(LIB_CUBLASLT, cublasLtMatmulAlgoConfigSetAttribute,                                        \
    (cublasLtMatmulAlgo_t * algo, cublasLtMatmulAlgoConfigAttributes_t attr, const void *buf,   \
     size_t sizeInBytes),                                                                       \
    (algo, attr, buf, sizeInBytes))                                                             \
  X(LIB_CUBLASLT, cublasLtMatmulAlgoConfigGetAttribute,                                        \
    (const cublasLtMatmulAlgo_t *algo, cublasLtMatmulAlgoConfigAttributes_t attr, void *buf,    \
     size_t sizeInBytes, size_t *sizeWritten),                                                  \
    (algo, attr, buf, sizeInBytes, sizeWritten))                                                \
  X(LIB_CUBLASLT, cublasLtMatmulAlgoGetHeuristic,                                               \
    (cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t operationDesc,                          \
     cublasLtMatrixLayout_t Adesc, cublasLtMatrixLayout_t Bdesc, cublasLtMatrixLayout_t Cdesc,  \
     cublasLtMatrixLayout_t Ddesc, cublasLtMatmulPreference_t preference,                       \
     int requestedAlgoCount, cublasLtMatmulHeuristicResult_t heuristicResultsArray[],           \
     int *returnAlgoCount),                                                                     \
    (lightHandle, operationDesc, Adesc, Bdesc, Cdesc, Ddesc, preference, requestedAlgoCount,    \
     heuristicResultsArray, returnAlgoCount))                                                   \
  X(LIB_CUBLASLT, cublasLtMatmulDescCreate,                                                     \
    (cublasLtMatmulDesc_t * matmulDesc, cublasComputeType_t computeType,                        \
     cudaDataType_t scaleType),                                                                 \
    (matmulDesc, computeType, scaleType))                                                       \
  X(LIB_CUBLASLT, cublasLtMatmulDescDestroy, (cublasLtMatmulDesc_t matmulDesc), (matmulDesc))  \
  X(LIB_CUBLASLT, cublasLtMatmulDescSetAttribute,                                               \
    (cublasLtMatmulDesc_t matmulDesc, cublasLtMatmulDescAttributes_t attr, const void *buf,     \
     size_t sizeInBytes),                                                                       \
    (matmulDesc, attr, buf, sizeInBytes))                                                       \
  X(LIB_CUBLASLT, cublasLtMatmulPreferenceCreate, (cublasLtMatmulPreference_t * pref), (pref)) \
  X(LIB_CUBLASLT, cublasLtMatmulPreferenceDestroy, (cublasLtMatmulPreference_t pref), (pref))  \
  X(LIB_CUBLASLT, cublasLtMatmulPreferenceSetAttribute,                                         \
    (cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr,                \
     const void *buf, size_t sizeInBytes),                                                      \
    (pref, attr, buf, sizeInBytes))                                                             \
  X(LIB_CUBLASLT, cublasLtMatrixLayoutCreate,                                                   \
    (cublasLtMatrixLayout_t * matLayout, cudaDataType type, uint64_t rows, uint64_t cols,       \
     int64_t ld),                                                                               \
    (matLayout, type, rows, cols, ld))                                                          \
  X(LIB_CUBLASLT, cublasLtMatrixLayoutDestroy, (cublasLtMatrixLayout_t matLayout), (matLayout)) \
  X(LIB_CUBLASLT, cublasLtMatrixLayoutSetAttribute,                                             \
    (cublasLtMatrixLayout_t matLayout, cublasLtMatrixLayoutAttribute_t attr, const void *buf,   \
     size_t sizeInBytes),                                                                       \
    (matLayout, attr, buf, sizeInBytes))

#define FORWARD(lib, name, params, args)                               \
  cublasStatus_t CUBLASWINAPI name params {                            \
    static cublasStatus_t(CUBLASWINAPI * real) params;                 \
    if (!real) *(void **)&real = symbol(lib, #name);                   \
    return real ? real args : CUBLAS_STATUS_NOT_INITIALIZED;           \
  }
CUBLAS_ENTRY_POINTS(FORWARD)

/* The version of the cuBLASLt that was opened (0 where none was), for the
 * logs of tools that calibrate against it. */
size_t CUBLASWINAPI cublasLtGetVersion(void) {
  static size_t(CUBLASWINAPI * real)(void);
  if (!real) *(void **)&real = symbol(LIB_CUBLASLT, "cublasLtGetVersion");
  return real ? real() : 0;
}

const char *CUBLASWINAPI cublasGetStatusString(cublasStatus_t status) {
  static const char *(CUBLASWINAPI * real)(cublasStatus_t);
  if (!real) *(void **)&real = symbol(LIB_CUBLAS, "cublasGetStatusString");
  return real ? real(status) : "cuBLAS is not loaded";
}
