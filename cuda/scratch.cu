/*
 * stream_scratch (cuda/reduce.cuh): the reductions' device buffers, one per
 * stream and device, kept for the life of the process.
 */
#include <mutex>
#include <vector>

#include "cuda/reduce.cuh"

namespace exmy_cuda {
namespace {

struct StreamScratch {
  int device;
  unsigned long long stream_id;
  void *ptr;
  size_t cap;
};

std::mutex scratch_mutex;
std::vector<StreamScratch> scratches; /* a few streams: searched in order */
unsigned long long scratch_moves = 0;  /* exmy_cuda_scratch_epoch */

}  // namespace

cudaError_t stream_scratch(cudaStream_t stream, size_t bytes, void **out) {
  int device = 0;
  unsigned long long id = 0;
  EXMY_CUDA_TRY(cudaGetDevice(&device));
  EXMY_CUDA_TRY(cudaStreamGetId(stream, &id));
  std::lock_guard<std::mutex> lock(scratch_mutex);
  StreamScratch *s = nullptr;
  for (StreamScratch &c : scratches)
    if (c.device == device && c.stream_id == id) s = &c;
  if (!s) {
    scratches.push_back({device, id, nullptr, 0});
    s = &scratches.back();
  }
  if (bytes > s->cap) {
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    EXMY_CUDA_TRY(cudaStreamIsCapturing(stream, &capture));
    if (capture != cudaStreamCaptureStatusNone) return cudaErrorStreamCaptureUnsupported;
    size_t cap = s->cap ? 2 * s->cap : 4096;
    while (cap < bytes) cap *= 2;
    void *p = nullptr;
    EXMY_CUDA_TRY(cudaMallocAsync(&p, cap, stream));
    /* the old buffer goes after the work already enqueued that reads it */
    if (s->ptr) {
      const cudaError_t e = cudaFreeAsync(s->ptr, stream);
      if (e != cudaSuccess) {
        cudaFreeAsync(p, stream);
        return e;
      }
    }
    s->ptr = p;
    s->cap = cap;
    scratch_moves++;
  }
  *out = s->ptr;
  return cudaSuccess;
}

}  // namespace exmy_cuda

extern "C" unsigned long long exmy_cuda_scratch_epoch(void) {
  std::lock_guard<std::mutex> lock(exmy_cuda::scratch_mutex);
  return exmy_cuda::scratch_moves;
}
