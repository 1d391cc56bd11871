"""Train a small PyTorch LLaMA with every GEMM operand in E8M3, through
exmy.torch.QuantLinear (and QuantMatmul for the attention products, which
the trainer's e8m3 recipe quantizes too), and check its first step against
the C trainer's on the same weights and batch.

The weights, batches and optimizer settings come from //experiments/trainer:export_ref
(the state that tests/experiments/torch_ref_test.py checks the PyTorch
reference model against); the C side of the first step is c_first_step
(model_forward / model_backward of experiments/trainer/model.c under the same
recipe file).  The architecture is experiments/reference/llama_torch.py's,
with its linear layers replaced by QuantLinear modules.

    bazel build -c opt //:libexmy.so //experiments/trainer:export_ref //lib/python/examples:c_first_step
    PYTHONPATH=lib/python python3 lib/python/examples/llama_e8m3.py [--recipe e8m3] [--steps 30]

Exit status 1 if the first-step loss differs from the C trainer's by more
than --tol (relative, 1e-6: E8M3 itself moves this loss by about 5e-5, so
the check sees whether every operand is rounded as the trainer rounds it),
the gradient norm by more than --grad-tol, or if the same model under the
fp32 recipe misses export_ref's own float32 loss.
"""
import argparse
import math
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as F

import exmy.torch as xt
from exmy.recipe import Recipe

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", "..", ".."))


class QuantLlama(torch.nn.Module):
    """llama_torch.Llama with QuantLinear layers and, when the recipe says
    quant_attention, QuantMatmul attention products (S = Q K^T, O = P V)."""

    def __init__(self, V, C, L, NH, NKV, H, T, recipe, sr_stream):
        super().__init__()
        from llama_torch import Llama
        self.V, self.C, self.L, self.NH, self.NKV, self.H, self.T = V, C, L, NH, NKV, H, T
        self.hs = C // NH
        KVC = NKV * self.hs
        r = Recipe.load(recipe)

        def linear(i, o, quantized=True):
            return xt.QuantLinear(i, o, bias=False, recipe=r if quantized else "fp32",
                                  sr_stream=sr_stream)

        self.wte = torch.nn.Parameter(torch.zeros(V, C))
        self.rms1 = torch.nn.Parameter(torch.ones(L, C))
        self.rms2 = torch.nn.Parameter(torch.ones(L, C))
        self.rmsf = torch.nn.Parameter(torch.ones(C))
        self.blocks = torch.nn.ModuleList()
        for _ in range(L):
            b = torch.nn.Module()
            b.wq, b.wk, b.wv, b.wo = linear(C, C), linear(C, KVC), linear(C, KVC), linear(C, C)
            b.w1, b.w3, b.w2 = linear(C, H), linear(C, H), linear(H, C)
            if r.quant_attention:
                b.qk = xt.QuantMatmul(recipe=r, sr_stream=sr_stream)
                b.pv = xt.QuantMatmul(recipe=r, sr_stream=sr_stream)
            self.blocks.append(b)
        self.lm_head = linear(C, V, r.quant_lm_head)
        ref = Llama(V, C, L, NH, NKV, H, T)  # RoPE tables and helpers
        self.register_buffer("cos", ref.cos, persistent=False)
        self.register_buffer("sin", ref.sin, persistent=False)
        self.rmsnorm, self._rope = Llama.rmsnorm, Llama.rope

    def load_flat(self, flat):
        """The flat float32 parameters in experiments/trainer/model.h's layout."""
        from llama_torch import PARAM_NAMES, param_shapes
        shapes = param_shapes(self.V, self.C, self.L, self.NH, self.NKV, self.H, self.T)
        off = 0
        with torch.no_grad():
            for name in PARAM_NAMES:
                n = math.prod(shapes[name])
                t = flat[off:off + n].view(shapes[name])
                off += n
                if name in ("wq", "wk", "wv", "wo", "w1", "w3", "w2"):
                    for l, b in enumerate(self.blocks):
                        getattr(b, name).weight.copy_(t[l])
                elif name == "lm_head":
                    self.lm_head.weight.copy_(t)
                else:
                    getattr(self, name).copy_(t)
        assert off == flat.numel()

    def forward(self, idx, targets):
        B, T = idx.shape
        NH, NKV, hs = self.NH, self.NKV, self.hs
        x = self.wte[idx]
        mask = torch.ones(T, T, dtype=torch.bool, device=idx.device).triu(1)
        for l, b in enumerate(self.blocks):
            h = self.rmsnorm(x, self.rms1[l])
            q = self._rope(self, b.wq(h).view(B, T, NH, hs)).transpose(1, 2)
            k = self._rope(self, b.wk(h).view(B, T, NKV, hs)).transpose(1, 2)
            v = b.wv(h).view(B, T, NKV, hs).transpose(1, 2)
            k = k.repeat_interleave(NH // NKV, dim=1)
            v = v.repeat_interleave(NH // NKV, dim=1)
            if hasattr(b, "qk"):
                att = b.qk(q.contiguous(), k.contiguous()) / math.sqrt(hs)
            else:
                att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)
            att = att.masked_fill(mask, float("-inf")).softmax(-1)
            y = b.pv(att, v.transpose(-1, -2)) if hasattr(b, "pv") else att @ v
            y = y.transpose(1, 2).reshape(B, T, self.C)
            x = x + b.wo(y)
            h = self.rmsnorm(x, self.rms2[l])
            x = x + b.w2(F.silu(b.w1(h)) * b.w3(h))
        logits = self.lm_head(self.rmsnorm(x, self.rmsf))
        return F.cross_entropy(logits.reshape(-1, self.V), targets.reshape(-1))

    def param_groups(self, weight_decay):
        """AdamW groups as the trainer's: decay on the matrices and the embedding."""
        no_decay = [self.rms1, self.rms2, self.rmsf]
        ids = {id(p) for p in no_decay}
        decay = [p for p in self.parameters() if id(p) not in ids]
        return [{"params": decay, "weight_decay": weight_decay},
                {"params": no_decay, "weight_decay": 0.0}]


def read_export(path):
    raw = open(path, "rb").read()
    hdr = struct.unpack_from("<16i", raw, 0)
    assert hdr[0] == 0x46455258 and hdr[1] == 1, "not an export_ref file"
    sizes = hdr[2:9]
    B, steps, warmup = hdr[9], hdr[10], hdr[11]
    hp = struct.unpack_from("<8f", raw, 64)
    V, C, L, NH, NKV, H, T = sizes
    from llama_torch import param_shapes
    P = sum(math.prod(s) for s in param_shapes(*sizes).values())
    off = 96
    params = torch.from_numpy(np.frombuffer(raw, "<f4", P, off).copy())
    off += 4 * P
    n = steps * B * T
    inputs = torch.from_numpy(np.frombuffer(raw, "<i4", n, off).astype(np.int64)).view(steps, B, T)
    off += 4 * n
    targets = torch.from_numpy(np.frombuffer(raw, "<i4", n, off).astype(np.int64)).view(steps, B, T)
    off += 4 * n
    loss0 = float(np.frombuffer(raw, "<f4", 1, off)[0])
    return sizes, params, inputs, targets, loss0, hp, warmup


def first_step(model, params, inputs, targets, sr):
    model.load_flat(params)
    model.zero_grad()
    sr.begin_step(0)
    loss = model(inputs[0], targets[0])
    loss.backward()
    norm = math.sqrt(sum(float((p.grad.double() ** 2).sum()) for p in model.parameters()))
    return loss.item(), norm


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--recipe", default="e8m3")
    ap.add_argument("--steps", type=int, default=30, help="AdamW steps to train after the check")
    ap.add_argument("--tol", type=float, default=1e-6,
                    help="relative tolerance of the loss (E8M3 moves it by ~5e-5 here)")
    ap.add_argument("--grad-tol", type=float, default=1e-5,
                    help="relative tolerance of the gradient norm")
    ap.add_argument("--export-ref", default=os.path.join(ROOT, "bazel-bin/experiments/trainer/export_ref"))
    ap.add_argument("--c-first-step",
                    default=os.path.join(ROOT, "bazel-bin/lib/python/examples/c_first_step"))
    ap.add_argument("--reference-dir", default=os.path.join(ROOT, "experiments/reference"))
    args = ap.parse_args()
    sys.path.insert(0, args.reference_dir)
    torch.manual_seed(0)
    recipe = Recipe.load(args.recipe)
    for exe in (args.export_ref, args.c_first_step):
        if not os.path.exists(exe):
            sys.exit(f"llama_e8m3: {exe} not found; build it: bazel build -c opt "
                     "//experiments/trainer:export_ref //lib/python/examples:c_first_step")

    with tempfile.TemporaryDirectory() as tmp:
        ref = os.path.join(tmp, "ref.bin")
        subprocess.run([args.export_ref, ref], check=True, stdout=subprocess.DEVNULL)
        sizes, params, inputs, targets, loss0_fp32, hp, warmup = read_export(ref)
        out = subprocess.run([args.c_first_step, ref, recipe.source], check=True,
                             capture_output=True, text=True).stdout.split()
        c_loss, c_norm = float(out[1]), float(out[3])
    lr, b1, b2, eps, wd, clip, min_frac, _ = hp
    failures = []

    def compare(what, ours, theirs, tol):
        rel = abs(ours - theirs) / abs(theirs)
        ok = rel <= tol
        print(f"  {what:<34} torch {ours:.7f}  C {theirs:.7f}  rel {rel:.1e}  "
              f"{'ok' if ok else 'FAIL'} (tol {tol:g})")
        if not ok:
            failures.append(what)

    print(f"llama_e8m3: model V,C,L,NH,NKV,H,T = {sizes}, recipe {recipe.name} ({recipe.source})")
    sr = xt.SRStream()
    fp32_loss, _ = first_step(QuantLlama(*sizes, "fp32", sr), params, inputs, targets, sr)
    compare("first-step loss, fp32 recipe", fp32_loss, loss0_fp32, args.tol)
    model = QuantLlama(*sizes, recipe, sr)
    loss, norm = first_step(model, params, inputs, targets, sr)
    compare(f"first-step loss, {recipe.name}", loss, c_loss, args.tol)
    # looser: a gradient element near a rounding boundary may round the other
    # way after a differently ordered float32 sum
    compare(f"first-step gradient norm, {recipe.name}", norm, c_norm, args.grad_tol)

    # training: the exported batches in turn, AdamW with warmup + cosine and clipping
    from llama_torch import lr_schedule
    model.load_flat(params)
    opt = torch.optim.AdamW(model.param_groups(wd), lr=lr, betas=(b1, b2), eps=eps)
    for step in range(args.steps):
        for g in opt.param_groups:
            g["lr"] = lr_schedule(step, args.steps, min(warmup, args.steps), lr, min_frac)
        sr.begin_step(step)
        opt.zero_grad()
        i = step % inputs.shape[0]
        loss = model(inputs[i], targets[i])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        if step % 5 == 0 or step == args.steps - 1:
            print(f"  step {step + 1:3d}  loss {loss.item():.4f}")
    if failures:
        print("llama_e8m3: FAILED: " + ", ".join(failures))
        sys.exit(1)
    print("llama_e8m3: PASSED (first step equals the C trainer's)")


if __name__ == "__main__":
    main()
