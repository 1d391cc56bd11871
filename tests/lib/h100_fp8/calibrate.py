"""The accumulation model (lib/accum_core.h, through exmy_qgemm_accum in
libexmy.so) against cuBLASLt's FP8 GEMMs captured on an H100: for every pair
of formats, distribution and K, the fraction of the M x N outputs that are
bit-identical and the largest relative difference where they are not, with
fast accumulation and without.  Prints a markdown table.

  python3 calibrate.py DIR_WITH_fp8_truth_NPZ bazel-bin/libexmy.so [old]

`old` also runs the model before calibration (alignment by the product's own
exponent, no split-K) beside it.  Needs numpy.
"""
import ctypes as C
import sys

import numpy as np

from fp8_codes import EMIN, decode_table

FIELDS = ("group", "product_bits", "sum_bits", "round", "promote_every", "align_sum",
          "align_exp", "emin_a", "emin_b", "k_slice")


class Model(C.Structure):
    _fields_ = [(n, C.c_int) for n in FIELDS]


def k_slice(k):
    """cuBLASLt's split of K for these M = N = 64 GEMMs on the H100: none up
    to K = 4096; at K = 16384, 6 slices of 22 tiles of 128 (the last 18)."""
    return 2816 if k == 16384 else 0


def hopper(fast, fa, fb, k):
    return Model(32, 14, 14, 0, 0 if fast else 128, 1, 1, EMIN[fa], EMIN[fb], k_slice(k))


def hopper_old(fast, fa, fb, k):
    return Model(32, 14, 14, 0, 0 if fast else 128, 1, 0, 0, 0, 0)


def load_gemm(path):
    """exmy_qgemm_accum of the libexmy.so at path as gemm(A, Bt, model) = A·Btᵀ."""
    lib = C.CDLL(path)
    f = lib.exmy_qgemm_accum
    f.restype = C.c_int
    f.argtypes = [C.c_bool, C.c_bool, C.c_size_t, C.c_size_t, C.c_size_t, C.c_float, C.c_void_p,
                  C.c_size_t, C.c_void_p, C.c_void_p, C.c_size_t, C.c_void_p, C.c_float,
                  C.c_void_p, C.c_size_t, C.c_void_p, C.POINTER(Model)]

    def gemm(a, bt, model):
        a, bt = np.ascontiguousarray(a, np.float32), np.ascontiguousarray(bt, np.float32)
        m, k = a.shape
        n = bt.shape[0]
        c = np.zeros((m, n), np.float32)
        r = f(False, True, m, n, k, 1.0, a.ctypes.data, k, None, bt.ctypes.data, k, None, 0.0,
              c.ctypes.data, n, None, C.byref(model))
        assert r == 0, r
        return c

    return gemm


def main():
    gemm = load_gemm(sys.argv[2])
    models = [hopper] + ([hopper_old] if sys.argv[3:] == ["old"] else [])

    head = "| A × B | data | K | fast: identical | fast: largest rel. diff | split: identical | split: largest rel. diff |"
    if len(models) > 1:
        head += " old fast | old split |"
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    for pair in ("e4m3_e4m3", "e4m3_e5m2", "e5m2_e4m3"):
        z = np.load(f"{sys.argv[1]}/fp8_truth_{pair}.npz")
        fa, fb = pair.split("_")
        for dist in ("uniform", "normal", "wide", "cancel"):
            for k in (32, 64, 96, 128, 256, 512, 4096, 16384):
                key = f"{dist}_K{k}"
                a = np.ascontiguousarray(decode_table(fa)[z[key + "_a"]])
                bt = np.ascontiguousarray(decode_table(fb)[z[key + "_bt"]])
                row = [f"{fa.upper()} × {fb.upper()}", dist, str(k)]
                extra = []
                for which, make in enumerate(models):
                    for fast in (True, False):
                        hw = z[key + ("_fast" if fast else "_split")]
                        c = gemm(a, bt, make(fast, fa, fb, k))
                        same = c.view(np.uint32) == hw.view(np.uint32)
                        diff = np.abs(c.astype(np.float64) - hw) / np.maximum(np.abs(hw), 1e-30)
                        if which == 0:
                            row += [f"{same.mean():.4f}", "0" if same.all() else f"{diff.max():.2e}"]
                        else:
                            extra.append(f"{same.mean():.4f}")
                print("| " + " | ".join(row + extra) + " |", flush=True)


if __name__ == "__main__":
    main()
