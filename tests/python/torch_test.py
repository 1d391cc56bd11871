"""exmy.torch against the C trainer.

1. The recipe files: exmy.recipe reads every experiments/configs/*.cfg to the
   values the C parser (config.c) resolves, its defaults are the C table's,
   and it accepts and rejects the same malformed recipes as
   recipe_from_config.
2. QuantLinear against the trainer's own linear layer (linear_forward and
   linear_backward of experiments/trainer/model.c: tq_operand_for_gemm and tq_gemm,
   through the test shim) for every recipe file, over 3 steps (delayed
   scaling's history and the sr counter at step << 36 carried along):
   - on inputs built so that every float32 sum of the GEMMs is exact
     whatever its order (few significand bits, amax pinned so that scales
     are powers of two), Y, dX and dW must be bit-identical: any difference
     in an operand's rounding, scale, seed, offset, block direction or in a
     transpose changes them;
   - on Gaussian inputs, the rounded operands X, W, dY must be bit-identical
     (element-wise recipes) and Y, dX, dW equal up to summation order;
   - recipes whose GEMMs accumulate block-scaled operands as codes with the
     blocks' scales at each promotion (fp8-deepseek under hopper-split, also
     with stochastic rounding): Y, dX, dW bit-identical on Gaussian inputs,
     with K below 128, a multiple of 128, and with partial last blocks.
3. fake_quant's straight-through gradient; quant_matmul / QuantMatmul's
   gradients against their definition; the sr stream; the errors.
"""
import glob
import os
import tempfile

import numpy as np
import torch

import exmy
import exmy.torch as xt
from exmy.recipe import RECIPE_DEFAULTS, Recipe
from common import Tally, exact_operands, ptr, same_bits, shim

T = Tally("torch_test")
torch.set_num_threads(1)
CONFIG_DIR = os.path.join(os.path.dirname(exmy.__file__), "..", "..", "..", "experiments",
                          "configs")
CONFIGS = sorted(glob.glob(os.path.join(CONFIG_DIR, "*.cfg")))
T.check(len(CONFIGS) >= 10, f"found the recipe files ({len(CONFIGS)})")
T.check(sorted(exmy.recipe.available()) == sorted(os.path.basename(c)[:-4] for c in CONFIGS),
        "recipe names are found by name")


def c_recipe(path):
    buf = ctypes_buffer()
    rc = shim().shim_recipe(path.encode(), buf, len(buf))
    text = buf.value.decode()
    if rc:
        return None, text
    return dict(line.split(" = ", 1) if " = " in line else (line.rstrip(" ="), "")
                for line in text.splitlines() if line.strip()), None


def ctypes_buffer():
    import ctypes
    return ctypes.create_string_buffer(1 << 16)


# ---- 1. recipe files
with tempfile.TemporaryDirectory() as tmp:
    empty = os.path.join(tmp, "empty.cfg")
    open(empty, "w").close()
    c_defaults, _ = c_recipe(empty)
    T.check(c_defaults == RECIPE_DEFAULTS,
            f"RECIPE_DEFAULTS mirrors config.c: {set(c_defaults.items()) ^ set(RECIPE_DEFAULTS.items())}")
    T.check(list(c_defaults) == list(RECIPE_DEFAULTS), "recipe keys in config.c's order")
    for path in CONFIGS:
        want, err = c_recipe(path)
        got = Recipe.load(path).values
        T.check(err is None and got == want, f"{os.path.basename(path)}: {got} vs C {want} {err}")
    cases = {
        "ok_minimal": "format_w = e4m3\n",
        "ok_comment": "format_a = e5m2  # trailing comment\n\n  # only a comment\n",
        "ok_case": "format_w = E4M3\nrounding = SR\n",
        "bad_fp32_scaling": "scaling = bogus\n",  # checked by the key table even when unused
        "ok_high": "format_w = e4m3\nhigh_precision_first_last = 1\nhigh_format = bf16\n",
        "ok_smooth_swiglu": "format_w = e4m3\nswiglu_scale = row\n",
        "bad_swiglu_scale": "swiglu_scale = channel\n",
        "ok_bf16_activations": "format_w = bf16\nactivations = bf16\n",
        "bad_activations": "activations = fp16\n",
        "bad_activations_case": "activations = BF16\n",
        "bad_bf16_smooth_swiglu": "activations = bf16\nswiglu_scale = row\n",
        "ok_fp8_moments": "moments = fp8\nmoment2_format = e5m2\n",
        "bad_fp8_moment_format": "moments = fp8\nmoment1_format = e9m9\n",
        "ok_signs": "format_w = e4m3\nmargin = -2\n",
        "bad_plus_sign": "format_w = e4m3\nsr_bits = +7\n",
        "bad_format": "format_w = e4m9x\n",
        "bad_rounding": "format_a = e4m3\nrounding = nearest\n",
        "bad_role_rounding": "format_g = e5m2\nrounding_g = up\n",
        "bad_scaling": "format_w = e4m3\nscaling = blocky\n",
        "bad_sr_bits": "format_w = e4m3\nsr_bits = 33\n",
        "bad_int": "format_w = e4m3\nmargin = 1.5\n",
        "bad_int2": "saturate = yes\n",
        "bad_history": "amax_history = 0\n",
        "bad_history2": "amax_history = 1025\n",
        "bad_key": "format_x = e4m3\n",
        "bad_line": "format_w e4m3\n",
        "bad_moments": "moments = adam8\n",
        "bad_moment_group": "moments = coat\nmoment_group = 0\n",
        "bad_moment_format": "moments = coat\nmoment1_format = e9m3\n",
        "bad_grad_format": "grad_format = e99\n",
        "bad_high": "high_format = e9m3\n",
        "bad_accumulate": "accumulate = group:33,promote:128\n",
        "ok_accumulate": "format_w = e4m3\naccumulate = hopper-split\n",
    }
    for name, text in cases.items():
        path = os.path.join(tmp, name + ".cfg")
        with open(path, "w") as f:
            f.write(text)
        _, c_err = c_recipe(path)
        try:
            Recipe.load(path)
            py_err = None
        except ValueError as e:
            py_err = str(e)
        T.check((c_err is None) == (py_err is None) == name.startswith("ok"),
                f"recipe {name}: C {c_err!r}, Python {py_err!r}")
    T.check(Recipe.load("e8m3").operands(7)["g"].seed == 7 + 3 and
            Recipe.load("e8m3").operands(7)["w"].seed == 8, "role seeds are seed + 1 + role")
T.raises(ValueError, lambda: Recipe.load("no-such-recipe"), "unknown recipe name")

# ---- 2. QuantLinear against the trainer's linear layer
STEPS, N, C, OC = 3, 40, 48, 36
rng = np.random.default_rng(7)
# (N, C, OC) for the recipes whose GEMMs accumulate as codes with block
# scales: K of every GEMM below 128 (one partial block); every K a multiple
# of 128 (whole blocks, 128 x 128 weight blocks whole in both directions);
# partial last blocks along K and partial weight blocks
CODES_SHAPES = ((N, C, OC), (128, 256, 128), (136, 200, 130))


def c_linear(path, x, w, dy):
    steps, n, c = x.shape
    oc = w.shape[1]
    out = {k: np.zeros((steps,) + s, np.float32) for k, s in
           (("y", (n, oc)), ("dx", (n, c)), ("dw", (oc, c)), ("qx", (n, c)), ("qw", (oc, c)),
            ("qdy", (n, oc)))}
    for k in out:
        out[k][:] = np.nan  # untouched where the trainer keeps no rounded copy
    rc = shim().shim_linear(path.encode(), 1337, steps, n, c, oc, ptr(x), ptr(w), ptr(dy),
                            *(ptr(out[k]) for k in ("y", "dx", "dw", "qx", "qw", "qdy")))
    assert rc == 0, path
    return out


def py_linear(path, x, w, dy):
    steps, _, c = x.shape
    oc = w.shape[1]
    layer = xt.QuantLinear(c, oc, bias=False, recipe=path, seed=1337, sr_stream=xt.SRStream())
    layer.capture = {}
    out = {k: [] for k in ("y", "dx", "dw", "qx", "qw", "qdy")}
    for t in range(steps):
        layer.sr_stream.begin_step(t)
        with torch.no_grad():
            layer.weight.copy_(torch.from_numpy(w[t]))
        layer.weight.grad = None
        xt_ = torch.from_numpy(x[t]).clone().requires_grad_()
        y = layer(xt_)
        y.backward(torch.from_numpy(dy[t]))
        out["y"].append(y.detach().numpy())
        out["dx"].append(xt_.grad.numpy())
        out["dw"].append(layer.weight.grad.numpy().copy())
        for k, name in (("qx", "x"), ("qw", "w"), ("qdy", "dy")):
            v = layer.capture.get(name)
            out[k].append(v.numpy().copy() if v is not None else None)
    return out


def gaussian(n, c, oc):
    x = rng.standard_normal((STEPS, n, c)).astype(np.float32)
    w = (rng.standard_normal((STEPS, oc, c)) * 0.05).astype(np.float32)
    dy = (rng.standard_normal((STEPS, n, oc)) * 1e-3).astype(np.float32)
    return x, w, dy


def block_scaled_under_model(recipe, ops):
    """The C GEMMs' codes path (exmy_accum_block_scaled): group blocks along
    K of the model's promotion interval, accumulated as codes with the
    blocks' scales applied at each promotion."""
    acc = recipe.accumulate
    return str(acc) != "fp32" and acc.promote_every > 0 and any(
        op.enabled and op.scaling == "group" and op.mx_block == acc.promote_every
        for op in ops.values())


def check_codes_linear(name, path):
    """Y, dX and dW bit-identical to the trainer's on Gaussian inputs: both
    run exmy_qgemm_accum, which rounds the block-scaled operands itself."""
    for n, c, oc in CODES_SHAPES:
        x, w, dy = gaussian(n, c, oc)
        want, got = c_linear(path, x, w, dy), py_linear(path, x, w, dy)
        for k in ("y", "dx", "dw"):
            diff = [same_bits(got[k][t], want[k][t]) for t in range(STEPS)]
            T.check(diff == [0] * STEPS, f"{name} (block-scaled accumulation) {n}x{c}->{oc}: {k} "
                                         f"differs from the trainer's in {diff} elements")


codes_recipes = []
for path in CONFIGS:
    name = os.path.basename(path)[:-4]
    recipe = Recipe.load(path)
    ops = recipe.operands()
    if block_scaled_under_model(recipe, ops):
        codes_recipes.append(name)
        check_codes_linear(name, path)
        print(f"  {name:14s} QuantLinear == trainer's linear layer, block-scaled accumulation: "
              "checked bit for bit")
        continue
    elementwise = all(op.elementwise for op in ops.values())
    quantized = any(op.enabled for op in ops.values())
    # exact-by-construction inputs: everything bit-identical (not under group
    # and nvfp4 scaling, whose scales are not powers of two: there the
    # Gaussian inputs' bound below is the check)
    if quantized and recipe.values["scaling"] not in ("group", "nvfp4"):
        x = np.stack([exact_operands(recipe, N, C, rng) for _ in range(STEPS)])
        w = np.stack([exact_operands(recipe, OC, C, rng) for _ in range(STEPS)])
        dy = np.stack([exact_operands(recipe, N, OC, rng) for _ in range(STEPS)])
        want, got = c_linear(path, x, w, dy), py_linear(path, x, w, dy)
        for k in ("y", "dx", "dw"):
            diff = sum(int(np.count_nonzero(got[k][t] != want[k][t])) for t in range(STEPS))
            T.check(diff == 0, f"{name} exact inputs: {k} differs from the trainer in {diff} "
                               "elements")
    # Gaussian inputs: operands bit-identical, products up to summation order
    x, w, dy = gaussian(N, C, OC)
    want, got = c_linear(path, x, w, dy), py_linear(path, x, w, dy)
    for k in ("y", "dx", "dw"):
        rel = max(float(np.abs(got[k][t] - want[k][t]).max() / np.abs(want[k][t]).max())
                  for t in range(STEPS))
        T.check(rel < 1e-5, f"{name} gaussian inputs: {k} rel err {rel:.2e}")
    if quantized and elementwise:
        for k in ("qx", "qw", "qdy"):
            d = [same_bits(got[k][t], want[k][t]) if got[k][t] is not None else -1
                 for t in range(STEPS)]
            T.check(d == [0] * STEPS, f"{name} gaussian inputs: rounded {k[1:]} differs "
                                      f"from the trainer's: {d}")
    print(f"  {name:14s} QuantLinear == trainer's linear layer: checked")
T.check("fp8-deepseek" in codes_recipes, f"block-scaled accumulation checked ({codes_recipes})")
# the same with stochastic rounding: each operand's sr offset reaches exmy_qgemm_accum
with tempfile.TemporaryDirectory() as tmp:
    sr = os.path.join(tmp, "fp8-deepseek-sr.cfg")
    with open(os.path.join(CONFIG_DIR, "fp8-deepseek.cfg")) as f, open(sr, "w") as g:
        g.write(f.read() + "rounding = sr\n")
    check_codes_linear("fp8-deepseek with rounding = sr", sr)

# ---- 3. fake_quant: forward is quantize, the gradient passes straight through
x = torch.randn(8, 33) * 10
for kw in ({}, {"rounding": "sr", "seed": 5, "offset": 9}, {"scaling": "tensor"},
           {"scaling": "mx"}, {"scaling": "group:8", "pow2": True}, {"saturate": True}):
    xr = x.clone().requires_grad_()
    y = xt.fake_quant(xr, "e4m3", **kw)
    scaling = kw.get("scaling", "none")
    rest = {k: v for k, v in kw.items() if k != "scaling"}
    with torch.no_grad():
        want = exmy.quantize_scaled(x, "e4m3", scaling, **rest)
    T.check(same_bits(y.detach().numpy(), want.numpy()) == 0, f"fake_quant {kw}: forward")
    g = torch.randn_like(x)
    (y * g).sum().backward()
    T.check(torch.equal(xr.grad, g), f"fake_quant {kw}: d/dx = upstream gradient (STE)")
# through a small graph: d/dx sum(w * fq(x)^2) = 2 w fq(x)
xr = (torch.randn(64) * 3).requires_grad_()
wv = torch.randn(64)
q = xt.fake_quant(xr, "e2m1", saturate=True)
(wv * q * q).sum().backward()
T.check(torch.equal(xr.grad, 2 * wv * q.detach()), "fake_quant inside a graph (chain rule)")
st = exmy.DelayedState(4)
xr = torch.randn(100, requires_grad=True)
xt.fake_quant(xr, "e4m3", scaling="delayed", state=st).sum().backward()
T.check(st.amax_history == [float(xr.detach().abs().max())] and torch.equal(xr.grad,
        torch.ones(100)), "fake_quant with a delayed state")
T.raises(TypeError, lambda: xt.fake_quant(x.double(), "e4m3"), "fake_quant(float64)")
T.raises(ValueError, lambda: xt.fake_quant(x.t(), "e4m3"), "fake_quant(non-contiguous)")
T.raises(TypeError, lambda: xt.fake_quant(x.numpy(), "e4m3"), "fake_quant(numpy)")

# ---- quant_matmul: the definition, element-wise and MX
a = torch.randn(2, 3, 10, 40, requires_grad=True)
b = torch.randn(2, 3, 12, 40, requires_grad=True)
for recipe in ("e8m3", "mxfp8", "e8m3-sr"):
    mm = xt.QuantMatmul(recipe=recipe, sr_stream=xt.SRStream(100))
    a.grad = b.grad = None
    y = mm(a, b)
    g = torch.randn_like(y)
    y.backward(g)
    ops = Recipe.load(recipe).operands()
    s = xt.SRStream(100)

    def q(role, t):
        op = ops[role]
        off = s.take(t.numel()) if op.stochastic else 0
        return op.quantize(t.detach().contiguous(), off)

    with torch.no_grad():
        qa, qb = q("a", a), q("a", b)
        want_y = qa @ qb.transpose(-1, -2)
        if recipe == "mxfp8":  # every GEMM rounds its operands along its own K
            want_da = q("g", g) @ q("a", b.transpose(-1, -2)).transpose(-1, -2)
            want_db = q("g", g.transpose(-1, -2)) @ q("a", a.transpose(-1, -2)).transpose(-1, -2)
        else:
            qg = q("g", g)
            want_da, want_db = qg @ qb, qg.transpose(-1, -2) @ qa
    T.check(torch.equal(y, want_y), f"quant_matmul {recipe}: forward")
    T.check(torch.equal(a.grad, want_da) and torch.equal(b.grad, want_db),
            f"quant_matmul {recipe}: gradients")
    T.check(mm.sr_stream.offset == s.offset, f"quant_matmul {recipe}: sr stream consumed "
                                             f"{mm.sr_stream.offset - 100} elements")
T.raises(ValueError, lambda: xt.quant_matmul(a, b[:1], recipe="e8m3"), "quant_matmul shapes")
# block-scaled accumulation (fp8-deepseek): a batched product is its slices' 2-D products
a = torch.randn(2, 3, 20, 200, requires_grad=True)
b = torch.randn(2, 3, 12, 200, requires_grad=True)
y = xt.QuantMatmul(recipe="fp8-deepseek")(a, b)
g = torch.randn_like(y)
y.backward(g)
same = True
for i in range(2):
    for j in range(3):
        ai, bi = a[i, j].detach().clone().requires_grad_(), b[i, j].detach().clone().requires_grad_()
        yi = xt.quant_matmul(ai, bi, recipe="fp8-deepseek")
        yi.backward(g[i, j])
        same &= torch.equal(yi, y[i, j]) and torch.equal(ai.grad, a.grad[i, j]) and \
            torch.equal(bi.grad, b.grad[i, j])
T.check(same, "quant_matmul fp8-deepseek (block-scaled accumulation): each slice's forward and "
              "gradients are its 2-D product's")

# ---- QuantLinear as a drop-in nn.Linear
lin = torch.nn.Linear(16, 8)
ql = xt.QuantLinear.from_linear(lin, recipe="fp32")
xin = torch.randn(4, 5, 16)
T.check(torch.allclose(ql(xin), lin(xin), rtol=1e-6, atol=1e-6) and ql(xin).shape == (4, 5, 8),
        "QuantLinear(fp32) == nn.Linear, batch dimensions kept")
ql = xt.QuantLinear.from_linear(lin, recipe="bf16")
with torch.no_grad():
    want = (xin.to(torch.bfloat16).float() @ lin.weight.to(torch.bfloat16).float().t()) + lin.bias
T.check(torch.allclose(ql(xin), want, rtol=1e-6, atol=1e-6), "QuantLinear(bf16) forward")
T.raises(TypeError, lambda: ql(xin.double()), "QuantLinear(float64 input)")
T.raises(ValueError, lambda: ql(torch.randn(3, 15)), "QuantLinear(wrong width)")
T.raises(ValueError, lambda: xt.QuantLinear(4, 4, recipe="nope"), "QuantLinear(unknown recipe)")
T.raises(ValueError, lambda: xt.quant_linear(xin, lin.weight, recipe="fp8-te"),
         "functional delayed scaling without states")
s = xt.SRStream()
s.begin_step(3)
T.check(s.take(10) == 3 << 36 and s.offset == (3 << 36) + 10, "SRStream: step << 36, take")
s = xt.SRStream((1 << 64) - 4)
T.check(s.take(10) == (1 << 64) - 4 and s.offset == 6, "SRStream wraps at 2^64")

T.done()
