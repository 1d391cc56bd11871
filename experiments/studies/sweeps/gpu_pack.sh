#!/usr/bin/env bash
# On the lent GPU machine: what a sweep has written so far, without its
# checkpoints (a 120m run's is 1.6 GB; a call brings back files of 16 MiB at
# most), packed into $OUT/sweeps.tgz for the call to bring back: every
# point's log.jsonl, summary.json, config, train.out / train.err and
# sweep_args, and the CSVs.  Run it at the end of every call that polls a
# sweep running in the background (the machine, and what it holds, can go
# back between calls); untar the file into experiments/runs/sweeps/ here,
# and `sweep CFG --publish` draws and publishes without running anything.
#   bash experiments/studies/sweeps/gpu_pack.sh [STUDY ...]   (default: all)
set -uo pipefail
cd experiments/runs/sweeps 2>/dev/null || { echo "gpu_pack: no sweeps yet"; exit 0; }
if [ -z "${OUT:-}" ]; then
  echo "gpu_pack: \$OUT is not set (run it on the GPU machine, through the device tool)" >&2
  exit 2
fi
studies=("$@")
[ ${#studies[@]} -eq 0 ] && studies=(*/)
for s in "${studies[@]}"; do
  if [ ! -d "$s" ]; then
    echo "gpu_pack: no study $s in experiments/runs/sweeps" >&2
    exit 2
  fi
done
find "${studies[@]}" -type f \( -name log.jsonl -o -name summary.json -o -name config.cfg \
  -o -name 'train.out' -o -name 'train.err' -o -name sweep_args -o -name '*.csv' \
  -o -name grid.txt \) -size -8M -print0 | tar czf "$OUT/sweeps.tgz" --null -T -
echo "gpu_pack: $(tar tzf "$OUT/sweeps.tgz" | grep -c summary.json) points with a summary.json in \$OUT/sweeps.tgz ($(du -h "$OUT/sweeps.tgz" | cut -f1))"
