"""exmy for PyTorch training: fake quantization with a straight-through
gradient, and linear layers / matrix products whose GEMM operands are rounded
by one of the trainer's precision recipes (exmy.recipe), as the C trainer's
tq_gemm does (experiments/trainer/qgemm.c, experiments/trainer/model.c).

    import exmy.torch as xt
    layer = xt.QuantLinear(512, 512, recipe="e8m3")     # experiments/configs/e8m3.cfg
    y = xt.fake_quant(x, "e4m3", scaling="tensor")      # d y / d x = 1 (STE)

What QuantLinear computes (the trainer's linear layer, Y = X W^T):
  forward  Y  = Q_a(X) Q_w(W)^T
  backward dX = Q_g(dY) Q_w(W),   dW = Q_g(dY)^T Q_a(X)
with Q_r the recipe's operand of role r (w: weights, a: activations, g:
output gradients) and float32 products (torch.matmul; keep TF32 off, the
default, for pedantic float32 accumulation), or, where the recipe names an
accumulation model (`accumulate`), each dot product accumulated by it
(exmy.qgemm_accum, as the trainer's exmy_qgemm_accum).  An operand quantized
in blocks along K of the model's promotion interval (exmy_accum_block_scaled:
fp8-deepseek's 1 x 128 and 128 x 128 blocks under hopper-split) is handed
unrounded, with its recipe, to exmy_qgemm_accum, which rounds it as the
trainer does and accumulates its codes with the blocks' scales applied at
each promotion, a partial last block included: the trainer's sums, bit for
bit.  Those GEMMs run on the CPU (CUDA tensors are copied there and back;
the GPU's exmy_cuda_qgemm_accum gives the same bits), and capture receives
no rounded copy of such operands.  Element-wise recipes (no
scaling, per-tensor current or delayed scaling) round X and W once in the
forward and dY once in the backward and reuse them, as Transformer Engine
and the trainer do; MX, GROUP and NVFP4 recipes round every operand at
each GEMM with its blocks along that GEMM's reduction dimension (X and W
along in_features in the forward, dY and W^T along out_features for dX,
dY^T and X^T along the rows for dW), the weights' blocks weight_block_rows
tall, and NVFP4's random Hadamard transform (wgrad_hadamard) on both inputs
of the dW GEMM.  Delayed scaling keeps one exmy.DelayedState per operand use
(X, W, dY), with the recipe's amax_history.

Stochastic rounding: operand of role r uses seed (seed + 1 + index of r in
w, a, g), as experiments/trainer/recipe.c, and the offset is taken from an SRStream,
a running element counter shared by the layers (default: the module-wide
default_sr_stream): each stochastically rounded operand takes the next
numel() elements of the stream, in the trainer's order within a layer
(forward: X then W; backward: dY, then for MX, GROUP and NVFP4 the operands
of the dX GEMM, dY then W^T, then of the dW GEMM, dY^T then X^T).  The trainer sets the
counter to step << 36 at each optimizer step: call sr_stream.begin_step(step)
to do the same.  Across layers the order is the order in which PyTorch runs
them (the backward's order is autograd's), so a whole model draws the
trainer's random bits only where that order is the trainer's.
"""
import torch

from . import _core
from .recipe import DEFAULT_SEED, Recipe

__all__ = ["fake_quant", "QuantLinear", "QuantMatmul", "quant_linear", "quant_matmul", "SRStream",
           "default_sr_stream"]


# ------------------------------------------------------------- fake quant

class _FakeQuant(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, fmt, kwargs):
        return _core.quantize_scaled(x.detach(), fmt, **kwargs)

    @staticmethod
    def backward(ctx, grad):
        return grad, None, None


def fake_quant(x, fmt, rounding="rne", saturate=False, flush_subnormals=False, seed=0, offset=0,
               sr_bits=0, scaling="none", margin=0, pow2=False, state=None):
    """exmy.quantize_scaled(x, fmt, scaling, ...) in the autograd graph, with
    the straight-through estimator: the gradient passes unchanged (d y / d x
    = identity, also where x was clipped or flushed).  x: a contiguous
    float32 tensor (CPU or CUDA).  scaling "none" (default) is
    exmy.quantize; see exmy.quantize_scaled for the others."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"exmy.torch.fake_quant: x must be a torch.Tensor, got {type(x).__name__}")
    kwargs = dict(scaling=scaling, rounding=rounding, saturate=saturate,
                  flush_subnormals=flush_subnormals, seed=seed, offset=offset, sr_bits=sr_bits,
                  margin=margin, pow2=pow2, state=state)
    return _FakeQuant.apply(x, fmt, kwargs)


# ------------------------------------------------------- the sr stream

class SRStream:
    """The running element counter from which stochastically rounded GEMM
    operands take their offsets (the trainer's tq_sr_counter)."""

    def __init__(self, offset=0):
        self.offset = _core._u64(offset, "offset")

    def take(self, n):
        """The offset for an operand of n elements; advances the counter."""
        o = self.offset
        self.offset = (o + n) % (1 << 64)
        return o

    def begin_step(self, step):
        """The trainer's convention: the counter is step << 36 at each step."""
        self.offset = (int(step) << 36) % (1 << 64)

    def __repr__(self):
        return f"exmy.torch.SRStream(offset={self.offset})"


default_sr_stream = SRStream()


# ------------------------------------------------------ the quantized GEMM

class _Plan:
    """The operands of one GEMM site: x, w, dy operands (recipe Operands),
    their delayed states, the sr stream, and an optional capture dict.
    linear: a linear layer (whose weight-gradient GEMM takes nvfp4's Hadamard
    transform; the attention products do not)."""

    def __init__(self, x_op, w_op, dy_op, states, sr, capture, linear, accum=None):
        self.ops = {"x": x_op, "w": w_op, "dy": dy_op}
        self.states, self.sr, self.capture, self.linear = states, sr, capture, linear
        # the recipe's accumulation model, where the trainer applies it: a
        # site with a quantized operand (recipe_make_sites)
        quantized = any(op.enabled for op in self.ops.values())
        self.accum = accum if quantized and accum is not None and str(accum) != "fp32" else None
        # the operands that the model reads as codes with their block scales
        # (exmy_accum_block_scaled): exmy_qgemm_accum rounds them itself.
        # Delayed scaling, per tensor, is never such an operand (and its
        # state stays with Operand.quantize).
        self.codes = {use: self.accum is not None and op.enabled and op.scaling != "delayed" and
                      _core._accum_block_scaled(op.gemm_quant(), self.accum)
                      for use, op in self.ops.items()}

    def mm(self, a, b, a_use, b_use, ra=None, rb=None):
        """a @ b (..., M, K) x (..., K, N), each dot product accumulated as the
        recipe's model says (float32 matmul without one), the subnormals of
        unscaled operands counted at their format's emin (as
        exmy_accum_operand_emin).  ra, rb: the recipes (exmy_operand_quant)
        with which exmy_qgemm_accum rounds a and b, given unrounded (see q);
        the sr offset of batch slice i is the recipe's + i times the slice's
        size, its position in the whole tensor.  With ra or rb the GEMM runs
        on the CPU (exmy_qgemm_accum; the GPU's exmy_cuda_qgemm_accum gives
        the same bits), CUDA tensors copied there and back."""
        if self.accum is None:
            return torch.matmul(a, b)
        fa, fb = (_unscaled_format(self.ops[u]) for u in (a_use, b_use))
        shape = torch.broadcast_shapes(a.shape[:-2], b.shape[:-2])
        a = a.expand(*shape, *a.shape[-2:]).reshape(-1, *a.shape[-2:])
        b = b.expand(*shape, *b.shape[-2:]).reshape(-1, *b.shape[-2:])
        device = a.device
        host = device.type == "cuda" and (ra is not None or rb is not None)
        if host:
            a, b = a.cpu(), b.cpu()
        out = [_core._qgemm_accum(a[i].contiguous(), b[i].contiguous(), self.accum, fmt_a=fa,
                                  fmt_b=fb, qa=_at_slice(ra, i, a[i].numel()),
                                  qb=_at_slice(rb, i, b[i].numel()))
               for i in range(a.shape[0])]
        y = torch.stack(out).reshape(*shape, a.shape[-2], b.shape[-1])
        return y.to(device) if host else y

    def q(self, use, t, state_use=None, wgrad=False):
        """(values, recipe): operand `use` ("x", "w", "dy") rounded, sr offset
        from the stream, and None; or, where the model reads it as codes
        (self.codes), t itself and its recipe with that offset, for the GEMM
        to round it (mm).  wgrad: an input of the weight-gradient GEMM."""
        op = self.ops[use]
        if not op.enabled:
            return t, None
        offset = self.sr.take(t.numel()) if op.stochastic else 0
        wgrad = wgrad and self.linear
        if self.codes[use]:
            return t.contiguous(), op.gemm_quant(offset, wgrad)
        state = self.states.get(state_use) if state_use else None
        return op.quantize(t.contiguous(), offset, state, wgrad=wgrad), None

    def keep(self, name, t):
        if self.capture is not None:
            self.capture[name] = t.detach()


def _t(t):
    return t.transpose(-1, -2).contiguous()


def _at_slice(r, i, n):
    """Recipe r (or None) for batch slice i of n elements: its sr offset
    moved on by i n."""
    if r is None or i == 0:
        return r
    r = type(r).from_buffer_copy(r)
    r.round.offset = (r.round.offset + i * n) % (1 << 64)
    return r


def _ct(values_recipe):
    """q's (values, recipe) of a GEMM's right operand rounded along K as its
    transpose: the values transposed back."""
    values, recipe = values_recipe
    return values.transpose(-1, -2), recipe


def _unscaled_format(op):
    return op.format if op.enabled and op.scaling == "none" else None


class _QuantGemm(torch.autograd.Function):
    """y = Q(x) Q(w)^T over the last two dimensions: x (..., M, K), w (N, K)
    or (..., N, K) with x's batch dimensions."""

    @staticmethod
    def forward(ctx, x, w, plan):
        x, w = x.detach().contiguous(), w.detach().contiguous()
        plan.w_dim = w.dim()
        qx, rx = plan.q("x", x, "x")
        qw, rw = plan.q("w", w, "w")
        if rx is None:
            plan.keep("x", qx)
        if rw is None:
            plan.keep("w", qw)
        ctx.plan = plan
        # the backward reads the rounded copies (element-wise recipes) or the
        # inputs themselves (MX: rounded again along the other dimension)
        ex, ew = plan.ops["x"].elementwise, plan.ops["w"].elementwise
        ctx.save_for_backward(None if ex else x, None if ew else w, qx if ex else None,
                              qw if ew else None)
        return plan.mm(qx, qw.transpose(-1, -2), "x", "w", rx, rw)

    @staticmethod
    def backward(ctx, dy):
        plan = ctx.plan
        x, w, qx, qw = ctx.saved_tensors
        dy = dy.contiguous()
        ox, ow, og = plan.ops["x"], plan.ops["w"], plan.ops["dy"]
        # as linear_backward: dY is rounded once (element-wise recipes) before both GEMMs
        qdy = plan.q("dy", dy, "dy")[0] if og.elementwise else None
        if qdy is not None:
            plan.keep("dy", qdy)
        # dX = dY W (reduction over N); MX operands rounded here, in tq_gemm's order
        a, ra = (qdy, None) if qdy is not None else plan.q("dy", dy)
        b, rb = (qw, None) if ow.elementwise else _ct(plan.q("w", _t(w)))
        dx = plan.mm(a, b, "dy", "w", ra, rb)
        # dW = dY^T X (reduction over M)
        a, ra = (qdy.transpose(-1, -2), None) if qdy is not None else \
            plan.q("dy", _t(dy), wgrad=True)
        b, rb = (qx, None) if ox.elementwise else _ct(plan.q("x", _t(x), wgrad=True))
        dw = plan.mm(a, b, "dy", "x", ra, rb)
        if plan.w_dim == 2 and dw.dim() > 2:  # a weight shared by the batch
            dw = dw.reshape(-1, *dw.shape[-2:]).sum(0)
        return dx, dw, None


def _check_float32(name, t):
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"exmy.torch: {name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype != torch.float32:
        raise TypeError(f"exmy.torch: {name} must be float32 (the GEMMs emulate low precision "
                        f"in float32), got {t.dtype}")


def _states(ops, history_len, most_recent=False):
    return {use: _core.DelayedState(history_len, most_recent)
            for use, op in ops.items() if op.enabled and op.scaling == "delayed"}


def quant_linear(x, weight, bias=None, *, recipe, seed=DEFAULT_SEED, sr_stream=None, states=None,
                 high_precision=False, capture=None):
    """The functional QuantLinear: y = Q_a(x) Q_w(weight)^T (+ bias, in
    float32), the backward as QuantLinear's.  recipe: a name, a path or an
    exmy.recipe.Recipe.  states: {"x", "w", "dy"} -> exmy.DelayedState for
    delayed-scaling recipes (required there: the state must persist across
    calls).  capture: a dict that receives the rounded operands ("x", "w",
    "dy"; element-wise recipes)."""
    r = Recipe.load(recipe)
    ops = r.operands(seed, high_precision)
    return _linear(x, weight, bias, ops["a"], ops["w"], ops["g"], states, sr_stream, capture,
                   r.accumulate)


def _linear(x, weight, bias, x_op, w_op, dy_op, states, sr_stream, capture, accum):
    _check_float32("x", x)
    _check_float32("weight", weight)
    if weight.dim() != 2 or x.dim() < 1 or x.shape[-1] != weight.shape[1]:
        raise ValueError(f"exmy.torch: x {tuple(x.shape)} and weight {tuple(weight.shape)} do "
                         "not fit a linear layer (x.shape[-1] == weight.shape[1])")
    states = _require_states(states, {"x": x_op, "w": w_op, "dy": dy_op})
    plan = _Plan(x_op, w_op, dy_op, states, sr_stream or default_sr_stream, capture, True, accum)
    x2 = x.reshape(-1, x.shape[-1])
    y = _QuantGemm.apply(x2, weight, plan).reshape(*x.shape[:-1], weight.shape[0])
    return y if bias is None else y + bias


def _require_states(states, ops):
    states = states or {}
    for use, op in ops.items():
        if op.enabled and op.scaling == "delayed" and not isinstance(states.get(use),
                                                                      _core.DelayedState):
            raise ValueError(f"exmy.torch: delayed scaling needs states['{use}'] = "
                             "exmy.DelayedState(amax_history) kept across calls (QuantLinear and "
                             "QuantMatmul keep theirs)")
    return states


def quant_matmul(a, b, *, recipe, seed=DEFAULT_SEED, roles=("a", "a", "g"), sr_stream=None,
                 states=None, capture=None):
    """a @ b^T over the last two dimensions with both inputs and the output
    gradient rounded by the recipe: a (..., M, K), b (..., N, K) with the same
    batch dimensions.  roles: the recipe roles of (a, b, dY); the trainer's
    attention products use ("a", "a", "g") (S = Q K^T: a = Q, b = K; O = P V:
    a = P, b = V^T).  Stochastic rounding indexes each operand by its
    position in the whole tensor (the trainer rounds per head GEMM)."""
    r = Recipe.load(recipe)
    ops = r.operands(seed)
    return _matmul(a, b, ops[roles[0]], ops[roles[1]], ops[roles[2]], states, sr_stream, capture,
                   r.accumulate)


def _matmul(a, b, a_op, b_op, dy_op, states, sr_stream, capture, accum):
    _check_float32("a", a)
    _check_float32("b", b)
    if a.dim() < 2 or a.shape[:-2] != b.shape[:-2] or a.shape[-1] != b.shape[-1]:
        raise ValueError(f"exmy.torch.quant_matmul: a {tuple(a.shape)} and b {tuple(b.shape)} "
                         "must be (..., M, K) and (..., N, K) with the same batch dimensions")
    states = _require_states(states, {"x": a_op, "w": b_op, "dy": dy_op})
    plan = _Plan(a_op, b_op, dy_op, states, sr_stream or default_sr_stream, capture, False, accum)
    return _QuantGemm.apply(a, b, plan)


class QuantLinear(torch.nn.Linear):
    """nn.Linear whose GEMM operands (X, W, dY) are rounded by a precision
    recipe, as the C trainer does (see the module's documentation).

    recipe: a recipe name (a file <name>.cfg of experiments/configs, e.g.
      "e8m3", "fp8-te", "mxfp8", "bf16-sr"), a path to such a file, or an
      exmy.recipe.Recipe.  Only its GEMM-operand keys apply here
      (format_*, rounding*, sr_bits, saturate, flush_subnormals, scaling,
      margin, pow2_scale, mx_block, amax_history); quant_attention,
      quant_lm_head and high_precision_first_last say which layers of a model
      are quantized (recipe.quant_lm_head, ...), and grad_format / moments
      concern the optimizer, not the layer.
    seed: the run's seed (operand seeds are seed + 1 + role, as the trainer).
    sr_stream: the SRStream of offsets (default: default_sr_stream).
    high_precision: use the recipe's high_format operands instead (the
      trainer's first and last blocks under high_precision_first_last).
    The bias (bias=True, as nn.Linear; the trainer has none) is added in
    float32 after the GEMM.  The delayed-scaling states (self.states) are
    not part of state_dict().  Set self.capture = {} to receive the rounded
    operands of the last call.
    """

    def __init__(self, in_features, out_features, bias=True, device=None, dtype=None, *, recipe,
                 seed=DEFAULT_SEED, sr_stream=None, high_precision=False):
        super().__init__(in_features, out_features, bias, device=device, dtype=dtype)
        self.recipe = Recipe.load(recipe)
        self.seed, self.high_precision = seed, high_precision
        ops = self.recipe.operands(seed, high_precision)
        self.x_op, self.w_op, self.dy_op = ops["a"], ops["w"], ops["g"]
        self.sr_stream = sr_stream or default_sr_stream
        self.states = _states({"x": self.x_op, "w": self.w_op, "dy": self.dy_op},
                              self.recipe.amax_history)
        self.capture = None

    @classmethod
    def from_linear(cls, linear, **kwargs):
        """A QuantLinear with linear's weight and bias (copied)."""
        q = cls(linear.in_features, linear.out_features, linear.bias is not None,
                device=linear.weight.device, dtype=linear.weight.dtype, **kwargs)
        with torch.no_grad():
            q.weight.copy_(linear.weight)
            if linear.bias is not None:
                q.bias.copy_(linear.bias)
        return q

    def forward(self, x):
        return _linear(x, self.weight, self.bias, self.x_op, self.w_op, self.dy_op, self.states,
                       self.sr_stream, self.capture, self.recipe.accumulate)

    def extra_repr(self):
        return (f"{super().extra_repr()}, recipe={self.recipe.name!r}, x={self.x_op}, "
                f"w={self.w_op}, dy={self.dy_op}")


class QuantMatmul(torch.nn.Module):
    """quant_matmul as a module (it keeps the delayed-scaling states):
    forward(a, b) = a @ b^T with operands of roles `roles` of the recipe."""

    def __init__(self, *, recipe, seed=DEFAULT_SEED, roles=("a", "a", "g"), sr_stream=None):
        super().__init__()
        self.recipe = Recipe.load(recipe)
        ops = self.recipe.operands(seed)
        self.a_op, self.b_op, self.dy_op = (ops[r] for r in roles)
        self.sr_stream = sr_stream or default_sr_stream
        self.states = _states({"x": self.a_op, "w": self.b_op, "dy": self.dy_op},
                              self.recipe.amax_history)
        self.capture = None

    def forward(self, a, b):
        return _matmul(a, b, self.a_op, self.b_op, self.dy_op, self.states, self.sr_stream,
                       self.capture, self.recipe.accumulate)
