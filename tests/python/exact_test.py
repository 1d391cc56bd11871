"""exmy.quantize / encode / decode against the C scalar reference
(exmy_ref_encode / exmy_ref_decode through the test shim, element by element)
for every format, rounding mode, saturation and subnormal flushing on a
dense input set (common.dense_inputs); stochastic rounding with several
(seed, offset, sr_bits), offsets that wrap past 2^64 included; the same
through torch CPU tensors; decode of every code; and quantize_scaled / stats
/ mx_encode against exmy_quantize_scaled_f32 called by the shim with plain
arguments, for every scaling kind (a delayed state over several calls)."""
import math

import numpy as np
import torch

import exmy
from common import (FORMATS, ROUNDINGS, Tally, dense_inputs, ref_decode, ref_quantize, same_bits,
                    shim, ptr)

T = Tally("exact_test")
rng = np.random.default_rng(20240611)

SR_CASES = [(0xDEADBEEF12345678, 3, 0), (7, (1 << 64) - 5, 0), (99, 12345, 3)]

for fmt in FORMATS:
    f = exmy.Format(fmt)
    x = dense_inputs(fmt, rng)
    bad = 0
    cases = 0
    for rounding in ROUNDINGS:
        for saturate in (False, True):
            for flush in (False, True):
                srs = SR_CASES if rounding == "sr" else [(0, 0, 0)]
                for seed, offset, sr_bits in srs:
                    want, want_codes = ref_quantize(fmt, x, rounding, saturate, flush, seed,
                                                    offset, sr_bits)
                    opts = dict(rounding=rounding, saturate=saturate, flush_subnormals=flush,
                                seed=seed, offset=offset, sr_bits=sr_bits)
                    got = exmy.quantize(x, fmt, **opts)
                    codes = exmy.encode(x, fmt, **opts)
                    d = same_bits(got, want)
                    c = int(np.count_nonzero(codes.astype(np.uint32) != want_codes))
                    cases += 1
                    if d or c:
                        bad += 1
                        T.check(False, f"{fmt} {opts}: {d} values and {c} codes differ "
                                       f"from the reference (of {x.size})")
    T.check(codes.dtype == {1: np.uint8, 2: np.uint16, 4: np.uint32}[f.code_bytes],
            f"{fmt}: code dtype {codes.dtype}")
    # torch CPU tensors give the numpy results
    t = torch.from_numpy(x)
    for rounding in ("rne", "sr"):
        want, want_codes = ref_quantize(fmt, x, rounding, False, False, 42, 1000, 0)
        got = exmy.quantize(t, fmt, rounding=rounding, seed=42, offset=1000)
        tc = exmy.encode(t, fmt, rounding=rounding, seed=42, offset=1000)
        T.check(isinstance(got, torch.Tensor) and got.dtype == torch.float32
                and same_bits(got.numpy(), want) == 0, f"{fmt} torch {rounding}: values")
        T.check(tc.element_size() == f.code_bytes and np.array_equal(
            tc.numpy().view({1: np.uint8, 2: np.uint16, 4: np.uint32}[f.code_bytes])
            .astype(np.uint32), want_codes), f"{fmt} torch {rounding}: codes")
    # every code decodes as the reference decodes it (a sample of wide formats)
    if f.bits <= 16:
        all_codes = np.arange(1 << f.bits, dtype=np.uint32)
    else:
        all_codes = rng.integers(0, 1 << 32, 1 << 18, dtype=np.uint64).astype(np.uint32)
    dt = {1: np.uint8, 2: np.uint16, 4: np.uint32}[f.code_bytes]
    stored = all_codes.astype(dt)
    T.check(same_bits(exmy.decode(stored, fmt), ref_decode(fmt, stored)) == 0,
            f"{fmt}: decode of {stored.size} codes")
    T.check(same_bits(exmy.decode(torch.from_numpy(stored.astype(dt).view(
        {1: np.uint8, 2: np.int16, 4: np.int32}[f.code_bytes])), fmt).numpy(),
        ref_decode(fmt, stored)) == 0, f"{fmt}: torch decode")
    if f.bits <= 8:  # bits above a sub-byte format's width are ignored, as in C
        hi_codes = np.arange(256, dtype=np.uint8)
        T.check(same_bits(exmy.decode(hi_codes, fmt), ref_decode(fmt, hi_codes)) == 0,
                f"{fmt}: decode ignores the high bits")
    print(f"  {fmt:16s} {x.size:7d} inputs x {cases} option sets: "
          f"{'ok' if not bad else f'{bad} FAILED'}")

# independent oracles: numpy's float16 and torch's bfloat16 casts (rne, overflow to inf)
x = dense_inputs("bfloat16", rng)
finite = np.isfinite(x)
with np.errstate(over="ignore"):
    h = x.astype(np.float16).astype(np.float32)
T.check(same_bits(exmy.quantize(x, "fp16")[finite], h[finite]) == 0, "fp16 == numpy float16 cast")
b = torch.from_numpy(x).to(torch.bfloat16).float().numpy()
T.check(same_bits(exmy.quantize(x, "bf16")[finite], b[finite]) == 0, "bf16 == torch bfloat16 cast")

# the stream continues: two calls at offsets 0 and n equal one call over 2n
x = rng.standard_normal(1000).astype(np.float32)
whole = exmy.quantize(np.concatenate([x, x]), "e4m3", rounding="sr", seed=3, offset=17)
parts = np.concatenate([exmy.quantize(x, "e4m3", rounding="sr", seed=3, offset=17),
                        exmy.quantize(x, "e4m3", rounding="sr", seed=3, offset=1017)])
T.check(same_bits(whole, parts) == 0, "sr stream: offset += n continues it")
T.check(same_bits(exmy.quantize(x, "e4m3", rounding="sr", seed=3),
                  exmy.quantize(x, "e4m3", rounding="sr", seed=4)) > 100, "sr: seed matters")

# ------------------------------------------------------ scaled recipes
STATS_KEYS = ["n", "amax", "min_nonzero", "underflow_ratio", "subnormal_ratio", "overflow_ratio",
              "mse", "rel_l2", "cosine", "sqnr_db", "scale", "delayed_over_current"]


def shim_scaled(fmt, x, calls, kind, group=0, margin=0, pow2=False, dre=False, history=16,
                most_recent=False, rounding="rne", saturate=False, flush=False, seed=0, offset=0,
                sr_bits=0, block_rows=1, hadamard=0, hadamard_seed=0):
    rows, cols = x.shape[-2], x.shape[-1]
    y = np.empty_like(x)
    st = np.empty((calls, 12), np.float64)
    rc = shim().shim_scaled(fmt.encode(), rounding.encode(), int(saturate), int(flush), seed,
                            offset, sr_bits, kind.encode(), group, margin, int(pow2), int(dre),
                            block_rows, hadamard, hadamard_seed, history, int(most_recent), calls,
                            ptr(x), ptr(y), rows, cols, ptr(st))
    assert rc == 0
    return y, st


def stats_equal(d, row):
    for k, v in zip(STATS_KEYS, row):
        a = float(d[k])
        if not (a == v or (math.isnan(a) and math.isnan(v))):
            return f"{k}: {a} vs {v}"
    return None


CALLS = 4
base = rng.standard_normal((CALLS, 24, 100)).astype(np.float32)
base *= np.exp2(rng.integers(-12, 12, (CALLS, 24, 1))).astype(np.float32)  # rows of many scales
base[0, 3, 5] = 0.0
base[1, 2, :] = 0.0
base[2, 0, 7] = np.inf
base[3, 5, 9] = np.nan
SCALED = [
    ("none", {}), ("tensor", {}), ("tensor", {"margin": 2, "pow2": True}),
    ("delayed", {}), ("delayed", {"history": 2, "most_recent": True, "margin": 1}),
    ("mx", {"group": 32}), ("mx", {"group": 7}), ("group", {"group": 0}),
    ("group", {"group": 16, "pow2": True}), ("group", {"group": 40, "dre": True}),
    ("group", {"group": 32, "block_rows": 8}), ("nvfp4", {"group": 16}),
    ("nvfp4", {"group": 16, "block_rows": 16}),
    ("nvfp4", {"group": 16, "hadamard": 16, "hadamard_seed": 5}),
]
BLOCK_KEYS = ("block_rows", "hadamard", "hadamard_seed")
for fmt in ("e4m3", "e5m2", "e2m1", "e3m2", "bf16", "e8m3"):
    for kind, kw in SCALED:
        for opts in ({}, {"rounding": "sr", "seed": 11, "offset": 5, "saturate": True},
                     {"rounding": "rz", "flush": True}):
            want, want_stats = shim_scaled(fmt, base, CALLS, kind, **kw, **opts)
            state = exmy.DelayedState(kw.get("history", 16), kw.get("most_recent", False)) \
                if kind == "delayed" else None
            state2 = exmy.DelayedState(kw.get("history", 16), kw.get("most_recent", False)) \
                if kind == "delayed" else None
            scaling = kind + (f":{kw['group']}" if "group" in kw else "")
            call = dict(rounding=opts.get("rounding", "rne"), saturate=opts.get("saturate", False),
                        flush_subnormals=opts.get("flush", False), seed=opts.get("seed", 0),
                        offset=opts.get("offset", 0), margin=kw.get("margin", 0),
                        pow2=kw.get("pow2", False), dynamic_range_expansion=kw.get("dre", False),
                        **{k: kw[k] for k in BLOCK_KEYS if k in kw})
            what = f"{fmt} {scaling} {kw} {opts}"
            for c in range(CALLS):
                y = exmy.quantize_scaled(base[c], fmt, scaling, state=state, **call)
                if not T.check(same_bits(y, want[c]) == 0, f"{what} call {c}: quantize_scaled"):
                    break
                out = np.empty_like(base[c])
                s = exmy.stats(torch.from_numpy(base[c]), fmt, scaling, state=state2,
                               out=torch.from_numpy(out), **call)
                err = stats_equal(s, want_stats[c])
                T.check(err is None, f"{what} call {c}: stats {err}")
                T.check(same_bits(out, want[c]) == 0, f"{what} call {c}: stats out=")
    # MX encoding proper: the values of the mx recipe, codes and scales
    if exmy.Format(fmt).bits <= 8:
        x2 = base[0]
        codes, scales = exmy.mx_encode(x2, fmt, block=7)
        T.check(scales.shape == (24, 15) and codes.shape == x2.shape, f"{fmt} mx shapes")
        want, _ = shim_scaled(fmt, base, 1, "mx", group=7, saturate=True)
        T.check(same_bits(exmy.mx_decode(codes, scales, fmt, block=7), want[0]) == 0,
                f"{fmt} mx_encode/mx_decode == quantize_scaled mx")
print("  scaled recipes and statistics: checked")

# margin and scale_from_amax
T.check(exmy.scale_from_amax("e4m3", 3.5) == np.float32(448 / 3.5), "scale_from_amax")
T.check(exmy.scale_from_amax("e4m3", 3.0, pow2=True) == 128.0, "scale_from_amax pow2")

T.done()
