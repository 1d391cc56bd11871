"""One training step of the model of llama_torch.py the way a practitioner
would run it on an H100 (bf16 autocast, scaled_dot_product_attention, fused
AdamW, gradient clipping), eager or torch.compile'd: the GPU trainer's speed
reference (bench_torch_gpu.py) and the step whose kernels
profile_torch_gpu.py takes apart."""
import argparse

import torch

from llama_torch import SIZES, Llama


def reference_args(steps):
    """The scripts' options (--size, --batch, --steps with this default,
    --out) and the size's shape (V, C, L, NH, NKV, H, T)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", default="120m")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--steps", type=int, default=steps)
    ap.add_argument("--out", default="/dev/stdout")
    a = ap.parse_args()
    return a, SIZES[a.size]


def practitioner_step(size, batch, compiled):
    """A new model of `size` (weights of seed 1337, tokens of seed 0) and a
    function that trains it one step on the same batch and returns the loss."""
    V, C, L, NH, NKV, H, T = SIZES[size]
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.manual_seed(0)
    model = Llama(V, C, L, NH, NKV, H, T)
    model.init_weights(1337)
    model.sdpa = True
    model = model.cuda()
    opt = torch.optim.AdamW(model.param_groups(0.1), lr=3e-4, betas=(0.9, 0.95), eps=1e-8,
                            fused=True)
    fwd = torch.compile(model) if compiled else model
    x = torch.randint(0, V, (batch, T + 1), device="cuda")

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            _, loss = fwd(x[:, :-1], x[:, 1:])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss

    return step
