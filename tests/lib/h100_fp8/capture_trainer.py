# The accumulator model at the 120m-32k trainer's own GEMM shapes (batch of
# 16 x 2048 tokens): cuBLASLt FP8 GEMMs via torch._scaled_mm, fast and split
# accumulation, on the GPU; what comes back is a sample of 32 rows of A and 32
# columns of B with the 32 x 32 outputs they give (the model needs nothing
# else to compute those outputs).  python3 capture_trainer.py OUT_DIR
import sys, numpy as np, torch
out = sys.argv[1]
shapes = [(32768, 768, 768), (32768, 2048, 768), (32768, 768, 2048), (32768, 32000, 768),
          (32768, 768, 32000), (768, 768, 32768), (2048, 768, 32768), (768, 2048, 32768),
          (32000, 768, 32768)]
dt = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}
scale = {"e4m3": 64.0, "e5m2": 1024.0}  # normal data well inside each format's range
one = torch.ones((), device="cuda")
print(torch.__version__, torch.cuda.get_device_name(), flush=True)
for pair in [("e4m3", "e4m3"), ("e5m2", "e4m3")]:
    for dist in ("normal", "wide"):
        arrays = {}
        for (M, N, K) in shapes:
            g = torch.Generator(device="cuda").manual_seed(M * 7 + N * 5 + K * 3 + len(dist) + ord(pair[0][1]))
            def draw(rows, fmt):
                x = torch.randn((rows, K), device="cuda", generator=g)
                if dist == "wide":
                    e = torch.randint(-8, 5, (rows, K), device="cuda", generator=g).float()
                    x = torch.sign(x) * torch.exp2(e) * (1 + torch.rand((rows, K), device="cuda", generator=g))
                    return (x * scale[fmt] / 16).to(dt[fmt])
                return (x * scale[fmt] / 8).to(dt[fmt])
            a, bt = draw(M, pair[0]), draw(N, pair[1])
            rows = torch.randperm(M, device="cuda", generator=g)[:32].sort().values
            cols = torch.randperm(N, device="cuda", generator=g)[:32].sort().values
            key = f"{dist}_M{M}_N{N}_K{K}"
            arrays[key + "_a"] = a[rows].view(torch.uint8).cpu().numpy()
            arrays[key + "_bt"] = bt[cols].view(torch.uint8).cpu().numpy()
            for fast, tag in ((True, "fast"), (False, "split")):
                c = torch._scaled_mm(a, bt.t(), scale_a=one, scale_b=one, out_dtype=torch.float32,
                                     use_fast_accum=fast)
                arrays[key + "_" + tag] = c[rows][:, cols].cpu().numpy()
                del c
            del a, bt
        np.savez_compressed(f"{out}/trainer_{pair[0]}_{pair[1]}_{dist}.npz", **arrays)
        print("saved", pair, dist, flush=True)
