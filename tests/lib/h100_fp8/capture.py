# The capture behind h100_fp8_gemm.bin and cuda/NOTES.md's accumulator table, as
# run on the H100: python3 capture.py OUT_DIR (PyTorch with CUDA; writes
# OUT_DIR/fp8_truth_{a}_{b}.npz).
# Ground truth for the accumulator model: cuBLASLt FP8 GEMMs (torch._scaled_mm)
# on seeded inputs, fast accumulation on and off; inputs and outputs saved.
import sys, numpy as np, torch
out = sys.argv[1]
dev = "cuda"
M = N = 64
Ks = [32, 64, 96, 128, 256, 512, 4096, 16384]
def draw(rng, dist, shape):
    if dist == "uniform":   # [0.5, 1.5], positive
        return rng.uniform(0.5, 1.5, shape)
    if dist == "normal":
        return rng.standard_normal(shape)
    if dist == "wide":      # sign x 2^U(-10,6) x [1,2)
        return rng.choice([-1.0, 1.0], shape) * np.exp2(rng.integers(-10, 7, shape)) * rng.uniform(1, 2, shape)
    if dist == "cancel":    # large terms that cancel, small ones that survive
        x = rng.standard_normal(shape) * 4
        x[..., 1::2] = -x[..., 0::2][..., : x[..., 1::2].shape[-1]]
        x += rng.standard_normal(shape) * 0.01
        return x
    raise ValueError(dist)
res = {"torch": torch.__version__, "device": torch.cuda.get_device_name()}
for pair in [("e4m3", "e4m3"), ("e4m3", "e5m2"), ("e5m2", "e4m3")]:
    arrays = {}
    for dist in ["uniform", "normal", "wide", "cancel"]:
        for K in Ks:
            rng = np.random.default_rng([K, len(dist), ord(dist[0]), ord(pair[0][1]) * 7 + ord(pair[1][1])])
            dt = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}
            a = torch.tensor(draw(rng, dist, (M, K)), dtype=torch.float32).to(dt[pair[0]])
            bt = torch.tensor(draw(rng, dist, (N, K)), dtype=torch.float32).to(dt[pair[1]])
            one = torch.ones((), device=dev)
            ga, gb = a.to(dev), bt.to(dev)
            cs = {}
            for fast in (True, False):
                try:
                    c = torch._scaled_mm(ga, gb.t(), scale_a=one, scale_b=one, out_dtype=torch.float32, use_fast_accum=fast)
                    cs[fast] = c.cpu().numpy()
                except Exception as e:
                    print(pair, dist, K, "fast" if fast else "split", "failed:", str(e).splitlines()[0]); cs[fast] = None
            key = f"{dist}_K{K}"
            arrays[key + "_a"] = a.view(torch.uint8).numpy()
            arrays[key + "_bt"] = bt.view(torch.uint8).numpy()
            exact = a.double().numpy() @ bt.double().numpy().T
            for fast, tag in ((True, "fast"), (False, "split")):
                if cs[fast] is None: continue
                arrays[key + "_" + tag] = cs[fast]
                rel = np.abs(cs[fast] - exact) / np.maximum(np.abs(exact), 1e-30)
                print(f"{pair[0]}x{pair[1]} {dist:8s} K={K:6d} {tag:5s} median rel err {np.median(rel):.3e} max {rel.max():.3e} below exact {np.mean(cs[fast] < exact):.2f}")
    np.savez_compressed(f"{out}/fp8_truth_{pair[0]}_{pair[1]}.npz", **arrays)
print(res)
