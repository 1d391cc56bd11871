"""An independent PyTorch implementation of the trainer's model (experiments/trainer/model.c):
the reference that the C forward, backward and AdamW are tested against
(tests/experiments/torch_ref_test.py) and timed against (experiments/studies/bench.sh).

LLaMA: token embedding; L blocks of [RMSNorm -> causal multi-head attention with
rotary embeddings (theta 10000, interleaved pairs (2i, 2i+1) of each head, as in
Meta's reference code) and grouped-query heads -> residual; RMSNorm -> SwiGLU
MLP -> residual]; final RMSNorm (eps 1e-5); untied LM head; cross-entropy.
Parameters in the order and layout of experiments/trainer/model.h (per-layer tensors
stacked over layers), so that a flat float32 array maps onto them.
"""
import math

import torch
import torch.nn.functional as F

PARAM_NAMES = ["wte", "rms1", "wq", "wk", "wv", "wo", "rms2", "w1", "w3", "w2", "rmsf", "lm_head"]

SIZES = {  # V, C, L, NH, NKV, H, T  (as model_named_size in model.c)
    "test": (256, 16, 2, 2, 1, 32, 16),
    "tiny": (256, 128, 6, 4, 4, 384, 128),
    "small": (256, 384, 10, 6, 6, 1152, 256),
    "120m": (256, 768, 12, 12, 12, 2048, 1024),
    "350m": (256, 1024, 24, 16, 16, 2816, 1024),
    "1b": (256, 2048, 22, 32, 4, 5632, 1024),
}


def param_shapes(V, C, L, NH, NKV, H, T):
    hs = C // NH
    KVC = NKV * hs
    return {
        "wte": (V, C), "rms1": (L, C), "wq": (L, C, C), "wk": (L, KVC, C), "wv": (L, KVC, C),
        "wo": (L, C, C), "rms2": (L, C), "w1": (L, H, C), "w3": (L, H, C), "w2": (L, C, H),
        "rmsf": (C,), "lm_head": (V, C),
    }


class Llama(torch.nn.Module):
    def __init__(self, V, C, L, NH, NKV, H, T):
        super().__init__()
        self.V, self.C, self.L, self.NH, self.NKV, self.H, self.T = V, C, L, NH, NKV, H, T
        self.hs = C // NH
        self.sdpa = False
        for name, shape in param_shapes(V, C, L, NH, NKV, H, T).items():
            self.register_parameter(name, torch.nn.Parameter(torch.zeros(shape)))
        # rotation angles computed in double, stored in float32, like rope_tables()
        i = torch.arange(self.hs // 2, dtype=torch.float64)
        freq = 10000.0 ** (-2.0 * i / self.hs)
        ang = torch.arange(T, dtype=torch.float64)[:, None] * freq[None, :]
        self.register_buffer("cos", torch.cos(ang).float(), persistent=False)
        self.register_buffer("sin", torch.sin(ang).float(), persistent=False)

    def load_flat(self, flat):
        off = 0
        with torch.no_grad():
            for name in PARAM_NAMES:
                p = getattr(self, name)
                n = p.numel()
                p.copy_(flat[off:off + n].view_as(p))
                off += n
        assert off == flat.numel(), (off, flat.numel())

    def init_weights(self, seed):
        g = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for name in PARAM_NAMES:
                p = getattr(self, name)
                if name.startswith("rms"):
                    p.fill_(1.0)
                else:
                    std = 0.02 / math.sqrt(2 * self.L) if name in ("wo", "w2") else 0.02
                    p.normal_(0.0, std, generator=g)

    @staticmethod
    def rmsnorm(x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * w

    def rope(self, x):  # x: (B, T, nh, hs)
        T = x.shape[1]
        x0, x1 = x[..., 0::2], x[..., 1::2]
        c, s = self.cos[:T, None, :], self.sin[:T, None, :]
        return torch.stack((x0 * c - x1 * s, x0 * s + x1 * c), dim=-1).flatten(-2)

    def forward(self, idx, targets=None):
        B, T = idx.shape
        NH, NKV, hs = self.NH, self.NKV, self.hs
        x = self.wte[idx]
        mask = torch.ones(T, T, dtype=torch.bool).triu(1)
        for l in range(self.L):
            h = self.rmsnorm(x, self.rms1[l])
            q = self.rope(F.linear(h, self.wq[l]).view(B, T, NH, hs)).transpose(1, 2)
            k = self.rope(F.linear(h, self.wk[l]).view(B, T, NKV, hs)).transpose(1, 2)
            v = F.linear(h, self.wv[l]).view(B, T, NKV, hs).transpose(1, 2)
            k = k.repeat_interleave(NH // NKV, dim=1)
            v = v.repeat_interleave(NH // NKV, dim=1)
            if self.sdpa:  # fused attention (the GPU speed reference)
                y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            else:
                att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)
                att = att.masked_fill(mask.to(att.device), float("-inf")).softmax(-1)
                y = att @ v
            y = y.transpose(1, 2).reshape(B, T, self.C)
            x = x + F.linear(y, self.wo[l])
            h = self.rmsnorm(x, self.rms2[l])
            x = x + F.linear(F.silu(F.linear(h, self.w1[l])) * F.linear(h, self.w3[l]), self.w2[l])
        logits = F.linear(self.rmsnorm(x, self.rmsf), self.lm_head)
        if targets is None:
            return logits, None
        return logits, F.cross_entropy(logits.reshape(-1, self.V), targets.reshape(-1))

    def param_groups(self, weight_decay):
        decay = [getattr(self, n) for n in PARAM_NAMES if not n.startswith("rms")]
        no_decay = [getattr(self, n) for n in PARAM_NAMES if n.startswith("rms")]
        return [{"params": decay, "weight_decay": weight_decay},
                {"params": no_decay, "weight_decay": 0.0}]


def lr_schedule(step, steps, warmup, lr, min_frac):
    """Warmup then cosine to lr * min_frac (as lr_schedule() in optim.c)."""
    if step < warmup:
        return lr * (step + 1) / warmup
    min_lr = lr * min_frac
    if steps <= warmup:
        return lr
    progress = min(1.0, (step - warmup) / (steps - warmup))
    return min_lr + 0.5 * (lr - min_lr) * (1.0 + math.cos(math.pi * progress))
