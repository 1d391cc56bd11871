"""An independent PyTorch implementation of the trainer's model (experiments/trainer/model.c):
the reference that the C forward, backward and AdamW are tested against
(tests/experiments/torch_ref_test.py) and timed against (experiments/studies/bench.sh).

LLaMA: token embedding; L blocks of [RMSNorm -> causal multi-head attention with
rotary embeddings (theta 10000, interleaved pairs (2i, 2i+1) of each head, as in
Meta's reference code) and grouped-query heads -> residual; RMSNorm -> SwiGLU
MLP -> residual]; final RMSNorm (eps 1e-5); untied LM head; cross-entropy.
Parameters in the order and layout of experiments/trainer/model.h (per-layer tensors
stacked over layers), so that a flat float32 array maps onto them.

autocast_bf16 = True: the model as torch.autocast(dtype=torch.bfloat16) runs it on a
GPU with float32 parameters, the independent reference of the trainer's
`activations = bf16` (experiments/README.md, "bf16 activations", lists what is bf16).
Where torch 1.13's CPU autocast differs from its CUDA autocast, the model says what
CUDA's does explicitly, so that it runs the same on a CPU:
  - every product (the linear layers, Q K^T, P V) through Bf16Matmul: the CPU's bf16
    matmul sums in bf16 in some layouts (up to 15% off at K = 4096), cuBLAS in float32;
  - softmax in float32 (CUDA autocast's fp32 list; the CPU's runs it in bf16), and
    the cross-entropy on float32 logits (both lists);
  - silu of a bf16 tensor computed in float32 and rounded once (the CPU's bf16 silu
    rounds inside), and the scores' division by sqrt(hs) in float32 (the CPU rounds
    the divisor to bf16);
and two choices that autocast leaves to the model's code are LLaMA's: RoPE in float32,
rounded once to q's dtype (Meta's apply_rotary_emb: xq.float() ... type_as(xq)), and
the key/value heads repeated by expand (HF's repeat_kv: the group's gradients summed in
float32, rounded once).  Running it under torch.autocast("cpu", dtype=torch.bfloat16)
changes no bit (tests/experiments/torch_ref_bf16_test.py checks it).  With
autocast_bf16 False (the float32 reference, and the GPU speed reference that
bench_torch_gpu.py runs under CUDA's own autocast) RoPE, SwiGLU and the heads' repeat
keep their plain forms.
"""
import math

import torch
import torch.nn.functional as F

PARAM_NAMES = ["wte", "rms1", "wq", "wk", "wv", "wo", "rms2", "w1", "w3", "w2", "rmsf", "lm_head"]

class Bf16Matmul(torch.autograd.Function):
    """a @ b as a bf16 GEMM under CUDA autocast: both inputs rounded to bf16, the
    products summed in float32, the result rounded to bf16; backward the same GEMMs
    on the bf16 gradient: da = bf16(g b^T), db = bf16(a^T g) (autograd casts them to
    the inputs' dtypes, exactly: a float32 input gets a bf16-valued gradient).  A 2-D b
    (a weight) takes one GEMM over every row of a, as F.linear's backward does, not a
    bf16 result per batch element summed after."""

    @staticmethod
    def forward(ctx, a, b):
        with torch.autocast("cpu", enabled=False):
            a16, b16 = a.bfloat16().float(), b.bfloat16().float()
            ctx.save_for_backward(a16, b16)
            return (a16 @ b16).bfloat16()

    @staticmethod
    def backward(ctx, g):
        a16, b16 = ctx.saved_tensors
        with torch.autocast("cpu", enabled=False):
            g = g.bfloat16().float()
            da = (g @ b16.transpose(-2, -1)).bfloat16()
            if b16.dim() == 2:
                K, N = b16.shape
                db = a16.reshape(-1, K).t() @ g.reshape(-1, N)
            else:
                db = a16.transpose(-2, -1) @ g
            return da, db.bfloat16()


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
        self.autocast_bf16 = False
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

    def linear(self, x, w):
        return Bf16Matmul.apply(x, w.t()) if self.autocast_bf16 else F.linear(x, w)

    def matmul(self, a, b):
        return Bf16Matmul.apply(a, b) if self.autocast_bf16 else a @ b

    def rope(self, x, in_float32=False):  # x: (B, T, nh, hs)
        """in_float32 (autocast_bf16): rotated in float32, the result in x's dtype."""
        T = x.shape[1]
        xf = x.float() if in_float32 else x
        x0, x1 = xf[..., 0::2], xf[..., 1::2]
        c, s = self.cos[:T, None, :], self.sin[:T, None, :]
        out = torch.stack((x0 * c - x1 * s, x0 * s + x1 * c), dim=-1).flatten(-2)
        return out.type_as(x) if in_float32 else out

    def repeat_kv(self, x):  # (B, NKV, T, hs) -> (B, NH, T, hs), each head g times in order
        g = self.NH // self.NKV
        if not self.autocast_bf16:
            return x.repeat_interleave(g, dim=1)
        B, NKV, T, hs = x.shape
        return x[:, :, None].expand(B, NKV, g, T, hs).reshape(B, NKV * g, T, hs)

    def swiglu(self, h1, h3):  # autocast_bf16: silu in float32, rounded once to h1's dtype
        s = F.silu(h1.float()).to(h1.dtype) if self.autocast_bf16 else F.silu(h1)
        return s * h3

    def forward(self, idx, targets=None):
        B, T = idx.shape
        NH, NKV, hs = self.NH, self.NKV, self.hs
        x = self.wte[idx]
        mask = torch.ones(T, T, dtype=torch.bool).triu(1)
        for l in range(self.L):
            h = self.rmsnorm(x, self.rms1[l])
            q = self.rope(self.linear(h, self.wq[l]).view(B, T, NH, hs), self.autocast_bf16)
            k = self.rope(self.linear(h, self.wk[l]).view(B, T, NKV, hs), self.autocast_bf16)
            q, k = q.transpose(1, 2), k.transpose(1, 2)
            v = self.linear(h, self.wv[l]).view(B, T, NKV, hs).transpose(1, 2)
            k, v = self.repeat_kv(k), self.repeat_kv(v)
            if self.sdpa:  # fused attention (the GPU speed reference)
                y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            else:
                att = self.matmul(q, k.transpose(-2, -1))
                att = (att.float() / math.sqrt(hs)).to(att.dtype)
                att = att.masked_fill(mask.to(att.device), float("-inf")).float().softmax(-1)
                y = self.matmul(att, v)
            y = y.transpose(1, 2).reshape(B, T, self.C)
            x = x + self.linear(y, self.wo[l])
            h = self.rmsnorm(x, self.rms2[l])
            x = x + self.linear(self.swiglu(self.linear(h, self.w1[l]), self.linear(h, self.w3[l])),
                                self.w2[l])
        logits = self.linear(self.rmsnorm(x, self.rmsf), self.lm_head)
        if targets is None:
            return logits, None
        return logits, F.cross_entropy(logits.float().reshape(-1, self.V), targets.reshape(-1))

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
