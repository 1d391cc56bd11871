"""E4M3 (OCP, no infinities) and E5M2 codes to float32, by their definition."""
import numpy as np

EMIN = {"e4m3": -6, "e5m2": -14}  # the smallest normal exponents


def decode_table(name):
    e, m = {"e4m3": (4, 3), "e5m2": (5, 2)}[name]
    bias = (1 << (e - 1)) - 1
    out = np.zeros(256, np.float64)
    for c in range(256):
        s = -1.0 if c & 0x80 else 1.0
        ex, ma = (c >> m) & ((1 << e) - 1), c & ((1 << m) - 1)
        if ex == 0:
            v = ma / (1 << m) * 2.0 ** (1 - bias)
        else:
            v = (1 + ma / (1 << m)) * 2.0 ** (ex - bias)
        if e == 4 and ex == 15 and ma == 7:
            v = np.nan
        if e == 5 and ex == 31:
            v = np.inf if ma == 0 else np.nan
        out[c] = s * v
    return out.astype(np.float32)
