#!/usr/bin/env python3
"""verify_mldtypes: libexmy.so against ml_dtypes 0.6 on every float32 input.

Our conversions must agree with ml_dtypes on every non-NaN input; all 2^32
float32 bit patterns are checked.  ml_dtypes' x.astype(dtype) is round-to-nearest-even and non-saturating,
so we compare with exmy_encode_f32 under a zero-initialised options struct
(rne, no saturation, subnormals kept).  float16 has no ml_dtypes type: numpy's
own float16 stands in for it.

Per format we count, over non-NaN inputs: codes that differ (mismatch), codes
that differ but both are NaN codes (nan-code), and E8M0 inputs on which
lib/exmy.h documents a choice of ours (zero, negative, float32 subnormal).
We also compare the decoded values (ours by exmy_decode_f32, theirs by
ml_dtypes) so that a difference in how sub-byte codes are stored in a byte
would show as "code differs, value agrees".  NaN inputs: our code must decode
to NaN where the format has a NaN.

Chunks are taken in a scattered order; if the time budget runs out, the
report says which fraction of the 2^32 inputs each format covered.

Usage: verify_mldtypes.py LIBEXMY_SO [budget_seconds] [processes]
"""
import ctypes
import multiprocessing as mp
import os
import sys
import time

import ml_dtypes
import numpy as np

CHUNK = 1 << 22
NCHUNKS = (1 << 32) // CHUNK

FORMATS = [
    ("float8_e4m3fn", ml_dtypes.float8_e4m3fn, np.uint8, True),
    ("float8_e5m2", ml_dtypes.float8_e5m2, np.uint8, True),
    ("float8_e4m3fnuz", ml_dtypes.float8_e4m3fnuz, np.uint8, True),
    ("float8_e5m2fnuz", ml_dtypes.float8_e5m2fnuz, np.uint8, True),
    ("float8_e3m4", ml_dtypes.float8_e3m4, np.uint8, True),
    ("float8_e4m3", ml_dtypes.float8_e4m3, np.uint8, True),
    ("float6_e2m3fn", ml_dtypes.float6_e2m3fn, np.uint8, False),
    ("float6_e3m2fn", ml_dtypes.float6_e3m2fn, np.uint8, False),
    ("float4_e2m1fn", ml_dtypes.float4_e2m1fn, np.uint8, False),
    ("float8_e8m0fnu", ml_dtypes.float8_e8m0fnu, np.uint8, True),
    ("bfloat16", ml_dtypes.bfloat16, np.uint16, True),
    ("float16", np.float16, np.uint16, True),
]

_lib = None
_fmt = {}


def lib():
    global _lib
    if _lib is None:
        _lib = ctypes.CDLL(os.environ["EXMY_LIB"])
        _lib.exmy_format_parse.argtypes = [ctypes.c_char_p, ctypes.c_void_p]
        _lib.exmy_encode_f32.argtypes = [ctypes.c_void_p] * 4 + [ctypes.c_size_t]
        _lib.exmy_decode_f32.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_size_t]
    return _lib


def fmt(name):
    if name not in _fmt:
        buf = ctypes.create_string_buffer(256)  # > sizeof(exmy_format)
        if lib().exmy_format_parse(name.encode(), buf) != 0:
            raise SystemExit("exmy cannot parse " + name)
        _fmt[name] = buf
    return _fmt[name]


OPTS = ctypes.create_string_buffer(64)  # zeroed exmy_rounding_opts: rne


def ours_encode(name, x, code_type):
    out = np.empty(x.size, code_type)
    lib().exmy_encode_f32(ctypes.addressof(fmt(name)), ctypes.addressof(OPTS),
                          x.ctypes.data, out.ctypes.data, x.size)
    return out


def ours_decode(name, codes):
    out = np.empty(codes.size, np.float32)
    lib().exmy_decode_f32(ctypes.addressof(fmt(name)), codes.ctypes.data,
                          out.ctypes.data, codes.size)
    return out


def theirs_decode(dtype, codes):
    return codes.view(dtype).astype(np.float32)


def check_chunk(args):
    fi, chunk = args
    name, dtype, code_type, has_nan = FORMATS[fi]
    lo = chunk * CHUNK
    xb = np.arange(lo, lo + CHUNK, dtype=np.uint64).astype(np.uint32)
    x = xb.view(np.float32)
    with np.errstate(all="ignore"):
        theirs = x.astype(dtype).view(code_type)
    ours = ours_encode(name, x, code_type)
    nan_in = np.isnan(x)
    res = dict(inputs=int(x.size - nan_in.sum()), nan_inputs=int(nan_in.sum()),
               mismatch=0, nan_code=0, documented=0, value_agrees=0,
               nan_in_bad=0, nan_in_theirs_not_nan=0, examples=[], doc_examples=[])
    if nan_in.any():
        on = ours_decode(name, np.ascontiguousarray(ours[nan_in]))
        tn = theirs_decode(dtype, np.ascontiguousarray(theirs[nan_in]))
        if has_nan:
            res["nan_in_bad"] = int((~np.isnan(on)).sum())
        res["nan_in_theirs_not_nan"] = int((~np.isnan(tn)).sum())
    diff = (ours != theirs) & ~nan_in
    if diff.any():
        idx = np.nonzero(diff)[0]
        ov = ours_decode(name, np.ascontiguousarray(ours[idx]))
        tv = theirs_decode(dtype, np.ascontiguousarray(theirs[idx]))
        both_nan = np.isnan(ov) & np.isnan(tv)
        res["nan_code"] = int(both_nan.sum())
        same_value = (ov.view(np.uint32) == tv.view(np.uint32)) & ~both_nan
        res["value_agrees"] = int(same_value.sum())
        rest = ~both_nan
        xr = xb[idx]
        doc = np.zeros(idx.size, bool)
        if name == "float8_e8m0fnu":
            doc = ((xr >> 31) == 1) | ((xr & 0x7FFFFFFF) < 0x00800000)
        doc &= rest
        mis = rest & ~doc
        res["documented"] = int(doc.sum())
        res["mismatch"] = int(mis.sum())
        for k in np.nonzero(mis)[0][:4]:
            res["examples"].append((int(xr[k]), int(ours[idx[k]]), int(theirs[idx[k]]),
                                    float(ov[k]), float(tv[k])))
        for k in np.nonzero(doc)[0][:2]:
            res["doc_examples"].append((int(xr[k]), int(ours[idx[k]]), int(theirs[idx[k]])))
    return fi, res


def scattered(n):
    # an odd multiplier permutes 0..n-1 (n a power of two) and spreads chunks
    return [(i * 0x9E3779B1) % n for i in range(n)]


def main():
    os.environ["EXMY_LIB"] = os.path.abspath(sys.argv[1])
    os.environ["OMP_NUM_THREADS"] = "1"  # parallel over processes, not threads
    budget = float(sys.argv[2]) if len(sys.argv) > 2 else 400.0
    procs = int(sys.argv[3]) if len(sys.argv) > 3 else os.cpu_count()
    print("ml_dtypes", ml_dtypes.__version__, "numpy", np.__version__,
          "processes", procs, flush=True)
    # how sub-byte and other codes sit in their byte: print a few
    probe = np.array([1.0, -1.0, 0.5, -0.5, 3.0], np.float32)
    for name, dtype, code_type, _ in FORMATS:
        with np.errstate(all="ignore"):
            t = probe.astype(dtype).view(code_type)
        o = ours_encode(name, probe, code_type)
        print("  probe %-16s ml_dtypes %-28s ours %s" % (name, [hex(v) for v in t],
                                                      [hex(v) for v in o]), flush=True)
    start = time.time()
    total_bad = 0
    rows = []
    with mp.Pool(procs) as pool:
        for fi, (name, *_rest) in enumerate(FORMATS):
            left = budget - (time.time() - start)
            share = left / (len(FORMATS) - fi)
            t0 = time.time()
            agg = None
            done = 0
            order = scattered(NCHUNKS)
            pending = []
            it = iter(order)
            # keep the pool busy, stop feeding once this format's share is used
            for _ in range(procs * 2):
                c = next(it, None)
                if c is not None:
                    pending.append(pool.apply_async(check_chunk, ((fi, c),)))
            while pending:
                r = pending.pop(0).get()[1]
                done += 1
                if agg is None:
                    agg = {k: (list(v) if isinstance(v, list) else v) for k, v in r.items()}
                else:
                    for k, v in r.items():
                        if isinstance(v, list):
                            if len(agg[k]) < 8:
                                agg[k].extend(v[: 8 - len(agg[k])])
                        else:
                            agg[k] += v
                if time.time() - t0 < share:
                    c = next(it, None)
                    if c is not None:
                        pending.append(pool.apply_async(check_chunk, ((fi, c),)))
            cover = done / NCHUNKS
            bad = agg["mismatch"] > 0 or agg["nan_in_bad"] > 0
            total_bad += bad
            rows.append((name, agg, cover, time.time() - t0))
            print("%-16s coverage %6.2f%% non-NaN inputs %11d mismatches %9d "
                  "(value agrees %d) nan-code %8d documented %9d NaN-in not NaN: ours %d ml_dtypes %d  [%.0fs]"
                  % (name, 100 * cover, agg["inputs"], agg["mismatch"], agg["value_agrees"],
                     agg["nan_code"], agg["documented"], agg["nan_in_bad"],
                     agg["nan_in_theirs_not_nan"], time.time() - t0), flush=True)
            for xb, o, t, ov, tv in agg["examples"]:
                print("    MISMATCH x=0x%08x (%r) ours=0x%x (%r) ml_dtypes=0x%x (%r)"
                      % (xb, float(np.uint32(xb).view(np.float32)), o, ov, t, tv))
            for xb, o, t in agg["doc_examples"][:3]:
                print("    documented-choice x=0x%08x (%r) ours=0x%x ml_dtypes=0x%x"
                      % (xb, float(np.uint32(xb).view(np.float32)), o, t))
    print("verify_mldtypes: %d format(s) with undocumented mismatches" % total_bad)
    return 1 if total_bad else 0


if __name__ == "__main__":
    sys.exit(main())
