"""exmy: round float32 numpy arrays and torch tensors (CPU or CUDA) into any
low-bit floating-point format, bit-exactly as the C library lib/exmy.h.

    import exmy
    y = exmy.quantize(x, "e4m3")                  # float32 in, float32 out
    c = exmy.encode(x, "e5m2", rounding="sr", seed=1)   # uint8 codes
    z = exmy.decode(c, "e5m2")
    y = exmy.quantize_scaled(x, "e4m3", scaling="mx")   # OCP MX blocks of 32
    exmy.stats(x, "e4m3", scaling="tensor")       # {"amax": ..., "sqnr_db": ...}
    exmy.Format("e4m3").max                       # 448.0
    c = exmy.qgemm_accum(a, b, "hopper")          # a @ b, Hopper's FP8 accumulator

    import exmy.torch                             # PyTorch: autograd and layers
    exmy.torch.fake_quant(x, "e4m3")              # straight-through gradient
    exmy.torch.QuantLinear(512, 512, recipe="e8m3")

Arrays: numpy arrays (C-contiguous, float32 for values) and torch tensors
(contiguous, on the CPU or a CUDA device).  Results have the input's type,
shape and device.  CUDA tensors are converted by libexmy_cuda.so on torch's
current stream, with no copy to the host.  Anything else (another dtype, a
strided view, a list) is a TypeError or ValueError, never a silent copy.

The shared libraries are found through $EXMY_LIBRARY / $EXMY_CUDA_LIBRARY,
next to this package (pip install copies them there), or in the source
tree's bazel-bin/ (bazel build -c opt //:libexmy.so //cuda:libexmy_cuda.so).
Each function's docstring is its reference; lib/exmy.h documents the
semantics (rounding modes, saturation, subnormal flushing, stochastic
rounding's Philox stream, scaling recipes, statistics).
"""
from . import recipe
from ._core import (ROUNDINGS, AccumModel, DelayedState, Format, decode, encode, mx_decode,
                    mx_encode, qgemm_accum, quantize, quantize_scaled, scale_from_amax, stats)
from ._lib import path as library_path

__all__ = ["Format", "quantize", "encode", "decode", "quantize_scaled", "stats", "mx_encode",
           "mx_decode", "DelayedState", "scale_from_amax", "ROUNDINGS", "recipe", "library_path",
           "cuda_library_path", "AccumModel", "qgemm_accum"]
__version__ = "0.1.0"


def cuda_library_path():
    """The path of libexmy_cuda.so (loads it; ImportError if it is not found)."""
    from . import _cuda
    _cuda.lib()
    return _cuda._state["path"]


def __getattr__(name):
    # exmy.torch is imported on first use, so that numpy-only users never import torch
    if name == "torch":
        import importlib
        return importlib.import_module(".torch", __name__)
    raise AttributeError(f"module 'exmy' has no attribute '{name}'")
