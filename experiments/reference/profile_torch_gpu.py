"""Where PyTorch compiled's step goes, beside the GPU trainer's own profile
(experiments/gpu/profile_gpu.sh): the model of llama_torch.py trained as
bench_torch_gpu.py trains it (bf16 autocast, scaled_dot_product_attention,
fused AdamW, torch.compile), its CUDA kernels over a few steps summed by
torch.profiler and put into the groups profile_summary.py uses for exmy's
(GEMMs, attention, the rest).  Then causal attention alone at the model's
shape: PyTorch's sdpa (whichever backend it picks, named) forward and
forward + backward, in bf16, timed with CUDA events, so that exmy's fused
attention (flash_attention_gpu_test's speed lines) has its reference.

usage: profile_torch_gpu.py [--size 120m] [--batch 32] [--steps 3] [--out FILE]
"""
import collections

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

from torch_gpu_step import practitioner_step, reference_args

a, (V, C, L, NH, NKV, H, T) = reference_args(steps=3)
B = a.batch
hs = C // NH
lines = []


def group_of(name):
    """The kernel's group, by the names cuBLAS, the attention backends and
    Inductor give their kernels."""
    n = name.lower()
    if any(s in n for s in ("flash", "fmha", "attention", "cudnn")):
        return "attention"
    if any(s in n for s in ("gemm", "nvjet", "xmma", "cutlass", "sm90_", "splitk")):
        return "gemm"
    if "adam" in n or "multi_tensor" in n:
        return "optimizer"
    return "element-wise and reductions"


step = practitioner_step(a.size, B, compiled=True)
for _ in range(8):  # compile and warm up
    step()
torch.cuda.synchronize()
with profile(activities=[ProfilerActivity.CUDA]) as prof:
    for _ in range(a.steps):
        step()
    torch.cuda.synchronize()
per_kernel = collections.Counter()
calls = collections.Counter()
for ev in prof.events():
    if ev.device_type == torch.autograd.DeviceType.CUDA:
        per_kernel[ev.name] += ev.device_time_total / 1e3 / a.steps  # ms a step
        calls[ev.name] += 1
groups = collections.Counter()
for name, ms in per_kernel.items():
    groups[group_of(name)] += ms
total = sum(groups.values())
lines.append(f"torch {torch.__version__} compiled, {a.size}, batch {B} x {T}: "
             f"{total:.2f} ms of kernels a step ({a.steps} steps profiled)")
for g, ms in groups.most_common():
    lines.append(f"  {g:28s} {ms:8.2f} ms  {100 * ms / total:5.1f}%")
lines.append("  the kernels above 0.2 ms a step:")
for name, ms in per_kernel.most_common():
    if ms < 0.2:
        break
    lines.append(f"    {ms:7.2f} ms  {calls[name] // a.steps:4d} calls  [{group_of(name)}]  {name[:110]}")
del step
torch.cuda.empty_cache()

# causal attention alone at the model's shape, laid out as the model calls it:
# (B, T, NH, hs) storage seen as (B, NH, T, hs), the layout exmy's kernel reads
q, k, v = (torch.randn(B, T, NH, hs, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
           .requires_grad_() for _ in range(3))
dout = torch.randn(B, T, NH, hs, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
flops = 4.0 * B * NH * T * T * hs / 2  # causal forward, as flash_attention_gpu_test counts
with profile(activities=[ProfilerActivity.CUDA]) as prof:
    o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    o.backward(dout)
    torch.cuda.synchronize()
backend = sorted({ev.name[:90] for ev in prof.events()
                  if ev.device_type == torch.autograd.DeviceType.CUDA and group_of(ev.name) == "attention"})
e0, e1, e2 = (torch.cuda.Event(enable_timing=True) for _ in range(3))
reps = 20
for _ in range(3):
    F.scaled_dot_product_attention(q, k, v, is_causal=True).backward(dout)
torch.cuda.synchronize()
e0.record()
for _ in range(reps):
    o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
e1.record()
for _ in range(reps):
    F.scaled_dot_product_attention(q, k, v, is_causal=True).backward(dout)
e2.record()
torch.cuda.synchronize()
fwd_ms = e0.elapsed_time(e1) / reps
both_ms = e1.elapsed_time(e2) / reps
bwd_ms = both_ms - fwd_ms
lines.append(f"sdpa causal B {B} T {T} NH {NH} hs {hs} bf16: forward {fwd_ms:.3f} ms = "
             f"{flops / fwd_ms / 1e9:.0f} TFLOP/s, backward {bwd_ms:.3f} ms = "
             f"{2.5 * flops / bwd_ms / 1e9:.0f} TFLOP/s (forward + backward {both_ms:.3f} ms less "
             f"the forward); a step's {L} layers: {L * both_ms:.2f} ms")
lines.append("sdpa kernels: " + "; ".join(backend))
with open(a.out, "w") as f:
    f.write("\n".join(lines) + "\n")
print("\n".join(lines))
