#!/usr/bin/env bash
# On the GPU machine (no registry; at most 64 MiB carried per call): the same
# command in every call, each call carrying data/corpus/parts/MANIFEST and the
# next parts that pack_for_gpu.sh cut (it prints the plan):
#   bash experiments/data/gpu_prepare.sh
# Each call checks the parts it finds in data/corpus/parts/ against MANIFEST
# and keeps them in data/corpus/inputs/.parts/ (ignored files outlive a call
# while the machine stays warm).  Once every part is there, it joins them into
# the inputs, runs build_corpus.sh (inputs checked against inputs.txt, the text
# against corpus.sha256: the same bytes as on the build machine), then encodes
# train and val with Python sentencepiece on every core into
# data/corpus/shards/{train,val}/ with the committed tokenizer, printing each
# shard's sha256 and token count, and checks them against shards.sha256 (the
# C++ encoder's shards here).  Idempotent.  Train with
#   --set data=data/corpus/shards/train --set val_data=data/corpus/shards/val
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
. "$here/corpus_paths.sh"
stash="$inputs/.parts"
model="$here/tokenizer/tokenizer.model"

if [ -f "$shards/SHA256SUMS" ]; then
  echo "gpu_prepare: shards already in $shards:"
  cat "$shards/SHA256SUMS"
  exit 0
fi
mkdir -p "$stash"
[ -f "$parts/MANIFEST" ] && cp "$parts/MANIFEST" "$stash/MANIFEST"
if [ ! -f "$stash/MANIFEST" ]; then
  echo "gpu_prepare: no data/corpus/parts/MANIFEST; carry it (with the parts) in every call" >&2
  exit 2
fi

# Keep the parts carried in this call, each checked against MANIFEST.
for p in "$parts"/*.part-*; do
  [ -f "$p" ] || continue
  name="$(basename "$p")"
  want="$(awk -v n="$name" '$2 == n {print $1}' "$stash/MANIFEST")"
  got="$(sha256sum "$p" | cut -d' ' -f1)"
  if [ -z "$want" ] || [ "$got" != "$want" ]; then
    echo "gpu_prepare: $p is not a part that MANIFEST lists, or not that part (sha256 $got)" >&2
    exit 2
  fi
  cp "$p" "$stash/$name.tmp" && mv "$stash/$name.tmp" "$stash/$name"
done

# Join each input whose parts are all there; check it against inputs.txt.
missing=()
while read -r file sum _; do
  [ -f "$inputs/$file" ] && continue
  mapfile -t names < <(awk -v f="$file" 'index($2, f ".part-") == 1 {print $2}' "$stash/MANIFEST")
  absent=()
  for n in "${names[@]}"; do [ -f "$stash/$n" ] || absent+=("$n"); done
  if [ ${#names[@]} -eq 0 ] || [ ${#absent[@]} -gt 0 ]; then
    missing+=("${absent[@]:-$file}")
    continue
  fi
  (cd "$stash" && cat "${names[@]}") >"$inputs/$file.tmp"
  if [ "$(sha256sum "$inputs/$file.tmp" | cut -d' ' -f1)" != "$sum" ]; then
    echo "gpu_prepare: the parts of $file join into a file that is not the pinned one" >&2
    rm -f "$inputs/$file.tmp"
    exit 2
  fi
  mv "$inputs/$file.tmp" "$inputs/$file"
  (cd "$stash" && rm -f "${names[@]}")
  echo "gpu_prepare: $file joined and verified"
done < <(grep -v '^#' "$here/inputs.txt")
if [ ${#missing[@]} -gt 0 ]; then
  echo "gpu_prepare: still to carry: ${missing[*]}"
  exit 0
fi

bash "$here/build_corpus.sh"
rm -rf "$shards.tmp"
mkdir -p "$shards.tmp"
for split in train val; do
  python3 "$here/corpus.py" encode "$model" "$text/$split.txt" \
    "$shards.tmp/$split" "$split" | tee -a "$shards.tmp/encode.log"
done
(cd "$shards.tmp" && sha256sum train/*.bin val/*.bin >SHA256SUMS)
# Debian's C++ SentencePiece (spm_encode_docs) wrote these shards on the build machine.
if (cd "$shards.tmp" && sha256sum --quiet -c "$here/shards.sha256"); then
  echo "gpu_prepare: every shard identical to Debian's C++ SentencePiece on the build machine (shards.sha256)"
else
  echo "gpu_prepare: FAIL: shards differ from those of Debian's C++ SentencePiece (shards.sha256);" \
       "they are in $shards.tmp" >&2
  exit 1
fi
rm -rf "$shards"
mv "$shards.tmp" "$shards"
echo "gpu_prepare: shards in $shards (sha256 in SHA256SUMS)"
