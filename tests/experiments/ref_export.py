"""Reads what experiments/trainer/export_ref writes (its layout is in export_ref.c):
the test-size model's shape, hyperparameters, initial weights, batches, and the C
model's forward loss, gradients and AdamW steps.  Shared by torch_ref_test.py and
torch_ref_bf16_test.py, which import it first: without torch or numpy the test
that imports it skips (exit 0, with a message), unless CI=true, where it fails."""
import os
import struct
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import torch
except ImportError as e:
    _test = os.path.splitext(os.path.basename(sys.argv[0]))[0]
    if os.environ.get("CI") == "true":
        print(f"{_test}: FAIL: {e} (CI must have python3-torch, see setup.sh)")
        sys.exit(1)
    print(f"{_test}: SKIPPED: {e}; install python3-torch python3-numpy (setup.sh does)")
    sys.exit(0)


def run_export(exe, *recipe_args):
    """Runs export_ref (with the recipe arguments it takes after OUT.bin) and returns a
    dict of its fields, tensors as torch tensors."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "ref.bin")
        subprocess.run([exe, path, *recipe_args], check=True)
        raw = open(path, "rb").read()
    hdr = struct.unpack_from("<16i", raw, 0)
    assert hdr[0] == 0x46455258 and hdr[1] == 1, "bad export_ref header"
    r = dict(zip(("V", "C", "L", "NH", "NKV", "H", "T", "B", "STEPS", "WARMUP"), hdr[2:12]))
    r.update(zip(("lr", "b1", "b2", "eps", "wd", "clip", "min_frac"),
                 struct.unpack_from("<8f", raw, 64)))
    off = 96
    V, C, L, NH, NKV, H, T = (r[k] for k in ("V", "C", "L", "NH", "NKV", "H", "T"))
    hs = C // NH
    P = V * C * 2 + L * (2 * C + 2 * C * C + 2 * NKV * hs * C + 3 * H * C) + C
    B, STEPS = r["B"], r["STEPS"]

    def take(dtype, n):
        nonlocal off
        a = np.frombuffer(raw, dtype=dtype, count=n, offset=off)
        off += a.nbytes
        return a

    r["P"] = P
    r["params0"] = torch.from_numpy(take("<f4", P).copy())
    r["inputs"] = torch.from_numpy(take("<i4", STEPS * B * T).astype(np.int64)).view(STEPS, B, T)
    r["targets"] = torch.from_numpy(take("<i4", STEPS * B * T).astype(np.int64)).view(STEPS, B, T)
    r["loss0"] = float(take("<f4", 1)[0])
    r["grads0"] = torch.from_numpy(take("<f4", P).copy())
    r["losses"] = take("<f4", STEPS)
    r["lrs"] = take("<f4", STEPS)
    r["norms"] = take("<f4", STEPS)
    r["params_final"] = torch.from_numpy(take("<f4", P).copy())
    assert off == len(raw), (off, len(raw))
    return r
