"""The C model's `activations = bf16` (with the bf16 recipe, configs/bf16.cfg:
every GEMM input rounded to bf16, as autocast casts them) against the
independent PyTorch model under bf16 autocast (experiments/reference/llama_torch.py,
autocast_bf16): same weights, same batch; the forward loss and every parameter
gradient must agree within TOL, and the same C model with `activations = f32`
(today's bf16 recipe: only GEMM inputs rounded) must not: its worst gradient
error must exceed TOL, so the test tells the two semantics apart.

TOL, relative to each tensor's largest gradient (and to the loss), is 2^-10:
a quarter of bf16's unit roundoff 2^-8.  Both sides round the same tensors at
the same points, so they differ only where float32 details (summation order,
exp, x / c; about 2^-23 relative) put a value on the other side of a bf16
rounding boundary (about one value in 2^16 lands that close), which moves that
element by one bf16 step, at most 2^-7 of it: TOL admits such a flip in any
element up to an eighth of its tensor's largest, and float32's own
differences far below.  The f32 model leaves out an error of up to 2^-8 at
every GEMM output and element-wise layer, some twenty roundings deep, and
lands outside.  The linear layers' weight gradients, bf16 values on both
sides, must moreover be bit-identical in at least 99% of their elements.

usage: torch_ref_bf16_test.py EXPORT_REF_BINARY REFERENCE_DIR BF16_CFG
Skips (exit 0, with a message) when torch is missing, unless CI=true.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ref_export import run_export  # noqa: E402 (first: it skips the test without torch)
import torch  # noqa: E402

exe, refdir, bf16_cfg = sys.argv[1], sys.argv[2], sys.argv[3]
sys.path.insert(0, refdir)
import torch.nn.functional as F  # noqa: E402
from llama_torch import Bf16Matmul, Llama  # noqa: E402

torch.set_num_threads(1)
TOL = 2.0 ** -10
SAME_BITS = 0.99

c_bf16 = run_export(exe, bf16_cfg, "activations=bf16")
c_f32 = run_export(exe, bf16_cfg, "activations=f32")
shape = tuple(c_bf16[k] for k in ("V", "C", "L", "NH", "NKV", "H", "T"))
assert torch.equal(c_bf16["params0"], c_f32["params0"]) and torch.equal(c_bf16["inputs"], c_f32["inputs"])
failures = []


def check(ok, what):
    print(f"  {'ok  ' if ok else 'FAIL'} {what}")
    if not ok:
        failures.append(what)


print(f"torch_ref_bf16_test: model V,C,L,NH,NKV,H,T = {shape}, batch {c_bf16['B']}, "
      f"torch {torch.__version__}, TOL {TOL:.3e}")

# ---- the reference's bf16 GEMM is autocast's own linear where this CPU sums in float32
torch.manual_seed(0)
for n, k, m in ((64, 16, 16), (64, 16, 32), (64, 32, 16), (64, 16, 256)):
    x, w = torch.randn(n, k), torch.randn(m, k)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = F.linear(x, w)
    check(y.dtype == torch.bfloat16 and torch.equal(y, Bf16Matmul.apply(x, w.t())),
          f"Bf16Matmul = F.linear under CPU autocast bit for bit ({n}x{k} by {m}x{k})")

# ---- the reference: loss and gradients, with and without the CPU autocast context
model = Llama(*shape)
model.autocast_bf16 = True
inputs, targets = c_bf16["inputs"][0], c_bf16["targets"][0]


def reference(under_autocast):
    model.load_flat(c_bf16["params0"])
    model.zero_grad(set_to_none=True)
    if under_autocast:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            _, loss = model(inputs, targets)
    else:
        _, loss = model(inputs, targets)
    loss.backward()
    return loss.item(), torch.cat([p.grad.flatten() for p in model.parameters()])


ref_loss, ref_grads = reference(True)
plain_loss, plain_grads = reference(False)
check(ref_loss == plain_loss and torch.equal(ref_grads, plain_grads),
      "the reference is the same bits with and without torch.autocast (nothing left implicit)")
check(ref_grads.dtype == torch.float32, "float32 parameter gradients")


LINEAR_WEIGHTS = ("wq", "wk", "wv", "wo", "w1", "w3", "w2", "lm_head")


def errors(c):
    """Relative errors of the C export against the reference: the loss, then each tensor's
    max |difference| / max |reference gradient|; and the share of the linear layers'
    weight-gradient elements that are bit-identical."""
    out = {"loss": abs(c["loss0"] - ref_loss) / abs(ref_loss)}
    off, same, total = 0, 0, 0
    for name, p in model.named_parameters():
        n = p.numel()
        g_ref, g_c = ref_grads[off:off + n], c["grads0"][off:off + n]
        off += n
        out[f"grad {name}"] = ((g_c - g_ref).abs().max() / g_ref.abs().max()).item()
        if name in LINEAR_WEIGHTS:
            same += int((g_c == g_ref).sum())
            total += n
    return out, same / total


(e_bf16, same_bf16), (e_f32, same_f32) = errors(c_bf16), errors(c_f32)
print(f"  {'':<14} {'activations = bf16':>20} {'activations = f32':>20}")
for name in e_bf16:
    print(f"  {name:<14} {e_bf16[name]:>20.3e} {e_f32[name]:>20.3e}")
print(f"  {'dW same bits':<14} {same_bf16:>20.4f} {same_f32:>20.4f}")
worst_bf16 = max(v for k, v in e_bf16.items() if k.startswith("grad"))
worst_f32 = max(v for k, v in e_f32.items() if k.startswith("grad"))
check(all(v <= TOL for v in e_bf16.values()),
      f"activations = bf16 within TOL: loss {e_bf16['loss']:.3e}, worst gradient {worst_bf16:.3e}")
check(same_bf16 >= SAME_BITS,
      f"activations = bf16: {same_bf16:.2%} of the linear weights' gradient elements bit-identical")
check(worst_f32 > TOL,
      f"activations = f32 outside TOL on the gradients (worst {worst_f32:.3e}, loss {e_f32['loss']:.3e}): "
      "the test tells them apart")

if failures:
    print("torch_ref_bf16_test: FAILED: " + "; ".join(failures))
    sys.exit(1)
print("torch_ref_bf16_test: PASSED")
