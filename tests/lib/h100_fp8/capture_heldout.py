# Held-out ground truth for the accumulator model: new seeds and trainer-like
# shapes (M, N, K), cuBLASLt FP8 GEMMs via torch._scaled_mm, fast and split.
import sys, numpy as np, torch
out = sys.argv[1]
shapes = [(256, 256, 768), (128, 256, 2048), (64, 128, 8192), (256, 128, 1024)]
def draw(rng, dist, shape):
    if dist == "uniform": return rng.uniform(0.5, 1.5, shape)
    if dist == "normal": return rng.standard_normal(shape)
    if dist == "wide": return rng.choice([-1.0, 1.0], shape) * np.exp2(rng.integers(-10, 7, shape)) * rng.uniform(1, 2, shape)
    if dist == "cancel":
        x = rng.standard_normal(shape) * 4
        x[..., 1::2] = -x[..., 0::2][..., : x[..., 1::2].shape[-1]]
        return x + rng.standard_normal(shape) * 0.01
dt = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}
one = torch.ones((), device="cuda")
for pair in [("e4m3", "e4m3"), ("e4m3", "e5m2")]:
    for half, dists in (("a", ["uniform", "normal"]), ("b", ["wide", "cancel"])):
        arrays = {}
        for dist in dists:
            for (M, N, K) in shapes:
                rng = np.random.default_rng([1000 + K, M, N, len(dist), ord(dist[0]), ord(pair[1][1])])
                a = torch.tensor(draw(rng, dist, (M, K)), dtype=torch.float32).to(dt[pair[0]])
                bt = torch.tensor(draw(rng, dist, (N, K)), dtype=torch.float32).to(dt[pair[1]])
                key = f"{dist}_M{M}_N{N}_K{K}"
                arrays[key + "_a"] = a.view(torch.uint8).numpy()
                arrays[key + "_bt"] = bt.view(torch.uint8).numpy()
                for fast, tag in ((True, "fast"), (False, "split")):
                    c = torch._scaled_mm(a.cuda(), bt.cuda().t(), scale_a=one, scale_b=one,
                                         out_dtype=torch.float32, use_fast_accum=fast)
                    arrays[key + "_" + tag] = c.cpu().numpy()
        np.savez_compressed(f"{out}/heldout_{pair[0]}_{pair[1]}_{half}.npz", **arrays)
        print("saved", pair, half, flush=True)
