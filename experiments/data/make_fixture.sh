#!/usr/bin/env bash
# Writes the test fixture experiments/data/fixture/: a slice of the built
# corpus (data/corpus/text, build_corpus.sh) -- of each source, the first 6
# training and the first 3 validation documents of at most 16000 bytes, in
# corpus order -- as {train,val}.txt with their manifest.tsv lines, and their
# llm.c shards {train,val}_000000.bin from Debian's C++ SentencePiece
# (spm_encode_docs) with the committed tokenizer.  Deterministic.
#   bazel build --disk_cache=/work/.bazel-disk-cache //experiments/data:spm_encode_docs
#   experiments/data/make_fixture.sh
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
. "$here/corpus_paths.sh"
fixture="$here/fixture"
encoder="${SPM_ENCODE_DOCS:-$root/bazel-bin/experiments/data/spm_encode_docs}"
[ -x "$encoder" ] || { echo "make_fixture: $encoder missing (bazel build //experiments/data:spm_encode_docs)" >&2; exit 2; }
[ -f "$text/manifest.tsv" ] || { echo "make_fixture: $text missing (experiments/data/build_corpus.sh)" >&2; exit 2; }

mkdir -p "$fixture"
python3 - "$text" "$fixture" <<'PY'
import collections, sys
text, fixture = sys.argv[1], sys.argv[2]
quota = {"train": 6, "val": 3}
taken = collections.Counter()
docs = {split: open(f"{text}/{split}.txt", "rb").read().split(b"\0")[:-1] for split in quota}
position = collections.Counter()
out = {split: [] for split in quota}
manifest = []
for line in open(f"{text}/manifest.tsv", encoding="utf-8"):
    name, source, split, size = line.rstrip("\n").split("\t")
    doc = docs[split][position[split]]
    position[split] += 1
    assert len(doc) == int(size), name
    if len(doc) <= 16000 and taken[source, split] < quota[split]:
        taken[source, split] += 1
        out[split].append(doc)
        manifest.append(line)
for split, chosen in out.items():
    with open(f"{fixture}/{split}.txt", "wb") as f:
        f.write(b"".join(d + b"\0" for d in chosen))
with open(f"{fixture}/manifest.tsv", "w", encoding="utf-8") as f:
    f.writelines(manifest)
print(f"make_fixture: {len(out['train'])} train and {len(out['val'])} val documents")
PY
for split in train val; do
  "$encoder" "$here/tokenizer/tokenizer.model" "$fixture/$split.txt" "$fixture" "$split"
done
(cd "$fixture" && sha256sum train.txt val.txt manifest.tsv train_000000.bin val_000000.bin)
