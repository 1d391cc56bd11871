"""The package's surface: the ctypes structs against the compiled layout,
Format's facts against the published specifications, what each function
accepts and returns (types, shapes, devices, out=, aliasing), and the clear
TypeError / ValueError for everything else, before any memory is touched."""
import ctypes
import math

import numpy as np
import torch

import exmy
from exmy import _lib
from common import Tally, same_bits, shim

T = Tally("api_test")

# ---- the structs' layout is the C compiler's
layout = (ctypes.c_size_t * 128)()
n = shim().shim_layout(layout)
ours = []
for st in (_lib.Format, _lib.FormatInfo, _lib.RoundingOpts, _lib.Scaling, _lib.DelayedState,
           _lib.TensorStats, _lib.OperandQuant):
    ours.append(ctypes.sizeof(st))
    ours += [getattr(st, name).offset for name, _ in st._fields_]
T.check(list(layout[:n]) == ours, f"struct layout: C {list(layout[:n])} vs ctypes {ours}")

# ---- formats: facts from the specifications (OCP FP8 / MX, IEEE 754, ml_dtypes)
FACTS = {  # bits, E, M, bias, max, min_normal, min_subnormal, has_inf, has_nan, specials
    "e4m3": (8, 4, 3, 7, 448.0, 2.0 ** -6, 2.0 ** -9, False, True, "fn"),
    "e5m2": (8, 5, 2, 15, 57344.0, 2.0 ** -14, 2.0 ** -16, True, True, "ieee"),
    "float8_e4m3fnuz": (8, 4, 3, 8, 240.0, 2.0 ** -7, 2.0 ** -10, False, True, "fnuz"),
    "float8_e5m2fnuz": (8, 5, 2, 16, 57344.0, 2.0 ** -15, 2.0 ** -17, False, True, "fnuz"),
    "e2m3": (6, 2, 3, 1, 7.5, 1.0, 0.125, False, False, "none"),
    "e3m2": (6, 3, 2, 3, 28.0, 0.25, 0.0625, False, False, "none"),
    "e2m1": (4, 2, 1, 1, 6.0, 1.0, 0.5, False, False, "none"),
    "e8m0": (8, 8, 0, 127, 2.0 ** 127, 2.0 ** -127, 2.0 ** -127, False, True, "e8m0"),
    "bf16": (16, 8, 7, 127, 3.3895313892515355e38, 2.0 ** -126, 2.0 ** -133, True, True, "ieee"),
    "fp16": (16, 5, 10, 15, 65504.0, 2.0 ** -14, 2.0 ** -24, True, True, "ieee"),
    "e8m3": (12, 8, 3, 127, 15 * 2.0 ** 124, 2.0 ** -126, 2.0 ** -129, True, True, "ieee"),
}
for name, (bits, e, m, bias, mx, mn, ms, inf, nan, sp) in FACTS.items():
    f = exmy.Format(name)
    got = (f.bits, f.exponent_bits, f.mantissa_bits, f.bias, f.max, f.min_normal, f.min_subnormal,
           f.has_inf, f.has_nan, f.specials)
    T.check(got == (bits, e, m, bias, mx, mn, ms, inf, nan, sp), f"Format({name}): {got}")
    T.check(f.epsilon == 2.0 ** -m, f"{name}.epsilon")
    T.check(f.code_bytes == (1 if bits <= 8 else 2 if bits <= 16 else 4), f"{name}.code_bytes")
T.check(exmy.Format("E4M3") == exmy.Format("float8_e4m3fn") and
        exmy.Format("e4m3").name == "float8_e4m3fn", "names are case-insensitive aliases")
T.check(exmy.Format("e4m3") != exmy.Format("float8_e4m3"), "fn and ieee E4M3 differ")
T.check(len({exmy.Format("bf16"), exmy.Format("bfloat16")}) == 1, "Format is hashable")
T.check(exmy.Format("e4m3").inf_code is None and exmy.Format("e5m2").inf_code == 0x7C,
        "inf_code")
T.check(exmy.Format("fp16").finite_codes == 2 * (31 * 1024) and
        exmy.Format("fp16").finite_values == 2 * 31 * 1024 - 1, "finite codes / values")
custom = exmy.Format.make("mine", 4, 3, 8, "fnuz")
T.check(custom == exmy.Format("float8_e4m3fnuz") and custom.name == "mine", "Format.make")
T.raises(ValueError, lambda: exmy.Format("e9m3"), "unknown format")
T.raises(ValueError, lambda: exmy.Format("e4m3x"), "format with trailing junk")
T.raises(TypeError, lambda: exmy.Format(3), "format not a string")
T.raises(ValueError, lambda: exmy.Format.make("x", 9, 3, 7), "Format.make with E = 9")
T.raises(ValueError, lambda: exmy.Format.make("x", 4, 3, 7, "odd"), "unknown specials")

# ---- results have the input's type, shape and dtype
x = np.linspace(-500, 500, 3 * 4 * 5, dtype=np.float32).reshape(3, 4, 5)
y = exmy.quantize(x, "e4m3")
T.check(isinstance(y, np.ndarray) and y.shape == x.shape and y.dtype == np.float32,
        "numpy in, numpy out")
T.check(y[0, 0, 0] == -448.0 or np.isnan(y[0, 0, 0]), "e4m3 overflow: NaN (no inf)")
T.check(exmy.quantize(x, "e4m3", saturate=True)[0, 0, 0] == -448.0, "saturate")
c = exmy.encode(x, "e4m3")
T.check(c.dtype == np.uint8 and c.shape == x.shape, "encode: uint8 codes, same shape")
T.check(exmy.encode(x, "bf16").dtype == np.uint16 and exmy.encode(x, "fp32").dtype == np.uint32,
        "encode: uint16 / uint32 codes")
T.check(same_bits(exmy.decode(exmy.encode(x, "e5m2"), "e5m2"), exmy.quantize(x, "e5m2")) == 0,
        "decode(encode) == quantize")
t = torch.from_numpy(x)
ty = exmy.quantize(t, "e4m3")
T.check(isinstance(ty, torch.Tensor) and ty.shape == t.shape and ty.dtype == torch.float32
        and same_bits(ty.numpy(), y) == 0, "torch CPU in, torch out, same values")
tc = exmy.encode(t, "bf16")
T.check(tc.element_size() == 2 and tc.shape == t.shape, "torch encode: 2-byte codes")
T.check(torch.equal(exmy.decode(tc, "bf16"), t.to(torch.bfloat16).float()), "torch decode")
s0 = np.array(3.3, np.float32)
T.check(exmy.quantize(s0, "e2m1").shape == () and exmy.quantize(s0, "e2m1") == 3.0, "0-d arrays")
T.check(exmy.quantize(np.empty((0, 7), np.float32), "e4m3").shape == (0, 7), "empty arrays")
T.check(exmy.stats(np.empty(0, np.float32), "e4m3")["n"] == 0, "stats of an empty array")

# ---- out=
out = np.empty_like(x)
T.check(exmy.quantize(x, "e5m2", out=out) is out and same_bits(out, exmy.quantize(x, "e5m2")) == 0,
        "out= is filled and returned")
z = x.copy()
exmy.quantize(z, "e5m2", out=z)
T.check(same_bits(z, exmy.quantize(x, "e5m2")) == 0, "out may alias x")
z = x.copy()
exmy.quantize_scaled(z, "e4m3", "mx", out=z)
T.check(same_bits(z, exmy.quantize_scaled(x, "e4m3", "mx")) == 0, "quantize_scaled in place")
T.raises(ValueError, lambda: exmy.quantize(x, "e4m3", out=np.empty((3, 20), np.float32)),
         "out of another shape")
T.raises(TypeError, lambda: exmy.quantize(x, "e4m3", out=np.empty(x.shape, np.float64)),
         "out of another dtype")
T.raises(TypeError, lambda: exmy.quantize(x, "e4m3", out=torch.empty(x.shape)),
         "out of another type")
big = np.zeros(200, np.float32)
T.raises(ValueError, lambda: exmy.quantize(big[:100], "e4m3", out=big[50:150]),
         "out overlapping x partly")
T.raises(ValueError, lambda: exmy.encode(big[:100], "bf16",
                                         out=big.view(np.uint16)[:100]), "encode out inside x")
T.raises(ValueError, lambda: exmy.stats(big, "e4m3", out=big), "stats out aliasing x")
ro = np.empty_like(x)
ro.flags.writeable = False
T.raises(ValueError, lambda: exmy.quantize(x, "e4m3", out=ro), "read-only out")
T.raises(TypeError, lambda: exmy.encode(x, "e4m3", out=np.empty(x.shape, np.uint16)),
         "encode out of the wrong width")

# ---- bad inputs: a clear error, nothing written
before = x.copy()
for bad, what in [(x.astype(np.float64), "float64 array"), (x.astype(np.float16), "float16"),
                  (x.astype(">f4"), "big-endian float32"), ([1.0, 2.0], "a list"),
                  (3.0, "a Python float"), (t.double(), "float64 tensor"),
                  (t.to(torch.bfloat16), "bfloat16 tensor"), (x.astype(np.int32), "int32")]:
    T.raises(TypeError, lambda b=bad: exmy.quantize(b, "e4m3"), f"quantize({what})")
    T.raises(TypeError, lambda b=bad: exmy.encode(b, "e4m3"), f"encode({what})")
    T.raises(TypeError, lambda b=bad: exmy.quantize_scaled(b, "e4m3"), f"quantize_scaled({what})")
for bad, what in [(x[:, ::2], "strided numpy view"), (x.T, "transposed numpy view"),
                  (t[:, 1:3], "sliced tensor"), (t.transpose(0, 2), "transposed tensor")]:
    T.raises(ValueError, lambda b=bad: exmy.quantize(b, "e4m3"), f"quantize({what})")
    T.raises(ValueError, lambda b=bad: exmy.stats(b, "e4m3"), f"stats({what})")
unaligned = np.zeros(41, np.uint8)[1:].view(np.float32)
T.raises(ValueError, lambda: exmy.quantize(unaligned, "e4m3"), "unaligned array")
T.raises(ValueError, lambda: exmy.quantize(t.clone().requires_grad_(), "e4m3"),
         "tensor requiring grad")
with torch.no_grad():
    T.check(exmy.quantize(t.clone().requires_grad_(), "e4m3").shape == t.shape,
            "requires_grad is fine under no_grad")
T.raises(TypeError, lambda: exmy.decode(c.astype(np.float32), "e4m3"), "decode(float codes)")
T.raises(TypeError, lambda: exmy.decode(c, "bf16"), "decode(uint8 codes, 16-bit format)")
T.raises(ValueError, lambda: exmy.quantize(x, "e4m3", rounding="nearest"), "unknown rounding")
T.raises(TypeError, lambda: exmy.quantize(x, "e4m3", rounding=0), "rounding not a string")
T.raises(ValueError, lambda: exmy.quantize(x, "e4m3", rounding="sr", sr_bits=33), "sr_bits 33")
T.raises(ValueError, lambda: exmy.quantize(x, "e4m3", rounding="sr", sr_bits=-1), "sr_bits -1")
T.raises(ValueError, lambda: exmy.quantize(x, "e4m3", seed=-1), "negative seed")
T.raises(ValueError, lambda: exmy.quantize(x, "e4m3", offset=1 << 64), "offset 2^64")
T.raises(TypeError, lambda: exmy.quantize(x, "e4m3", seed=1.5), "float seed")
T.raises(TypeError, lambda: exmy.quantize(x, "e4m3", saturate="yes"), "saturate not a bool")
T.raises(ValueError, lambda: exmy.quantize_scaled(x, "e4m3", "blocks"), "unknown scaling")
T.raises(ValueError, lambda: exmy.quantize_scaled(x, "e4m3", "mx:0"), "MX block 0")
T.raises(ValueError, lambda: exmy.quantize_scaled(x, "e4m3", "tensor:4"), "tensor:4")
T.raises(ValueError, lambda: exmy.quantize_scaled(x, "e4m3", "group:x"), "group:x")
T.raises(ValueError, lambda: exmy.quantize_scaled(x, "e4m3", "delayed"), "delayed without state")
T.raises(ValueError, lambda: exmy.quantize_scaled(x, "e4m3", "tensor",
                                                  state=exmy.DelayedState()), "state with tensor")
T.raises(ValueError, lambda: exmy.quantize_scaled(x, "e4m3", "tensor",
                                                  dynamic_range_expansion=True), "dre without group")
T.raises(ValueError, lambda: exmy.quantize_scaled(x, "e4m3", "tensor", block_rows=4),
         "block_rows without group or nvfp4")
T.raises(ValueError, lambda: exmy.quantize_scaled(x, "e2m1", "group", hadamard=16),
         "hadamard without nvfp4")
T.raises(ValueError, lambda: exmy.quantize_scaled(x, "e2m1", "nvfp4", hadamard=8), "hadamard 8")
T.raises(ValueError, lambda: exmy.quantize_scaled(x, "e2m1", "nvfp4", block_rows=-1),
         "block_rows -1")
T.raises(ValueError, lambda: exmy.quantize_scaled(x, "e4m3", "group", block_rows=2,
                                                  dynamic_range_expansion=True),
         "dre with 2-row blocks")
T.raises(ValueError, lambda: exmy.mx_encode(x, "bf16"), "MX with a 16-bit element format")
T.raises(ValueError, lambda: exmy.DelayedState(0), "history_len 0")
T.check(same_bits(x, before) == 0, "the rejected calls left x untouched")

# ---- the delayed state: Transformer Engine's rule, on the CPU
st = exmy.DelayedState(history_len=3)
T.check(st.scale == 1.0 and st.amax_history == [], "a new state has scale 1")
amaxes = [2.0, 8.0, 1.0, 0.5, 0.25]
for a in amaxes:
    v = np.array([a, -a / 3], np.float32)
    exmy.quantize_scaled(v, "e4m3", "delayed", state=st)
T.check(st.amax_history == [0.25, 0.5, 1.0], f"history keeps the last 3: {st.amax_history}")
T.check(st.scale == np.float32(448.0) / np.float32(1.0), f"scale from the history's max: {st.scale}")
st2 = exmy.DelayedState(history_len=3, most_recent=True)
for a in amaxes:
    exmy.quantize_scaled(np.array([a], np.float32), "e4m3", "delayed", state=st2)
T.check(st2.scale == np.float32(448.0) / np.float32(0.25), "most_recent")

# a copy (deepcopy, pickle) carries the values and is independent
import copy  # noqa: E402
import pickle  # noqa: E402
c1, c2 = copy.deepcopy(st), pickle.loads(pickle.dumps(st))
T.check(c1.scale == st.scale == c2.scale and c1.amax_history == st.amax_history ==
        c2.amax_history, "DelayedState deepcopy / pickle keep the values")
v = np.array([64.0], np.float32)
for s_ in (st, c1, c2):
    exmy.quantize_scaled(v, "e4m3", "delayed", state=s_)
T.check(c1.scale == st.scale == c2.scale == np.float32(448.0) / np.float32(64.0) and
        c1._ptr is not st._ptr, "copies continue as the original, with their own memory")

# ---- stats: the fields, and sanity against numpy
v = np.random.default_rng(1).standard_normal(4096).astype(np.float32)
s = exmy.stats(v, "e4m3", "tensor")
q = exmy.quantize_scaled(v, "e4m3", "tensor")
T.check(set(s) == {"n", "amax", "min_nonzero", "underflow_ratio", "subnormal_ratio",
                   "overflow_ratio", "mse", "rel_l2", "cosine", "sqnr_db", "scale",
                   "delayed_over_current"}, "stats keys")
T.check(s["n"] == 4096 and s["amax"] == float(np.abs(v).max()), "stats n and amax")
mse = float(np.mean((v.astype(np.float64) - q) ** 2))
T.check(math.isclose(s["mse"], mse, rel_tol=1e-9), f"stats mse {s['mse']} vs numpy {mse}")
T.check(s["scale"] == exmy.scale_from_amax("e4m3", s["amax"]), "stats scale")

# ---- accumulation models and qgemm_accum on the CPU
hop = exmy.AccumModel("hopper")
T.check((hop.group, hop.product_bits, hop.sum_bits, hop.round, hop.promote_every, hop.align_sum,
         hop.align_to, hop.k_slice) == (32, 14, 14, "trunc", 0, 1, "inputs", 0),
        f"AccumModel('hopper'): {hop!r}")
T.check(exmy.AccumModel("hopper-split") == exmy.AccumModel(promote_every=128) and
        str(exmy.AccumModel("fp32")) == "fp32" and exmy.AccumModel(group=0) == exmy.AccumModel("fp32"),
        "AccumModel names and fields agree")
T.check(exmy.AccumModel("align_to:product").align_to == "product" and
        exmy.AccumModel(align_to="product") == exmy.AccumModel("align_to:product"),
        "AccumModel align_to")
T.check(exmy.AccumModel("kslice:2816,promote:128").k_slice == 2816 and
        exmy.AccumModel(k_slice=2816, promote_every=128) == exmy.AccumModel("kslice:2816,promote:128"),
        "AccumModel k_slice")
for text in ("hopper", "hopper-split", "group:16,bits:25,sum:22,round:nearest,promote:64,align:0",
             "group:32,bits:13,align_to:product", "kslice:256,promote:128"):
    T.check(exmy.AccumModel(str(exmy.AccumModel(text))) == exmy.AccumModel(text), f"str round trip {text}")
for bad in ("fp16", "group:33,promote:128", "bits:0", "round:up", "", "align_to:operands",
            "kslice:48"):
    T.raises(ValueError, lambda: exmy.AccumModel(bad), f"AccumModel({bad!r})")
T.raises(ValueError, lambda: exmy.AccumModel(round="up"), "AccumModel(round='up')")
T.raises(ValueError, lambda: exmy.AccumModel(group=-1), "AccumModel(group=-1)")
T.raises(TypeError, lambda: exmy.AccumModel(3), "AccumModel(3)")

ar = np.random.default_rng(7)
qa = exmy.quantize(ar.uniform(-2, 2, (9, 200)).astype(np.float32), "e4m3")
qb = exmy.quantize(ar.uniform(-2, 2, (200, 11)).astype(np.float32), "e5m2")
# the products of E4M3 and E5M2 values and their sums over 200 terms are exact in
# float64 (exponents within 2^-25 .. 2^17): a model wide enough to be exact
# (one product per group, 54 and 62 bits) is that sum rounded once to float32
exact64 = qa.astype(np.float64) @ qb.astype(np.float64)
wide = exmy.AccumModel(group=1, product_bits=54, sum_bits=62, round="nearest",
                       align_to="product")
T.check(same_bits(exmy.qgemm_accum(qa, qb, wide), exact64.astype(np.float32)) == 0,
        "qgemm_accum: a wide model is the exact sum rounded once")
hc = exmy.qgemm_accum(np.abs(qa), np.abs(qb), "hopper")
ex = np.abs(qa).astype(np.float64) @ np.abs(qb).astype(np.float64)
rel = (ex - hc) / ex
T.check(rel.min() >= 0 and 0 < rel.max() < 2.0 ** -8, f"hopper truncates, below the exact sum "
        f"by at most 2^-8 relative: {rel.min():.3g} .. {rel.max():.3g}")
c = exmy.qgemm_accum(qa, qb, "hopper-split")
T.check(same_bits(exmy.qgemm_accum(np.ascontiguousarray(qa.T), np.ascontiguousarray(qb.T),
                                   "hopper-split", trans_a=True, trans_b=True), c) == 0 and
        c.shape == (9, 11) and c.dtype == np.float32, "qgemm_accum: transposes")
tc = exmy.qgemm_accum(torch.from_numpy(qa), torch.from_numpy(qb), "hopper-split")
T.check(isinstance(tc, torch.Tensor) and same_bits(tc.numpy(), c) == 0, "qgemm_accum: torch CPU")
out = np.empty((9, 11), np.float32)
T.check(exmy.qgemm_accum(qa, qb, "hopper-split", out=out) is out and same_bits(out, c) == 0,
        "qgemm_accum: out=")
T.check(exmy.qgemm_accum(qa[:, :0].copy(), qb[:0].copy(), "hopper").tolist() == [[0.0] * 11] * 9,
        "qgemm_accum: k = 0 gives zeros")
T.raises(ValueError, lambda: exmy.qgemm_accum(qa, qa, "hopper"), "qgemm_accum: k mismatch")
T.raises(ValueError, lambda: exmy.qgemm_accum(qa[0].copy(), qb, "hopper"), "qgemm_accum: 1-D")
T.raises(ValueError, lambda: exmy.qgemm_accum(qa, qb, "nope"), "qgemm_accum: bad model")
T.raises(TypeError, lambda: exmy.qgemm_accum(qa.astype(np.float64), qb), "qgemm_accum: float64")
# the formats place a subnormal input: 2^-7 is an E4M3 subnormal, so under hopper its product
# with 1.75 aligns at 2^-6 (E4M3's emin) + 2^0, not at 2^-7, and 14 bits from there drop the
# second product, 2^-9 * 2^-11 = 2^-20; as a float32 value (fmt None) 2^-7 is normal and the
# 14 bits from 2^-7 keep it
sa = np.array([[2.0 ** -7, 2.0 ** -9]], np.float32)
sb = np.array([[1.75], [2.0 ** -11]], np.float32)
T.check(exmy.qgemm_accum(sa, sb, "hopper")[0, 0] == 1.75 * 2 ** -7 + 2 ** -20 and
        exmy.qgemm_accum(sa, sb, "hopper", fmt_a="e4m3", fmt_b="e5m2")[0, 0] == 1.75 * 2 ** -7,
        "qgemm_accum: fmt_a / fmt_b give the inputs' emin")

# ---- exmy.torch is imported on first use
import exmy.torch as xt  # noqa: E402
T.check(exmy.torch is xt and hasattr(xt, "QuantLinear"), "exmy.torch")
T.check(callable(exmy.cuda_library_path) and exmy.library_path.endswith("libexmy.so"),
        "library paths")

T.done()
