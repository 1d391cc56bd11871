"""Calibrates exmy's accumulation model (lib/accum_core.h) against the GPU's
FP8 GEMM: cuBLASLt through torch._scaled_mm (scales 1, float32 out), with
fast accumulation on and off, E4M3 x E4M3 and E4M3 x E5M2, on matrices made
to show the accumulator (uniform positive, normal, a wide exponent spread,
near-cancelling pairs) for K from 32 to 16384.  For each case it finds the
model of a parameter grid (group, product_bits, sum_bits, round, align_sum,
promote_every, align_to) that agrees with the hardware on the most
elements, bit for bit, by coordinate search started at the published H100
model (Khattak & Mikaitis; cuda/NOTES.md), and prints per case the fraction of elements that
are bit-identical and the largest relative difference; then the one model
best over all cases of each accumulation mode, and how it does on each.

The model runs on the GPU (exmy.qgemm_accum -> exmy_cuda_qgemm_accum), on
the FP8 values as float32, so it sees exactly the hardware's operands.

    PYTHONPATH=python EXMY_LIBRARY=./libexmy.so EXMY_CUDA_LIBRARY=./libexmy_cuda.so \\
        python3 calibrate_accum.py [--budget SECONDS] [--quick]

(cuda/gpu_run.sh calibrate OUTDIR runs it.)  Exit status 0 once the table is
printed: agreement is a measurement here, not a test.
"""
import argparse
import itertools
import sys
import time

import numpy as np
import torch

import exmy

KS = (32, 128, 512, 4096, 16384)
DATA = ("uniform", "normal", "spread", "cancel")
PAIRS = (("e4m3", "e4m3"), ("e4m3", "e5m2"))
TORCH_FP8 = {"e4m3": getattr(torch, "float8_e4m3fn", None), "e5m2": getattr(torch, "float8_e5m2", None)}
FP8_MAX = {"e4m3": 448.0, "e5m2": 57344.0}

# The grid.  product_bits and sum_bits 13..25, promotion never or every
# 32..256 products (a multiple of the group, else that model is skipped).
GRID = {
    "group": (16, 32, 64),
    "product_bits": tuple(range(13, 26)),
    "sum_bits": tuple(range(13, 26)),
    "round": ("trunc", "nearest"),
    "align_sum": (0, 1),
    "promote_every": (0, 32, 64, 128, 256),
    "align_to": ("product", "operands"),
}
# Where the search starts: Khattak & Mikaitis's H100 FP8 model (blocks of 32
# products aligned with the accumulator to their largest exponent, 13
# fraction bits kept, the sum truncated to 13 fraction bits), for fast
# accumulation; the same promoted every 128 products (DeepSeek-V3's N_C) for
# cuBLAS's default, slower mode.
START = {True: dict(group=32, product_bits=14, sum_bits=14, round="trunc", align_sum=1,
                    promote_every=0, align_to="operands"),
         False: dict(group=32, product_bits=14, sum_bits=14, round="trunc", align_sum=1,
                     promote_every=128, align_to="operands")}


def operand(kind, rows, k, fmt, gen, role):
    """rows x k float32 values of fmt (as the FP8 tensor holds them)."""
    if kind == "uniform":
        x = gen.uniform(0.5, 1.5, (rows, k))
    elif kind == "normal":
        x = gen.standard_normal((rows, k))
    elif kind == "spread":  # magnitudes 2^-6 .. 2^6, random signs
        x = np.exp2(gen.uniform(-6, 6, (rows, k))) * gen.choice((-1.0, 1.0), (rows, k))
    else:  # cancel: products in pairs (2q, 2q+1) of opposite signs, most of them equal
        x = gen.standard_normal((rows, k))
        x[:, 1::2] = x[:, 0::2]
        if role == "b":
            flip = np.where(gen.uniform(size=(rows, k // 2)) < 0.9, -1.0, 1.0)
            x[:, 1::2] *= flip
    x = np.clip(x, -FP8_MAX[fmt], FP8_MAX[fmt]).astype(np.float32)
    return exmy.quantize(x, fmt)


class Case:
    def __init__(self, fa, fb, kind, k, dev, seed, size=None, emulate=None):
        gen = np.random.default_rng(seed)
        mn = size or (256 if k <= 512 else 128)
        self.name = f"{fa}x{fb} {kind:7s} K={k:5d} {mn}x{mn}"
        self.k = k
        a = operand(kind, mn, k, fa, gen, "a")
        bt = operand(kind, mn, k, fb, gen, "b")  # B^T: n x k
        self.a = torch.from_numpy(a).to(dev)
        self.bt = torch.from_numpy(bt).to(dev)
        self.hw = {}
        for fast in (True, False):
            if emulate:  # a known model in the hardware's place (checks the search)
                self.hw[fast] = exmy.qgemm_accum(self.a, self.bt, emulate[fast], trans_b=True)
                continue
            a8 = self.a.to(TORCH_FP8[fa])
            b8 = self.bt.to(TORCH_FP8[fb]).t()  # k x n, column-major, as _scaled_mm wants
            one = torch.tensor(1.0, device=dev)
            self.hw[fast] = torch._scaled_mm(a8, b8, scale_a=one, scale_b=one,
                                             out_dtype=torch.float32, use_fast_accum=fast)
        exact = (self.a.double() @ self.bt.double().t())
        self.exact = exact
        # the hardware's error against the exact sum (nearly exact in float64)
        self.hw_err = {f: float(((h.double() - exact).abs() / exact.abs().clamp_min(1e-30))
                               .median()) for f, h in self.hw.items()}
        self.hw_bits = {f: h.view(torch.int32) for f, h in self.hw.items()}


def model_text(p):
    return (f"group:{p['group']},bits:{p['product_bits']},sum:{p['sum_bits']},"
            f"round:{p['round']},promote:{p['promote_every']},align:{p['align_sum']},"
            f"align_to:{p['align_to']}")


def valid(p):
    return p["promote_every"] % p["group"] == 0


class Scorer:
    """Model results cached per (case, model); counts the model evaluations."""

    def __init__(self):
        self.cache, self.evals, self.seconds = {}, 0, 0.0

    def result(self, case, p):
        key = (case.name, model_text(p))
        if key not in self.cache:
            t = time.perf_counter()
            c = exmy.qgemm_accum(case.a, case.bt, model_text(p), trans_b=True)
            if c.is_cuda:
                torch.cuda.synchronize()
            self.seconds += time.perf_counter() - t
            self.evals += 1
            self.cache[key] = c
        return self.cache[key]

    def score(self, case, fast, p):
        """(fraction bit-identical, mean and largest relative difference)."""
        c = self.result(case, p)
        h = case.hw[fast]
        same = float((c.view(torch.int32) == case.hw_bits[fast]).float().mean())
        diff = ((c.double() - h.double()).abs() / h.double().abs().clamp_min(1e-30))
        return same, float(diff.mean()), float(diff.max())


def better(a, b):
    """a beats b: more identical elements, then a smaller mean difference."""
    return b is None or (a[0], -a[1]) > (b[0], -b[1])


def total(scorer, cases, fast, p):
    """A model's score over cases: mean identical fraction, mean of the mean
    differences, the largest difference."""
    ss = [scorer.score(c, fast, p) for c in cases]
    return (sum(s[0] for s in ss) / len(ss), sum(s[1] for s in ss) / len(ss),
            max(s[2] for s in ss))


def climb(scorer, cases, fast, start, deadline, rounds=3):
    """Coordinate search: each parameter over its whole range with the others
    fixed, keeping the best; repeated until nothing improves."""
    best, best_s = dict(start), total(scorer, cases, fast, start)
    for _ in range(rounds):
        improved = False
        for key, values in GRID.items():
            for v in values:
                if time.perf_counter() > deadline:
                    return best, best_s
                p = dict(best, **{key: v})
                if p == best or not valid(p):
                    continue
                s = total(scorer, cases, fast, p)
                if better(s, best_s):
                    best, best_s, improved = p, s, True
        if not improved or best_s[0] == 1.0:
            break
    return best, best_s


def search(scorer, cases, fast, start, deadline, seeds=3):
    """Coarse, then fine: every structure (group, round, align_sum,
    promote_every) with start's bit counts, then a coordinate search from the
    `seeds` best of those and from start itself."""
    coarse = [start]
    for g, r, al, pr, at in itertools.product(GRID["group"], GRID["round"], GRID["align_sum"],
                                              GRID["promote_every"], GRID["align_to"]):
        p = dict(start, group=g, round=r, align_sum=al, promote_every=pr, align_to=at)
        if valid(p) and p != start:
            coarse.append(p)
    scored = []
    for p in coarse:
        if time.perf_counter() > deadline:
            break
        scored.append((total(scorer, cases, fast, p), p))
    scored.sort(key=lambda sp: (-sp[0][0], sp[0][1]))
    starts = [start] + [p for _, p in scored[:seeds] if p != start]
    best, best_s = None, None
    for i, p in enumerate(starts):
        left = deadline - time.perf_counter()
        q, s = climb(scorer, cases, fast, p, time.perf_counter() + left / (len(starts) - i))
        if better(s, best_s):
            best, best_s = q, s
        if best_s[0] == 1.0:
            break
    return best, best_s


def speed(dev, m=512, n=512, k=1024, reps=3):
    """The model's GEMM beside the hardware's on one E4M3 shape, same run:
    median seconds of exmy.qgemm_accum (hopper), torch._scaled_mm (fast
    accumulation) and a float32 torch.matmul."""
    gen = np.random.default_rng(7)
    a = torch.from_numpy(operand("normal", m, k, "e4m3", gen, "a")).to(dev)
    bt = torch.from_numpy(operand("normal", n, k, "e4m3", gen, "b")).to(dev)
    a8, b8 = a.to(TORCH_FP8["e4m3"]), bt.to(TORCH_FP8["e4m3"]).t()
    one = torch.tensor(1.0, device=dev)
    runs = {
        "exmy.qgemm_accum(hopper)": lambda: exmy.qgemm_accum(a, bt, "hopper", trans_b=True),
        "torch._scaled_mm(fast)": lambda: torch._scaled_mm(a8, b8, scale_a=one, scale_b=one,
                                                           out_dtype=torch.float32,
                                                           use_fast_accum=True),
        "torch.matmul(float32)": lambda: a @ bt.t(),
    }
    line = []
    for name, fn in runs.items():
        fn()
        torch.cuda.synchronize()
        ts = []
        for _ in range(reps):
            t = time.perf_counter()
            fn()
            torch.cuda.synchronize()
            ts.append(time.perf_counter() - t)
        line.append(f"{name} {sorted(ts)[reps // 2] * 1e3:.3f} ms")
    print(f"speed, {m}x{n}x{k} E4M3 (median of {reps}): " + ", ".join(line))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--budget", type=float, default=150.0,
                    help="seconds for the searches (default 150); the table is printed anyway")
    ap.add_argument("--quick", action="store_true", help="K <= 512 and 2 data kinds only")
    ap.add_argument("--size", type=int, default=0, help="m = n (default 256 for K <= 512, else 128)")
    ap.add_argument("--emulate", nargs=2, metavar=("FAST", "DEFAULT"),
                    help="check the search: two exmy models in the hardware's place (fast and "
                         "default accumulation), which it must find; runs on the CPU if there "
                         "is no GPU")
    args = ap.parse_args()
    emulate = None
    if args.emulate:
        try:
            emulate = {True: exmy.AccumModel(args.emulate[0]),
                       False: exmy.AccumModel(args.emulate[1])}
        except ValueError as e:
            print(f"calibrate_accum: --emulate: {e}", file=sys.stderr)
            sys.exit(2)
    if args.budget <= 0 or args.size < 0 or args.size % 16:
        print("calibrate_accum: --budget must be > 0 and --size a multiple of 16", file=sys.stderr)
        sys.exit(2)
    if torch.cuda.is_available():
        dev = torch.device("cuda", 0)
        torch.backends.cuda.matmul.allow_tf32 = False
        where = f"{torch.cuda.get_device_name(dev)}, exmy {exmy.cuda_library_path()}"
    elif emulate:
        dev, where = torch.device("cpu"), "CPU"
    else:
        print("calibrate_accum: no CUDA device", file=sys.stderr)
        sys.exit(2)
    t0 = time.perf_counter()
    hw = f"exmy models {emulate[True]} / {emulate[False]}" if emulate else \
        "cuBLASLt's FP8 GEMM (torch._scaled_mm)"
    print(f"calibrate_accum: {where}, torch {torch.__version__}; hardware: {hw}")
    ks = KS[:3] if args.quick else KS
    kinds = DATA[:2] if args.quick else DATA
    cases = []
    for i, ((fa, fb), kind, k) in enumerate(itertools.product(PAIRS, kinds, ks)):
        try:
            cases.append(Case(fa, fb, kind, k, dev, 1000 + i, args.size, emulate))
        except RuntimeError as e:  # a pair or shape the GEMM refuses: said, and left out
            print(f"skipped {fa}x{fb} {kind} K={k}: {str(e).splitlines()[0]}")
    if not cases:
        print("calibrate_accum: no case could be run", file=sys.stderr)
        sys.exit(1)
    print(f"{len(cases)} cases made in {time.perf_counter() - t0:.1f} s")
    scorer = Scorer()
    deadline = t0 + args.budget
    overall = {}
    for fast in (True, False):
        mode = "fast accumulation" if fast else "default (split) accumulation"
        # the global search on the cases that tell models apart best: large K
        tune = [c for c in cases if c.k in (512, 4096)] or cases
        share = (deadline - time.perf_counter()) / (4 if fast else 3)
        best, s = search(scorer, tune, fast, START[fast], time.perf_counter() + share)
        overall[fast] = best
        print(f"\n== {mode}: best model over the K=512 and 4096 cases: {model_text(best)} "
              f"(mean identical {s[0]:.4f}, worst rel diff {s[2]:.3g})")
        print(f"{'case':40s} {'hw vs exact':>11s} | {'best overall':>12s} {'max rel':>9s} | "
              f"{'own best':>8s} {'max rel':>9s}  own best model")
        for c in cases:
            g = scorer.score(c, fast, best)
            left = (deadline - time.perf_counter()) / 2
            own, own_s = climb(scorer, [c], fast, best,
                               time.perf_counter() + max(0.0, left) / max(1, len(cases)), rounds=1)
            print(f"{c.name:40s} {c.hw_err[fast]:11.3g} | {g[0]:12.4f} {g[2]:9.3g} | "
                  f"{own_s[0]:8.4f} {own_s[2]:9.3g}  {model_text(own)}", flush=True)
    print(f"\n{scorer.evals} model evaluations in {scorer.seconds:.1f} s on the GPU; "
          f"{time.perf_counter() - t0:.1f} s in all")
    if dev.type == "cuda":
        speed(dev)
    for fast in (True, False):
        print(f"best overall, use_fast_accum={fast}: {model_text(overall[fast])}")


if __name__ == "__main__":
    main()
