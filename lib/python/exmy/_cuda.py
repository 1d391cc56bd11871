"""libexmy_cuda.so (cuda/exmy_cuda.h) for torch CUDA tensors, loaded on first use.

Every exmy_cuda_* function takes device pointers and a cudaStream_t and only
enqueues work, so a call here passes the tensors' data_ptr() and the raw
handle of torch's current stream on the tensor's device: the kernels run in
stream order with whatever torch queued before and after, with no host copy
and no synchronisation.  The library carries its own (static) CUDA runtime;
it works in the context torch made current (the device's primary context),
which is why every call runs under torch.cuda.device(tensor.device).
"""
import ctypes

from . import _lib
from ._lib import P, c_bool, c_float, c_int, c_size_t, c_void_p

cudaError_t = c_int
PROTOTYPES = {
    "exmy_cuda_quantize_f32": (cudaError_t, [P(_lib.Format), P(_lib.RoundingOpts), c_void_p,
                                             c_void_p, c_size_t, c_void_p]),
    "exmy_cuda_encode_f32": (cudaError_t, [P(_lib.Format), P(_lib.RoundingOpts), c_void_p,
                                           c_void_p, c_size_t, c_void_p]),
    "exmy_cuda_decode_f32": (cudaError_t, [P(_lib.Format), c_void_p, c_void_p, c_size_t, c_void_p]),
    "exmy_cuda_mx_encode_f32": (cudaError_t, [P(_lib.Format), P(_lib.RoundingOpts), c_int, c_void_p,
                                              c_size_t, c_size_t, c_void_p, c_void_p, c_void_p]),
    "exmy_cuda_mx_decode_f32": (cudaError_t, [P(_lib.Format), c_int, c_void_p, c_void_p, c_size_t,
                                              c_size_t, c_void_p, c_void_p]),
    "exmy_cuda_tensor_stats_f32": (cudaError_t, [P(_lib.Format), c_void_p, c_void_p, c_size_t,
                                                 c_void_p, c_void_p]),
    "exmy_cuda_quantize_tensor_scaled_f32": (cudaError_t, [P(_lib.Format), P(_lib.RoundingOpts),
                                                           c_int, c_bool, c_void_p, c_void_p,
                                                           c_size_t, c_void_p, c_void_p]),
    "exmy_cuda_delayed_state_new": (c_void_p, [c_int]),
    "exmy_cuda_delayed_state_free": (None, [c_void_p]),
    "exmy_cuda_delayed_scale": (c_void_p, [c_void_p]),
    "exmy_cuda_quantize_delayed_scaled_f32": (cudaError_t, [P(_lib.Format), P(_lib.RoundingOpts),
                                                            c_int, c_bool, c_bool, c_void_p,
                                                            c_void_p, c_void_p, c_size_t, c_void_p]),
    "exmy_cuda_delayed_state_download": (cudaError_t, [c_void_p, P(_lib.DelayedState)]),
    "exmy_cuda_delayed_state_upload": (cudaError_t, [c_void_p, P(_lib.DelayedState)]),
    "exmy_cuda_tensor_stats_scaled_f32": (cudaError_t, [P(_lib.Format), c_void_p, c_void_p,
                                                        c_size_t, c_void_p, c_int, c_bool, c_bool,
                                                        c_void_p, c_void_p]),
    "exmy_cuda_tensor_stats_mx_f32": (cudaError_t, [P(_lib.Format), c_int, c_void_p, c_void_p,
                                                    c_void_p, c_size_t, c_size_t, c_void_p,
                                                    c_void_p]),
    "exmy_cuda_quantize_group_scaled_f32": (cudaError_t, [P(_lib.Format), P(_lib.RoundingOpts),
                                                          c_int, c_int, c_bool, c_bool, c_void_p,
                                                          c_void_p, c_size_t, c_size_t, c_void_p]),
    "exmy_cuda_quantize_blocks_stats_f32": (cudaError_t, [P(_lib.Format), P(_lib.RoundingOpts),
                                                          P(_lib.Scaling), c_void_p, c_void_p,
                                                          c_size_t, c_size_t, c_void_p,
                                                          c_void_p]),
    "exmy_cuda_gemm_new": (c_void_p, []),
    "exmy_cuda_qgemm_accum": (cudaError_t, [c_void_p, c_bool, c_bool, c_size_t, c_size_t,
                                            c_size_t, c_float, c_void_p, c_size_t, c_void_p,
                                            c_void_p, c_size_t, c_void_p, c_float, c_void_p,
                                            c_size_t, c_void_p, P(_lib.AccumModel), c_void_p]),
}

_state = {}


def lib():
    """The loaded library (ImportError with the reason if it is not there)."""
    if "lib" not in _state:
        try:
            cdll, path = _lib.load("EXMY_CUDA_LIBRARY", "libexmy_cuda.so", "cuda",
                                   "bazel build -c opt //cuda:libexmy_cuda.so")
        except ImportError as e:
            # a library found beside libexmy.so (a bundle, an install) is the last resort
            import os
            beside = os.path.join(os.path.dirname(_lib.path), "libexmy_cuda.so")
            if not os.path.exists(beside):
                raise ImportError(f"{e}; CUDA tensors need it") from None
            cdll, path = ctypes.CDLL(beside), beside
        _lib.declare(cdll, PROTOTYPES)
        _state["lib"], _state["path"] = cdll, path
    return _state["lib"]


def error_name(code):
    try:
        import torch
        return torch.cuda.cudart().cudaGetErrorString(code)
    except Exception:  # older torch: no binding
        return f"cudaError {code}"


def check(code, what):
    if code != 0:
        raise RuntimeError(f"exmy: {what} failed on the GPU: {error_name(code)} ({code})")


def stream_of(tensor):
    """The raw cudaStream_t of torch's current stream on the tensor's device."""
    import torch
    return c_void_p(torch.cuda.current_stream(tensor.device).cuda_stream)


class DeviceView:
    """A torch view of device memory owned by the library (no copy), through
    __cuda_array_interface__."""

    def __init__(self, ptr, n, typestr="<f4"):
        self.__cuda_array_interface__ = {"shape": (n,), "typestr": typestr, "data": (ptr, False),
                                         "strides": None, "version": 2}
