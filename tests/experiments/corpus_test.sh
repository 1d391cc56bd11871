#!/usr/bin/env bash
# The corpus pipeline (experiments/data/) on its committed fixture, a slice of
# the real corpus, and on a generated one:
#  - the fixture's shards are Debian's C++ SentencePiece encoding of its text
#    with the committed tokenizer, in llm.c's format (header read here, apart
#    from the code under test), every document ending in </s>;
#  - corpus.py's Python encoder and shard writer give the same files (with
#    shards cut small, so that cutting is compared too);
#  - train and val hold disjoint documents: no validation document's tokens
#    equal a training document's, and each side is what the hash rule says
#    (computed here with sha256sum);
#  - corpus.py build splits whole documents: on generated files, every file is
#    exactly one document of exactly one side, sides by the rule, duplicates
#    kept once;
#  - the trainer reads the shards with vocab 32000 and trains.
set -euo pipefail
data=experiments/data
fixture=$data/fixture
encoder=$data/spm_encode_docs
train=experiments/trainer/train
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
fail=0; passed=0
ok() { echo "ok   $*"; passed=$((passed+1)); }
bad() { echo "FAIL $*"; fail=$((fail+1)); }

# llm.c header: magic 20240520, version 1, token count; then 2 bytes a token.
header() { od -An -t d4 -N 12 "$1" | xargs; }
for split in train val; do
  f=$fixture/${split}_000000.bin
  read -r magic version n <<<"$(header "$f")"
  docs=$(awk -F'\t' -v s=$split '$3 == s' $fixture/manifest.tsv | wc -l)
  eos=$(od -An -v -t u2 -j 1024 "$f" | tr -s ' ' '\n' | grep -cx 2 || true)
  big=$(od -An -v -t u2 -j 1024 "$f" | tr -s ' ' '\n' | awk '$1 >= 32000' | wc -l)
  if [ "$magic" = 20240520 ] && [ "$version" = 1 ] && [ $((1024 + 2 * n)) = "$(stat -L -c %s "$f")" ] &&
     [ "$eos" = "$docs" ] && [ "$docs" -gt 0 ] && [ "$big" = 0 ]; then
    ok "fixture $split shard: llm.c header, $n tokens < 32000, $docs documents each ending in </s>"
  else bad "fixture $split shard: header '$magic $version $n', $eos </s> for $docs documents, $big tokens >= 32000"; fi
done

# Debian's C++ encoder reproduces the committed shards.
mkdir -p "$tmp/cpp" "$tmp/cpp_small" "$tmp/py_small"
for split in train val; do
  "$encoder" $data/tokenizer/tokenizer.model $fixture/$split.txt "$tmp/cpp" $split >/dev/null
done
if cmp -s "$tmp/cpp/train_000000.bin" $fixture/train_000000.bin && cmp -s "$tmp/cpp/val_000000.bin" $fixture/val_000000.bin; then
  ok "fixture shards = spm_encode_docs (C++ SentencePiece) of the fixture text"
else bad "fixture shards differ from spm_encode_docs of the fixture text"; fi

# Python sentencepiece through corpus.py gives the same files, shards of 5000 tokens.
py=/usr/bin/python3
if "$py" -c "import sentencepiece" 2>/dev/null; then
  "$encoder" $data/tokenizer/tokenizer.model $fixture/train.txt "$tmp/cpp_small" train 5000 >/dev/null
  "$py" $data/corpus.py encode $data/tokenizer/tokenizer.model $fixture/train.txt "$tmp/py_small" train \
    --workers 2 --shard-tokens 5000 >/dev/null
  n=$(ls "$tmp/cpp_small" | wc -l)
  if [ "$n" -gt 1 ] && diff -r "$tmp/cpp_small" "$tmp/py_small" >/dev/null; then
    ok "corpus.py encode (Python sentencepiece) = C++: $n shards of 5000 tokens, identical"
  else bad "corpus.py encode differs from the C++ encoder ($n C++ shards)"; fi
elif [ "${CI:-}" = true ]; then bad "python3-sentencepiece missing (setup.sh installs it)"
else echo "skip corpus.py encode: $py has no sentencepiece (python3-sentencepiece)"; fi

# Disjoint splits: documents cut at </s>, compared as token sequences.
python3 - $fixture/train_000000.bin $fixture/val_000000.bin <<'PY' && ok "fixture: no validation document's tokens equal a training document's" || bad "fixture: train and val share documents"
import struct, sys
def docs(path):
    data = open(path, "rb").read()
    n = struct.unpack_from("<3i", data)[2]
    tokens = struct.unpack_from(f"<{n}H", data, 1024)
    out, cur = [], []
    for t in tokens:
        cur.append(t)
        if t == 2:
            out.append(tuple(cur)); cur = []
    return out
train, val = set(docs(sys.argv[1])), docs(sys.argv[2])
shared = [d for d in val if d in train]
if shared:
    print(f"{len(shared)} validation documents also in train", file=sys.stderr)
sys.exit(1 if shared else 0)
PY

# The rule: val iff the first 16 hex digits of sha256(name) are below fraction * 2^64.
rule_side() {  # name threshold (16 hex digits) -> train | val
  local h; h=$(printf '%s' "$1" | sha256sum | cut -c1-16)
  if [[ "$h" < "$2" ]]; then echo val; else echo train; fi  # same width: string order is numeric order
}
wrong=0
while IFS=$'\t' read -r name _ split _; do
  [ "$(rule_side "$name" 0147ae147ae147ae)" = "$split" ] || { wrong=$((wrong+1)); echo "  $name: $split"; }
done <$fixture/manifest.tsv
if [ $wrong = 0 ]; then ok "fixture: every document on the side the hash rule gives (0.5% to val)"
else bad "fixture: $wrong documents on the wrong side"; fi

# corpus.py build on generated files: 300 documents, 2 duplicates of others, val fraction 1/4.
src="$tmp/src"; mkdir -p "$src/0" "$src/1" "$src/2" "$src/copies"
for i in $(seq 1 300); do printf 'document %d\nline two of %d\n' "$i" "$i" >"$src/$((i % 3))/doc$i.txt"; done
cp "$src/2/doc17.txt" "$src/copies/a.txt"; cp "$src/0/doc18.txt" "$src/copies/b.txt"
python3 $data/corpus.py build "$tmp/built" "$src" --val-fraction 0.25 >/dev/null
python3 - "$src" "$tmp/built" <<'PY' && ok "build: 300 files = 300 whole documents, each on one side, copies kept once" || bad "build: documents cut, lost, doubled or on both sides"
import os, sys
src, built = sys.argv[1:]
files = {}
for d, _, fs in os.walk(src):
    for f in fs:
        files[os.path.relpath(os.path.join(d, f), src)] = open(os.path.join(d, f), "rb").read()
side = {s: open(f"{built}/{s}.txt", "rb").read().split(b"\0")[:-1] for s in ("train", "val")}
names = [l.split("\t") for l in open(f"{built}/manifest.tsv").read().splitlines()]
texts = set(files.values())
everything = side["train"] + side["val"]
ok = (len(everything) == 300 and set(everything) == texts and len(set(everything)) == 300
      and not set(side["train"]) & set(side["val"]) and len(names) == 300
      and all(files[n] in side[s] for n, _, s, _ in names) and 10 < len(side["val"]) < 150)
sys.exit(0 if ok else 1)
PY
wrong=0
while IFS=$'\t' read -r name _ split _; do
  [ "$(rule_side "$name" 4000000000000000)" = "$split" ] || wrong=$((wrong+1))
done <"$tmp/built/manifest.tsv"
if [ $wrong = 0 ]; then ok "build: every document on the side the hash rule gives (1/4 to val)"
else bad "build: $wrong documents on the wrong side"; fi

# The trainer reads the shards (vocab 32000) and trains a few steps.
run="$tmp/run"
if "$train" --set size=test --set vocab=32000 --set data=$fixture/train_000000.bin \
     --set val_data=$fixture/val_000000.bin --set seq_len=64 --set batch_size=2 --set steps=3 \
     --set warmup=1 --set val_every=3 --set val_batches=2 --set progress=0 --set run_dir="$run" >"$tmp/train.out" &&
   grep -q '"status":"completed"' "$run/summary.json" &&
   first=$(grep -o '"step":1,"loss":[0-9.]*' "$run/log.jsonl" | cut -d: -f3) &&
   awk -v l="$first" 'BEGIN {exit !(l > 9.5 && l < 11.2)}' && grep -q '"val_loss"' "$run/log.jsonl"; then
  ok "trainer: 3 steps on the fixture shards, vocab 32000, first loss $first (ln 32000 = 10.37), validation ran"
else bad "trainer on the fixture shards: $(tail -2 "$tmp/train.out")"; fi

echo "corpus_test: $passed passed, $fail failed"
[ $fail = 0 ]
