#!/usr/bin/env bash
# Cuts the corpus's inputs (data/corpus/inputs/, fetched by build_corpus.sh)
# into parts small enough to be carried to the GPU machine, which reaches no
# registry and takes at most 64 MiB of files per call, working tree included:
# data/corpus/parts/<file>.part-aa, -ab, ... of at most PART_MIB MiB each
# (default: what 64 MiB leaves beside this checkout's tracked files, less 1.5
# MiB of slack; a fixed 42 stopped fitting once the tracked tree passed 22
# MiB), with their sha256 in data/corpus/parts/MANIFEST.  Prints which
# parts to carry in which call (at most PART_MIB MiB a call) and the command;
# gpu_prepare.sh puts them back together there.  Idempotent.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
. "$here/corpus_paths.sh"
root="$(cd "$here/../.." && pwd)"
tracked_bytes=$(git -C "$root" ls-files -z | (cd "$root" && xargs -0 stat -c %s 2>/dev/null) |
  awk '{ s += $1 } END { print s + 0 }')
part_mib="${PART_MIB:-$(awk -v t="$tracked_bytes" 'BEGIN { printf "%d", 64 - 1.5 - t / 1048576 }')}"
if ! [[ "$part_mib" =~ ^[1-9][0-9]*$ ]] || [ "$part_mib" -gt 60 ]; then
  echo "pack_for_gpu: PART_MIB must be an integer in 1..60, got '$part_mib'" >&2
  exit 2
fi

rm -rf "$parts.tmp"
mkdir -p "$parts.tmp"
while read -r file sum _; do
  if [ ! -f "$inputs/$file" ] || [ "$(sha256sum "$inputs/$file" | cut -d' ' -f1)" != "$sum" ]; then
    echo "pack_for_gpu: $inputs/$file missing or not the pinned file; run experiments/data/build_corpus.sh" >&2
    rm -rf "$parts.tmp"
    exit 2
  fi
  split -b "${part_mib}M" "$inputs/$file" "$parts.tmp/$file.part-"
done < <(grep -v '^#' "$here/inputs.txt")
(cd "$parts.tmp" && sha256sum -- *.part-* >MANIFEST)
rm -rf "$parts"
mv "$parts.tmp" "$parts"

# The carry plan: first-fit decreasing, at most part_mib MiB a call.
echo "pack_for_gpu: $(grep -c . "$parts/MANIFEST") parts of at most $part_mib MiB in $parts; on the GPU machine, in every call:"
echo "  command: bash experiments/data/gpu_prepare.sh"
while read -r _ name; do echo "$(stat -c %s "$parts/$name") $name"; done <"$parts/MANIFEST" | sort -k1,1nr -k2 |
  awk -v cap=$((part_mib * 1048576)) '
    { for (c = 1; c <= n && used[c] + $1 > cap; c++) ; if (c > n) n = c
      used[c] += $1; list[c] = list[c] " data/corpus/parts/" $2 }
    END { for (c = 1; c <= n; c++) printf "  call %d carries: data/corpus/parts/MANIFEST%s\n", c, list[c] }'
