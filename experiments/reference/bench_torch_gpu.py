"""The GPU speed reference of the GPU trainer: the model of llama_torch.py trained in
PyTorch the way a practitioner would on an H100 (bf16 autocast,
scaled_dot_product_attention, fused AdamW, gradient clipping), eager and
torch.compile'd.  Writes one line per mode: MODE MS_PER_STEP TOKENS_PER_S PEAK_GIB
IN_USE_GIB: the caching allocator's peak allocation, and the GPU's memory in use
after the steps (total - free, cudaMemGetInfo: the CUDA context, libraries and
the allocator's reserve included), the measure the GPU trainer reports for itself.

usage: bench_torch_gpu.py [--size 120m] [--batch 32] [--steps 20] [--out FILE]
"""
import time

import torch

from torch_gpu_step import practitioner_step, reference_args

a, (V, C, L, NH, NKV, H, T) = reference_args(steps=20)
B = a.batch
lines = []
for mode in ("eager", "compiled"):
    torch.cuda.reset_peak_memory_stats()
    step = practitioner_step(a.size, B, mode == "compiled")
    times = []
    for _ in range(a.steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        loss = step()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    warm = sorted(times[5:])
    ms = warm[len(warm) // 2] * 1e3
    peak = torch.cuda.max_memory_allocated() / 2**30
    free, total = torch.cuda.mem_get_info()
    in_use = (total - free) / 2**30
    print(f"torch {torch.__version__} {mode}: {ms:.1f} ms/step, {B * T / ms * 1e3:.0f} tokens/s, "
          f"peak {peak:.1f} GiB, in use {in_use:.1f} GiB, loss {loss.item():.4f}", flush=True)
    lines.append(f"{mode} {ms:.2f} {B * T / ms * 1e3:.0f} {peak:.2f} {in_use:.2f}")
    del step, loss  # the model, its optimizer and its gradients go with them
    torch.cuda.empty_cache()
with open(a.out, "w") as f:
    f.write("\n".join(lines) + "\n")
