"""Shared by the tests of lib/python/exmy: the test shim (trainer_shim.c) and
a PASS/FAIL tally."""
import ctypes
import os
import sys

import numpy as np

FORMATS = [  # every named format, E8 formats with their own kernels, generic ones
    "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e3m4",
    "float8_e4m3", "float6_e2m3fn", "float6_e3m2fn", "float4_e2m1fn", "float8_e8m0fnu",
    "bfloat16", "float16", "float32", "e8m3", "e8m4", "e8m5", "e8m6",
    "e1m1", "e1m5", "e2m0", "e3m0", "e3m3", "e5m7", "e6m9", "e8m1", "e7m16", "e8m23",
]
ROUNDINGS = ["rne", "rna", "rz", "ru", "rd", "ro", "sr"]

_shim = None


def shim():
    global _shim
    if _shim is None:
        s = ctypes.CDLL(os.environ["EXMY_TEST_SHIM"])
        P, u64, i, sz = ctypes.c_void_p, ctypes.c_uint64, ctypes.c_int, ctypes.c_size_t
        s.shim_ref_quantize.argtypes = [ctypes.c_char_p, ctypes.c_char_p, i, i, u64, u64, i, P, P,
                                        P, sz]
        s.shim_ref_decode.argtypes = [ctypes.c_char_p, P, P, sz]
        s.shim_scaled.argtypes = [ctypes.c_char_p, ctypes.c_char_p, i, i, u64, u64, i,
                                  ctypes.c_char_p, i, i, i, i, i, i, u64, i, i, i, P, P, sz, sz,
                                  P]
        s.shim_recipe.argtypes = [ctypes.c_char_p, ctypes.c_char_p, sz]
        s.shim_linear.argtypes = [ctypes.c_char_p, u64, i, i, i, i] + [P] * 9
        s.shim_layout.argtypes = [P]
        s.shim_layout.restype = sz
        _shim = s
    return _shim


def ptr(a):
    return a.ctypes.data


def ref_quantize(fmt, x, rounding="rne", saturate=False, flush=False, seed=0, offset=0,
                 sr_bits=0):
    """(values, uint32 codes) of the C scalar reference."""
    y = np.empty_like(x)
    codes = np.empty(x.shape, np.uint32)
    rc = shim().shim_ref_quantize(fmt.encode(), rounding.encode(), int(saturate), int(flush),
                                  seed, offset, sr_bits, ptr(x), ptr(y), ptr(codes), x.size)
    assert rc == 0, (fmt, rounding)
    return y, codes


def ref_decode(fmt, codes):
    codes = np.ascontiguousarray(codes, np.uint32)
    y = np.empty(codes.shape, np.float32)
    assert shim().shim_ref_decode(fmt.encode(), ptr(codes), ptr(y), codes.size) == 0
    return y


def same_bits(a, b):
    """Number of elements whose float32 bit patterns differ."""
    a = np.ascontiguousarray(a, np.float32).view(np.uint32)
    b = np.ascontiguousarray(b, np.float32).view(np.uint32)
    return int(np.count_nonzero(a != b))


class Tally:
    """Counts checks; prints one line per failure and a final verdict."""

    def __init__(self, name):
        self.name, self.checks, self.failures = name, 0, []

    def check(self, ok, what):
        self.checks += 1
        if not ok:
            self.failures.append(what)
            print(f"  FAIL {what}")
        return ok

    def raises(self, exc, fn, what):
        try:
            fn()
        except exc as e:
            self.check(True, what)
            return str(e)
        except Exception as e:  # the wrong kind of error
            self.check(False, f"{what}: {type(e).__name__} {e} (wanted {exc.__name__})")
            return None
        self.check(False, f"{what}: no {exc.__name__}")
        return None

    def done(self):
        if self.failures:
            print(f"{self.name}: FAILED {len(self.failures)} of {self.checks} checks")
            sys.exit(1)
        print(f"{self.name}: PASSED {self.checks} checks")


def dense_inputs(fmt, rng, decode=ref_decode):
    """float32 inputs that probe every part of fmt: all 2^16 sign/exponent/top
    mantissa patterns with random low bits (every binade, inf, NaN) and a
    sample of them with zero low bits (+-0, +-inf, short significands),
    the format's values, the midpoints between neighbours and the float32
    values either side of each midpoint, and random values over the
    format's range.  decode(fmt, uint32 codes): the reference decoder (the
    shim's), or exmy's own where the shim is absent (the GPU machine)."""
    import exmy
    f = exmy.Format(fmt)
    hi = np.arange(1 << 16, dtype=np.uint32) << 16
    parts = [(hi | rng.integers(0, 1 << 16, hi.size, dtype=np.uint32)).view(np.float32),
             rng.choice(hi, 8192, replace=False).view(np.float32)]
    nbits = min(f.bits, 16)
    codes = np.arange(1 << nbits, dtype=np.uint32)
    if f.bits > 16:  # sample the codes of wide formats
        codes = rng.integers(0, 1 << f.bits, 1 << 16, dtype=np.uint64).astype(np.uint32)
    vals = decode(fmt, codes)
    if vals.size > 8192:  # wide formats: a sample of their values and midpoints
        vals = rng.choice(vals, 8192, replace=False)
    pos = np.unique(np.abs(vals[np.isfinite(vals)]).astype(np.float64))
    mids = ((pos[1:] + pos[:-1]) / 2).astype(np.float32)
    big = np.float64(f.max)
    beyond = np.array([big * 1.0625, big * 1.5, big * 2, big * 4, f.min_subnormal / 2,
                       f.min_subnormal / 4, f.min_subnormal * 0.75])
    with np.errstate(over="ignore"):
        beyond = beyond.astype(np.float32)
    for v in (vals, mids, beyond):
        v = v[np.isfinite(v)].astype(np.float32)
        parts += [v, -v, np.nextafter(v, np.float32(np.inf)), np.nextafter(v, np.float32(-np.inf))]
    lo, top = np.log2(f.min_subnormal) - 2, np.log2(f.max) + 2
    r = np.exp2(rng.uniform(lo, top, 20000)) * rng.choice([-1, 1], 20000)
    with np.errstate(over="ignore"):
        parts.append(r.astype(np.float32))
    return np.ascontiguousarray(np.concatenate(parts))


def exact_operands(recipe, rows, cols, rng):
    """GEMM operands whose float32 sums are exact in any order under this
    recipe (exmy.recipe.Recipe): magnitudes m * 2^-r with m in [1, 2) and a
    per-row r in 0..rmax, so that every rounded value is a multiple of
    2^-(rmax + M) below 2 and, for K <= 48, every partial sum of products
    fits 24 bits (2 (rmax + M) + 8 <= 24).  Scaled recipes: m in [1, 1.75]
    with amax pinned at 1.75 = fmax / 2^k of E4M3 and E5M2, so that the
    scales are powers of two.  Per-row exponents make MX blocks along rows
    and along columns differ (saturation sees the block's amax)."""
    ops = recipe.operands()
    mbits = max(op.format.mantissa_bits for op in ops.values() if op.enabled)
    rmax = max(0, min(3, 8 - mbits))
    scaled = any(op.enabled and op.scaling in ("tensor", "delayed") for op in ops.values())
    m = rng.uniform(1.0, 1.75 if scaled else 2.0, (rows, cols))
    r = rng.integers(0, rmax + 1, (rows, 1))
    r[0] = 0
    x = m * np.exp2(-r) * rng.choice([-1.0, 1.0], (rows, cols))
    if scaled:
        x[0, 0] = 1.75
    return x.astype(np.float32)
