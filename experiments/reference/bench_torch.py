"""Times the PyTorch reference model (llama_torch.py) training a named size with
AdamW on byte-level batches, as the C trainer does; prints tokens/s.

usage: bench_torch.py SIZE BATCH STEPS THREADS DATA_FILE
"""
import sys
import time

import numpy as np
import torch

from llama_torch import SIZES, Llama

size, B, steps, threads, data = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
torch.set_num_threads(threads)
V, C, L, NH, NKV, H, T = SIZES[size]
model = Llama(V, C, L, NH, NKV, H, T)
model.init_weights(1337)
opt = torch.optim.AdamW(model.param_groups(0.1), lr=1e-3, betas=(0.9, 0.95), eps=1e-8)
tokens = np.fromfile(data, dtype=np.uint8)
rng = np.random.default_rng(1337)
times = []
for step in range(steps):
    starts = rng.integers(0, len(tokens) - T - 1, B)
    batch = torch.from_numpy(np.stack([tokens[s:s + T + 1] for s in starts]).astype(np.int64))
    t0 = time.perf_counter()
    opt.zero_grad(set_to_none=True)
    _, loss = model(batch[:, :-1], batch[:, 1:])
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    times.append(time.perf_counter() - t0)
warm = sorted(times[3:]) if len(times) > 4 else sorted(times)
median = warm[len(warm) // 2]
print(f"torch {torch.__version__} {size} B={B} T={T} threads={threads}: median step {median * 1e3:.1f} ms, "
      f"{B * T / median:.0f} tokens/s (loss {loss.item():.4f})")
