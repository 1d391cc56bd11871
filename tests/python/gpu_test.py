"""exmy on CUDA tensors (run on a GPU machine: cuda/gpu_run.sh python).

Each block prints PASS or FAIL lines with counts and the script exits 1 if
any check failed.  References, all in the same process:
  * the CPU library on the same inputs (itself held to the C scalar
    reference by //tests/python:exact_test), bit for bit: every format,
    rounding mode, saturation, subnormal flushing and stochastic-rounding
    (seed, offset, sr_bits) on a dense input set; decode of every code;
    unaligned and odd-sized tensors; scaled recipes, MX, delayed states and
    statistics; QuantLinear's forward and backward;
  * ml_dtypes 0.6 casts (x.astype(ml_dtypes.<fmt>): rne, not saturating) and
    torch's own casts (x.to(torch.float8_*) / bfloat16 / float16 on the GPU)
    on every non-NaN input, with lib/exmy.h's documented E8M0 choices
    (zero, negative and float32-subnormal inputs) set apart;
  * stream semantics: work enqueued on torch's current stream (a side stream
    included) in order, and the call returns without waiting for the GPU.

    PYTHONPATH=python EXMY_LIBRARY=./libexmy.so EXMY_CUDA_LIBRARY=./libexmy_cuda.so \
        EXMY_CONFIG_DIR=./configs python3 gpu_test.py
"""
import math
import sys
import time

import numpy as np
import torch

import exmy
import exmy.torch as xt
from common import FORMATS, ROUNDINGS, Tally, dense_inputs, exact_operands, same_bits

T = Tally("gpu_test")
if not torch.cuda.is_available():
    print("FAIL no CUDA device visible to torch")
    sys.exit(1)
dev = torch.device("cuda", 0)
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
print(f"gpu_test: {torch.cuda.get_device_name(dev)}, torch {torch.__version__}, "
      f"libexmy_cuda: {exmy.cuda_library_path()}")
rng = np.random.default_rng(2024)
CODE = {1: np.uint8, 2: np.uint16, 4: np.uint32}


def cpu_decode(fmt, codes):
    return exmy.decode(codes.astype(CODE[exmy.Format(fmt).code_bytes]), fmt)


def codes_np(t):
    """A torch code tensor (uint8 / uint16 / int16 / uint32 / int32) as unsigned numpy."""
    n = t.element_size()
    signed = {1: torch.uint8, 2: torch.int16, 4: torch.int32}[n]
    return t.view(signed).cpu().numpy().view(CODE[n])  # view first: few ops know uint16


def report(ok, what):
    print(f"{'PASS' if ok else 'FAIL'} {what}")
    T.check(ok, what)


# ---- 1. every format and option: CUDA == CPU
SR = [(0xDEADBEEF12345678, 3, 0), (7, (1 << 64) - 5, 0), (99, 12345, 3)]
total_sets = total_elems = 0
for fmt in FORMATS:
    x = dense_inputs(fmt, rng, cpu_decode)
    xc = torch.from_numpy(x).to(dev)
    bad = []
    for rounding in ROUNDINGS:
        for saturate in (False, True):
            for flush in (False, True):
                for seed, offset, sr_bits in (SR if rounding == "sr" else [(0, 0, 0)]):
                    o = dict(rounding=rounding, saturate=saturate, flush_subnormals=flush,
                             seed=seed, offset=offset, sr_bits=sr_bits)
                    d = same_bits(exmy.quantize(xc, fmt, **o).cpu().numpy(),
                                  exmy.quantize(x, fmt, **o))
                    c = int(np.count_nonzero(codes_np(exmy.encode(xc, fmt, **o)) !=
                                             exmy.encode(x, fmt, **o)))
                    total_sets += 1
                    total_elems += x.size
                    if d or c:
                        bad.append(f"{o}: {d} values, {c} codes")
    f = exmy.Format(fmt)
    codes = (np.arange(1 << f.bits, dtype=np.uint32) if f.bits <= 16 else
             rng.integers(0, 1 << 32, 1 << 20, dtype=np.uint64).astype(np.uint32))
    codes = codes.astype(CODE[f.code_bytes])
    signed = codes.view({1: np.uint8, 2: np.int16, 4: np.int32}[f.code_bytes])
    gd = exmy.decode(torch.from_numpy(signed).to(dev), fmt).cpu().numpy()
    dd = same_bits(gd, exmy.decode(codes, fmt))
    if dd:
        bad.append(f"decode: {dd} of {codes.size} codes")
    report(not bad, f"{fmt}: CUDA quantize/encode/decode == CPU on {x.size} inputs x "
                    f"{4 * 6 + 4 * len(SR)} option sets, {codes.size} codes" +
           ("" if not bad else "; " + "; ".join(bad[:4])))
print(f"     ({total_sets} option sets, {total_elems} elements compared)")

# ---- 2. sizes, alignment, out=, views
for n in (0, 1, 3, 17, 1000003, (1 << 24) + 5):
    x = torch.randn(n + 3, dtype=torch.float32) * 100
    for start in (0, 1, 2, 3):  # storage offsets: data_ptr not 16-byte aligned
        v = x[start:start + n]
        ok = True
        for fmt, o in (("e4m3", {}), ("e5m2", {"rounding": "sr", "seed": 1, "offset": 5}),
                       ("bf16", {"rounding": "rz"}), ("e2m1", {"saturate": True}),
                       ("e8m3", {"rounding": "sr", "seed": 9})):
            want = exmy.quantize(v.contiguous(), fmt, **o)
            got = exmy.quantize(v.to(dev), fmt, **o).cpu()
            wc = exmy.encode(v.contiguous(), fmt, **o)
            gc = exmy.encode(v.to(dev), fmt, **o).cpu()
            ok &= same_bits(got.numpy(), want.numpy()) == 0 and np.array_equal(codes_np(gc),
                                                                                codes_np(wc))
        report(ok, f"n={n} offset={start}: CUDA == CPU (5 formats)")
failed_before = len(T.failures)
xc = (torch.randn(64, 33) * 30).to(dev)
y = torch.empty_like(xc)
r = exmy.quantize(xc, "e4m3", out=y)
report(r is y and torch.equal(y.cpu(), exmy.quantize(xc.cpu(), "e4m3")), "out= on CUDA")
z = xc.clone()
exmy.quantize(z, "e4m3", out=z)
report(torch.equal(z.cpu(), exmy.quantize(xc.cpu(), "e4m3")), "in place on CUDA")
T.raises(TypeError, lambda: exmy.quantize(xc.half(), "e4m3"), "CUDA float16 input: TypeError")
T.raises(ValueError, lambda: exmy.quantize(xc.t(), "e4m3"), "CUDA transposed: ValueError")
T.raises(ValueError, lambda: exmy.quantize(xc, "e4m3", out=torch.empty(64, 33)),
         "CPU out for a CUDA input: ValueError")
T.raises(ValueError, lambda: exmy.quantize_scaled(xc, "bf16", "mx"), "MX with bf16 on CUDA")
if len(T.failures) == failed_before:
    print("PASS CUDA tensors of another dtype, strided, or with an out elsewhere: "
          "TypeError / ValueError")

# ---- 3. streams: the current stream, in order, asynchronous
side = torch.cuda.Stream(dev)
src = (torch.randn(1 << 22) * 10).to(dev)
want = exmy.quantize(src.cpu(), "e4m3", rounding="sr", seed=3)
buf = torch.zeros_like(src)
torch.cuda.synchronize()
with torch.cuda.stream(side):
    if hasattr(torch.cuda, "_sleep"):
        torch.cuda._sleep(50_000_000)  # keep the side stream busy before the copy
    buf.copy_(src)
    got = exmy.quantize(buf, "e4m3", rounding="sr", seed=3)  # must run after the copy
side.synchronize()
report(torch.equal(got.cpu(), want), "side stream: exmy runs after the work queued before it")
if hasattr(torch.cuda, "_sleep"):
    torch.cuda.synchronize()
    big = torch.randn(1 << 24, device=dev)
    torch.cuda._sleep(200_000_000)  # ~0.1 s of GPU time on the current stream
    t0 = time.perf_counter()
    exmy.quantize(big, "e5m2")
    exmy.encode(big, "e4m3")
    host_ms = (time.perf_counter() - t0) * 1e3
    torch.cuda.synchronize()
    report(host_ms < 20, f"asynchronous: two calls returned in {host_ms:.2f} ms while the "
                         "stream was busy (no synchronisation, no host copy)")

# ---- 4. scaled recipes, MX, delayed states, statistics: CUDA == CPU
STATS_EXACT = ["n", "amax", "min_nonzero", "underflow_ratio", "subnormal_ratio",
               "overflow_ratio", "scale"]
STATS_SUMS = ["mse", "rel_l2", "cosine", "sqnr_db", "delayed_over_current"]


def stats_close(a, b):
    for k in STATS_EXACT:
        if not (a[k] == b[k] or (math.isnan(a[k]) and math.isnan(b[k]))):
            return f"{k} {a[k]} vs {b[k]}"
    for k in STATS_SUMS:
        x, y = a[k], b[k]
        if math.isnan(x) and math.isnan(y) or x == y:
            continue
        if not math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-300):
            return f"{k} {x} vs {y}"
    return None


base = torch.randn(6, 48, 200) * torch.exp2(torch.randint(-10, 10, (6, 48, 1)).float())
base[0, 3, 5] = 0.0
base[1, 2, :] = 0.0
base[2, 0, 7] = float("inf")
base[3, 5, 9] = float("nan")
for fmt in ("e4m3", "e5m2", "e2m1", "e3m2", "bf16", "e8m3"):
    for scaling, kw in (("none", {}), ("tensor", {}), ("tensor", {"margin": 2, "pow2": True}),
                        ("delayed", {}), ("mx", {}), ("mx:7", {}), ("group:16", {}),
                        ("group", {"pow2": True}), ("group:32", {"block_rows": 8}),
                        ("nvfp4", {}), ("nvfp4:16", {"block_rows": 16}),
                        ("nvfp4", {"hadamard": 16, "hadamard_seed": 5})):
        if scaling.startswith("mx") and exmy.Format(fmt).bits > 8:
            continue
        for o in ({}, {"rounding": "sr", "seed": 11, "offset": 5, "saturate": True}):
            st_c = exmy.DelayedState(4) if scaling == "delayed" else None
            st_g = exmy.DelayedState(4) if scaling == "delayed" else None
            bad = []
            for c in range(base.shape[0]):
                xc = base[c].contiguous()
                yc = exmy.quantize_scaled(xc, fmt, scaling, state=st_c, **kw, **o)
                yg = exmy.quantize_scaled(xc.to(dev), fmt, scaling, state=st_g, **kw, **o).cpu()
                if same_bits(yg.numpy(), yc.numpy()):
                    bad.append(f"call {c}: {same_bits(yg.numpy(), yc.numpy())} values")
            if st_c is not None and not (st_g.scale == st_c.scale and
                                         st_g.amax_history == st_c.amax_history):
                bad.append(f"delayed state {st_g.scale} vs {st_c.scale}")
            # statistics (on the device for every scaling here)
            st_c = exmy.DelayedState(4) if scaling == "delayed" else None
            st_g = exmy.DelayedState(4) if scaling == "delayed" else None
            for c in range(base.shape[0]):
                a = exmy.stats(base[c].to(dev), fmt, scaling, state=st_g, **kw, **o)
                b = exmy.stats(base[c].contiguous(), fmt, scaling, state=st_c, **kw, **o)
                err = stats_close(a, b)
                if err:
                    bad.append(f"stats call {c}: {err}")
            report(not bad, f"{fmt} {scaling} {kw} {o}: CUDA == CPU over {base.shape[0]} calls"
                   + ("" if not bad else "; " + "; ".join(bad[:3])))
    if exmy.Format(fmt).bits <= 8:
        x = base[0].contiguous()
        cc, sc_ = exmy.mx_encode(x, fmt, block=32)
        cg, sg = exmy.mx_encode(x.to(dev), fmt, block=32)
        ok = torch.equal(cg.cpu(), cc) and torch.equal(sg.cpu(), sc_)
        ok &= same_bits(exmy.mx_decode(cg, sg, fmt).cpu().numpy(),
                        exmy.mx_decode(cc, sc_, fmt).numpy()) == 0
        report(ok, f"{fmt} mx_encode / mx_decode: CUDA == CPU")
x = base[0].contiguous()
g_cpu = exmy.quantize_scaled(x, "e4m3", "group:16", dynamic_range_expansion=True)
g_gpu = exmy.quantize_scaled(x.to(dev), "e4m3", "group:16", dynamic_range_expansion=True).cpu()
print(f"INFO group scaling with dynamic range expansion: {same_bits(g_gpu.numpy(), g_cpu.numpy())}"
      f" of {x.numel()} values differ (CUDA's pow/log vs libm, as cuda/exmy_cuda.h says)")
# a delayed state that moves between the devices keeps its history
s1, s2 = exmy.DelayedState(8), exmy.DelayedState(8)
for c in range(6):
    xc = base[c].contiguous()
    exmy.quantize_scaled(xc, "e4m3", "delayed", state=s1)
    exmy.quantize_scaled(xc.to(dev) if c % 2 else xc, "e4m3", "delayed", state=s2)
report(s1.scale == s2.scale and s1.amax_history == s2.amax_history,
       "DelayedState moved CPU <-> CUDA every call == CPU only")
import copy  # noqa: E402
s3 = copy.deepcopy(s2)
report(str(s2.device).startswith("cuda") and s3.scale == s2.scale and
       s3.amax_history == s2.amax_history, "deepcopy of a CUDA DelayedState")

# ---- 5. against ml_dtypes and torch's casts
try:
    import ml_dtypes
except ImportError:
    ml_dtypes = None
    print("SKIP ml_dtypes not installed")
ML = ["float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e3m4",
      "float8_e4m3", "float6_e2m3fn", "float6_e3m2fn", "float4_e2m1fn", "float8_e8m0fnu",
      "bfloat16"]


def compare_values(ours, theirs, x, fmt):
    """(mismatches, documented E8M0 choices) over non-NaN inputs; NaN == NaN."""
    ob, tb = ours.view(np.uint32), theirs.view(np.uint32)
    both_nan = np.isnan(ours) & np.isnan(theirs)
    diff = (ob != tb) & ~both_nan & ~np.isnan(x)
    doc = np.zeros_like(diff)
    if fmt == "float8_e8m0fnu":
        xb = x.view(np.uint32)
        doc = diff & (((xb >> 31) == 1) | ((xb & 0x7FFFFFFF) < 0x00800000))
    return int((diff & ~doc).sum()), int(doc.sum()), np.nonzero(diff & ~doc)[0][:3]


if ml_dtypes is not None:
    for fmt in ML:
        x = dense_inputs(fmt, rng, cpu_decode)
        with np.errstate(all="ignore"):
            theirs = x.astype(getattr(ml_dtypes, fmt)).astype(np.float32)
        ours = exmy.quantize(torch.from_numpy(x).to(dev), fmt).cpu().numpy()
        bad, doc, ex = compare_values(ours, theirs, x, fmt)
        report(bad == 0, f"{fmt}: CUDA == ml_dtypes {ml_dtypes.__version__} on "
                         f"{int((~np.isnan(x)).sum())} non-NaN inputs ({bad} differ, {doc} "
                         "documented E8M0 choices)" +
               "".join(f"; x={x[i]!r} ours {ours[i]!r} ml_dtypes {theirs[i]!r}" for i in ex))
x = dense_inputs("float16", rng, cpu_decode)
with np.errstate(all="ignore"):
    h = x.astype(np.float16).astype(np.float32)
bad, _, ex = compare_values(exmy.quantize(torch.from_numpy(x).to(dev), "fp16").cpu().numpy(), h,
                            x, "fp16")
report(bad == 0, f"float16: CUDA == numpy float16 on {x.size} inputs ({bad} differ)")
TORCH = [("float8_e4m3fn", "float8_e4m3fn"), ("float8_e5m2", "float8_e5m2"),
         ("float8_e4m3fnuz", "float8_e4m3fnuz"), ("float8_e5m2fnuz", "float8_e5m2fnuz"),
         ("bfloat16", "bfloat16"), ("float16", "float16"), ("float8_e8m0fnu", "float8_e8m0fnu")]
for fmt, tname in TORCH:
    dt = getattr(torch, tname, None)
    if dt is None:
        print(f"SKIP torch.{tname}: not in torch {torch.__version__}")
        continue
    x = dense_inputs(fmt, rng, cpu_decode)
    xc = torch.from_numpy(x).to(dev)
    try:
        theirs = xc.to(dt).float().cpu().numpy()
    except (RuntimeError, TypeError) as e:
        print(f"SKIP torch.{tname} cast on CUDA: {e}")
        continue
    ours = exmy.quantize(xc, fmt).cpu().numpy()
    bad, doc, ex = compare_values(ours, theirs, x, fmt)
    line = (f"{fmt}: CUDA == torch .to(torch.{tname}) on {int((~np.isnan(x)).sum())} non-NaN "
            f"inputs ({bad} differ, {doc} documented E8M0 choices)" +
            "".join(f"; x={x[i]!r} ours {ours[i]!r} torch {theirs[i]!r}" for i in ex))
    if fmt == "float8_e8m0fnu":  # torch's E8M0 rounding is its own choice: reported only
        print(("INFO " if bad else "PASS ") + line)
    else:
        report(bad == 0, line)

# ---- 6. exmy.torch on CUDA
xr = (torch.randn(64, 40, device=dev) * 5).requires_grad_()
g = torch.randn(64, 40, device=dev)
y = xt.fake_quant(xr, "e4m3", scaling="tensor")
(y * g).sum().backward()
report(torch.equal(xr.grad, g) and torch.equal(y.detach().cpu(), exmy.quantize_scaled(
    xr.detach().cpu(), "e4m3", "tensor")), "fake_quant on CUDA: forward == CPU, STE gradient")
STEPS, N, C, OC = 3, 40, 48, 36


def exact(recipe, rows, cols):
    return torch.from_numpy(exact_operands(exmy.recipe.Recipe.load(recipe), rows, cols, rng))


for recipe in ("e8m3", "e8m3-sr", "bf16", "mxfp8", "fp8-te", "fp8-current"):
    layers = {d: xt.QuantLinear(C, OC, bias=False, recipe=recipe, sr_stream=xt.SRStream(),
                                device=d) for d in ("cpu", dev)}
    bad = []
    for t in range(STEPS):
        x, w, dy = exact(recipe, N, C), exact(recipe, OC, C), exact(recipe, N, OC)
        res = {}
        for d, layer in layers.items():
            layer.sr_stream.begin_step(t)
            with torch.no_grad():
                layer.weight.copy_(w)
            layer.weight.grad = None
            xi = x.detach().to(d).requires_grad_()  # a leaf on every device
            out = layer(xi)
            out.backward(dy.to(d))
            res[d] = [out.detach().cpu(), xi.grad.cpu(), layer.weight.grad.cpu()]
        for name, a, b in zip(("y", "dx", "dw"), res["cpu"], res[dev]):
            if not torch.equal(a, b):
                bad.append(f"step {t} {name}: {int((a != b).sum())} differ")
    report(not bad, f"QuantLinear({recipe}) on CUDA == CPU, forward and backward, {STEPS} steps"
           + ("" if not bad else "; " + "; ".join(bad[:3])))

# ---- qgemm_accum: exmy_cuda_qgemm_accum == exmy_qgemm_accum, bit for bit
ga = exmy.quantize(rng.uniform(-3, 3, (40, 300)).astype(np.float32), "e4m3")
gb = exmy.quantize(rng.uniform(-3, 3, (300, 24)).astype(np.float32), "e5m2")
for model in ("fp32", "hopper", "hopper-split", "group:16,bits:20,sum:22,round:nearest,align:0",
              "kslice:64,promote:32"):
    want = exmy.qgemm_accum(ga, gb, model, fmt_a="e4m3", fmt_b="e5m2")
    got = exmy.qgemm_accum(torch.from_numpy(ga).to(dev), torch.from_numpy(gb).to(dev), model,
                           fmt_a="e4m3", fmt_b="e5m2")
    report(got.device == dev and same_bits(got.cpu().numpy(), want) == 0,
           f"qgemm_accum({model}) on CUDA == CPU")

if torch.cuda.device_count() > 1:
    d1 = torch.device("cuda", 1)
    x = dense_inputs("e4m3", rng, cpu_decode)
    got = exmy.quantize(torch.from_numpy(x).to(d1), "e4m3", rounding="sr", seed=5).cpu().numpy()
    report(same_bits(got, exmy.quantize(x, "e4m3", rounding="sr", seed=5)) == 0,
           "second GPU (cuda:1): CUDA == CPU")

T.done()
