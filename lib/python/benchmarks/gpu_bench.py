"""exmy.quantize on CUDA tensors: throughput beside its references, measured
in the same run, and the per-call overhead on small tensors.

Large tensors (2^28 float32 elements by default), median of --reps timed
calls (CUDA events on the current stream) after two warm-ups; GB/s counts
8 bytes per element (read x, write y):
  C kernel       exmy_cuda_quantize_f32 called directly (ctypes, output
                 allocated once): the library's own throughput;
  exmy.quantize  the Python call as a user writes it, output allocated by
                 torch's caching allocator at each call (and with out=);
  torch          x.to(torch.float8_e4m3fn).float(), PyTorch's own round trip
                 through FP8 (same rounding: rne, not saturating).
Targets: exmy.quantize >= 0.9x the C kernel, >= 1.5x torch (E4M3 rne).

Small tensors: host time per call (a loop of calls, then one
synchronisation) for exmy.quantize, the bare ctypes call, and torch's
round trip, on CUDA; and exmy.quantize on numpy arrays and CPU tensors
against the bare ctypes call of exmy_quantize_f32 (--cpu-only: that part
alone, no GPU needed).

    PYTHONPATH=python EXMY_LIBRARY=./libexmy.so EXMY_CUDA_LIBRARY=./libexmy_cuda.so \
        python3 gpu_bench.py [--log2n 28] [--reps 20]
"""
import argparse
import ctypes
import statistics
import time

import numpy as np
import torch

import exmy
from exmy import _core, _cuda, _lib


def event_ms(fn, reps):
    for _ in range(2):
        fn()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


def host_us(fn, calls, cuda):
    for _ in range(10):
        fn()
    if cuda:
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    if cuda:
        torch.cuda.synchronize()
    return (time.perf_counter() - t0) / calls * 1e6


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--log2n", type=int, default=28)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--cpu-only", action="store_true",
                    help="only the per-call overhead on numpy arrays and CPU tensors")
    args = ap.parse_args()
    if args.cpu_only:
        cpu_overhead()
        return
    dev = torch.device("cuda", 0)
    n = 1 << args.log2n
    cl = _cuda.lib()
    print(f"gpu_bench: {torch.cuda.get_device_name(dev)}, torch {torch.__version__}, "
          f"n = 2^{args.log2n} float32, median of {args.reps}")
    x = torch.randn(n, device=dev) * 8
    y = torch.empty_like(x)
    gb = 8.0 * n / 1e9
    results = {}
    print(f"{'format':8s} {'rounding':8s} {'C kernel':>16s} {'exmy.quantize':>16s} "
          f"{'exmy out=':>16s} {'torch .to(f8)':>16s}   exmy/C  exmy/torch")
    for fmt, rounding, tdt in (("e4m3", "rne", "float8_e4m3fn"), ("e5m2", "rne", "float8_e5m2"),
                               ("bf16", "rne", "bfloat16"), ("e8m3", "rne", None),
                               ("e4m3", "sr", None)):
        f = exmy.Format(fmt)
        o = _core._opts(rounding, False, False, 1, 0, 0)
        stream = _cuda.stream_of(x)

        def c_kernel():
            _cuda.check(cl.exmy_cuda_quantize_f32(ctypes.byref(f._c), ctypes.byref(o),
                                                  x.data_ptr(), y.data_ptr(), n, stream), "bench")

        ms_c = event_ms(c_kernel, args.reps)
        ms_py = event_ms(lambda: exmy.quantize(x, fmt, rounding=rounding, seed=1), args.reps)
        ms_out = event_ms(lambda: exmy.quantize(x, fmt, rounding=rounding, seed=1, out=y),
                          args.reps)
        dt = getattr(torch, tdt, None) if tdt else None
        ms_t = event_ms(lambda: x.to(dt).float(), args.reps) if dt is not None else float("nan")
        cells = [f"{ms:7.3f} ms {gb / ms * 1e3:5.0f}" for ms in (ms_c, ms_py, ms_out)]
        cells.append(f"{ms_t:7.3f} ms {gb / ms_t * 1e3:5.0f}" if dt is not None else
                     f"{'-':>16s}")
        print(f"{fmt:8s} {rounding:8s} " + " ".join(f"{c:>16s}" for c in cells) +
              f"   {ms_c / ms_py:5.2f}x  " + (f"{ms_t / ms_py:5.2f}x" if dt is not None else "-"))
        results[(fmt, rounding)] = (ms_c, ms_py, ms_t)
    print("  (ms per call and GB/s at 8 bytes per element)")
    ms_c, ms_py, ms_t = results[("e4m3", "rne")]
    for ok, line in ((ms_c / ms_py >= 0.9, f"exmy.quantize E4M3 = {ms_c / ms_py:.2f}x the C kernel "
                                          "(target >= 0.9x)"),
                     (ms_t / ms_py >= 1.5, f"exmy.quantize E4M3 = {ms_t / ms_py:.2f}x torch's "
                                          "x.to(float8_e4m3fn).float() (target >= 1.5x)")):
        print(f"{'PASS' if ok else 'FAIL'} {line}")
    del x, y
    torch.cuda.empty_cache()

    print("per-call overhead on CUDA (host time per call, µs; E4M3 rne):")
    f = exmy.Format("e4m3")
    o = _core._opts("rne", False, False, 0, 0, 0)
    f8 = getattr(torch, "float8_e4m3fn", None)
    print(f"  {'elements':>9s} {'exmy.quantize':>14s} {'bare ctypes':>12s} {'torch .to(f8)':>14s}")
    for m in (1, 1024, 65536):
        xs = torch.randn(m, device=dev)
        ys = torch.empty_like(xs)
        stream = _cuda.stream_of(xs)
        a = host_us(lambda: exmy.quantize(xs, "e4m3"), 2000, True)
        b = host_us(lambda: cl.exmy_cuda_quantize_f32(ctypes.byref(f._c), ctypes.byref(o),
                                                      xs.data_ptr(), ys.data_ptr(), m, stream),
                    2000, True)
        c = host_us(lambda: xs.to(f8).float(), 2000, True) if f8 is not None else float("nan")
        print(f"  {m:9d} {a:14.1f} {b:12.1f} {c:14.1f}")
    cpu_overhead()


def cpu_overhead():
    """exmy.quantize on numpy arrays and CPU tensors beside the bare ctypes
    call of exmy_quantize_f32 and torch's own CPU round trip through bfloat16."""
    f = exmy.Format("e4m3")
    o = _core._opts("rne", False, False, 0, 0, 0)
    print("per-call overhead on the CPU (µs per call; E4M3 rne; bf16 for torch):")
    print(f"  {'elements':>9s} {'exmy numpy':>11s} {'exmy torch':>11s} {'bare ctypes':>12s} "
          f"{'torch .to(bf16)':>16s}")
    for m in (1, 1024, 65536):
        xn = np.random.default_rng(0).standard_normal(m).astype(np.float32)
        yn = np.empty_like(xn)
        xt = torch.from_numpy(xn)
        a = host_us(lambda: exmy.quantize(xn, "e4m3"), 2000, False)
        b = host_us(lambda: exmy.quantize(xt, "e4m3"), 2000, False)
        c = host_us(lambda: _lib.lib.exmy_quantize_f32(ctypes.byref(f._c), ctypes.byref(o),
                                                       xn.ctypes.data, yn.ctypes.data, m),
                    2000, False)
        d = host_us(lambda: xt.to(torch.bfloat16).float(), 2000, False)
        print(f"  {m:9d} {a:11.1f} {b:11.1f} {c:12.1f} {d:16.1f}")


if __name__ == "__main__":
    main()
